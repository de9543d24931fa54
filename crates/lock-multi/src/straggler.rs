//! Node calls still running, per lock name, owner field and node.
//!
//! A composite never drops a call to a node before it ends: a dropped call may still reach the
//! node (a request already written to the connection), or may never be sent, so what the node
//! holds would be unknown, and a later call of the same owner could land before it. An undo
//! landing after the owner's next grant there deletes that grant; a late acquire landing after
//! its undo leaves a hold nobody counts. So every call runs to its end, and is registered here
//! for as long as it may still be running after the step that issued it stopped waiting for it:
//! from the moment it is handed to a task of its own (see [`crate::steps`]: a call the step
//! polls to its end is never registered) until it ends. The composite's decision waits for it
//! only up to the per-node timeout; the call itself goes on.
//!
//! A later call of the same owner on the same lock and node first waits for the calls before
//! it there ([`NodeCalls::late`], [`LateRequests::finished`]), so each node sees one owner's
//! calls on a lock in the order they were issued. Its wait is bounded: an acquire or a release
//! whose earlier calls are still running after the per-node timeout is not sent at all (that
//! node counts as failed for it), and a cleanup waits much longer and is sent once they end,
//! whether or not anyone still waits for its answer. Either way nothing overtakes.
//!
//! This also covers the acquire requests still running when a quorum granted: they finish in
//! their tasks, and a release right after the grant reaches a late node after its grant.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

/// One running call as seen by the calls after it.
struct Running {
    id: u64,
    owner: Arc<str>,
    node: usize,
    ended: Arc<Ended>,
}

/// Whether a registered call ended, and the wake-up of the calls waiting for it. A flag and a
/// `Notify` rather than a `watch` channel: a `watch` send wakes through eight `Notify`s picked
/// by a hash, about a tenth of RedLock's client work per cycle beside this.
#[derive(Default)]
struct Ended {
    ended: AtomicBool,
    notify: Notify,
}

impl Ended {
    fn is_set(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Marks the call ended and wakes every call waiting for it.
    fn set(&self) {
        self.ended.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Until the call ended.
    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the flag is read: a `set` in between still wakes it.
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

/// Per lock name: the calls still running. Hashed with foldhash, seeded per map (names come
/// from the application): SipHash cost RedLock a few percent of its client work per cycle.
type ByName = HashMap<Arc<str>, Vec<Running>, foldhash::quality::RandomState>;

/// The node calls of one composite still running.
#[derive(Default)]
pub(crate) struct NodeCalls {
    running: Mutex<ByName>,
    /// How many calls are registered (see [`NodeCalls::any`]).
    count: AtomicUsize,
    next_id: AtomicU64,
}

/// The earlier calls on one node that a call must wait for; owned, so that the wait can run in
/// a task of its own.
pub(crate) struct LateRequests {
    calls: Vec<Arc<Ended>>,
}

impl LateRequests {
    /// Waits until every earlier call ended, or until `deadline`. Returns whether they all
    /// ended.
    pub(crate) async fn finished(self, deadline: Instant) -> bool {
        for call in self.calls {
            // Set when the call's entry is dropped: also when its task died with its runtime.
            if tokio::time::timeout_at(deadline, call.wait())
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }
}

/// A registered call: held by the task that runs it, and dropped when the call ends (also when
/// the task dies with its runtime), which tells the calls after it and forgets it.
pub(crate) struct CallEntry {
    registry: Arc<NodeCalls>,
    name: Arc<str>,
    id: u64,
    ended: Arc<Ended>,
}

impl NodeCalls {
    /// Registers a call of `owner` on `name` to `node` that a step stops polling while it
    /// runs (see [`crate::steps`]), until the returned entry is dropped.
    pub(crate) fn register(
        self: &Arc<Self>,
        name: &Arc<str>,
        owner: &Arc<str>,
        node: usize,
    ) -> CallEntry {
        let ended = Arc::new(Ended::default());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut map = self.lock();
        map.entry(Arc::clone(name)).or_default().push(Running {
            id,
            owner: Arc::clone(owner),
            node,
            ended: Arc::clone(&ended),
        });
        self.count.fetch_add(1, Ordering::AcqRel);
        drop(map);
        CallEntry {
            registry: Arc::clone(self),
            name: Arc::clone(name),
            id,
            ended,
        }
    }

    /// Whether any call is running at all: one atomic load, so the common case costs no lock.
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// What a step on `node` for these `(name, owner)` locks that is not itself registered (a
    /// renewal) has to wait for: the calls registered so far still running there. `None` when
    /// there are none. One lock of the registry for the whole list (a renewal batch can hold
    /// thousands).
    pub(crate) fn late<'a>(
        &self,
        locks: impl IntoIterator<Item = (&'a str, &'a str)>,
        node: usize,
    ) -> Option<LateRequests> {
        if !self.any() {
            return None;
        }
        let map = self.lock();
        let mut calls = Vec::new();
        for (name, owner) in locks {
            if let Some(running) = map.get(name) {
                calls.extend(late_among(running, owner, node));
            }
        }
        (!calls.is_empty()).then_some(LateRequests { calls })
    }

    /// How many lock names still have calls running (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ByName> {
        // The map stays consistent across a panic (every change is one call), so a poisoned
        // lock is still usable.
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The calls of `owner` on `node` among `running` that have not ended.
fn late_among(running: &[Running], owner: &str, node: usize) -> Vec<Arc<Ended>> {
    running
        .iter()
        .filter(|call| call.node == node && &*call.owner == owner && !call.ended.is_set())
        .map(|call| Arc::clone(&call.ended))
        .collect()
}

impl Drop for CallEntry {
    fn drop(&mut self) {
        self.ended.set();
        let mut map = self.registry.lock();
        if let Some(running) = map.get_mut(&self.name) {
            running.retain(|call| call.id != self.id);
            if running.is_empty() {
                map.remove(&self.name);
            }
        }
        drop(map);
        self.registry.count.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn arc(text: &str) -> Arc<str> {
        Arc::from(text)
    }

    /// A later call waits for the running calls of the same owner on the same lock and node,
    /// and only for those; a wait already under way is woken when the call ends.
    #[tokio::test]
    async fn a_later_call_waits_for_the_running_calls_before_it_on_its_node() {
        let registry = Arc::new(NodeCalls::default());
        let (name, owner) = (arc("orders"), arc("client:1"));
        assert!(registry.late([("orders", "client:1")], 0).is_none());
        let entry = registry.register(&name, &owner, 0);
        assert!(registry.any());
        // Another node, another owner, another lock: nothing to wait for.
        assert!(registry.late([("orders", "client:1")], 1).is_none());
        assert!(registry.late([("orders", "client:2")], 0).is_none());
        assert!(registry.late([("invoices", "client:1")], 0).is_none());
        // Still running: the wait ends at its deadline, unfinished.
        let soon = Instant::now() + Duration::from_millis(20);
        let late = registry.late([("orders", "client:1")], 0).unwrap();
        assert!(!late.finished(soon).await);
        // A wait under way is woken by the end of the call.
        let late = registry.late([("orders", "client:1")], 0).unwrap();
        let waiting = tokio::spawn(late.finished(Instant::now() + Duration::from_secs(5)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(entry);
        assert!(waiting.await.unwrap(), "woken when the call ended");
        assert!(!registry.any());
        assert_eq!(registry.len(), 0);
        assert!(registry.late([("orders", "client:1")], 0).is_none());
    }
}

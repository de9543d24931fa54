//! Acquire requests still running after the attempt was decided.
//!
//! A composite grants as soon as a quorum of nodes has granted, so a slow node costs nothing.
//! The requests to the nodes that have not answered yet are not dropped: dropping one could
//! cancel it before it was sent, and the lock would then live on fewer nodes than the ones that
//! were asked, so a later failure of one quorum node would make the release report an unknown
//! outcome although the lock was ours. Instead they finish in a background task, and a later
//! step that must see their effect on a node (release, abandon) waits for that node's request
//! first, up to that request's timeout: a release sent before the late grant applied would
//! leave that grant behind until its lease ends. Only the late nodes wait; the others are
//! released at once. The wait and the call on a late node run in a task of their own, so a
//! release cancelled by its caller still reaches that node.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use tokio::time::Instant;

/// The nodes of one batch whose requests have not answered yet.
type PendingNodes = Vec<usize>;

/// One batch as seen by the steps that wait for it.
struct Waitable {
    owner: Arc<str>,
    pending: watch::Receiver<PendingNodes>,
    /// When every request of the batch has timed out at the latest. Waits end there even if
    /// the task is never polled again (its runtime idle but alive).
    deadline: Instant,
}

/// Per lock name: the batches still running.
type Running = HashMap<Arc<str>, Vec<Waitable>>;

/// The acquire requests of each lock name still running in the background.
#[derive(Default)]
pub(crate) struct Stragglers {
    running: Mutex<Running>,
    /// How many batches are registered (see [`Stragglers::any`]).
    batches: AtomicUsize,
}

/// The late requests on one node that a step must wait for; owned, so that the wait can run in
/// a task of its own.
pub(crate) struct LateRequests {
    node: usize,
    batches: Vec<(watch::Receiver<PendingNodes>, Instant)>,
}

impl LateRequests {
    /// Resolves once each request answered, or at its deadline (its per-node timeout).
    pub(crate) async fn finished(self) {
        let node = self.node;
        for (mut batch, deadline) in self.batches {
            // An error means the sender is gone: the batch is over either way.
            let answered = batch.wait_for(|pending| !pending.contains(&node));
            let _ = tokio::time::timeout_at(deadline, answered).await;
        }
    }
}

/// One background batch: reports each node's answer, and on drop (also when its task dies with
/// its runtime) marks the whole batch finished and forgets it.
pub(crate) struct Batch {
    registry: Arc<Stragglers>,
    name: Arc<str>,
    pending: watch::Sender<PendingNodes>,
}

impl Stragglers {
    /// Registers a batch of requests for `name` and `owner` still running on `nodes`, each of
    /// which ends by `deadline` (its timeout) when polled.
    pub(crate) fn start(
        self: &Arc<Self>,
        name: Arc<str>,
        owner: Arc<str>,
        nodes: PendingNodes,
        deadline: Instant,
    ) -> Batch {
        let (pending, receiver) = watch::channel(nodes);
        self.batches.fetch_add(1, Ordering::AcqRel);
        self.lock()
            .entry(Arc::clone(&name))
            .or_default()
            .push(Waitable {
                owner,
                pending: receiver,
                deadline,
            });
        Batch {
            registry: Arc::clone(self),
            name,
            pending,
        }
    }

    /// Whether any batch is running at all: one atomic load, so the common case (every node
    /// answered before the attempt was decided) costs no lock.
    pub(crate) fn any(&self) -> bool {
        self.batches.load(Ordering::Acquire) > 0
    }

    /// What a step on `node` for these `(name, owner)` locks has to wait for: the batches
    /// registered so far that still have a request running there. `None` when there are none.
    /// One lock of the registry for the whole list (a renewal batch can hold thousands).
    pub(crate) fn late<'a>(
        &self,
        locks: impl IntoIterator<Item = (&'a str, &'a str)>,
        node: usize,
    ) -> Option<LateRequests> {
        if !self.any() {
            return None;
        }
        let map = self.lock();
        let mut batches = Vec::new();
        for (name, owner) in locks {
            let Some(running) = map.get(name) else {
                continue;
            };
            batches.extend(
                running
                    .iter()
                    .filter(|batch| {
                        &*batch.owner == owner && batch.pending.borrow().contains(&node)
                    })
                    .map(|batch| (batch.pending.clone(), batch.deadline)),
            );
        }
        (!batches.is_empty()).then_some(LateRequests { node, batches })
    }

    /// How many lock names still have requests running (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Running> {
        // The map stays consistent across a panic (every change is one call), so a poisoned
        // lock is still usable.
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Batch {
    /// `node` answered (or timed out): steps waiting for it may go on.
    pub(crate) fn answered(&self, node: usize) {
        self.pending
            .send_modify(|pending| pending.retain(|&n| n != node));
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.pending.send_replace(Vec::new());
        let mut map = self.registry.lock();
        if let Some(batches) = map.get_mut(&self.name) {
            batches.retain(|batch| !batch.pending.borrow().is_empty());
            if batches.is_empty() {
                map.remove(&self.name);
            }
        }
        drop(map);
        self.registry.batches.fetch_sub(1, Ordering::AcqRel);
    }
}

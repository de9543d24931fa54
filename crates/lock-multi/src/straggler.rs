//! Acquire requests still running after the attempt was decided.
//!
//! A composite grants as soon as a quorum of nodes has granted, so a slow node costs nothing.
//! The requests to the nodes that have not answered yet are not dropped: dropping one could
//! cancel it before it was sent, and the lock would then live on fewer nodes than the ones that
//! were asked, so a later failure of one quorum node would make the release report an unknown
//! outcome although the lock was ours. Instead they finish in a background task, and every
//! later step that must see their effect (release, abandon) waits for them first: a release
//! sent before the late grant applied would leave that grant behind until its lease ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

/// Per lock name: the owner and completion signal of each batch still running.
type Running = HashMap<Arc<str>, Vec<(Arc<str>, watch::Receiver<bool>)>>;

/// The acquire requests of each lock name still running in the background.
#[derive(Default)]
pub(crate) struct Stragglers {
    running: Mutex<Running>,
}

/// Marks one background batch of requests as finished when dropped, also when its task dies
/// with its runtime (the sender is dropped then, which waiters see the same way).
pub(crate) struct Finished {
    registry: Arc<Stragglers>,
    name: Arc<str>,
    done: watch::Sender<bool>,
}

impl Stragglers {
    /// Registers a batch of requests for `name` and `owner`; the batch counts as running until
    /// the returned value is dropped.
    pub(crate) fn start(self: &Arc<Self>, name: Arc<str>, owner: Arc<str>) -> Finished {
        let (done, receiver) = watch::channel(false);
        self.lock()
            .entry(Arc::clone(&name))
            .or_default()
            .push((owner, receiver));
        Finished {
            registry: Arc::clone(self),
            name,
            done,
        }
    }

    /// Waits until every batch registered for `name` and `owner` before this call has finished.
    /// Each batch is bounded by its per-node timeout, so this is too.
    pub(crate) async fn wait(&self, name: &str, owner: &str) {
        let running: Vec<watch::Receiver<bool>> = {
            let map = self.lock();
            let Some(batches) = map.get(name) else {
                return;
            };
            batches
                .iter()
                .filter(|(batch_owner, _)| &**batch_owner == owner)
                .map(|(_, batch)| batch.clone())
                .collect()
        };
        for mut batch in running {
            // An error means the sender is gone: the batch is over either way.
            let _ = batch.wait_for(|done| *done).await;
        }
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

impl Drop for Finished {
    fn drop(&mut self) {
        self.done.send_replace(true);
        let mut map = self.registry.lock();
        if let Some(batches) = map.get_mut(&self.name) {
            batches.retain(|(_, batch)| !*batch.borrow());
            if batches.is_empty() {
                map.remove(&self.name);
            }
        }
    }
}

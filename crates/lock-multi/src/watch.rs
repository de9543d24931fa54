//! Release notifications for a composite: one forwarding task per watched name relays every
//! node's releases into the composite's own [`ReleaseHub`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use lock_core::error::QuorumError;
use lock_core::{DynLockBackend, Error, ReleaseHub, ReleaseWatch, Result};
use tokio::task::AbortHandle;

use crate::fanout::{on_all, partition};

/// The forwarding tasks of one composite, by topic id.
#[derive(Clone, Default)]
pub(crate) struct Forwarders {
    tasks: Arc<Mutex<HashMap<u64, AbortHandle>>>,
}

impl Forwarders {
    /// The composite's hub: when the last local waiter of a name goes away, its forwarding task
    /// stops, which drops the node watches and so unsubscribes on every node.
    pub(crate) fn hub(&self) -> ReleaseHub {
        let tasks = self.tasks.clone();
        ReleaseHub::with_idle_hook(move |_name, topic_id| {
            let task = lock(&tasks).remove(&topic_id);
            if let Some(task) = task {
                task.abort();
            }
        })
    }

    /// Subscribes to `name` on every node and starts relaying their releases. Nodes that fail
    /// to subscribe are skipped (waiters still wake on their TTL-capped timers); it fails only
    /// when no node could subscribe.
    pub(crate) async fn subscribe(
        &self,
        hub: &ReleaseHub,
        nodes: &[Arc<dyn DynLockBackend>],
        name: &str,
        topic_id: u64,
        timeout: Duration,
    ) -> Result<()> {
        let results = on_all(nodes, timeout, |node| node.watch_releases(name)).await;
        let (watches, failures) = partition(results);
        if watches.is_empty() {
            return Err(Error::Quorum(QuorumError::new(
                "watch_releases",
                0,
                1,
                nodes.len(),
                failures,
            )));
        }
        for failure in &failures {
            tracing::warn!(error = %failure.error, node = failure.node, name, "no release notifications from a node; its releases are noticed by timer");
        }
        let hub = hub.clone();
        let name = name.to_owned();
        let task = tokio::spawn(async move {
            join_all(watches.iter().map(|(_, watch)| relay(watch, &hub, &name))).await;
        });
        lock(&self.tasks).insert(topic_id, task.abort_handle());
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.tasks).len()
    }
}

/// Relays one node's releases; a node without notifications (polling) nudges a waiter at its
/// polling interval instead, so it re-checks.
async fn relay(watch: &ReleaseWatch, hub: &ReleaseHub, name: &str) {
    loop {
        match watch.poll_interval() {
            Some(every) => tokio::time::sleep(every).await,
            None => watch.wait_released().await,
        }
        hub.notify_released(name);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

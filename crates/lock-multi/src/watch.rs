//! Release notifications for a composite: one forwarding task per watched name relays every
//! node's releases into the composite's own [`ReleaseHub`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use lock_core::error::{NodeFailure, QuorumError};
use lock_core::{DynLockBackend, Error, ReleaseHub, ReleaseWatch, Result};
use tokio::task::AbortHandle;

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

    /// Subscribes to `name` on every node and starts relaying their releases.
    ///
    /// Returns once `enough` nodes have subscribed (chosen by the caller so that a holder's
    /// release reaches at least one of them), or when every node has answered; slower nodes keep subscribing in the
    /// relay task, so a dead node does not hold up the waiter. Nodes that fail to subscribe are
    /// skipped (waiters still wake on their TTL-capped timers); it fails only when no node could
    /// subscribe.
    pub(crate) async fn subscribe(
        &self,
        hub: &ReleaseHub,
        nodes: &[Arc<dyn DynLockBackend>],
        name: &str,
        topic_id: u64,
        enough: usize,
        timeout: Duration,
    ) -> Result<()> {
        let name: Arc<str> = Arc::from(name);
        let mut pending: FuturesUnordered<_> = nodes
            .iter()
            .enumerate()
            .map(|(index, node)| {
                let node = node.clone();
                let name = name.clone();
                async move {
                    let subscribed = tokio::time::timeout(timeout, node.watch_releases(&name))
                        .await
                        .unwrap_or(Err(Error::Timeout { after: timeout }));
                    (index, subscribed)
                }
            })
            .collect();
        let mut watches = Vec::new();
        let mut failures = Vec::new();
        while watches.len() < enough {
            match pending.next().await {
                Some((_, Ok(watch))) => watches.push(watch),
                Some((node, Err(error))) => failures.push(NodeFailure::new(node, error)),
                None => break,
            }
        }
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
            warn_unsubscribed(failure.node, &failure.error, &name);
        }
        let hub = hub.clone();
        let task = tokio::spawn(async move {
            let mut relays: FuturesUnordered<_> = watches
                .into_iter()
                .map(|watch| relay(watch, hub.clone(), name.clone()))
                .collect();
            loop {
                tokio::select! {
                    Some((node, subscribed)) = pending.next(), if !pending.is_empty() => {
                        match subscribed {
                            Ok(watch) => relays.push(relay(watch, hub.clone(), name.clone())),
                            Err(error) => warn_unsubscribed(node, &error, &name),
                        }
                    }
                    // Relays run until the task is aborted; polling them here drives them.
                    _ = relays.next(), if !relays.is_empty() => {}
                    else => std::future::pending::<()>().await,
                }
            }
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
async fn relay(watch: ReleaseWatch, hub: ReleaseHub, name: Arc<str>) {
    loop {
        match watch.poll_interval() {
            Some(every) => tokio::time::sleep(every).await,
            None => watch.wait_released().await,
        }
        hub.notify_released(&name);
    }
}

fn warn_unsubscribed(node: usize, error: &Error, name: &str) {
    tracing::warn!(%error, node, name, "no release notifications from a node; its releases are noticed by timer");
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

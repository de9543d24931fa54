//! The command connection, replaced after a call times out.
//!
//! A multiplexed connection matches replies to requests by order. When a request times out
//! because its reply was **lost** (not just late), every later reply on that connection would be
//! handed to the request before it: the next caller waits forever, and two concurrent callers
//! can receive each other's replies. A late reply is harmless (order is kept), but the two
//! cannot be told apart, so after any timeout the connection is dropped and the next call opens
//! a new one. Failures are rare, reconnecting is cheap, and a wrong reply to a lock script is
//! not an option.
//!
//! The replaced connection is kept for **cleanup** calls (`abandon` after an acquire or release
//! of unknown outcome): on it the cleanup runs after the call it cleans up, whereas on a new
//! connection it could overtake a request still queued on the old one (a paused server serves
//! its connections in no set order) and leave the late grant in place.

use std::sync::Mutex;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

pub(crate) struct CommandConnection {
    client: redis::Client,
    config: ConnectionManagerConfig,
    current: Mutex<Current>,
}

struct Current {
    /// Bumped at each replacement, so concurrent timeouts on one connection replace it once.
    generation: u64,
    manager: ConnectionManager,
    /// The connection replaced last and when, for the cleanup call that follows a timeout.
    replaced: Option<(ConnectionManager, std::time::Instant)>,
}

/// A replaced connection serves a cleanup only this soon after the timeout: the cleanup follows
/// the timed-out call at once, and a later, unrelated cleanup is better off on a fresh connection.
const CLEANUP_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);

/// A handle on the connection for one call, and the generation it belongs to (`None` for the
/// replaced connection, which is never replaced again).
pub(crate) struct Lease {
    pub manager: ConnectionManager,
    pub generation: Option<u64>,
}

impl CommandConnection {
    pub(crate) fn new(
        client: redis::Client,
        config: ConnectionManagerConfig,
        manager: ConnectionManager,
    ) -> Self {
        CommandConnection {
            client,
            config,
            current: Mutex::new(Current {
                generation: 0,
                manager,
                replaced: None,
            }),
        }
    }

    pub(crate) fn get(&self) -> Lease {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        Lease {
            manager: current.manager.clone(),
            generation: Some(current.generation),
        }
    }

    /// The connection for a cleanup call: the one replaced last, once (see the module docs);
    /// after that it may be out of step for good, so later calls use the current one.
    pub(crate) fn for_cleanup(&self) -> Lease {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        match current.replaced.take() {
            Some((replaced, at)) if at.elapsed() < CLEANUP_WINDOW => Lease {
                manager: replaced,
                generation: None,
            },
            Some(_) | None => Lease {
                manager: current.manager.clone(),
                generation: Some(current.generation),
            },
        }
    }

    /// Replaces the connection a call of `generation` timed out on (once per generation). The
    /// new one connects on its first use; calls still in flight on the old one fail or finish
    /// on their own.
    pub(crate) fn replace_after_timeout(&self, generation: Option<u64>) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if generation != Some(current.generation) {
            return;
        }
        match ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone()) {
            Ok(manager) => {
                current.generation += 1;
                let old = std::mem::replace(&mut current.manager, manager);
                current.replaced = Some((old, std::time::Instant::now()));
                tracing::debug!(
                    generation = current.generation,
                    "replaced the command connection after a timeout"
                );
            }
            Err(error) => {
                tracing::warn!(%error, "could not replace the command connection after a timeout");
            }
        }
    }
}

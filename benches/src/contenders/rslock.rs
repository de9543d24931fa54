//! The peer crate `rslock` (Redlock), on a single node or (W4) over several independent nodes.

use std::time::Duration;

use rslock::LockManager;

use super::{BenchError, LEASE};

/// rslock's default retry count (`LockManager::new` sets 3; the constant is private).
const DEFAULT_RETRY_COUNT: u32 = 3;

/// One lock manager over its nodes (rslock keeps one multiplexed connection per node).
#[derive(Clone)]
pub struct Rslock {
    manager: LockManager,
}

impl Rslock {
    /// A manager for the node at `url`; rslock connects on first use.
    pub fn new(url: &str) -> Self {
        Self::over(&[url.to_owned()])
    }

    /// A Redlock manager over the independent nodes at `urls` (quorum `n / 2 + 1`); rslock
    /// connects on first use.
    pub fn over(urls: &[String]) -> Self {
        Rslock {
            manager: LockManager::new(urls.to_vec()),
        }
    }

    /// A manager for the node at `url` that retries after a random delay in `0..delay` (whole
    /// milliseconds; rslock's default is 200 ms) instead of its default, with the default retry
    /// count (3 attempts per `lock`, then `acquire` starts over at once).
    pub fn with_retry_delay(url: &str, delay: Duration) -> Self {
        let mut manager = LockManager::new(vec![url.to_owned()]);
        manager.set_retry(DEFAULT_RETRY_COUNT, delay);
        Rslock { manager }
    }

    /// Takes the lock on `key` (TTL [`LEASE`]), retrying until it is granted: rslock's
    /// `acquire_no_guard`.
    pub async fn acquire(&self, key: &str) -> Result<rslock::Lock, BenchError> {
        Ok(self.manager.acquire_no_guard(key, LEASE).await?)
    }

    /// Gives `lock` back (best effort, as rslock's unlock always is).
    pub async fn unlock(&self, lock: &rslock::Lock) {
        self.manager.unlock(lock).await;
    }

    /// One `lock` + `unlock`. rslock's unlock is best effort and reports nothing.
    pub async fn lock_unlock(&self, key: &str) -> Result<(), BenchError> {
        let lock = self.manager.lock(key, LEASE).await?;
        self.manager.unlock(&lock).await;
        Ok(())
    }
}

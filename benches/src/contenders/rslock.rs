//! The peer crate `rslock` (Redlock), on a single node or (W4) over several independent nodes.

use rslock::LockManager;

use super::{BenchError, LEASE};

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

    /// One `lock` + `unlock`. rslock's unlock is best effort and reports nothing.
    pub async fn lock_unlock(&self, key: &str) -> Result<(), BenchError> {
        let lock = self.manager.lock(key, LEASE).await?;
        self.manager.unlock(&lock).await;
        Ok(())
    }
}

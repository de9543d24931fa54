//! The peer crate `rslock` (Redlock) on a single node.

use rslock::LockManager;

use super::{BenchError, LEASE};

/// One lock manager over one node (rslock keeps one multiplexed connection per node).
#[derive(Clone)]
pub struct Rslock {
    manager: LockManager,
}

impl Rslock {
    /// A manager for the node at `url`; rslock connects on first use.
    pub fn new(url: &str) -> Self {
        Rslock {
            manager: LockManager::new(vec![url.to_owned()]),
        }
    }

    /// One `lock` + `unlock`. rslock's unlock is best effort and reports nothing.
    pub async fn lock_unlock(&self, key: &str) -> Result<(), BenchError> {
        let lock = self.manager.lock(key, LEASE).await?;
        self.manager.unlock(&lock).await;
        Ok(())
    }
}

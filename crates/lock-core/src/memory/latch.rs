//! The in-memory countdown latches: one count per name in the store's tables, announced on the
//! hub under a name of their own.

use crate::error::Result;
use crate::latch_backend::LatchBackend;
use crate::memory::MemoryBackend;
use crate::notify::ReleaseWatch;

/// The hub topic of the latch `name`.
fn topic(name: &str) -> String {
    format!("latch:{name}")
}

impl LatchBackend for MemoryBackend {
    async fn try_set_count(&self, name: &str, count: u64) -> Result<bool> {
        let mut tables = self.tables();
        if tables.latches.contains_key(name) {
            return Ok(false);
        }
        tables.latches.insert(name.to_owned(), count);
        Ok(true)
    }

    async fn count_down(&self, name: &str) -> Result<u64> {
        let mut tables = self.tables();
        let Some(count) = tables.latches.get_mut(name) else {
            return Ok(0);
        };
        *count = count.saturating_sub(1);
        let left = *count;
        if left > 0 {
            return Ok(left);
        }
        tables.latches.remove(name);
        drop(tables);
        self.store.hub.wake_watchers(&topic(name));
        Ok(0)
    }

    async fn latch_count(&self, name: &str) -> Result<u64> {
        Ok(self.tables().latches.get(name).copied().unwrap_or(0))
    }

    async fn delete_latch(&self, name: &str) -> Result<bool> {
        let existed = self.tables().latches.remove(name).is_some();
        if existed {
            self.store.hub.wake_watchers(&topic(name));
        }
        Ok(existed)
    }

    async fn watch_latch(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.store.hub.watch(&topic(name)))
    }
}

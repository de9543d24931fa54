//! The in-memory semaphores: one count per name in the store's tables, announced on the hub
//! under a name of their own, as on Redis, where a semaphore's channel is not its lock's.

use crate::error::{Error, Result};
use crate::memory::MemoryBackend;
use crate::notify::ReleaseWatch;
use crate::semaphore_backend::{PermitsTaken, SemaphoreBackend, SemaphoreState};

/// The hub topic of the semaphore `name`.
pub(super) fn topic(name: &str) -> String {
    format!("semaphore:{name}")
}

/// `count + delta`, or the error the store gives for a count out of range.
fn added(count: i64, delta: i64) -> Result<i64> {
    count
        .checked_add(delta)
        .ok_or_else(|| Error::invalid_options("the permit count would overflow"))
}

impl MemoryBackend {
    /// Announces `count` available permits of `name` to its waiters.
    pub(super) fn announce_permits(&self, name: &str, count: i64) {
        self.store.hub.notify_up_to(&topic(name), count);
    }
}

impl SemaphoreBackend for MemoryBackend {
    async fn try_take_permits(&self, name: &str, permits: u32) -> Result<PermitsTaken> {
        let mut tables = self.tables();
        let wanted = i64::from(permits);
        Ok(match tables.semaphores.get_mut(name) {
            Some(count) if *count >= wanted => {
                *count -= wanted;
                PermitsTaken::Taken { left: *count }
            }
            available => PermitsTaken::Short {
                available: available.map(|count| *count),
            },
        })
    }

    async fn return_permits(&self, name: &str, permits: u32) -> Result<i64> {
        let mut tables = self.tables();
        let count = tables.semaphores.entry(name.to_owned()).or_insert(0);
        *count = added(*count, i64::from(permits))?;
        let now = *count;
        drop(tables);
        self.announce_permits(name, now);
        Ok(now)
    }

    async fn try_set_permits(&self, name: &str, permits: u32) -> Result<bool> {
        let mut tables = self.tables();
        if tables.semaphores.contains_key(name) {
            return Ok(false);
        }
        tables
            .semaphores
            .insert(name.to_owned(), i64::from(permits));
        drop(tables);
        self.announce_permits(name, i64::from(permits));
        Ok(true)
    }

    async fn add_permits(&self, name: &str, delta: i64) -> Result<i64> {
        let mut tables = self.tables();
        let count = tables.semaphores.entry(name.to_owned()).or_insert(0);
        *count = added(*count, delta)?;
        let now = *count;
        drop(tables);
        self.announce_permits(name, now);
        Ok(now)
    }

    async fn drain_permits(&self, name: &str) -> Result<i64> {
        let mut tables = self.tables();
        Ok(tables
            .semaphores
            .get_mut(name)
            .map_or(0, |count| std::mem::replace(count, 0)))
    }

    async fn reset_permits(&self, name: &str, permits: i64) -> Result<Option<i64>> {
        let before = self.tables().semaphores.insert(name.to_owned(), permits);
        self.announce_permits(name, permits);
        Ok(before)
    }

    async fn delete_semaphore(&self, name: &str) -> Result<bool> {
        Ok(self.tables().semaphores.remove(name).is_some())
    }

    async fn permits_state(&self, name: &str) -> Result<SemaphoreState> {
        Ok(SemaphoreState::new(
            self.tables().semaphores.get(name).copied(),
        ))
    }

    async fn watch_permits(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.store.hub.watch(&topic(name)))
    }
}

//! [`SemaphoreBackend`] for [`PostgresBackend`]: one row of `distlock.semaphores` per name
//! (`sql/40-semaphore.sql`), each step one statement calling one function of the schema.
//!
//! Every step that raises the count announces the new count on the name's channel (the one
//! every family of the name shares), so [`watch_permits`](SemaphoreBackend::watch_permits) is
//! the name's ordinary watch.

use lock_core::{PermitsTaken, ReleaseWatch, Result, SemaphoreBackend, SemaphoreState};

use crate::backend::PostgresBackend;
use crate::key::LockKey;

const TAKE: &str = "SELECT taken, available FROM distlock.semaphore_take($1, $2)";
const ADD: &str = "SELECT distlock.semaphore_add($1, $2, $3)";
const SET: &str = "SELECT distlock.semaphore_set($1, $2, $3)";
const DRAIN: &str = "SELECT distlock.semaphore_drain($1)";
const RESET: &str = "SELECT distlock.semaphore_reset($1, $2, $3)";
const DELETE: &str = "SELECT distlock.semaphore_delete($1)";
const STATE: &str = "SELECT distlock.semaphore_state($1)";

impl PostgresBackend {
    /// `semaphore_add`: adds `delta` to the count of `name` (from 0 when absent), announced;
    /// the new count. Shared by `return_permits` and `add_permits`.
    async fn add_to_count(&self, name: &str, delta: i64) -> Result<i64> {
        let key = LockKey::of(name);
        let row = self
            .family_row(&key, ADD, &[&key.as_bytes(), &name.as_bytes(), &delta])
            .await?;
        Ok(row.get(0))
    }
}

impl SemaphoreBackend for PostgresBackend {
    async fn try_take_permits(&self, name: &str, permits: u32) -> Result<PermitsTaken> {
        let key = LockKey::of(name);
        let row = self
            .family_row(&key, TAKE, &[&key.as_bytes(), &i64::from(permits)])
            .await?;
        let available: Option<i64> = row.get(1);
        Ok(match (row.get::<_, bool>(0), available) {
            (true, Some(left)) => PermitsTaken::Taken { left },
            (true, None) => {
                return Err(lock_core::Error::Protocol(
                    "a take answered no count".into(),
                ));
            }
            (false, available) => PermitsTaken::Short { available },
        })
    }

    async fn return_permits(&self, name: &str, permits: u32) -> Result<i64> {
        self.add_to_count(name, i64::from(permits)).await
    }

    async fn try_set_permits(&self, name: &str, permits: u32) -> Result<bool> {
        let key = LockKey::of(name);
        let row = self
            .family_row(
                &key,
                SET,
                &[&key.as_bytes(), &name.as_bytes(), &i64::from(permits)],
            )
            .await?;
        Ok(row.get(0))
    }

    async fn add_permits(&self, name: &str, delta: i64) -> Result<i64> {
        self.add_to_count(name, delta).await
    }

    async fn drain_permits(&self, name: &str) -> Result<i64> {
        let key = LockKey::of(name);
        let row = self.family_row(&key, DRAIN, &[&key.as_bytes()]).await?;
        Ok(row.get(0))
    }

    async fn reset_permits(&self, name: &str, permits: i64) -> Result<Option<i64>> {
        let key = LockKey::of(name);
        let row = self
            .family_row(&key, RESET, &[&key.as_bytes(), &name.as_bytes(), &permits])
            .await?;
        Ok(row.get(0))
    }

    async fn delete_semaphore(&self, name: &str) -> Result<bool> {
        let key = LockKey::of(name);
        let row = self.family_row(&key, DELETE, &[&key.as_bytes()]).await?;
        Ok(row.get(0))
    }

    async fn permits_state(&self, name: &str) -> Result<SemaphoreState> {
        let key = LockKey::of(name);
        let row = self.family_row(&key, STATE, &[&key.as_bytes()]).await?;
        Ok(SemaphoreState::new(row.get(0)))
    }

    async fn watch_permits(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.watch_key(&LockKey::of(name)).await)
    }
}

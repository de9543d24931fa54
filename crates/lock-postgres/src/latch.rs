//! [`LatchBackend`] for [`PostgresBackend`]: one row per closed latch in `distlock.latches`,
//! each step one statement (`sql/60-latch.sql`), openings announced on the name's channel.

use lock_core::{Error, LatchBackend, ReleaseWatch, Result};
use tokio_postgres::Row;

use crate::backend::PostgresBackend;
use crate::key::LockKey;

// Counts are `u64` in the contract, beyond `bigint`: they travel as text and are `numeric` on
// the server.
const SET: &str = "SELECT distlock.latch_set($1, $2, $3::text::numeric)";
const COUNT_DOWN: &str = "SELECT distlock.latch_count_down($1)::text";
const COUNT: &str = "SELECT distlock.latch_count($1)::text";
const DELETE: &str = "SELECT distlock.latch_delete($1)";

/// The count in the first column of `row`, which the server sends as text.
fn count_of(row: &Row) -> Result<u64> {
    let text: String = row.get(0);
    text.parse()
        .map_err(|_| Error::Protocol(format!("a latch count that is no u64: {text}").into()))
}

impl LatchBackend for PostgresBackend {
    async fn try_set_count(&self, name: &str, count: u64) -> Result<bool> {
        let key = LockKey::of(name);
        let count = count.to_string();
        let row = self
            .family_row(&key, SET, &[&key.as_bytes(), &name.as_bytes(), &count])
            .await?;
        Ok(row.get(0))
    }

    async fn count_down(&self, name: &str) -> Result<u64> {
        let key = LockKey::of(name);
        let row = self
            .family_row(&key, COUNT_DOWN, &[&key.as_bytes()])
            .await?;
        count_of(&row)
    }

    async fn latch_count(&self, name: &str) -> Result<u64> {
        let key = LockKey::of(name);
        let row = self.family_row(&key, COUNT, &[&key.as_bytes()]).await?;
        count_of(&row)
    }

    async fn delete_latch(&self, name: &str) -> Result<bool> {
        let key = LockKey::of(name);
        let row = self.family_row(&key, DELETE, &[&key.as_bytes()]).await?;
        Ok(row.get(0))
    }

    async fn watch_latch(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.watch_key(&LockKey::of(name)).await)
    }
}

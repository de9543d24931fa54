//! `SemaphoreBackend` for [`RedisBackend`]: Redisson's `RSemaphore` layout, on the backend's
//! own connection and notification channels.

use lock_core::{PermitsTaken, ReleaseWatch, Result, SemaphoreBackend, SemaphoreState};

use crate::backend::redis_backend::RedisBackend;
use crate::kind::semaphore;
use crate::wire::keys;

impl SemaphoreBackend for RedisBackend {
    async fn try_take_permits(&self, name: &str, permits: u32) -> Result<PermitsTaken> {
        semaphore::try_take(self.calls(), name, permits).await
    }

    async fn return_permits(&self, name: &str, permits: u32) -> Result<i64> {
        semaphore::add(self.calls(), name, i64::from(permits)).await
    }

    async fn try_set_permits(&self, name: &str, permits: u32) -> Result<bool> {
        semaphore::try_set(self.calls(), name, permits).await
    }

    async fn add_permits(&self, name: &str, delta: i64) -> Result<i64> {
        semaphore::add(self.calls(), name, delta).await
    }

    async fn drain_permits(&self, name: &str) -> Result<i64> {
        semaphore::drain(self.calls(), name).await
    }

    async fn reset_permits(&self, name: &str, permits: i64) -> Result<Option<i64>> {
        semaphore::reset(self.calls(), name, permits).await
    }

    async fn delete_semaphore(&self, name: &str) -> Result<bool> {
        semaphore::delete(self.calls(), name).await
    }

    async fn permits_state(&self, name: &str) -> Result<SemaphoreState> {
        semaphore::state(self.calls(), name).await
    }

    async fn watch_permits(&self, name: &str) -> Result<ReleaseWatch> {
        self.notifications()
            .watch(&keys::semaphore_channel(name))
            .await
    }
}

//! `LatchBackend` for [`RedisBackend`]: Redisson's `RCountDownLatch` layout, on the backend's
//! own connection and notification channels.

use lock_core::{LatchBackend, ReleaseWatch, Result};

use crate::backend::redis_backend::RedisBackend;
use crate::kind::latch;
use crate::wire::keys;

impl LatchBackend for RedisBackend {
    async fn try_set_count(&self, name: &str, count: u64) -> Result<bool> {
        latch::try_set(self.calls(), name, count).await
    }

    async fn count_down(&self, name: &str) -> Result<u64> {
        latch::count_down(self.calls(), name).await
    }

    async fn latch_count(&self, name: &str) -> Result<u64> {
        latch::count(self.calls(), name).await
    }

    async fn delete_latch(&self, name: &str) -> Result<bool> {
        latch::delete(self.calls(), name).await
    }

    async fn watch_latch(&self, name: &str) -> Result<ReleaseWatch> {
        self.notifications().watch(&keys::latch_channel(name)).await
    }
}

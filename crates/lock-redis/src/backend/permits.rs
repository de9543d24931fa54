//! `LeasedSemaphoreBackend` for [`RedisBackend`]: Redisson's `RPermitExpirableSemaphore`
//! layout, its permit side ([`RedisPermitSide`]) on the backend's own connection and
//! notifications.

use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, LeasedSemaphoreBackend, LeasedState, LockBackend, LockState,
    ReleaseOutcome, ReleaseWatch, RenewOutcome, Renewal, Result,
};

use crate::backend::redis_backend::RedisBackend;
use crate::kind::permits;
use crate::wire::keys;

/// The permit side of a [`RedisBackend`]'s semaphores (see [`LeasedSemaphoreBackend`]): each
/// grant is one lease-bound permit. Made by [`LeasedSemaphoreBackend::permit_side`]; shares the
/// backend's connections and client id.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::PermitLocker;
/// use lock_redis::RedisBackend;
///
/// let permits = PermitLocker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
/// permits.try_set_permits("gpu", 2).await?;
/// let gpu = permits.acquire("gpu").await?;
/// gpu.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisPermitSide(RedisBackend);

impl LeasedSemaphoreBackend for RedisBackend {
    type Permits = RedisPermitSide;

    fn permit_side(&self) -> RedisPermitSide {
        RedisPermitSide(self.clone())
    }

    async fn leased_state(&self, name: &str) -> Result<LeasedState> {
        permits::state(self.calls(), name).await
    }
}

impl LockBackend for RedisPermitSide {
    fn client_id(&self) -> &str {
        self.0.client_id()
    }

    fn check_name(&self, name: &str) -> Result<()> {
        keys::check_name(name)
    }

    fn kind(&self) -> &'static str {
        "permit"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        permits::try_acquire(self.0.calls(), request).await
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        permits::release(self.0.calls(), name, owner_field, lease).await
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        permits::renew(self.0.calls(), renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        permits::abandon(self.0.calls(), name, owner_field, keep).await
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        permits::force_release(self.0.calls(), name).await
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        permits::inspect(self.0.calls(), name).await
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        self.0
            .notifications()
            .watch(&keys::semaphore_channel(name))
            .await
    }
}

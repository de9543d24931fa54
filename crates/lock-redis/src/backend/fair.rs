//! `FairBackend` for [`RedisBackend`]: Redisson's `RFairLock` layout, its fair side
//! ([`RedisFairSide`]) on the backend's own connection and notifications.

use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, FairBackend, FairState, LockBackend, LockState, ReleaseOutcome,
    ReleaseWatch, RenewOutcome, Renewal, Result,
};

use crate::backend::redis_backend::RedisBackend;
use crate::kind::{fair, reentrant};
use crate::wire::keys;

/// The fair side of a [`RedisBackend`]'s locks (see [`FairBackend`]): grants in arrival order,
/// over the same lock hashes as the reentrant lock. Made by [`FairBackend::fair_side`]; shares
/// the backend's connections and client id.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::{FairBackend, Locker};
/// use lock_redis::RedisBackend;
///
/// let backend = RedisBackend::connect("redis://127.0.0.1:6379/").await?;
/// let fair = Locker::new(backend.fair_side());
/// let turn = fair.lock("printer").await?; // waiters are served in the order they came
/// turn.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisFairSide(RedisBackend);

impl FairBackend for RedisBackend {
    type Fair = RedisFairSide;

    fn fair_side(&self) -> RedisFairSide {
        RedisFairSide(self.clone())
    }

    async fn fair_state(&self, name: &str) -> Result<FairState> {
        keys::check_name(name)?;
        fair::state(self.calls(), name).await
    }
}

impl LockBackend for RedisFairSide {
    fn client_id(&self) -> &str {
        self.0.client_id()
    }

    fn check_name(&self, name: &str) -> Result<()> {
        keys::check_name(name)
    }

    fn kind(&self) -> &'static str {
        "fair"
    }

    fn queues(&self) -> bool {
        true
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        fair::try_acquire(self.0.calls(), request).await
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        fair::release(self.0.calls(), name, owner_field, lease).await
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        reentrant::renew(self.0.calls(), renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        fair::abandon(self.0.calls(), name, owner_field, keep).await
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        fair::force_release(self.0.calls(), name).await
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        reentrant::inspect(self.0.calls(), name).await
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        self.0.notifications().watch(&keys::channel(name)).await
    }

    async fn watch_releases_of(&self, name: &str, owner_field: &str) -> Result<ReleaseWatch> {
        self.0
            .notifications()
            .watch(&keys::fair_waiter_channel(name, owner_field))
            .await
    }

    async fn leave_queue(&self, name: &str, owner_field: &str) -> Result<()> {
        fair::leave_queue(self.0.calls(), name, owner_field).await
    }
}

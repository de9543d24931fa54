//! `FairBackend` for [`RedisBackend`]: Redisson's `RFairLock` layout, its fair side
//! ([`RedisFairSide`]) on the backend's own connection and notifications.

use lock_core::{FairBackend, FairState, LockBackend, LockState, ReleaseWatch, Result};

use crate::backend::redis_backend::RedisBackend;
use crate::kind::fair::{self, Fair};
use crate::kind::family::family_lock_methods;
use crate::kind::reentrant;
use crate::wire::keys;

/// The fair side of a [`RedisBackend`]'s locks (see [`FairBackend`]): grants in arrival order,
/// over the same lock hashes as the reentrant lock. Made by [`FairBackend::fair_side`]; shares
/// the backend's connections and client id.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::Locker;
/// use lock_redis::RedisBackend;
///
/// // Applications reach the side through `Locker::fair`.
/// let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
/// let turn = locker.fair("printer")?.lock().await?; // waiters are served in the order they came
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
    family_lock_methods!(all, self, self.0, Fair);

    fn kind(&self) -> &'static str {
        "fair"
    }

    fn queues(&self) -> bool {
        true
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

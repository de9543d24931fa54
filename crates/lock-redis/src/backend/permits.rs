//! `PermitBackend` for [`RedisBackend`]: Redisson's `RPermitExpirableSemaphore`
//! layout, its permit side ([`RedisPermitSide`]) on the backend's own connection and
//! notifications.

use lock_core::{LockBackend, LockState, PermitBackend, PermitState, ReleaseWatch, Result};

use crate::backend::redis_backend::RedisBackend;
use crate::kind::family::family_lock_methods;
use crate::kind::permits::{self, Permits};
use crate::wire::keys;

/// The permit side of a [`RedisBackend`]'s semaphores (see [`PermitBackend`]): each
/// grant is one lease-bound permit. Made by [`PermitBackend::permit_side`]; shares the
/// backend's connections and client id.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::Locker;
/// use lock_redis::RedisBackend;
///
/// // Applications reach the side through `Locker::permits`.
/// let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
/// let gpus = locker.permits("gpu")?;
/// gpus.try_set_permits(2).await?;
/// let gpu = gpus.acquire().await?;
/// gpu.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisPermitSide(RedisBackend);

impl PermitBackend for RedisBackend {
    type Permits = RedisPermitSide;

    fn permit_side(&self) -> RedisPermitSide {
        RedisPermitSide(self.clone())
    }

    async fn permit_state(&self, name: &str) -> Result<PermitState> {
        permits::state(self.calls(), name).await
    }
}

impl LockBackend for RedisPermitSide {
    family_lock_methods!(all, self, self.0, Permits);

    fn kind(&self) -> &'static str {
        "permit"
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

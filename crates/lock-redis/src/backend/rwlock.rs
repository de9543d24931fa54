//! `ReadWriteBackend` for [`RedisBackend`]: Redisson's `RReadWriteLock` layout, its two sides
//! ([`RedisReadSide`], [`RedisWriteSide`]) on the backend's own connection and notifications.

use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, LockBackend, LockState, ReadWriteBackend, ReleaseOutcome,
    ReleaseWatch, RenewOutcome, Renewal, Result, RwState,
};

use crate::backend::redis_backend::RedisBackend;
use crate::kind::rwlock::{self, Side};
use crate::wire::keys;

/// The read side of a [`RedisBackend`]'s read-write locks (see [`ReadWriteBackend`]): many
/// readers per name. Made by [`ReadWriteBackend::read_side`]; shares the backend's
/// connections and client id.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::RwLocker;
/// use lock_redis::RedisBackend;
///
/// let locks = RwLocker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
/// let reading = locks.read("catalog").await?;
/// reading.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisReadSide(RedisBackend, Side);

/// The write side of a [`RedisBackend`]'s read-write locks (see [`ReadWriteBackend`]): one
/// writer per name. Made by [`ReadWriteBackend::write_side`].
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::RwLocker;
/// use lock_redis::RedisBackend;
///
/// let locks = RwLocker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
/// let writing = locks.write("catalog").await?;
/// writing.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisWriteSide(RedisBackend, Side);

impl ReadWriteBackend for RedisBackend {
    type Read = RedisReadSide;
    type Write = RedisWriteSide;

    fn read_side(&self) -> RedisReadSide {
        RedisReadSide(self.clone(), Side::Read)
    }

    fn write_side(&self) -> RedisWriteSide {
        RedisWriteSide(self.clone(), Side::Write { prefer: false })
    }

    fn preferring_write_side(&self) -> RedisWriteSide {
        RedisWriteSide(self.clone(), Side::Write { prefer: true })
    }

    async fn rw_state(&self, name: &str) -> Result<RwState> {
        rwlock::state(self.calls(), name).await
    }
}

/// One side's `LockBackend`, the same for both but for the side.
macro_rules! side_backend {
    ($side_type:ident, $kind:literal) => {
        impl LockBackend for $side_type {
            fn client_id(&self) -> &str {
                self.0.client_id()
            }

            fn check_name(&self, name: &str) -> Result<()> {
                keys::check_name(name)
            }

            fn kind(&self) -> &'static str {
                $kind
            }

            async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
                rwlock::try_acquire(self.0.calls(), self.1, request).await
            }

            async fn release(
                &self,
                name: &str,
                owner_field: &str,
                lease: Duration,
            ) -> Result<ReleaseOutcome> {
                rwlock::release(self.0.calls(), self.1, name, owner_field, lease).await
            }

            async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
                rwlock::renew(self.0.calls(), self.1, renewals).await
            }

            async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
                rwlock::abandon(self.0.calls(), self.1, name, owner_field, keep).await
            }

            async fn force_release(&self, name: &str) -> Result<bool> {
                rwlock::force_release(self.0.calls(), self.1, name).await
            }

            async fn inspect(&self, name: &str) -> Result<LockState> {
                rwlock::inspect(self.0.calls(), self.1, name).await
            }

            async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
                self.0.notifications().watch(&keys::rw_channel(name)).await
            }

            fn queues(&self) -> bool {
                self.1 == Side::Write { prefer: true }
            }

            async fn leave_queue(&self, name: &str, owner_field: &str) -> Result<()> {
                if !self.queues() {
                    return Ok(());
                }
                rwlock::leave_queue(self.0.calls(), name, owner_field).await
            }
        }
    };
}

side_backend!(RedisReadSide, "read");
side_backend!(RedisWriteSide, "write");

//! `ReadWriteBackend` for [`RedisBackend`]: Redisson's `RReadWriteLock` layout, its two sides
//! ([`RedisReadSide`], [`RedisWriteSide`]) on the backend's own connection and notifications.

use lock_core::{LockBackend, LockState, ReadWriteBackend, ReadWriteState, ReleaseWatch, Result};

use crate::backend::redis_backend::RedisBackend;
use crate::kind::family::family_lock_methods;
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
/// use lock_core::Locker;
/// use lock_redis::RedisBackend;
///
/// // Applications reach the side through `Locker::read_write`.
/// let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
/// let reading = locker.read_write("catalog")?.read().await?;
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
/// use lock_core::Locker;
/// use lock_redis::RedisBackend;
///
/// // Applications reach the side through `Locker::read_write`.
/// let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
/// let writing = locker.read_write("catalog")?.write().await?;
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

    async fn read_write_state(&self, name: &str) -> Result<ReadWriteState> {
        rwlock::state(self.calls(), name).await
    }
}

/// One side's `LockBackend`, the same for both but for the side.
macro_rules! side_backend {
    ($side_type:ident, $kind:literal) => {
        impl LockBackend for $side_type {
            family_lock_methods!(all, self, self.0, self.1);

            fn kind(&self) -> &'static str {
                $kind
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

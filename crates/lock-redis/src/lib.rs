//! Reentrant, watchdog-renewed, pub/sub-woken locks on one Redis or Valkey node, with the same
//! data layout as Redisson's `RLock`, so Rust and Java services can share a lock.
//!
//! | item | value |
//! |---|---|
//! | lock key | the lock name, a hash `{<client id>:<holder id> → hold count}` with PEXPIRE |
//! | release channel | `redisson_lock__channel:{<name>}`, message `0` |
//! | fencing counter | `redisson_lock_token:{<name>}` (INCR per grant, only when asked for) |
//!
//! All logic runs in Lua scripts sent with EVALSHA (reloaded on NOSCRIPT).
//!
//! # Example
//!
//! ```no_run
//! use lock_core::Locker;
//! use lock_redis::RedisBackend;
//!
//! # async fn demo() -> Result<(), lock_core::Error> {
//! let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
//! let guard = locker.lock("orders:42").await?;
//! tokio::select! {
//!     () = async { /* the critical section */ } => {}
//!     loss = guard.lost() => eprintln!("lease lost: {loss:?}"),
//! }
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

mod backend;
mod coalesce;
mod errors;
mod fast;
pub mod keys;
mod link;
mod pubsub;

pub use backend::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_POLL_INTERVAL, LockKind,
    NotificationMode, RedisBackend, RedisBackendBuilder,
};

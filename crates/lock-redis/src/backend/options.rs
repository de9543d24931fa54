//! The settings of a backend: which lock it keeps, how waiters learn of releases, and the
//! default timeouts.

use std::time::Duration;

/// Default per-call timeout, as Redisson's default `timeout`.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(3);
/// Default limit for making the first connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default re-check interval when release notifications are unavailable.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How waiters learn that a lock was released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotificationMode {
    /// Pub/sub on a shared RESP3 connection (falls back to polling if the server has no RESP3).
    PubSub,
    /// Re-check about this often (with jitter), capped by the holder's remaining lease.
    Polling(Duration),
}

/// Whether a backend on a Redis Cluster uses sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH`, Redis
/// and Valkey 7+) for release notifications, as Redisson's `shardedSubscriptionMode` does.
/// One server always uses plain pub/sub.
///
/// | mode | releases announced with | waiters listen with |
/// |---|---|---|
/// | `Auto` (default), server with sharded pub/sub | `PUBLISH` and `SPUBLISH` | both |
/// | `Auto`, older server | `PUBLISH` | `SUBSCRIBE` |
/// | `On` | `SPUBLISH` | `SSUBSCRIBE` |
/// | `Off` | `PUBLISH` | `SUBSCRIBE` |
///
/// `Auto` wakes every waiter of a mixed fleet promptly: Redisson clients with either setting,
/// older clients, and distlock clients with another mode. `On` and `Off` save one command per
/// release when every client of the cluster uses the same setting.
///
/// # Example
///
/// ```no_run
/// # #[cfg(feature = "cluster")]
/// # async fn demo() -> Result<(), lock_core::Error> {
/// use lock_redis::{RedisBackend, ShardedPubSub};
///
/// let backend = RedisBackend::builder(lock_redis::RedisTarget::cluster(["redis://127.0.0.1:7000/"]))
///     .sharded_pubsub(ShardedPubSub::On)
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardedPubSub {
    /// Sharded and plain both, where the server has sharded pub/sub (asked with
    /// `PUBSUB SHARDNUMSUB` when connecting); plain otherwise.
    #[default]
    Auto,
    /// Sharded only; connecting fails if the server has no sharded pub/sub.
    On,
    /// Plain only.
    Off,
}

/// Which lock the backend keeps on the server.
///
/// # Example
///
/// ```no_run
/// use lock_redis::{LockKind, RedisBackend};
///
/// # async fn demo() -> Result<(), lock_core::Error> {
/// let fast = RedisBackend::builder("redis://127.0.0.1:6379/")
///     .lock_kind(LockKind::Fast)
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// Redisson's `RLock`: a hash `{owner → hold count}`, reentrant, shared with Java services
    /// that use Redisson on the same names. Every call is one Lua script.
    #[default]
    Reentrant,
    /// A plain string key holding the owner, taken with `SET NX PX` and given back by
    /// compare-and-delete (`DELIFEQ` on Valkey 9, `DELEX … IFEQ` on Redis 8.4, a Lua script on
    /// older servers). Not reentrant: a second `lock` by the same owner is refused with
    /// [`Error::NotReentrant`] before any I/O. Same guard, watchdog, waiter, release channel
    /// and fencing tokens (asking for a token makes the acquire a script). Cheaper for the
    /// server than a hash script; not understood by Redisson's `RLock`. The one kind that runs
    /// on a server without Lua scripts, where it has `SET … IFEQ` and `DELIFEQ` or `DELEX`
    /// (one server or Sentinels; no fencing tokens there: see `docs/deployments.md`,
    /// "Without scripts").
    ///
    /// [`Error::NotReentrant`]: lock_core::Error::NotReentrant
    Fast,
}

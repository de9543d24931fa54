//! Distributed locks for async Rust on Redis and Valkey, with the same data layout as Redisson's
//! `RLock`, so Rust and Java services can share locks.
//!
//! This is the facade crate: it re-exports the whole lock API of `lock-core` (the [`Locker`],
//! its [`LockGuard`], options, errors, the backend contract and an in-memory backend) and, with
//! the `redis` feature (on by default), the Redis / Valkey backend of `lock-redis`.
//!
//! - [`Locker::lock`] waits as long as it takes and keeps the lock with a watchdog (a 30 s lease
//!   renewed every 10 s while the guard lives), like Redisson's `lock()`.
//! - [`Locker::try_lock`] makes one attempt; [`Locker::lock_with`] takes [`LockOptions`]: a wait
//!   deadline, a fixed lease or a watchdog lease, an explicit [`Owner`], a fencing token.
//! - Locks are reentrant per [`Owner`]; by default the owner is the current tokio task.
//! - "Someone else holds it" is never an error: it is `Ok(None)`, or more waiting.
//! - [`LockGuard::lost`] resolves if the lease is lost anyway; race it against the critical
//!   section with `tokio::select!`. [`LockGuard::release`] reports a [`ReleaseOutcome`]:
//!   [`ReleaseOutcome::NotHeld`] means the lock had expired or was deleted meanwhile.
//!
//! # Example
//!
//! With the in-memory backend (the same semantics as Redis, no server needed):
//!
//! ```
//! use distlock::{LockOptions, Locker, MemoryBackend, Owner, ReleaseOutcome};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> distlock::Result<()> {
//! let locker = Locker::new(MemoryBackend::new());
//!
//! let guard = locker.lock("orders:42").await?;
//!
//! // Another owner does not get it while the guard lives.
//! let other = LockOptions::new().no_wait().owner(Owner::new());
//! assert!(locker.lock_with("orders:42", &other).await?.is_none());
//!
//! tokio::select! {
//!     () = async { /* the critical section */ } => {}
//!     loss = guard.lost() => panic!("lease lost during the critical section: {loss:?}"),
//! }
//! assert_eq!(guard.release().await?, ReleaseOutcome::Released);
//! # Ok(())
//! # }
//! ```
//!
//! With Redis or Valkey (feature `redis`):
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # async fn demo() -> distlock::Result<()> {
//! use std::time::Duration;
//! use distlock::LockOptions;
//!
//! let locker = distlock::connect("redis://127.0.0.1:6379/").await?;
//!
//! // Wait at most 5 s; keep the lock with a watchdog while the guard lives.
//! let options = LockOptions::new().wait(Duration::from_secs(5));
//! if let Some(guard) = locker.lock_with("invoice:7", &options).await? {
//!     // ... the critical section ...
//!     if !guard.release().await?.was_held() {
//!         eprintln!("the lock expired before release: the critical section may have overlapped");
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! For more control over the connection (timeouts, polling instead of pub/sub), build the backend
//! with [`RedisBackend::builder`] and wrap it in [`Locker::new`].
//!
//! # Feature flags
//!
//! | feature | default | enables |
//! |---|---|---|
//! | `redis` | yes | [`RedisBackend`], [`RedisBackendBuilder`], [`NotificationMode`], the [`redis`](mod@redis) module, [`RedisLocker`] and [`connect`] |
//! | `tls-rustls` | no | `rediss://` URLs, TLS through rustls with the webpki root certificates (implies `redis`) |
//!
//! Without default features only the backend-independent API and [`MemoryBackend`] remain, for
//! code that is generic over [`LockBackend`] or that brings its own backend.
//!
//! There is no feature for logging: distlock always reports through the [`tracing`] crate
//! (warnings for failed background releases and renewals, debug events otherwise). Without a
//! `tracing` subscriber installed these events cost next to nothing and print nothing.
//!
//! [`tracing`]: https://docs.rs/tracing
//!
//! # Writing a backend
//!
//! Implement [`LockBackend`]: one atomic step per method (acquire attempt, release, batched
//! renewal, abandon, force-release, inspect) plus release notifications ([`ReleaseHub`], or
//! [`ReleaseWatch::polling`] for stores without them). Waiting, watchdogs, guards and reentrancy
//! bookkeeping come from [`Locker`]. The repository's `examples/src/custom_backend.rs` is a
//! complete, commented backend, and the `lock-testkit` crate's conformance suite checks any
//! backend against the behaviour described here.

// The crate docs link to the Redis items, which only exist with the `redis` feature.
#![cfg_attr(not(feature = "redis"), allow(rustdoc::broken_intra_doc_links))]

#[doc(inline)]
pub use lock_core::{backend, error, notify, options};

pub use lock_core::{
    AcquireOutcome, AcquireRequest, BoxFuture, DynLockBackend, Error, Grant, Lease, LeaseLoss,
    LockBackend, LockGuard, LockOptions, LockState, Locker, MemoryBackend, Owner, ReleaseHub,
    ReleaseOutcome, ReleaseWatch, Renewal, Result, Wait,
};

/// The Redis / Valkey backend: the `lock-redis` crate (feature `redis`).
///
/// Besides the types re-exported at the crate root, it holds the default timeouts and the
/// [`keys`](lock_redis::keys) module, which names the keys and channels in Redisson's layout.
#[cfg(feature = "redis")]
pub use lock_redis as redis;

#[cfg(feature = "redis")]
pub use lock_redis::{NotificationMode, RedisBackend, RedisBackendBuilder};

/// A [`Locker`] over one Redis or Valkey node, as made by [`connect`] (feature `redis`).
#[cfg(feature = "redis")]
pub type RedisLocker = Locker<RedisBackend>;

/// Connects to the Redis or Valkey node at `url` with the default settings and returns a
/// locker over it (feature `redis`).
///
/// `url` is `redis://[user:password@]host:port[/db]`, or `rediss://...` with the `tls-rustls`
/// feature. Every call makes a new client (a new client id in owner fields, like a separate
/// process); clone the returned [`RedisLocker`] to share one.
///
/// Same as `Locker::new(RedisBackend::connect(url).await?)`; use [`RedisBackend::builder`] for
/// other timeouts or polling instead of pub/sub.
///
/// # Errors
///
/// As [`RedisBackendBuilder::connect`]: [`Error::InvalidConfig`] for a bad URL,
/// [`Error::NotPermitted`] for bad credentials, [`Error::ConnectionLost`] or [`Error::Timeout`]
/// when the server cannot be reached.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> distlock::Result<()> {
/// let locker = distlock::connect("redis://127.0.0.1:6379/").await?;
/// let guard = locker.lock("reports:daily").await?;
/// // ... the critical section ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "redis")]
pub async fn connect(url: impl Into<String>) -> Result<RedisLocker> {
    Ok(Locker::new(RedisBackend::connect(url).await?))
}

//! Distributed locks for async Rust on Redis and Valkey, with the same data layout as Redisson's
//! `RLock`, so Rust and Java services can share locks; and the lock on PostgreSQL (feature
//! `postgres`).
//!
//! This is the facade crate. Its root is what an application uses: the [`Locker`] and the
//! handle it gives out on each primitive, guards, options, errors, the in-memory backend and,
//! with the `redis` feature (on by default), the Redis / Valkey backend. What a backend author
//! implements (the contracts, requests, outcomes, sides) is under [`backend`].
//!
//! - [`Locker::lock`] waits as long as it takes and keeps the lock with a watchdog (a 30 s lease
//!   renewed every 10 s while the guard lives), like Redisson's `lock()`.
//! - [`Locker::try_lock`] makes one attempt; [`Locker::lock_with`] takes [`LockOptions`]: a wait
//!   deadline, a fixed lease or a watchdog lease, an explicit [`Owner`], a fencing token.
//! - Locks are reentrant per [`Owner`]; by default the owner is the current tokio task.
//! - "Someone else holds it" is `Ok(None)` from [`Locker::try_lock`], more waiting from
//!   [`Locker::lock`], and [`Error::NotAcquired`] from [`Locker::lock_with`] when its wait ends:
//!   a guard is never wrapped in an `Option` that cannot be `None`.
//! - A fencing token is asked for in the options' type ([`LockOptions::fenced`]); such guards
//!   have [`LockGuard::fencing_token`] returning the token itself.
//! - [`LockGuard::lost`] resolves if the lease is lost anyway; race it against the critical
//!   section with `tokio::select!`. [`LockGuard::release`] reports a [`ReleaseOutcome`]:
//!   [`ReleaseOutcome::NotHeld`] means the lock had expired or was deleted meanwhile.
//!
//! # Which primitive
//!
//! | you need | take | Redisson's name |
//! |---|---|---|
//! | one holder at a time, across processes | [`Locker::lock`], [`Locker::try_lock`], [`Locker::lock_with`], [`Locker::with_lock`] | `RLock` |
//! | the same without reentrancy, at about half the server work | `LockKind::Fast` on the Redis builder | — |
//! | one holder at a time, in the order they asked | [`Locker::fair`] → [`FairLock`] | `RFairLock` |
//! | many readers or one writer | [`Locker::read_write`] → [`ReadWriteLock`] | `RReadWriteLock` |
//! | at most N holders, a dead holder's permit given back by its lease | [`Locker::permits`] → [`Permits`] | `RPermitExpirableSemaphore` |
//! | a plain counter of N permits | [`Locker::semaphore`] → [`Semaphore`] | `RSemaphore` |
//! | wait until N others have counted down | [`Locker::latch`] → [`CountDownLatch`] | `RCountDownLatch` |
//! | one leader among candidates | [`Locker::election`] → [`Election`] | — |
//! | survive losing a node; take several locks together | `RedLock` (feature `redlock`); `MultiLock` (feature `multi`) | `RedissonRedLock`; `RedissonMultiLock` |
//!
//! Every primitive is reached the same way, from a [`Locker`], with its name bound when the
//! handle is made (and checked then, before any I/O). Handles are cheap; those from one locker
//! and its clones share one watchdog, and one owner's calls on one name run in the order they
//! were made.
//!
//! `docs/README.md` in the repository maps each one to its page.
//!
//! # The names at the root
//!
//! | role | names |
//! |---|---|
//! | the entry point and the lock | [`Locker`], [`LockGuard`], [`LockOptions`], [`Lease`], [`Wait`], [`Owner`], [`Fenced`], [`Unfenced`], [`Fencing`], [`LockState`], [`ReleaseOutcome`], [`LeaseLoss`] |
//! | the other primitives' handles and what they report | [`FairLock`], [`FairState`], [`ReadWriteLock`], [`ReadWriteState`], [`ReadWriteMode`], [`Semaphore`], [`SemaphoreState`], [`Permits`], [`PermitState`], [`CountDownLatch`], [`Election`], [`Leadership`], [`Leader`], [`LeaderObserver`] |
//! | errors | [`Error`], [`Result`] (details in [`error`]; the limits on names, leases and waits in [`options`]) |
//! | backends | [`MemoryBackend`]; with `redis`: [`RedisBackend`], [`RedisBackendBuilder`], [`LockKind`], [`NotificationMode`], [`ReplicaAck`], [`Shortfall`], [`RedisTarget`], [`RedisNode`], [`RedisLocker`], [`connect`]; [`MultiLock`], [`RedLock`], [`connect_multi`], [`connect_redlock`]; with `postgres`: [`PostgresBackend`], [`PostgresBackendBuilder`], [`PostgresLocker`], [`connect_postgres`] |
//!
//! Metric names are in [`telemetry`]; everything a backend author needs is in [`backend`].
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
//! let refused = locker.lock_with("orders:42", &other).await;
//! assert!(matches!(refused, Err(distlock::Error::NotAcquired { .. })));
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
//! // Wait at most 5 s (then `Error::NotAcquired`); keep the lock with a watchdog while the
//! // guard lives.
//! let options = LockOptions::new().wait(Duration::from_secs(5));
//! let guard = locker.lock_with("invoice:7", &options).await?;
//! // ... the critical section ...
//! if !guard.release().await?.was_held() {
//!     eprintln!("the lock expired before release: the critical section may have overlapped");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! For more control over the connection (timeouts, polling instead of pub/sub), build the backend
//! with [`RedisBackend::builder`] and wrap it in [`Locker::new`].
//!
//! # Several nodes: MultiLock and RedLock
//!
//! A lock on one node is only as safe as that node. With the `multi` and `redlock` features a
//! lock can span N **independent** nodes (separate servers, no replication between them):
//!
//! - [`MultiLock`] (feature `multi`) is held only when **every** node grants it: it stops
//!   granting while any node is down, but a grant survives the loss of any one node's data.
//! - [`RedLock`] (feature `redlock`) is held while a **majority** (`N/2 + 1`) grants it within
//!   the validity time, so it keeps working with a minority of the nodes down.
//!
//! Both are [`LockBackend`](backend::LockBackend)s themselves: a `Locker<MultiLock>` or `Locker<RedLock>` has the same
//! guards, watchdog, waiting and [`LockGuard::lost`] as a single node, so code generic over
//! `B: LockBackend` runs unchanged on either. With `redis`, [`connect_multi`] and
//! [`connect_redlock`] connect one [`RedisBackend`] per URL; the composites' builders
//! ([`multi::Composite::builder`]) take any mix of backends and other timeouts. See
//! `docs/multi-node.md` in the repository for what each one guarantees.
//!
//! ```
//! # #[cfg(feature = "redlock")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> distlock::Result<()> {
//! use std::sync::Arc;
//! use distlock::backend::DynLockBackend;
//! use distlock::{Locker, MemoryBackend, RedLock};
//!
//! // Five independent in-memory stores stand in for five Redis nodes.
//! let nodes: Vec<Arc<dyn DynLockBackend>> =
//!     (0..5).map(|_| Arc::new(MemoryBackend::new()) as _).collect();
//! let locker = Locker::new(RedLock::new(nodes)?);
//! assert_eq!(locker.backend().required(), 3);
//! let guard = locker.lock("nightly-export").await?;
//! guard.release().await?;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "redlock"))]
//! # fn main() {}
//! ```
//!
//! # Feature flags
//!
//! | feature | default | enables |
//! |---|---|---|
//! | `redis` | yes | [`RedisBackend`], [`RedisBackendBuilder`], [`NotificationMode`], the [`redis`](mod@redis) module, [`RedisLocker`] and [`connect`] |
//! | `tls-rustls` | no | `rediss://` URLs in every mode, TLS through rustls (ring provider): the webpki root certificates or your own CA bundle, mutual TLS (`RedisBackendBuilder::tls_ca_pem`, `tls_client_identity`; implies `redis`) |
//! | `multi` | no | [`MultiLock`] and the [`multi`](mod@multi) module (the `lock-multi` crate); with `redis`, [`connect_multi`] |
//! | `redlock` | no | [`RedLock`] and the [`redlock`](mod@redlock) module (RedLock's policy in the `lock-multi` crate); with `redis`, [`connect_redlock`] |
//! | `cluster` | no | Redis Cluster: `RedisTarget::cluster(seeds)` (for [`connect`] and [`RedisBackend::builder`]), `ShardedPubSub`; implies `redis` |
//! | `sentinel` | no | Sentinel: `RedisTarget::sentinel(sentinels, service)`, the primary followed across failovers; implies `redis` |
//! | `postgres` | no | every primitive on PostgreSQL 14+: [`PostgresBackend`], [`PostgresBackendBuilder`], [`PostgresLocker`], [`connect_postgres`], the [`postgres`](mod@postgres) module (the `lock-postgres` crate) |
//! | `metrics` | no | metrics through the `metrics` facade (acquire, wait and hold times, renewals, leases lost, each node's votes; see `docs/observability.md`) |
//!
//! Without default features only the backend-independent API and [`MemoryBackend`] remain, for
//! code that is generic over [`LockBackend`](backend::LockBackend) or that brings its own
//! backend.
//!
//! There is no feature for logging: distlock always reports through the [`tracing`] crate
//! (warnings for failed background releases and renewals, debug events otherwise). Without a
//! `tracing` subscriber installed these events cost next to nothing and print nothing.
//!
//! [`tracing`]: https://docs.rs/tracing
//!
//! # Writing a backend
//!
//! Implement [`backend::LockBackend`]: one atomic step per method (acquire attempt, release,
//! batched renewal, abandon, force-release, inspect) plus release notifications
//! ([`backend::ReleaseHub`], or [`backend::ReleaseWatch::polling`] for stores without them), and
//! the contract of each other primitive the store offers ([`backend::FairBackend`], ...). Waiting, watchdogs, guards and reentrancy
//! bookkeeping come from [`Locker`]. The repository's `examples/src/custom_backend.rs` is a
//! complete, commented backend, and the `lock-testkit` crate's conformance suite checks any
//! backend against the behaviour described here.

// On docs.rs (`--cfg docsrs`, nightly) every item that needs a cargo feature gets a badge naming
// it; `doc_cfg` adds them from the `#[cfg]`s alone. Other builds never see the nightly feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
// The crate docs link to the Redis, MultiLock and RedLock items, which only exist with their
// features.
#![cfg_attr(
    not(all(
        feature = "redis",
        feature = "multi",
        feature = "redlock",
        feature = "postgres"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

// The application's tier, as lock-core lists it (`lock_core::api`): the root of this crate is
// that list plus the backends below, so the two cannot drift apart.
#[doc(inline)]
pub use lock_core::api::*;

#[doc(inline)]
pub use lock_core::{error, options, telemetry};

/// What a backend author implements or calls: the contract of each primitive, the requests and
/// outcomes a [`Locker`] exchanges with a backend, the notification hub, and each backend's
/// sides. An application does not need these.
///
/// `examples/src/custom_backend.rs` in the repository is a complete, commented backend, and the
/// `lock-testkit` crate's conformance suites check any backend against the contracts.
pub mod backend {
    #[doc(inline)]
    pub use lock_core::backend::*;

    #[cfg(feature = "redis")]
    pub use lock_redis::{
        RedisCampaignSide, RedisFairSide, RedisPermitSide, RedisReadSide, RedisWriteSide,
    };
}

/// The Redis / Valkey backend: the `lock-redis` crate (feature `redis`).
///
/// Besides the types re-exported at the crate root, it holds the default timeouts, what a
/// server was found to offer ([`Capabilities`](lock_redis::Capabilities)), lock descriptions
/// for operators, the [`keys`](lock_redis::keys) module, which names the keys and channels in
/// Redisson's layout, and the Lua scripts as the server receives them
/// ([`lua`](lock_redis::lua)). redis-rs itself is [`redis_rs`].
#[cfg(feature = "redis")]
pub mod redis {
    #[doc(inline)]
    pub use lock_redis::*;

    // Shadows the glob's `redis` (redis-rs), so the crate is reached by one path only:
    // `distlock::redis_rs`.
    #[allow(dead_code, hidden_glob_reexports, clippy::module_inception)]
    mod redis {}
}

/// redis-rs, the client the Redis backend is built on (feature `redis`): a `redis::Client` or
/// `ConnectionInfo` handed to [`connect`] or [`RedisBackend::builder`] must be of this version,
/// so take it from here rather than depending on redis-rs separately.
#[cfg(feature = "redis")]
pub use lock_redis::redis as redis_rs;

#[cfg(feature = "redis")]
pub use lock_redis::{
    LockKind, NotificationMode, RedisBackend, RedisBackendBuilder, RedisNode, RedisTarget,
    ReplicaAck, Shortfall,
};

/// A [`Locker`] over one Redis or Valkey node, as made by [`connect`] (feature `redis`).
#[cfg(feature = "redis")]
pub type RedisLocker = Locker<RedisBackend>;

/// Connects to Redis or Valkey at `target` with the default settings and returns a locker
/// over it (feature `redis`).
///
/// `target` is one server — a URL (`redis://[user:password@]host:port[/db]`, or `rediss://...`
/// with the `tls-rustls` feature), a `redis::Client` or a `ConnectionInfo` — or a
/// [`RedisTarget`]: [`RedisTarget::cluster`] (feature `cluster`) or [`RedisTarget::sentinel`]
/// (feature `sentinel`). Every call makes a new client (a new client id in owner fields, like
/// a separate process); clone the returned [`RedisLocker`] to share one.
///
/// Same as `Locker::new(RedisBackend::connect(target).await?)`; use [`RedisBackend::builder`]
/// for other timeouts or polling instead of pub/sub.
///
/// # Errors
///
/// As [`RedisBackendBuilder::connect`]: [`Error::InvalidConfig`] for a bad URL or an empty
/// list of seeds (before any I/O), [`Error::NotPermitted`] for bad credentials,
/// [`Error::ConnectionLost`] or [`Error::Timeout`] when the server cannot be reached.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> distlock::Result<()> {
/// let locker = distlock::connect("redis://127.0.0.1:6379/").await?;
/// let guard = locker.lock("reports:daily").await?;
/// // ... the critical section ...
/// guard.release().await?;
///
/// # #[cfg(feature = "cluster")]
/// let on_a_cluster = distlock::connect(distlock::RedisTarget::cluster([
///     "redis://127.0.0.1:7000/",
///     "redis://127.0.0.1:7001/",
/// ]))
/// .await?;
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "redis")]
pub async fn connect(target: impl Into<RedisTarget>) -> Result<RedisLocker> {
    Ok(Locker::new(RedisBackend::connect(target).await?))
}

/// The PostgreSQL backend: the `lock-postgres` crate (feature `postgres`): besides the types at
/// the crate root, the schema's SQL and version ([`SCHEMA_SQL`](lock_postgres::SCHEMA_SQL),
/// [`install_schema`](lock_postgres::install_schema)) and the default call timeout.
#[cfg(feature = "postgres")]
pub mod postgres {
    #[doc(inline)]
    pub use lock_postgres::*;
}

#[cfg(feature = "postgres")]
pub use lock_postgres::{PostgresBackend, PostgresBackendBuilder};

/// A [`Locker`] over a PostgreSQL database, as made by [`connect_postgres`] (feature
/// `postgres`).
#[cfg(feature = "postgres")]
pub type PostgresLocker = Locker<PostgresBackend>;

/// Connects to the PostgreSQL database `url` names (`postgres://user:password@host:port/db`)
/// with the default settings and returns a locker over it (feature `postgres`). The `distlock`
/// schema must be installed (`docs/postgres.md`); use [`PostgresBackend::builder`] to install
/// it on connect, or for other settings.
///
/// # Errors
///
/// As [`PostgresBackendBuilder::connect`]: [`Error::InvalidConfig`] for a bad URL (before any
/// I/O), the connection's errors, [`Error::Backend`] when the schema is missing or of another
/// version.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> distlock::Result<()> {
/// let locker = distlock::connect_postgres("postgres://app@127.0.0.1/app").await?;
/// let guard = locker.lock("nightly-report").await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "postgres")]
pub async fn connect_postgres(url: &str) -> Result<PostgresLocker> {
    Ok(Locker::new(PostgresBackend::connect(url).await?))
}

/// MultiLock: the `lock-multi` crate (feature `multi`).
///
/// [`Composite`](lock_multi::Composite) is the quorum engine shared by [`MultiLock`] and
/// [`RedLock`]; its builder sets node timeouts and retry delays, and takes any mix of node
/// backends.
#[cfg(feature = "multi")]
pub use lock_multi as multi;

#[cfg(feature = "multi")]
pub use lock_multi::MultiLock;

/// RedLock (feature `redlock`): RedLock's [`Majority`](redlock::Majority) policy and the quorum
/// engine it runs on, from the `lock-multi` crate (whose `redlock` module describes the
/// algorithm step by step).
#[cfg(feature = "redlock")]
pub mod redlock {
    pub use lock_multi::redlock::{DRIFT_FLOOR, Majority, RedLock};
    pub use lock_multi::{Composite, CompositeBuilder, Quorum};
}

#[cfg(feature = "redlock")]
pub use lock_multi::RedLock;

/// Connects to the Redis or Valkey nodes at `urls` and returns a locker over a [`MultiLock`] of
/// them: a lock held only when **every** node grants it (features `multi` and `redis`).
///
/// Each URL gets its own [`RedisBackend`] with the default settings, as with [`connect`]; the
/// nodes are connected concurrently. They must be independent servers (no replication between
/// them, not one cluster), and while any of them is down no lock is granted.
///
/// For other settings (per-node timeouts, retry delays, Redis backends built with
/// [`RedisBackend::builder`], other backends), build the nodes yourself and use
/// [`multi::Composite::builder`].
///
/// # Errors
///
/// [`Error::InvalidConfig`], before any connection is attempted, when `urls` is empty or lists
/// the same URL twice. Otherwise, as [`connect`] for the first node that fails to connect (the
/// connections already made are then dropped).
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> distlock::Result<()> {
/// let locker = distlock::connect_multi(&[
///     "redis://10.0.0.1:6379/",
///     "redis://10.0.0.2:6379/",
///     "redis://10.0.0.3:6379/",
/// ])
/// .await?;
/// assert_eq!(locker.backend().required(), 3);
/// let guard = locker.lock("payouts").await?;
/// // ... the critical section, while every node holds the lock ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[cfg(all(feature = "multi", feature = "redis"))]
pub async fn connect_multi(urls: &[impl AsRef<str>]) -> Result<Locker<MultiLock>> {
    connect_composite(urls).await
}

/// Connects to the Redis or Valkey nodes at `urls` and returns a locker over a [`RedLock`] of
/// them: a lock held while a **majority** (`N/2 + 1`) of the nodes grant it within the validity
/// time (features `redlock` and `redis`).
///
/// Each URL gets its own [`RedisBackend`] with the default settings, as with [`connect`]; the
/// nodes are connected concurrently. They must be independent servers (no replication between
/// them, not one cluster); use an odd number of them, 3 or 5, since an even one adds a node to
/// the majority without tolerating one more failure. All of them must be reachable here; once
/// connected, a minority of them may fail without stopping the lock.
///
/// For other settings (per-node timeouts, retry delays, Redis backends built with
/// [`RedisBackend::builder`], other backends), build the nodes yourself and use
/// [`redlock::Composite::builder`].
///
/// # Errors
///
/// [`Error::InvalidConfig`], before any connection is attempted, when `urls` is empty or lists
/// the same URL twice. Otherwise, as [`connect`] for the first node that fails to connect (the
/// connections already made are then dropped).
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> distlock::Result<()> {
/// let locker = distlock::connect_redlock(&[
///     "redis://10.0.0.1:6379/",
///     "redis://10.0.0.2:6379/",
///     "redis://10.0.0.3:6379/",
/// ])
/// .await?;
/// assert_eq!(locker.backend().required(), 2);
/// let guard = locker.lock("nightly-export").await?;
/// // ... the critical section, while a majority of the nodes hold the lock ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[cfg(all(feature = "redlock", feature = "redis"))]
pub async fn connect_redlock(urls: &[impl AsRef<str>]) -> Result<Locker<RedLock>> {
    connect_composite(urls).await
}

/// One [`RedisBackend`] per URL, connected concurrently, in a composite with policy `P`.
#[cfg(all(feature = "redis", any(feature = "multi", feature = "redlock")))]
async fn connect_composite<P: lock_multi::Quorum + Default>(
    urls: &[impl AsRef<str>],
) -> Result<Locker<lock_multi::Composite<P>>> {
    use std::sync::Arc;

    // Refuse what the builder would refuse before connecting anything: no node at all (the
    // builder's own error), or one server listed twice (which the builder cannot see through
    // two separate connections).
    if urls.is_empty() {
        return lock_multi::Composite::<P>::new(Vec::new()).map(Locker::new);
    }
    for (i, url) in urls.iter().enumerate() {
        let url = url.as_ref();
        if let Some(j) = urls[i + 1..].iter().position(|other| other.as_ref() == url) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "node URLs {i} and {} are the same; every node must be independent",
                    i + 1 + j
                ),
            });
        }
    }
    let backends = futures_util::future::try_join_all(
        urls.iter().map(|url| RedisBackend::connect(url.as_ref())),
    )
    .await?;
    let nodes = backends
        .into_iter()
        .map(|backend| Arc::new(backend) as Arc<dyn backend::DynLockBackend>)
        .collect();
    lock_multi::Composite::<P>::new(nodes).map(Locker::new)
}

// The README's Rust blocks are compiled as doctests of this crate (each is `no_run`: they need a
// server). The crate's README.md is a link to the workspace README, and the packaged crate holds
// a copy of it at the same place, so the path works in both. The blocks use the `redis` and
// `redlock` features, hence the gate (`cargo test -p distlock --doc --all-features` runs them).
#[cfg(all(doctest, feature = "redis", feature = "redlock"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

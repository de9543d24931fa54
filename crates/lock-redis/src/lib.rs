// Layers. The crate is a one-way ladder: each file uses only the layers below it (and, within
// its own layer, only files below it), never one above, so a change in a layer is seen only by
// the layers above it. From the top:
//
// 5. backend (`backend::{options, redis_backend, builder}`): the settings, `RedisBackend` and its
//    `LockBackend` impl dispatching to the lock kind, the builder that connects.
// 4. lock kinds (`kind::{scripted, reentrant, fast}`): what each lock operation sends and how its
//    answer reads, through the calls layer.
// 3. calls (`call`, `call::coalesce`): one lock call, alone or coalesced, within its timeout,
//    its reply proven to be its own.
// 2. connection (`connection` over `standalone` (with its `source`: one server, or a Sentinel
//    service's primary, and `sentinel_watch`), `cluster`, `deferred`, `alignment`, `manners`;
//    `connection::pubsub`; `connection::probe`, the capability probe; all over
//    `connection::tls`): one replaceable connection that knows
//    commands, not locks, whatever the server topology, the notification connections, and the
//    TLS settings every connection is opened with.
// 1. wire (`wire::{keys, errors, announce, capabilities, replication, lock_script, scripts,
//    reply}`): names on
//    the server, how releases are announced, how writes are acknowledged by replicas, the
//    scripts and the commands built from them, reply decoding, error mapping.

//! Reentrant, watchdog-renewed, pub/sub-woken locks on Redis or Valkey (one server; with the
//! `cluster` feature a Redis Cluster, with `sentinel` the primary of a Sentinel service), with
//! the same data layout as Redisson's `RLock`, so Rust and Java services can share a lock.
//!
//! | item | value |
//! |---|---|
//! | lock key | the lock name, a hash `{<client id>:<holder id> → hold count}` with PEXPIRE |
//! | release channel | `redisson_lock__channel:{<name>}`, message `0` |
//! | fencing counter | `redisson_lock_token:{<name>}` (INCR per grant, only when asked for) |
//!
//! The reentrant lock ([`LockKind::Reentrant`]) is one Lua script per call, sent by hash with
//! `EVALSHA`; when the server answers `NOSCRIPT` (an empty script cache) the call is sent again
//! whole with `EVAL`. The cleanup after a call of unknown outcome always goes whole with
//! `EVAL`, so it applies in one request even on an empty cache. The fast lock
//! ([`LockKind::Fast`]) takes and gives back with native commands (`SET NX PX`; `DELIFEQ` or
//! `DELEX … IFEQ` where the server has one, else a script) and uses scripts for the rest. Each
//! new command connection loads every script with `SCRIPT LOAD` (best effort).
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

// On docs.rs (`--cfg docsrs`, nightly) every item that needs a cargo feature gets a badge naming
// it; `doc_cfg` adds them from the `#[cfg]`s alone. Other builds never see the nightly feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod call;
mod connection;
mod kind;
pub mod telemetry;
mod wire;

pub use backend::builder::RedisBackendBuilder;
pub use backend::election::RedisCampaignSide;
pub use backend::fair::RedisFairSide;
pub use backend::options::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_POLL_INTERVAL, LockKind,
    NotificationMode, ShardedPubSub,
};
pub use backend::permits::RedisPermitSide;
pub use backend::redis_backend::RedisBackend;
pub use backend::rwlock::{RedisReadSide, RedisWriteSide};
pub use backend::target::{RedisNode, RedisTarget};
/// The redis-rs crate lock-redis is built on. A `redis::Client` or `ConnectionInfo` handed to
/// [`RedisBackend::builder`] must be of this version: take it from
/// here rather than depending on redis-rs separately.
pub use redis;
pub use wire::capabilities::{Capabilities, Capability, Feature, ServerInfo, Standing, Support};
pub use wire::description::{ChannelSubscribers, Layout, LockDescription, LockList};
pub use wire::keys;
pub use wire::replication::{ReplicaAck, Shortfall};
pub use wire::scripts::lua;

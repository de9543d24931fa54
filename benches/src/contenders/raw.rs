//! The cost floors: the same protocol as distlock with nothing around it, and the simplest Redis
//! lock there is.

use std::sync::{Arc, LazyLock};

use redis::Script;
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

use super::{BenchError, LEASE};

/// distlock's own scripts, byte for byte as `RedisBackend` sends them.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(lock_redis::lua::acquire()));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(lock_redis::lua::release()));

/// Compare-and-delete, as redsync / rslock release.
static COMPARE_AND_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end \
         return 0",
    )
});

fn lease_ms() -> u64 {
    u64::try_from(LEASE.as_millis()).expect("the lease fits in u64 ms")
}

/// acquire.lua + release.lua by EVALSHA, with the same keys and arguments as `RedisBackend`.
#[derive(Clone)]
pub struct ScriptLock<C> {
    connection: C,
    owner: Arc<str>,
    /// How release.lua announces the release: `p` (`PUBLISH`, one server), or what a cluster
    /// backend passes (`b`, both kinds, by default on Redis 7+).
    announce: &'static str,
}

impl<C: ConnectionLike + Clone + Send> ScriptLock<C> {
    /// A client with its own owner field, `<uuid>:1`, announcing releases with `PUBLISH` (as
    /// on one server).
    pub fn new(connection: C) -> Self {
        Self::announcing(connection, "p")
    }

    /// The same, announcing releases as `announce` says (release.lua's argument: `p`, `s` or
    /// `b`).
    pub fn announcing(connection: C, announce: &'static str) -> Self {
        ScriptLock {
            connection,
            owner: format!("{}:1", uuid::Uuid::new_v4()).into(),
            announce,
        }
    }

    /// One acquire + release.
    pub async fn lock_unlock(&self, key: &str) -> Result<(), BenchError> {
        let mut connection = self.connection.clone();
        let mut acquire = ACQUIRE.prepare_invoke();
        // The last argument is the request id, echoed first in the reply (as the library does).
        acquire
            .key(key)
            .key(lock_redis::keys::token_key(key))
            .arg(lease_ms())
            .arg(&*self.owner)
            .arg("0")
            .arg(1);
        // A first hold without a token answers the bare request id (see the script).
        let granted: redis::Value = acquire.invoke_async(&mut connection).await?;
        if !matches!(&granted, redis::Value::BulkString(id) if id == b"1") {
            return Err(format!("raw-script: {key} was busy: {granted:?}").into());
        }
        let mut release = RELEASE.prepare_invoke();
        release
            .key(key)
            .arg(lease_ms())
            .arg(&*self.owner)
            .arg(lock_redis::keys::channel(key))
            .arg(lock_redis::keys::UNLOCK_MESSAGE)
            .arg(self.announce)
            .arg(2);
        // The lock freed answers the bare request id (see the script).
        let answer: redis::Value = release.invoke_async(&mut connection).await?;
        match answer {
            redis::Value::BulkString(id) if id == b"2" => Ok(()),
            other => Err(format!("raw-script: release of {key} answered {other:?}").into()),
        }
    }
}

/// `SET key value NX PX 30000`, then compare-and-delete.
#[derive(Clone)]
pub struct SetNx {
    connection: redis::aio::MultiplexedConnection,
    value: Arc<str>,
}

impl SetNx {
    /// A client with its own lock value (a UUID).
    pub fn new(connection: redis::aio::MultiplexedConnection) -> Self {
        SetNx {
            connection,
            value: uuid::Uuid::new_v4().to_string().into(),
        }
    }

    /// One SET NX + compare-and-delete.
    pub async fn lock_unlock(&self, key: &str) -> Result<(), BenchError> {
        let mut connection = self.connection.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&*self.value)
            .arg("NX")
            .arg("PX")
            .arg(lease_ms())
            .query_async(&mut connection)
            .await?;
        if set.is_none() {
            return Err(format!("raw-setnx: {key} was busy").into());
        }
        let deleted: i64 = COMPARE_AND_DELETE
            .key(key)
            .arg(&*self.value)
            .invoke_async(&mut connection)
            .await?;
        if deleted != 1 {
            return Err(format!("raw-setnx: {key} was not ours any more").into());
        }
        Ok(())
    }
}

/// The floor: two `PING`s per cycle on the same client stack (tokio + a redis-rs
/// `MultiplexedConnection`), the fewest round trips a lock + unlock can take.
#[derive(Clone)]
pub struct TwoPings {
    connection: redis::aio::MultiplexedConnection,
}

impl TwoPings {
    /// A client on its own connection.
    pub fn new(connection: redis::aio::MultiplexedConnection) -> Self {
        TwoPings { connection }
    }

    /// Two round trips, one after the other.
    pub async fn lock_unlock(&self, _key: &str) -> Result<(), BenchError> {
        let mut connection = self.connection.clone();
        for _ in 0..2 {
            let pong: String = redis::cmd("PING").query_async(&mut connection).await?;
            if pong != "PONG" {
                return Err(format!("ping answered {pong}").into());
            }
        }
        Ok(())
    }
}

/// The floor on a cluster: two `PING`s per cycle, each routed to the primary serving `key`'s
/// slot through redis-rs's cluster connection (the node a lock on `key` would use).
#[derive(Clone)]
pub struct ClusterPings {
    connection: ClusterConnection,
}

impl ClusterPings {
    /// A client on its own cluster connection.
    pub fn new(connection: ClusterConnection) -> Self {
        ClusterPings { connection }
    }

    /// Two round trips to `key`'s primary, one after the other.
    pub async fn lock_unlock(&self, key: &str) -> Result<(), BenchError> {
        let mut connection = self.connection.clone();
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
            key,
            SlotAddr::Master,
        )));
        for _ in 0..2 {
            let pong: String = redis::from_redis_value(
                connection
                    .route_command(redis::cmd("PING"), route.clone())
                    .await?,
            )?;
            if pong != "PONG" {
                return Err(format!("ping answered {pong}").into());
            }
        }
        Ok(())
    }
}

/// How a cluster backend with the default `ShardedPubSub::Auto` announces releases, asked the
/// same way: `b` (both kinds) when the cluster knows `PUBSUB SHARDNUMSUB` (Redis and Valkey
/// 7+), else `p`.
pub async fn cluster_announce(connection: &ClusterConnection) -> &'static str {
    let mut connection = connection.clone();
    let mut probe = redis::cmd("PUBSUB");
    probe.arg("SHARDNUMSUB");
    let reply = connection
        .route_command(
            probe,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
        )
        .await;
    if matches!(reply, Ok(redis::Value::Array(_))) {
        "b"
    } else {
        "p"
    }
}

/// Loads distlock's acquire and release scripts on every primary (redis-rs sends `SCRIPT LOAD`
/// to all of them), as the backend does when it connects, so no measured call meets
/// `NOSCRIPT`.
pub async fn preload_scripts(connection: &ClusterConnection) -> Result<(), BenchError> {
    let mut connection = connection.clone();
    ACQUIRE.load_async(&mut connection).await?;
    RELEASE.load_async(&mut connection).await?;
    Ok(())
}

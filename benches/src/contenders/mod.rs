//! The lock clients under test. Each does one lock + unlock pair on a key nobody else uses.

pub mod distlock;
pub mod postgres;
mod raw;
#[cfg(feature = "rslock")]
pub mod rslock;

use std::time::Duration;

use clap::ValueEnum;
use lock_core::LockGuard;
use lock_postgres::PostgresBackend;
use lock_redis::{LockKind, RedisBackend, ReplicaAck};
use redis::cluster_async::ClusterConnection;

/// Errors of a benchmark step.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// The lease (or TTL) every contender asks for.
pub const LEASE: Duration = Duration::from_secs(30);

/// Which client to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// Two `PING`s per cycle on the same client stack: the round-trip floor.
    Ping2,
    /// `SET key val NX PX 30000`, then a GET-compare-DEL script: the simplest Redis lock.
    RawSetnx,
    /// distlock's acquire.lua + release.lua by EVALSHA on a `MultiplexedConnection`.
    RawScript,
    /// The same on a `ConnectionManager` (what `RedisBackend` uses), to split the costs.
    RawScriptCm,
    /// `Locker::lock_with(no_wait, fixed 30 s lease)` + `LockGuard::release`.
    DistlockFixed,
    /// `Locker::try_lock` (watchdog lease) + `LockGuard::release`.
    #[value(name = "distlock-try_lock", alias = "distlock-try-lock")]
    DistlockTryLock,
    /// `Locker::lock` (watchdog lease, waits forever) + `LockGuard::release`.
    DistlockLock,
    /// `LockKind::Fast` (string key, `SET NX PX`, compare-and-delete): `lock_with(no_wait,
    /// fixed 30 s lease)` + `LockGuard::release`.
    DistlockFast,
    /// `LockKind::Fast` with `Locker::lock` (watchdog lease) + `LockGuard::release`.
    DistlockFastLock,
    /// `rslock::LockManager::lock` + `unlock` on one node.
    Rslock,
}

impl Kind {
    /// Every kind, in the order they run.
    pub const ALL: [Kind; 10] = [
        Kind::Ping2,
        Kind::RawSetnx,
        Kind::RawScript,
        Kind::RawScriptCm,
        Kind::DistlockFixed,
        Kind::DistlockTryLock,
        Kind::DistlockLock,
        Kind::DistlockFast,
        Kind::DistlockFastLock,
        Kind::Rslock,
    ];

    /// The rows W1C and W2C run on a cluster by default (`--contenders` picks among
    /// [`Kind::distlock_settings`]'s kinds, `ping2` and `raw-script`).
    pub const CLUSTER: [Kind; 5] = [
        Kind::Ping2,
        Kind::RawScript,
        Kind::DistlockFixed,
        Kind::DistlockLock,
        Kind::DistlockFast,
    ];

    /// The distlock rows W1A and W2A run with and without replica acknowledgement by default.
    pub const ACKED: [Kind; 2] = [Kind::DistlockLock, Kind::DistlockFastLock];

    /// The lock kind and entry point of a distlock row; `None` for the other rows.
    pub fn distlock_settings(self) -> Option<(LockKind, distlock::Mode)> {
        Some(match self {
            Kind::DistlockFixed => (LockKind::Reentrant, distlock::Mode::Fixed),
            Kind::DistlockTryLock => (LockKind::Reentrant, distlock::Mode::TryLock),
            Kind::DistlockLock => (LockKind::Reentrant, distlock::Mode::Lock),
            Kind::DistlockFast => (LockKind::Fast, distlock::Mode::Fixed),
            Kind::DistlockFastLock => (LockKind::Fast, distlock::Mode::Lock),
            Kind::Ping2 | Kind::RawSetnx | Kind::RawScript | Kind::RawScriptCm | Kind::Rslock => {
                return None;
            }
        })
    }

    /// The name of a distlock row whose writes wait for a replica (W1A, W2A): the row name
    /// with `-ack`.
    pub fn acked_name(self) -> &'static str {
        match self {
            Kind::DistlockFixed => "distlock-fixed-ack",
            Kind::DistlockTryLock => "distlock-try_lock-ack",
            Kind::DistlockLock => "distlock-lock-ack",
            Kind::DistlockFast => "distlock-fast-ack",
            Kind::DistlockFastLock => "distlock-fast-lock-ack",
            Kind::Ping2 | Kind::RawSetnx | Kind::RawScript | Kind::RawScriptCm | Kind::Rslock => {
                self.name()
            }
        }
    }

    /// The row name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Ping2 => "ping2",
            Kind::RawSetnx => "raw-setnx",
            Kind::RawScript => "raw-script",
            Kind::RawScriptCm => "raw-script-cm",
            Kind::DistlockFixed => "distlock-fixed",
            Kind::DistlockTryLock => "distlock-try_lock",
            Kind::DistlockLock => "distlock-lock",
            Kind::DistlockFast => "distlock-fast",
            Kind::DistlockFastLock => "distlock-fast-lock",
            Kind::Rslock => "rslock",
        }
    }
}

/// A connected client of one [`Kind`]. Clones share the connection.
#[derive(Clone)]
pub enum Contender {
    /// See [`Kind::Ping2`].
    Ping2(raw::TwoPings),
    /// See [`Kind::RawSetnx`].
    SetNx(raw::SetNx),
    /// See [`Kind::RawScript`].
    Script(raw::ScriptLock<redis::aio::MultiplexedConnection>),
    /// See [`Kind::RawScriptCm`].
    ScriptCm(raw::ScriptLock<redis::aio::ConnectionManager>),
    /// See [`Kind::DistlockFixed`], [`Kind::DistlockTryLock`], [`Kind::DistlockLock`].
    Distlock(distlock::Distlock),
    /// See [`Kind::Rslock`].
    #[cfg(feature = "rslock")]
    Rslock(rslock::Rslock),
    /// [`Kind::Ping2`] on a cluster: both `PING`s to the key's primary.
    ClusterPing2(raw::ClusterPings),
    /// [`Kind::RawScript`] on a cluster: redis-rs's cluster connection, the scripts routed by
    /// their first key.
    ClusterScript(raw::ScriptLock<ClusterConnection>),
    /// See [`postgres::PgKind::DistlockLock`], [`postgres::PgKind::DistlockTryLock`].
    PgDistlock(distlock::Distlock<PostgresBackend>),
    /// See [`postgres::PgKind::RawSql`].
    PgRawSql(postgres::RawSql),
    /// See [`postgres::PgKind::Advisory`].
    PgAdvisory(postgres::Advisory),
}

impl Contender {
    /// Connects a client of `kind` to `url`; `None` when that kind is not built in.
    pub async fn connect(kind: Kind, url: &str) -> Result<Option<Contender>, BenchError> {
        let client = redis::Client::open(url)?;
        Ok(Some(match kind {
            Kind::Ping2 => Contender::Ping2(raw::TwoPings::new(
                client.get_multiplexed_async_connection().await?,
            )),
            Kind::RawSetnx => Contender::SetNx(raw::SetNx::new(
                client.get_multiplexed_async_connection().await?,
            )),
            Kind::RawScript => Contender::Script(raw::ScriptLock::new(
                client.get_multiplexed_async_connection().await?,
            )),
            Kind::RawScriptCm => Contender::ScriptCm(raw::ScriptLock::new(
                redis::aio::ConnectionManager::new(client).await?,
            )),
            Kind::DistlockFixed => {
                Contender::Distlock(distlock::Distlock::connect(url, distlock::Mode::Fixed).await?)
            }
            Kind::DistlockTryLock => Contender::Distlock(
                distlock::Distlock::connect(url, distlock::Mode::TryLock).await?,
            ),
            Kind::DistlockLock => {
                Contender::Distlock(distlock::Distlock::connect(url, distlock::Mode::Lock).await?)
            }
            Kind::DistlockFast => Contender::Distlock(
                distlock::Distlock::connect_fast(url, distlock::Mode::Fixed).await?,
            ),
            Kind::DistlockFastLock => Contender::Distlock(
                distlock::Distlock::connect_fast(url, distlock::Mode::Lock).await?,
            ),
            #[cfg(feature = "rslock")]
            Kind::Rslock => Contender::Rslock(rslock::Rslock::new(url)),
            #[cfg(not(feature = "rslock"))]
            Kind::Rslock => return Ok(None),
        }))
    }

    /// Connects a client of `kind` to the cluster found from `seeds`, each client on its own
    /// cluster connection; `None` for the kinds W1C and W2C do not offer (`raw-setnx`,
    /// `raw-script-cm`, `rslock`).
    pub async fn connect_cluster(
        kind: Kind,
        seeds: &[String],
    ) -> Result<Option<Contender>, BenchError> {
        if let Some((lock_kind, mode)) = kind.distlock_settings() {
            let builder =
                RedisBackend::builder(lock_redis::RedisTarget::cluster(seeds.iter().cloned()))
                    .lock_kind(lock_kind);
            return Ok(Some(Contender::Distlock(
                distlock::Distlock::connect_with(builder, mode).await?,
            )));
        }
        let connection = || async {
            redis::cluster::ClusterClient::new(seeds.to_vec())?
                .get_async_connection()
                .await
        };
        Ok(match kind {
            Kind::Ping2 => Some(Contender::ClusterPing2(raw::ClusterPings::new(
                connection().await?,
            ))),
            Kind::RawScript => {
                let connection = connection().await?;
                raw::preload_scripts(&connection).await?;
                let announce = raw::cluster_announce(&connection).await;
                Some(Contender::ClusterScript(raw::ScriptLock::announcing(
                    connection, announce,
                )))
            }
            _ => None,
        })
    }

    /// Connects a distlock row of `kind` to the server at `url`, its writes waiting for
    /// replicas as `ack` says (none: not waiting); `None` for rows that are not distlock's.
    pub async fn connect_acked(
        kind: Kind,
        url: &str,
        ack: Option<ReplicaAck>,
    ) -> Result<Option<Contender>, BenchError> {
        let Some((lock_kind, mode)) = kind.distlock_settings() else {
            return Ok(None);
        };
        let mut builder = RedisBackend::builder(url).lock_kind(lock_kind);
        if let Some(ack) = ack {
            builder = builder.replica_ack(ack);
        }
        Ok(Some(Contender::Distlock(
            distlock::Distlock::connect_with(builder, mode).await?,
        )))
    }

    /// Connects a PostgreSQL row of `kind` to the database at `url`, with `connections`
    /// connections: the backend's (`connections(n)`, plus its `LISTEN` connection), or the bare
    /// client's pool.
    pub async fn connect_postgres(
        kind: postgres::PgKind,
        url: &str,
        connections: usize,
    ) -> Result<Contender, BenchError> {
        let config: tokio_postgres::Config = url.parse()?;
        Ok(match kind {
            postgres::PgKind::RawSql => {
                Contender::PgRawSql(postgres::RawSql::connect(&config, connections).await?)
            }
            postgres::PgKind::Advisory => {
                Contender::PgAdvisory(postgres::Advisory::connect(&config, connections).await?)
            }
            postgres::PgKind::DistlockTryLock | postgres::PgKind::DistlockLock => {
                let mode = match kind {
                    postgres::PgKind::DistlockTryLock => distlock::Mode::TryLock,
                    _ => distlock::Mode::Lock,
                };
                let backend = PostgresBackend::builder(url)?
                    .connections(connections)
                    .connect()
                    .await?;
                Contender::PgDistlock(distlock::Distlock::new(backend, mode))
            }
        })
    }

    /// Locks `key`, checks the lock was granted, then unlocks it and checks it was freed.
    pub async fn lock_unlock(&self, key: &str) -> Result<(), BenchError> {
        match self {
            Contender::Ping2(client) => client.lock_unlock(key).await,
            Contender::SetNx(client) => client.lock_unlock(key).await,
            Contender::Script(client) => client.lock_unlock(key).await,
            Contender::ScriptCm(client) => client.lock_unlock(key).await,
            Contender::Distlock(client) => client.lock_unlock(key).await,
            #[cfg(feature = "rslock")]
            Contender::Rslock(client) => client.lock_unlock(key).await,
            Contender::ClusterPing2(client) => client.lock_unlock(key).await,
            Contender::ClusterScript(client) => client.lock_unlock(key).await,
            Contender::PgDistlock(client) => client.lock_unlock(key).await,
            Contender::PgRawSql(client) => client.lock_unlock(key).await,
            Contender::PgAdvisory(client) => client.lock_unlock(key).await,
        }
    }

    /// distlock rows: takes `count` watchdog locks on the same locker, held until released by the
    /// caller. Other rows keep no local state, so they get none.
    pub async fn hold_background(
        &self,
        prefix: &str,
        count: usize,
    ) -> Result<Vec<LockGuard<RedisBackend>>, BenchError> {
        match self {
            Contender::Distlock(client) if count > 0 => client.hold(prefix, count).await,
            _ => Ok(Vec::new()),
        }
    }
}

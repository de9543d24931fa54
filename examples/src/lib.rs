//! Shared code of the distlock demos (`cargo run -p distlock-examples --bin <name>`):
//!
//! - `counter`: many tasks, optionally over several processes, increment a Redis counter with a
//!   deliberately non-atomic GET + SET under one lock; the total comes out exact.
//! - `watchdog`: a job that outlives its lease keeps the lock thanks to the watchdog.
//! - `custom_backend`: [`custom_backend::MapBackend`], a backend written against `lock-core`
//!   alone, at work.
//! - `pick_backend`: the same application code under a single-node lock or, built with
//!   `--features redlock`, a RedLock over several nodes.
//!
//! The Redis demos take `--url`; without it they start a private `redis-server` through
//! [`lock_testkit::RedisServer`] (see [`DemoRedis`]).

pub mod custom_backend;

use std::process::ExitCode;

use lock_testkit::{RedisServer, ServerError};

/// The exit code of a demo that could not get a Redis server.
pub const NO_SERVER_EXIT_CODE: u8 = 2;

/// The Redis a demo talks to: the server at a URL given with `--url`, or a private server started
/// for this run and stopped when this value is dropped.
#[derive(Debug)]
pub struct DemoRedis {
    url: String,
    server: Option<RedisServer>,
}

impl DemoRedis {
    /// Uses `url` when given; otherwise starts a private server and says so on stdout.
    ///
    /// # Errors
    ///
    /// When no server could be started: the testkit's error (which says what to install when no
    /// server binary is found) is printed on stderr, and the exit code to end with
    /// ([`NO_SERVER_EXIT_CODE`]) is returned.
    pub fn from_arg(url: Option<String>) -> Result<DemoRedis, ExitCode> {
        if let Some(url) = url {
            return Ok(DemoRedis { url, server: None });
        }
        match RedisServer::start() {
            Ok(server) => {
                println!(
                    "no --url given: started a private server ({}, {}) at {}; it stops when the demo ends",
                    server.version(),
                    server.binary().display(),
                    server.url()
                );
                Ok(DemoRedis {
                    url: server.url(),
                    server: Some(server),
                })
            }
            Err(error) => {
                if let ServerError::BinaryNotFound { .. } = error {
                    eprintln!("error: no --url given and no server to start: {error}");
                    eprintln!("(or pass --url redis://host:port/ to use a running server)");
                } else {
                    eprintln!(
                        "error: no --url given and the private server did not start: {error}"
                    );
                }
                Err(ExitCode::from(NO_SERVER_EXIT_CODE))
            }
        }
    }

    /// The URL to connect to.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether this run started its own server.
    #[must_use]
    pub fn is_private(&self) -> bool {
        self.server.is_some()
    }

    /// A raw connection for reads the lock API does not offer (`HGETALL`, `PTTL`, ...).
    ///
    /// # Errors
    ///
    /// When the URL is bad or the server cannot be reached.
    pub async fn raw_connection(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        raw_connection(&self.url).await
    }
}

/// A raw multiplexed connection to `url`, for plain commands next to the locks.
///
/// # Errors
///
/// When the URL is bad or the server cannot be reached.
pub async fn raw_connection(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

/// Where a demo's locks live: one server, a Redis Cluster, or the primary of a Sentinel
/// service.
#[derive(Debug, Clone)]
pub enum Deployment {
    /// One server at this URL.
    Single(String),
    /// A Redis Cluster, from these seed URLs.
    Cluster(Vec<String>),
    /// The primary of the Sentinel service `service`, through these Sentinel URLs.
    Sentinel {
        /// The Sentinels' URLs.
        sentinels: Vec<String>,
        /// The service name.
        service: String,
    },
}

/// A plain connection next to the locks, for the demo's own data.
#[derive(Clone)]
pub enum RawConnection {
    /// To one server (or a Sentinel service's primary, as found when connecting).
    Single(redis::aio::MultiplexedConnection),
    /// To a Redis Cluster (commands routed by key).
    Cluster(redis::cluster_async::ClusterConnection),
}

impl RawConnection {
    /// Runs `command` and reads its reply as `T`.
    ///
    /// # Errors
    ///
    /// The command's error.
    pub async fn query<T: redis::FromRedisValue>(
        &mut self,
        command: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        match self {
            RawConnection::Single(connection) => command.query_async(connection).await,
            RawConnection::Cluster(connection) => command.query_async(connection).await,
        }
    }
}

impl Deployment {
    /// A locker on this deployment (a new client each call).
    ///
    /// # Errors
    ///
    /// As the backend's `connect`.
    pub async fn locker(&self) -> distlock::Result<distlock::RedisLocker> {
        let backend = match self {
            Deployment::Single(url) => distlock::RedisBackend::connect(url.as_str()).await?,
            Deployment::Cluster(seeds) => {
                distlock::RedisBackend::cluster_builder(seeds.iter().cloned())
                    .connect()
                    .await?
            }
            Deployment::Sentinel { sentinels, service } => {
                distlock::RedisBackend::sentinel_builder(
                    sentinels.iter().cloned(),
                    service.as_str(),
                )
                .connect()
                .await?
            }
        };
        Ok(distlock::Locker::new(backend))
    }

    /// A plain connection for the demo's own data.
    ///
    /// # Errors
    ///
    /// When the deployment cannot be reached.
    pub async fn raw(&self) -> redis::RedisResult<RawConnection> {
        match self {
            Deployment::Single(url) => raw_connection(url).await.map(RawConnection::Single),
            Deployment::Cluster(seeds) => redis::cluster::ClusterClient::new(seeds.clone())?
                .get_async_connection()
                .await
                .map(RawConnection::Cluster),
            Deployment::Sentinel { sentinels, service } => {
                let mut sentinel = redis::sentinel::SentinelClient::build(
                    sentinels.clone(),
                    service.clone(),
                    None,
                    redis::sentinel::SentinelServerType::Master,
                )?;
                sentinel
                    .get_async_connection()
                    .await
                    .map(RawConnection::Single)
            }
        }
    }

    /// The command-line flags that name this deployment (for worker processes).
    #[must_use]
    pub fn flags(&self) -> Vec<String> {
        match self {
            Deployment::Single(url) => vec!["--url".into(), url.clone()],
            Deployment::Cluster(seeds) => vec!["--cluster".into(), seeds.join(",")],
            Deployment::Sentinel { sentinels, service } => vec![
                "--sentinel".into(),
                sentinels.join(","),
                "--service".into(),
                service.clone(),
            ],
        }
    }
}

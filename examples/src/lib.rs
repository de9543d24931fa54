//! Shared code of the distlock demos (`cargo run -p distlock-examples --bin <name>`):
//!
//! - `counter`: many tasks, optionally over several processes, increment a Redis counter with a
//!   deliberately non-atomic GET + SET under one lock; the total comes out exact, also through
//!   server stalls (its GET and SET are tried again while the lock is held).
//! - `watchdog`: a job that outlives its lease keeps the lock thanks to the watchdog.
//! - `custom_backend`: [`custom_backend::MapBackend`], a backend written against `lock-core`
//!   alone, at work.
//! - `pick_backend`: the same application code under a single-node lock or, built with
//!   `--features redlock`, a RedLock over several nodes.
//! - `metrics`: the `metrics` facade with a Prometheus exporter, scraped while locks are taken.
//! - `semaphore`: processes sharing a counting semaphore of `--permits`.
//! - `latch`: processes waiting on a countdown latch until the others count it down.
//! - `rwlock`: readers together, writers alone, on one read-write lock.
//! - `fairlock`: processes granted a fair lock in the order they asked.
//! - `leader`: a process campaigns for a leader election, or observes it.
//!
//! The Redis demos take `--url`; without it they start a private `redis-server` through
//! [`lock_testkit::RedisServer`] (see [`DemoRedis`]).

pub mod custom_backend;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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

/// The TLS files of a demo on `rediss://` servers (`--tls-ca`, `--tls-cert`, `--tls-key`), read
/// once; applied to the locks and to the demo's own connections, in every deployment.
///
/// ```no_run
/// use distlock_examples::{DemoTls, Deployment};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let tls = DemoTls::from_files(Some("ca.crt".into()), None, None)?;
/// let deployment = Deployment::Single("rediss://127.0.0.1:6380/".into());
/// let locker = deployment
///     .locker(&tls, distlock::redis::DEFAULT_COMMAND_TIMEOUT)
///     .await?;
/// # let _ = locker;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct DemoTls {
    /// The CA bundle.
    ca: Option<PemFile>,
    /// The client certificate and its key.
    identity: Option<(PemFile, PemFile)>,
}

/// A PEM file's path (for worker processes' flags) and contents.
type PemFile = (PathBuf, Vec<u8>);

impl DemoTls {
    /// Reads the CA bundle `ca` and the client certificate `cert` with its key `key` (PEM
    /// files; any may be absent, `cert` and `key` go together). Also installs ring as the
    /// process's rustls crypto provider (unless one is installed), for the demo's own
    /// `rediss://` connections, which redis-rs makes without distlock.
    ///
    /// # Errors
    ///
    /// A file that cannot be read, or only one of `cert` and `key`.
    pub fn from_files(
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> std::io::Result<DemoTls> {
        // `Err` means a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let read = |path: PathBuf| std::fs::read(&path).map(|bytes| (path, bytes));
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
            (None, None) => None,
            _ => {
                return Err(std::io::Error::other(
                    "a client certificate needs its key: give both --tls-cert and --tls-key",
                ));
            }
        };
        Ok(DemoTls {
            ca: ca.map(read).transpose()?,
            identity,
        })
    }

    /// Whether any TLS file was given.
    #[must_use]
    pub fn is_set(&self) -> bool {
        self.ca.is_some() || self.identity.is_some()
    }

    /// `builder` with the CA bundle and the client certificate.
    #[must_use]
    pub fn apply(
        &self,
        mut builder: distlock::RedisBackendBuilder,
    ) -> distlock::RedisBackendBuilder {
        if let Some((_, ca)) = &self.ca {
            builder = builder.tls_ca_pem(ca.clone());
        }
        if let Some(((_, cert), (_, key))) = &self.identity {
            builder = builder.tls_client_identity(cert.clone(), key.clone());
        }
        builder
    }

    /// The same for redis-rs's own clients (`None`: no TLS file given).
    #[must_use]
    pub fn certificates(&self) -> Option<redis::TlsCertificates> {
        self.is_set().then(|| redis::TlsCertificates {
            client_tls: self.identity.as_ref().map(|((_, cert), (_, key))| {
                redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }
            }),
            root_cert: self.ca.as_ref().map(|(_, ca)| ca.clone()),
        })
    }

    /// The command-line flags that name these files (for worker processes).
    #[must_use]
    pub fn flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        let mut flag = |name: &str, path: &PathBuf| {
            flags.push(name.to_owned());
            flags.push(path.display().to_string());
        };
        if let Some((path, _)) = &self.ca {
            flag("--tls-ca", path);
        }
        if let Some(((cert, _), (key, _))) = &self.identity {
            flag("--tls-cert", cert);
            flag("--tls-key", key);
        }
        flags
    }
}

/// A plain connection next to the locks, for the demo's own data.
///
/// A call that times out or finds the connection lost fails once; on one server and on a
/// cluster the next call on the same value goes through again (a new connection where the old
/// one was lost), so the caller can retry it (see the `counter` demo's `retry_while_held`).
/// Behind Sentinels the connection stays on the primary found when connecting: a failover
/// fails the demo's run (the locks themselves follow the new primary).
#[derive(Clone)]
pub enum RawConnection {
    /// To one server; reconnects by itself after a lost connection.
    Single(redis::aio::ConnectionManager),
    /// To a Sentinel service's primary, as found when connecting (a lost connection stays
    /// lost: connect again to find the primary).
    Primary(redis::aio::MultiplexedConnection),
    /// To a Redis Cluster (commands routed by key; reconnects by itself).
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
            RawConnection::Primary(connection) => command.query_async(connection).await,
            RawConnection::Cluster(connection) => command.query_async(connection).await,
        }
    }
}

impl Deployment {
    /// A locker on this deployment (a new client each call), with the TLS files `tls` and
    /// `command_timeout` for each call to the server.
    ///
    /// # Errors
    ///
    /// As the backend's `connect` (a timeout outside 1 ms ..= 1 h is refused there).
    pub async fn locker(
        &self,
        tls: &DemoTls,
        command_timeout: Duration,
    ) -> distlock::Result<distlock::RedisLocker> {
        self.locker_of_kind(tls, command_timeout, distlock::LockKind::Reentrant)
            .await
    }

    /// [`locker`](Self::locker) for the lock kind `kind` (`LockKind::Fast` runs where the
    /// server has no scripts but native compare-and-set, see `docs/deployments.md`).
    ///
    /// # Errors
    ///
    /// As the backend's `connect`.
    pub async fn locker_of_kind(
        &self,
        tls: &DemoTls,
        command_timeout: Duration,
        kind: distlock::LockKind,
    ) -> distlock::Result<distlock::RedisLocker> {
        let builder = match self {
            Deployment::Single(url) => distlock::RedisBackend::builder(url.as_str()),
            Deployment::Cluster(seeds) => distlock::RedisBackend::builder(
                distlock::RedisTarget::cluster(seeds.iter().cloned()),
            ),
            Deployment::Sentinel { sentinels, service } => distlock::RedisBackend::builder(
                distlock::RedisTarget::sentinel(sentinels.iter().cloned(), service.as_str()),
            ),
        };
        let builder = tls
            .apply(builder)
            .command_timeout(command_timeout)
            .lock_kind(kind);
        Ok(distlock::Locker::new(builder.connect().await?))
    }

    /// A plain connection for the demo's own data, with the TLS files `tls` and
    /// `response_timeout` for each reply.
    ///
    /// Give it the locks' command timeout: redis-rs's own default (500 ms) is much shorter than
    /// the lock backend's ([`distlock::redis::DEFAULT_COMMAND_TIMEOUT`]), so a server stall the
    /// locks ride through would fail the data calls made under them.
    ///
    /// # Errors
    ///
    /// When the deployment cannot be reached.
    pub async fn raw(
        &self,
        tls: &DemoTls,
        response_timeout: Duration,
    ) -> redis::RedisResult<RawConnection> {
        let certificates = tls.certificates();
        let client = |url: &str| {
            let client = match certificates.clone() {
                Some(certificates) => redis::Client::build_with_tls(url, certificates)?,
                None => redis::Client::open(url)?,
            };
            // The data connection does not name itself (`CLIENT SETINFO`): a proxy such as
            // twemproxy hangs up on `CLIENT`.
            let info = client.get_connection_info().clone();
            let settings = info.redis_settings().clone().set_skip_set_lib_name();
            redis::Client::open(info.set_redis_settings(settings))
        };
        match self {
            Deployment::Single(url) => {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_response_timeout(Some(response_timeout));
                redis::aio::ConnectionManager::new_with_config(client(url)?, config)
                    .await
                    .map(RawConnection::Single)
            }
            Deployment::Cluster(seeds) => {
                let mut builder = redis::cluster::ClusterClientBuilder::new(seeds.clone())
                    .response_timeout(response_timeout);
                if let Some(certificates) = certificates {
                    builder = builder.certs(certificates);
                }
                builder
                    .build()?
                    .get_async_connection()
                    .await
                    .map(RawConnection::Cluster)
            }
            Deployment::Sentinel { sentinels, service } => {
                let mut sentinel = sentinel_client(sentinels, service, certificates)?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_response_timeout(Some(response_timeout));
                sentinel
                    .get_async_connection_with_config(&config)
                    .await
                    .map(RawConnection::Primary)
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

/// A client of the primary of Sentinel service `service`, through the Sentinels at `urls`.
///
/// `rediss://` Sentinels: redis-rs's `SentinelClientBuilder`, the only way to give the data
/// nodes certificates, with `certificates` for the Sentinels and the data nodes (verified as
/// strictly as the Sentinels' URLs say: `#insecure`) and the Sentinels' username and password
/// from their URLs (the builder takes addresses only, one set of credentials for all). Plain
/// `redis://` Sentinels: their URLs as they are, and no TLS file applies (the builder refuses
/// certificates for them). lock-redis builds its own Sentinel client the same way, out of
/// reach (crate-private), hence this copy for the demo's own connections.
fn sentinel_client(
    urls: &[String],
    service: &str,
    certificates: Option<redis::TlsCertificates>,
) -> redis::RedisResult<redis::sentinel::SentinelClient> {
    use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
    let invalid = |reason: &'static str| {
        redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, reason))
    };
    let infos = urls
        .iter()
        .map(|url| redis::IntoConnectionInfo::into_connection_info(url.as_str()))
        .collect::<redis::RedisResult<Vec<_>>>()?;
    let secure =
        |info: &redis::ConnectionInfo| matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
    if !infos.iter().any(secure) {
        return SentinelClient::build(infos, service, None, SentinelServerType::Master);
    }
    if !infos.iter().all(secure) {
        return Err(invalid(
            "the Sentinel URLs mix redis:// and rediss://: give all of them one scheme",
        ));
    }
    let first = infos[0].redis_settings();
    if infos.iter().any(|info| {
        let settings = info.redis_settings();
        settings.username() != first.username() || settings.password() != first.password()
    }) {
        return Err(invalid(
            "over TLS every Sentinel URL must carry the same username and password",
        ));
    }
    let insecure = infos.iter().any(|info| {
        matches!(
            info.addr(),
            redis::ConnectionAddr::TcpTls { insecure: true, .. }
        )
    });
    let mut builder = SentinelClientBuilder::new(
        infos.iter().map(|info| info.addr().clone()),
        service,
        SentinelServerType::Master,
    )?
    .set_client_to_redis_tls_mode(if insecure {
        redis::TlsMode::Insecure
    } else {
        redis::TlsMode::Secure
    });
    if let Some(username) = first.username() {
        builder = builder.set_client_to_sentinel_username(username);
    }
    if let Some(password) = first.password() {
        builder = builder.set_client_to_sentinel_password(password);
    }
    if let Some(certificates) = certificates {
        builder = builder
            .set_client_to_sentinel_certificates(certificates.clone())
            .set_client_to_redis_certificates(certificates);
    }
    builder.build()
}

// The Rust blocks of the pages under `docs/` are compiled as doctests of this crate, so they
// cannot drift from the API: one item per page that has any (`cargo test -p distlock-examples
// --doc --all-features`). Blocks that need a server are defined but never called, or `no_run`.
// This crate is not published, so the paths into the repository hold.
#[cfg(doctest)]
mod doc_pages {
    #[doc = include_str!("../../docs/deployments.md")]
    pub struct DeploymentsPage;
    #[doc = include_str!("../../docs/design.md")]
    pub struct DesignPage;
    #[doc = include_str!("../../docs/election.md")]
    pub struct ElectionPage;
    #[doc = include_str!("../../docs/fair-lock.md")]
    pub struct FairLockPage;
    #[doc = include_str!("../../docs/latch.md")]
    pub struct LatchPage;
    #[doc = include_str!("../../docs/permits.md")]
    pub struct PermitsPage;
    #[doc = include_str!("../../docs/postgres.md")]
    pub struct PostgresPage;
    #[doc = include_str!("../../docs/rwlock.md")]
    pub struct RwLockPage;
    #[doc = include_str!("../../docs/safety.md")]
    pub struct SafetyPage;
    #[doc = include_str!("../../docs/semaphore.md")]
    pub struct SemaphorePage;
    #[doc = include_str!("../../docs/writing-a-backend.md")]
    pub struct WritingABackendPage;
}

//! Where the locks live, as every command takes it: one server (`--url`, or `DISTLOCK_URL`), a
//! Redis Cluster (`--cluster`), the primary of a Sentinel service (`--sentinel`, `--service`),
//! with TLS files and timeouts; or a PostgreSQL database (`--url postgres://…`).

use std::path::PathBuf;
use std::time::Duration;

use distlock::{
    Error, LockKind, Locker, PostgresBackend, PostgresLocker, RedisBackend, RedisBackendBuilder,
    RedisLocker,
};

/// The connection flags shared by every command.
#[derive(Debug, clap::Args)]
pub struct ConnectionArgs {
    /// The server: `redis://[user:password@]host:port[/db]`, `rediss://…` for TLS, or a
    /// PostgreSQL database: `postgres://[user[:password]@]host[:port]/db`.
    #[arg(
        long,
        env = "DISTLOCK_URL",
        default_value = "redis://127.0.0.1:6379/",
        global = true
    )]
    url: String,
    /// A Redis Cluster instead: URLs of some of its nodes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "sentinel",
        global = true
    )]
    cluster: Vec<String>,
    /// A Sentinel service instead: the Sentinels' URLs, comma-separated (with `--service`).
    #[arg(long, value_delimiter = ',', requires = "service", global = true)]
    sentinel: Vec<String>,
    /// The Sentinel service (its primary holds the locks).
    #[arg(long, global = true)]
    service: Option<String>,
    /// TLS: the CA certificates (PEM) to trust instead of the system's web roots.
    #[arg(long, value_name = "FILE", global = true)]
    tls_ca: Option<PathBuf>,
    /// TLS: this client's certificate chain (PEM), for servers that ask for one.
    #[arg(long, value_name = "FILE", requires = "tls_key", global = true)]
    tls_cert: Option<PathBuf>,
    /// TLS: the private key (PEM) of `--tls-cert`.
    #[arg(long, value_name = "FILE", requires = "tls_cert", global = true)]
    tls_key: Option<PathBuf>,
    /// The lock's layout: `reentrant` (Redisson's `RLock`, a hash) or `fast` (a string key).
    #[arg(long, value_enum, default_value = "reentrant", global = true)]
    kind: Kind,
    /// How long one call to the server may take before it is given up.
    #[arg(long, value_parser = humantime::parse_duration, global = true)]
    command_timeout: Option<Duration>,
}

/// The lock kinds, by their command-line names.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Kind {
    /// Redisson's `RLock` layout: a hash of owners and hold counts.
    Reentrant,
    /// A string key holding its owner (`SET NX PX`).
    Fast,
}

impl ConnectionArgs {
    /// The PostgreSQL database `--url` names (`postgres://` or `postgresql://`), when it names
    /// one and no Redis Cluster or Sentinel is given.
    pub fn postgres_url(&self) -> Option<&str> {
        let postgres = ["postgres://", "postgresql://"]
            .iter()
            .any(|scheme| self.url.starts_with(scheme));
        (postgres && self.cluster.is_empty() && self.sentinel.is_empty()).then_some(&self.url)
    }

    /// A locker over the PostgreSQL database `url` (the schema must be installed: `distlock
    /// postgres install`), with `--command-timeout` as its call timeout.
    ///
    /// # Errors
    ///
    /// As [`distlock::PostgresBackendBuilder::connect`].
    pub async fn postgres_locker(&self, url: &str) -> distlock::Result<PostgresLocker> {
        let mut builder = PostgresBackend::builder(url)?;
        if let Some(timeout) = self.command_timeout {
            builder = builder.call_timeout(timeout);
        }
        Ok(Locker::new(builder.connect().await?))
    }

    /// A locker over the deployment these flags name.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a TLS file that cannot be read, else as the backend's `connect`.
    pub async fn locker(&self) -> distlock::Result<RedisLocker> {
        self.locker_of(self.kind).await
    }

    /// A locker over the deployment these flags name, keeping locks of `kind`.
    ///
    /// # Errors
    ///
    /// As [`ConnectionArgs::locker`].
    pub async fn locker_of(&self, kind: Kind) -> distlock::Result<RedisLocker> {
        Ok(Locker::new(self.builder_of(kind)?.connect().await?))
    }

    /// The backend builder these flags describe, with the lock kind `--kind` names.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a TLS file that cannot be read.
    pub fn builder(&self) -> distlock::Result<RedisBackendBuilder> {
        self.builder_of(self.kind)
    }

    /// The backend builder these flags describe, keeping locks of `kind`.
    fn builder_of(&self, kind: Kind) -> distlock::Result<RedisBackendBuilder> {
        let mut builder = if !self.cluster.is_empty() {
            RedisBackend::builder(distlock::RedisTarget::cluster(self.cluster.iter().cloned()))
        } else if !self.sentinel.is_empty() {
            let service = self.service.clone().unwrap_or_default();
            RedisBackend::builder(distlock::RedisTarget::sentinel(
                self.sentinel.iter().cloned(),
                service,
            ))
        } else {
            RedisBackend::builder(self.url.as_str())
        };
        builder = builder.lock_kind(match kind {
            Kind::Reentrant => LockKind::Reentrant,
            Kind::Fast => LockKind::Fast,
        });
        if let Some(timeout) = self.command_timeout {
            builder = builder.command_timeout(timeout);
        }
        self.with_tls(builder)
    }

    fn with_tls(&self, mut builder: RedisBackendBuilder) -> distlock::Result<RedisBackendBuilder> {
        if let Some(ca) = &self.tls_ca {
            builder = builder.tls_ca_pem(read(ca)?);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            builder = builder.tls_client_identity(read(cert)?, read(key)?);
        }
        Ok(builder)
    }
}

fn read(path: &PathBuf) -> distlock::Result<Vec<u8>> {
    std::fs::read(path).map_err(|error| Error::InvalidConfig {
        reason: format!("cannot read {}: {error}", path.display()),
    })
}

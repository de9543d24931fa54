//! Settings of a [`PostgresBackend`] and connecting it.

use std::time::Duration;

use lock_core::{Error, Result};
use tokio_postgres::Config;

use crate::backend::{Inner, PostgresBackend};
use crate::listener::Listener;
use crate::pool::Pool;
use crate::session::SessionSettings;

/// Settings of a [`PostgresBackend`]; [`connect`](Self::connect) makes it.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_postgres::PostgresBackend;
///
/// let backend = PostgresBackend::builder("postgres://app@127.0.0.1/app")?
///     .connections(8)
///     .call_timeout(Duration::from_secs(2))
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `connect`"]
pub struct PostgresBackendBuilder {
    config: Config,
    connections: usize,
    call_timeout: Duration,
    poll_interval: Duration,
    listen: bool,
    install_schema: bool,
}

/// The default call timeout: a step without an answer this long fails with an ambiguous
/// [`Error::Timeout`].
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(2);

impl PostgresBackend {
    /// Settings for a backend on the database `url` names (`postgres://user:password@host:port/db`,
    /// or libpq's `key=value` form), checked here, before any I/O.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when `url` does not parse.
    pub fn builder(url: &str) -> Result<PostgresBackendBuilder> {
        let config: Config =
            url.parse()
                .map_err(|error: tokio_postgres::Error| Error::InvalidConfig {
                    reason: format!("not a PostgreSQL connection string: {error}"),
                })?;
        Ok(PostgresBackendBuilder::from_config(config))
    }

    /// A backend on `url` with the default settings.
    ///
    /// # Errors
    ///
    /// As [`PostgresBackend::builder`] and [`PostgresBackendBuilder::connect`].
    pub async fn connect(url: &str) -> Result<PostgresBackend> {
        Self::builder(url)?.connect().await
    }
}

impl PostgresBackendBuilder {
    /// Settings for a backend on the database `config` names (tokio-postgres's connection
    /// settings, for what a URL cannot say).
    pub fn from_config(mut config: Config) -> Self {
        if config.get_application_name().is_none() {
            config.application_name("distlock");
        }
        PostgresBackendBuilder {
            config,
            connections: 4,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            poll_interval: Duration::from_secs(1),
            listen: true,
            install_schema: false,
        }
    }

    /// How many connections the steps use (default 4, at least 1); the notification
    /// connection comes on top. A lock name always uses the same one.
    pub fn connections(mut self, connections: usize) -> Self {
        self.connections = connections.max(1);
        self
    }

    /// How long a step may go without an answer (default [`DEFAULT_CALL_TIMEOUT`]). The server
    /// gives up on a statement (`statement_timeout`, `lock_timeout`) a quarter earlier, so most
    /// stalls end with a definite error.
    pub fn call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }

    /// How often waiters look again while release notifications are down (default 1 s).
    pub fn poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// Whether waiters are woken by release notifications (`LISTEN`, one more connection;
    /// the default) or poll every [`poll_interval`](Self::poll_interval) (for a connection
    /// pooler in transaction mode, which cannot keep a `LISTEN`).
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = listen;
        self
    }

    /// Whether [`connect`](Self::connect) first installs (or upgrades) the schema
    /// ([`install_schema`](crate::install_schema)); off by default, for roles that may not
    /// create it.
    pub fn install_schema(mut self, install: bool) -> Self {
        self.install_schema = install;
        self
    }

    /// Connects: installs the schema if asked, then one connection (checking the address,
    /// the credentials and the schema's version); the others connect when first needed.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for settings out of range (checked first); the connection's
    /// errors; [`Error::Backend`] when the schema is missing or of another version.
    pub async fn connect(self) -> Result<PostgresBackend> {
        if self.call_timeout < Duration::from_millis(10) || self.poll_interval.is_zero() {
            return Err(Error::InvalidConfig {
                reason: "call_timeout must be at least 10 ms and poll_interval above zero"
                    .to_owned(),
            });
        }
        if self.install_schema {
            crate::install_schema(&self.config).await?;
        }
        let settings = SessionSettings {
            statement_timeout: self.call_timeout * 3 / 4,
        };
        let pool = Pool::new(
            self.config.clone(),
            settings,
            self.connections,
            self.call_timeout,
        );
        pool.warm_up().await?;
        let node = node_of(&self.config);
        let listener = self
            .listen
            .then(|| Listener::start(self.config, self.poll_interval));
        Ok(PostgresBackend::from_inner(Inner {
            client_id: lock_core::new_client_id(),
            pool,
            listener,
            poll_interval: self.poll_interval,
            node,
        }))
    }
}

/// The server a configuration names, as spans show it: `host:port` of its first host (a Unix
/// socket's directory for a socket).
fn node_of(config: &Config) -> String {
    use tokio_postgres::config::Host;
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first() {
        Some(Host::Tcp(host)) => format!("{host}:{port}"),
        #[cfg(unix)]
        Some(Host::Unix(path)) => format!("{}:{port}", path.display()),
        None => format!("localhost:{port}"),
    }
}

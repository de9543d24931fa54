//! One connection to the server with the statements of the lock prepared on it.

use std::collections::HashMap;
use std::time::Duration;

use lock_core::{Error, Result};
use tokio_postgres::{Client, Config, NoTls, Statement};

use crate::error::{NO_SCHEMA, classify};
use crate::schema::SCHEMA_VERSION;

/// The lock's statements, prepared once per connection so that each step is one round trip
/// (bind and execute).
pub(crate) struct Statements {
    pub(crate) acquire: Statement,
    pub(crate) release: Statement,
    pub(crate) abandon: Statement,
    pub(crate) force_release: Statement,
    pub(crate) inspect: Statement,
}

/// A connection, who it is on the server (to fence it), and its prepared statements.
pub(crate) struct Session {
    pub(crate) client: Client,
    /// The server process serving it and when that process started: together they name it
    /// even after the pid is reused.
    pub(crate) pid: i32,
    pub(crate) backend_start: std::time::SystemTime,
    pub(crate) statements: Statements,
    /// Statements of the lock family, prepared the first time each is used on this connection
    /// (most backends use few of them, and a prepare is a round trip).
    prepared: std::sync::Mutex<HashMap<&'static str, Statement>>,
}

/// The session settings every connection gets.
pub(crate) struct SessionSettings {
    /// The server ends a statement that runs (or waits for a row) this long with a definite
    /// error, before the client's own timeout makes the outcome unknown.
    pub(crate) statement_timeout: Duration,
}

impl Session {
    /// Connects, applies `settings`, checks the schema's version and prepares the statements.
    pub(crate) async fn connect(config: &Config, settings: &SessionSettings) -> Result<Self> {
        let (client, connection) = config.connect(NoTls).await.map_err(classify)?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "a PostgreSQL connection ended");
            }
        });
        let timeout_ms = settings.statement_timeout.as_millis().max(1);
        client
            .batch_execute(&format!(
                "SET statement_timeout = {timeout_ms}; SET lock_timeout = {timeout_ms}; \
                 SET idle_in_transaction_session_timeout = {timeout_ms}"
            ))
            .await
            .map_err(classify)?;
        let row = client
            .query_one(
                "SELECT pid, backend_start, \
                        (SELECT max(version) FROM distlock.schema_version) AS version \
                   FROM pg_stat_activity WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .map_err(classify)?;
        let pid: i32 = row.get(0);
        let backend_start: std::time::SystemTime = row.get(1);
        let version: Option<i32> = row.get(2);
        if version != Some(SCHEMA_VERSION) {
            return Err(Error::Backend(
                format!(
                    "{NO_SCHEMA}: found version {}, this client needs {SCHEMA_VERSION}",
                    version.map_or_else(|| "none".to_owned(), |v| v.to_string())
                )
                .into(),
            ));
        }
        let statements = Statements::prepare(&client).await?;
        Ok(Session {
            client,
            pid,
            backend_start,
            statements,
            prepared: std::sync::Mutex::default(),
        })
    }

    /// `sql` prepared on this connection: at its first use a round trip, then from the cache.
    ///
    /// # Errors
    ///
    /// The server's answer to the prepare (a statement naming a function the schema lacks).
    pub(crate) async fn prepared(
        &self,
        sql: &'static str,
    ) -> std::result::Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.cache().get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).await?;
        self.cache().insert(sql, statement.clone());
        Ok(statement)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, Statement>> {
        // The map is only read and written whole under the lock: a panic cannot leave it torn.
        self.prepared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Statements {
    async fn prepare(client: &Client) -> Result<Self> {
        let prepare =
            |sql: &'static str| async move { client.prepare(sql).await.map_err(classify) };
        Ok(Statements {
            acquire: prepare(
                "SELECT holds, token, ttl_ms FROM distlock.acquire($1, $2, $3, $4, $5)",
            )
            .await?,
            release: prepare("SELECT distlock.release($1, $2, $3)").await?,
            abandon: prepare("SELECT distlock.abandon($1, $2, $3)").await?,
            force_release: prepare("SELECT distlock.force_release($1)").await?,
            inspect: prepare("SELECT owner, holds, ttl_ms FROM distlock.inspect($1)").await?,
        })
    }
}

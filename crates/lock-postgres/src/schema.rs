//! The tables and functions the backend needs in the database, and their installation.

use lock_core::Result;
use tokio_postgres::{Config, NoTls};

use crate::error::classify;

/// The schema's SQL: every table and function of the `distlock` schema, idempotent, for
/// operators who install it themselves. It is the files of this crate's `sql/` directory (one
/// per primitive) in the order of their names; [`install_schema`] runs the same text, and
/// `distlock-cli postgres schema` prints it:
///
/// ```text
/// distlock-cli postgres schema | psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -1 -f -
/// ```
pub const SCHEMA_SQL: &str = concat!(
    include_str!("../sql/00-schema.sql"),
    include_str!("../sql/10-lock.sql"),
    include_str!("../sql/20-fair.sql"),
    include_str!("../sql/30-read-write.sql"),
    include_str!("../sql/40-semaphore.sql"),
    include_str!("../sql/50-permits.sql"),
    include_str!("../sql/60-latch.sql"),
    include_str!("../sql/70-election.sql"),
    include_str!("../sql/80-names.sql"),
    include_str!("../sql/99-version.sql"),
);

/// The version of [`SCHEMA_SQL`]. A backend connects only to a database whose schema has this
/// version, and the SQL refuses to replace a newer one.
pub const SCHEMA_VERSION: i32 = 1;

/// An advisory lock key (`'distlock'` in ASCII) that concurrent installers take turns on.
const INSTALL_LOCK: i64 = 0x0064_6973_746c_6f63;

/// Installs (or upgrades) the `distlock` schema in the database `config` connects to, in one
/// transaction; concurrent installers take turns. Running it again changes nothing.
///
/// The role needs `CREATE` on the database (for the schema) the first time; afterwards only
/// the privileges listed in `docs/postgres.md`.
///
/// # Errors
///
/// The connection's errors, a role without the privileges, and
/// [`Error::Backend`](lock_core::Error::Backend) when the database has a newer schema.
///
/// # Cancel safety
///
/// The transaction either committed or rolled back; a dropped call leaves one or the other.
pub async fn install_schema(config: &Config) -> Result<()> {
    let (client, connection) = config.connect(NoTls).await.map_err(classify)?;
    let driver = tokio::spawn(connection);
    // One simple-protocol query: its statements run as one transaction, and the advisory lock
    // is held until it ends.
    let result = client
        .batch_execute(&format!(
            "SELECT pg_advisory_xact_lock({INSTALL_LOCK});\n{SCHEMA_SQL}"
        ))
        .await
        .map_err(classify);
    drop(client);
    let _ = driver.await;
    result
}

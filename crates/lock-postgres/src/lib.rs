//! distlock's locks on PostgreSQL.
//!
//! [`PostgresBackend`] implements distlock's lock contract ([`lock_core::LockBackend`]) on a
//! PostgreSQL database (14 or newer): a `Locker` over it gives the same guards, watchdog,
//! reentrancy, fencing tokens, waiting and `lost()` signal as over Redis. Each step is one
//! statement calling a function of the `distlock` schema; leases are judged by the server's
//! clock; releases wake waiters through `LISTEN`/`NOTIFY`.
//!
//! The schema is installed by [`install_schema`] (or the builder's
//! [`install_schema`](PostgresBackendBuilder::install_schema)), or by an operator from
//! [`SCHEMA_SQL`] (the `sql/` directory of this crate). `docs/postgres.md` in the repository
//! describes the layout, what is guaranteed (and how replication changes it), and the
//! privileges the role needs.
//!
//! ```no_run
//! # async fn demo() -> lock_core::Result<()> {
//! use lock_core::Locker;
//! use lock_postgres::PostgresBackend;
//!
//! let locker = Locker::new(PostgresBackend::connect("postgres://app@127.0.0.1/app").await?);
//! let guard = locker.lock("nightly-report").await?;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

mod backend;
mod builder;
mod election;
mod error;
mod fair;
mod key;
mod latch;
mod listener;
mod names;
mod permits;
mod pool;
mod read_write;
mod schema;
mod semaphore;
mod session;
pub mod telemetry;

pub use backend::PostgresBackend;
pub use builder::{DEFAULT_CALL_TIMEOUT, PostgresBackendBuilder};
pub use election::PostgresCampaignSide;
pub use fair::PostgresFairSide;
pub use names::NameList;
pub use permits::PostgresPermitSide;
pub use read_write::{PostgresReadSide, PostgresWriteSide};
pub use schema::{SCHEMA_SQL, SCHEMA_VERSION, install_schema};
/// tokio-postgres's connection settings, as [`install_schema`] and
/// [`PostgresBackendBuilder::from_config`] take them (parsed from a URL with `str::parse`).
pub use tokio_postgres::Config;

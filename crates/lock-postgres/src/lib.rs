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
//! [`SCHEMA_SQL`] (`sql/schema.sql` in this crate). `docs/postgres.md` in the repository
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
mod error;
mod key;
mod listener;
mod pool;
mod schema;
mod session;

pub use backend::PostgresBackend;
pub use builder::{DEFAULT_CALL_TIMEOUT, PostgresBackendBuilder};
pub use schema::{SCHEMA_SQL, SCHEMA_VERSION, install_schema};

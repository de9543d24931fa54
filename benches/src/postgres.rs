//! W1P, W2P and W3P: W1 (`uncontended-postgres`), W2 (`distinct-names-postgres`) and W3
//! (`handoffs-postgres`) on PostgreSQL, the same loops (`w1.rs`, `w2.rs`, `w3.rs`) with other
//! rows, on a throw-away server (`lock_testkit::PostgresServer`: `fsync` and
//! `synchronous_commit` off, `pg_stat_statements` loaded) or the database of `--postgres-url`.
//! The schema is installed first (`lock_postgres::install_schema`).
//!
//! Rows (`--pg-contenders`, see `contenders/postgres.rs`):
//! - `distlock-lock` / `distlock-try_lock`: `Locker<PostgresBackend>` with `--pg-connections`
//!   connections (the builder's `connections(n)`) and its `LISTEN` connection;
//! - `raw-sql`: the backend's statements (`distlock.acquire`, `distlock.release`) with the same
//!   parameters on a bare tokio-postgres client of as many connections, a name on the same
//!   connection as in the backend: the ceiling of what the library could reach with its SQL;
//! - `advisory`: `pg_try_advisory_lock` + `pg_advisory_unlock` on a bare client of as many
//!   connections: the floor of what PostgreSQL itself allows (no lease, no fencing).
//!
//! In W3P the waiting differs: `distlock-lock` is woken by its `LISTEN` connection, `raw-sql`
//! tries again every `--w3p-retry-ms`, each `advisory` task blocks in `pg_advisory_lock` on a
//! connection of its own, and `select1` (a prepared `SELECT 1` on the probe's connection) takes
//! the place of `ping`. `distlock-try_lock` does not wait: it has no W3P row.
//!
//! The server columns count statements by the function they call (`pg_stat_statements`:
//! `req/op` is statements per op, each one round trip) and the server processes' CPU (when the
//! server runs on this machine); `reads` is not measured (0).

use std::time::Duration;

use lock_core::Locker;
use lock_postgres::PostgresBackend;
use lock_testkit::PostgresServer;

use crate::contenders::postgres::{Advisory, PgKind, RawSql};
use crate::contenders::{BenchError, Contender};
use crate::measurement::{Measurement, Metric, Ratio};
use crate::probe::Probe;
use crate::w3;

/// The W3P label, as its rows and ratios are labelled.
const W3P: &str = "W3P";

/// The settings of W1P, W2P and W3P on the command line (their loops take W1's, W2's and W3's
/// flags).
#[derive(Clone, Debug, clap::Args)]
#[group(id = "postgres")]
pub struct Args {
    /// Use this PostgreSQL database (`postgres://user@host:port/db`) instead of a throw-away
    /// server. The schema is installed there (the role needs `CREATE` the first time);
    /// statements are counted only if the server loads `pg_stat_statements`.
    #[arg(long)]
    pub postgres_url: Option<String>,
    /// Connections of every row: the distlock backend's `connections(n)` (its `LISTEN`
    /// connection on top), and the pool of the bare clients of `raw-sql` and `advisory` (W3P:
    /// each `advisory` task has one of its own).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    pub pg_connections: u64,
    /// Rows to run (default: all).
    #[arg(long, value_delimiter = ',')]
    pub pg_contenders: Option<Vec<PgKind>>,
    /// W3P: `raw-sql`'s delay in ms before it tries again while the lock is held.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    pub w3p_retry_ms: u64,
}

impl Args {
    /// The rows asked for, in the order they run.
    fn kinds(&self) -> Vec<PgKind> {
        self.pg_contenders
            .clone()
            .unwrap_or_else(|| PgKind::ALL.to_vec())
    }

    /// `--pg-connections` as a count.
    fn connections(&self) -> usize {
        usize::try_from(self.pg_connections).unwrap_or(usize::MAX)
    }
}

/// The database W1P–W3P run on: a throw-away server (stopped when dropped) or
/// `--postgres-url`'s.
pub struct Database {
    /// `None` with `--postgres-url`.
    server: Option<PostgresServer>,
    url: String,
}

impl Database {
    /// `--postgres-url`'s database, or a throw-away server started here with
    /// `pg_stat_statements` loaded. Blocks until the server answers: call it before the
    /// runtime.
    pub fn start(args: &Args) -> Result<Self, BenchError> {
        if let Some(url) = &args.postgres_url {
            return Ok(Database {
                server: None,
                url: url.clone(),
            });
        }
        let mut server = PostgresServer::start()?;
        // Counting each row's statements needs the library loaded when the server starts.
        server.psql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")?;
        server.restart()?;
        let url = server.url();
        Ok(Database {
            server: Some(server),
            url,
        })
    }
}

/// The database once ready: the schema installed and the probe connected.
pub struct Ready {
    /// Where the rows connect.
    pub url: String,
    /// Counts the rows' statements and the server's CPU; times `select1`.
    pub probe: Probe,
    /// Whether the server is a throw-away one (its settings are known).
    pub throw_away: bool,
}

impl Ready {
    /// The server's version.
    pub fn version(&self) -> &str {
        self.probe.server_version().unwrap_or("?")
    }
}

/// Installs the schema in `database` and connects the probe; prints what the rows run on.
pub async fn prepare(
    database: &Database,
    args: &Args,
    threads: usize,
) -> Result<Ready, BenchError> {
    let config: tokio_postgres::Config = database.url.parse()?;
    lock_postgres::install_schema(&config).await?;
    let probe = Probe::connect_postgres(&database.url).await?;
    let ready = Ready {
        url: database.url.clone(),
        probe,
        throw_away: database.server.is_some(),
    };
    let (statements, server_cpu) = ready.probe.counts();
    let yes_no = |on: bool| if on { "yes" } else { "no" };
    println!(
        "lockbench W1P/W2P/W3P: PostgreSQL {} ({}{}), {} connection(s) per row (distlock: + 1 LISTEN), statements counted {} (pg_stat_statements), server CPU {}, runtime {threads} thread(s), op = lock+unlock, loadavg {}",
        ready.url,
        ready.version(),
        if ready.throw_away {
            "; throw-away: fsync and synchronous_commit off"
        } else {
            ""
        },
        args.connections(),
        yes_no(statements),
        yes_no(server_cpu),
        crate::loadavg()
    );
    Ok(ready)
}

/// The W1P / W2P rows asked for, each connected to `url` on connections of its own.
pub async fn entrants(
    args: &Args,
    url: &str,
) -> Result<Vec<(&'static str, Contender)>, BenchError> {
    let mut entrants = Vec::new();
    for kind in args.kinds() {
        let contender = Contender::connect_postgres(kind, url, args.connections()).await?;
        entrants.push((kind.name(), contender));
    }
    Ok(entrants)
}

/// The W3P rows asked for on `url`: `distlock-lock` and `raw-sql` with `config.clients`
/// clients each, `advisory` with a client (one connection) per task.
pub async fn w3_rows(
    args: &Args,
    url: &str,
    config: &w3::Config,
) -> Result<Vec<w3::Row>, BenchError> {
    let pg_config: tokio_postgres::Config = url.parse()?;
    let clients = config.clients.max(1);
    let mut rows = Vec::new();
    for kind in args.kinds() {
        let row = match kind {
            PgKind::DistlockLock => {
                let mut lockers = Vec::with_capacity(clients);
                for _ in 0..clients {
                    let backend = PostgresBackend::builder(url)?
                        .connections(args.connections())
                        .connect()
                        .await?;
                    lockers.push(w3::Client::PgDistlock(Locker::new(backend)));
                }
                w3::Row::new(kind.name(), lockers)
            }
            PgKind::RawSql => {
                let retry = Duration::from_millis(args.w3p_retry_ms);
                let mut raw = Vec::with_capacity(clients);
                for _ in 0..clients {
                    let client = RawSql::connect(&pg_config, args.connections()).await?;
                    raw.push(w3::Client::PgRawSql { client, retry });
                }
                w3::Row::new(kind.name(), raw)
            }
            PgKind::Advisory => {
                let mut sessions = Vec::with_capacity(config.tasks);
                for _ in 0..config.tasks {
                    let client = Advisory::connect(&pg_config, 1).await?;
                    sessions.push(w3::Client::PgAdvisory(client));
                }
                w3::Row::new(kind.name(), sessions)
            }
            PgKind::DistlockTryLock => continue,
        };
        rows.push(row);
    }
    Ok(rows)
}

/// The W3P ratios: every lock row's p50 wait ÷ `select1`'s p50, and `distlock-lock` ÷ `raw-sql`
/// and ÷ `advisory` in handoffs/s and in p50 wait. (W1P and W2P are in
/// [`measurement::ratios`](crate::measurement::ratios) with W1 and W2.)
pub fn w3_ratios(rows: &[&Measurement]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let locks: Vec<&'static str> = rows
        .iter()
        .filter(|row| row.workload == W3P && row.contender != "select1")
        .map(|row| row.contender)
        .collect();
    for &name in &locks {
        out.extend(Ratio::between(rows, W3P, Metric::P50, name, "select1"));
    }
    for metric in [Metric::Throughput, Metric::P50] {
        for base in [PgKind::RawSql, PgKind::Advisory] {
            out.extend(Ratio::between(
                rows,
                W3P,
                metric,
                PgKind::DistlockLock.name(),
                base.name(),
            ));
        }
    }
    out
}

//! The PostgreSQL rows (W1P, W2P, W3P) that are not distlock itself: the backend's own SQL
//! functions on a bare tokio-postgres client (`raw-sql`, the ceiling of what the library could
//! reach with that SQL), and session advisory locks (`advisory`, the floor of what PostgreSQL
//! itself allows: no lease, no fencing, no name stored).
//!
//! Both keep a pool of bare connections of the same size as the backend's
//! ([`PostgresBackendBuilder::connections`](lock_postgres::PostgresBackendBuilder::connections))
//! with their statements prepared once per connection, so that every step is one round trip
//! (bind and execute), as the backend's are.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use clap::ValueEnum;
use sha2::{Digest, Sha256};
use tokio_postgres::{Client, Config, NoTls, Statement};

use super::{BenchError, LEASE};

/// Which PostgreSQL row to measure (W1P, W2P, W3P).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PgKind {
    /// `distlock.acquire` + `distlock.release`, the backend's statements, on a bare client.
    RawSql,
    /// `pg_try_advisory_lock` + `pg_advisory_unlock` on a bare client (W3P: each task blocks in
    /// `pg_advisory_lock` on a connection of its own).
    Advisory,
    /// `Locker<PostgresBackend>::try_lock` (watchdog lease) + `LockGuard::release`.
    #[value(name = "distlock-try_lock", alias = "distlock-try-lock")]
    DistlockTryLock,
    /// `Locker<PostgresBackend>::lock` (watchdog lease, waits forever) + `LockGuard::release`.
    DistlockLock,
}

impl PgKind {
    /// Every kind, in the order they run.
    pub const ALL: [PgKind; 4] = [
        PgKind::RawSql,
        PgKind::Advisory,
        PgKind::DistlockTryLock,
        PgKind::DistlockLock,
    ];

    /// The row name.
    pub fn name(self) -> &'static str {
        match self {
            PgKind::RawSql => "raw-sql",
            PgKind::Advisory => "advisory",
            PgKind::DistlockTryLock => "distlock-try_lock",
            PgKind::DistlockLock => "distlock-lock",
        }
    }
}

/// The backend's acquire, byte for byte (`crates/lock-postgres/src/session.rs`).
const ACQUIRE: &str = "SELECT holds, token, ttl_ms FROM distlock.acquire($1, $2, $3, $4, $5)";
/// The backend's release, byte for byte.
const RELEASE: &str = "SELECT distlock.release($1, $2, $3)";

// `hashtextextended` rather than the 32-bit `hashtext`: W2P holds 64 locks at once over
// millions of names, and a 32-bit collision between two of them on different connections would
// make a free name look busy. Both cost the server the same.
/// One attempt at a session advisory lock on the name's 64-bit hash.
const ADVISORY_TRY: &str = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))";
/// The same, waiting in the server until the lock is granted.
const ADVISORY_WAIT: &str = "SELECT pg_advisory_lock(hashtextextended($1, 0))";
/// Gives the session advisory lock back.
const ADVISORY_UNLOCK: &str = "SELECT pg_advisory_unlock(hashtextextended($1, 0))";

/// Opens one bare connection to `config` (no TLS, as the backend), its driver on a task of its
/// own.
async fn connect(config: &Config) -> Result<Client, BenchError> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        // The connection ends with the client; an error then is nobody's concern here.
        let _ = connection.await;
    });
    Ok(client)
}

/// The lease in milliseconds, as the backend binds it.
fn lease_ms() -> i64 {
    i64::try_from(LEASE.as_millis()).expect("the lease fits in i64 ms")
}

/// One bare connection with `distlock.acquire` and `distlock.release` prepared on it.
struct SqlConnection {
    client: Client,
    acquire: Statement,
    release: Statement,
}

/// The backend's SQL functions on a bare client: the same statements, parameters and key
/// (SHA-256 of the name), a name always on the same connection of the pool (the backend's slot
/// rule), and an owner field `<client id>:<n>` new for every acquisition.
#[derive(Clone)]
pub struct RawSql {
    connections: Arc<[SqlConnection]>,
    client_id: Arc<str>,
    /// Numbers the acquisitions, so that no two (W3P: two tasks on the one name) share an
    /// owner and re-enter each other's lock.
    acquisitions: Arc<AtomicU64>,
}

/// A lock [`RawSql`] holds: what its release needs.
pub struct RawHold {
    key: [u8; 32],
    slot: usize,
    owner: String,
}

impl RawSql {
    /// Opens `connections` connections (at least 1) to `config`, each with the session settings
    /// the backend gives its own (`statement_timeout`, `lock_timeout` and
    /// `idle_in_transaction_session_timeout` at ¾ of the default call timeout) and the two
    /// statements prepared.
    pub async fn connect(config: &Config, connections: usize) -> Result<Self, BenchError> {
        let timeout_ms = (lock_postgres::DEFAULT_CALL_TIMEOUT * 3 / 4).as_millis();
        let mut opened = Vec::with_capacity(connections.max(1));
        for _ in 0..connections.max(1) {
            let client = connect(config).await?;
            client
                .batch_execute(&format!(
                    "SET statement_timeout = {timeout_ms}; SET lock_timeout = {timeout_ms}; \
                     SET idle_in_transaction_session_timeout = {timeout_ms}"
                ))
                .await?;
            let acquire = client.prepare(ACQUIRE).await?;
            let release = client.prepare(RELEASE).await?;
            opened.push(SqlConnection {
                client,
                acquire,
                release,
            });
        }
        Ok(RawSql {
            connections: opened.into(),
            client_id: uuid::Uuid::new_v4().to_string().into(),
            acquisitions: Arc::new(AtomicU64::new(0)),
        })
    }

    /// One `distlock.acquire` (watchdog lease, no fencing token, as `Locker::lock` asks):
    /// `None` when another owner holds the lock.
    pub async fn try_acquire(&self, name: &str) -> Result<Option<RawHold>, BenchError> {
        let key: [u8; 32] = Sha256::digest(name.as_bytes()).into();
        // The backend's slot of a key: its first two bytes, modulo the pool's size.
        let slot = usize::from(u16::from_be_bytes([key[0], key[1]])) % self.connections.len();
        let n = self.acquisitions.fetch_add(1, Ordering::Relaxed);
        let owner = format!("{}:{n}", self.client_id);
        let connection = &self.connections[slot];
        let row = connection
            .client
            .query_one(
                &connection.acquire,
                &[
                    &key.as_slice(),
                    &name.as_bytes(),
                    &owner.as_str(),
                    &lease_ms(),
                    &false,
                ],
            )
            .await?;
        let holds: i32 = row.get(0);
        Ok((holds > 0).then_some(RawHold { key, slot, owner }))
    }

    /// One `distlock.release` of `hold`; an error unless it freed the lock.
    pub async fn release(&self, hold: RawHold) -> Result<(), BenchError> {
        let connection = &self.connections[hold.slot];
        let row = connection
            .client
            .query_one(
                &connection.release,
                &[&hold.key.as_slice(), &hold.owner.as_str(), &lease_ms()],
            )
            .await?;
        match row.get::<_, i32>(0) {
            0 => Ok(()),
            left => Err(format!("raw-sql: release answered {left}").into()),
        }
    }

    /// Tries to acquire `name` every `retry` until it is granted (W3P: a waiter without
    /// notifications).
    pub async fn acquire_polling(
        &self,
        name: &str,
        retry: Duration,
    ) -> Result<RawHold, BenchError> {
        loop {
            if let Some(hold) = self.try_acquire(name).await? {
                return Ok(hold);
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// One acquire + release.
    pub async fn lock_unlock(&self, name: &str) -> Result<(), BenchError> {
        let hold = self
            .try_acquire(name)
            .await?
            .ok_or_else(|| format!("raw-sql: {name} was busy"))?;
        self.release(hold).await
    }
}

/// One bare connection with the advisory lock statements prepared on it.
struct AdvisoryConnection {
    client: Client,
    try_lock: Statement,
    lock: Statement,
    unlock: Statement,
}

/// Session advisory locks on a bare client. A session lock belongs to its connection, so a
/// lock + unlock pair stays on one connection (taken in turn from the pool).
#[derive(Clone)]
pub struct Advisory {
    connections: Arc<[AdvisoryConnection]>,
    /// The next pair's connection.
    next: Arc<AtomicUsize>,
}

/// A lock [`Advisory`] holds: its connection and name.
pub struct AdvisoryHold {
    slot: usize,
    name: String,
}

impl Advisory {
    /// Opens `connections` connections (at least 1) to `config` with the statements prepared.
    /// No session settings: `lock_timeout` would end a wait in `pg_advisory_lock`.
    pub async fn connect(config: &Config, connections: usize) -> Result<Self, BenchError> {
        let mut opened = Vec::with_capacity(connections.max(1));
        for _ in 0..connections.max(1) {
            let client = connect(config).await?;
            let try_lock = client.prepare(ADVISORY_TRY).await?;
            let lock = client.prepare(ADVISORY_WAIT).await?;
            let unlock = client.prepare(ADVISORY_UNLOCK).await?;
            opened.push(AdvisoryConnection {
                client,
                try_lock,
                lock,
                unlock,
            });
        }
        Ok(Advisory {
            connections: opened.into(),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The connection of the next pair.
    fn pick(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len()
    }

    /// Waits in the server (`pg_advisory_lock`) until `name` is granted.
    pub async fn acquire(&self, name: &str) -> Result<AdvisoryHold, BenchError> {
        let slot = self.pick();
        let connection = &self.connections[slot];
        connection
            .client
            .query_one(&connection.lock, &[&name])
            .await?;
        Ok(AdvisoryHold {
            slot,
            name: name.to_owned(),
        })
    }

    /// Gives `hold` back; an error unless the session held it.
    pub async fn release(&self, hold: AdvisoryHold) -> Result<(), BenchError> {
        self.unlock(hold.slot, &hold.name).await
    }

    /// `pg_advisory_unlock` of `name` on connection `slot`; an error unless it held the lock.
    async fn unlock(&self, slot: usize, name: &str) -> Result<(), BenchError> {
        let connection = &self.connections[slot];
        let row = connection
            .client
            .query_one(&connection.unlock, &[&name])
            .await?;
        if row.get::<_, bool>(0) {
            Ok(())
        } else {
            Err(format!("advisory: {name} was not held").into())
        }
    }

    /// One `pg_try_advisory_lock` + `pg_advisory_unlock`.
    pub async fn lock_unlock(&self, name: &str) -> Result<(), BenchError> {
        let slot = self.pick();
        let connection = &self.connections[slot];
        let row = connection
            .client
            .query_one(&connection.try_lock, &[&name])
            .await?;
        if !row.get::<_, bool>(0) {
            return Err(format!("advisory: {name} was busy").into());
        }
        self.unlock(slot, name).await
    }
}

//! [`PostgresBackend`]: the lock contract, one statement per step.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, ReleaseWatch, RenewOutcome, Renewal,
};
use lock_core::{Error, LockState, ReleaseOutcome, Result};

use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::key::LockKey;
use crate::listener::Listener;
use crate::pool::Pool;
use crate::session::Statements;

/// A lock store on PostgreSQL: Redisson's reentrant lock semantics in a table, judged by the
/// server's clock.
///
/// Each step of the contract is one statement (one round trip) calling one function of the
/// `distlock` schema ([`install_schema`](crate::install_schema)), in its own transaction.
/// Leases are rows with an expiry on the server's clock (`clock_timestamp()`); a lapsed row is
/// a free lock. Fencing tokens are kept per name in a table of their own and never go below the
/// server's clock in microseconds. Releases are announced with `NOTIFY` on a channel per name,
/// which one `LISTEN` connection per backend receives.
///
/// # Connections
///
/// - Every name is served by one connection (the slot its key falls on, out of
///   [`PostgresBackendBuilder::connections`](crate::PostgresBackendBuilder::connections)), so
///   steps on one name reach the server in the order they were sent, even when a future was
///   dropped half-way.
/// - A connection that broke or did not answer within the call timeout is retired: its
///   statement may still commit, so the slot's next connection ends the old server process
///   (`pg_terminate_backend` with a wait) before it sends anything. Until then steps on that
///   slot fail with a retryable error.
/// - Each connection sets `statement_timeout` and `lock_timeout` below the call timeout, so a
///   stalled statement usually ends with a definite error (nothing applied) rather than an
///   ambiguous timeout.
/// - Without the `LISTEN` connection waiters poll (every
///   [`poll_interval`](crate::PostgresBackendBuilder::poll_interval), never past the holder's
///   lease); when it comes back every waiter looks again.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::Locker;
/// use lock_postgres::PostgresBackend;
///
/// let backend = PostgresBackend::builder("postgres://app@127.0.0.1/app")?
///     .install_schema(true)
///     .connect()
///     .await?;
/// let locker = Locker::new(backend);
/// let guard = locker.lock("orders:42").await?;
/// // ... the critical section ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client_id: String,
    pub(crate) pool: Pool,
    /// `None`: waiters poll.
    pub(crate) listener: Option<Listener>,
    pub(crate) poll_interval: Duration,
    /// The server, as spans name it (`host:port`).
    pub(crate) node: String,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("client_id", &self.inner.client_id)
            .finish_non_exhaustive()
    }
}

impl PostgresBackend {
    pub(crate) fn from_inner(inner: Inner) -> Self {
        PostgresBackend {
            inner: Arc::new(inner),
        }
    }

    /// Runs the prepared statement `pick` chooses with `params` on the connection of `key`'s
    /// slot: one round trip, one row back.
    async fn one_row(
        &self,
        key: &LockKey,
        pick: fn(&Statements) -> &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row> {
        let pool = &self.inner.pool;
        pool.call(pool.slot_of(key), |session| async move {
            session
                .client
                .query_one(pick(&session.statements), params)
                .await
        })
        .await
    }

    /// Runs `sql` (prepared on the connection at its first use) with `params` on the connection
    /// of `key`'s slot: one round trip, one row back. The lock family's steps go through here,
    /// so every step on a name keeps the name's one connection and its order.
    pub(crate) async fn family_row(
        &self,
        key: &LockKey,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row> {
        let pool = &self.inner.pool;
        pool.call(pool.slot_of(key), |session| async move {
            let statement = session.prepared(sql).await?;
            session.client.query_one(&statement, params).await
        })
        .await
    }

    /// Like [`family_row`](Self::family_row), for a statement that returns any number of rows.
    pub(crate) async fn family_rows(
        &self,
        key: &LockKey,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let pool = &self.inner.pool;
        pool.call(pool.slot_of(key), |session| async move {
            let statement = session.prepared(sql).await?;
            session.client.query(&statement, params).await
        })
        .await
    }

    /// Renews `renewals` with the batch function `sql` takes them to (`$1` the keys, `$2` the
    /// owner fields, `$3` the leases in milliseconds; a `boolean[]` back, one per renewal): one
    /// statement for the whole batch.
    pub(crate) async fn renew_batch(
        &self,
        sql: &'static str,
        renewals: &[Renewal<'_>],
    ) -> Result<Vec<RenewOutcome>> {
        if renewals.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<LockKey> = renewals.iter().map(|r| LockKey::of(r.name)).collect();
        let key_bytes: Vec<&[u8]> = keys.iter().map(LockKey::as_bytes).collect();
        let owners: Vec<&str> = renewals.iter().map(|r| r.owner_field).collect();
        let leases: Vec<i64> = renewals.iter().map(|r| millis(r.lease)).collect();
        // Renewals only lengthen leases their owners hold, so their order against the names'
        // other steps does not matter: any slot will do.
        let row = self
            .family_row(&keys[0], sql, &[&key_bytes, &owners, &leases])
            .await?;
        let renewed: Vec<bool> = row.get(0);
        if renewed.len() != renewals.len() {
            return Err(Error::Protocol(
                format!(
                    "{} renewal outcomes for {} renewals",
                    renewed.len(),
                    renewals.len()
                )
                .into(),
            ));
        }
        Ok(renewed.into_iter().map(RenewOutcome::from_held).collect())
    }

    /// A watch on `key`'s channel (every family announces on its name's one channel: the same
    /// name in two families only wakes the other's waiters to look again), or a polling one.
    pub(crate) async fn watch_key(&self, key: &LockKey) -> ReleaseWatch {
        match &self.inner.listener {
            Some(listener) => listener.watch(&key.channel()).await,
            None => ReleaseWatch::polling(self.inner.poll_interval),
        }
    }
}

/// Records the server on the current span when it is one of distlock's that takes a `node`
/// (`distlock.acquire`, `distlock.release`) and a subscriber records it; a span of the
/// application's own is never written to.
fn record_node(node: &str) {
    // Those spans are INFO: nothing to do when no subscriber wants INFO (one atomic load).
    if !tracing::level_enabled!(tracing::Level::INFO) {
        return;
    }
    let span = tracing::Span::current();
    let ours = span.metadata().is_some_and(|metadata| {
        metadata.name().starts_with("distlock.") && metadata.fields().field("node").is_some()
    });
    if ours && !span.is_disabled() {
        span.record("node", node);
    }
}

/// Milliseconds for a lease parameter (leases are at most `MAX_DURATION`, far below `i64`).
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A count the server returned, which the schema keeps positive.
pub(crate) fn count(value: i32) -> Result<u32> {
    u32::try_from(value)
        .map_err(|_| Error::Protocol(format!("a negative hold count: {value}").into()))
}

/// The answer of a release function: the owner's holds left (the expiry then at least `now +
/// lease`), 0 when the lock is now free, -1 when the owner held nothing.
pub(crate) fn release_outcome(left: i32) -> Result<ReleaseOutcome> {
    Ok(match left {
        left if left > 0 => ReleaseOutcome::StillHeld {
            hold_count: count(left)?,
        },
        0 => ReleaseOutcome::Released,
        _ => ReleaseOutcome::NotHeld,
    })
}

/// The lock's batch renewal (arrays of keys, owners and leases in; an array of booleans out).
const RENEW: &str = "SELECT distlock.renew($1, $2, $3)";

/// A remaining lease the server returned in milliseconds (never negative; `None` read as 0).
pub(crate) fn ttl_of(ttl_ms: Option<i64>) -> Duration {
    Duration::from_millis(ttl_ms.map_or(0, |ms| u64::try_from(ms).unwrap_or(0)))
}

impl LockBackend for PostgresBackend {
    fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let key = LockKey::of(request.name);
        record_node(&self.inner.node);
        let row = self
            .one_row(
                &key,
                |statements| &statements.acquire,
                &[
                    &key.as_bytes(),
                    &request.name.as_bytes(),
                    &request.owner_field,
                    &millis(request.lease),
                    &request.fencing,
                ],
            )
            .await?;
        let holds: i32 = row.get(0);
        if holds > 0 {
            let token: Option<i64> = row.get(1);
            let fencing_token = match (request.fencing, token) {
                (false, _) => None,
                (true, Some(token)) => Some(u64::try_from(token).map_err(|_| {
                    Error::Protocol(format!("a negative fencing token: {token}").into())
                })?),
                (true, None) => {
                    return Err(Error::Protocol("a fenced grant without a token".into()));
                }
            };
            return Ok(AcquireOutcome::Acquired(Grant {
                hold_count: count(holds)?,
                fencing_token,
            }));
        }
        Ok(AcquireOutcome::Held {
            ttl: Some(ttl_of(row.get(2))),
        })
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let key = LockKey::of(name);
        record_node(&self.inner.node);
        let row = self
            .one_row(
                &key,
                |statements| &statements.release,
                &[&key.as_bytes(), &owner_field, &millis(lease)],
            )
            .await?;
        release_outcome(row.get(0))
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        self.renew_batch(RENEW, renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        let key = LockKey::of(name);
        let keep = i32::try_from(keep).unwrap_or(i32::MAX);
        self.one_row(
            &key,
            |statements| &statements.abandon,
            &[&key.as_bytes(), &owner_field, &keep],
        )
        .await
        .map(drop)
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let key = LockKey::of(name);
        let row = self
            .one_row(
                &key,
                |statements| &statements.force_release,
                &[&key.as_bytes()],
            )
            .await?;
        Ok(row.get(0))
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        let key = LockKey::of(name);
        let row = self
            .one_row(&key, |statements| &statements.inspect, &[&key.as_bytes()])
            .await?;
        let owner: Option<String> = row.get(0);
        let Some(owner) = owner else {
            return Ok(LockState::default());
        };
        let holds: i32 = row.get(1);
        let ttl_ms: i64 = row.get(2);
        Ok(LockState::new(
            vec![(owner, count(holds)?)],
            Some(Duration::from_millis(u64::try_from(ttl_ms).unwrap_or(0))),
        ))
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.watch_key(&LockKey::of(name)).await)
    }
}

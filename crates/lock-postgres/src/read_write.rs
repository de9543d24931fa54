//! The read-write lock: [`ReadWriteBackend`] for [`PostgresBackend`], its read side
//! ([`PostgresReadSide`]) and write side ([`PostgresWriteSide`], also writer-preferring) over
//! tables of their own, `distlock.rw_locks`, `distlock.rw_readers` and
//! `distlock.rw_waiting_writers` (`sql/30-read-write.sql`), one statement per step.

use std::time::Duration;

use lock_core::backend::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, QUEUE_TIMEOUT, ReleaseWatch, RenewOutcome,
    Renewal,
};
use lock_core::{
    Error, LockState, ReadWriteBackend, ReadWriteMode, ReadWriteState, ReleaseOutcome, Result,
};

use crate::backend::{PostgresBackend, count, millis, release_outcome, ttl_of};
use crate::key::LockKey;

const READ_ACQUIRE: &str =
    "SELECT holds, token, ttl_ms FROM distlock.rw_read_acquire($1, $2, $3, $4, $5)";
const WRITE_ACQUIRE: &str =
    "SELECT holds, token, ttl_ms FROM distlock.rw_write_acquire($1, $2, $3, $4, $5, $6)";
const READ_RELEASE: &str = "SELECT distlock.rw_read_release($1, $2, $3)";
const WRITE_RELEASE: &str = "SELECT distlock.rw_write_release($1, $2, $3, $4)";
const READ_RENEW: &str = "SELECT distlock.rw_read_renew($1, $2, $3)";
const WRITE_RENEW: &str = "SELECT distlock.rw_write_renew($1, $2, $3)";
const FORCE_RELEASE: &str = "SELECT distlock.rw_force_release($1, $2)";
const LEAVE: &str = "SELECT distlock.rw_leave($1, $2)";
const STATE: &str =
    "SELECT mode, writer, writes, ttl_ms, readers, counts FROM distlock.rw_state($1)";

/// The read side of a [`PostgresBackend`]'s read-write locks (see [`ReadWriteBackend`]): many
/// readers per name, each read hold with a lease of its own. Made by
/// [`ReadWriteBackend::read_side`]; shares the backend's connections, notifications and client
/// id.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::Locker;
/// use lock_postgres::PostgresBackend;
///
/// // Applications reach the side through `Locker::read_write`.
/// let locker = Locker::new(PostgresBackend::connect("postgres://app@127.0.0.1/app").await?);
/// let reading = locker.read_write("catalog")?.read().await?;
/// reading.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresReadSide(PostgresBackend);

/// The write side of a [`PostgresBackend`]'s read-write locks (see [`ReadWriteBackend`]): one
/// writer per name, which may re-enter and also read. Made by [`ReadWriteBackend::write_side`],
/// or by [`ReadWriteBackend::preferring_write_side`] for a side whose waiting writers hold new
/// readers back.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::Locker;
/// use lock_postgres::PostgresBackend;
///
/// // Applications reach the side through `Locker::read_write`.
/// let locker = Locker::new(PostgresBackend::connect("postgres://app@127.0.0.1/app").await?);
/// let writing = locker.read_write("catalog")?.prefer_writers().write().await?;
/// writing.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresWriteSide {
    backend: PostgresBackend,
    /// Writers preferred: a writer that waits records its place.
    prefer: bool,
}

/// Which side a shared step is for.
#[derive(Clone, Copy)]
enum Side {
    Read,
    Write,
}

impl Side {
    /// The mode this side holds the lock in, as the schema spells it.
    fn mode(self) -> &'static str {
        match self {
            Side::Read => "read",
            Side::Write => "write",
        }
    }
}

/// A fencing token the server returned, where one was asked for.
fn fencing_token(fencing: bool, token: Option<i64>) -> Result<Option<u64>> {
    match (fencing, token) {
        (false, _) => Ok(None),
        (true, Some(token)) => u64::try_from(token)
            .map(Some)
            .map_err(|_| Error::Protocol(format!("a negative fencing token: {token}").into())),
        (true, None) => Err(Error::Protocol("a fenced grant without a token".into())),
    }
}

/// An abandon's `keep` for the release functions (whose NULL `keep` gives back one hold).
fn keep_arg(keep: u32) -> Option<i32> {
    Some(i32::try_from(keep).unwrap_or(i32::MAX))
}

impl PostgresBackend {
    /// One acquire attempt on `side` (`queue_ms`: the place of a writer-preferring writer that
    /// waits).
    async fn rw_acquire(
        &self,
        side: Side,
        request: &AcquireRequest<'_>,
        queue_ms: Option<i64>,
    ) -> Result<AcquireOutcome> {
        let key = LockKey::of(request.name);
        let (name, lease) = (request.name.as_bytes(), millis(request.lease));
        let row = match side {
            Side::Read => {
                self.family_row(
                    &key,
                    READ_ACQUIRE,
                    &[
                        &key.as_bytes(),
                        &name,
                        &request.owner_field,
                        &lease,
                        &request.fencing,
                    ],
                )
                .await?
            }
            Side::Write => {
                self.family_row(
                    &key,
                    WRITE_ACQUIRE,
                    &[
                        &key.as_bytes(),
                        &name,
                        &request.owner_field,
                        &lease,
                        &request.fencing,
                        &queue_ms,
                    ],
                )
                .await?
            }
        };
        match row.get::<_, i32>(0) {
            holds if holds > 0 => Ok(AcquireOutcome::Acquired(Grant {
                hold_count: count(holds)?,
                fencing_token: fencing_token(request.fencing, row.get(1))?,
            })),
            0 => Ok(AcquireOutcome::Held {
                ttl: Some(ttl_of(row.get(2))),
            }),
            // Only the write side answers it: the owner reads, and would wait for itself.
            _ => Err(Error::UpgradeRefused {
                name: request.name.to_owned(),
            }),
        }
    }

    /// Gives back one hold of `owner_field` on `side` (`keep: None`, the write side lengthening
    /// what is left to `lease`), or lowers its count to at most `keep` (an abandon).
    async fn rw_release(
        &self,
        side: Side,
        name: &str,
        owner_field: &str,
        keep: Option<i32>,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let key = LockKey::of(name);
        let row = match side {
            Side::Read => {
                self.family_row(&key, READ_RELEASE, &[&key.as_bytes(), &owner_field, &keep])
                    .await?
            }
            Side::Write => {
                self.family_row(
                    &key,
                    WRITE_RELEASE,
                    &[&key.as_bytes(), &owner_field, &keep, &millis(lease)],
                )
                .await?
            }
        };
        release_outcome(row.get(0))
    }

    /// Renews a batch of holds of `side` in one statement.
    async fn rw_renew(&self, side: Side, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        let sql = match side {
            Side::Read => READ_RENEW,
            Side::Write => WRITE_RENEW,
        };
        self.renew_batch(sql, renewals).await
    }

    /// Deletes the lock `name` when it is held in `side`'s mode.
    async fn rw_force_release(&self, side: Side, name: &str) -> Result<bool> {
        let key = LockKey::of(name);
        let row = self
            .family_row(&key, FORCE_RELEASE, &[&key.as_bytes(), &side.mode()])
            .await?;
        Ok(row.get(0))
    }

    /// `side`'s holders of `name` and the lock's remaining lease (only when it has some).
    async fn rw_inspect(&self, side: Side, name: &str) -> Result<LockState> {
        let state = self.read_write_state(name).await?;
        let holders = match side {
            Side::Read => state.readers,
            Side::Write => state.writer.into_iter().collect(),
        };
        let ttl = state.ttl.filter(|_| !holders.is_empty());
        Ok(LockState::new(holders, ttl))
    }
}

impl ReadWriteBackend for PostgresBackend {
    type Read = PostgresReadSide;
    type Write = PostgresWriteSide;

    fn read_side(&self) -> PostgresReadSide {
        PostgresReadSide(self.clone())
    }

    fn write_side(&self) -> PostgresWriteSide {
        PostgresWriteSide {
            backend: self.clone(),
            prefer: false,
        }
    }

    fn preferring_write_side(&self) -> PostgresWriteSide {
        PostgresWriteSide {
            backend: self.clone(),
            prefer: true,
        }
    }

    async fn read_write_state(&self, name: &str) -> Result<ReadWriteState> {
        self.check_name(name)?;
        let key = LockKey::of(name);
        let row = self.family_row(&key, STATE, &[&key.as_bytes()]).await?;
        let mode = match row.get::<_, Option<&str>>(0) {
            None => return Ok(ReadWriteState::default()),
            Some("read") => ReadWriteMode::Read,
            Some("write") => ReadWriteMode::Write,
            Some(other) => {
                return Err(Error::Protocol(
                    format!("read-write lock mode {other:?}").into(),
                ));
            }
        };
        let writer = match row.get::<_, Option<String>>(1) {
            Some(field) => Some((field, count(row.get(2))?)),
            None => None,
        };
        let fields: Vec<String> = row.get(4);
        let counts: Vec<i32> = row.get(5);
        if fields.len() != counts.len() {
            return Err(Error::Protocol(
                format!("{} readers with {} counts", fields.len(), counts.len()).into(),
            ));
        }
        let mut readers = fields
            .into_iter()
            .zip(counts)
            .map(|(field, held)| Ok((field, count(held)?)))
            .collect::<Result<Vec<_>>>()?;
        // Byte order, as the contract lists them (the server's collation may differ).
        readers.sort();
        Ok(ReadWriteState::new(
            Some(mode),
            readers,
            writer,
            Some(ttl_of(row.get(3))),
        ))
    }
}

impl LockBackend for PostgresReadSide {
    fn client_id(&self) -> &str {
        self.0.client_id()
    }

    fn kind(&self) -> &'static str {
        "read"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        self.0.rw_acquire(Side::Read, &request, None).await
    }

    /// The read hold ending first goes; `lease` is not used (in read mode the lock lasts as
    /// long as its longest read hold, in write mode the write hold's lease stands).
    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        self.0
            .rw_release(Side::Read, name, owner_field, None, lease)
            .await
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        self.0.rw_renew(Side::Read, renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        self.0
            .rw_release(
                Side::Read,
                name,
                owner_field,
                keep_arg(keep),
                Duration::ZERO,
            )
            .await
            .map(drop)
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.0.rw_force_release(Side::Read, name).await
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        self.0.rw_inspect(Side::Read, name).await
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.0.watch_key(&LockKey::of(name)).await)
    }
}

impl LockBackend for PostgresWriteSide {
    fn client_id(&self) -> &str {
        self.backend.client_id()
    }

    fn kind(&self) -> &'static str {
        "write"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        // Only a writer that waits takes a place: a single attempt holds no reader back.
        let queue_ms = (self.prefer && request.waits).then(|| millis(QUEUE_TIMEOUT));
        self.backend
            .rw_acquire(Side::Write, &request, queue_ms)
            .await
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        self.backend
            .rw_release(Side::Write, name, owner_field, None, lease)
            .await
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        self.backend.rw_renew(Side::Write, renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        self.backend
            .rw_release(
                Side::Write,
                name,
                owner_field,
                keep_arg(keep),
                Duration::ZERO,
            )
            .await
            .map(drop)
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.backend.rw_force_release(Side::Write, name).await
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        self.backend.rw_inspect(Side::Write, name).await
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.backend.watch_key(&LockKey::of(name)).await)
    }

    fn queues(&self) -> bool {
        self.prefer
    }

    async fn leave_queue(&self, name: &str, owner_field: &str) -> Result<()> {
        if !self.prefer {
            return Ok(());
        }
        let key = LockKey::of(name);
        self.backend
            .family_row(&key, LEAVE, &[&key.as_bytes(), &owner_field])
            .await
            .map(drop)
    }
}

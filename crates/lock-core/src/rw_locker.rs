//! [`RwLocker`]: read-write locks for users, one [`Locker`] per side of a
//! [`ReadWriteBackend`].

use crate::backend::LockBackend;
use crate::error::{Error, Result};
use crate::fencing::Fencing;
use crate::guard::LockGuard;
use crate::locker::Locker;
use crate::options::LockOptions;
use crate::order::Side;
use crate::owner::Owner;
use crate::rw_backend::{ReadWriteBackend, RwState};

/// Read-write locks: many readers or one writer per name (Redisson's `RReadWriteLock` on
/// Redis).
///
/// Each side is a full [`Locker`] ([`reads`](Self::reads), [`writes`](Self::writes)): reentrant
/// per owner (the current task by default), watchdog-renewed guards with
/// [`LockGuard::lost`], bounded waits, fencing tokens, and a dropped guard released in the
/// background. A writer may also take the read lock (a downgrade: release the write guard
/// afterwards and keep reading); a reader asking for the write lock gets
/// [`Error::UpgradeRefused`] at once instead of waiting for itself. (Take the write lock with
/// [`write`](Self::write) and its kin rather than through [`writes`](Self::writes): they know
/// this process's read holds, and wait for the release of a read guard just dropped instead of
/// calling it an upgrade.)
///
/// Readers are not held back by waiting writers (as in Redisson): under a steady stream of
/// overlapping readers a writer waits until they all leave, which may be never. Made with
/// [`RwLocker::writer_preferring`], waiting writers hold new readers back instead. See
/// `docs/lock-family.md` and the W8W benchmark in `docs/performance.md`.
///
/// Cheap to clone.
///
/// # Example
///
/// ```
/// use lock_core::{MemoryBackend, RwLocker};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let locks = RwLocker::new(MemoryBackend::new());
/// {
///     let _settings = locks.read("settings").await?;
///     // ... read, alongside any other readers ...
/// }
/// let writing = locks.write("settings").await?;
/// // ... write, alone ...
/// writing.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct RwLocker<B: ReadWriteBackend> {
    backend: std::sync::Arc<B>,
    reads: Locker<B::Read>,
    writes: Locker<B::Write>,
}

impl<B: ReadWriteBackend> Clone for RwLocker<B> {
    fn clone(&self) -> Self {
        RwLocker {
            backend: self.backend.clone(),
            reads: self.reads.clone(),
            writes: self.writes.clone(),
        }
    }
}

impl<B: ReadWriteBackend> std::fmt::Debug for RwLocker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLocker")
            .field("reads", &self.reads)
            .field("writes", &self.writes)
            .finish()
    }
}

impl<B: ReadWriteBackend> RwLocker<B> {
    /// Read-write locks over `backend`; readers are not held back by waiting writers (as in
    /// Redisson), which gives the most read throughput but can keep a writer waiting for as long
    /// as overlapping readers keep coming.
    #[must_use]
    pub fn new(backend: B) -> Self {
        let write_side = backend.write_side();
        Self::with_write_side(backend, write_side)
    }

    /// Read-write locks over `backend` with **writers preferred**: while a writer of this
    /// locker waits, new readers wait too (see [`ReadWriteBackend::preferring_write_side`]), so
    /// a writer gets the lock once the readers already in have left. Readers of Redisson, and
    /// of a locker made with [`RwLocker::new`], are not held back by it: they see the same
    /// lock, without the waiting writers.
    ///
    /// # Example
    ///
    /// ```
    /// use lock_core::{MemoryBackend, RwLocker};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let locks = RwLocker::writer_preferring(MemoryBackend::new());
    /// let writing = locks.write("config").await?;
    /// writing.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn writer_preferring(backend: B) -> Self {
        let write_side = backend.preferring_write_side();
        Self::with_write_side(backend, write_side)
    }

    /// Both sides share one line per (name, owner): a read guard dropped just before a write
    /// (or the other way round) has its release run first.
    fn with_write_side(backend: B, write_side: B::Write) -> Self {
        let reads = Locker::new(backend.read_side());
        let writes = Locker::sharing_order_with(write_side, &reads, Side::SECOND);
        RwLocker {
            reads,
            writes,
            backend: std::sync::Arc::new(backend),
        }
    }

    /// The read side's locker, for everything [`Locker`] offers ([`Locker::lock_with`] with
    /// options, [`Locker::with_lock`], [`Locker::state`] of the readers...).
    #[must_use]
    pub fn reads(&self) -> &Locker<B::Read> {
        &self.reads
    }

    /// The write side's locker.
    #[must_use]
    pub fn writes(&self) -> &Locker<B::Write> {
        &self.writes
    }

    /// Takes the read lock, waiting as long as a writer holds it ([`Locker::lock`] on the read
    /// side).
    ///
    /// # Errors
    ///
    /// As [`Locker::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn read(&self, name: &str) -> Result<LockGuard<B::Read>> {
        self.reads.lock(name).await
    }

    /// Takes the write lock, waiting as long as anyone else holds either side.
    ///
    /// # Errors
    ///
    /// [`Error::UpgradeRefused`] when this owner holds the read lock (before any I/O when it
    /// holds it through this `RwLocker`); otherwise as [`Locker::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn write(&self, name: &str) -> Result<LockGuard<B::Write>> {
        self.write_with(name, &LockOptions::new()).await
    }

    /// One attempt at the read lock: `Ok(None)` when a writer holds it.
    ///
    /// # Errors
    ///
    /// As [`Locker::try_lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn try_read(&self, name: &str) -> Result<Option<LockGuard<B::Read>>> {
        self.reads.try_lock(name).await
    }

    /// One attempt at the write lock: `Ok(None)` when anyone else holds either side.
    ///
    /// # Errors
    ///
    /// As [`RwLocker::write`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn try_write(&self, name: &str) -> Result<Option<LockGuard<B::Write>>> {
        match self.write_with(name, &LockOptions::new().no_wait()).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::NotAcquired { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The read lock with explicit options ([`Locker::lock_with`]).
    ///
    /// # Errors
    ///
    /// As [`Locker::lock_with`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn read_with<F: Fencing>(
        &self,
        name: &str,
        options: &LockOptions<F>,
    ) -> Result<LockGuard<B::Read, F>> {
        self.reads.lock_with(name, options).await
    }

    /// The write lock with explicit options ([`Locker::lock_with`]).
    ///
    /// # Errors
    ///
    /// As [`RwLocker::write`] and [`Locker::lock_with`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn write_with<F: Fencing>(
        &self,
        name: &str,
        options: &LockOptions<F>,
    ) -> Result<LockGuard<B::Write, F>> {
        self.writes.backend().check_name(name)?;
        options.validate()?;
        let owner = options
            .explicit_owner()
            .copied()
            .unwrap_or_else(Owner::current);
        // Refused here when this process knows the owner reads. A read guard just dropped is no
        // longer counted: its release is in the owner's line before this write's attempts, so
        // the store has it by then.
        if self.reads.live_holds(name, owner) > 0 {
            return Err(Error::UpgradeRefused {
                name: name.to_owned(),
            });
        }
        // A read of unknown outcome whose cleanup failed may have left a read hold the store
        // would refuse this write for: it is taken back first.
        self.reads.settle_owed(name, owner).await?;
        self.writes.lock_with(name, options).await
    }

    /// Both sides of the lock `name` in one snapshot: mode, readers, writer, remaining lease.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; the store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn state(&self, name: &str) -> Result<RwState> {
        self.reads.backend().check_name(name)?;
        self.backend.rw_state(name).await
    }

    /// Deletes the lock whichever side holds it, and wakes every waiter. Returns whether it was
    /// held. Holders find out through [`LockGuard::lost`] at their next renewal.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; the store's errors.
    pub async fn force_unlock(&self, name: &str) -> Result<bool> {
        // One side at a time, stopping at the one that held it: deleting a writer's lock wakes
        // every waiter, and readers getting in at once must not lose their new lock to the read
        // side's deletion.
        if self.writes.force_unlock(name).await? {
            return Ok(true);
        }
        self.reads.force_unlock(name).await
    }
}

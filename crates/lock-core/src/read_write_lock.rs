//! [`ReadWriteLock`]: a handle on one read-write lock (Redisson's `RReadWriteLock`), from
//! [`Locker::read_write`], and the two sides' lockers it runs on.

use std::sync::Arc;

use crate::contract::LockBackend;
use crate::error::{Error, Result};
use crate::fencing::Fencing;
use crate::guard::LockGuard;
use crate::locker::Locker;
use crate::options::LockOptions;
use crate::order::Side;
use crate::owner::Owner;
use crate::read_write_backend::{ReadWriteBackend, ReadWriteState};

/// The lockers of a read-write backend's two sides, sharing one line per (name, owner): a read
/// guard dropped just before a write (or the other way round) has its release run first. One
/// per locker (see `crate::families`), shared by every handle it makes.
struct Sides<B: ReadWriteBackend> {
    backend: Arc<B>,
    reads: Locker<B::Read>,
    writes: Locker<B::Write>,
}

impl<B: ReadWriteBackend> Clone for Sides<B> {
    fn clone(&self) -> Self {
        Sides {
            backend: self.backend.clone(),
            reads: self.reads.clone(),
            writes: self.writes.clone(),
        }
    }
}

impl<B: ReadWriteBackend> Sides<B> {
    fn new(backend: Arc<B>, write_side: B::Write) -> Self {
        let reads = Locker::new(backend.read_side());
        let writes = Locker::sharing_order_with(write_side, &reads, Side::SECOND);
        Sides {
            backend,
            reads,
            writes,
        }
    }
}

/// The sides whose writers are preferred: a family of its own (its own write side, and its own
/// line per owner), so a locker can hand out both kinds.
struct WriterPreferring<B: ReadWriteBackend>(Sides<B>);

impl<B: ReadWriteBackend> Clone for WriterPreferring<B> {
    fn clone(&self) -> Self {
        WriterPreferring(self.0.clone())
    }
}

/// A read-write lock: many readers or one writer (Redisson's `RReadWriteLock`). Made by
/// [`Locker::read_write`]; its name is bound when it is made.
///
/// Each side works as [`Locker::lock`]: reentrant per owner (the current task by default),
/// watchdog-renewed guards with [`LockGuard::lost`], bounded waits, fencing tokens, and a
/// dropped guard released in the background. A writer may also take the read lock (a
/// downgrade: release the write guard afterwards and keep reading); a reader asking for the
/// write lock gets [`Error::UpgradeRefused`] at once instead of waiting for itself.
///
/// Readers are not held back by waiting writers (as in Redisson): under a steady stream of
/// overlapping readers a writer waits until they all leave, which may be never. With
/// [`prefer_writers`](Self::prefer_writers), waiting writers hold new readers back instead.
/// See `docs/rwlock.md` and the W8W benchmark in `docs/performance.md`.
///
/// Cheap to clone; every handle from one locker (and its clones) shares one watchdog and one
/// line per owner and name.
///
/// # Example
///
/// ```
/// use lock_core::{LockOptions, Locker, MemoryBackend, Owner};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let locker = Locker::new(MemoryBackend::new());
/// let catalog = locker.read_write("catalog")?;
/// let reading = catalog.read().await?;
/// let also_reading = catalog.read_with(&LockOptions::new().owner(Owner::new())).await?;
/// assert!(catalog.try_write().await.is_err()); // this task reads: no upgrade
/// drop((reading, also_reading));
/// let writing = catalog.write().await?; // alone
/// writing.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct ReadWriteLock<B: ReadWriteBackend + LockBackend> {
    locker: Locker<B>,
    sides: Sides<B>,
    name: Arc<str>,
}

impl<B: ReadWriteBackend + LockBackend> Clone for ReadWriteLock<B> {
    fn clone(&self) -> Self {
        ReadWriteLock {
            locker: self.locker.clone(),
            sides: self.sides.clone(),
            name: self.name.clone(),
        }
    }
}

impl<B: ReadWriteBackend + LockBackend> std::fmt::Debug for ReadWriteLock<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<B: ReadWriteBackend + LockBackend> Locker<B> {
    /// A handle on the read-write lock `name` (Redisson's `getReadWriteLock`; see
    /// [`ReadWriteLock`]). Nothing is sent until the handle is used.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] for a name the backend refuses, before any I/O.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let locker = lock_core::Locker::new(lock_core::MemoryBackend::new());
    /// let settings = locker.read_write("settings")?;
    /// {
    ///     let _reading = settings.read().await?;
    ///     // ... read, alongside any other readers ...
    /// }
    /// let writing = settings.write().await?;
    /// // ... write, alone ...
    /// writing.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_write(&self, name: &str) -> Result<ReadWriteLock<B>> {
        self.backend().check_name(name)?;
        let backend = self.shared_backend().clone();
        let sides = self.family(|| Sides::new(backend.clone(), backend.write_side()));
        Ok(ReadWriteLock {
            locker: self.clone(),
            sides,
            name: name.into(),
        })
    }
}

impl<B: ReadWriteBackend + LockBackend> ReadWriteLock<B> {
    /// The lock's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock with **writers preferred**: a writer of this handle that waits records
    /// itself as waiting (see [`ReadWriteBackend::preferring_write_side`]), and while it does,
    /// new readers of the name wait too, through any distlock handle (the read side reads that
    /// record), so the writer gets the lock once the readers already in have left. Re-entrant
    /// reads and a writer's own downgrade still go through. Redisson's readers do not read the
    /// record: they are not held back.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let locker = lock_core::Locker::new(lock_core::MemoryBackend::new());
    /// let config = locker.read_write("config")?.prefer_writers();
    /// let writing = config.write().await?;
    /// writing.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn prefer_writers(self) -> Self {
        let backend = self.locker.shared_backend().clone();
        let WriterPreferring(sides) = self.locker.family(|| {
            WriterPreferring(Sides::new(backend.clone(), backend.preferring_write_side()))
        });
        ReadWriteLock { sides, ..self }
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
    pub async fn read(&self) -> Result<LockGuard<B::Read>> {
        self.sides.reads.lock(&self.name).await
    }

    /// Takes the write lock, waiting as long as anyone else holds either side.
    ///
    /// # Errors
    ///
    /// [`Error::UpgradeRefused`] when this owner holds the read lock (before any I/O when it
    /// holds it through this locker); otherwise as [`Locker::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn write(&self) -> Result<LockGuard<B::Write>> {
        self.write_with(&LockOptions::new()).await
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
    pub async fn try_read(&self) -> Result<Option<LockGuard<B::Read>>> {
        self.sides.reads.try_lock(&self.name).await
    }

    /// One attempt at the write lock: `Ok(None)` when anyone else holds either side.
    ///
    /// # Errors
    ///
    /// As [`ReadWriteLock::write`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn try_write(&self) -> Result<Option<LockGuard<B::Write>>> {
        match self.write_with(&LockOptions::new().no_wait()).await {
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
        options: &LockOptions<F>,
    ) -> Result<LockGuard<B::Read, F>> {
        self.sides.reads.lock_with(&self.name, options).await
    }

    /// The write lock with explicit options ([`Locker::lock_with`]).
    ///
    /// # Errors
    ///
    /// As [`ReadWriteLock::write`] and [`Locker::lock_with`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn write_with<F: Fencing>(
        &self,
        options: &LockOptions<F>,
    ) -> Result<LockGuard<B::Write, F>> {
        let name = &*self.name;
        options.validate()?;
        let owner = options
            .explicit_owner()
            .copied()
            .unwrap_or_else(Owner::current);
        let reads = &self.sides.reads;
        // Refused here when this process knows the owner reads. A read guard just dropped is no
        // longer counted: its release is in the owner's line before this write's attempts, so
        // the store has it by then.
        if reads.live_holds(name, owner) > 0 {
            return Err(Error::UpgradeRefused {
                name: name.to_owned(),
            });
        }
        // A read of unknown outcome whose cleanup failed may have left a read hold the store
        // would refuse this write for: it is taken back first.
        reads.settle_owed(name, owner).await?;
        self.sides.writes.lock_with(name, options).await
    }

    /// Both sides in one snapshot: mode, readers, writer, remaining lease.
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn state(&self) -> Result<ReadWriteState> {
        self.sides.backend.read_write_state(&self.name).await
    }

    /// Deletes the lock whichever side holds it, and wakes every waiter. Returns whether it was
    /// held. Holders find out through [`LockGuard::lost`] at their next renewal.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn force_unlock(&self) -> Result<bool> {
        // One side at a time, stopping at the one that held it: deleting a writer's lock wakes
        // every waiter, and readers getting in at once must not lose their new lock to the read
        // side's deletion.
        if self.sides.writes.force_unlock(&self.name).await? {
            return Ok(true);
        }
        self.sides.reads.force_unlock(&self.name).await
    }

    /// The read side's locker, for what the handle does not offer ([`Locker::with_lock`],
    /// [`Locker::state`] of the readers...).
    #[must_use]
    pub fn reads(&self) -> &Locker<B::Read> {
        &self.sides.reads
    }

    /// The write side's locker. Take the write lock with [`write`](Self::write) and its kin
    /// rather than through it: they know this process's read holds, and wait for the release
    /// of a read guard just dropped instead of calling it an upgrade.
    #[must_use]
    pub fn writes(&self) -> &Locker<B::Write> {
        &self.sides.writes
    }
}

#[cfg(test)]
mod tests {
    //! The owner's order over the read side when a hold nobody saw granted outlives the
    //! cleanup's patience: the locker stops waiting for the cleanup after a lease, and the
    //! store must by then have ended the hold (a read hold ends with its lease also while
    //! another reader keeps the lock alive).
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use crate::contract::{
        AcquireOutcome, AcquireRequest, LockBackend, LockState, ReleaseOutcome, RenewOutcome,
        Renewal,
    };
    use crate::error::{Error, Result};
    use crate::memory::{MemoryBackend, MemoryReadSide};
    use crate::notify::ReleaseWatch;
    use crate::read_write_backend::ReadWriteBackend;
    use crate::{LockOptions, Locker};

    /// A read side whose next acquire is applied and its answer lost, and whose cleanups fail
    /// while it is `down`.
    struct LosesAnAnswer {
        inner: MemoryReadSide,
        apply_then_lose: AtomicBool,
        down: AtomicBool,
    }

    impl LockBackend for LosesAnAnswer {
        fn client_id(&self) -> &str {
            self.inner.client_id()
        }
        async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
            if self.apply_then_lose.swap(false, Ordering::SeqCst) {
                self.inner.try_acquire(request).await?;
                return Err(Error::ConnectionLost("the answer was lost".into()));
            }
            if self.down.load(Ordering::SeqCst) {
                return Err(Error::ConnectionLost("down".into()));
            }
            self.inner.try_acquire(request).await
        }
        async fn release(
            &self,
            name: &str,
            field: &str,
            lease: Duration,
        ) -> Result<ReleaseOutcome> {
            self.inner.release(name, field, lease).await
        }
        async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
            self.inner.renew(renewals).await
        }
        async fn abandon(&self, name: &str, field: &str, keep: u32) -> Result<()> {
            if self.down.load(Ordering::SeqCst) {
                return Err(Error::Timeout {
                    after: Duration::from_millis(10),
                });
            }
            self.inner.abandon(name, field, keep).await
        }
        async fn force_release(&self, name: &str) -> Result<bool> {
            self.inner.force_release(name).await
        }
        async fn inspect(&self, name: &str) -> Result<LockState> {
            self.inner.inspect(name).await
        }
        async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
            self.inner.watch_releases(name).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_hold_granted_unseen_is_not_re_entered_after_its_lease() {
        let store = MemoryBackend::new();
        let lease = LockOptions::new().watchdog_lease(Duration::from_millis(300));
        // Another client reads all along: its renewals keep the lock alive.
        let other = Locker::new(store.new_client()).read_write("rw").unwrap();
        let reading = other.read_with(&lease).await.unwrap();
        let reader = Locker::new(LosesAnAnswer {
            inner: store.read_side(),
            apply_then_lose: AtomicBool::new(true),
            down: AtomicBool::new(true),
        });
        let short = lease.clone().wait(Duration::from_millis(100));
        assert!(
            reader.lock_with("rw", &short).await.is_err(),
            "the answer is lost and the cleanup fails"
        );
        // Past the cleanup's patience (a lease, moved once): the locker stops waiting for it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        reader.backend().down.store(false, Ordering::SeqCst);
        let again = reader.lock_with("rw", &lease).await.unwrap();
        assert_eq!(
            again.hold_count(),
            1,
            "re-entered the hold granted unseen, whose lease had ended"
        );
        assert!(again.release().await.unwrap().was_held());
        assert!(reading.release().await.unwrap().was_held());
    }
}

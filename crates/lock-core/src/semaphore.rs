//! [`Semaphore`]: a counting semaphore shared by every client of a store (Redisson's
//! `RSemaphore`), over any [`SemaphoreBackend`]; the waiting is the lock's own wait loop.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::locker::Locker;
use crate::notify::ReleaseWatch;
use crate::options::{Wait, check_wait};
use crate::semaphore_backend::{PermitsTaken, SemaphoreBackend, SemaphoreState};
use crate::waiter::{Attempts, Tried, Waiter};

/// A counting semaphore: a number of permits, shared by every client of the store, taken with
/// [`acquire`](Self::acquire) and given back with [`release`](Self::release) by anyone.
///
/// It has Redisson's `RSemaphore` layout and behaviour on Redis (one counter, the new count
/// announced on `redisson_sc:{name}`), so Rust and Java services can share one. Like
/// Redisson's, it is a plain counter: **permits have no owner and no lease**. A process that
/// crashes while holding permits leaks them, and a call that fails ambiguously (a timeout, a
/// lost connection) may or may not have taken or given back its permits. Where that matters,
/// prefer permits bound to a lease (see `docs/lock-family.md`).
///
/// Made by [`crate::Locker::semaphore`]; cheap to clone.
///
/// # Example
///
/// ```
/// use lock_core::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let locker = Locker::new(MemoryBackend::new());
/// let exports = locker.semaphore("exports")?;
/// exports.try_set_permits(3).await?; // only the first client to get here sets it
/// exports.acquire(1).await?;
/// // ... at most 3 exports run at once, across every process ...
/// exports.release(1).await?;
/// # Ok(())
/// # }
/// ```
pub struct Semaphore<B: SemaphoreBackend> {
    backend: Arc<B>,
    name: Arc<str>,
}

impl<B: SemaphoreBackend> Clone for Semaphore<B> {
    fn clone(&self) -> Self {
        Semaphore {
            backend: self.backend.clone(),
            name: self.name.clone(),
        }
    }
}

impl<B: SemaphoreBackend> std::fmt::Debug for Semaphore<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Checks a number of permits to take or give back.
fn check_permits(permits: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::invalid_options(
            "permits must be at least 1 (0 would take or give back nothing)",
        ));
    }
    Ok(())
}

impl<B: SemaphoreBackend> Locker<B> {
    /// A handle on the counting semaphore `name` (Redisson's `RSemaphore`; see
    /// [`Semaphore`]). Nothing is sent until the handle is used.
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
    /// let uploads = locker.semaphore("uploads")?;
    /// uploads.try_set_permits(4).await?;
    /// assert_eq!(uploads.available().await?, 4);
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, name: &str) -> Result<Semaphore<B>> {
        Semaphore::new(self.shared_backend().clone(), name)
    }
}

impl<B: SemaphoreBackend> Semaphore<B> {
    /// A handle on the semaphore `name` of `backend`, the name checked.
    pub(crate) fn new(backend: Arc<B>, name: &str) -> Result<Self> {
        backend.check_name(name)?;
        Ok(Semaphore {
            backend,
            name: name.into(),
        })
    }

    /// The semaphore's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the semaphore with `permits` available, unless it exists: returns whether it
    /// did. Every process can call it at start; only the first one sets the count.
    ///
    /// # Errors
    ///
    /// The backend's errors (safe to retry: a second call answers `false`).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have set the count.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.backend.try_set_permits(&self.name, permits).await
    }

    /// Takes `permits`, waiting as long as it takes (for a count announcement, re-checking at
    /// least every second). A semaphore that does not exist yet is waited for.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] for 0 permits, before any I/O. A retryable error that surely
    /// took nothing (a read-only replica, an unavailable server) is retried with backoff for up
    /// to 30 s in a row; an ambiguous one ([`Error::is_ambiguous`]: the permits may have been
    /// taken) is returned at once.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits leaves nothing behind; dropping it while an attempt
    /// is in flight may leave the permits taken, with nobody to give them back.
    pub async fn acquire(&self, permits: u32) -> Result<()> {
        self.acquire_with(permits, Wait::Forever).await
    }

    /// Takes `permits` as `wait` says: [`Wait::No`] for one attempt, [`Wait::Upto`] for a
    /// bounded wait, [`Wait::Forever`].
    ///
    /// # Errors
    ///
    /// [`Error::NotAcquired`] when the wait ended without the permits; otherwise as
    /// [`acquire`](Self::acquire) (with a bounded wait, retryable errors are retried until
    /// its end). [`Error::InvalidOptions`] for 0 permits or a zero wait, before any I/O.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_with(&self, permits: u32, wait: Wait) -> Result<()> {
        check_permits(permits)?;
        check_wait(wait)?;
        let attempts = TakePermits {
            backend: &*self.backend,
            name: &self.name,
            permits,
        };
        match Waiter::new(attempts, wait).acquire().await? {
            Some(_) => Ok(()),
            None => Err(Error::NotAcquired {
                name: self.name.to_string(),
            }),
        }
    }

    /// One attempt to take `permits`, without waiting: whether they were taken.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] for 0 permits, before any I/O; the backend's errors.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, permits: u32) -> Result<bool> {
        match self.acquire_with(permits, Wait::No).await {
            Ok(()) => Ok(true),
            Err(Error::NotAcquired { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Gives back `permits` (whoever took them) and wakes as many waiters; returns the new
    /// count. On a semaphore that does not exist it creates the count at `permits`, as
    /// Redisson does.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] for 0 permits, before any I/O. An ambiguous error means the
    /// permits may or may not be back: do not simply retry.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have given the permits back.
    pub async fn release(&self, permits: u32) -> Result<i64> {
        check_permits(permits)?;
        self.backend.return_permits(&self.name, permits).await
    }

    /// Adds `delta` permits (negative: removes them; the count may go below zero, and takers
    /// then wait until releases bring it back up); returns the new count.
    ///
    /// # Errors
    ///
    /// The backend's errors; an ambiguous one may have been applied.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have been applied.
    pub async fn add_permits(&self, delta: i64) -> Result<i64> {
        self.backend.add_permits(&self.name, delta).await
    }

    /// The permits available now (0 when the semaphore does not exist; see
    /// [`state`](Self::state) to tell the two apart).
    ///
    /// # Errors
    ///
    /// The backend's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn available(&self) -> Result<i64> {
        Ok(self.state().await?.available.unwrap_or(0))
    }

    /// Takes every available permit; returns how many there were.
    ///
    /// # Errors
    ///
    /// The backend's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have drained the permits.
    pub async fn drain(&self) -> Result<i64> {
        self.backend.drain_permits(&self.name).await
    }

    /// Sets the count to `permits` whatever it was, and wakes that many waiters: the
    /// operator's reset after permits leaked. Returns the count before (`None`: absent).
    ///
    /// # Errors
    ///
    /// The backend's errors (safe to retry).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have set the count.
    pub async fn reset(&self, permits: i64) -> Result<Option<i64>> {
        self.backend.reset_permits(&self.name, permits).await
    }

    /// Deletes the semaphore; returns whether it existed. Waiters keep waiting until it is set
    /// again.
    ///
    /// # Errors
    ///
    /// The backend's errors.
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have deleted it.
    pub async fn delete(&self) -> Result<bool> {
        self.backend.delete_semaphore(&self.name).await
    }

    /// What the store holds for the semaphore.
    ///
    /// # Errors
    ///
    /// The backend's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn state(&self) -> Result<SemaphoreState> {
        self.backend.permits_state(&self.name).await
    }
}

/// The attempts of one [`Semaphore::acquire_with`].
struct TakePermits<'a, B> {
    backend: &'a B,
    name: &'a str,
    permits: u32,
}

impl<B: SemaphoreBackend> Attempts for TakePermits<'_, B> {
    type Won = i64;

    // Nobody owns a permit: an attempt that may have applied cannot be undone, so it is not
    // tried again either (it could take twice).
    const RETRIES_AMBIGUOUS: bool = false;

    async fn attempt(&self) -> Result<Tried<i64>> {
        Ok(
            match self
                .backend
                .try_take_permits(self.name, self.permits)
                .await?
            {
                PermitsTaken::Taken { left } => Tried::Won(left),
                // No lease to cap the wait by: the count announcements wake the waiters (a
                // re-check every second is the backstop). Some permits, but too few for this
                // waiter: a waiter needing fewer may take them, so the wake-up is handed on.
                PermitsTaken::Short { available } => Tried::Busy {
                    recheck: None,
                    pass_on: available.is_some_and(|available| available > 0),
                },
            },
        )
    }

    async fn register(&self) -> Result<ReleaseWatch> {
        self.backend.watch_permits(self.name).await
    }
}

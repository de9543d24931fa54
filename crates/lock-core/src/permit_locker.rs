//! [`PermitLocker`]: lease-bound semaphore permits for users, a [`Locker`] over the permit
//! side of a [`LeasedSemaphoreBackend`] plus the count's operations.

use std::sync::Arc;

use crate::error::Result;
use crate::fencing::Fencing;
use crate::guard::LockGuard;
use crate::leased_backend::{LeasedSemaphoreBackend, LeasedState};
use crate::locker::Locker;
use crate::options::LockOptions;
use crate::owner::Owner;

/// Semaphores whose permits are held like locks (Redisson's `RPermitExpirableSemaphore` on
/// Redis): each permit is a [`LockGuard`], renewed by the watchdog while it lives, given back on
/// [`LockGuard::release`] or drop, and **given back by the store when its lease ends**, so a
/// holder that crashes or hangs never leaks capacity for longer than one lease.
///
/// This is the semaphore to use where permits guard a resource; the plain
/// [`Semaphore`](crate::Semaphore) is a counter nobody owns. Leases are judged by the store's
/// clock (Redisson's clients use their own).
///
/// One acquire takes one permit, and each permit is its own owner (unless the options name one),
/// so each guard renews and gives back exactly its own permit, whatever its lease. Several
/// permits at once are not one atomic step: two tasks each taking two of three permits one by
/// one can each end up waiting with one. An explicit owner taking several permits counts them
/// in its guards' [`LockGuard::hold_count`]; a release then gives back the one whose lease ends
/// first.
///
/// Cheap to clone.
///
/// # Example
///
/// ```
/// use lock_core::{MemoryBackend, PermitLocker};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let permits = PermitLocker::new(MemoryBackend::new());
/// permits.try_set_permits("encoders", 4).await?; // only the first client sets it
/// let encoder = permits.acquire("encoders").await?;
/// tokio::select! {
///     () = async { /* ... encode, with at most 3 others ... */ } => {}
///     loss = encoder.lost() => eprintln!("permit lost: {loss:?}"),
/// }
/// encoder.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct PermitLocker<B: LeasedSemaphoreBackend> {
    backend: Arc<B>,
    permits: Locker<B::Permits>,
}

impl<B: LeasedSemaphoreBackend> Clone for PermitLocker<B> {
    fn clone(&self) -> Self {
        PermitLocker {
            backend: self.backend.clone(),
            permits: self.permits.clone(),
        }
    }
}

impl<B: LeasedSemaphoreBackend> std::fmt::Debug for PermitLocker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitLocker")
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

impl<B: LeasedSemaphoreBackend> PermitLocker<B> {
    /// Lease-bound permits over `backend`.
    #[must_use]
    pub fn new(backend: B) -> Self {
        let permits = Locker::new(backend.permit_side());
        PermitLocker {
            backend: Arc::new(backend),
            permits,
        }
    }

    /// The permit side's locker, for everything [`Locker`] offers on permits
    /// ([`Locker::lock_with`] with a lease or a wait, [`Locker::with_lock`], [`Locker::state`]
    /// for the holders, [`Locker::force_unlock`] to give back every permit).
    #[must_use]
    pub fn permits(&self) -> &Locker<B::Permits> {
        &self.permits
    }

    /// Takes one permit of `name`, waiting as long as it takes, with a watchdog lease (30 s,
    /// renewed every 10 s while the guard lives).
    ///
    /// # Errors
    ///
    /// As [`Locker::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`]: a permit an acquire in flight may have taken is given back in the
    /// background (or ends with its lease).
    pub async fn acquire(&self, name: &str) -> Result<LockGuard<B::Permits>> {
        self.acquire_with(name, &LockOptions::new()).await
    }

    /// One attempt at a permit: `Ok(None)` when none is available.
    ///
    /// # Errors
    ///
    /// As [`Locker::try_lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`PermitLocker::acquire`].
    pub async fn try_acquire(&self, name: &str) -> Result<Option<LockGuard<B::Permits>>> {
        match self.acquire_with(name, &LockOptions::new().no_wait()).await {
            Ok(permit) => Ok(Some(permit)),
            Err(crate::error::Error::NotAcquired { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// A permit with explicit options: wait, lease (a fixed lease is not renewed: the permit
    /// goes back when it ends), fencing; an owner (by default each permit is its own).
    ///
    /// # Errors
    ///
    /// As [`Locker::lock_with`].
    ///
    /// # Cancel safety
    ///
    /// As [`PermitLocker::acquire`].
    pub async fn acquire_with<F: Fencing>(
        &self,
        name: &str,
        options: &LockOptions<F>,
    ) -> Result<LockGuard<B::Permits, F>> {
        // Each permit its own owner unless the caller names one: a guard then gives back, and
        // its watchdog renews, exactly its own permit.
        match options.explicit_owner() {
            Some(_) => self.permits.lock_with(name, options).await,
            None => {
                let options = options.clone().owner(Owner::new());
                self.permits.lock_with(name, &options).await
            }
        }
    }

    /// Creates the semaphore `name` with `permits`, unless it exists: whether it did.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; the store's errors (safe to retry).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have set the count.
    pub async fn try_set_permits(&self, name: &str, permits: u32) -> Result<bool> {
        self.backend.check_name(name)?;
        self.backend.try_set_permits(name, permits).await
    }

    /// Adds `delta` permits to `name` (negative: removes them; the count may go below zero
    /// while permits are out); returns the new count.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; the store's errors (an ambiguous one may
    /// have been applied).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have been applied.
    pub async fn add_permits(&self, name: &str, delta: i64) -> Result<i64> {
        self.backend.check_name(name)?;
        self.backend.add_permits(name, delta).await
    }

    /// The semaphore `name`: available permits, holders, expired permits not yet given back.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; the store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn state(&self, name: &str) -> Result<LeasedState> {
        self.backend.check_name(name)?;
        self.backend.leased_state(name).await
    }
}

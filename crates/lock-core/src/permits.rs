//! [`Permits`]: a handle on one semaphore whose permits are leased like locks (Redisson's
//! `RPermitExpirableSemaphore`), from [`Locker::permits`].

use std::sync::Arc;

use crate::error::Result;
use crate::fencing::Fencing;
use crate::guard::LockGuard;
use crate::locker::Locker;
use crate::options::LockOptions;
use crate::owner::Owner;
use crate::permit_backend::{PermitBackend, PermitState};

/// A semaphore whose permits are held like locks (Redisson's `RPermitExpirableSemaphore`), made
/// by [`Locker::permits`] with its name bound: each permit is a [`LockGuard`], renewed by the watchdog while it lives, given back on
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
/// Cheap to clone; every handle from one locker (and its clones) shares one watchdog.
///
/// # Example
///
/// ```
/// use lock_core::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let locker = Locker::new(MemoryBackend::new());
/// let encoders = locker.permits("encoders")?;
/// encoders.try_set_permits(4).await?; // only the first client sets it
/// let encoder = encoders.acquire().await?;
/// tokio::select! {
///     () = async { /* ... encode, with at most 3 others ... */ } => {}
///     loss = encoder.lost() => eprintln!("permit lost: {loss:?}"),
/// }
/// encoder.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct Permits<B: PermitBackend> {
    backend: Arc<B>,
    permits: Locker<B::Permits>,
    name: Arc<str>,
}

impl<B: PermitBackend> Clone for Permits<B> {
    fn clone(&self) -> Self {
        Permits {
            backend: self.backend.clone(),
            permits: self.permits.clone(),
            name: self.name.clone(),
        }
    }
}

impl<B: PermitBackend> std::fmt::Debug for Permits<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permits")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The permit side's locker, as a family of its own type (see `crate::families`): keyed by
/// this wrapper, not by `Locker<B::Permits>`, which another family's side could share.
struct PermitSide<B: PermitBackend>(Locker<B::Permits>);

impl<B: PermitBackend> Clone for PermitSide<B> {
    fn clone(&self) -> Self {
        PermitSide(self.0.clone())
    }
}

impl<B: PermitBackend> Locker<B> {
    /// A handle on the semaphore `name` whose permits are leased like locks (Redisson's
    /// `getPermitExpirableSemaphore`; see [`Permits`]). Nothing is sent until the handle is
    /// used.
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
    /// let gpus = locker.permits("gpus")?;
    /// gpus.try_set_permits(2).await?;
    /// let gpu = gpus.acquire().await?;
    /// gpu.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn permits(&self, name: &str) -> Result<Permits<B>> {
        self.backend().check_name(name)?;
        let backend = self.shared_backend().clone();
        let PermitSide::<B>(permits) =
            self.family(|| PermitSide(Locker::new(backend.permit_side())));
        Ok(Permits {
            backend: self.shared_backend().clone(),
            permits,
            name: name.into(),
        })
    }
}

impl<B: PermitBackend> Permits<B> {
    /// The semaphore's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The permit side's locker, for everything [`Locker`] offers on permits
    /// ([`Locker::with_lock`], [`Locker::state`] for the holders, [`Locker::force_unlock`] to
    /// give back every permit).
    #[must_use]
    pub fn locker(&self) -> &Locker<B::Permits> {
        &self.permits
    }

    /// Takes one permit, waiting as long as it takes, with a watchdog lease (30 s,
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
    pub async fn acquire(&self) -> Result<LockGuard<B::Permits>> {
        self.acquire_with(&LockOptions::new()).await
    }

    /// One attempt at a permit: `Ok(None)` when none is available.
    ///
    /// # Errors
    ///
    /// As [`Locker::try_lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Permits::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<LockGuard<B::Permits>>> {
        match self.acquire_with(&LockOptions::new().no_wait()).await {
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
    /// As [`Permits::acquire`].
    pub async fn acquire_with<F: Fencing>(
        &self,
        options: &LockOptions<F>,
    ) -> Result<LockGuard<B::Permits, F>> {
        // Each permit its own owner unless the caller names one: a guard then gives back, and
        // its watchdog renews, exactly its own permit.
        match options.explicit_owner() {
            Some(_) => self.permits.lock_with(&self.name, options).await,
            None => {
                let options = options.clone().owner(Owner::new());
                self.permits.lock_with(&self.name, &options).await
            }
        }
    }

    /// Creates the semaphore with `permits`, unless it exists: whether it did.
    ///
    /// # Errors
    ///
    /// The store's errors (safe to retry).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have set the count.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.backend.try_set_permits(&self.name, permits).await
    }

    /// Adds `delta` permits (negative: removes them; the count may go below zero
    /// while permits are out); returns the new count.
    ///
    /// # Errors
    ///
    /// The store's errors (an ambiguous one may
    /// have been applied).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have been applied.
    pub async fn add_permits(&self, delta: i64) -> Result<i64> {
        self.backend.add_permits(&self.name, delta).await
    }

    /// The semaphore: available permits, holders, expired permits not yet given back.
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn state(&self) -> Result<PermitState> {
        self.backend.permit_state(&self.name).await
    }
}

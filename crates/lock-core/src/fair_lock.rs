//! [`FairLock`]: a handle on one fair lock (Redisson's `RFairLock`), from
//! [`Locker::fair`].

use std::sync::Arc;

use crate::contract::{LockBackend, LockState};
use crate::error::Result;
use crate::fair_backend::{FairBackend, FairState};
use crate::fencing::Fencing;
use crate::guard::LockGuard;
use crate::locker::Locker;
use crate::options::LockOptions;

/// A lock granted in the order its waiters came (Redisson's `RFairLock`): the store keeps a
/// queue, and a release wakes only the waiter at its head. Made by [`Locker::fair`]; its name
/// is bound when it is made.
///
/// Everything else is as [`Locker::lock`]: reentrant per owner (the current task by default),
/// a watchdog lease while the guard lives, the release run in the background when a guard is
/// dropped. A waiter that goes away keeps its place for at most
/// [`QUEUE_TIMEOUT`](crate::fair_backend::QUEUE_TIMEOUT), holding up the ones behind it that
/// long at most.
///
/// Cheap to clone; every handle on the same name from one locker (and its clones) shares one
/// watchdog and one line per owner.
///
/// # Example
///
/// ```
/// use lock_core::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let locker = Locker::new(MemoryBackend::new());
/// let printer = locker.fair("printer")?;
/// let turn = printer.lock().await?; // later waiters are granted in arrival order
/// // ... print ...
/// turn.release().await?;
/// assert!(printer.state().await?.queue.is_empty());
/// # Ok(())
/// # }
/// ```
pub struct FairLock<B: FairBackend> {
    backend: Arc<B>,
    locker: Locker<B::Fair>,
    name: Arc<str>,
}

impl<B: FairBackend> Clone for FairLock<B> {
    fn clone(&self) -> Self {
        FairLock {
            backend: self.backend.clone(),
            locker: self.locker.clone(),
            name: self.name.clone(),
        }
    }
}

impl<B: FairBackend> std::fmt::Debug for FairLock<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The fair side's locker, as a family of its own type (see `crate::families`): keyed by this
/// wrapper, not by `Locker<B::Fair>`, which another family's side could share.
struct FairSide<B: FairBackend>(Locker<B::Fair>);

impl<B: FairBackend> Clone for FairSide<B> {
    fn clone(&self) -> Self {
        FairSide(self.0.clone())
    }
}

impl<B: FairBackend + LockBackend> Locker<B> {
    /// A handle on the fair lock `name` (Redisson's `getFairLock`; see [`FairLock`]). Nothing
    /// is sent until the handle is used.
    ///
    /// The fair lock shares the plain lock's keys (as in Redisson): a fair lock and a plain
    /// lock of one name are one lock, but only the fair side's waiters queue.
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
    /// let turn = locker.fair("printer")?.lock().await?;
    /// turn.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair(&self, name: &str) -> Result<FairLock<B>> {
        let backend = self.shared_backend().clone();
        let FairSide::<B>(locker) = self.family(|| FairSide(Locker::new(backend.fair_side())));
        locker.backend().check_name(name)?;
        Ok(FairLock {
            backend: self.shared_backend().clone(),
            locker,
            name: name.into(),
        })
    }
}

impl<B: FairBackend> FairLock<B> {
    /// The lock's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes the lock in its turn, waiting as long as it takes, in watchdog mode, owned by the
    /// current task ([`Locker::lock`] on the fair side).
    ///
    /// # Errors
    ///
    /// As [`Locker::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`]; a waiter dropped while queued leaves the queue in the background
    /// (or its place lapses after [`QUEUE_TIMEOUT`](crate::fair_backend::QUEUE_TIMEOUT)).
    pub async fn lock(&self) -> Result<LockGuard<B::Fair>> {
        self.locker.lock(&self.name).await
    }

    /// One attempt: `Ok(None)` when someone holds the lock or others are queued before this
    /// owner.
    ///
    /// # Errors
    ///
    /// As [`Locker::try_lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`FairLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<LockGuard<B::Fair>>> {
        self.locker.try_lock(&self.name).await
    }

    /// The lock with explicit options: a bounded wait, a fixed lease, an owner, fencing
    /// ([`Locker::lock_with`]).
    ///
    /// # Errors
    ///
    /// As [`Locker::lock_with`].
    ///
    /// # Cancel safety
    ///
    /// As [`FairLock::lock`].
    pub async fn lock_with<F: Fencing>(
        &self,
        options: &LockOptions<F>,
    ) -> Result<LockGuard<B::Fair, F>> {
        self.locker.lock_with(&self.name, options).await
    }

    /// The lock and its queue in one snapshot: holders, remaining lease, waiters in the order
    /// they will be granted it.
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn state(&self) -> Result<FairState> {
        self.backend.fair_state(&self.name).await
    }

    /// Who holds the lock, how many times, and for how long still ([`Locker::state`]).
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn holders(&self) -> Result<LockState> {
        self.locker.state(&self.name).await
    }

    /// Deletes the lock whoever holds it and wakes the waiter at the head of the queue.
    /// Returns whether it was held. Holders find out through [`LockGuard::lost`] at their next
    /// renewal.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.locker.force_unlock(&self.name).await
    }

    /// The fair side's locker, for what the handle does not offer (e.g. [`Locker::with_lock`],
    /// [`Locker::unlock`] of an owner).
    #[must_use]
    pub fn locker(&self) -> &Locker<B::Fair> {
        &self.locker
    }
}

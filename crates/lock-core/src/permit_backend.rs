//! The contract of a store of lease-bound permits: a semaphore whose permits are held like
//! locks, each with a lease the store enforces, so a holder that dies gives its permits back by
//! itself (Redisson's `RPermitExpirableSemaphore`, with leases judged by the store's clock).
//!
//! The permits are a [`LockBackend`] ([`permit_side`](PermitBackend::permit_side)):
//! one grant is one permit, so a [`crate::Locker`] over it hands out permits as guards with
//! everything a lock guard has (watchdog renewals, [`crate::LockGuard::lost`], release on drop,
//! the cleanup after outcomes of unknown effect). [`crate::Permits`] pairs it with the
//! count's operations for users.

use std::future::Future;

use crate::contract::LockBackend;
use crate::error::Result;
use crate::semaphore_backend::SemaphoreBackend;

/// A snapshot of one semaphore of lease-bound permits; see
/// [`PermitBackend::permit_state`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitState {
    /// The permits available, not counting expired ones not yet given back; `None` when the
    /// semaphore was never set (or was deleted).
    pub available: Option<i64>,
    /// Every owner field holding permits whose lease has not ended, with how many, sorted.
    pub holders: Vec<(String, u32)>,
    /// Permits whose lease has ended and that the next acquire gives back to the count.
    pub expired: u32,
}

impl PermitState {
    /// A state from its parts.
    #[must_use]
    pub fn new(available: Option<i64>, holders: Vec<(String, u32)>, expired: u32) -> Self {
        PermitState {
            available,
            holders,
            expired,
        }
    }

    /// The permits held (by live leases).
    #[must_use]
    pub fn held(&self) -> u32 {
        self.holders.iter().map(|(_, count)| count).sum()
    }
}

/// A semaphore store whose permits are lease-bound.
///
/// The count itself is the [`SemaphoreBackend`]'s (`try_set_permits`, `add_permits`, and the
/// rest work on it as on a plain semaphore). [`permit_side`](Self::permit_side) is a lock
/// backend over the same names whose grants are permits, keeping the whole [`LockBackend`]
/// contract with these meanings:
///
/// - `try_acquire` first gives back to the count every permit of the name whose lease has
///   ended (announcing the new count), then grants one permit when at least one is available:
///   the count goes down by one and the permit is recorded for the owner field with its lease,
///   judged by the store's clock. An owner field may hold several permits: its hold count is
///   how many. Otherwise `Held`, with `ttl` the time until the nearest permit's lease ends
///   (`None` when no permit is out or the semaphore does not exist).
/// - `release` gives back one permit of the owner field (the count goes up by one, announced);
///   [`ReleaseOutcome::Released`](crate::ReleaseOutcome) when it holds no more.
/// - `renew` lengthens every permit of the owner field; `NotHeld` when it holds none any more
///   (they expired and were given back).
/// - `abandon` gives back the owner field's permits above `keep`.
/// - `force_release` gives back every permit of the name, whoever holds it (an operator's
///   repair); whether any was out.
/// - `inspect` lists the owner fields with their permits, and the longest remaining lease.
/// - `watch_releases` hears the count's announcements (a new count wakes up to that many
///   waiters).
///
/// Fencing tokens, when asked for, grow per name as for locks.
///
/// # Example
///
/// ```
/// use lock_core::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// // Users reach the contract through `Locker::permits`.
/// let permits = Locker::new(MemoryBackend::new()).permits("gpu")?;
/// permits.try_set_permits(1).await?;
/// let gpu = permits.acquire().await?; // renewed while held; given back if we die
/// assert!(permits.try_acquire().await?.is_none());
/// gpu.release().await?;
/// # Ok(())
/// # }
/// ```
pub trait PermitBackend: SemaphoreBackend {
    /// The permits as a lock backend.
    type Permits: LockBackend;

    /// The permit side, sharing this backend's store, connections and client id.
    fn permit_side(&self) -> Self::Permits;

    /// The semaphore `name` in one consistent snapshot (read only: expired permits are counted,
    /// not given back).
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it changes nothing.
    fn permit_state(&self, name: &str) -> impl Future<Output = Result<PermitState>> + Send;
}

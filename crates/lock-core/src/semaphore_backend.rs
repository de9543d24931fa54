//! The contract of a counting semaphore store: one step per method, like [`LockBackend`]'s.
//!
//! A semaphore here is Redisson's `RSemaphore`: one counter of available permits per name,
//! taken and given back by anyone (no owner, no lease). [`crate::Semaphore`] is the user API
//! built on these steps; it adds the waiting.

use std::future::Future;

use crate::contract::LockBackend;
use crate::error::Result;
use crate::notify::ReleaseWatch;

/// What one attempt to take permits found; see [`SemaphoreBackend::try_take_permits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PermitsTaken {
    /// The permits are taken; `left` are still available.
    Taken {
        /// The permits available after this take.
        left: i64,
    },
    /// Too few permits were available; nothing changed.
    Short {
        /// The permits available (`None`: the semaphore was never set, or was deleted).
        available: Option<i64>,
    },
}

/// A snapshot of one semaphore; see [`SemaphoreBackend::permits_state`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreState {
    /// The permits available; `None` when the semaphore was never set (or was deleted). It can
    /// be negative after [`SemaphoreBackend::add_permits`] with a negative delta.
    pub available: Option<i64>,
}

impl SemaphoreState {
    /// A state with this many available permits.
    #[must_use]
    pub fn new(available: Option<i64>) -> Self {
        SemaphoreState { available }
    }
}

/// The contract of a semaphore store: one indivisible step per method.
///
/// The rules of [`LockBackend`] apply as they are: each step is atomic with respect to every
/// other step of every client (rule 1), answers are exact (rule 4), an error is ambiguous
/// exactly when the step may have been applied (rule 5), any future may be dropped (rule 8).
/// Names have passed [`LockBackend::check_name`]. In addition:
///
/// - **Every step that raises the count announces it**: [`return_permits`](Self::return_permits),
///   [`try_set_permits`](Self::try_set_permits) (when it sets), [`add_permits`](Self::add_permits)
///   and [`reset_permits`](Self::reset_permits) tell the watchers registered with
///   [`watch_permits`](Self::watch_permits) the new count, and a watch wakes up to that many of
///   its local waiters (see [`crate::ReleaseHub::notify_up_to`]). As for locks, a backend that may
///   have missed an announcement wakes every waiter instead.
/// - **Nothing expires**: permits taken stay taken until someone gives them back. A holder that
///   crashes leaks its permits (Redisson's `RSemaphore` behaves the same).
///
/// # Example
///
/// [`crate::MemoryBackend`] implements it; [`crate::Locker::semaphore`] works over any
/// implementation:
///
/// ```
/// use lock_core::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let locker = Locker::new(MemoryBackend::new());
/// let pool = locker.semaphore("connections")?;
/// assert!(pool.try_set_permits(2).await?);
/// pool.acquire(2).await?;
/// assert!(!pool.try_acquire(1).await?);
/// assert_eq!(pool.release(2).await?, 2);
/// # Ok(())
/// # }
/// ```
pub trait SemaphoreBackend: LockBackend {
    /// One attempt to take `permits` (at least 1) of `name`, without waiting: if the semaphore
    /// exists and has at least `permits` available, lower the count by `permits`; otherwise
    /// change nothing.
    ///
    /// # Errors
    ///
    /// Ambiguous ([`crate::Error::Timeout`], [`crate::Error::ConnectionLost`]) when the take may
    /// have been applied: the permits may then be taken with nobody to give them back, and
    /// nothing can tell (the counter has no owner). [`crate::Semaphore`] returns such an
    /// error at once rather than retrying, so permits are never taken twice.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped attempt may have taken the permits.
    fn try_take_permits(
        &self,
        name: &str,
        permits: u32,
    ) -> impl Future<Output = Result<PermitsTaken>> + Send;

    /// Gives back `permits` (at least 1) to `name`: adds them to the count (creating it at
    /// `permits` when absent) and announces the new count. Returns the new count.
    ///
    /// # Errors
    ///
    /// Ambiguous when it may have been applied; the caller cannot tell whether the permits are
    /// back, and must not simply retry (that could give them back twice).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have given the permits back.
    fn return_permits(&self, name: &str, permits: u32) -> impl Future<Output = Result<i64>> + Send;

    /// Sets the count of `name` to `permits` when the semaphore does not exist, and announces
    /// it; returns whether it set it. An existing semaphore is left as it is.
    ///
    /// # Errors
    ///
    /// Ambiguous when it may have been applied (retrying is safe: a second call finds the
    /// count set and answers `false`).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have set the count.
    fn try_set_permits(
        &self,
        name: &str,
        permits: u32,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Adds `delta` (negative to remove permits) to the count of `name`, from 0 when absent,
    /// and announces the new count; returns it. The count may go below zero.
    ///
    /// # Errors
    ///
    /// Ambiguous when it may have been applied (not safe to retry blindly).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have been applied.
    fn add_permits(&self, name: &str, delta: i64) -> impl Future<Output = Result<i64>> + Send;

    /// Takes every available permit of `name`: sets an existing count to 0 and returns what it
    /// was (0 when absent). Announces nothing.
    ///
    /// # Errors
    ///
    /// Ambiguous when it may have been applied.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have drained the permits.
    fn drain_permits(&self, name: &str) -> impl Future<Output = Result<i64>> + Send;

    /// Sets the count of `name` to `permits` whatever it was (an operator's reset), and
    /// announces it; returns the count before (`None`: absent).
    ///
    /// # Errors
    ///
    /// Ambiguous when it may have been applied (retrying is safe: it sets the same count).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have set the count.
    fn reset_permits(
        &self,
        name: &str,
        permits: i64,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// Deletes the semaphore `name`; returns whether it existed. Announces nothing: waiters
    /// keep waiting until it is set again.
    ///
    /// # Errors
    ///
    /// Ambiguous when it may have been applied.
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have deleted it.
    fn delete_semaphore(&self, name: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Reads the semaphore `name` (one consistent snapshot, read only).
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it changes nothing.
    fn permits_state(&self, name: &str) -> impl Future<Output = Result<SemaphoreState>> + Send;

    /// Registers for the announcements of `name`'s count, with the contract of
    /// [`LockBackend::watch_releases`]: subscribed before it returns, shared per name, and a
    /// polling watch when the store has no notifications.
    ///
    /// # Errors
    ///
    /// As [`LockBackend::watch_releases`]: prefer a polling watch to an error.
    ///
    /// # Cancel safety
    ///
    /// A dropped registration leaves no subscription behind for good.
    fn watch_permits(&self, name: &str) -> impl Future<Output = Result<ReleaseWatch>> + Send;
}

//! The contract of a countdown latch store: one step per method, like [`LockBackend`]'s.
//!
//! A latch here is Redisson's `RCountDownLatch`: one count per name, set once, counted down by
//! anyone; waiters are let through when it reaches zero. [`crate::CountDownLatch`] is the user
//! API built on these steps; it adds the waiting.

use std::future::Future;

use crate::contract::LockBackend;
use crate::error::Result;
use crate::notify::ReleaseWatch;

/// The contract of a latch store: one indivisible step per method.
///
/// The rules of [`LockBackend`] apply as they are (atomic steps, exact answers, an error
/// ambiguous exactly when the step may have been applied, any future may be dropped). Names have
/// passed [`LockBackend::check_name`]. In addition, **reaching zero is announced**: the step
/// that brings the count to zero, and a deletion, tell every watcher registered with
/// [`watch_latch`](Self::watch_latch), which wakes all its local waiters; a backend that may
/// have missed an announcement wakes them too. (Waiters also look again on a timer, so a lost
/// announcement delays them but never leaves them waiting for good.)
///
/// # Example
///
/// [`crate::MemoryBackend`] implements it; [`crate::Locker::latch`] works over any
/// implementation:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let locker = lock_core::Locker::new(lock_core::MemoryBackend::new());
/// let ready = locker.latch("workers-ready")?;
/// assert!(ready.try_set_count(2).await?);
/// ready.count_down().await?;
/// assert_eq!(ready.count().await?, 1);
/// ready.count_down().await?;
/// ready.wait().await?; // open
/// # Ok(())
/// # }
/// ```
pub trait LatchBackend: LockBackend {
    /// Sets the count of `name` to `count` when the latch does not exist (and announces the new
    /// count); returns whether it did. An existing latch is left as it is.
    ///
    /// # Errors
    ///
    /// Ambiguous when it may have been applied (retrying is safe: a second call answers
    /// `false`).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have set the count.
    fn try_set_count(&self, name: &str, count: u64) -> impl Future<Output = Result<bool>> + Send;

    /// Counts `name` down by one; at zero (or below: counting down a missing latch) the latch
    /// is deleted, and reaching exactly zero is announced. Returns the count left (0 once
    /// open).
    ///
    /// # Errors
    ///
    /// Ambiguous when it may have been applied: do not simply retry (that could count down
    /// twice).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have counted down.
    fn count_down(&self, name: &str) -> impl Future<Output = Result<u64>> + Send;

    /// The count of `name` (0 when the latch does not exist: open).
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn latch_count(&self, name: &str) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes the latch `name` (an operator's reset), which opens it; announced when it
    /// existed. Returns whether it existed.
    ///
    /// # Errors
    ///
    /// Ambiguous when it may have been applied (retrying is safe).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have deleted it.
    fn delete_latch(&self, name: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Registers for the announcements of `name`, with the contract of
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
    fn watch_latch(&self, name: &str) -> impl Future<Output = Result<ReleaseWatch>> + Send;
}

//! The contract of a fair lock store: a lock backend that grants in the order the waiters
//! came, with a queue the store keeps.

use std::future::Future;
use std::time::Duration;

use crate::contract::LockBackend;
use crate::error::Result;

/// How long a waiter keeps its place in a fair lock's queue without trying again: a waiter
/// that went away (a crashed process) holds up the ones behind it at most this long. Live
/// waiters try again well within it (every third of it at most), which keeps their place.
pub const QUEUE_TIMEOUT: Duration = Duration::from_secs(10);

/// A snapshot of one fair lock; see [`FairBackend::fair_state`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairState {
    /// Every owner field holding the lock, with its hold count (one at most, reentrant).
    pub holders: Vec<(String, u32)>,
    /// The remaining lease, when the lock is held.
    pub ttl: Option<Duration>,
    /// The waiters in the order they will be granted the lock, each with the time its place
    /// lasts without it trying again (`None`: no deadline recorded; zero: lapsed, dropped at the
    /// next attempt).
    pub queue: Vec<(String, Option<Duration>)>,
}

impl FairState {
    /// A state from its parts.
    #[must_use]
    pub fn new(
        holders: Vec<(String, u32)>,
        ttl: Option<Duration>,
        queue: Vec<(String, Option<Duration>)>,
    ) -> Self {
        FairState {
            holders,
            ttl,
            queue,
        }
    }
}

/// A store of fair locks: [`fair_side`](Self::fair_side) is a lock backend over the same names
/// as the store's plain locks (the same hash and holders) that grants in arrival order.
///
/// The fair side keeps the whole [`LockBackend`] contract, and [`LockBackend::queues`] is
/// `true` for it:
///
/// - `try_acquire` grants when the lock is free and the queue is empty or this owner field is
///   at its head, or on a re-entry. Otherwise, when the caller waits
///   ([`AcquireRequest::waits`](crate::AcquireRequest)), the owner field goes to the back of
///   the queue, or keeps its place with a fresh deadline ([`QUEUE_TIMEOUT`] from now, by the
///   store's clock) when it is queued; `Held` asks it to try again within a third of that.
///   Waiters at the head whose deadline passed are dropped first (not the caller's own entry: it
///   is trying, and keeps its place).
/// - `release` (and `abandon`, `force_release`) that frees the lock wakes only the waiter at
///   the head of the queue, through its own [`LockBackend::watch_releases_of`].
/// - `leave_queue` takes a waiter that gave up out of the queue (and wakes the next one when
///   it was the head of a free lock).
///
/// # Example
///
/// ```
/// use lock_core::{FairBackend, Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let store = MemoryBackend::new();
/// let fair = Locker::new(store.fair_side());
/// let first = fair.lock("printer").await?; // later waiters are granted in arrival order
/// first.release().await?;
/// assert!(store.fair_state("printer").await?.queue.is_empty());
/// # Ok(())
/// # }
/// ```
pub trait FairBackend: Send + Sync + 'static {
    /// The fair side.
    type Fair: LockBackend;

    /// The fair side, sharing this backend's store, connections and client id.
    fn fair_side(&self) -> Self::Fair;

    /// The fair lock `name` and its queue, in one consistent snapshot (read only).
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] for a name the store refuses, before any I/O; the store's
    /// errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it changes nothing.
    fn fair_state(&self, name: &str) -> impl Future<Output = Result<FairState>> + Send;
}

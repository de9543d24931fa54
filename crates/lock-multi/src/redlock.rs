//! RedLock: one lock over N independent nodes, held while a **majority** (`N/2 + 1`) grant it
//! within the validity time.
//!
//! [`RedLock`] is the quorum engine ([`Composite`]) with the [`Majority`] policy, so it is a
//! [`lock_core::LockBackend`] over any mix of node backends and works with the same guard,
//! watchdog, waiter and lost signal as a single node. Following the Redis lock algorithm:
//!
//! 1. the owner field is the composite's own (a random UUID v4 client id, 122 random bits, and
//!    the holder id), the same on every node;
//! 2. every attempt goes to all nodes at once, each call with its own timeout (5 % of the lease
//!    by default);
//! 3. the lock is granted only when at least `N/2 + 1` nodes grant it **and** the validity
//!    `lease − elapsed − drift` is positive, with `drift = lease × 1 % + 2 ms` and `elapsed` on
//!    the monotonic clock from before the first send; the guard's validity deadline is the one
//!    computed;
//! 4. after a failed attempt every node is told to drop what the attempt may have taken,
//!    including the nodes that refused or timed out;
//! 5. the next attempt comes after a random delay (a split) or on a release notification (a
//!    clear holder elsewhere);
//! 6. a watchdog renewal counts only when a majority renews before the validity runs out;
//! 7. release goes to all nodes.
//!
//! What it guarantees and what it does not (restarts without persistence, pauses, clock jumps)
//! is in `docs/multi-node.md` in the repository; in short: use fencing tokens for correctness.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use lock_core::{DynLockBackend, Locker, MemoryBackend};
//! use lock_multi::RedLock;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::Error> {
//! let nodes: Vec<Arc<dyn DynLockBackend>> =
//!     (0..5).map(|_| Arc::new(MemoryBackend::new()) as _).collect();
//! let redlock = RedLock::new(nodes)?;
//! assert_eq!(redlock.required(), 3);
//! let locker = Locker::new(redlock);
//! let guard = locker.lock("nightly-export").await?;
//! // Validity = lease − elapsed − drift: a little under the 30 s watchdog lease.
//! assert!(guard.remaining() < guard.lease());
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use crate::composite::Composite;
use crate::quorum::Quorum;

/// RedLock's policy: a majority of the nodes, and a clock-drift allowance of
/// `lease × 1 % + 2 ms` taken off every lease's validity.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use lock_multi::{Majority, Quorum};
///
/// assert_eq!(Majority.required(3), 2);
/// assert_eq!(Majority.required(4), 3);
/// assert_eq!(Majority.required(5), 3);
/// assert_eq!(Majority.clock_drift(Duration::from_secs(10)), Duration::from_millis(102));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Majority;

/// The fixed part of the drift allowance.
pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

impl Quorum for Majority {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn required(&self, nodes: usize) -> usize {
        nodes / 2 + 1
    }

    fn clock_drift(&self, lease: Duration) -> Duration {
        lease / 100 + DRIFT_FLOOR
    }
}

/// A lock held while a majority of the nodes grant it within the validity time.
pub type RedLock = Composite<Majority>;

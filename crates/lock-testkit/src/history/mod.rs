//! A recorder of lock holds and a checker that finds safety violations in them.
//!
//! Workers record each critical section as a [`Hold`]: who held the lock (worker, owner,
//! fencing token), when (`acquired_at` taken right after the acquire returned, `released_at`
//! right before the release was sent, both on tokio's monotonic [`Instant`]), how long the
//! acquire waited, whether the guard reported a lost lease, and what the protected resource
//! answered to the hold's write. [`History::check`] then turns the holds into a [`Report`]:
//! overlapping holds of different owners, lost updates, fence rejections, stale writes and wait
//! times. When it finds a violation (an overlap, a lost update or a write refused by the fence),
//! it also draws the holds around the first ones as a timeline picture under the workspace's
//! `target/distlock-timelines/` and names it in [`Report::timeline`] and in the report's text.
//!
//! [`Instant`]: tokio::time::Instant
//!
//! Because `acquired_at` is taken after the acquire returned and `released_at` before the
//! release was sent, each recorded interval lies inside the time the lock was really held, so a
//! reported overlap is a real one (on one machine's monotonic clock).
//!
//! # Layout
//!
//! One file per job, each importing only the ones listed below it:
//!
//! - `checker`: [`check`] and its [`CheckOptions`], and [`History::check`]: the counts and
//!   examples of a [`Report`], and the decision to draw one.
//! - `draw`: how a report is shown: its `Display` text and the SVG timeline of the holds around
//!   its first violations (at most [`MAX_TIMELINE_HOLDS`] holds).
//! - `report`: [`Report`], [`Overlap`], [`WaitStats`]: what a check found, as plain data.
//! - `record`: [`Hold`], [`WriteStatus`], [`History`] and [`HoldRecorder`]: the log workers
//!   write while they run.
//!
//! # Example
//!
//! ```
//! use lock_testkit::history::{History, WriteStatus};
//!
//! let history = History::new();
//! let worker = history.clone(); // clones share the recorded holds
//!
//! // In each worker, right after the acquire returned:
//! let mut hold = worker.begin(0, "client-a:17", Some(42));
//! // ... the critical section: read, write with token 42, answered "accepted" ...
//! hold.set_lost_signal(false);
//! hold.end(Some(WriteStatus::Accepted)); // right before sending the release
//!
//! // After the workload, with the resource's initial and final values:
//! let report = history.check(1, 0);
//! assert_eq!(report.acquisitions, 1);
//! assert_eq!((report.overlaps, report.lost_updates), (0, 0));
//! assert!(report.is_clean());
//! println!("{report}");
//! ```

mod checker;
mod draw;
mod record;
mod report;

pub use checker::{CheckOptions, check};
pub use draw::MAX_TIMELINE_HOLDS;
pub use record::{History, Hold, HoldRecorder, WriteStatus};
pub use report::{DEFAULT_MAX_EXAMPLES, Overlap, Report, WaitStats};

/// What the checker's and the drawing's tests both build holds with.
#[cfg(test)]
mod test_holds {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Hold, WriteStatus};

    pub(super) fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A hold of `owner` from `t0 + a` ms to `t0 + r` ms, with an accepted write.
    pub(super) fn hold(t0: Instant, worker: usize, owner: &str, a: u64, r: u64) -> Hold {
        Hold::new(worker, owner, None, t0 + ms(a), t0 + ms(r))
            .with_write(WriteStatus::Accepted, None)
    }
}

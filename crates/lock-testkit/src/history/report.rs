//! The report: what a check found in a history ([`Report`], with its [`Overlap`] examples and
//! [`WaitStats`]), as plain data.
//!
//! Apart because two jobs share it: the checker fills it in, and the drawings show it (as text
//! and as a timeline); keeping it below both lets neither import the other's workings.

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use super::record::Hold;

/// Overlap examples a [`Report`] lists by default.
pub const DEFAULT_MAX_EXAMPLES: usize = 5;

/// Two holds of different owners whose intervals intersect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The hold acquired first.
    pub earlier: Hold,
    /// The hold acquired later, while `earlier` was still held.
    pub later: Hold,
    /// How long both were held: from `later.acquired_at` to the first release.
    pub duration: Duration,
}

/// Wait-time statistics over the holds that recorded `waited` (nearest-rank percentiles).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaitStats {
    /// Holds with a recorded wait.
    pub count: usize,
    /// Median wait.
    pub p50: Duration,
    /// 99th percentile wait.
    pub p99: Duration,
    /// Longest wait.
    pub max: Duration,
    /// The budget given in [`CheckOptions::wait_budget`] and the share (0.0..=1.0) of waits at
    /// most that long.
    ///
    /// [`CheckOptions::wait_budget`]: crate::history::CheckOptions::wait_budget
    pub within_budget: Option<(Duration, f64)>,
}

/// The result of [`check`]. Its `Display` is a one-paragraph summary.
///
/// [`check`]: crate::history::check
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Recorded holds.
    pub acquisitions: usize,
    /// Distinct workers.
    pub workers: usize,
    /// Distinct owners.
    pub owners: usize,
    /// Pairs of holds by **different** owners whose `[acquired_at, released_at]` intervals
    /// intersect. Touching intervals (one released exactly when the other was acquired) do not
    /// count, nor do holds of the same owner (reentrancy).
    pub overlaps: u64,
    /// The first overlapping pairs, by the later hold's acquisition time (at most
    /// [`CheckOptions::max_examples`]). For each later hold, the earlier hold listed is the one
    /// released last.
    ///
    /// [`CheckOptions::max_examples`]: crate::history::CheckOptions::max_examples
    pub overlap_examples: Vec<Overlap>,
    /// Holds whose write was accepted (each one increment).
    pub accepted_writes: u64,
    /// Holds whose write was rejected by the fence.
    pub fence_rejections: u64,
    /// `final_resource_value - initial_value`.
    pub observed_increase: i64,
    /// `accepted_writes - observed_increase`: accepted increments that the final value does not
    /// show. Should be 0; a positive value means lost updates; a **negative** value means the
    /// resource grew by more than the accepted writes recorded (writes missing from the
    /// history), which is a bug of the test, not of the lock.
    pub lost_updates: i64,
    /// Writes that were stale when sent: see [`stale_writes_rejected_ratio`](Self::stale_writes_rejected_ratio).
    pub stale_writes: u64,
    /// Stale writes the resource rejected.
    pub stale_writes_rejected: u64,
    /// The share of stale writes that were rejected, `None` if there were no stale writes.
    ///
    /// A hold `H` that wrote made a **stale write** if another hold `H2` of a different owner was
    /// acquired after `H` and before `H`'s write was sent
    /// (`H.acquired_at < H2.acquired_at < H.written_at`, with `H.released_at` as the write time
    /// if it was not recorded). Such an `H2` overlaps `H`, and when `H` wrote, a newer holder
    /// already held the lock. The ratio is `stale_writes_rejected / stale_writes`. With fenced reads and writes
    /// it is high, but it need not be 1.0: if `H2` had not touched the resource yet when `H`
    /// wrote, accepting `H`'s write is correct. `H2`'s own write is then refused or based on
    /// `H`'s, which is what `lost_updates` checks.
    pub stale_writes_rejected_ratio: Option<f64>,
    /// Holds whose guard reported a lost lease.
    pub lost_signals: u64,
    /// Wait times, `None` if no hold recorded one.
    pub wait: Option<WaitStats>,
    /// The earliest `acquired_at` (the origin of the times in `Display`).
    pub start: Option<Instant>,
    /// A picture of the holds around the first violations, written when the check found an
    /// overlap, a lost update or a fence rejection: one lane per owner, a bar per hold, the
    /// overlaps highlighted, writes marked as accepted or refused, on an axis in ms since
    /// `start` (at most [`MAX_TIMELINE_HOLDS`] holds). It is an SVG file
    /// `target/distlock-timelines/<name>-<n>.svg` in the cargo target directory (see
    /// [`CheckOptions::timeline_name`]). `None` when the history is clean, when
    /// [`CheckOptions::without_timeline`] was set, or when the file could not be written (a line
    /// on stderr then says why).
    ///
    /// [`MAX_TIMELINE_HOLDS`]: crate::history::MAX_TIMELINE_HOLDS
    /// [`CheckOptions::timeline_name`]: crate::history::CheckOptions::timeline_name
    /// [`CheckOptions::without_timeline`]: crate::history::CheckOptions::without_timeline
    pub timeline: Option<PathBuf>,
}

impl Report {
    /// No overlaps and no lost (or unexplained) updates.
    pub fn is_clean(&self) -> bool {
        self.overlaps == 0 && self.lost_updates == 0
    }
}

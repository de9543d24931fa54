//! A recorder of lock holds and a checker that finds safety violations in them.
//!
//! Workers record each critical section as a [`Hold`]: who held the lock (worker, owner,
//! fencing token), when (`acquired_at` taken right after the acquire returned, `released_at`
//! right before the release was sent, both on tokio's monotonic [`Instant`]), how long the
//! acquire waited, whether the guard reported a lost lease, and what the protected resource
//! answered to the hold's write. [`History::check`] then turns the holds into a [`Report`]:
//! overlapping holds of different owners, lost updates, fence rejections, stale writes and wait
//! times.
//!
//! Because `acquired_at` is taken after the acquire returned and `released_at` before the
//! release was sent, each recorded interval lies inside the time the lock was really held, so a
//! reported overlap is a real one (on one machine's monotonic clock).
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

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::resource::WriteOutcome;

/// Overlap examples a [`Report`] lists by default.
pub const DEFAULT_MAX_EXAMPLES: usize = 5;

/// What the protected resource answered to a hold's write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteStatus {
    /// The write was applied (an unfenced write always is).
    Accepted,
    /// The write was refused (a stale fencing token).
    Rejected,
}

impl From<WriteOutcome> for WriteStatus {
    fn from(outcome: WriteOutcome) -> Self {
        match outcome {
            WriteOutcome::Accepted => Self::Accepted,
            WriteOutcome::RejectedStale { .. } => Self::Rejected,
        }
    }
}

/// One critical section: a lock held by one owner from `acquired_at` to `released_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The worker (task) index that held the lock.
    pub worker: usize,
    /// The owner as the lock server knows it (`LockGuard::owner_field()`). Holds of the same
    /// owner never count as overlapping each other: a reentrant hold nests inside its owner's
    /// outer hold by design.
    pub owner: String,
    /// The fencing token of the hold, if fencing was used.
    pub token: Option<u64>,
    /// Taken right after the acquire returned.
    pub acquired_at: Instant,
    /// Taken right before the release was sent. A value before `acquired_at` is treated as
    /// `acquired_at` (an empty hold).
    pub released_at: Instant,
    /// How long the acquire waited (from the call to its return), if recorded.
    pub waited: Option<Duration>,
    /// The resource's answer to the hold's write, if it wrote. Each accepted write is counted as
    /// one increment of the resource.
    pub write: Option<WriteStatus>,
    /// When the write was sent; `None` means "not recorded", and `released_at` is used instead.
    pub written_at: Option<Instant>,
    /// Whether the guard reported its lease lost (`LockGuard::is_lost()` or `lost()`) during
    /// the hold.
    pub lost_signal: bool,
}

impl Hold {
    /// A hold without wait time, write or lost signal.
    pub fn new(
        worker: usize,
        owner: impl Into<String>,
        token: Option<u64>,
        acquired_at: Instant,
        released_at: Instant,
    ) -> Self {
        Self {
            worker,
            owner: owner.into(),
            token,
            acquired_at,
            released_at,
            waited: None,
            write: None,
            written_at: None,
            lost_signal: false,
        }
    }

    /// Sets the write's answer and the time it was sent (`None`: use `released_at`).
    #[must_use]
    pub fn with_write(mut self, write: WriteStatus, written_at: Option<Instant>) -> Self {
        self.write = Some(write);
        self.written_at = written_at;
        self
    }

    /// Sets how long the acquire waited.
    #[must_use]
    pub fn with_waited(mut self, waited: Duration) -> Self {
        self.waited = Some(waited);
        self
    }

    /// Sets whether the guard reported its lease lost.
    #[must_use]
    pub fn with_lost_signal(mut self, lost: bool) -> Self {
        self.lost_signal = lost;
        self
    }

    /// `released_at`, but never before `acquired_at`.
    fn end(&self) -> Instant {
        self.released_at.max(self.acquired_at)
    }

    /// When the write was sent (`released_at` if not recorded).
    fn write_time(&self) -> Instant {
        self.written_at.unwrap_or(self.released_at)
    }
}

/// A thread-safe, cheaply clonable log of [`Hold`]s. Clones share the same log.
#[derive(Debug, Clone, Default)]
pub struct History {
    holds: Arc<Mutex<Vec<Hold>>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a finished hold.
    pub fn record(&self, hold: Hold) {
        self.lock().push(hold);
    }

    /// Starts recording a hold now (call it right after the acquire returned), with its
    /// fencing token if it has one (`u64` or `Option<u64>`). Finish it with
    /// [`HoldRecorder::end`] right before sending the release; a recorder dropped without
    /// `end` records nothing.
    pub fn begin(
        &self,
        worker: usize,
        owner: impl Into<String>,
        token: impl Into<Option<u64>>,
    ) -> HoldRecorder {
        self.begin_at(worker, owner, token, Instant::now())
    }

    /// Like [`begin`](Self::begin), with an explicit acquisition time.
    pub fn begin_at(
        &self,
        worker: usize,
        owner: impl Into<String>,
        token: impl Into<Option<u64>>,
        acquired_at: Instant,
    ) -> HoldRecorder {
        HoldRecorder {
            history: self.clone(),
            hold: Hold::new(worker, owner, token.into(), acquired_at, acquired_at),
        }
    }

    /// A copy of the holds recorded so far, in recording order.
    pub fn holds(&self) -> Vec<Hold> {
        self.lock().clone()
    }

    /// The number of holds recorded so far.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no hold has been recorded.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Forgets every recorded hold.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Checks the recorded holds with the default [`CheckOptions`]: see [`check`].
    pub fn check(&self, final_resource_value: i64, initial_value: i64) -> Report {
        self.check_with(final_resource_value, initial_value, &CheckOptions::new())
    }

    /// Checks the recorded holds: see [`check`].
    pub fn check_with(
        &self,
        final_resource_value: i64,
        initial_value: i64,
        options: &CheckOptions,
    ) -> Report {
        check(&self.lock(), final_resource_value, initial_value, options)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Hold>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A hold being recorded; see [`History::begin`].
#[derive(Debug)]
#[must_use = "a hold is recorded only when `end` is called"]
pub struct HoldRecorder {
    history: History,
    hold: Hold,
}

impl HoldRecorder {
    /// Sets how long the acquire waited (from the call to its return).
    pub fn set_waited(&mut self, waited: Duration) {
        self.hold.waited = Some(waited);
    }

    /// Sets when the hold's write was sent (for example
    /// [`Increment::write_sent_at`](crate::resource::Increment::write_sent_at)). Without it,
    /// the release time is used as the write time.
    pub fn write_sent_at(&mut self, at: Instant) {
        self.hold.written_at = Some(at);
    }

    /// Marks the write as sent now.
    pub fn write_sent_now(&mut self) {
        self.write_sent_at(Instant::now());
    }

    /// Sets whether the guard reported its lease lost.
    pub fn set_lost_signal(&mut self, lost: bool) {
        self.hold.lost_signal = lost;
    }

    /// The hold recorded so far (its `released_at` is still `acquired_at`).
    pub fn hold(&self) -> &Hold {
        &self.hold
    }

    /// Ends the hold now (call it right before sending the release) with the resource's answer
    /// to its write (`None` if it did not write), and records it.
    pub fn end(self, write: Option<WriteStatus>) {
        self.end_at(write, Instant::now());
    }

    /// Like [`end`](Self::end), with an explicit release time.
    pub fn end_at(mut self, write: Option<WriteStatus>, released_at: Instant) {
        self.hold.write = write;
        self.hold.released_at = released_at;
        self.history.record(self.hold);
    }
}

/// Options of [`check`].
#[derive(Debug, Clone)]
pub struct CheckOptions {
    wait_budget: Option<Duration>,
    max_examples: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            wait_budget: None,
            max_examples: DEFAULT_MAX_EXAMPLES,
        }
    }
}

impl CheckOptions {
    /// No wait budget, [`DEFAULT_MAX_EXAMPLES`] overlap examples.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports the share of recorded waits that are at most `budget`
    /// ([`WaitStats::within_budget`]).
    #[must_use]
    pub fn wait_budget(mut self, budget: Duration) -> Self {
        self.wait_budget = Some(budget);
        self
    }

    /// How many overlapping pairs [`Report::overlap_examples`] lists.
    #[must_use]
    pub fn max_examples(mut self, max: usize) -> Self {
        self.max_examples = max;
        self
    }
}

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
    pub within_budget: Option<(Duration, f64)>,
}

/// The result of [`check`]. Its `Display` is a one-paragraph summary.
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
}

impl Report {
    /// No overlaps and no lost (or unexplained) updates.
    pub fn is_clean(&self) -> bool {
        self.overlaps == 0 && self.lost_updates == 0
    }
}

/// Checks `holds` against the resource's initial and final values.
///
/// Runs in O(n log n) for n holds: holds are sorted by `(acquired_at, released_at)`, overlapping
/// pairs are counted with a Fenwick tree over release times (all pairs, minus the pairs of the
/// same owner counted the same way), and examples are found by a sweep that keeps the latest
/// release seen so far and the latest release of any *other* owner, so that an earlier hold of
/// the same owner never hides an overlap with a third one.
pub fn check(
    holds: &[Hold],
    final_resource_value: i64,
    initial_value: i64,
    options: &CheckOptions,
) -> Report {
    let mut order: Vec<usize> = (0..holds.len()).collect();
    order.sort_by_key(|&i| (holds[i].acquired_at, holds[i].end()));

    // Overlapping pairs: all pairs minus same-owner pairs.
    let intervals: Vec<(Instant, Instant)> = order
        .iter()
        .map(|&i| (holds[i].acquired_at, holds[i].end()))
        .collect();
    let mut by_owner: HashMap<&str, Vec<(Instant, Instant)>> = HashMap::new();
    for &i in &order {
        by_owner
            .entry(holds[i].owner.as_str())
            .or_default()
            .push((holds[i].acquired_at, holds[i].end()));
    }
    let same_owner: u64 = by_owner.values().map(|v| count_overlapping_pairs(v)).sum();
    let overlaps = count_overlapping_pairs(&intervals) - same_owner;

    let overlap_examples = overlap_examples(holds, &order, options.max_examples);
    let (stale_writes, stale_writes_rejected) = stale_writes(holds, &order);

    let accepted_writes = count(holds, |h| h.write == Some(WriteStatus::Accepted));
    let fence_rejections = count(holds, |h| h.write == Some(WriteStatus::Rejected));
    let observed_increase = final_resource_value.wrapping_sub(initial_value);
    let lost_updates = i64::try_from(accepted_writes)
        .unwrap_or(i64::MAX)
        .wrapping_sub(observed_increase);

    let mut waits: Vec<Duration> = holds.iter().filter_map(|h| h.waited).collect();
    waits.sort_unstable();
    let wait = (!waits.is_empty()).then(|| WaitStats {
        count: waits.len(),
        p50: percentile(&waits, 50),
        p99: percentile(&waits, 99),
        max: waits[waits.len() - 1],
        within_budget: options.wait_budget.map(|budget| {
            let within = waits.partition_point(|&w| w <= budget);
            (budget, ratio(within as u64, waits.len() as u64))
        }),
    });

    let mut workers: Vec<usize> = holds.iter().map(|h| h.worker).collect();
    workers.sort_unstable();
    workers.dedup();

    Report {
        acquisitions: holds.len(),
        workers: workers.len(),
        owners: by_owner.len(),
        overlaps,
        overlap_examples,
        accepted_writes,
        fence_rejections,
        observed_increase,
        lost_updates,
        stale_writes,
        stale_writes_rejected,
        stale_writes_rejected_ratio: (stale_writes > 0)
            .then(|| ratio(stale_writes_rejected, stale_writes)),
        lost_signals: count(holds, |h| h.lost_signal),
        wait,
        start: order.first().map(|&i| holds[i].acquired_at),
    }
}

fn count(holds: &[Hold], predicate: impl Fn(&Hold) -> bool) -> u64 {
    holds.iter().filter(|h| predicate(h)).count() as u64
}

fn ratio(part: u64, whole: u64) -> f64 {
    part as f64 / whole as f64
}

/// Nearest-rank percentile of a sorted, non-empty slice.
fn percentile(sorted: &[Duration], pct: usize) -> Duration {
    let rank = (sorted.len() * pct).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// The number of pairs of intersecting intervals (touching ones excluded), for intervals
/// sorted by `(start, end)` with `start <= end`.
///
/// For `i < j` in that order, `[a_i, r_i]` and `[a_j, r_j]` intersect iff `r_i > a_j` (the other
/// condition, `a_i < r_j`, follows from the sort order), so the count is the sum over `j` of the
/// earlier intervals ending after `a_j`, kept in a Fenwick tree over the ranks of the ends.
fn count_overlapping_pairs(intervals: &[(Instant, Instant)]) -> u64 {
    let mut ends: Vec<Instant> = intervals.iter().map(|&(_, end)| end).collect();
    ends.sort_unstable();
    ends.dedup();
    let mut tree = vec![0_u64; ends.len() + 1];
    let mut pairs = 0;
    for (j, &(start, end)) in intervals.iter().enumerate() {
        // Earlier intervals ending at or before `start` do not intersect this one.
        let ended = ends.partition_point(|&e| e <= start);
        let mut disjoint = 0;
        let mut k = ended;
        while k > 0 {
            disjoint += tree[k];
            k &= k - 1;
        }
        pairs += j as u64 - disjoint;
        let mut k = ends.partition_point(|&e| e < end) + 1;
        while k < tree.len() {
            tree[k] += 1;
            k += k & k.wrapping_neg();
        }
    }
    pairs
}

/// The first `max` overlapping pairs by the later hold's acquisition (sweep over `order`).
fn overlap_examples(holds: &[Hold], order: &[usize], max: usize) -> Vec<Overlap> {
    let mut examples = Vec::new();
    // The hold released last so far, and the one released last among the other owners.
    let mut latest: Option<usize> = None;
    let mut latest_other: Option<usize> = None;
    for &j in order {
        if examples.len() >= max {
            break;
        }
        let hold = &holds[j];
        let partner = match latest {
            Some(l) if holds[l].owner != hold.owner => Some(l),
            _ => latest_other,
        };
        if let Some(p) = partner
            && holds[p].end() > hold.acquired_at
        {
            examples.push(Overlap {
                earlier: holds[p].clone(),
                later: hold.clone(),
                duration: holds[p].end().min(hold.end()) - hold.acquired_at,
            });
        }
        match latest {
            None => latest = Some(j),
            Some(l) if holds[l].owner == hold.owner => {
                if hold.end() > holds[l].end() {
                    latest = Some(j);
                }
            }
            Some(l) => {
                if hold.end() > holds[l].end() {
                    latest_other = Some(l);
                    latest = Some(j);
                } else if latest_other.is_none_or(|o| hold.end() > holds[o].end()) {
                    latest_other = Some(j);
                }
            }
        }
    }
    examples
}

/// `(stale writes, stale writes rejected)`; see [`Report::stale_writes_rejected_ratio`].
fn stale_writes(holds: &[Hold], order: &[usize]) -> (u64, u64) {
    // next_other[k]: the first position after k whose owner differs from position k's.
    let mut next_other = vec![order.len(); order.len()];
    for k in (0..order.len().saturating_sub(1)).rev() {
        next_other[k] = if holds[order[k + 1]].owner == holds[order[k]].owner {
            next_other[k + 1]
        } else {
            k + 1
        };
    }
    let (mut stale, mut rejected) = (0, 0);
    for hold in holds {
        let Some(write) = hold.write else { continue };
        let lo = order.partition_point(|&i| holds[i].acquired_at <= hold.acquired_at);
        let hi = order.partition_point(|&i| holds[i].acquired_at < hold.write_time());
        let newer_other_owner =
            lo < hi && (holds[order[lo]].owner != hold.owner || next_other[lo] < hi);
        if newer_other_owner {
            stale += 1;
            if write == WriteStatus::Rejected {
                rejected += 1;
            }
        }
    }
    (stale, rejected)
}

/// A duration with about four significant digits and a unit.
struct Short(Duration);

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs_f64();
        if secs >= 1.0 {
            write!(f, "{secs:.3}s")
        } else if secs >= 1e-3 {
            write!(f, "{:.3}ms", secs * 1e3)
        } else {
            write!(f, "{:.1}µs", secs * 1e6)
        }
    }
}

impl Report {
    fn offset(&self, at: Instant) -> Short {
        Short(self.start.map_or(Duration::ZERO, |start| at - start))
    }

    fn fmt_hold(&self, f: &mut fmt::Formatter<'_>, hold: &Hold) -> fmt::Result {
        write!(f, "worker {} (owner {}", hold.worker, hold.owner)?;
        if let Some(token) = hold.token {
            write!(f, ", token {token}")?;
        }
        write!(
            f,
            ") [+{}, +{}]",
            self.offset(hold.acquired_at),
            self.offset(hold.end())
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} acquisitions by {} workers ({} owners); {} overlapping pairs of different owners; \
             {} accepted writes, {} fence rejections; resource grew by {}, so {} lost updates",
            self.acquisitions,
            self.workers,
            self.owners,
            self.overlaps,
            self.accepted_writes,
            self.fence_rejections,
            self.observed_increase,
            self.lost_updates,
        )?;
        if self.lost_updates < 0 {
            f.write_str(" (negative: writes missing from the history)")?;
        }
        match self.stale_writes_rejected_ratio {
            Some(ratio) => write!(
                f,
                "; {} stale writes, {} rejected ({:.1}%)",
                self.stale_writes,
                self.stale_writes_rejected,
                ratio * 100.0
            )?,
            None => f.write_str("; no stale writes")?,
        }
        write!(f, "; {} lost-lease signals", self.lost_signals)?;
        if let Some(wait) = &self.wait {
            write!(
                f,
                "; wait p50 {} p99 {} max {}",
                Short(wait.p50),
                Short(wait.p99),
                Short(wait.max)
            )?;
            if let Some((budget, share)) = wait.within_budget {
                write!(f, ", {:.1}% within {}", share * 100.0, Short(budget))?;
            }
        }
        for (n, overlap) in self.overlap_examples.iter().enumerate() {
            write!(f, "{} ", if n == 0 { ". Overlaps:" } else { ";" })?;
            self.fmt_hold(f, &overlap.earlier)?;
            f.write_str(" and ")?;
            self.fmt_hold(f, &overlap.later)?;
            write!(f, " for {}", Short(overlap.duration))?;
        }
        f.write_str(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A hold of `owner` from `t0 + a` ms to `t0 + r` ms, with an accepted write.
    fn hold(t0: Instant, worker: usize, owner: &str, a: u64, r: u64) -> Hold {
        Hold::new(worker, owner, None, t0 + ms(a), t0 + ms(r))
            .with_write(WriteStatus::Accepted, None)
    }

    fn run(holds: &[Hold]) -> Report {
        check(holds, holds.len() as i64, 0, &CheckOptions::new())
    }

    /// O(n^2) reference for the overlap count.
    fn brute_force_overlaps(holds: &[Hold]) -> u64 {
        let mut n = 0;
        for (i, x) in holds.iter().enumerate() {
            for y in &holds[i + 1..] {
                if x.owner != y.owner && x.acquired_at < y.end() && y.acquired_at < x.end() {
                    n += 1;
                }
            }
        }
        n
    }

    #[test]
    fn no_overlap() {
        let t0 = Instant::now();
        let holds = [
            hold(t0, 0, "a", 0, 10),
            hold(t0, 1, "b", 11, 20),
            hold(t0, 2, "c", 25, 30),
        ];
        let report = run(&holds);
        assert_eq!(report.acquisitions, 3);
        assert_eq!(report.overlaps, 0);
        assert!(report.overlap_examples.is_empty());
        assert_eq!(report.lost_updates, 0);
        assert_eq!(report.stale_writes_rejected_ratio, None);
        assert!(report.is_clean());
    }

    #[test]
    fn one_overlap() {
        let t0 = Instant::now();
        let holds = [
            hold(t0, 0, "a", 0, 10),
            hold(t0, 1, "b", 8, 20),
            hold(t0, 2, "c", 20, 30),
        ];
        let report = run(&holds);
        assert_eq!(report.overlaps, 1);
        assert!(!report.is_clean());
        let example = &report.overlap_examples[..];
        assert_eq!(example.len(), 1);
        assert_eq!(example[0].earlier.owner, "a");
        assert_eq!(example[0].later.owner, "b");
        assert_eq!(example[0].duration, ms(2));
        // "a" wrote at its release (10 ms, no write time recorded), after "b" acquired (8 ms).
        assert_eq!((report.stale_writes, report.stale_writes_rejected), (1, 0));
        assert_eq!(report.stale_writes_rejected_ratio, Some(0.0));
        let text = report.to_string();
        assert!(text.contains("1 overlapping pairs"), "{text}");
        assert!(
            text.contains("worker 0 (owner a) [+0.0µs, +10.000ms]"),
            "{text}"
        );
    }

    #[test]
    fn touching_intervals_do_not_overlap() {
        let t0 = Instant::now();
        let holds = [
            hold(t0, 0, "a", 0, 10),
            hold(t0, 1, "b", 10, 20),
            hold(t0, 2, "c", 20, 20), // empty hold at the boundary
            hold(t0, 3, "d", 20, 30),
        ];
        let report = run(&holds);
        assert_eq!(report.overlaps, 0);
        assert!(report.overlap_examples.is_empty());
        assert_eq!(report.stale_writes, 0);
    }

    #[test]
    fn same_owner_nesting_is_not_an_overlap() {
        let t0 = Instant::now();
        // A reentrant hold of "a" inside its outer hold.
        let holds = [hold(t0, 0, "a", 0, 30), hold(t0, 0, "a", 5, 10)];
        let report = run(&holds);
        assert_eq!(report.overlaps, 0);
        assert!(report.is_clean());
        assert_eq!(report.owners, 1);
    }

    #[test]
    fn same_owner_does_not_hide_another_owner() {
        let t0 = Instant::now();
        // When c's nested hold starts, the latest release so far is c's own outer hold; the
        // sweep must still see that it overlaps "a".
        let holds = [
            hold(t0, 0, "a", 0, 50),
            hold(t0, 1, "c", 1, 60),
            hold(t0, 1, "c", 10, 20),
        ];
        let report = run(&holds);
        assert_eq!(report.overlaps, 2);
        assert_eq!(report.overlap_examples.len(), 2);
        for example in &report.overlap_examples {
            assert_eq!(
                (example.earlier.owner.as_str(), example.later.owner.as_str()),
                ("a", "c")
            );
        }
        assert_eq!(report.overlap_examples[1].later.acquired_at, t0 + ms(10));

        let holds = [
            hold(t0, 0, "a", 0, 40),
            hold(t0, 1, "b", 50, 100),
            hold(t0, 1, "b", 60, 70), // "b" nested: no overlap
            hold(t0, 2, "c", 90, 95), // overlaps "b" (the latest release is b's own)
        ];
        let report = run(&holds);
        assert_eq!(report.overlaps, 1);
        assert_eq!(report.overlap_examples[0].earlier.owner, "b");
        assert_eq!(report.overlap_examples[0].later.owner, "c");
    }

    #[test]
    fn counts_all_pairs_like_brute_force() {
        let t0 = Instant::now();
        // A deterministic pseudo-random mix of owners, starts, lengths (including empty holds
        // and equal starts).
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        for round in 0..50 {
            let holds: Vec<Hold> = (0..(round * 3 + 2))
                .map(|w| {
                    let a = next(100);
                    let owner = ["a", "b", "c", "d"][next(4) as usize];
                    hold(t0, w, owner, a, a + next(15))
                })
                .collect();
            let report = check(&holds, 0, 0, &CheckOptions::new().max_examples(usize::MAX));
            assert_eq!(
                report.overlaps,
                brute_force_overlaps(&holds),
                "round {round}"
            );
            for example in &report.overlap_examples {
                assert_ne!(example.earlier.owner, example.later.owner);
                assert!(example.earlier.acquired_at <= example.later.acquired_at);
                assert!(example.earlier.end() > example.later.acquired_at);
            }
            assert_eq!(report.overlaps == 0, report.overlap_examples.is_empty());
        }
    }

    #[test]
    fn lost_update_arithmetic() {
        let t0 = Instant::now();
        let holds = [
            hold(t0, 0, "a", 0, 10),
            hold(t0, 1, "b", 2, 12),
            hold(t0, 2, "c", 20, 30).with_write(WriteStatus::Rejected, None),
            Hold::new(3, "d", None, t0 + ms(40), t0 + ms(50)), // no write
            hold(t0, 4, "e", 60, 70),
        ];
        // 3 accepted increments from 5 to 7: one lost.
        let report = check(&holds, 7, 5, &CheckOptions::new());
        assert_eq!(report.accepted_writes, 3);
        assert_eq!(report.fence_rejections, 1);
        assert_eq!(report.observed_increase, 2);
        assert_eq!(report.lost_updates, 1);
        assert!(!report.is_clean());
        // All three shown: none lost.
        let report = check(&holds[2..], 6, 5, &CheckOptions::new());
        assert_eq!(report.lost_updates, 0);
        assert!(report.is_clean());
        // More growth than accepted writes: negative, flagged in the summary.
        let report = check(&holds[2..], 9, 5, &CheckOptions::new());
        assert_eq!(report.lost_updates, -3);
        assert!(!report.is_clean());
        assert!(report.to_string().contains("negative"), "{report}");
    }

    #[test]
    fn stale_writes_use_the_write_time() {
        let t0 = Instant::now();
        let holds = [
            // "a" wrote at 4 ms, before "b" acquired at 5 ms: not stale.
            hold(t0, 0, "a", 0, 10).with_write(WriteStatus::Accepted, Some(t0 + ms(4))),
            hold(t0, 1, "b", 5, 15).with_write(WriteStatus::Accepted, Some(t0 + ms(6))),
            // "c" wrote at 25 ms, after "d" acquired at 22 ms: stale, and rejected.
            hold(t0, 2, "c", 20, 30).with_write(WriteStatus::Rejected, Some(t0 + ms(25))),
            hold(t0, 3, "d", 22, 35).with_write(WriteStatus::Accepted, Some(t0 + ms(23))),
            // Same owner acquiring later never makes a write stale.
            hold(t0, 4, "e", 40, 50).with_write(WriteStatus::Accepted, Some(t0 + ms(48))),
            hold(t0, 4, "e", 41, 45),
        ];
        let report = check(&holds, 3, 0, &CheckOptions::new());
        assert_eq!(report.overlaps, 2);
        assert_eq!((report.stale_writes, report.stale_writes_rejected), (1, 1));
        assert_eq!(report.stale_writes_rejected_ratio, Some(1.0));
    }

    #[test]
    fn wait_stats_and_budget() {
        let t0 = Instant::now();
        let holds: Vec<Hold> = (1..=100)
            .map(|n| hold(t0, 0, "a", n * 10, n * 10 + 5).with_waited(ms(n)))
            .chain([hold(t0, 1, "b", 2000, 2001).with_lost_signal(true)])
            .collect();
        let report = check(&holds, 101, 0, &CheckOptions::new().wait_budget(ms(90)));
        let wait = report.wait.expect("waits recorded");
        assert_eq!(wait.count, 100);
        assert_eq!((wait.p50, wait.p99, wait.max), (ms(50), ms(99), ms(100)));
        assert_eq!(wait.within_budget, Some((ms(90), 0.9)));
        assert_eq!(report.lost_signals, 1);
        assert_eq!(report.workers, 2);
        let text = report.to_string();
        assert!(
            text.contains("wait p50 50.000ms p99 99.000ms max 100.000ms"),
            "{text}"
        );
        assert!(text.contains("90.0% within 90.000ms"), "{text}");
        assert_eq!(run(&[]).wait, None);
    }

    #[test]
    fn recorder_and_clones_share_the_log() {
        let history = History::new();
        let t0 = Instant::now();
        let mut recorder = history.clone().begin_at(3, "x:1", Some(9), t0);
        recorder.set_waited(ms(2));
        recorder.write_sent_at(t0 + ms(1));
        recorder.set_lost_signal(true);
        recorder.end_at(
            Some(WriteOutcome::RejectedStale { last_token: 10 }.into()),
            t0 + ms(3),
        );
        drop(history.begin(4, "y:1", None)); // never ended: not recorded
        assert_eq!(history.len(), 1);
        let holds = history.holds();
        assert_eq!(
            holds[0],
            Hold::new(3, "x:1", Some(9), t0, t0 + ms(3))
                .with_waited(ms(2))
                .with_write(WriteStatus::Rejected, Some(t0 + ms(1)))
                .with_lost_signal(true)
        );
        let report = history.check(0, 0);
        assert_eq!((report.fence_rejections, report.lost_signals), (1, 1));
        history.clear();
        assert!(history.is_empty());
    }
}

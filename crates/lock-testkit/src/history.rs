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
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::resource::WriteOutcome;
use crate::timeline::{self, Bar, Mark, Span, Timeline};

/// Overlap examples a [`Report`] lists by default.
pub const DEFAULT_MAX_EXAMPLES: usize = 5;

/// At most this many holds are drawn in a [`Report::timeline`] picture.
pub const MAX_TIMELINE_HOLDS: usize = 300;

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
    timeline: TimelineName,
}

/// Whether and under which name a violation's timeline is written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TimelineName {
    /// The current thread's name: the test harness names each test's thread after the test.
    Thread,
    Named(String),
    Off,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            wait_budget: None,
            max_examples: DEFAULT_MAX_EXAMPLES,
            timeline: TimelineName::Thread,
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

    /// Names the timeline picture a violation produces ([`Report::timeline`]): it is written as
    /// `<name>-<n>.svg`. By default the name is the test binary's (without cargo's hash) and the
    /// current thread's, which the test harness sets to the running test's path (`"history"`
    /// on an unnamed thread).
    ///
    /// ```
    /// use lock_testkit::CheckOptions;
    ///
    /// let options = CheckOptions::new().timeline_name("failover");
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn timeline_name(mut self, name: impl Into<String>) -> Self {
        self.timeline = TimelineName::Named(name.into());
        self
    }

    /// Writes no timeline picture, even when the check finds a violation.
    #[must_use]
    pub fn without_timeline(mut self) -> Self {
        self.timeline = TimelineName::Off;
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
    /// A picture of the holds around the first violations, written when the check found an
    /// overlap, a lost update or a fence rejection: one lane per owner, a bar per hold, the
    /// overlaps highlighted, writes marked as accepted or refused, on an axis in ms since
    /// `start` (at most [`MAX_TIMELINE_HOLDS`] holds). It is an SVG file
    /// `target/distlock-timelines/<name>-<n>.svg` in the cargo target directory (see
    /// [`CheckOptions::timeline_name`]). `None` when the history is clean, when
    /// [`CheckOptions::without_timeline`] was set, or when the file could not be written (a line
    /// on stderr then says why).
    pub timeline: Option<PathBuf>,
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

    let mut report = Report {
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
        timeline: None,
    };
    let violation = report.overlaps > 0 || report.lost_updates != 0 || report.fence_rejections > 0;
    let name = match &options.timeline {
        _ if !violation => None,
        TimelineName::Off => None,
        TimelineName::Named(name) => Some(name.clone()),
        // The test binary's name (without cargo's hash) and the test's: unique in a workspace.
        TimelineName::Thread => Some(format!(
            "{}-{}",
            test_binary(),
            std::thread::current().name().unwrap_or("history")
        )),
    };
    if let Some(name) = name {
        let svg = picture(holds, &order, &report, &name).svg();
        // Under target/ when it can be written, else in the temporary directory.
        let written = timeline::write(&timeline::output_dir(), &name, &svg).or_else(|error| {
            eprintln!("history: the timeline of {name} could not go under target/: {error}");
            timeline::write(
                &std::env::temp_dir().join("distlock-timelines"),
                &name,
                &svg,
            )
        });
        match written {
            Ok(path) => report.timeline = Some(path),
            Err(error) => eprintln!("history: the timeline of {name} was not written: {error}"),
        }
    }
    report
}

/// The running test binary's name without the hash cargo appends (`canaries-0a1b…` →
/// `canaries`), or `test` when it cannot be read.
fn test_binary() -> String {
    let stem = std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.file_stem()
                .map(|stem| stem.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "test".to_owned());
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name.to_owned()
        }
        _ => stem,
    }
}

/// The timeline of the holds around the first violations: the two holds of each of the first
/// overlap examples (as many examples as fit in [`MAX_TIMELINE_HOLDS`] holds), else the first
/// holds whose write the fence refused, else (lost updates alone) the whole history; with a
/// margin of a quarter of that on both sides.
fn picture(holds: &[Hold], order: &[usize], report: &Report, name: &str) -> Timeline {
    let Some(origin) = report.start else {
        return Timeline::default();
    };
    let ms = |at: Instant| at.saturating_duration_since(origin).as_secs_f64() * 1e3;
    let padded = |(from, to): (f64, f64)| {
        let margin = ((to - from) * 0.25).max(1.0);
        (from - margin, to + margin)
    };
    let within =
        |(from, to): (f64, f64), hold: &Hold| ms(hold.acquired_at) <= to && ms(hold.end()) >= from;
    let count_within = |window| holds.iter().filter(|h| within(window, h)).count();

    let focus: Vec<(f64, f64)> = if report.overlap_examples.is_empty() {
        let refused: Vec<(f64, f64)> = order
            .iter()
            .map(|&i| &holds[i])
            .filter(|h| h.write == Some(WriteStatus::Rejected))
            .take(DEFAULT_MAX_EXAMPLES)
            .map(|h| (ms(h.acquired_at), ms(h.end())))
            .collect();
        if refused.is_empty() {
            let last = holds.iter().map(|h| ms(h.end())).fold(0.0, f64::max);
            vec![(0.0, last)]
        } else {
            refused
        }
    } else {
        report
            .overlap_examples
            .iter()
            .map(|o| {
                (
                    ms(o.earlier.acquired_at),
                    ms(o.earlier.end().max(o.later.end())),
                )
            })
            .collect()
    };
    // The first focus always; each next one while the window still holds few enough holds.
    let mut core = focus[0];
    for &(from, to) in &focus[1..] {
        let grown = (core.0.min(from), core.1.max(to));
        if count_within(padded(grown)) > MAX_TIMELINE_HOLDS {
            break;
        }
        core = grown;
    }
    let window = padded(core);
    let centre = (core.0 + core.1) / 2.0;
    let mut shown: Vec<&Hold> = order
        .iter()
        .map(|&i| &holds[i])
        .filter(|h| within(window, h))
        .collect();
    let in_window = shown.len();
    if shown.len() > MAX_TIMELINE_HOLDS {
        // The holds nearest the violations' middle, then back in acquisition order.
        let distance = |h: &Hold| {
            let (from, to) = (ms(h.acquired_at), ms(h.end()));
            if from <= centre && centre <= to {
                0.0
            } else {
                (from - centre).abs().min((to - centre).abs())
            }
        };
        shown.sort_by(|a, b| distance(a).total_cmp(&distance(b)));
        shown.truncate(MAX_TIMELINE_HOLDS);
        shown.sort_by_key(|h| (h.acquired_at, h.end()));
    }

    let mut lanes: Vec<(String, String)> = Vec::new();
    let mut lane_of: HashMap<&str, usize> = HashMap::new();
    for hold in &shown {
        if !lane_of.contains_key(hold.owner.as_str()) {
            lane_of.insert(&hold.owner, lanes.len());
            lanes.push((
                format!("worker {} · {}", hold.worker, short(&hold.owner)),
                format!("owner {} (worker {})", hold.owner, hold.worker),
            ));
        }
    }
    // Every stretch where two shown holds of different owners are both held, merged.
    let mut both: Vec<(f64, f64)> = Vec::new();
    let mut overlapping = vec![false; shown.len()];
    for (a, first) in shown.iter().enumerate() {
        for (b, second) in shown.iter().enumerate().skip(a + 1) {
            let from = first.acquired_at.max(second.acquired_at);
            let to = first.end().min(second.end());
            if first.owner != second.owner && from < to {
                both.push((ms(from), ms(to)));
                overlapping[a] = true;
                overlapping[b] = true;
            }
        }
    }
    both.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut spans: Vec<Span> = Vec::new();
    for (from, to) in both {
        match spans.last_mut() {
            Some(last) if from <= last.end_ms => last.end_ms = last.end_ms.max(to),
            _ => spans.push(Span {
                start_ms: from,
                end_ms: to,
                label: String::new(),
            }),
        }
    }
    for (n, span) in spans.iter_mut().enumerate() {
        span.label = format!("overlap {} ({:.3} ms)", n + 1, span.end_ms - span.start_ms);
    }

    let describe = |hold: &Hold| {
        let mut text = format!(
            "worker {}, owner {}, +{:.3} ms to +{:.3} ms",
            hold.worker,
            hold.owner,
            ms(hold.acquired_at),
            ms(hold.end())
        );
        if let Some(token) = hold.token {
            text.push_str(&format!(", token {token}"));
        }
        if hold.lost_signal {
            text.push_str(", lease reported lost");
        }
        text
    };
    let bars = shown
        .iter()
        .zip(&overlapping)
        .map(|(hold, &overlapping)| Bar {
            lane: lane_of[hold.owner.as_str()],
            start_ms: ms(hold.acquired_at),
            end_ms: ms(hold.end()),
            overlapping,
            lost: hold.lost_signal,
            tooltip: describe(hold),
        })
        .collect();
    let marks = shown
        .iter()
        .filter_map(|hold| {
            let write = hold.write?;
            let at = ms(hold.write_time());
            let accepted = write == WriteStatus::Accepted;
            let verdict = if accepted {
                "accepted"
            } else {
                "refused by the fence"
            };
            Some(Mark {
                lane: lane_of[hold.owner.as_str()],
                at_ms: at,
                accepted,
                tooltip: format!("write at +{at:.3} ms {verdict}: {}", describe(hold)),
            })
        })
        .collect();
    let subtitle = format!(
        "{} overlapping pairs, {} writes refused by the fence, {} lost updates in {} holds; \
         shown: {} holds from +{:.1} ms to +{:.1} ms{}",
        report.overlaps,
        report.fence_rejections,
        report.lost_updates,
        report.acquisitions,
        shown.len(),
        window.0.max(0.0),
        window.1,
        if in_window > shown.len() {
            format!(" (the {} nearest of {in_window})", shown.len())
        } else {
            String::new()
        }
    );
    Timeline {
        title: format!("{name}: holds around the first violation"),
        subtitle,
        lanes,
        bars,
        marks,
        spans,
        from_ms: window.0.max(0.0),
        to_ms: window.1.max(window.0.max(0.0) + 1e-3),
    }
}

/// An owner id short enough for a lane label: its start and end around an ellipsis.
fn short(owner: &str) -> String {
    let chars: Vec<char> = owner.chars().collect();
    if chars.len() <= 24 {
        owner.to_owned()
    } else {
        let head: String = chars[..8].iter().collect();
        let tail: String = chars[chars.len() - 12..].iter().collect();
        format!("{head}…{tail}")
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
        f.write_str(".")?;
        if let Some(path) = &self.timeline {
            write!(f, " Timeline: {}", path.display())?;
        }
        Ok(())
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
        let options = CheckOptions::new().without_timeline();
        check(holds, holds.len() as i64, 0, &options)
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
            let options = CheckOptions::new()
                .max_examples(usize::MAX)
                .without_timeline();
            let report = check(&holds, 0, 0, &options);
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

    /// The `class`es of the SVG's elements, and the texts of the elements of class `class`.
    fn svg_texts(text: &str, class: &str) -> Vec<String> {
        let doc = roxmltree::Document::parse(text).expect("well-formed XML");
        doc.descendants()
            .filter(|node| node.attribute("class") == Some(class))
            .map(|node| node.text().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn a_violation_leaves_a_timeline() {
        let t0 = Instant::now();
        let holds = [
            hold(t0, 0, "a<&", 0, 10).with_write(WriteStatus::Rejected, Some(t0 + ms(9))),
            hold(t0, 1, "b", 8, 20).with_lost_signal(true),
            hold(t0, 2, "c", 20, 30),
        ];
        let options = CheckOptions::new().timeline_name("history unit::overlap");
        let report = check(&holds, 2, 0, &options);
        assert_eq!(report.overlaps, 1);
        let path = report.timeline.clone().expect("a timeline");
        assert!(
            path.ends_with("distlock-timelines/history_unit-overlap-1.svg"),
            "{}",
            path.display()
        );
        assert!(
            report
                .to_string()
                .contains(&format!("Timeline: {}", path.display()))
        );
        let text = std::fs::read_to_string(&path).expect("the timeline");
        let lanes = svg_texts(&text, "lane");
        assert_eq!(lanes, ["worker 0 · a<&", "worker 1 · b", "worker 2 · c"]);
        let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
        let holds_drawn: Vec<_> = doc
            .descendants()
            .filter(|node| node.attribute("class") == Some("hold"))
            .collect();
        assert_eq!(holds_drawn.len(), 3);
        // a and b overlap (outlined), c touches b only.
        let outlined: Vec<bool> = holds_drawn
            .iter()
            .map(|node| node.attribute("stroke").is_some())
            .collect();
        assert_eq!(outlined, [true, true, false]);
        assert_eq!(holds_drawn[1].attribute("fill"), Some("url(#lost)"));
        assert_eq!(svg_texts(&text, "overlap").len(), 1);
        assert_eq!(svg_texts(&text, "write refused").len(), 1);
        assert_eq!(svg_texts(&text, "write accepted").len(), 2);

        // Clean, or turned off: no picture.
        assert_eq!(check(&holds[2..], 1, 0, &options).timeline, None);
        let off = CheckOptions::new().without_timeline();
        assert_eq!(check(&holds, 2, 0, &off).timeline, None);
    }

    #[test]
    fn the_timeline_is_bounded_around_the_first_violation() {
        let t0 = Instant::now();
        // 10,000 back-to-back holds of 1 ms, two owners taking turns; at 6,000 ms a third owner
        // takes the lock for 0.5 ms inside a hold of "a".
        let mut holds: Vec<Hold> = (0..10_000)
            .map(|n| hold(t0, n as usize % 2, ["a", "b"][n as usize % 2], n, n + 1))
            .collect();
        holds.push(
            Hold::new(
                7,
                "intruder",
                None,
                t0 + Duration::from_micros(6_000_200),
                t0 + Duration::from_micros(6_000_700),
            )
            .with_write(WriteStatus::Rejected, None),
        );
        let report = check(&holds, 10_000, 0, &CheckOptions::new().without_timeline());
        assert_eq!(report.overlaps, 1);
        let text = picture(&holds, &sorted(&holds), &report, "bounded").svg();
        let bars = svg_texts(&text, "hold");
        assert!(
            bars.len() <= MAX_TIMELINE_HOLDS && bars.len() >= 3,
            "{}",
            bars.len()
        );
        let lanes = svg_texts(&text, "lane");
        assert!(
            lanes.contains(&"worker 7 · intruder".to_owned()),
            "{lanes:?}"
        );
        assert_eq!(svg_texts(&text, "overlap").len(), 1);
        assert_eq!(svg_texts(&text, "write refused").len(), 1);
        // The axis is around 6,000 ms, not the whole run.
        let ticks = svg_texts(&text, "tick");
        let first: f64 = ticks[0].parse().expect("a number");
        let last: f64 = ticks[ticks.len() - 1].parse().expect("a number");
        assert!(first >= 5_990.0 && last <= 6_010.0, "{ticks:?}");

        // Far more holds in the window than can be drawn: the nearest ones are kept.
        let crowd: Vec<Hold> = (0..2_000)
            .map(|n| hold(t0, 100 + n, &format!("crowd-{n}"), 0, 100))
            .chain([hold(t0, 1, "late", 99, 200)])
            .collect();
        let report = check(&crowd, 0, 0, &CheckOptions::new().without_timeline());
        let text = picture(&crowd, &sorted(&crowd), &report, "crowd").svg();
        assert_eq!(svg_texts(&text, "hold").len(), MAX_TIMELINE_HOLDS);
    }

    /// The order `check` sorts holds in.
    fn sorted(holds: &[Hold]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..holds.len()).collect();
        order.sort_by_key(|&i| (holds[i].acquired_at, holds[i].end()));
        order
    }
}

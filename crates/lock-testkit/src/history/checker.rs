//! The checker: [`check`] turns a history's holds and the resource's first and last values into
//! a [`Report`] (overlapping holds of different owners, lost updates, fence rejections, stale
//! writes, wait times), as set by [`CheckOptions`]; when it finds a violation it has the
//! holds around it drawn.
//!
//! Apart from the record because it runs once, after the workload, over holds it only reads;
//! apart from the drawings because what counts as a violation is decided here alone.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::draw;
use super::record::{History, Hold, WriteStatus};
use super::report::{DEFAULT_MAX_EXAMPLES, Overlap, Report, WaitStats};

impl History {
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
        report.timeline = draw::write_timeline(holds, &order, &report, &name);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_holds::{hold, ms};

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
}

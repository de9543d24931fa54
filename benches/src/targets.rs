//! The performance targets, each read off the rows of the same run (medians of the rounds; for
//! throughput, of same-round ratios) and printed with its measured value and whether it was
//! met. Targets whose rows were not run are left out.

use crate::measurement::Measurement;

/// One target: what it compares, the value measured, and the bound.
pub struct Target {
    pub workload: &'static str,
    pub what: String,
    pub value: f64,
    pub bound: Bound,
}

/// Which side of the limit passes.
#[derive(Clone, Copy)]
pub enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

impl Target {
    /// Whether the measured value is on the right side of the bound.
    pub fn met(&self) -> bool {
        match self.bound {
            Bound::AtLeast(limit) => self.value >= limit,
            Bound::AtMost(limit) => self.value <= limit,
        }
    }

    /// The target as one line, e.g. `W1  distlock-lock ops/s ÷ ping2 = 0.91 (target ≥ 0.90) met`.
    pub fn line(&self) -> String {
        let (sign, limit) = match self.bound {
            Bound::AtLeast(limit) => ("≥", limit),
            Bound::AtMost(limit) => ("≤", limit),
        };
        format!(
            "{:<3} {:<46} = {:>8.2}  (target {sign} {limit})  {}",
            self.workload,
            self.what,
            self.value,
            if self.met() { "met" } else { "NOT met" }
        )
    }

    /// The target as a JSON object.
    pub fn to_json(&self) -> String {
        let (kind, limit) = match self.bound {
            Bound::AtLeast(limit) => ("at_least", limit),
            Bound::AtMost(limit) => ("at_most", limit),
        };
        format!(
            "{{\"workload\":\"{}\",\"what\":\"{}\",\"value\":{:.4},\"{kind}\":{limit},\"met\":{}}}",
            self.workload,
            self.what,
            self.value,
            self.met()
        )
    }
}

fn row<'a>(rows: &[&'a Measurement], workload: &str, contender: &str) -> Option<&'a Measurement> {
    rows.iter()
        .copied()
        .find(|row| row.workload == workload && row.contender == contender)
}

fn extra(row: &Measurement, name: &str) -> Option<f64> {
    row.extra
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| *value)
}

/// The median over the rounds of `a`'s throughput ÷ `b`'s in the same round (the lower middle
/// one for an even count); `None` when no round has both rows.
///
/// Same-round ratios, not the ratio of each row's median round: the rows of a round take turns
/// (W1 and W4 every chunk of pairs, W2 every slice), so a slow spell of the machine hits both
/// rows of a round alike, while the rounds themselves drift apart (W1's two `PING`s moved by
/// ±10 % between the rounds of one run). Each row's median round can come from different
/// rounds, and then the ratio carries that drift.
pub fn same_round_ratio(all: &[Measurement], workload: &str, a: &str, b: &str) -> Option<f64> {
    let find = |round: usize, contender: &str| {
        all.iter().find(|row| {
            row.round == round && row.workload == workload && row.contender == contender
        })
    };
    let mut ratios: Vec<f64> = all
        .iter()
        .filter(|row| row.workload == workload && row.contender == a)
        .filter_map(|x| {
            let y = find(x.round, b)?;
            Some(x.ops_per_sec() / y.ops_per_sec())
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len().checked_sub(1)? / 2).copied()
}

/// Every target that the rows allow to compute: `rows` each row's median round, `all` every
/// round's rows (throughput targets are medians of same-round ratios: [`same_round_ratio`]).
pub fn targets(rows: &[&Measurement], all: &[Measurement]) -> Vec<Target> {
    let mut out = Vec::new();
    let mut throughput = |workload: &'static str, a: &str, b: &str, bound: Bound| {
        if let Some(value) = same_round_ratio(all, workload, a, b) {
            out.push(Target {
                workload,
                what: format!("{a} ops/s ÷ {b}"),
                value,
                bound,
            });
        }
    };
    // Like for like: the fast lock against rslock (both a plain `SET NX PX` key), the
    // reentrant lock against a bare client running the same Redisson-layout scripts (its
    // ceiling: the layout itself costs the server more than `SET NX`, see docs/performance.md).
    for workload in ["W1", "W2"] {
        for lock in ["distlock-fast", "distlock-fast-lock"] {
            throughput(workload, lock, "rslock", Bound::AtLeast(1.0));
        }
        for lock in ["distlock-lock", "distlock-fixed"] {
            throughput(workload, lock, "raw-script", Bound::AtLeast(0.95));
        }
    }
    throughput("W3", "distlock", "rslock", Bound::AtLeast(40.0));
    throughput("W3", "distlock", "rslock-tuned", Bound::AtLeast(0.9));
    // A cluster: the library's cost over a raw redis-rs cluster client running the same scripts.
    for workload in ["W1C", "W2C"] {
        throughput(
            workload,
            "distlock-fixed",
            "raw-script",
            Bound::AtLeast(0.90),
        );
        throughput(
            workload,
            "distlock-lock",
            "raw-script",
            Bound::AtLeast(0.90),
        );
    }
    // PostgreSQL: the library's cost over its own statements on a bare client.
    for workload in ["W1P", "W2P"] {
        for lock in ["distlock-lock", "distlock-try_lock"] {
            throughput(workload, lock, "raw-sql", Bound::AtLeast(0.90));
        }
    }
    for n in ["3", "5"] {
        let peer = format!("rslock-{n}");
        throughput("W4", &format!("redlock-{n}"), &peer, Bound::AtLeast(1.0));
        throughput(
            "W4",
            &format!("redlock-fast-{n}"),
            &peer,
            Bound::AtLeast(1.0),
        );
    }

    // One statement (one round trip) per step: a lock + unlock is two, as on a bare client.
    // Only when the statements were counted (`pg_stat_statements`).
    for workload in ["W1P", "W2P"] {
        if let Some(lock) = row(rows, workload, "distlock-lock").filter(|r| r.cost.requests > 0.0) {
            out.push(Target {
                workload,
                what: "distlock-lock statements per op".into(),
                value: lock.cost.requests,
                bound: Bound::AtMost(2.0),
            });
        }
    }
    // Server commands per handoff (scripts' inner calls included), distlock ÷ rslock tuned:
    // handing over must not cost the server more than retrying does.
    if let (Some(lock), Some(peer)) = (row(rows, "W3", "distlock"), row(rows, "W3", "rslock-tuned"))
    {
        let commands = |row: &Measurement| row.cost.commands.iter().map(|(_, n)| n).sum::<f64>();
        if commands(peer) > 0.0 {
            out.push(Target {
                workload: "W3",
                what: "server commands per handoff ÷ rslock-tuned".into(),
                value: commands(lock) / commands(peer),
                bound: Bound::AtMost(1.0),
            });
        }
    }
    if let (Some(lock), Some(ping)) = (row(rows, "W3", "distlock"), row(rows, "W3", "ping")) {
        out.push(Target {
            workload: "W3",
            what: "distlock p50 wait ÷ PING p50".into(),
            value: lock.quantile_us(0.5) / ping.quantile_us(0.5),
            bound: Bound::AtMost(2.0),
        });
    }
    if let Some(lock) = row(rows, "W3", "distlock") {
        out.push(Target {
            workload: "W3",
            what: "distlock p99 wait, ms".into(),
            value: lock.quantile_us(0.99) / 1000.0,
            bound: Bound::AtMost(5.0),
        });
        if let (Some(min), Some(max)) = (extra(lock, "fair_min"), extra(lock, "fair_max")) {
            out.push(Target {
                workload: "W3",
                what: "distlock acquisitions per task, min ÷ max".into(),
                value: min / max,
                bound: Bound::AtLeast(0.8),
            });
        }
    }
    if let Some(w5) = rows.iter().find(|row| row.workload == "W5") {
        if let (Some(calls), Some(locks)) = (
            extra(w5, "renew_calls_per_period_per_node"),
            extra(w5, "locks"),
        ) {
            out.push(Target {
                workload: "W5",
                what: "renewal calls per 100 locks per node per period".into(),
                value: calls * 100.0 / locks,
                bound: Bound::AtMost(1.0),
            });
        }
        if let Some(cpu) = extra(w5, "cpu_pct") {
            out.push(Target {
                workload: "W5",
                what: "client CPU while holding, % of one core".into(),
                value: cpu,
                bound: Bound::AtMost(1.0),
            });
        }
    }
    // On a cluster, renewals must stay as cheap per lock as on one server.
    if let Some(w5c) = rows.iter().find(|row| row.workload == "W5C") {
        if let Some(calls) = extra(w5c, "renew_calls_per_100_locks_per_period") {
            out.push(Target {
                workload: "W5C",
                what: "renewal calls per 100 locks per period".into(),
                value: calls,
                bound: Bound::AtMost(1.0),
            });
        }
        if let Some(cpu) = extra(w5c, "cpu_pct") {
            out.push(Target {
                workload: "W5C",
                what: "client CPU while holding, % of one core".into(),
                value: cpu,
                bound: Bound::AtMost(1.0),
            });
        }
    }
    if let Some(w6) = rows.iter().find(|row| row.workload == "W6") {
        if let Some(connections) = extra(w6, "pubsub_conns") {
            out.push(Target {
                workload: "W6",
                what: "notification connections per node".into(),
                value: connections,
                bound: Bound::AtMost(1.0),
            });
        }
        out.push(Target {
            workload: "W6",
            what: "p99 wake-up, ms".into(),
            value: w6.quantile_us(0.99) / 1000.0,
            bound: Bound::AtMost(5.0),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::measurement::Tally;

    fn row(workload: &'static str, contender: &'static str, ops: u64) -> Measurement {
        let mut tally = Tally::new();
        tally.ops = ops;
        tally.elapsed = Duration::from_secs(1);
        tally.into_row(workload, contender, 1, 3)
    }

    #[test]
    fn cluster_rows_have_their_targets() {
        let mut w5c = row("W5C", "distlock-watchdog", 10_000);
        w5c.extra = vec![
            ("renew_calls_per_100_locks_per_period", 78.0),
            ("cpu_pct", 0.5),
        ];
        let rows = [
            row("W1C", "raw-script", 5_000),
            row("W1C", "distlock-lock", 4_600),
            row("W2C", "raw-script", 20_000),
            row("W2C", "distlock-fixed", 17_000),
            w5c,
        ];
        let refs: Vec<&Measurement> = rows.iter().collect();
        let found: Vec<(&str, String, f64, bool)> = targets(&refs, &rows)
            .into_iter()
            .map(|target| {
                let met = target.met();
                (target.workload, target.what, target.value, met)
            })
            .collect();
        let expected = [
            ("W1C", "distlock-lock ops/s ÷ raw-script", 0.92, true),
            ("W2C", "distlock-fixed ops/s ÷ raw-script", 0.85, false),
            ("W5C", "renewal calls per 100 locks per period", 78.0, false),
            ("W5C", "client CPU while holding, % of one core", 0.5, true),
        ];
        assert_eq!(found.len(), expected.len(), "{found:?}");
        for ((workload, what, value, met), (w, t, v, m)) in found.iter().zip(expected) {
            assert_eq!((*workload, what.as_str(), *met), (w, t, m));
            assert!((value - v).abs() < 1e-9, "{what}: {value} != {v}");
        }
    }

    fn in_round(mut row: Measurement, round: usize) -> Measurement {
        row.round = round;
        row
    }

    /// The throughput targets pair the rows of each round. Here each row's median round is a
    /// different one (the peer's round 3, ours round 1), and their ratio, 0.96, carries the
    /// drift between the rounds; the same-round ratios are 1.20, 1.00 and 0.95.
    #[test]
    fn throughput_targets_are_medians_of_same_round_ratios() {
        let rounds = |ours: [u64; 3]| {
            let mut rows = Vec::new();
            for (round, (peer, ours)) in [4_000, 6_000, 5_000].into_iter().zip(ours).enumerate() {
                rows.push(in_round(row("W1", "rslock", peer), round + 1));
                rows.push(in_round(row("W1", "distlock-fast", ours), round + 1));
            }
            rows
        };
        let rows = rounds([4_800, 6_000, 4_750]);
        let medians = crate::measurement::medians(&rows);
        let (peer, ours) = (medians[0], medians[1]);
        assert_eq!((ours.round, peer.round), (1, 3));
        assert!((ours.ops_per_sec() / peer.ops_per_sec() - 0.96).abs() < 1e-9);
        let value = same_round_ratio(&rows, "W1", "distlock-fast", "rslock").unwrap();
        assert!((value - 1.0).abs() < 1e-9, "{value}");
        let found = targets(&medians, &rows);
        assert_eq!(found.len(), 1);
        assert!((found[0].value - 1.0).abs() < 1e-9);
        assert!(found[0].met());
        // A round that lacks one of the rows is left out; no round with both: no target.
        let mut lone = rounds([4_800, 6_000, 4_750]);
        lone.retain(|row| row.round != 2 || row.contender == "rslock");
        let value = same_round_ratio(&lone, "W1", "distlock-fast", "rslock").unwrap();
        assert!(
            (value - 0.95).abs() < 1e-9,
            "the lower middle of 1.20 and 0.95: {value}"
        );
        lone.retain(|row| row.contender == "distlock-fast" || row.round == 2);
        assert!(same_round_ratio(&lone, "W1", "distlock-fast", "rslock").is_none());
    }
}

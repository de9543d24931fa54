//! W1A and W2A: W1 (one task) and W2 (`--tasks` tasks on one client) on a primary with one
//! replica, every distlock row twice in the same run: as it is, and with
//! `.replica_ack(ReplicaAck::replicas(1))` (each grant, renewal and release waits for the
//! replica with `WAIT 1 …` in the same pipeline). The acknowledged row is named `<row>-ack`.
//!
//! In W2A the acknowledged rows show the group commit: a `WAIT` holds the connection on the
//! server until it answers, so calls arriving meanwhile queue in the client and go out together
//! under the next one (`wait` per op in the server commands, below 1 when they do).
//!
//! The ratios (acknowledged ÷ plain ops/s, per row) are informational: there is no target.

use lock_redis::ReplicaAck;

use crate::contenders::{BenchError, Contender, Kind};
use crate::measurement::{Measurement, Metric, Ratio};

/// What the acknowledged rows ask: one replica, the default timeout.
pub fn ack() -> ReplicaAck {
    ReplicaAck::replicas(1)
}

/// The rows W1A and W2A run: every distlock kind of `kinds` (from `--contenders`), else
/// [`Kind::ACKED`], as it is and acknowledged, each on its own backend to `url`. The plain and
/// acknowledged rows of a kind are next to each other.
pub async fn entrants(
    kinds: Option<&[Kind]>,
    url: &str,
) -> Result<Vec<(&'static str, Contender)>, BenchError> {
    let kinds = kinds.unwrap_or(&Kind::ACKED);
    let mut entrants = Vec::with_capacity(kinds.len() * 2);
    for &kind in kinds {
        let plain = Contender::connect_acked(kind, url, None).await?;
        let acked = Contender::connect_acked(kind, url, Some(ack())).await?;
        if let (Some(plain), Some(acked)) = (plain, acked) {
            entrants.push((kind.name(), plain));
            entrants.push((kind.acked_name(), acked));
        }
    }
    if entrants.is_empty() {
        return Err("W1A/W2A: none of --contenders is a distlock row".into());
    }
    Ok(entrants)
}

/// Acknowledged ÷ plain ops/s of every row pair of W1A and W2A in `rows`.
pub fn ratios(rows: &[&Measurement]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for workload in ["W1A", "W2A"] {
        for kind in Kind::ALL {
            if kind.distlock_settings().is_some()
                && let Some(ratio) = Ratio::between(
                    rows,
                    workload,
                    Metric::Throughput,
                    kind.acked_name(),
                    kind.name(),
                )
            {
                out.push(ratio);
            }
        }
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
        tally.into_row(workload, contender, 1, 1)
    }

    #[test]
    fn divides_each_acknowledged_row_by_its_plain_row() {
        let rows = [
            row("W1A", "distlock-lock", 4_000),
            row("W1A", "distlock-lock-ack", 1_000),
            row("W2A", "distlock-fast-lock", 10_000),
            row("W2A", "distlock-fast-lock-ack", 5_000),
            row("W1", "distlock-lock-ack", 1),
        ];
        let refs: Vec<&Measurement> = rows.iter().collect();
        let ratios = ratios(&refs);
        let found: Vec<(&str, &str, &str, f64)> = ratios
            .iter()
            .map(|r| (r.workload, r.numerator, r.denominator, r.value))
            .collect();
        assert_eq!(
            found,
            [
                ("W1A", "distlock-lock-ack", "distlock-lock", 0.25),
                ("W2A", "distlock-fast-lock-ack", "distlock-fast-lock", 0.5),
            ]
        );
    }
}

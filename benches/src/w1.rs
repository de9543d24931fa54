//! W1: one task, lock + unlock on a fresh key per iteration.

use std::time::Instant;

use crate::contenders::{BenchError, Contender, Kind};
use crate::measurement::{Measurement, new_histogram, record};
use crate::probe::Probe;

/// Runs `warmup` unmeasured pairs, then `iterations` measured ones, in one spawned task (so the
/// loop runs on a runtime worker, as application code does).
pub async fn run(
    contender: &Contender,
    probe: &Probe,
    kind: Kind,
    prefix: &str,
    warmup: u64,
    iterations: u64,
) -> Result<Measurement, BenchError> {
    let contender = contender.clone();
    let probe = probe.clone();
    let prefix = format!("{prefix}:w1:{}", kind.name());
    tokio::spawn(async move {
        for i in 0..warmup {
            contender.lock_unlock(&format!("{prefix}:warm:{i}")).await?;
        }
        let mut latency = new_histogram();
        let before = probe.snapshot().await?;
        let started = Instant::now();
        for i in 0..iterations {
            let key = format!("{prefix}:{i}");
            let sent = Instant::now();
            contender.lock_unlock(&key).await?;
            record(&mut latency, sent.elapsed());
        }
        let elapsed = started.elapsed();
        let cost = before.cost_until(&probe.snapshot().await?, iterations);
        Ok(Measurement {
            workload: "W1",
            contender: kind.name(),
            tasks: 1,
            ops: iterations,
            elapsed,
            latency,
            cost,
            background: 0,
            round: 0,
        })
    })
    .await?
}

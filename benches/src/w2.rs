//! W2: many tasks on one client (one connection), each locking and unlocking its own fresh keys.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::contenders::{BenchError, Contender, Kind};
use crate::measurement::{Measurement, new_histogram, record};
use crate::probe::Probe;

/// When each task stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// At this much time after the start.
    After(Duration),
    /// After this many pairs.
    Count(u64),
}

/// Runs a short unmeasured phase, then the measured one.
pub async fn run(
    contender: &Contender,
    probe: &Probe,
    kind: Kind,
    prefix: &str,
    tasks: usize,
    warmup: Duration,
    stop: Stop,
) -> Result<Measurement, BenchError> {
    let prefix = format!("{prefix}:w2:{}", kind.name());
    phase(
        contender,
        &format!("{prefix}:warm"),
        tasks,
        Stop::After(warmup),
    )
    .await?;
    let before = probe.snapshot().await?;
    let (ops, elapsed, latency) = phase(contender, &prefix, tasks, stop).await?;
    let cost = before.cost_until(&probe.snapshot().await?, ops);
    Ok(Measurement {
        workload: "W2",
        contender: kind.name(),
        tasks,
        ops,
        elapsed,
        latency,
        cost,
        background: 0,
        round: 0,
    })
}

/// `tasks` concurrent loops; returns the pairs done, the wall time until the last task ended,
/// and the merged latencies.
async fn phase(
    contender: &Contender,
    prefix: &str,
    tasks: usize,
    stop: Stop,
) -> Result<(u64, Duration, Histogram<u64>), BenchError> {
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let contender = contender.clone();
            let prefix = format!("{prefix}:{task}");
            tokio::spawn(async move {
                let mut latency = new_histogram();
                let mut done = 0;
                loop {
                    let more = match stop {
                        Stop::After(duration) => started.elapsed() < duration,
                        Stop::Count(count) => done < count,
                    };
                    if !more {
                        break;
                    }
                    let key = format!("{prefix}:{done}");
                    let sent = Instant::now();
                    contender.lock_unlock(&key).await?;
                    record(&mut latency, sent.elapsed());
                    done += 1;
                }
                Ok::<_, BenchError>((done, latency))
            })
        })
        .collect();
    let mut ops = 0;
    let mut merged = new_histogram();
    for handle in handles {
        let (done, latency) = handle.await??;
        ops += done;
        merged.add(&latency)?;
    }
    Ok((ops, started.elapsed(), merged))
}

//! W2: many tasks on one client (one connection), each locking and unlocking its own fresh keys.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::contenders::{BenchError, Contender, Kind};
use crate::measurement::{Measurement, Tally, new_histogram, record};
use crate::probe::Probe;

/// When the tasks of one slice stop.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// At this much time after the slice started.
    After(Duration),
    /// After this many pairs per task.
    Count(u64),
}

/// How the measured phase of each contender is cut up.
#[derive(Clone, Copy, Debug)]
pub struct Slices {
    /// Slices per contender.
    pub count: u32,
    /// When each slice ends.
    pub each: Stop,
}

/// Runs a short unmeasured phase per contender, then the measured slices, which take turns
/// between the contenders (so a slow spell of the machine hits them all alike).
pub async fn run(
    entrants: &[(Kind, Contender)],
    probe: &Probe,
    prefix: &str,
    tasks: usize,
    warmup: Duration,
    slices: Slices,
) -> Result<Vec<Measurement>, BenchError> {
    for (kind, contender) in entrants {
        let prefix = format!("{prefix}:w2:{}:warm", kind.name());
        phase(contender, &prefix, tasks, Stop::After(warmup)).await?;
    }
    let mut tallies: Vec<Tally> = entrants.iter().map(|_| Tally::new()).collect();
    for turn in 0..slices.count as usize {
        for offset in 0..entrants.len() {
            let index = (turn + offset) % entrants.len();
            let (kind, contender) = &entrants[index];
            let tally = &mut tallies[index];
            let prefix = format!("{prefix}:w2:{}:{turn}", kind.name());
            let before = probe.snapshot().await?;
            let (ops, elapsed, latency) = phase(contender, &prefix, tasks, slices.each).await?;
            tally.counters.add(&probe.snapshot().await?.since(&before));
            tally.ops += ops;
            tally.elapsed += elapsed;
            tally.latency.add(&latency)?;
        }
    }
    Ok(entrants
        .iter()
        .zip(tallies)
        .map(|((kind, _), tally)| tally.into_measurement("W2", *kind, tasks))
        .collect())
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

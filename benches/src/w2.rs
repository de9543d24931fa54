//! W2: many tasks on one client (one connection), each locking and unlocking its own fresh keys
//! (also W2C on a cluster and W2A on a primary with a replica: the same loop, other rows).

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::contenders::{BenchError, Contender};
use crate::measurement::{Measurement, Tally, new_histogram, record};
use crate::probe::{self, Probe};

/// W2's settings on the command line (also W2C's and W2A's); the measured time and its slices
/// are `--duration` and `--slices`.
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w2")]
pub struct Args {
    /// Concurrent tasks.
    #[arg(long, default_value_t = 64)]
    pub tasks: usize,
    /// A fixed number of pairs per task instead of `--duration`.
    #[arg(long)]
    pub per_task: Option<u64>,
}

impl Args {
    /// `--smoke`: timed, never `--per-task`.
    pub fn smoke(&mut self) {
        self.per_task = None;
    }
}

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
/// between the contenders (so a slow spell of the machine hits them all alike). Rows are labelled
/// `workload`, named as in `entrants`; the counters are summed over `probes` (every node the rows
/// use).
pub async fn run(
    workload: &'static str,
    entrants: &[(&'static str, Contender)],
    probes: &[Probe],
    prefix: &str,
    tasks: usize,
    warmup: Duration,
    slices: Slices,
) -> Result<Vec<Measurement>, BenchError> {
    let label = workload.to_ascii_lowercase();
    for (name, contender) in entrants {
        let prefix = format!("{prefix}:{label}:{name}:warm");
        phase(contender, &prefix, tasks, Stop::After(warmup)).await?;
    }
    let mut tallies: Vec<Tally> = entrants.iter().map(|_| Tally::new()).collect();
    for turn in 0..slices.count as usize {
        for offset in 0..entrants.len() {
            let index = (turn + offset) % entrants.len();
            let (name, contender) = &entrants[index];
            let tally = &mut tallies[index];
            let prefix = format!("{prefix}:{label}:{name}:{turn}");
            let before = probe::snapshot_all(probes).await?;
            let (ops, elapsed, latency) = phase(contender, &prefix, tasks, slices.each).await?;
            tally
                .counters
                .add(&probe::snapshot_all(probes).await?.since(&before));
            tally.ops += ops;
            tally.elapsed += elapsed;
            tally.latency.add(&latency)?;
        }
    }
    Ok(entrants
        .iter()
        .zip(tallies)
        .map(|((name, _), tally)| tally.into_row(workload, name, tasks, probes.len()))
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

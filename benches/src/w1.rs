//! W1: one task, lock + unlock on a fresh key per iteration (also W1C on a cluster and W1A on a
//! primary with a replica: the same loop, other rows).

use std::time::Instant;

use crate::contenders::{BenchError, Contender};
use crate::measurement::{Measurement, Tally, record};
use crate::probe::{self, Probe};

/// W1's settings on the command line (also W1C's and W1A's).
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w1")]
pub struct Args {
    /// Measured lock + unlock pairs per contender.
    #[arg(long, default_value_t = 20_000)]
    pub iterations: u64,
    #[command(flatten)]
    pub pairs: Pairs,
}

impl Args {
    /// `--smoke`'s counts.
    pub fn smoke(&mut self) {
        self.iterations = 300;
        self.pairs.smoke();
    }
}

/// The one-task loops' warm-up and turns (W1, W1C, W1A and W4).
#[derive(Clone, Debug, clap::Args)]
pub struct Pairs {
    /// Unmeasured pairs per contender (W4: per row) before measuring.
    #[arg(long, default_value_t = 2_000)]
    pub warmup: u64,
    /// The contenders (W4: the rows) take turns every this many pairs.
    #[arg(long, default_value_t = 1_000)]
    pub chunk: u64,
}

impl Pairs {
    /// `--smoke`'s counts.
    pub fn smoke(&mut self) {
        self.warmup = 50;
        self.chunk = 100;
    }
}

/// Runs `warmup` unmeasured pairs per contender, then `iterations` measured ones, in chunks of
/// `chunk` pairs that take turns between the contenders (so a slow spell of the machine hits them
/// all alike). Everything runs in one spawned task, on a runtime worker as application code does.
/// Rows are labelled `workload`, named as in `entrants`; the counters are summed over `probes`
/// (every node the rows use).
pub async fn run(
    workload: &'static str,
    entrants: &[(&'static str, Contender)],
    probes: &[Probe],
    prefix: &str,
    warmup: u64,
    iterations: u64,
    chunk: u64,
) -> Result<Vec<Measurement>, BenchError> {
    let entrants = entrants.to_vec();
    let probes = probes.to_vec();
    let prefix = format!("{prefix}:{}", workload.to_ascii_lowercase());
    tokio::spawn(async move {
        for (name, contender) in &entrants {
            for i in 0..warmup {
                let key = format!("{prefix}:{name}:warm:{i}");
                contender.lock_unlock(&key).await?;
            }
        }
        let mut tallies: Vec<Tally> = entrants.iter().map(|_| Tally::new()).collect();
        let chunks = iterations.div_ceil(chunk.max(1));
        for turn in 0..chunks {
            for offset in 0..entrants.len() {
                // Rotate who goes first, so no contender always follows the same one.
                let index = (turn as usize + offset) % entrants.len();
                let (name, contender) = &entrants[index];
                let tally = &mut tallies[index];
                let count = chunk.min(iterations - tally.ops);
                let before = probe::snapshot_all(&probes).await?;
                let started = Instant::now();
                for i in tally.ops..tally.ops + count {
                    let key = format!("{prefix}:{name}:{i}");
                    let sent = Instant::now();
                    contender.lock_unlock(&key).await?;
                    record(&mut tally.latency, sent.elapsed());
                }
                tally.elapsed += started.elapsed();
                tally.ops += count;
                tally
                    .counters
                    .add(&probe::snapshot_all(&probes).await?.since(&before));
            }
        }
        Ok(entrants
            .iter()
            .zip(tallies)
            .map(|((name, _), tally)| tally.into_row(workload, name, 1, probes.len()))
            .collect())
    })
    .await?
}

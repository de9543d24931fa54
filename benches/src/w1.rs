//! W1: one task, lock + unlock on a fresh key per iteration.

use std::time::Instant;

use crate::contenders::{BenchError, Contender, Kind};
use crate::measurement::{Measurement, Tally, record};
use crate::probe::Probe;

/// Runs `warmup` unmeasured pairs per contender, then `iterations` measured ones, in chunks of
/// `chunk` pairs that take turns between the contenders (so a slow spell of the machine hits them
/// all alike). Everything runs in one spawned task, on a runtime worker as application code does.
pub async fn run(
    entrants: &[(Kind, Contender)],
    probe: &Probe,
    prefix: &str,
    warmup: u64,
    iterations: u64,
    chunk: u64,
) -> Result<Vec<Measurement>, BenchError> {
    let entrants = entrants.to_vec();
    let probe = probe.clone();
    let prefix = format!("{prefix}:w1");
    tokio::spawn(async move {
        for (kind, contender) in &entrants {
            for i in 0..warmup {
                let key = format!("{prefix}:{}:warm:{i}", kind.name());
                contender.lock_unlock(&key).await?;
            }
        }
        let mut tallies: Vec<Tally> = entrants.iter().map(|_| Tally::new()).collect();
        let chunks = iterations.div_ceil(chunk.max(1));
        for turn in 0..chunks {
            for offset in 0..entrants.len() {
                // Rotate who goes first, so no contender always follows the same one.
                let index = (turn as usize + offset) % entrants.len();
                let (kind, contender) = &entrants[index];
                let tally = &mut tallies[index];
                let count = chunk.min(iterations - tally.ops);
                let before = probe.snapshot().await?;
                let started = Instant::now();
                for i in tally.ops..tally.ops + count {
                    let key = format!("{prefix}:{}:{i}", kind.name());
                    let sent = Instant::now();
                    contender.lock_unlock(&key).await?;
                    record(&mut tally.latency, sent.elapsed());
                }
                tally.elapsed += started.elapsed();
                tally.ops += count;
                tally.counters.add(&probe.snapshot().await?.since(&before));
            }
        }
        Ok(entrants
            .iter()
            .zip(tallies)
            .map(|((kind, _), tally)| tally.into_measurement("W1", *kind, 1))
            .collect())
    })
    .await?
}

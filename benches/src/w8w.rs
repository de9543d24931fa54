//! W8W: writer starvation under the read-write lock. `--w8w-readers` reader tasks (16) on one
//! client each take the read lock of one name, hold it `--w8w-hold-ms` (2 ms), release it and
//! take it again at once, so reads overlap all the time; one writer task on the same client
//! tries to take the write lock in a loop, each attempt waiting at most `--w8w-give-up`
//! (10 s). Once in, the writer holds the lock as long as a reader does, releases it, and tries
//! again after [`WRITER_PAUSE`]. The writer starts [`READERS_FIRST`] after the readers and stops
//! starting attempts after `--w8w-duration` (20 s); the readers run until its last attempt ends.
//!
//! An op is one **write attempt**, taken or given up, and the latency histogram is the writer's
//! wait for it (an attempt given up counts its whole wait, a lower bound of what it would have
//! waited). `writes` are the attempts that got the lock, `gave_up` those that did not,
//! `reader_pairs` / `reader_ops_per_sec` the readers' lock + release pairs, and
//! `reader_wait_p99_us` the readers' lock call (they wait while the writer holds). The server and
//! client costs are spread over every pair of the row, reads and writes (`cost_per` `pair`).
//!
//! Rows, each on a name (and connections) of its own: `distlock-writer`
//! (`ReadWriteLock<RedisBackend>`: `read` for the readers, `write_with` and a bounded wait for the
//! writer) and `raw-scripts` (Redisson's `RReadWriteLock` scripts on a raw client, waiting as
//! Redisson's `lock()` and `tryLock(waitTime)` do; see [`RawRwLock`]), the writer on the readers'
//! client; and `distlock-writer-preferring`, the writer apart on a lock made with
//! `ReadWriteLock::prefer_writers` (waiting, it holds new readers back); `distlock-writer-apart`
//! and `raw-scripts-apart`, the same with the writer on a client (its connections, its
//! notifications) of its own, as a writer in another process would be.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lock_core::{Error, LockOptions, Locker, ReadWriteLock};
use lock_redis::RedisBackend;

use crate::contenders::BenchError;
use crate::measurement::{Measurement, Metric, Ratio, Tally, new_histogram, record};
use crate::probe::Probe;
use crate::w8::{RawRwLock, Side, check_left, released, requests};

/// The workload's label in rows and ratios.
const WORKLOAD: &str = "W8W";

/// How long the readers run before the writer's first attempt, so it meets their steady stream
/// rather than a free lock.
pub const READERS_FIRST: Duration = Duration::from_millis(100);

/// The writer's pause between a write and its next attempt: it wants the lock now and then, not
/// all the time.
pub const WRITER_PAUSE: Duration = Duration::from_millis(10);

/// W8W's settings on the command line.
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w8w")]
pub struct Args {
    /// Reader tasks, each holding the read lock `--w8w-hold-ms` and taking it again at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    pub w8w_readers: u64,
    /// How long a reader (and the writer, once in) holds the lock, in ms.
    #[arg(long, default_value_t = 2)]
    pub w8w_hold_ms: u64,
    /// Seconds per row during which the writer starts attempts (twice `--w8w-give-up`: a writer
    /// that never gets in still makes two attempts).
    #[arg(long, default_value_t = 20.0)]
    pub w8w_duration: f64,
    /// Seconds one write attempt waits at most before it is given up.
    #[arg(long, default_value_t = 10.0)]
    pub w8w_give_up: f64,
}

impl Args {
    /// `--smoke`'s durations.
    pub fn smoke(&mut self) {
        self.w8w_duration = 1.0;
        self.w8w_give_up = 1.0;
    }
}

/// W8W's settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Reader tasks per row.
    pub readers: usize,
    /// How long a reader (and the writer, once in) holds the lock.
    pub hold: Duration,
    /// The writer starts no attempt after this much time.
    pub duration: Duration,
    /// The longest one write attempt waits.
    pub give_up: Duration,
}

/// One row's client.
#[derive(Clone)]
enum Client {
    /// The read-write lock of the row's name.
    Distlock(ReadWriteLock<RedisBackend>),
    Raw(RawRwLock),
}

/// The writer task's thread number for the raw client (the readers are `0..readers`).
const WRITER: u64 = u64::MAX;

/// What a reader task did.
struct ReaderTally {
    pairs: u64,
    wait: Histogram<u64>,
}

/// What the writer task did.
struct WriterTally {
    attempts: u64,
    writes: u64,
    gave_up: u64,
    wait: Histogram<u64>,
    elapsed: Duration,
}

impl Client {
    /// One reader turn: read lock, hold, release. Returns the lock call's wait.
    async fn read_turn(&self, thread: u64, hold: Duration) -> Result<Duration, BenchError> {
        let sent = Instant::now();
        match self {
            Client::Distlock(lock) => {
                let guard = lock.read().await?;
                let waited = sent.elapsed();
                tokio::time::sleep(hold).await;
                released(guard.release().await?)?;
                Ok(waited)
            }
            Client::Raw(raw) => {
                raw.lock(Side::Read, thread, None).await?;
                let waited = sent.elapsed();
                tokio::time::sleep(hold).await;
                raw.unlock(Side::Read, thread).await?;
                Ok(waited)
            }
        }
    }

    /// One write attempt waiting at most `give_up`: when taken, hold and release. Returns
    /// whether it was taken and how long it waited.
    async fn write_turn(
        &self,
        hold: Duration,
        give_up: Duration,
    ) -> Result<(bool, Duration), BenchError> {
        let sent = Instant::now();
        match self {
            Client::Distlock(lock) => {
                let options = LockOptions::new().wait(give_up);
                match lock.write_with(&options).await {
                    Ok(guard) => {
                        let waited = sent.elapsed();
                        tokio::time::sleep(hold).await;
                        released(guard.release().await?)?;
                        Ok((true, waited))
                    }
                    Err(Error::NotAcquired { .. }) => Ok((false, sent.elapsed())),
                    Err(error) => Err(error.into()),
                }
            }
            Client::Raw(raw) => {
                if !raw.lock(Side::Write, WRITER, Some(give_up)).await? {
                    return Ok((false, sent.elapsed()));
                }
                let waited = sent.elapsed();
                tokio::time::sleep(hold).await;
                raw.unlock(Side::Write, WRITER).await?;
                Ok((true, waited))
            }
        }
    }

    fn raw(&self) -> Option<&RawRwLock> {
        match self {
            Client::Raw(raw) => Some(raw),
            Client::Distlock(_) => None,
        }
    }
}

/// A client of `key` at `url`: distlock's (writers preferred with `prefer`) or the raw one.
async fn connect(url: &str, key: &str, raw: bool, prefer: bool) -> Result<Client, BenchError> {
    Ok(if raw {
        Client::Raw(RawRwLock::connect(url, key).await?)
    } else {
        let lock = Locker::new(RedisBackend::connect(url).await?).read_write(key)?;
        Client::Distlock(if prefer { lock.prefer_writers() } else { lock })
    })
}

/// Runs W8W against `url`: each row once, one after the other; one measurement per row.
pub async fn run(
    url: &str,
    probe: &Probe,
    prefix: &str,
    config: Config,
) -> Result<Vec<Measurement>, BenchError> {
    let mut out = Vec::with_capacity(5);
    for (name, raw, apart, prefer) in [
        ("distlock-writer", false, false, false),
        ("raw-scripts", true, false, false),
        ("distlock-writer-apart", false, true, false),
        ("raw-scripts-apart", true, true, false),
        // The writer on a client of its own, its lock made with `prefer_writers`: waiting,
        // it holds new readers back.
        ("distlock-writer-preferring", false, true, true),
    ] {
        let key = format!("{prefix}:w8w:{name}");
        let client = connect(url, &key, raw, false).await?;
        let writer_client = if apart {
            connect(url, &key, raw, prefer).await?
        } else {
            client.clone()
        };
        // The raw clients' latch `DEL`s (the shared client counted once).
        let clients: &[&Client] = if apart {
            &[&client, &writer_client]
        } else {
            &[&client]
        };
        let sent = || -> u64 {
            clients
                .iter()
                .map(|client| client.raw().map_or(0, RawRwLock::dels_sent))
                .sum()
        };
        let dels_before = sent();
        let before = probe.snapshot().await?;
        let (readers, writer) = row(&client, &writer_client, config).await?;
        for client in clients {
            if let Some(raw) = client.raw() {
                raw.settle().await;
            }
        }
        let counters = probe.snapshot().await?.since(&before);
        check_left(probe, WORKLOAD, name, &key, client.raw()).await?;
        let client_dels = sent() - dels_before;

        let mut reader_wait = new_histogram();
        let mut reader_pairs = 0;
        for reader in &readers {
            reader_pairs += reader.pairs;
            reader_wait.add(&reader.wait)?;
        }
        let pairs = reader_pairs + writer.writes;
        let mut tally = Tally::new();
        tally.ops = writer.attempts;
        tally.elapsed = writer.elapsed;
        tally.latency = writer.wait;
        let cost = counters.per_op(pairs);
        let requests = requests(&counters, pairs, client_dels);
        tally.counters = counters;
        let mut measurement = tally.into_row(WORKLOAD, name, config.readers + 1, 1);
        measurement.cost = cost;
        measurement.cost.requests = requests;
        measurement.per = "pair";
        measurement.extra = vec![
            ("writes", writer.writes as f64),
            ("gave_up", writer.gave_up as f64),
            ("wait_max_ms", measurement.latency.max() as f64 / 1e6),
            ("reader_pairs", reader_pairs as f64),
            (
                "reader_ops_per_sec",
                reader_pairs as f64 / writer.elapsed.as_secs_f64().max(1e-9),
            ),
            (
                "reader_wait_p99_us",
                reader_wait.value_at_quantile(0.99) as f64 / 1e3,
            ),
        ];
        out.push(measurement);
    }
    Ok(out)
}

/// One row: the readers start on `client`, the writer on `writer_client` follows [`READERS_FIRST`] later; the readers stop when
/// the writer's last attempt ended.
async fn row(
    client: &Client,
    writer_client: &Client,
    config: Config,
) -> Result<(Vec<ReaderTally>, WriterTally), BenchError> {
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..config.readers)
        .map(|reader| {
            let client = client.clone();
            let stop = stop.clone();
            let thread = reader as u64;
            tokio::spawn(async move {
                let mut tally = ReaderTally {
                    pairs: 0,
                    wait: new_histogram(),
                };
                while !stop.load(Ordering::Acquire) {
                    let waited = client.read_turn(thread, config.hold).await?;
                    record(&mut tally.wait, waited);
                    tally.pairs += 1;
                }
                Ok::<_, BenchError>(tally)
            })
        })
        .collect();
    tokio::time::sleep(READERS_FIRST).await;
    let writer = {
        let client = writer_client.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let mut tally = WriterTally {
                attempts: 0,
                writes: 0,
                gave_up: 0,
                wait: new_histogram(),
                elapsed: Duration::ZERO,
            };
            while started.elapsed() < config.duration {
                let (taken, waited) = client.write_turn(config.hold, config.give_up).await?;
                record(&mut tally.wait, waited);
                tally.attempts += 1;
                if taken {
                    tally.writes += 1;
                    tokio::time::sleep(WRITER_PAUSE).await;
                } else {
                    tally.gave_up += 1;
                }
            }
            tally.elapsed = started.elapsed();
            Ok::<_, BenchError>(tally)
        })
    };
    let writer = writer.await?;
    stop.store(true, Ordering::Release);
    let mut tallies = Vec::with_capacity(readers.len());
    for reader in readers {
        tallies.push(reader.await??);
    }
    Ok((tallies, writer?))
}

/// The W8W ratios: the writer's p50 wait, each distlock row ÷ its raw row (lower = distlock's
/// writer gets in sooner).
pub fn ratios(rows: &[&Measurement]) -> Vec<Ratio> {
    [
        ("distlock-writer", "raw-scripts"),
        ("distlock-writer-apart", "raw-scripts-apart"),
    ]
    .into_iter()
    .filter_map(|(distlock, raw)| Ratio::between(rows, WORKLOAD, Metric::P50, distlock, raw))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_divide_each_writers_p50_wait_by_its_raw_row() {
        let row = |contender: &'static str, p50: Duration| {
            let mut tally = Tally::new();
            tally.ops = 1;
            tally.elapsed = Duration::from_secs(1);
            record(&mut tally.latency, p50);
            tally.into_row(WORKLOAD, contender, 17, 1)
        };
        let rows = [
            row("distlock-writer", Duration::from_millis(40)),
            row("raw-scripts", Duration::from_millis(10)),
            row("distlock-writer-apart", Duration::from_millis(30)),
            row("raw-scripts-apart", Duration::from_millis(60)),
        ];
        let refs: Vec<&Measurement> = rows.iter().collect();
        let found: Vec<(&str, &str, f64)> = ratios(&refs)
            .into_iter()
            .map(|ratio| {
                assert_eq!(ratio.metric, Metric::P50);
                (ratio.numerator, ratio.denominator, ratio.value)
            })
            .collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!((found[0].0, found[0].1), ("distlock-writer", "raw-scripts"));
        assert!((found[0].2 - 4.0).abs() < 0.01, "{found:?}");
        assert_eq!(
            (found[1].0, found[1].1),
            ("distlock-writer-apart", "raw-scripts-apart")
        );
        assert!((found[1].2 - 0.5).abs() < 0.01, "{found:?}");
    }
}

//! W3: `--w3-tasks` tasks contend on ONE key: lock, a short critical section (`--w3-hold-us` of
//! busy work), unlock, repeat, for `--w3-duration` seconds per row.
//!
//! An op here is one **handoff**: an acquisition by a different task than the one that released
//! last. Re-acquisitions by the releasing task (it asks again at once and may win before the
//! woken waiter) are counted apart (`reacquires`), as is the first acquisition of every slice.
//! The latency histogram is the release → next-acquire wait of each handoff: from the instant the
//! previous holder's release call returned (written to a shared slot) to the instant the next
//! holder's acquire call returned. When the next acquire returns before the previous holder's
//! release call does (the releasing task was slow to be polled), the wait is recorded as 0 and
//! counted in `early`. Because that instant is when the releasing task was next polled, a busy
//! or small machine makes it late (and the wait short); `sent_p50_us` / `sent_p99_us` give the
//! same handoffs measured from the instant the previous holder *called* release instead (the
//! release's own round trip included), which no scheduling delay can shorten, and
//! `release_p50_us` is the median duration of the release call itself. Expect a two-humped
//! distribution: a task whose acquire attempt was already queued on the connection right behind
//! the release (a releasing task asks again at once; a waiter tries once more right after it
//! registers for notifications) is granted within microseconds of the release returning, while
//! a waiter woken by the release notification needs one more round trip. `fair_min` /
//! `fair_max` are the fewest and most acquisitions of one task over the row. The server commands
//! per handoff include the few after each slice's deadline, while the tasks leave.
//!
//! Rows: `distlock` (`Locker<RedisBackend>::lock`: wait forever with the default release
//! notifications, watchdog lease; `guard.release()`), `rslock` (`LockManager::acquire_no_guard`
//! with its defaults: 3 attempts per `lock`, random 0..200 ms between them, then `acquire` starts
//! over), `rslock-tuned` (the same with a random 0..`--w3-rslock-retry-ms` delay), and `ping`: the
//! `PING` round trip on the probe's connection, sampled before every slice of the same run, so
//! the target "distlock's p50 wait ≤ 2 × PING RTT" reads off the ratio table as
//! `distlock p50 ÷ ping ≤ 2.00`.
//!
//! W3P runs the same loop on PostgreSQL (see `postgres.rs`): rows `distlock-lock`
//! (`Locker<PostgresBackend>::lock`, woken by `LISTEN`), `raw-sql` (the backend's SQL on a bare
//! client, retrying every `--w3p-retry-ms`), `advisory` (each task blocking in
//! `pg_advisory_lock` on a connection of its own) and `select1` in place of `ping` (a prepared
//! `SELECT 1` on the probe's connection).
//!
//! The tasks of a row share `--w3-clients` clients (1 by default: one `Locker` or one
//! `LockManager`, as the tasks of one service would), task `i` using client `i % clients`.
//! Each row's measured phase is cut into `--slices` slices that take turns between the rows. A
//! slice stops taking new turns at its deadline; tasks still waiting then get the lock once more
//! and leave (not counted), so every slice ends with the key free.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lock_core::{LockGuard, Locker, ReleaseOutcome};
use lock_postgres::PostgresBackend;
use lock_redis::RedisBackend;

use crate::contenders::BenchError;
use crate::contenders::postgres::{Advisory, AdvisoryHold, RawHold, RawSql};
#[cfg(feature = "rslock")]
use crate::contenders::rslock::Rslock;
use crate::measurement::{Measurement, Metric, Ratio, Tally, new_histogram, record};
use crate::probe::Probe;

/// The workload's label in rows and ratios (W3P's rows are labelled by `postgres.rs`).
const WORKLOAD: &str = "W3";

/// `PING`s sampled before every slice for the `ping` row.
const PINGS_PER_SLICE: usize = 200;

/// W3's settings on the command line; its slices are `--slices`.
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w3")]
pub struct Args {
    /// Tasks contending on the one key.
    #[arg(long, default_value_t = 16)]
    pub w3_tasks: usize,
    /// Clients (connections) per row the tasks share, task `i` using client `i % n`.
    #[arg(long, default_value_t = 1)]
    pub w3_clients: usize,
    /// Measured seconds per row, cut into `--slices` slices.
    #[arg(long, default_value_t = 6.0)]
    pub w3_duration: f64,
    /// Busy microseconds inside the critical section.
    #[arg(long, default_value_t = 50)]
    pub w3_hold_us: u64,
    /// The `rslock-tuned` row's retry delay in ms (rslock sleeps a random `0..this` ms between
    /// attempts; its default is 200). At least 2: 1 would mean no delay at all.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..))]
    pub w3_rslock_retry_ms: u64,
}

impl Args {
    /// `--smoke`'s duration.
    pub fn smoke(&mut self) {
        self.w3_duration = 1.0;
    }
}

/// W3's settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Contending tasks.
    pub tasks: usize,
    /// Clients (connections) per row the tasks are spread over.
    pub clients: usize,
    /// Measured time per row, over all its slices.
    pub duration: Duration,
    /// Slices per row.
    pub slices: u32,
    /// Busy time inside the critical section.
    pub hold: Duration,
    /// `rslock-tuned`'s retry delay (rslock draws a random delay in `0..this` whole ms).
    pub rslock_retry: Duration,
}

/// One client of a row.
#[derive(Clone)]
pub enum Client {
    /// `Locker<RedisBackend>::lock`.
    Distlock(Locker<RedisBackend>),
    /// rslock's `LockManager`, with its retries.
    #[cfg(feature = "rslock")]
    Rslock(Rslock),
    /// W3P: `Locker<PostgresBackend>::lock`.
    PgDistlock(Locker<PostgresBackend>),
    /// W3P: the backend's SQL on a bare client, tried again every `retry` while held.
    PgRawSql { client: RawSql, retry: Duration },
    /// W3P: `pg_advisory_lock`, waiting in the server.
    PgAdvisory(Advisory),
}

/// A held lock of any kind.
enum Held {
    Distlock(LockGuard<RedisBackend>),
    #[cfg(feature = "rslock")]
    Rslock(rslock::Lock),
    PgDistlock(LockGuard<PostgresBackend>),
    PgRawSql(RawHold),
    PgAdvisory(AdvisoryHold),
}

impl Client {
    async fn acquire(&self, key: &str) -> Result<Held, BenchError> {
        match self {
            Client::Distlock(locker) => Ok(Held::Distlock(locker.lock(key).await?)),
            #[cfg(feature = "rslock")]
            Client::Rslock(client) => Ok(Held::Rslock(client.acquire(key).await?)),
            Client::PgDistlock(locker) => Ok(Held::PgDistlock(locker.lock(key).await?)),
            Client::PgRawSql { client, retry } => {
                Ok(Held::PgRawSql(client.acquire_polling(key, *retry).await?))
            }
            Client::PgAdvisory(client) => Ok(Held::PgAdvisory(client.acquire(key).await?)),
        }
    }

    async fn release(&self, held: Held) -> Result<(), BenchError> {
        let outcome = match (self, held) {
            (Client::Distlock(_), Held::Distlock(guard)) => guard.release().await?,
            (Client::PgDistlock(_), Held::PgDistlock(guard)) => guard.release().await?,
            #[cfg(feature = "rslock")]
            (Client::Rslock(client), Held::Rslock(lock)) => {
                client.unlock(&lock).await;
                return Ok(());
            }
            (Client::PgRawSql { client, .. }, Held::PgRawSql(hold)) => {
                return client.release(hold).await;
            }
            (Client::PgAdvisory(client), Held::PgAdvisory(hold)) => {
                return client.release(hold).await;
            }
            _ => return Err("W3: a lock released by the wrong kind of client".into()),
        };
        match outcome {
            ReleaseOutcome::Released => Ok(()),
            other => Err(format!("W3 distlock: release answered {other:?}").into()),
        }
    }
}

/// One W3 row: its name and clients.
pub struct Row {
    name: &'static str,
    clients: Vec<Client>,
}

impl Row {
    /// The row `name`, its tasks spread over `clients` (task `i` on client `i % len`).
    pub fn new(name: &'static str, clients: Vec<Client>) -> Self {
        Row { name, clients }
    }
}

/// Connects the rows `distlock`, `rslock` and `rslock-tuned` to `url`, each with
/// `config.clients` clients of its own.
pub async fn connect(url: &str, config: &Config) -> Result<Vec<Row>, BenchError> {
    let count = config.clients.max(1);
    let mut lockers = Vec::with_capacity(count);
    for _ in 0..count {
        lockers.push(Client::Distlock(Locker::new(
            RedisBackend::connect(url).await?,
        )));
    }
    #[allow(unused_mut)]
    let mut rows = vec![Row {
        name: "distlock",
        clients: lockers,
    }];
    #[cfg(feature = "rslock")]
    {
        rows.push(Row {
            name: "rslock",
            clients: (0..count)
                .map(|_| Client::Rslock(Rslock::new(url)))
                .collect(),
        });
        rows.push(Row {
            name: "rslock-tuned",
            clients: (0..count)
                .map(|_| Client::Rslock(Rslock::with_retry_delay(url, config.rslock_retry)))
                .collect(),
        });
    }
    #[cfg(not(feature = "rslock"))]
    {
        let _ = config.rslock_retry;
        eprintln!("W3: rslock rows not built (feature `rslock` is off)");
    }
    Ok(rows)
}

/// Who held the key last, and when their release returned.
#[derive(Default)]
struct Slot {
    /// The task holding the key now (set when its acquire returned, cleared before its release
    /// is sent).
    holder: Option<usize>,
    /// The task that released last (set before its release is sent).
    previous: Option<usize>,
    /// When `previous`'s release call returned, if it has and nobody acquired since.
    released_at: Option<Instant>,
    /// When `previous` called release.
    release_sent_at: Option<Instant>,
}

/// One task's figures over one slice.
struct TaskTally {
    acquisitions: u64,
    handoffs: u64,
    reacquires: u64,
    early: u64,
    overlaps: u64,
    wait: Histogram<u64>,
    /// Handoff waits from the previous holder's release call instead of its return.
    from_sent: Histogram<u64>,
    /// Durations of this task's release calls (those sent before the deadline).
    release: Histogram<u64>,
}

/// One row's figures over all its slices.
struct RowTally {
    tally: Tally,
    per_task: Vec<u64>,
    reacquires: u64,
    early: u64,
    overlaps: u64,
    drain: Duration,
    from_sent: Histogram<u64>,
    release: Histogram<u64>,
}

/// Runs every row's slices, interleaved, and returns one measurement per row plus the `ping` row
/// ([`Probe::ping_name`]), all labelled `workload`.
pub async fn run(
    workload: &'static str,
    rows: Vec<Row>,
    probe: &Probe,
    prefix: &str,
    config: Config,
) -> Result<Vec<Measurement>, BenchError> {
    let slices = config.slices.max(1);
    let each = config.duration / slices;
    let mut tallies: Vec<RowTally> = rows
        .iter()
        .map(|_| RowTally {
            tally: Tally::new(),
            per_task: vec![0; config.tasks],
            reacquires: 0,
            early: 0,
            overlaps: 0,
            drain: Duration::ZERO,
            from_sent: new_histogram(),
            release: new_histogram(),
        })
        .collect();
    let mut ping = Tally::new();
    // Unmeasured: connects every client (rslock connects on first use, a backend's pool slot on
    // first use) and loads the scripts.
    for row in &rows {
        let key = format!(
            "{prefix}:{}:{}:warm",
            workload.to_ascii_lowercase(),
            row.name
        );
        for client in &row.clients {
            let held = client.acquire(&key).await?;
            client.release(held).await?;
        }
    }
    for turn in 0..slices as usize {
        for offset in 0..rows.len() {
            let index = (turn + offset) % rows.len();
            let row = &rows[index];
            let row_tally = &mut tallies[index];
            let pinging = Instant::now();
            for _ in 0..PINGS_PER_SLICE {
                record(&mut ping.latency, probe.ping().await?);
                ping.ops += 1;
            }
            ping.elapsed += pinging.elapsed();
            let key = format!("{prefix}:{}:{}", workload.to_ascii_lowercase(), row.name);
            let before = probe.snapshot().await?;
            let (tasks, drain) = slice(row, &key, &config, each).await?;
            row_tally
                .tally
                .counters
                .add(&probe.snapshot().await?.since(&before));
            row_tally.tally.elapsed += each;
            row_tally.drain += drain;
            for (task, tally) in tasks.iter().enumerate() {
                row_tally.per_task[task] += tally.acquisitions;
                row_tally.tally.ops += tally.handoffs;
                row_tally.reacquires += tally.reacquires;
                row_tally.early += tally.early;
                row_tally.overlaps += tally.overlaps;
                row_tally.tally.latency.add(&tally.wait)?;
                row_tally.from_sent.add(&tally.from_sent)?;
                row_tally.release.add(&tally.release)?;
            }
        }
    }
    let mut out = Vec::with_capacity(rows.len() + 1);
    for (row, tallied) in rows.iter().zip(tallies) {
        let acquisitions: u64 = tallied.per_task.iter().sum();
        let elapsed = tallied.tally.elapsed.as_secs_f64();
        let fair_min = tallied.per_task.iter().copied().min().unwrap_or(0);
        let fair_max = tallied.per_task.iter().copied().max().unwrap_or(0);
        if tallied.overlaps > 0 {
            eprintln!(
                "{workload} {}: {} acquisitions while another task held the key: mutual exclusion broken",
                row.name, tallied.overlaps
            );
        }
        let mut measurement = tallied.tally.into_row(workload, row.name, config.tasks, 1);
        measurement.extra = vec![
            ("acq_per_s", acquisitions as f64 / elapsed),
            ("acquisitions", acquisitions as f64),
            ("reacquires", tallied.reacquires as f64),
            ("early", tallied.early as f64),
            (
                "sent_p50_us",
                tallied.from_sent.value_at_quantile(0.5) as f64 / 1e3,
            ),
            (
                "sent_p99_us",
                tallied.from_sent.value_at_quantile(0.99) as f64 / 1e3,
            ),
            (
                "release_p50_us",
                tallied.release.value_at_quantile(0.5) as f64 / 1e3,
            ),
            ("fair_min", fair_min as f64),
            ("fair_max", fair_max as f64),
            ("overlaps", tallied.overlaps as f64),
            ("clients", row.clients.len() as f64),
            ("drain_ms", tallied.drain.as_secs_f64() * 1e3),
        ];
        out.push(measurement);
    }
    let mut ping = ping.into_row(workload, probe.ping_name(), 1, 1);
    ping.extra = vec![("samples", ping.ops as f64)];
    out.push(ping);
    Ok(out)
}

/// One slice of one row: `config.tasks` tasks on the one key until `length` has passed. Returns
/// each task's figures and how long the tasks took to leave after the deadline.
async fn slice(
    row: &Row,
    key: &str,
    config: &Config,
    length: Duration,
) -> Result<(Vec<TaskTally>, Duration), BenchError> {
    let slot = Arc::new(Mutex::new(Slot::default()));
    let started = Instant::now();
    let deadline = started + length;
    let handles: Vec<_> = (0..config.tasks)
        .map(|task| {
            let client = row.clients[task % row.clients.len()].clone();
            let key = key.to_owned();
            let slot = slot.clone();
            let hold = config.hold;
            tokio::spawn(async move {
                let mut tally = TaskTally {
                    acquisitions: 0,
                    handoffs: 0,
                    reacquires: 0,
                    early: 0,
                    overlaps: 0,
                    wait: new_histogram(),
                    from_sent: new_histogram(),
                    release: new_histogram(),
                };
                while Instant::now() < deadline {
                    let held = client.acquire(&key).await?;
                    let acquired_at = Instant::now();
                    {
                        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                        let counted = acquired_at < deadline;
                        if slot.holder.is_some() {
                            tally.overlaps += 1;
                        }
                        if counted {
                            tally.acquisitions += 1;
                            match slot.previous {
                                None => {}
                                Some(previous) if previous == task => tally.reacquires += 1,
                                Some(_) => {
                                    tally.handoffs += 1;
                                    if let Some(sent_at) = slot.release_sent_at {
                                        record(&mut tally.from_sent, acquired_at - sent_at);
                                    }
                                    match slot.released_at {
                                        Some(released_at) => {
                                            record(&mut tally.wait, acquired_at - released_at);
                                        }
                                        None => {
                                            tally.early += 1;
                                            record(&mut tally.wait, Duration::ZERO);
                                        }
                                    }
                                }
                            }
                        }
                        slot.holder = Some(task);
                        slot.released_at = None;
                        slot.release_sent_at = None;
                    }
                    critical_section(hold);
                    let release_sent_at = Instant::now();
                    {
                        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                        slot.holder = None;
                        slot.previous = Some(task);
                        slot.released_at = None;
                        slot.release_sent_at = Some(release_sent_at);
                    }
                    client.release(held).await?;
                    let released_at = Instant::now();
                    if release_sent_at < deadline {
                        record(&mut tally.release, released_at - release_sent_at);
                    }
                    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
                    if slot.holder.is_none() && slot.previous == Some(task) {
                        slot.released_at = Some(released_at);
                    }
                }
                Ok::<_, BenchError>(tally)
            })
        })
        .collect();
    let mut tallies = Vec::with_capacity(handles.len());
    for handle in handles {
        tallies.push(handle.await??);
    }
    Ok((tallies, deadline.elapsed()))
}

/// The critical section: `hold` of busy work on the runtime worker (a timer would round up to a
/// millisecond).
fn critical_section(hold: Duration) {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// The W3 ratios: p50 wait ÷ `ping` p50 for every lock row (the target is distlock ≤ 2.00), and
/// `distlock` handoffs/s ÷ each rslock row.
pub fn ratios(rows: &[&Measurement]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let locks: Vec<&'static str> = rows
        .iter()
        .filter(|row| row.workload == WORKLOAD && row.contender != "ping")
        .map(|row| row.contender)
        .collect();
    for &name in &locks {
        out.extend(Ratio::between(rows, WORKLOAD, Metric::P50, name, "ping"));
    }
    for &name in locks.iter().filter(|name| name.starts_with("rslock")) {
        out.extend(Ratio::between(
            rows,
            WORKLOAD,
            Metric::Throughput,
            "distlock",
            name,
        ));
    }
    out
}

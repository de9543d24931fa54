//! W10: leader election failover. For each lease of `--w10-leases-ms`:
//!
//! - `crash-<lease>`: a leader campaigns (watchdog lease = the lease) in a "process" of its own
//!   (a thread with its own tokio runtime and `RedisBackend`), a second candidate campaigns and
//!   waits, and the leader crashes at a random point of its renewal cycle (after one to two
//!   renewal periods): its `Leadership` is forgotten and its runtime shut down, which stops its
//!   watchdog and closes its connections without sending anything, as a process killed with
//!   SIGKILL would. (Dropping the backend alone would not do: the watchdog task keeps a handle of
//!   its own and goes on renewing a forgotten leadership.) Latency = from the crash to the
//!   waiting candidate's `campaign` returned: the lease left at the crash (between two thirds of
//!   the lease and all of it, the watchdog renewing every third) plus the time the waiter takes
//!   to find out, as nobody announces an expiry.
//! - `resign-<lease>`: the same two candidates, both in this runtime; the leader resigns.
//!   Latency = from the `resign` call to the waiting candidate's `campaign` returned: a planned
//!   handover, announced on the lock's channel.
//!
//! `ops` = failovers (or handovers) measured, `ops/s` = those per second of the row (not a
//! throughput: each trial waits out a lease); extras `lease_ms` and `failover_p50_per_lease`,
//! `failover_max_per_lease` (the latency ÷ the lease).

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockOptions, Locker};
use lock_redis::RedisBackend;
use tokio::sync::Notify;

use crate::contenders::BenchError;
use crate::measurement::{Measurement, Tally, record};
use crate::probe::Probe;

/// The workload's label in rows.
pub const WORKLOAD: &str = "W10";

/// How long a failover may take before the run gives up: the lease plus this.
const GIVE_UP_AFTER_LEASE: Duration = Duration::from_secs(10);

/// W10's settings on the command line.
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w10")]
pub struct Args {
    /// The leases (ms, comma list), a `crash-` and a `resign-` row each (`--smoke`: 1000).
    #[arg(long, value_delimiter = ',', default_values_t = [1000, 3000, 10000])]
    pub w10_leases_ms: Vec<u64>,
    /// Leader crashes measured per lease (`--smoke`: 1).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub w10_failovers: u64,
    /// Resignations measured per lease (`--smoke`: 3).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub w10_handovers: u64,
}

impl Args {
    /// `--smoke`'s leases and counts.
    pub fn smoke(&mut self) {
        self.w10_leases_ms = vec![1000];
        self.w10_failovers = 1;
        self.w10_handovers = 3;
    }
}

/// W10's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The leases: a `crash-` and a `resign-` row each.
    pub leases: Vec<Duration>,
    /// Crashes measured per lease.
    pub failovers: usize,
    /// Resignations measured per lease.
    pub handovers: usize,
}

/// `1s`, `500ms`: a lease as a row name.
fn lease_label(lease: Duration) -> String {
    if lease.subsec_millis() == 0 {
        format!("{}s", lease.as_secs())
    } else {
        format!("{}ms", lease.as_millis())
    }
}

/// A row name that lives as long as the run (rows name their contender with a `&'static str`;
/// a handful per run).
fn row_name(kind: &str, lease: Duration) -> &'static str {
    Box::leak(format!("{kind}-{}", lease_label(lease)).into_boxed_str())
}

/// A random duration in `[0, span)` (no generator among the bench's dependencies: a v4 UUID's
/// random bits).
fn random_below(span: Duration) -> Duration {
    let nanos = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX).max(1);
    let random = u64::try_from(uuid::Uuid::new_v4().as_u128() >> 64).unwrap_or(0);
    Duration::from_nanos(random % nanos)
}

/// Runs W10 against `url`: a `crash-` row per lease, then a `resign-` row per lease.
pub async fn run(
    url: &str,
    probe: &Probe,
    prefix: &str,
    config: &Config,
) -> Result<Vec<Measurement>, BenchError> {
    let mut rows = Vec::new();
    for &lease in &config.leases {
        let name = format!("{prefix}:w10:crash:{}", lease_label(lease));
        let before = probe.snapshot().await?;
        let started = Instant::now();
        let mut tally = Tally::new();
        for _ in 0..config.failovers.max(1) {
            record(&mut tally.latency, crash_once(url, &name, lease).await?);
            tally.ops += 1;
        }
        tally.elapsed = started.elapsed();
        tally.counters = probe.snapshot().await?.since(&before);
        rows.push(with_lease(
            tally.into_row(WORKLOAD, row_name("crash", lease), 2, 1),
            lease,
        ));
    }
    for &lease in &config.leases {
        let name = format!("{prefix}:w10:resign:{}", lease_label(lease));
        let options = LockOptions::new().watchdog_lease(lease);
        let leader = Locker::new(RedisBackend::connect(url).await?).election(&name)?;
        let waiter = Locker::new(RedisBackend::connect(url).await?).election(&name)?;
        let before = probe.snapshot().await?;
        let started = Instant::now();
        let mut tally = Tally::new();
        for _ in 0..config.handovers.max(1) {
            let leadership = leader.campaign_with("leader", &options).await?;
            let waiting = {
                let (waiter, options) = (waiter.clone(), options.clone());
                tokio::spawn(async move {
                    let won = waiter.campaign_with("waiter", &options).await;
                    (Instant::now(), won)
                })
            };
            // The waiter has made its attempt and sleeps on the lock's channel.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let resigned_at = Instant::now();
            if !leadership.resign().await? {
                return Err("W10: the leader had lost its leadership before resigning".into());
            }
            let (won_at, won) = tokio::time::timeout(lease + GIVE_UP_AFTER_LEASE, waiting)
                .await
                .map_err(|_| "W10: no new leader after a resignation")??;
            let next = won?;
            record(
                &mut tally.latency,
                won_at.saturating_duration_since(resigned_at),
            );
            tally.ops += 1;
            next.resign().await?;
        }
        tally.elapsed = started.elapsed();
        tally.counters = probe.snapshot().await?.since(&before);
        rows.push(with_lease(
            tally.into_row(WORKLOAD, row_name("resign", lease), 2, 1),
            lease,
        ));
    }
    Ok(rows)
}

/// The row's extras: its lease and its latencies ÷ the lease.
fn with_lease(mut row: Measurement, lease: Duration) -> Measurement {
    let lease_us = lease.as_secs_f64() * 1e6;
    row.extra = vec![
        ("lease_ms", lease.as_secs_f64() * 1e3),
        ("failover_p50_per_lease", row.quantile_us(0.5) / lease_us),
        (
            "failover_max_per_lease",
            row.latency.max() as f64 / 1e3 / lease_us,
        ),
    ];
    row
}

/// One crash: returns the time from the leader's crash to the waiting candidate leading.
async fn crash_once(url: &str, name: &str, lease: Duration) -> Result<Duration, BenchError> {
    let options = LockOptions::new().watchdog_lease(lease);
    let (granted, elected) = tokio::sync::oneshot::channel();
    let kill = Arc::new(Notify::new());
    let leader = {
        let (url, name, options, kill) = (
            url.to_owned(),
            name.to_owned(),
            options.clone(),
            kill.clone(),
        );
        std::thread::spawn(move || -> Result<(), String> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())?;
            let led = runtime.block_on(async {
                let backend = RedisBackend::connect(url.as_str()).await?;
                let election = Locker::new(backend).election(&name)?;
                let leadership = election.campaign_with("leader", &options).await?;
                let _ = granted.send(());
                kill.notified().await;
                // The crash: nothing is given back; the runtime's end below stops the watchdog
                // and closes the connections.
                std::mem::forget(leadership);
                Ok::<(), lock_core::Error>(())
            });
            runtime.shutdown_background();
            led.map_err(|error| error.to_string())
        })
    };
    if elected.await.is_err() {
        let failed = tokio::task::spawn_blocking(move || leader.join()).await?;
        return Err(format!("W10: the leader never led: {failed:?}").into());
    }
    let waiter = Locker::new(RedisBackend::connect(url).await?).election(name)?;
    let waiting = {
        let options = options.clone();
        tokio::spawn(async move {
            let won = waiter.campaign_with("waiter", &options).await;
            (Instant::now(), won)
        })
    };
    // A random point of the renewal cycle, after the first renewal.
    let period = lease / 3;
    tokio::time::sleep(period + random_below(period)).await;
    let crashed_at = Instant::now();
    kill.notify_one();
    tokio::task::spawn_blocking(move || leader.join())
        .await?
        .map_err(|_| "W10: the leader's thread panicked")??;
    let (won_at, won) = tokio::time::timeout(lease + GIVE_UP_AFTER_LEASE, waiting)
        .await
        .map_err(|_| "W10: no new leader after a crash")??;
    let next = won?;
    next.resign().await?;
    Ok(won_at.saturating_duration_since(crashed_at))
}

/// Prints one line per W10 row of `rows`: its lease, p50 and max latency, and both ÷ the lease.
pub fn print_per_lease(rows: &[&Measurement]) {
    for row in rows.iter().filter(|row| row.workload == WORKLOAD) {
        let extra = |name: &str| {
            row.extra
                .iter()
                .find(|(key, _)| *key == name)
                .map_or(f64::NAN, |(_, value)| *value)
        };
        println!(
            "W10 {:<14} lease={:>6.0}ms  p50={:>8.1}ms max={:>8.1}ms  p50/lease={:.3} max/lease={:.3}",
            row.contender,
            extra("lease_ms"),
            row.quantile_us(0.5) / 1e3,
            row.latency.max() as f64 / 1e6,
            extra("failover_p50_per_lease"),
            extra("failover_max_per_lease"),
        );
    }
}

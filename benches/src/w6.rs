//! W6: `--waiters` tasks (10,000) each wait on a lock of its own, held by another client; the
//! holder then releases them and each waiter's wake-up latency is measured.
//!
//! Setup: a holder `Locker<RedisBackend>` (its own backend, so its own connection and client id)
//! takes every lock with a fixed 10 min lease, so no timer or watchdog plays a part. A second,
//! waiting `Locker<RedisBackend>` (default settings: pub/sub release notifications) then starts
//! one task per lock calling `lock(name)` (wait forever). The run waits until the server counts
//! a subscribed channel per waiter (`INFO stats` `pubsub_channels`) and two acquire attempts per
//! waiter (the fast-path attempt and the one after registering), i.e. until every waiter sleeps
//! on its notification, and reads `CLIENT LIST`: the connections that appeared since before the
//! waiting backend was made are the waiting client's (`conns_per_node`, of which `pubsub_conns`
//! are subscribed).
//!
//! Release pacing: the holder releases the locks in batches of `--release-batch` (default 1),
//! the releases of a batch sent concurrently on the holder's connection; the next batch starts
//! only when every waiter of the batch has its lock (closed loop). So at most a batch of releases
//! and wake-ups is in flight at any time: with the default of 1, the latency is that of one
//! wake-up on an otherwise idle client (about one acquire round trip), not the queueing of
//! thousands of acquires on the waiting client's one connection that releasing everything at once
//! would cause by itself. Larger batches show that queueing on purpose (on a 2-core machine:
//! p50 ≈ 1 RTT at 1, ≈ 3 RTT at 10, ≈ 25 RTT at 100). A waiter's latency runs from the instant the
//! holder's `release()` call for
//! its lock returned to the instant the waiter's `lock()` returned; a waiter whose `lock()`
//! returned first is recorded as 0 and counted in `early`.
//!
//! The row: `ops` = wake-ups, `ops/s` = wake-ups per second of the release phase, `p50`… = wake-up
//! latency, `server cmds/op` = server commands per wake-up during the release phase (the holder's
//! release, the waiter's acquire, its unsubscribe). Afterwards the waiters release their locks
//! and the run checks that no lock key (`keys_left`) and no subscribed channel of the run
//! (`channels_left`) remains.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::{LockGuard, LockOptions, Locker, ReleaseOutcome};
use lock_redis::RedisBackend;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::contenders::BenchError;
use crate::measurement::{Measurement, Tally, record};
use crate::probe::Probe;

/// The workload's label in rows.
const WORKLOAD: &str = "W6";

/// The holder's fixed lease: longer than any run, so no lock expires while waited on.
const HOLD_LEASE: Duration = Duration::from_secs(600);

/// How long the waiters may take to be in place, and a batch's waiters to wake.
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);
const BATCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The commands an acquire attempt is made of, as `INFO commandstats` names them.
const SCRIPT_CALLS: &[&str] = &["evalsha", "eval", "fcall"];

/// W6's settings on the command line.
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w6")]
pub struct Args {
    /// Waiting tasks, each on a lock of its own.
    #[arg(long, default_value_t = 10_000)]
    pub waiters: usize,
    /// Locks the holder releases at once; the next batch goes when their waiters woke (1: one
    /// wake-up at a time, no queueing of our own making).
    #[arg(long, default_value_t = 1)]
    pub release_batch: usize,
}

impl Args {
    /// `--smoke`'s count.
    pub fn smoke(&mut self) {
        self.waiters = 500;
    }
}

/// W6's settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Waiting tasks, one lock each.
    pub waiters: usize,
    /// Locks released concurrently per batch.
    pub batch: usize,
}

type Waiter = (Instant, LockGuard<RedisBackend>);

/// Runs W6 against `url` and returns its one row, `distlock`.
pub async fn run(
    url: &str,
    probe: &Probe,
    prefix: &str,
    config: Config,
) -> Result<Vec<Measurement>, BenchError> {
    let prefix = format!("{prefix}:w6");
    let names: Vec<String> = (0..config.waiters)
        .map(|i| format!("{prefix}:{i}"))
        .collect();
    let holder = Locker::new(RedisBackend::connect(url).await?);
    let fixed = LockOptions::new().no_wait().fixed_lease(HOLD_LEASE);
    let mut held = Vec::with_capacity(names.len());
    for name in &names {
        held.push(holder.lock_with(name, &fixed).await?);
    }

    // Everything connected before the waiting backend is not the waiting client's.
    let baseline: Vec<u64> = probe
        .client_list()
        .await?
        .iter()
        .map(|client| client.id)
        .collect();
    let channels_before = probe.info_field("stats", "pubsub_channels").await?;
    let before_setup = probe.snapshot().await?;
    let waiting = Locker::new(RedisBackend::connect(url).await?);
    let woken = Arc::new(AtomicUsize::new(0));
    let wake = Arc::new(Notify::new());
    let setup_started = Instant::now();
    let waiters: Vec<_> = names
        .iter()
        .map(|name| {
            let locker = waiting.clone();
            let name = name.clone();
            let (woken, wake) = (woken.clone(), wake.clone());
            tokio::spawn(async move {
                let guard = locker.lock(&name).await?;
                let acquired_at = Instant::now();
                woken.fetch_add(1, Ordering::AcqRel);
                wake.notify_one();
                Ok::<Waiter, BenchError>((acquired_at, guard))
            })
        })
        .collect();

    // Wait until every waiter sleeps on its notification.
    let waiters_count = config.waiters as u64;
    loop {
        let channels = probe.info_field("stats", "pubsub_channels").await? - channels_before;
        let attempts = probe
            .snapshot()
            .await?
            .since(&before_setup)
            .calls(SCRIPT_CALLS);
        if woken.load(Ordering::Acquire) > 0 {
            return Err("W6: a waiter got a lock that is still held".into());
        }
        if u64::try_from(channels).unwrap_or(0) >= waiters_count && attempts >= 2 * waiters_count {
            break;
        }
        if setup_started.elapsed() > SETUP_TIMEOUT {
            return Err(format!(
                "W6: waiters not in place after {SETUP_TIMEOUT:?}: {channels} channels, {attempts} attempts"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let setup = setup_started.elapsed();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let clients = probe.client_list().await?;
    let fresh: Vec<_> = clients
        .iter()
        .filter(|client| !baseline.contains(&client.id))
        .collect();
    let conns = fresh.len();
    let pubsub_conns = fresh.iter().filter(|client| client.pubsub).count();

    // The release phase, paced in closed-loop batches.
    let mut released_at: Vec<Option<Instant>> = vec![None; names.len()];
    let before = probe.snapshot().await?;
    let started = Instant::now();
    let mut held = held.into_iter().enumerate();
    let mut released = 0;
    loop {
        let mut batch = JoinSet::new();
        for (index, guard) in held.by_ref().take(config.batch.max(1)) {
            batch.spawn(async move {
                let outcome = guard.release().await;
                (index, Instant::now(), outcome)
            });
        }
        if batch.is_empty() {
            break;
        }
        while let Some(done) = batch.join_next().await {
            let (index, at, outcome) = done?;
            match outcome? {
                ReleaseOutcome::Released => released_at[index] = Some(at),
                other => return Err(format!("W6: holder release answered {other:?}").into()),
            }
            released += 1;
        }
        let batch_started = Instant::now();
        while woken.load(Ordering::Acquire) < released {
            let left = BATCH_TIMEOUT.saturating_sub(batch_started.elapsed());
            if left.is_zero() {
                return Err(format!(
                    "W6: {} of {released} released locks' waiters not woken after {BATCH_TIMEOUT:?}",
                    released - woken.load(Ordering::Acquire)
                )
                .into());
            }
            let _ = tokio::time::timeout(left, wake.notified()).await;
        }
    }
    let elapsed = started.elapsed();
    let counters = probe.snapshot().await?.since(&before);

    let mut tally = Tally::new();
    tally.ops = names.len() as u64;
    tally.elapsed = elapsed;
    tally.counters = counters;
    let mut early: u32 = 0;
    let mut guards = Vec::with_capacity(waiters.len());
    for (index, handle) in waiters.into_iter().enumerate() {
        let (acquired_at, guard) = handle.await??;
        let released_at = released_at[index].ok_or("W6: a lock was never released")?;
        match acquired_at.checked_duration_since(released_at) {
            Some(latency) => record(&mut tally.latency, latency),
            None => {
                early += 1;
                record(&mut tally.latency, Duration::ZERO);
            }
        }
        guards.push(guard);
    }

    // Clean up, then check nothing is left behind.
    for guard in guards {
        match guard.release().await? {
            ReleaseOutcome::Released => {}
            other => return Err(format!("W6: waiter release answered {other:?}").into()),
        }
    }
    let keys_left = probe.count_keys(&format!("{prefix}:*")).await?;
    let settle = Instant::now();
    let channels_left = loop {
        let left = probe.info_field("stats", "pubsub_channels").await? - channels_before;
        if left <= 0 || settle.elapsed() > Duration::from_secs(5) {
            break left.max(0);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if keys_left > 0 || channels_left > 0 {
        eprintln!("W6: {keys_left} lock key(s) and {channels_left} channel(s) left afterwards");
    }

    let mut row = tally.into_row(WORKLOAD, "distlock", config.waiters, 1);
    row.extra = vec![
        ("waiters", config.waiters as f64),
        ("release_batch", config.batch.max(1) as f64),
        ("conns_per_node", conns as f64),
        ("pubsub_conns", pubsub_conns as f64),
        ("setup_s", setup.as_secs_f64()),
        ("early", f64::from(early)),
        ("keys_left", keys_left as f64),
        ("channels_left", channels_left as f64),
    ];
    Ok(vec![row])
}

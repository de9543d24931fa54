//! W5: hold `--locks` locks (10,000) under the watchdog for `--w5-periods` renewal periods, then
//! release them all. W5C is the same on a 3-primary cluster.
//!
//! One `Locker<RedisBackend>` (default backend settings, default watchdog) takes every lock with
//! `lock_with(name, LockOptions::new().watchdog_lease(--w5-lease-ms))` on fresh names, one after
//! the other in one spawned task. The default lease is 30 s (renewed every 10 s); W5 asks for 3 s
//! so a renewal period is 1 s and several pass in a few seconds. The row:
//!
//! - `ops`, `ops/s`, `p50`…: the acquisitions of the locks (one `lock_with` each; the registry
//!   grows as they go).
//! - `server cmds/period`, `req/period`, `srv-cpu`, `cli-cpu`: what the hold phase cost per
//!   renewal period, summed over the nodes (the probe's `INFO` left out; the probe itself is
//!   idle meanwhile).
//! - `renew_calls_per_period_per_node`: script calls (`evalsha` + `eval` + `fcall`) the servers
//!   ran per renewal period during the hold phase (`INFO commandstats` deltas), divided by the
//!   nodes. The watchdog renews leases that fall due close together in one batch, sent as
//!   scripts of at most 256 keys each, so 10,000 locks on one server should cost about 40 calls
//!   per period, not 10,000. On a cluster a script may touch one slot only, so the batch is cut
//!   by slot first: with locks spread over the 16,384 slots, close to one script per lock.
//! - `renew_calls_per_100_locks_per_period`: the same summed over the nodes, per 100 locks held
//!   (on one node: the per-node figure × 100 ÷ locks); `renew_calls_per_period_max_node`: the
//!   busiest node's calls per period.
//! - `requests_per_period_per_node`: commands the client sent (scripts, `PING`s, ...) per period
//!   and node; `reads_per_period_per_node`: the nodes' read events (`INFO stats`
//!   `total_reads_processed`, the probe's own left out) per period and node: how many
//!   separate arrivals the requests made, i.e. the round trips the renewals cost when requests
//!   travel together on one connection.
//! - `cpu_pct`: this process's CPU (user + system, `getrusage(RUSAGE_SELF)`) during the hold
//!   phase, in % of one core.
//! - `rss_per_lock_b`: resident set growth (`/proc/self/statm`) from before the first acquire to
//!   the end of the hold phase, divided by the locks: guards, registry entries, names. It can
//!   under-count when the allocator reuses memory freed by workloads that ran before in the same
//!   process; `lockbench renewals` alone gives the cleanest figure. `rss_acquired_per_lock_b`: the
//!   same up to the last acquisition, before any renewal (what the renewals add is the
//!   difference).
//! - `lost`: guards whose lease was reported lost (should be 0); `keys_left`: lock keys still on
//!   the servers after every guard was released (`SCAN MATCH` on each node, should be 0).

use std::time::{Duration, Instant};

use lock_core::{LockOptions, Locker, ReleaseOutcome};
use lock_redis::RedisBackend;

use crate::contenders::BenchError;
use crate::measurement::{Measurement, Tally, record};
use crate::probe::{Counters, Probe};

/// The commands a renewal call is made of, as `INFO commandstats` names them.
const SCRIPT_CALLS: &[&str] = &["evalsha", "eval", "evalsha_ro", "eval_ro", "fcall"];

/// W5's settings on the command line (also W5C's).
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w5")]
pub struct Args {
    /// Locks held under the watchdog.
    #[arg(long, default_value_t = 10_000)]
    pub locks: usize,
    /// The watchdog lease in ms (renewed every third of it).
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(30..))]
    pub w5_lease_ms: u64,
    /// Renewal periods to hold the locks for.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub w5_periods: u32,
    /// 0 (default) gives every lock a name of its own hash; `n` puts hash tag `{t<i % n>}` in
    /// lock `i`'s name, so the locks share `n` slots (on a cluster, renewals are grouped by
    /// slot).
    #[arg(long, default_value_t = 0)]
    pub w5_hash_tags: usize,
}

impl Args {
    /// `--smoke`'s counts.
    pub fn smoke(&mut self) {
        self.locks = 1_000;
        self.w5_periods = 1;
    }
}

/// W5's settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Locks held.
    pub locks: usize,
    /// The watchdog lease; it is renewed every third of it.
    pub lease: Duration,
    /// Renewal periods to hold the locks for.
    pub periods: u32,
    /// 0: every lock name hashes on its own (names spread over a cluster's slots). `n`: lock
    /// `i`'s name carries the hash tag `{t<i % n>}`, so the locks share `n` slots (a cluster's
    /// renewals are grouped by slot).
    pub hash_tags: usize,
}

impl Config {
    /// The name of lock `i` under `prefix`.
    fn name(&self, prefix: &str, i: usize) -> String {
        match self.hash_tags {
            0 => format!("{prefix}:{i}"),
            tags => format!("{prefix}:{{t{}}}:{i}", i % tags),
        }
    }
}

/// Runs W5 (or W5C) on `backend`, whose nodes `probes` read, and returns its one row,
/// `distlock-watchdog`, labelled `workload`.
pub async fn run(
    workload: &'static str,
    backend: RedisBackend,
    probes: &[Probe],
    prefix: &str,
    config: Config,
) -> Result<Vec<Measurement>, BenchError> {
    let locker = Locker::new(backend);
    let probes = probes.to_vec();
    let prefix = format!("{prefix}:{}", workload.to_ascii_lowercase());
    tokio::spawn(async move { hold(workload, &locker, &probes, &prefix, config).await }).await?
}

/// Each node's counters at one instant.
async fn snapshot(probes: &[Probe]) -> Result<Vec<Counters>, BenchError> {
    let mut out = Vec::with_capacity(probes.len());
    for probe in probes {
        out.push(probe.snapshot().await?);
    }
    Ok(out)
}

async fn hold(
    workload: &'static str,
    locker: &Locker<RedisBackend>,
    probes: &[Probe],
    prefix: &str,
    config: Config,
) -> Result<Vec<Measurement>, BenchError> {
    let options = LockOptions::new().watchdog_lease(config.lease);
    let period = config.lease / 3;
    // Unmeasured: one pair, so the connection, the scripts and the watchdog task exist.
    let warm = format!("{prefix}:warm");
    let guard = locker.lock_with(&warm, &options).await?;
    let _ = guard.release().await?;

    let mut tally = Tally::new();
    let rss_before = rss_bytes();
    let mut guards = Vec::with_capacity(config.locks);
    let started = Instant::now();
    for i in 0..config.locks {
        let name = config.name(prefix, i);
        let sent = Instant::now();
        let guard = locker.lock_with(&name, &options).await?;
        record(&mut tally.latency, sent.elapsed());
        guards.push(guard);
    }
    tally.elapsed = started.elapsed();
    tally.ops = config.locks as u64;
    let rss_acquired = rss_bytes();

    // The hold phase: nothing but the watchdog runs.
    let before = snapshot(probes).await?;
    let cpu_before = cpu_time();
    let holding = Instant::now();
    tokio::time::sleep(period * config.periods).await;
    let held_for = holding.elapsed();
    let cpu = cpu_time()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let after = snapshot(probes).await?;
    let rss_after = rss_bytes();
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();

    let releasing = Instant::now();
    for guard in guards {
        match guard.release().await? {
            ReleaseOutcome::Released => {}
            other => return Err(format!("{workload}: release answered {other:?}").into()),
        }
    }
    let released_in = releasing.elapsed();
    let mut keys_left = 0;
    for probe in probes {
        keys_left += probe.count_keys(&format!("{prefix}:*")).await?;
    }
    if lost > 0 || keys_left > 0 {
        eprintln!(
            "{workload}: {lost} lease(s) lost, {keys_left} lock key(s) left after releasing all"
        );
    }

    let periods = held_for.as_secs_f64() / period.as_secs_f64();
    let nodes = probes.len().max(1) as f64;
    let mut counters = Counters::default();
    let (mut renew_calls, mut busiest, mut requests, mut reads) = (0.0, 0.0_f64, 0.0, 0.0);
    for (node_after, node_before) in after.iter().zip(&before) {
        let node = node_after.since(node_before);
        let calls = node.calls(SCRIPT_CALLS) as f64;
        renew_calls += calls;
        busiest = busiest.max(calls);
        let whole = node.per_op(1);
        requests += whole.requests;
        reads += whole.server_reads;
        counters.add(&node);
    }
    let growth = |after: Option<u64>| match (rss_before, after) {
        (Some(before), Some(after)) => (after as f64 - before as f64) / config.locks.max(1) as f64,
        _ => f64::NAN,
    };
    let cpu_pct = cpu.map_or(f64::NAN, |cpu| {
        cpu.as_secs_f64() / held_for.as_secs_f64() * 100.0
    });
    let mut row = tally.into_row(workload, "distlock-watchdog", 1, probes.len());
    // Hold-phase costs per renewal period instead of per acquisition.
    let whole_periods = periods.round().max(1.0);
    row.cost = counters.per_op(whole_periods as u64);
    // getrusage's microseconds rather than /proc/self/stat's 10 ms ticks.
    row.cost.client_cpu_us = cpu.map(|cpu| cpu.as_secs_f64() * 1e6 / whole_periods);
    row.per = "period";
    row.extra = vec![
        ("locks", config.locks as f64),
        ("nodes", nodes),
        ("hash_tags", config.hash_tags as f64),
        ("lease_ms", config.lease.as_secs_f64() * 1e3),
        ("periods", periods),
        (
            "renew_calls_per_period_per_node",
            renew_calls / periods / nodes,
        ),
        (
            "renew_calls_per_100_locks_per_period",
            renew_calls / periods * 100.0 / config.locks.max(1) as f64,
        ),
        ("renew_calls_per_period_max_node", busiest / periods),
        ("requests_per_period_per_node", requests / periods / nodes),
        ("reads_per_period_per_node", reads / periods / nodes),
        ("cpu_pct", cpu_pct),
        ("rss_per_lock_b", growth(rss_after)),
        ("rss_acquired_per_lock_b", growth(rss_acquired)),
        ("lost", lost as f64),
        ("release_all_s", released_in.as_secs_f64()),
        ("keys_left", keys_left as f64),
    ];
    Ok(vec![row])
}

/// This process's resident set in bytes (`/proc/self/statm`, Linux only).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split(' ').nth(1)?.parse().ok()?;
    Some(pages * page_size()?)
}

#[allow(unsafe_code)]
fn page_size() -> Option<u64> {
    // SAFETY: `sysconf` only reads a configuration value.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&size| size > 0)
}

/// User + system CPU time of this process (every thread), from `getrusage(RUSAGE_SELF)`.
#[allow(unsafe_code)]
fn cpu_time() -> Option<Duration> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; `getrusage` fills it in and touches nothing
    // else.
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if status != 0 {
        return None;
    }
    // SAFETY: `getrusage` succeeded, so it initialised `usage` (it was zeroed before anyway).
    let usage = unsafe { usage.assume_init() };
    let time = |tv: libc::timeval| {
        Duration::from_secs(u64::try_from(tv.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(tv.tv_usec).unwrap_or(0))
    };
    Some(time(usage.ru_utime) + time(usage.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_share_hash_tags_only_when_asked() {
        let config = |hash_tags| Config {
            locks: 10,
            lease: Duration::from_secs(3),
            periods: 1,
            hash_tags,
        };
        assert_eq!(config(0).name("p", 7), "p:7");
        assert_eq!(config(3).name("p", 7), "p:{t1}:7");
        assert_eq!(
            lock_redis::keys::slot(&config(3).name("p", 4)),
            lock_redis::keys::slot(&config(3).name("p", 1))
        );
    }

    #[test]
    fn reads_own_rss_and_cpu() {
        if cfg!(target_os = "linux") {
            assert!(rss_bytes().is_some_and(|rss| rss > 0));
            assert!(cpu_time().is_some());
        }
    }
}

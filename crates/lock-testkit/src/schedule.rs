//! A fault schedule runner: N workers take a lock M times in total and do a fenced
//! read-modify-write on a [`FencedResource`] inside it, while faults are injected at random
//! times; the [`History`] checker then counts overlaps, lost updates and fence rejections.
//!
//! The runner is generic over the backend, so the same schedule runs against a single node,
//! MultiLock, RedLock or a backend of your own; the faults are a closure you give it (pause a
//! server, add latency on a [`crate::FaultProxy`], ...).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::{Error, Fenced, LockBackend, LockOptions, Locker, Wait};
use tokio::time::Instant;

pub use crate::fault_loop::FaultFuture;
use crate::fault_loop::FaultLoop;
use crate::history::{CheckOptions, History, Report};
use crate::resource::FencedResource;

/// What a schedule does.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Concurrent workers; worker `i` uses locker `i % lockers.len()`.
    pub workers: usize,
    /// Acquisitions to attempt in total (split evenly between the workers).
    pub acquisitions: usize,
    /// The lock every worker takes.
    pub lock_name: String,
    /// The resource key the workers increment.
    pub resource_key: String,
    /// The lock options (fenced, so the resource can refuse stale writes; they should set a
    /// wait deadline: the wait budget).
    pub options: LockOptions<Fenced>,
    /// Pause between the read and the write inside the critical section.
    pub hold_pause: Duration,
    /// Faults are injected one after another, separated by a random gap in this range.
    pub fault_gap: (Duration, Duration),
}

impl Schedule {
    /// A schedule with the given shape; lock and resource names default to `schedule`.
    #[must_use]
    pub fn new(workers: usize, acquisitions: usize, options: LockOptions<Fenced>) -> Self {
        Schedule {
            workers,
            acquisitions,
            lock_name: "schedule:lock".to_owned(),
            resource_key: "schedule".to_owned(),
            options,
            hold_pause: Duration::from_millis(1),
            fault_gap: (Duration::from_millis(50), Duration::from_millis(150)),
        }
    }
}

/// The outcome of a schedule run.
#[derive(Debug)]
pub struct ScheduleReport {
    /// The history check: overlaps, lost updates, fence rejections, waits.
    pub check: Report,
    /// Acquisitions attempted.
    pub attempts: u64,
    /// Attempts that ended without the lock within the wait (`Error::NotAcquired`).
    pub not_acquired: u64,
    /// Attempts that ended with an error.
    pub acquire_errors: u64,
    /// Releases that failed with an error (the lease then expires).
    pub release_errors: u64,
    /// Resource operations that failed (the resource server is not faulted, so this should be 0).
    pub resource_errors: u64,
    /// The faults injected, in order.
    pub faults: Vec<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl ScheduleReport {
    /// The share of attempts that got the lock within the wait.
    #[must_use]
    pub fn acquired_ratio(&self) -> f64 {
        if self.attempts == 0 {
            return 0.0;
        }
        self.check.acquisitions as f64 / self.attempts as f64
    }
}

impl std::fmt::Display for ScheduleReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p99 = self
            .check
            .wait
            .as_ref()
            .map_or_else(|| "-".to_owned(), |wait| format!("{:?}", wait.p99));
        write!(
            f,
            "{} attempts, {} acquisitions ({:.1} %), {} faults, {} overlaps, {} lost updates, \
             {} fence rejections, p99 wait {p99}; {} not acquired, {} acquire errors, {} \
             release errors, {} resource errors, in {:.1?}",
            self.attempts,
            self.check.acquisitions,
            self.acquired_ratio() * 100.0,
            self.faults.len(),
            self.check.overlaps,
            self.check.lost_updates,
            self.check.fence_rejections,
            self.not_acquired,
            self.acquire_errors,
            self.release_errors,
            self.resource_errors,
            self.elapsed,
        )
    }
}

#[derive(Default)]
struct Counters {
    attempts: AtomicU64,
    not_acquired: AtomicU64,
    acquire_errors: AtomicU64,
    release_errors: AtomicU64,
    resource_errors: AtomicU64,
}

/// Runs `schedule` with `lockers` (one per simulated process; workers share them round-robin)
/// against `resource`, calling `fault(n)` for the n-th fault at random gaps until the workers
/// are done. A fault in progress when the workers finish is run to its end (so it heals).
///
/// # Panics
///
/// When `lockers` is empty or a worker task panics.
pub async fn run_schedule<B, F>(
    schedule: &Schedule,
    lockers: Vec<Locker<B>>,
    resource: FencedResource,
    fault: F,
) -> ScheduleReport
where
    B: LockBackend,
    F: FnMut(usize) -> FaultFuture + Send + 'static,
{
    assert!(!lockers.is_empty(), "a schedule needs at least one locker");
    resource
        .reset(&schedule.resource_key)
        .await
        .expect("reset the resource");
    let history = History::new();
    let counters = Arc::new(Counters::default());
    let started = Instant::now();

    let faults = FaultLoop::start(fault, schedule.fault_gap);

    let per_worker = schedule.acquisitions.div_ceil(schedule.workers.max(1));
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..schedule.workers {
        let locker = lockers[worker % lockers.len()].clone();
        let (history, counters, resource) = (history.clone(), counters.clone(), resource.clone());
        let schedule = schedule.clone();
        workers.spawn(async move {
            for _ in 0..per_worker {
                one_acquisition(worker, &locker, &schedule, &resource, &history, &counters).await;
            }
        });
    }
    while let Some(joined) = workers.join_next().await {
        joined.expect("a schedule worker panicked");
    }
    let faults = faults.stop().await;
    let elapsed = started.elapsed();

    let final_value = resource
        .read(&schedule.resource_key)
        .await
        .expect("read the resource")
        .value;
    let mut options = CheckOptions::new();
    if let Wait::Upto(budget) = schedule.options.wait_policy() {
        options = options.wait_budget(budget);
    }
    ScheduleReport {
        check: history.check_with(final_value, 0, &options),
        attempts: counters.attempts.load(Ordering::Relaxed),
        not_acquired: counters.not_acquired.load(Ordering::Relaxed),
        acquire_errors: counters.acquire_errors.load(Ordering::Relaxed),
        release_errors: counters.release_errors.load(Ordering::Relaxed),
        resource_errors: counters.resource_errors.load(Ordering::Relaxed),
        faults,
        elapsed,
    }
}

async fn one_acquisition<B: LockBackend>(
    worker: usize,
    locker: &Locker<B>,
    schedule: &Schedule,
    resource: &FencedResource,
    history: &History,
    counters: &Counters,
) {
    counters.attempts.fetch_add(1, Ordering::Relaxed);
    let asked_at = Instant::now();
    let guard = match locker
        .lock_with(&schedule.lock_name, &schedule.options)
        .await
    {
        Ok(guard) => guard,
        Err(Error::NotAcquired { .. }) => {
            counters.not_acquired.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(error) => {
            tracing::debug!(%error, worker, "schedule: acquire failed");
            counters.acquire_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let mut hold = history.begin(worker, guard.owner_field(), guard.fencing_token());
    hold.set_waited(asked_at.elapsed());
    let increment = resource
        .increment(
            &schedule.resource_key,
            guard.fencing_token(),
            guard.owner_field(),
            schedule.hold_pause,
        )
        .await;
    hold.set_lost_signal(guard.is_lost());
    match increment {
        Ok(increment) => {
            hold.write_sent_at(increment.write_sent_at);
            hold.end(Some(increment.outcome.into()));
        }
        Err(error) => {
            tracing::warn!(%error, worker, "schedule: resource operation failed");
            counters.resource_errors.fetch_add(1, Ordering::Relaxed);
            hold.end(None);
        }
    }
    if let Err(error) = guard.release().await {
        tracing::debug!(%error, worker, "schedule: release failed");
        counters.release_errors.fetch_add(1, Ordering::Relaxed);
    }
}

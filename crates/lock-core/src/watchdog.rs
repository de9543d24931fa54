//! The watchdog: keeps watchdog-mode leases alive while their guards live.
//!
//! One task per [`crate::Locker`] renews every registered lease about every lease/3. Leases that
//! fall due close together are renewed in **one** backend call (on Redis: one script for many
//! keys), so 10,000 held locks cost a handful of commands per period, not 10,000. A renewal that
//! fails or times out is retried until the lease's local validity deadline; past it, or when the
//! store says the lock is no longer ours, the lease is reported lost to the guard and the entry is
//! dropped. The task exits when nothing is registered and is started again on demand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use tracing::Instrument;

use crate::contract::{LockBackend, RenewOutcome, Renewal};
use crate::hold::{Hold, LeaseLoss};
use crate::telemetry;

/// The renewal schedule of one registered hold.
struct Entry {
    /// Bumped by `extended`, so a renewal sent before an `extend` cannot overwrite its result.
    generation: u64,
    /// The hold's record: name, owner field, lease (read at each renewal, so an `extend` is
    /// followed) and the status reported to the guard.
    hold: Arc<Hold>,
    due: Instant,
    /// The last renewal failed or was undecided and `due` is its retry: no batching slack
    /// applies, so the retry delay is honoured (with the slack, which is longer than the delay,
    /// a fast-failing store would be called again at once, in a tight loop).
    retrying: bool,
    /// The watchdog's copy of the validity deadline in the hold's status, read at every look
    /// at the registry without taking the status channel's lock.
    valid_until: Instant,
    stop_at: Option<Instant>,
}

#[derive(Default)]
struct Registry {
    /// Keyed by ids this registry hands out in sequence (nothing a caller chooses), so the fast
    /// hasher is enough: SipHash cost two hashes per `lock()` for nothing.
    entries: HashMap<u64, Entry, foldhash::fast::RandomState>,
    next_id: u64,
    running: bool,
    /// Which renewal task is the current one (bumped at each start).
    epoch: u64,
    /// When the task will look at the registry next on its own. A new entry wakes the task only
    /// when it falls due before that, so the hot path of `lock()` does not wake another thread.
    next_wake: Option<Instant>,
    /// The renewal period of the latest registration: how often an idle task looks again, so
    /// that new entries with the same lease fall due after that look and need no wake-up (a
    /// stream of short holds would otherwise wake the task once per `lock()`).
    last_period: Duration,
    /// Since when the registry has been empty, while the task lingers.
    idle_since: Option<Instant>,
    /// The locker is gone: nothing registers any more, so an empty registry ends the task at
    /// once instead of lingering (the task holds the backend, and with it its connections).
    closed: bool,
}

/// An idle renewal task lingers this long for new registrations before it exits, so a stream of
/// short watchdog holds does not spawn a task per hold.
const IDLE_LINGER: Duration = Duration::from_secs(30);

struct Shared<B> {
    backend: Arc<B>,
    registry: Mutex<Registry>,
    wake: Notify,
    /// How often the task has looked at the registry (tests check it is not once per hold).
    #[cfg(test)]
    plans: std::sync::atomic::AtomicUsize,
}

/// The renewal machinery of one locker.
pub(crate) struct Watchdog<B> {
    shared: Arc<Shared<B>>,
}

fn renew_period(lease: Duration) -> Duration {
    lease / 3
}

/// Renewals due this close to now are sent in the same batch as the ones due now. Renewing
/// early is harmless (a renewal only lengthens the lease), and a wide window lines up locks
/// taken at different moments after one period, so thousands of held locks renew in a few
/// full scripts rather than many small ones: each lease is renewed between half a period and
/// one period after the last renewal, so at least two thirds of it is always left.
fn batching_slack(lease: Duration) -> Duration {
    renew_period(lease) / 2
}

fn retry_delay(lease: Duration) -> Duration {
    (renew_period(lease) / 4).clamp(Duration::from_millis(2), Duration::from_secs(1))
}

impl<B: LockBackend> Watchdog<B> {
    pub fn new(backend: Arc<B>) -> Self {
        Watchdog {
            shared: Arc::new(Shared {
                backend,
                registry: Mutex::new(Registry::default()),
                wake: Notify::new(),
                #[cfg(test)]
                plans: std::sync::atomic::AtomicUsize::new(0),
            }),
        }
    }

    /// Starts renewing the lease of `hold`, acquired at `acquired_at` and valid until
    /// `valid_until`, until `stop_at` if given (the hold-time cap); returns the id to unregister
    /// it with.
    pub fn register(
        &self,
        hold: Arc<Hold>,
        valid_until: Instant,
        stop_at: Option<Instant>,
        acquired_at: Instant,
    ) -> u64 {
        let period = renew_period(hold.lease());
        let due = acquired_at + period;
        let mut registry = self.lock_registry();
        let id = registry.next_id;
        registry.next_id += 1;
        registry.entries.insert(
            id,
            Entry {
                generation: 0,
                hold,
                due,
                retrying: false,
                valid_until,
                stop_at,
            },
        );
        registry.last_period = period;
        if !registry.running {
            registry.running = true;
            registry.epoch += 1;
            registry.next_wake = Some(Instant::now());
            // The flag is made here and moved into the task, so it is dropped (and `running`
            // cleared) even when the task is dropped before its first poll (its runtime shut
            // down right away).
            let running = RunningFlag {
                shared: self.shared.clone(),
                epoch: registry.epoch,
            };
            tokio::spawn(run(running));
        } else if registry.next_wake.is_none_or(|at| due < at) {
            registry.next_wake = Some(due);
            self.shared.wake.notify_one();
        }
        id
    }

    /// Stops renewing a lease. After this returns, no new renewal of it is sent.
    pub fn unregister(&self, id: u64) {
        self.lock_registry().entries.remove(&id);
    }

    /// Reschedules a registered entry after an `extend` renewed it at `renewed_at` with the
    /// lease now in its hold record.
    pub fn extended(&self, id: u64, valid_until: Instant, renewed_at: Instant) {
        if let Some(entry) = self.lock_registry().entries.get_mut(&id) {
            entry.generation += 1;
            entry.valid_until = valid_until;
            entry.due = renewed_at + renew_period(entry.hold.lease());
            entry.retrying = false;
        }
    }

    #[cfg(test)]
    pub fn registered(&self) -> usize {
        self.lock_registry().entries.len()
    }

    /// How many times the renewal task has looked at the registry.
    #[cfg(test)]
    pub fn plans(&self) -> usize {
        self.shared.plans.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn lock_registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.shared
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl<B> Drop for Watchdog<B> {
    /// Tells a lingering renewal task to end now (without waiting for it: Drop never blocks).
    fn drop(&mut self) {
        self.shared
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed = true;
        self.shared.wake.notify_one();
    }
}

/// One renewal of a batch, as planned.
struct Due {
    id: u64,
    /// When it fell due (renewals within the batching slack go early: not yet due).
    due: Instant,
    generation: u64,
    hold: Arc<Hold>,
    /// The lease this renewal sets: the hold's, or less near the hold-time cap.
    lease: Duration,
    valid_until: Instant,
}

enum Next {
    Renew(Vec<Due>),
    SleepUntil(Instant),
    /// Nothing registered for `IDLE_LINGER`: the task has marked itself stopped and ends.
    Exit,
}

/// Clears `running` when the renewal task ends for any reason, including its runtime shutting
/// down and dropping it, so the next registration starts a new task.
struct RunningFlag<B> {
    shared: Arc<Shared<B>>,
    epoch: u64,
}

impl<B> Drop for RunningFlag<B> {
    fn drop(&mut self) {
        let mut registry = self
            .shared
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // A newer task may already have been started after this one decided to stop.
        if registry.epoch == self.epoch {
            registry.running = false;
        }
    }
}

async fn run<B: LockBackend>(running: RunningFlag<B>) {
    let shared = &running.shared;
    let epoch = running.epoch;
    loop {
        match plan(shared, epoch) {
            Next::Exit => return,
            Next::SleepUntil(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = shared.wake.notified() => {}
                }
            }
            Next::Renew(batch) => renew_batch(shared, batch).await,
        }
    }
}

/// Looks at the registry once: drops dead entries, and either returns the batch to renew now or
/// the instant of the next due renewal.
fn plan<B>(shared: &Shared<B>, epoch: u64) -> Next {
    #[cfg(test)]
    shared
        .plans
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut registry = shared.registry.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    if registry.entries.is_empty() {
        // Linger, looking again every renewal period, so a stream of short holds neither
        // spawns a task per hold nor wakes this one per hold.
        let idle_since = *registry.idle_since.get_or_insert(now);
        if registry.closed || now.saturating_duration_since(idle_since) >= IDLE_LINGER {
            if registry.epoch == epoch {
                registry.running = false;
            }
            registry.idle_since = None;
            return Next::Exit;
        }
        let at = now + registry.last_period.min(IDLE_LINGER);
        registry.next_wake = Some(at);
        return Next::SleepUntil(at);
    }
    registry.idle_since = None;
    // Dead entries go first; a batch is sent only once a renewal is due now (not merely within
    // the slack): starting a batch as soon as anything came within the slack would, with the
    // task replanning right after each batch, keep sending the few renewals that entered the
    // window meanwhile, and locks taken over a stretch of time would renew in a stream of tiny
    // batches forever. Waiting for the first due one lets the window gather half a period.
    registry.entries.retain(|_, entry| {
        if now >= entry.valid_until {
            entry.hold.mark_lost(LeaseLoss::Expired);
            return false;
        }
        !entry.stop_at.is_some_and(|stop_at| {
            stop_at.saturating_duration_since(now) < crate::options::MIN_LEASE
        })
    });
    let first_due = registry.entries.values().map(|entry| entry.due).min();
    let mut batch = Vec::new();
    let mut next_due: Option<Instant> = None;
    if first_due.is_some_and(|due| due <= now) {
        for (&id, entry) in registry.entries.iter_mut() {
            let hold_lease = entry.hold.lease();
            // The hold-time cap: the last renewal only reaches up to the cap, then we let go.
            let lease = entry.stop_at.map_or(hold_lease, |stop_at| {
                hold_lease.min(stop_at.saturating_duration_since(now))
            });
            let slack = if entry.retrying {
                Duration::ZERO
            } else {
                batching_slack(hold_lease)
            };
            if entry.due <= now + slack {
                batch.push(Due {
                    id,
                    due: entry.due,
                    generation: entry.generation,
                    hold: entry.hold.clone(),
                    lease,
                    valid_until: entry.valid_until,
                });
                // Not due again until the batch reports back.
                entry.due = entry.valid_until;
            } else {
                next_due = Some(next_due.map_or(entry.due, |at| at.min(entry.due)));
            }
        }
    } else {
        next_due = first_due;
    }
    if !batch.is_empty() {
        // The task replans right after the batch, and sees new entries then.
        registry.next_wake = Some(now);
        return Next::Renew(batch);
    }
    // Every entry left is waiting for its batch to report back: look again in a period.
    let at = next_due.unwrap_or(now + registry.last_period.min(IDLE_LINGER));
    registry.next_wake = Some(at);
    Next::SleepUntil(at)
}

async fn renew_batch<B: LockBackend>(shared: &Shared<B>, batch: Vec<Due>) {
    let renewals: Vec<Renewal<'_>> = batch
        .iter()
        .map(|due| due.hold.renewal(due.lease))
        .collect();
    // Waiting past the earliest validity deadline is pointless: that lease is lost by then.
    let give_up_at = batch
        .iter()
        .map(|due| due.valid_until)
        .min()
        .expect("batch is not empty");
    let sent_at = Instant::now();
    let span = tracing::debug_span!(
        "distlock.renew",
        kind = shared.backend.kind(),
        batch = batch.len()
    );
    let result = tokio::time::timeout_at(give_up_at, shared.backend.renew(&renewals))
        .instrument(span)
        .await;
    let now = Instant::now();
    let lag = batch
        .iter()
        .map(|due| due.due)
        .min()
        .map(|first_due| sent_at.saturating_duration_since(first_due));

    let mut registry = shared.registry.lock().unwrap_or_else(|e| e.into_inner());
    let retry_at = |registry: &mut Registry, id: u64| {
        if let Some(entry) = registry.entries.get_mut(&id) {
            entry.due = now + retry_delay(entry.hold.lease());
            entry.retrying = true;
        }
    };
    match result {
        Ok(Ok(outcomes)) if outcomes.len() == batch.len() => {
            let count =
                |wanted: fn(&RenewOutcome) -> bool| outcomes.iter().filter(|o| wanted(o)).count();
            telemetry::renewals(
                "renewed",
                count(|o| matches!(o, RenewOutcome::Renewed)),
                lag,
            );
            telemetry::renewals(
                "not_held",
                count(|o| matches!(o, RenewOutcome::NotHeld)),
                None,
            );
            telemetry::renewals(
                "undecided",
                count(|o| !matches!(o, RenewOutcome::Renewed | RenewOutcome::NotHeld)),
                None,
            );
            for (due, outcome) in batch.iter().zip(outcomes) {
                let Some(entry) = registry.entries.get_mut(&due.id) else {
                    continue; // released while the renewal was in flight
                };
                if entry.generation != due.generation {
                    continue; // extended meanwhile: that newer answer stands
                }
                match outcome {
                    RenewOutcome::Renewed => {
                        let drift = shared.backend.clock_drift(due.lease);
                        entry.valid_until = sent_at + due.lease.saturating_sub(drift);
                        entry.due = sent_at + renew_period(entry.hold.lease());
                        entry.retrying = false;
                        let valid_until = entry.valid_until;
                        // No wake-up: `lost()` re-reads the deadline when its timer fires.
                        entry.hold.set_valid_until(valid_until, false);
                    }
                    RenewOutcome::NotHeld => {
                        entry.hold.mark_lost(LeaseLoss::NotOurs);
                        registry.entries.remove(&due.id);
                    }
                    // Undecided (too few nodes answered): retry like a failed call.
                    _ => retry_at(&mut registry, due.id),
                }
            }
        }
        other => {
            telemetry::renewals("failed", batch.len(), lag);
            match other {
                Ok(Ok(answers)) => tracing::warn!(
                    expected = batch.len(),
                    got = answers.len(),
                    "renewal returned the wrong number of answers; retrying"
                ),
                Ok(Err(error)) => tracing::warn!(%error, "lease renewal failed; retrying"),
                Err(_) => tracing::warn!("lease renewal timed out; retrying"),
            }
            for due in &batch {
                retry_at(&mut registry, due.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods() {
        let lease = Duration::from_secs(30);
        assert_eq!(renew_period(lease), Duration::from_secs(10));
        assert_eq!(batching_slack(lease), Duration::from_millis(5000));
        assert_eq!(retry_delay(lease), Duration::from_secs(1));
        assert_eq!(
            retry_delay(Duration::from_millis(10)),
            Duration::from_millis(2)
        );
    }

    /// The renewal task lingers for new holds of a live locker; once the locker is gone it
    /// ends at once and lets go of the backend (and so of the backend's connections).
    #[tokio::test(flavor = "current_thread")]
    async fn a_dropped_locker_lets_go_of_its_backend_at_once() {
        let backend = Arc::new(crate::MemoryBackend::new());
        let locker = crate::Locker::from_arc(Arc::clone(&backend));
        let guard = locker.lock("linger").await.unwrap();
        assert!(guard.release().await.unwrap().was_held());
        drop(locker);
        for _ in 0..200 {
            if Arc::strong_count(&backend) == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!(
            "the backend is still held 1 s after its locker was dropped ({} references)",
            Arc::strong_count(&backend)
        );
    }
}

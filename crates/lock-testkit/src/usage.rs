//! The usage battery: a seeded, randomized workload that drives the public lock API the way
//! applications do, and checks what it got against a model.
//!
//! Tasks (several per client, each its own owner) take one lock again and again until the
//! acquisitions are done, each time in one of these ways, drawn from the seed:
//!
//! | action | what the application does |
//! |---|---|
//! | `scope` | `let _guard = lock().await?; work` — the guard drops at the end of the block |
//! | `release` | `guard.release().await` after the work |
//! | `reenter` | locks again while holding it (a re-entry), gives the inner hold back (dropped or released), then the outer |
//! | `with_lock` | [`Locker::with_lock`] around the work |
//! | `cancel_lock` | `timeout(d, lock())`: the lock call itself may be cancelled |
//! | `cancel_section` | `timeout(d, async { lock, work })`: the critical section may be cancelled, its guard dropped mid-work |
//! | `try_lock` | one attempt ([`LockOptions::no_wait`]), work if it got the lock |
//! | `relock` | lock, work, let the guard drop, lock again at once |
//!
//! The work is an increment of a shared counter, read and written in two steps with a pause
//! between, so two holders at once lose an update. Every hold is recorded (owner, from the
//! lock's return until its release is sent or its guard drops) for the history checker.
//!
//! The checks ([`UsageReport::problems`]):
//! - **exclusion**: the history checker finds no overlap of different owners and no lost update;
//! - **the model of hold counts**: a lock taken by a task that holds nothing has count 1 (also
//!   right after it dropped a guard), a re-entry one more than the hold it nests in, and a
//!   release of a single hold answers `Released` — unless the guard reported its lease lost;
//! - **liveness**: no wait ends without the lock, and while anyone waits the lock is never free
//!   (between one hold's end and the next grant) for longer than [`UsagePlan::free_bound`].
//!
//! The workload is drawn from [`UsagePlan::seed`] (set `DISTLOCK_USAGE_SEED` to replay one; the
//! seed is in every report); the timing of faults and of the store is not.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::{
    Error, LockBackend, LockGuard, LockOptions, Locker, ReadWriteBackend, ReadWriteLock,
    ReleaseOutcome,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::fault_loop::FaultLoop;
use crate::history::{CheckOptions, History, Hold, Report, WriteStatus, check};
use crate::sharing::{Claim, SharedHold, SharingReport, check_sharing};

/// How one usage battery runs.
#[derive(Clone, Debug)]
pub struct UsagePlan {
    /// Draws every task's actions.
    pub seed: u64,
    /// Holds to record in all (re-entries count).
    pub acquisitions: usize,
    /// Tasks (owners) per client.
    pub tasks_per_client: usize,
    /// The watchdog lease of every lock.
    pub lease: Duration,
    /// How long a waiting lock call waits at most.
    pub wait: Duration,
    /// The work under the lock, drawn from this range.
    pub hold: (Duration, Duration),
    /// The longest the lock may stay free while someone waits (see the module).
    pub free_bound: Duration,
    /// With a fault loop, the run goes on past `acquisitions` until this many faults started.
    pub min_faults: usize,
    /// [`run_usage_rw`]: how long a writer pauses between two of its actions, drawn from this
    /// range, so that readers find moments without a writer waiting (a writer-preferring lock
    /// holds new readers back while one does).
    pub writer_pause: (Duration, Duration),
}

impl UsagePlan {
    /// `acquisitions` holds by 4 tasks per client, 1.2 s leases, waits up to 10 s, 1–4 ms of
    /// work, and a 2 s bound on the lock staying free while someone waits (a fault can stop
    /// every client for a while: a paused or restarting server, a retry backing off to 1 s).
    /// The seed is `DISTLOCK_USAGE_SEED` when set, else random.
    #[must_use]
    pub fn new(acquisitions: usize) -> Self {
        let seed = std::env::var("DISTLOCK_USAGE_SEED")
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| rand::rng().random());
        UsagePlan {
            seed,
            acquisitions,
            tasks_per_client: 4,
            lease: Duration::from_millis(1200),
            wait: Duration::from_secs(10),
            hold: (Duration::from_millis(1), Duration::from_millis(4)),
            free_bound: Duration::from_secs(2),
            min_faults: 20,
            writer_pause: (Duration::from_millis(10), Duration::from_millis(40)),
        }
    }

    /// The same plan with another seed.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    fn options(&self) -> LockOptions {
        LockOptions::new()
            .watchdog_lease(self.lease)
            .wait(self.wait)
    }
}

/// The actions of the battery (see the module).
const ACTIONS: [&str; 8] = [
    "scope",
    "release",
    "reenter",
    "with_lock",
    "cancel_lock",
    "cancel_section",
    "try_lock",
    "relock",
];

/// What one usage battery saw.
#[derive(Clone, Debug)]
pub struct UsageReport {
    /// The plan's seed.
    pub seed: u64,
    /// The history checker's verdict (over the exclusive holds).
    pub history: Report,
    /// With readers ([`run_usage_rw`]): the sharing checker's verdict over every outer hold
    /// (readers together, writers alone).
    pub sharing: Option<SharingReport>,
    /// Hold counts and release answers that differ from the model, with what was expected.
    pub mismatches: Vec<String>,
    /// Waits that ended without the lock (of a lock, or of a writer).
    pub not_acquired: usize,
    /// Readers' waits that ended without the lock: not a failure, since readers wait as long
    /// as writers keep waiting on a writer-preferring lock, and in this battery writers lock
    /// again at once.
    pub readers_not_acquired: usize,
    /// Calls that failed with another error (a fault the retries did not ride through).
    pub errors: usize,
    /// The first errors, each with the action and its time in the run, and the first waits of
    /// a lock or a writer that ended without it, each with how long it waited.
    pub error_samples: Vec<String>,
    /// The longest time the lock was free while someone waited for it.
    pub longest_free_while_waited: Duration,
    /// When that stretch began, from the start of the run (to lay it against the faults).
    pub longest_free_from: Duration,
    /// The plan's bound on it.
    pub free_bound: Duration,
    /// How often each action ran.
    pub actions: BTreeMap<&'static str, usize>,
}

impl UsageReport {
    /// Every check that failed, as text (empty when the run is clean).
    #[must_use]
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.history.is_clean() {
            problems.push(format!("exclusion: {}", self.history));
        }
        if let Some(sharing) = self.sharing.as_ref().filter(|sharing| !sharing.is_clean()) {
            problems.push(format!("sharing: {sharing}"));
        }
        problems.extend(self.mismatches.iter().take(10).cloned());
        if self.mismatches.len() > 10 {
            problems.push(format!(
                "... {} model mismatches in all",
                self.mismatches.len()
            ));
        }
        if self.not_acquired > 0 {
            problems.push(format!(
                "{} waits ended without the lock; the first errors and waits: {:?}",
                self.not_acquired, self.error_samples
            ));
        }
        if self.longest_free_while_waited > self.free_bound {
            problems.push(format!(
                "the lock stayed free for {:?} from {:?} into the run while someone waited \
                 (bound {:?}); the first errors: {:?}",
                self.longest_free_while_waited,
                self.longest_free_from,
                self.free_bound,
                self.error_samples
            ));
        }
        problems
    }
}

impl std::fmt::Display for UsageReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {}: {} exclusive holds, {} overlaps, {} lost updates, {} model mismatches, \
             {} waits without the lock (and {} of readers), {} errors, free while waited at \
             most {:?}; actions {:?}",
            self.seed,
            self.history.acquisitions,
            self.history.overlaps,
            self.history.lost_updates,
            self.mismatches.len(),
            self.not_acquired,
            self.readers_not_acquired,
            self.errors,
            self.longest_free_while_waited,
            self.actions,
        )?;
        if let Some(sharing) = &self.sharing {
            write!(f, "; sharing: {sharing}")?;
        }
        Ok(())
    }
}

/// A counter read and written in two steps, with a pause between: two holders at once lose an
/// update. A write is counted in the same step as it is made, so a cancelled section either
/// wrote and counted, or did neither.
#[derive(Default)]
struct Counter {
    value: Mutex<i64>,
}

impl Counter {
    async fn increment(&self) -> Instant {
        let read = *self.value.lock().unwrap_or_else(PoisonError::into_inner);
        tokio::time::sleep(Duration::from_micros(200)).await;
        *self.value.lock().unwrap_or_else(PoisonError::into_inner) = read + 1;
        Instant::now()
    }

    fn get(&self) -> i64 {
        *self.value.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the tasks share.
struct Shared {
    plan: UsagePlan,
    name: String,
    history: History,
    /// Every outer hold with its claim, for the sharing checker.
    shared_holds: Mutex<Vec<SharedHold>>,
    counter: Counter,
    /// Holds recorded so far, toward `plan.acquisitions`.
    recorded: AtomicUsize,
    mismatches: Mutex<Vec<String>>,
    not_acquired: AtomicUsize,
    readers_not_acquired: AtomicUsize,
    errors: AtomicUsize,
    /// The first errors, with when and where they came (for a report that fails).
    error_samples: Mutex<Vec<String>>,
    started: Instant,
    /// Every wait: when it began and ended.
    waits: Mutex<Vec<(Instant, Instant)>>,
    actions: Mutex<BTreeMap<&'static str, usize>>,
}

impl Shared {
    fn new(plan: &UsagePlan, name: &str) -> Arc<Self> {
        Arc::new(Shared {
            plan: plan.clone(),
            name: name.to_owned(),
            history: History::new(),
            shared_holds: Mutex::new(Vec::new()),
            counter: Counter::default(),
            recorded: AtomicUsize::new(0),
            mismatches: Mutex::new(Vec::new()),
            not_acquired: AtomicUsize::new(0),
            readers_not_acquired: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
            error_samples: Mutex::new(Vec::new()),
            started: Instant::now(),
            waits: Mutex::new(Vec::new()),
            actions: Mutex::new(BTreeMap::new()),
        })
    }

    /// Counts an error of `action` (keeping the first few, with their time in the run).
    fn error(&self, action: &str, error: &Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut samples = self
            .error_samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if samples.len() < 10 {
            samples.push(format!("{action} at {:?}: {error}", self.started.elapsed()));
        }
    }

    /// Records one hold ending now: `span` is when it began, how long its acquire waited and
    /// when it wrote (if it did). Exclusive holds go to the history checker; outer holds
    /// (a re-entry nests in its owner's outer hold, which stands for both) to the sharing
    /// checker.
    fn record<B: LockBackend>(
        &self,
        worker: usize,
        claim: Claim,
        guard: &LockGuard<B>,
        (acquired_at, waited, written_at): (Instant, Duration, Option<Instant>),
    ) {
        let released_at = Instant::now().min(guard.valid_until());
        if claim == Claim::Exclusive {
            let mut hold = Hold::new(worker, guard.owner_field(), None, acquired_at, released_at)
                .with_waited(waited)
                .with_lost_signal(guard.is_lost());
            if let Some(at) = written_at {
                hold = hold.with_write(WriteStatus::Accepted, Some(at));
            }
            self.history.record(hold);
        }
        if guard.hold_count() == 1 {
            self.shared_holds
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(SharedHold {
                    holder: worker,
                    claim,
                    from: acquired_at,
                    to: released_at,
                });
        }
        self.recorded.fetch_add(1, Ordering::Relaxed);
    }

    fn mismatch(&self, what: String) {
        self.mismatches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("seed {}: {what}", self.plan.seed));
    }

    /// Counts a wait that ended without the lock, by its claim; a writer's or a lock's, with
    /// how long it waited, among the samples (what a failure shows).
    fn not_acquired(&self, claim: Claim, asked: Instant) {
        let count = match claim {
            Claim::Exclusive => &self.not_acquired,
            Claim::Shared(_) => &self.readers_not_acquired,
        };
        count.fetch_add(1, Ordering::Relaxed);
        if claim == Claim::Exclusive {
            let mut samples = self
                .error_samples
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if samples.len() < 10 {
                samples.push(format!(
                    "not acquired after waiting {:?}, asked at {:?}",
                    asked.elapsed(),
                    asked.duration_since(self.started)
                ));
            }
        }
    }

    fn done(&self, faults_started: Option<&AtomicUsize>) -> bool {
        self.recorded.load(Ordering::Relaxed) >= self.plan.acquisitions
            && faults_started
                .is_none_or(|started| started.load(Ordering::Relaxed) >= self.plan.min_faults)
    }
}

/// A held guard whose hold is recorded when it ends: when [`Task::release`] sends the
/// release, or when it is dropped (at the end of a scope, or with a cancelled future).
struct Recorded<'a, B: LockBackend> {
    shared: &'a Shared,
    worker: usize,
    claim: Claim,
    guard: Option<LockGuard<B>>,
    acquired_at: Instant,
    waited: Duration,
    written_at: Option<Instant>,
}

impl<'a, B: LockBackend> Recorded<'a, B> {
    fn new(
        shared: &'a Shared,
        worker: usize,
        claim: Claim,
        guard: LockGuard<B>,
        waited: Duration,
    ) -> Self {
        Recorded {
            shared,
            worker,
            claim,
            guard: Some(guard),
            acquired_at: Instant::now(),
            waited,
            written_at: None,
        }
    }

    fn guard(&self) -> &LockGuard<B> {
        self.guard.as_ref().expect("held until released or dropped")
    }

    /// The work: one increment of the counter (a reader only waits).
    async fn work(&mut self, rng: &mut StdRng) {
        let (low, high) = self.shared.plan.hold;
        let pause = rng.random_range(low..=high);
        if self.claim == Claim::Exclusive {
            self.written_at = Some(self.shared.counter.increment().await);
        }
        tokio::time::sleep(pause).await;
    }

    /// Records the hold as ending now and hands the guard back, for an explicit release.
    fn end(mut self) -> LockGuard<B> {
        let guard = self.guard.take().expect("held until released or dropped");
        self.record(&guard);
        guard
    }

    fn record(&self, guard: &LockGuard<B>) {
        let span = (self.acquired_at, self.waited, self.written_at);
        self.shared.record(self.worker, self.claim, guard, span);
    }
}

impl<B: LockBackend> Drop for Recorded<'_, B> {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            self.record(&guard);
        } // the guard drops here: its release goes on in the background
    }
}

/// One task's view: its locker, its owner's holds alive, its random draws.
struct Task<'a, B: LockBackend> {
    shared: &'a Shared,
    locker: Locker<B>,
    worker: usize,
    /// Exclusive for a lock or a writer, shared for a reader.
    claim: Claim,
    rng: StdRng,
}

impl<'a, B: LockBackend> Task<'a, B> {
    /// A waiting lock call, its wait recorded; `None` when it did not get the lock.
    async fn lock(&mut self, options: &LockOptions) -> Option<(LockGuard<B>, Duration)> {
        let asked = Instant::now();
        let result = self.locker.lock_with(&self.shared.name, options).await;
        let now = Instant::now();
        self.shared
            .waits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((asked, now));
        match result {
            Ok(guard) => Some((guard, now - asked)),
            Err(Error::NotAcquired { .. }) => {
                self.shared.not_acquired(self.claim, asked);
                None
            }
            // The answer a lock that is not reentrant gives its holder, before any I/O.
            Err(Error::NotReentrant { .. }) if !self.locker.backend().reentrant() => None,
            Err(error) => {
                tracing::debug!(%error, "usage battery: a lock call failed");
                self.shared.error("lock", &error);
                None
            }
        }
    }

    /// Checks a fresh hold's count (`outer`: the hold it nests in, if any).
    fn expect_count(&self, action: &str, guard: &LockGuard<B>, outer: Option<&LockGuard<B>>) {
        let expected = outer.map_or(1, |outer| outer.hold_count() + 1);
        if outer.is_some_and(LockGuard::is_lost) {
            return;
        }
        if guard.hold_count() != expected {
            self.shared.mismatch(format!(
                "{action}: worker {} got hold count {}, expected {expected}",
                self.worker,
                guard.hold_count()
            ));
        }
    }

    /// Releases and checks the answer against `expected` (unless the lease was lost).
    async fn release(&self, action: &str, held: Recorded<'_, B>, expected: ReleaseOutcome) {
        let guard = held.end();
        let lost = guard.is_lost();
        match guard.release().await {
            Ok(outcome) if same_release(outcome, expected) || lost => {}
            Ok(outcome) => self.shared.mismatch(format!(
                "{action}: worker {}'s release answered {outcome:?}, expected {expected:?}",
                self.worker
            )),
            Err(error) => {
                tracing::debug!(%error, "usage battery: a release failed");
                self.shared.error(action, &error);
            }
        }
    }

    async fn run_one(&mut self) {
        let options = self.shared.plan.options();
        let action = ACTIONS[self.rng.random_range(0..ACTIONS.len())];
        *self
            .shared
            .actions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(action)
            .or_default() += 1;
        let shared = self.shared;
        let worker = self.worker;
        let claim = self.claim;
        match action {
            "scope" => {
                if let Some((guard, waited)) = self.lock(&options).await {
                    self.expect_count(action, &guard, None);
                    let mut held = Recorded::new(shared, worker, self.claim, guard, waited);
                    held.work(&mut self.rng).await;
                } // dropped here
            }
            "release" => {
                if let Some((guard, waited)) = self.lock(&options).await {
                    self.expect_count(action, &guard, None);
                    let mut held = Recorded::new(shared, worker, self.claim, guard, waited);
                    held.work(&mut self.rng).await;
                    self.release(action, held, ReleaseOutcome::Released).await;
                }
            }
            "reenter" => {
                let Some((outer, waited)) = self.lock(&options).await else {
                    return;
                };
                self.expect_count(action, &outer, None);
                let mut outer = Recorded::new(shared, worker, self.claim, outer, waited);
                outer.work(&mut self.rng).await;
                if let Some((inner, waited)) = self.lock(&options).await {
                    self.expect_count(action, &inner, Some(outer.guard()));
                    let mut inner = Recorded::new(shared, worker, self.claim, inner, waited);
                    inner.work(&mut self.rng).await;
                    if self.rng.random_bool(0.5) {
                        drop(inner);
                    } else {
                        let remaining = ReleaseOutcome::StillHeld { hold_count: 1 };
                        self.release(action, inner, remaining).await;
                    }
                }
                if self.rng.random_bool(0.5) {
                    drop(outer);
                } else {
                    self.release(action, outer, ReleaseOutcome::Released).await;
                }
            }
            "with_lock" => {
                let asked = Instant::now();
                let mut rng = StdRng::seed_from_u64(self.rng.random());
                let result = self
                    .locker
                    .with_lock(&shared.name, &options, async |guard| {
                        let acquired_at = Instant::now();
                        shared
                            .waits
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((asked, acquired_at));
                        if guard.hold_count() != 1 {
                            shared.mismatch(format!(
                                "with_lock: worker {worker} got hold count {}, expected 1",
                                guard.hold_count()
                            ));
                        }
                        let written_at = match claim {
                            Claim::Exclusive => Some(shared.counter.increment().await),
                            Claim::Shared(_) => None,
                        };
                        let (low, high) = shared.plan.hold;
                        tokio::time::sleep(rng.random_range(low..=high)).await;
                        let span = (acquired_at, acquired_at - asked, written_at);
                        shared.record(worker, claim, guard, span);
                    })
                    .await;
                match result {
                    Ok(()) | Err(Error::LeaseLost) => {}
                    Err(Error::NotAcquired { .. }) => {
                        shared
                            .waits
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((asked, Instant::now()));
                        shared.not_acquired(claim, asked);
                    }
                    Err(error) => shared.error(action, &error),
                }
            }
            "cancel_lock" => {
                let budget = Duration::from_micros(self.rng.random_range(0..=20_000));
                let asked = Instant::now();
                let lock = self.locker.lock_with(&shared.name, &options);
                match tokio::time::timeout(budget, lock).await {
                    Ok(Ok(guard)) => {
                        self.expect_count(action, &guard, None);
                        let mut held = Recorded::new(shared, worker, claim, guard, asked.elapsed());
                        held.work(&mut self.rng).await;
                    }
                    Ok(Err(error)) => shared.error(action, &error),
                    Err(_) => {} // cancelled: its cleanup runs in the background
                }
            }
            "cancel_section" => {
                let budget = Duration::from_micros(self.rng.random_range(0..=8_000));
                let mut rng = StdRng::seed_from_u64(self.rng.random());
                let locker = self.locker.clone();
                let section = async {
                    let asked = Instant::now();
                    let guard = locker.lock_with(&shared.name, &options).await.ok()?;
                    let counted = guard.hold_count();
                    let mut held = Recorded::new(shared, worker, claim, guard, asked.elapsed());
                    held.work(&mut rng).await;
                    Some(counted)
                };
                // Cancelled or not, the count is checked on the next lock of this task.
                if let Ok(Some(counted)) = tokio::time::timeout(budget, section).await
                    && counted != 1
                {
                    shared.mismatch(format!(
                        "cancel_section: worker {worker} got hold count {counted}, expected 1"
                    ));
                }
            }
            "try_lock" => {
                let once = options.clone().no_wait();
                match self.locker.lock_with(&shared.name, &once).await {
                    Ok(guard) => {
                        self.expect_count(action, &guard, None);
                        let mut held =
                            Recorded::new(shared, worker, self.claim, guard, Duration::ZERO);
                        held.work(&mut self.rng).await;
                    }
                    Err(Error::NotAcquired { .. }) => {}
                    Err(error) => shared.error(action, &error),
                }
            }
            "relock" => {
                for _ in 0..2 {
                    if let Some((guard, waited)) = self.lock(&options).await {
                        self.expect_count(action, &guard, None);
                        let mut held = Recorded::new(shared, worker, self.claim, guard, waited);
                        held.work(&mut self.rng).await;
                    } // dropped here, and locked again at once
                }
            }
            _ => unreachable!("one of ACTIONS"),
        }
    }
}

/// Runs the usage battery of `plan` on the lock `name`, with `plan.tasks_per_client` tasks on
/// each of `clients` (lockers of one store, each its own client), until `plan.acquisitions`
/// holds are recorded and (with `faults`, the store's fault loop, started before) at least
/// `plan.min_faults` faults have started. Stop the faults after; check the store for leftovers
/// after (the lock's name, its channel).
///
/// # Panics
///
/// When a task panics.
pub async fn run_usage<B: LockBackend>(
    plan: &UsagePlan,
    name: &str,
    clients: &[Locker<B>],
    faults: Option<&FaultLoop>,
) -> UsageReport {
    let shared = Shared::new(plan, name);
    let mut tasks = Vec::new();
    for (client, locker) in clients.iter().enumerate() {
        for task in 0..plan.tasks_per_client {
            let worker = client * plan.tasks_per_client + task;
            tasks.push(spawn_task(
                &shared,
                locker,
                worker,
                Claim::Exclusive,
                None,
                faults,
            ));
        }
    }
    finish(shared, tasks, false).await
}

/// As [`run_usage`], on read-write locks: of each client's tasks, the first writes and the
/// others read (each task always on its side, so nobody upgrades; writers pause for
/// [`UsagePlan::writer_pause`] between actions), and the report carries the sharing
/// checker's verdict (readers together, writers alone) besides the history checker's over the
/// writes.
///
/// # Panics
///
/// When a task panics.
pub async fn run_usage_rw<B: ReadWriteBackend + LockBackend>(
    plan: &UsagePlan,
    name: &str,
    clients: &[ReadWriteLock<B>],
    faults: Option<&FaultLoop>,
) -> UsageReport {
    let shared = Shared::new(plan, name);
    let mut tasks = Vec::new();
    for (client, locker) in clients.iter().enumerate() {
        for task in 0..plan.tasks_per_client {
            let worker = client * plan.tasks_per_client + task;
            let pause = Some(plan.writer_pause);
            tasks.push(if task == 0 {
                spawn_task(
                    &shared,
                    locker.writes(),
                    worker,
                    Claim::Exclusive,
                    pause,
                    faults,
                )
            } else {
                spawn_task(
                    &shared,
                    locker.reads(),
                    worker,
                    Claim::Shared(1),
                    None,
                    faults,
                )
            });
        }
    }
    finish(shared, tasks, true).await
}

/// Starts one task of the battery on `locker`, pausing for a time drawn from `pause` (if any)
/// between two actions.
fn spawn_task<B: LockBackend>(
    shared: &Arc<Shared>,
    locker: &Locker<B>,
    worker: usize,
    claim: Claim,
    pause: Option<(Duration, Duration)>,
    faults: Option<&FaultLoop>,
) -> tokio::task::JoinHandle<()> {
    let (shared, locker) = (shared.clone(), locker.clone());
    // The tasks look at how many faults started through a shared count (they outlive a borrow
    // of the loop).
    let faults_started = faults.map(FaultLoop::started_count);
    let seed = shared.plan.seed ^ (worker as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    tokio::spawn(async move {
        let mut task = Task {
            shared: &shared,
            locker,
            worker,
            claim,
            rng: StdRng::seed_from_u64(seed),
        };
        while !task.shared.done(faults_started.as_deref()) {
            task.run_one().await;
            if let Some((low, high)) = pause {
                tokio::time::sleep(task.rng.random_range(low..=high)).await;
            }
        }
    })
}

/// Waits for the tasks and checks what they recorded.
async fn finish(
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    with_sharing: bool,
) -> UsageReport {
    for task in tasks {
        task.await.expect("a usage task panicked");
    }
    // Background releases of the last dropped guards land within a moment.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let plan = &shared.plan;
    let holds = shared.history.holds();
    let history = check(
        &holds,
        shared.counter.get(),
        0,
        &CheckOptions::new().timeline_name(format!("usage-{}", plan.seed)),
    );
    let shared_holds = shared
        .shared_holds
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let waits = shared
        .waits
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let take = |m: &Mutex<Vec<String>>| m.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let longest_free = longest_free_while_waited(&shared_holds, &waits);
    UsageReport {
        seed: plan.seed,
        history,
        sharing: with_sharing.then(|| check_sharing(&shared_holds, u32::MAX)),
        mismatches: take(&shared.mismatches),
        not_acquired: shared.not_acquired.load(Ordering::Relaxed),
        readers_not_acquired: shared.readers_not_acquired.load(Ordering::Relaxed),
        errors: shared.errors.load(Ordering::Relaxed),
        error_samples: take(&shared.error_samples),
        longest_free_while_waited: longest_free.0,
        longest_free_from: longest_free.1.saturating_duration_since(shared.started),
        free_bound: plan.free_bound,
        actions: shared
            .actions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone(),
    }
}

/// Whether a release answered what the model expects. A composite's partial release (a
/// quorum gave the hold back, some nodes did not answer) stands for either expected answer: it
/// does not say which, and the `Locker` sets the failed nodes' counts after it.
fn same_release(got: ReleaseOutcome, expected: ReleaseOutcome) -> bool {
    matches!(got, ReleaseOutcome::PartlyReleased { .. }) || got == expected
}

/// The longest stretch inside any wait during which no hold was out (as far as the holders'
/// side sees it): the lock was free while someone waited. Returns its length and its start
/// (the first wait's start when nothing was ever free).
fn longest_free_while_waited(
    holds: &[SharedHold],
    waits: &[(Instant, Instant)],
) -> (Duration, Instant) {
    // The union of the hold intervals, sorted.
    let mut spans: Vec<(Instant, Instant)> = holds
        .iter()
        .map(|hold| (hold.from, hold.to.max(hold.from)))
        .collect();
    spans.sort();
    let mut busy: Vec<(Instant, Instant)> = Vec::new();
    for (from, to) in spans {
        match busy.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => busy.push((from, to)),
        }
    }
    let mut longest = (
        Duration::ZERO,
        waits.first().map_or_else(Instant::now, |wait| wait.0),
    );
    let mut note = |from: Instant, to: Instant| {
        if to - from > longest.0 {
            longest = (to - from, from);
        }
    };
    for &(asked, ended) in waits {
        // Walk the busy spans overlapping [asked, ended]; the gaps between them are free.
        let first = busy.partition_point(|span| span.1 <= asked);
        let mut free_from = asked;
        for &(from, to) in &busy[first..] {
            if from >= ended {
                break;
            }
            if from > free_from {
                note(free_from, from);
            }
            free_from = free_from.max(to);
        }
        // The end of a wait that got the lock is its grant; one that did not ended free.
        if ended > free_from {
            note(free_from, ended);
        }
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_stretches_are_measured_inside_waits_only() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let hold = |from, to| SharedHold {
            holder: 0,
            claim: Claim::Exclusive,
            from: ms(from),
            to: ms(to),
        };
        let holds = [hold(0, 10), hold(12, 20), hold(50, 60)];
        // A wait from 5 to 50: free from 20 to 50.
        assert_eq!(
            longest_free_while_waited(&holds, &[(ms(5), ms(50))]),
            (Duration::from_millis(30), ms(20))
        );
        // A wait inside a hold sees nothing free.
        assert_eq!(
            longest_free_while_waited(&holds, &[(ms(1), ms(9))]).0,
            Duration::ZERO
        );
        // A wait with no hold after it: free to its end.
        assert_eq!(
            longest_free_while_waited(&holds, &[(ms(58), ms(70))]),
            (Duration::from_millis(10), ms(60))
        );
    }
}

//! Leader election under faults: never two leaders with overlapping leadership.
//!
//! Four candidate "processes" (each its own thread, tokio runtime and `RedisBackend`) campaign
//! in loops for one election with a 600 ms watchdog lease. A leader records its term, increments
//! a [`FencedResource`] with it every few milliseconds while it leads, and resigns after a
//! while, stopping at once at `lost()`. Meanwhile the lock server's client connections are
//! killed, the server is paused (SIGSTOP/SIGCONT: shorter than the lease less one renewal
//! period, which every leadership rides through, and longer than the lease, which ends it by
//! `lost()` before anyone else can win), and the leader's process crashes: its `Leadership` forgotten and its runtime shut
//! down, which ends its watchdog and closes its connections, as a process exit would (dropping
//! the backend alone would not: the watchdog task keeps its own handle and goes on renewing a
//! forgotten guard). A new process takes the crashed one's place.
//!
//! The verdict: no two leaderships overlap in time (each interval from the campaign's return to
//! `lost()`, the resignation or the crash, its end never later than the lease's local validity);
//! terms strictly increase in grant order; every write made while leading is accepted and every
//! write with a deposed leader's term after a newer leader wrote is refused; after each crash a
//! new leader is elected within the lease plus 1.5 s; and nothing is left on the server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::{LockOptions, Locker};
use lock_redis::RedisBackend;
use lock_testkit::{FencedResource, History, RedisServer, WriteOutcome};
use rand::Rng;
use tokio::sync::Notify;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_millis(600);
/// How long after a crash a new leader must be elected: the crashed leader's lease runs out
/// unannounced, and a waiting candidate finds out by its own retry.
const FAILOVER_BUDGET: Duration = Duration::from_millis(600 + 1500);
const CANDIDATES: usize = 4;
const RUN_FOR: Duration = Duration::from_secs(15);
const ELECTION: &str = "battery-election";
const RESOURCE: &str = "battery-election";

/// One leadership as the leader saw it.
#[derive(Clone, Debug)]
struct Term {
    process: usize,
    owner: String,
    term: u64,
    granted_at: Instant,
    ended_at: Instant,
    how: &'static str,
}

/// What the candidates share with the test.
#[derive(Default)]
struct Shared {
    terms: Mutex<Vec<Term>>,
    /// The process leading now.
    leading: Mutex<Option<usize>>,
    /// Terms of leaderships that ended, to be replayed as late writes by the next leader.
    deposed: Mutex<Vec<(u64, String)>>,
    /// When each leadership was granted (for the failover times).
    grants: Mutex<Vec<Instant>>,
    current_writes: AtomicU64,
    current_rejected: AtomicU64,
    late_writes: AtomicU64,
    late_accepted: AtomicU64,
    /// Writes answered after the leadership was known lost (neither current nor checked).
    after_loss: AtomicU64,
    after_loss_accepted: AtomicU64,
    campaign_errors: AtomicU64,
    resign_errors: AtomicU64,
    /// Set around a long pause: leaders do not resign, so the pause is sure to meet one.
    keep_leading: AtomicBool,
    stop: AtomicBool,
    stopped: Notify,
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One candidate process: campaigns until told to stop or killed (`kill` notified); returns
/// whether it was killed while it led.
async fn candidate(
    process: usize,
    url: String,
    resource: String,
    shared: Arc<Shared>,
    kill: Arc<Notify>,
) -> bool {
    let backend = RedisBackend::builder(url.as_str())
        .command_timeout(Duration::from_millis(300))
        .connect()
        .await
        .expect("connect");
    let resource = FencedResource::connect(&resource)
        .await
        .expect("connect to the resource");
    let election = Locker::new(backend)
        .election(ELECTION)
        .expect("a valid name");
    let options = LockOptions::new().watchdog_lease(LEASE);
    let value = format!("process-{process}");
    loop {
        let stopped = shared.stopped.notified();
        if shared.stop.load(Ordering::Acquire) {
            return false;
        }
        let leadership = tokio::select! {
            won = election.campaign_with(&value, &options) => match won {
                Ok(leadership) => leadership,
                Err(error) => {
                    eprintln!("process {process}: campaign failed: {error}");
                    shared.campaign_errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped => return false,
            () = kill.notified() => return false,
        };
        let granted_at = Instant::now();
        let term = leadership.term();
        let owner = leadership.guard().owner_field().to_owned();
        locked(&shared.grants).push(granted_at);
        *locked(&shared.leading) = Some(process);
        // The late writes of the leaders before, made once this one has written.
        let mut deposed: Vec<(u64, String)> = std::mem::take(&mut *locked(&shared.deposed));
        let lead_for = Duration::from_millis(rand::rng().random_range(100..=500));
        let until = granted_at + lead_for;
        let (how, ended_at) = loop {
            if leadership.is_lost() {
                break ("lost", Instant::now());
            }
            let planned_end =
                Instant::now() >= until && !shared.keep_leading.load(Ordering::Acquire);
            if planned_end || shared.stop.load(Ordering::Acquire) {
                break ("resign", Instant::now());
            }
            // Not raced against `lost()`: a write dropped in flight might land or not, and the
            // count of accepted writes must be exact.
            let outcome = resource
                .increment(RESOURCE, term, &owner, Duration::ZERO)
                .await
                .expect("the resource server is not faulted")
                .outcome;
            if leadership.is_lost() {
                // Answered after the lease's validity: it may have met a newer term.
                shared.after_loss.fetch_add(1, Ordering::Relaxed);
                if outcome.is_accepted() {
                    shared.after_loss_accepted.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                shared.current_writes.fetch_add(1, Ordering::Relaxed);
                if !outcome.is_accepted() {
                    eprintln!("process {process}: term {term} refused while leading: {outcome:?}");
                    shared.current_rejected.fetch_add(1, Ordering::Relaxed);
                }
                // A newer term has written: every earlier leader's write is stale now.
                for (old, old_owner) in deposed.drain(..) {
                    let late = resource
                        .write(RESOURCE, -1, old, &old_owner)
                        .await
                        .expect("the resource server is not faulted");
                    shared.late_writes.fetch_add(1, Ordering::Relaxed);
                    if matches!(late, WriteOutcome::Accepted) {
                        eprintln!("term {old} written after term {term}: accepted");
                        shared.late_accepted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            tokio::select! {
                biased;
                _ = leadership.lost() => break ("lost", Instant::now()),
                () = kill.notified() => break ("crash", Instant::now()),
                () = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
        };
        // A leader believes it leads at most until its lease's local validity.
        let ended_at = ended_at.min(leadership.guard().valid_until());
        {
            let mut leading = locked(&shared.leading);
            if *leading == Some(process) {
                *leading = None;
            }
        }
        locked(&shared.terms).push(Term {
            process,
            owner: owner.clone(),
            term,
            granted_at,
            ended_at,
            how,
        });
        // Late writes this leader did not get to make are the next one's.
        locked(&shared.deposed).extend(deposed);
        locked(&shared.deposed).push((term, owner));
        if how == "crash" {
            // The process dies: nothing is given back; the runtime's end stops the rest.
            std::mem::forget(leadership);
            return true;
        }
        if let Err(error) = leadership.resign().await {
            eprintln!("process {process}: resign failed: {error}");
            shared.resign_errors.fetch_add(1, Ordering::Relaxed);
        }
        let breather = Duration::from_millis(rand::rng().random_range(0..=100));
        tokio::select! {
            () = tokio::time::sleep(breather) => {}
            () = kill.notified() => return false,
        }
    }
}

/// A candidate process: its thread and its kill switch.
struct Process {
    thread: std::thread::JoinHandle<bool>,
    kill: Arc<Notify>,
}

/// Starts candidate process `id` on its own thread and runtime; the runtime is shut down when
/// the candidate returns, ending every task it had (watchdog, connections).
fn spawn_process(id: usize, url: &str, resource: &str, shared: &Arc<Shared>) -> Process {
    let (url, resource, shared) = (url.to_owned(), resource.to_owned(), shared.clone());
    let kill = Arc::new(Notify::new());
    let switch = kill.clone();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let crashed = runtime.block_on(candidate(id, url, resource, shared, switch));
        runtime.shutdown_background();
        crashed
    });
    Process { thread, kill }
}

#[test]
fn never_two_leaders_under_faults() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = Arc::new(Mutex::new(RedisServer::start().expect("lock server")));
        let url = locked(&server).url();
        let resource_server = RedisServer::start().expect("resource server");
        let resource_url = resource_server.url();
        FencedResource::connect(&resource_url)
            .await
            .expect("resource")
            .reset(RESOURCE)
            .await
            .expect("reset");
        let shared = Arc::new(Shared::default());
        let mut processes: HashMap<usize, Process> = HashMap::new();
        for id in 0..CANDIDATES {
            processes.insert(id, spawn_process(id, &url, &resource_url, &shared));
        }
        let mut next_id = CANDIDATES;
        let mut faults = Vec::new();
        let mut failovers = Vec::new();
        let started = Instant::now();
        while started.elapsed() < RUN_FOR {
            let gap = Duration::from_millis(rand::rng().random_range(150..=400));
            tokio::time::sleep(gap).await;
            let pause = Duration::from_millis(rand::rng().random_range(100..=350));
            match faults.len() % 4 {
                0 => {
                    let killed = locked(&server).kill_normal_clients().expect("client kill");
                    faults.push(format!("kill {killed} clients"));
                }
                1 => {
                    locked(&server).pause().expect("pause");
                    tokio::time::sleep(pause).await;
                    locked(&server).resume().expect("resume");
                    faults.push(format!("pause {pause:?}"));
                }
                2 => {
                    // Longer than the lease: the leader's lease runs out on the server while it
                    // cannot renew, and it must find its leadership lost before another can
                    // win after the resume.
                    let long = Duration::from_millis(rand::rng().random_range(700..=900));
                    shared.keep_leading.store(true, Ordering::Release);
                    locked(&server).pause().expect("pause");
                    tokio::time::sleep(long).await;
                    locked(&server).resume().expect("resume");
                    shared.keep_leading.store(false, Ordering::Release);
                    faults.push(format!("pause {long:?} (longer than the lease)"));
                }
                _ => {
                    let Some(process) = *locked(&shared.leading) else {
                        faults.push("crash: nobody leads".to_owned());
                        continue;
                    };
                    let grants_before = locked(&shared.grants).len();
                    let crashed_at = Instant::now();
                    let Process { thread, kill } = processes.remove(&process).expect("live");
                    kill.notify_one();
                    let crashed = tokio::task::spawn_blocking(move || thread.join())
                        .await
                        .expect("join task")
                        .expect("the process panicked");
                    processes.insert(next_id, spawn_process(next_id, &url, &resource_url, &shared));
                    next_id += 1;
                    // The next leader, whoever it is: the failover time.
                    let elected = loop {
                        if let Some(at) = locked(&shared.grants).get(grants_before).copied() {
                            break at;
                        }
                        assert!(
                            crashed_at.elapsed() < FAILOVER_BUDGET * 2,
                            "no leader within {:?} of a crash",
                            FAILOVER_BUDGET * 2
                        );
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    };
                    let failover = elected.saturating_duration_since(crashed_at);
                    // A process that resigned or lost just before its kill did not crash leading.
                    if crashed {
                        failovers.push(failover);
                    }
                    faults.push(format!(
                        "crash of process {process} (leading: {crashed}), next leader after {failover:?}"
                    ));
                }
            }
        }
        shared.stop.store(true, Ordering::Release);
        shared.stopped.notify_waiters();
        for (_, process) in processes.drain() {
            let joined = tokio::task::spawn_blocking(move || process.thread.join())
                .await
                .expect("join task");
            joined.expect("a process panicked");
        }

        let mut terms = locked(&shared.terms).clone();
        terms.sort_by_key(|term| term.granted_at);
        eprintln!(
            "{} leaderships, {} faults, {} current writes ({} refused), {} late writes ({} \
             accepted), {} writes after loss, {} campaign errors, {} resign errors",
            terms.len(),
            faults.len(),
            shared.current_writes.load(Ordering::Relaxed),
            shared.current_rejected.load(Ordering::Relaxed),
            shared.late_writes.load(Ordering::Relaxed),
            shared.late_accepted.load(Ordering::Relaxed),
            shared.after_loss.load(Ordering::Relaxed),
            shared.campaign_errors.load(Ordering::Relaxed),
            shared.resign_errors.load(Ordering::Relaxed),
        );
        for fault in &faults {
            eprintln!("  fault: {fault}");
        }
        let mut ends: HashMap<&str, usize> = HashMap::new();
        for term in &terms {
            *ends.entry(term.how).or_default() += 1;
        }
        eprintln!("  leaderships ended by: {ends:?}");

        // No two leaderships overlap: the history checker, each leadership one hold.
        let history = History::new();
        for term in &terms {
            history
                .begin_at(term.process, term.owner.clone(), term.term, term.granted_at)
                .end_at(None, term.ended_at);
        }
        let report = history.check_with(
            0,
            0,
            &lock_testkit::CheckOptions::new().timeline_name("election-battery"),
        );
        assert_eq!(
            report.overlaps, 0,
            "two leaders at once: {:#?}\n{:?}",
            report.overlap_examples, report.timeline
        );
        // Terms strictly increase in grant order.
        for pair in terms.windows(2) {
            assert!(
                pair[1].term > pair[0].term,
                "term {} granted after term {}: {pair:#?}",
                pair[1].term,
                pair[0].term
            );
        }
        // The fence: every current write accepted, every stale one refused.
        assert_eq!(shared.current_rejected.load(Ordering::Relaxed), 0);
        assert_eq!(shared.late_accepted.load(Ordering::Relaxed), 0);
        let current = shared.current_writes.load(Ordering::Relaxed);
        let value = FencedResource::connect(&resource_url)
            .await
            .expect("resource")
            .read(RESOURCE)
            .await
            .expect("read")
            .value;
        assert_eq!(
            u64::try_from(value).expect("a count"),
            current + shared.after_loss_accepted.load(Ordering::Relaxed),
            "every accepted increment counted once"
        );
        // Failover after each crash.
        eprintln!("  failovers after crashes: {failovers:?}");
        for failover in &failovers {
            assert!(
                *failover <= FAILOVER_BUDGET,
                "a new leader {failover:?} after a crash"
            );
        }
        // Enough of everything for the run to count.
        assert!(faults.len() >= 16, "only {} faults", faults.len());
        assert!(failovers.len() >= 3, "only {} leader crashes", failovers.len());
        assert!(
            ends.get("lost").copied().unwrap_or(0) >= 3,
            "no leadership lost to a long pause"
        );
        assert!(terms.len() >= 15, "only {} leaderships", terms.len());
        assert!(current >= 200, "only {current} writes while leading");
        assert!(shared.late_writes.load(Ordering::Relaxed) >= 10);
        let values = lock_redis::keys::election_values(ELECTION);
        lock_testkit::assert_nothing_left([&url], &[ELECTION, values.as_str()], LEASE * 3).await;
    });
}

//! Release → wake-up latency between processes, and waiters whose notification connection is
//! killed while they wait.
//!
//! Every worker has its own `RedisBackend` (its own client id, command connection and
//! notification connection), as a separate process would.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockOptions, Locker, ReleaseOutcome};
use lock_redis::RedisBackend;
use lock_testkit::{History, RedisServer, granted};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout};

async fn locker(server: &RedisServer) -> Locker<RedisBackend> {
    Locker::new(RedisBackend::connect(server.url()).await.expect("connect"))
}

/// Nearest-rank percentile of sorted durations.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One hold in the handoff log.
#[derive(Clone, Copy)]
struct Turn {
    worker: usize,
    acquired_at: Instant,
    /// Taken right before the release was sent.
    released_at: Option<Instant>,
}

const WORKERS: usize = 8;
const HANDOFFS: usize = 400;

/// 8 workers in 8 "processes" contend for one lock (default 30 s watchdog lease, so a missed
/// notification shows as a wait of up to the deadline, not as a short timer wake). After a
/// release, the releasing worker stays out until another worker has the lock, so every handoff
/// goes to a waiter woken by the release notification. The latency of a handoff is from right
/// before the release was sent to right after the next `lock_with` returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_to_next_acquire_latency_between_processes() {
    let server = RedisServer::start().expect("start redis-server");
    let log: Arc<Mutex<Vec<Turn>>> = Arc::default();
    let (turns, _) = watch::channel(0usize);
    let history = History::new();
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for worker in 0..WORKERS {
        let locker = locker(&server).await;
        let (log, turns, history) = (log.clone(), turns.clone(), history.clone());
        workers.spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(10));
            loop {
                let guard = locker
                    .lock_with("wakeup:handoff", &options)
                    .await
                    .expect("lock_with");
                let acquired_at = Instant::now();
                let seq = {
                    let mut log = log.lock().unwrap();
                    log.push(Turn {
                        worker,
                        acquired_at,
                        released_at: None,
                    });
                    log.len() - 1
                };
                turns.send_replace(seq + 1);
                let done = seq >= HANDOFFS;
                let hold = history.begin_at(worker, guard.owner_field(), None, acquired_at);
                if !done {
                    // A short critical section, so that the others are waiting when it ends.
                    sleep(Duration::from_millis(1)).await;
                }
                let released_at = Instant::now();
                log.lock().unwrap()[seq].released_at = Some(released_at);
                hold.end_at(None, released_at);
                assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
                if done {
                    return; // each remaining waiter takes the lock once more and leaves
                }
                // Stay out until another worker has taken the lock.
                let mut seen = turns.subscribe();
                timeout(Duration::from_secs(10), seen.wait_for(|&n| n > seq + 1))
                    .await
                    .expect("another worker took the lock within 10 s")
                    .expect("turns channel");
            }
        });
    }
    while let Some(joined) = workers.join_next().await {
        joined.expect("worker");
    }
    let elapsed = started.elapsed();

    let log = log.lock().unwrap().clone();
    let mut latencies: Vec<Duration> = log
        .windows(2)
        .take(HANDOFFS)
        .map(|pair| {
            assert_ne!(
                pair[0].worker, pair[1].worker,
                "every handoff goes to another worker"
            );
            let released = pair[0].released_at.expect("released");
            pair[1].acquired_at.saturating_duration_since(released)
        })
        .collect();
    assert_eq!(latencies.len(), HANDOFFS);
    latencies.sort();
    let (p50, p90, p99, max) = (
        percentile(&latencies, 50.0),
        percentile(&latencies, 90.0),
        percentile(&latencies, 99.0),
        percentile(&latencies, 100.0),
    );
    let report = history.check(0, 0);
    println!(
        "{HANDOFFS} handoffs between {WORKERS} processes in {elapsed:?}: release → next acquire \
         p50 {p50:?}, p90 {p90:?}, p99 {p99:?}, max {max:?}, min {:?}; history: {} overlaps",
        latencies[0], report.overlaps
    );
    assert_eq!(report.overlaps, 0, "{report}");
    assert!(
        p99 < Duration::from_millis(50),
        "p99 release → next acquire {p99:?} (p50 {p50:?}, max {max:?})"
    );
}

const WAIT: Duration = Duration::from_secs(3);
/// Waiter backends ("processes") and waiters in each.
const WAITER_PROCESSES: usize = 3;
const WAITERS_PER_PROCESS: usize = 2;

/// What one waiter saw.
struct Waited {
    asked_at: Instant,
    returned_at: Instant,
    acquired: bool,
}

/// Waits until every waiter backend has a subscription and the server lists that many
/// subscribed notification connections.
async fn until_all_subscribed(server: &RedisServer, waiters: &[Locker<RedisBackend>]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let subscribed = waiters.iter().all(|w| w.backend().watched_locks() == 1)
            && server
                .client_list()
                .expect("CLIENT LIST")
                .iter()
                .filter(|client| client.subscriptions() > 0)
                .count()
                == waiters.len();
        if subscribed {
            return;
        }
        assert!(Instant::now() < deadline, "the waiters never subscribed");
        sleep(Duration::from_millis(5)).await;
    }
}

/// One round: a holder (30 s watchdog lease), 6 waiters in 3 processes blocked on it with
/// `wait(3 s)`, every notification connection killed while they wait, then, after `release_after`
/// (`None`: never, within the wait), the release. Each waiter that gets the lock holds it 5 ms.
async fn kill_round(
    server: &RedisServer,
    holder: &Locker<RedisBackend>,
    waiters: &[Locker<RedisBackend>],
    name: &str,
    release_after: Option<Duration>,
) -> (Vec<Waited>, Instant) {
    let mut held = Some(holder.lock(name).await.expect("lock"));
    let mut tasks = JoinSet::new();
    for waiter in waiters {
        for _ in 0..WAITERS_PER_PROCESS {
            let (waiter, name) = (waiter.clone(), name.to_owned());
            tasks.spawn(async move {
                let asked_at = Instant::now();
                let guard = granted(
                    waiter
                        .lock_with(&name, &LockOptions::new().wait(WAIT))
                        .await,
                )
                .expect("lock_with");
                let returned_at = Instant::now();
                let acquired = guard.is_some();
                if let Some(guard) = guard {
                    sleep(Duration::from_millis(5)).await;
                    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
                }
                Waited {
                    asked_at,
                    returned_at,
                    acquired,
                }
            });
        }
    }
    until_all_subscribed(server, waiters).await;
    sleep(Duration::from_millis(20)).await; // every local waiter is in its wait
    let killed = server
        .kill_pubsub_clients()
        .expect("CLIENT KILL TYPE pubsub");
    assert_eq!(
        killed,
        waiters.len(),
        "one notification connection per process"
    );
    let released_at = match release_after {
        Some(after) => {
            sleep(after).await;
            let at = Instant::now();
            let guard = held.take().expect("held");
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            Some(at)
        }
        None => None,
    };
    let mut seen = Vec::new();
    let limit = WAIT + Duration::from_secs(2);
    while let Some(joined) = timeout(limit, tasks.join_next())
        .await
        .expect("a waiter hangs past its deadline")
    {
        seen.push(joined.expect("waiter task"));
    }
    let released_at = match released_at {
        Some(at) => at,
        None => {
            let at = Instant::now();
            let guard = held.take().expect("held");
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            at
        }
    };
    (seen, released_at)
}

/// The notification connections of every waiting process are killed 20 times mid-wait, with
/// the release 0 to 200 ms after the kill (so some releases land while the connections are
/// being re-established): every waiter returns within its deadline + 1 s, and every waiter gets
/// the lock, the first one soon after the release. Two more rounds never release within the
/// wait: every waiter then gives up at its deadline (not before, not much later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_killed_notification_connections() {
    let server = RedisServer::start().expect("start redis-server");
    let holder = locker(&server).await;
    let mut waiters = Vec::new();
    for _ in 0..WAITER_PROCESSES {
        waiters.push(locker(&server).await);
    }
    let delays = [0, 1, 5, 20, 50, 200].map(Duration::from_millis);
    let mut first_wake = Vec::new();
    let mut all_done = Vec::new();
    for round in 0..20 {
        let name = format!("wakeup:kill:{round}");
        let after = delays[round % delays.len()];
        let (seen, released_at) = kill_round(&server, &holder, &waiters, &name, Some(after)).await;
        for waited in &seen {
            let took = waited.returned_at - waited.asked_at;
            assert!(
                took <= WAIT + Duration::from_secs(1),
                "round {round}: a waiter returned after {took:?}"
            );
        }
        let acquired = seen.iter().filter(|waited| waited.acquired).count();
        assert_eq!(
            acquired,
            seen.len(),
            "round {round} (release {after:?} after the kill): only {acquired} of {} waiters got \
             the lock within {WAIT:?}",
            seen.len()
        );
        let first = seen
            .iter()
            .map(|waited| waited.returned_at.saturating_duration_since(released_at))
            .min()
            .unwrap();
        let last = seen
            .iter()
            .map(|waited| waited.returned_at.saturating_duration_since(released_at))
            .max()
            .unwrap();
        assert!(
            first < Duration::from_secs(1),
            "round {round}: the first waiter got the lock {first:?} after the release"
        );
        first_wake.push(first);
        all_done.push(last);
    }
    println!(
        "20 kills mid-wait ({} waiters in {WAITER_PROCESSES} processes): first acquire after the \
         release {first_wake:?}; last of the {} acquires {all_done:?}",
        WAITER_PROCESSES * WAITERS_PER_PROCESS,
        WAITER_PROCESSES * WAITERS_PER_PROCESS
    );

    let mut gave_up = Vec::new();
    for round in 0..2 {
        let name = format!("wakeup:kill-no-release:{round}");
        let (seen, _) = kill_round(&server, &holder, &waiters, &name, None).await;
        for waited in &seen {
            let took = waited.returned_at - waited.asked_at;
            assert!(!waited.acquired, "the lock was never released");
            assert!(
                took >= WAIT && took <= WAIT + Duration::from_secs(1),
                "round {round}: a waiter gave up after {took:?} (wait {WAIT:?})"
            );
            gave_up.push(took);
        }
    }
    println!("no release: the waiters gave up after {gave_up:?}");
    for waiter in &waiters {
        assert_eq!(waiter.backend().watched_locks(), 0, "no subscription left");
    }
}

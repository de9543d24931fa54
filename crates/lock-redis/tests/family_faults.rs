//! The lock family's shared and ordered members under the single-node in-model faults
//! (`lock_testkit::faults::single_node`: latency, reset connections, a pause shorter than a
//! lease, killed notification connections, a flushed script cache, replies cut off in their
//! middle for a moment, `kill -9` and a restart
//! from an `appendfsync always` AOF), one after another at random gaps of 50–200 ms, while
//! 4 clients (each its own `RedisBackend` through a fault proxy, 300 ms command timeout) work:
//!
//! - **read-write lock**: 12 tasks take the read lock, or one time in four the write lock, and
//!   hold it 2–20 ms; half the clients prefer writers. The sharing checker must find no
//!   writer out together with anyone, and readers out together;
//! - **semaphore**: 12 tasks take 1 or 2 of 3 permits and give them back. Never more than 3
//!   permits out at once among the recorded holds, and never more than 3 available after;
//! - **fair lock**: 12 tasks queue for one fair lock and hold it 1–5 ms; the arrival book
//!   counts the grants made while someone who came earlier still waited: none may be, but
//!   for passing over a waiter one of whose attempts failed (counted as displaced: the failed
//!   attempt may have been a grant whose answer was lost, which the locker gives back, so the
//!   waiter queues again at the back);
//! - **countdown latch**: rounds of 6 waiters on a latch of 3 that a 7th task counts down:
//!   no waiter is let through before the last count-down was sent, none is left waiting
//!   longer than a bounded time after the count was seen at zero, none fails.
//!
//! Each ends with nothing left on the server (keys and subscriptions), once the leases ran out.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{FairBackend, LockOptions, Locker, ReadWriteLock, Semaphore, Wait};
use lock_redis::{RedisBackend, RedisFairSide};
use lock_testkit::arrivals::{Arrivals, BookedBackend};
use lock_testkit::conformance::fresh_name;
use lock_testkit::sharing::{Claim, SharedHold, check_sharing};
use lock_testkit::{
    FaultLoop, FaultProxy, RedisServer, ServerOptions, assert_nothing_left, faults,
};
use rand::Rng;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const CLIENTS: usize = 4;
const TASKS_PER_CLIENT: usize = 3;
const LEASE: Duration = Duration::from_millis(1200);
/// How long each workload runs under faults: about 20 faults at the gaps below.
const RUN: Duration = Duration::from_secs(10);
const FAULT_GAP: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(200));
/// The fewest faults a run must have seen to count (every kind twice).
const MIN_FAULTS: usize = 12;
/// After the lease, how long unsubscribes and expiries may take to land.
const SETTLE: Duration = Duration::from_secs(5);
/// Longest a task may take to finish once the run is over before it counts as hanging.
const DRAIN: Duration = Duration::from_secs(30);

/// A lock server behind a fault proxy, and clients connected through the proxy.
struct Rig {
    server: Arc<Mutex<RedisServer>>,
    proxy: Arc<FaultProxy>,
    url: String,
    clients: Vec<RedisBackend>,
}

impl Rig {
    async fn start() -> Rig {
        let server = RedisServer::start_with(ServerOptions::new().aof_fsync_always(true))
            .expect("start the lock server");
        let url = server.url();
        let proxy = Arc::new(FaultProxy::start(server.addr()).await.expect("proxy"));
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            clients.push(
                RedisBackend::builder(proxy.url())
                    .command_timeout(Duration::from_millis(300))
                    .connect()
                    .await
                    .expect("connect through the proxy"),
            );
        }
        Rig {
            server: Arc::new(Mutex::new(server)),
            proxy,
            url,
            clients,
        }
    }

    fn faults(&self) -> FaultLoop {
        FaultLoop::start(
            faults::single_node(self.server.clone(), self.proxy.clone()),
            FAULT_GAP,
        )
    }

    /// Within a lease and the settling time, the server holds no key (but `keep`) and no
    /// subscription.
    async fn assert_clean(&self, keep: &[&str]) {
        let deadline = Instant::now() + LEASE + SETTLE;
        let client = redis::Client::open(self.url.as_str()).expect("url");
        let left = loop {
            let keys: Vec<String> = match client.get_multiplexed_async_connection().await {
                Ok(mut con) => redis::cmd("KEYS")
                    .arg("*")
                    .query_async(&mut con)
                    .await
                    .expect("KEYS"),
                Err(_) => vec!["(no connection)".to_owned()],
            };
            let left: Vec<String> = keys
                .into_iter()
                .filter(|key| !keep.contains(&key.as_str()))
                .collect();
            if left.is_empty() || Instant::now() >= deadline {
                break left;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(left.is_empty(), "left on the server: {left:?}");
        assert_nothing_left([self.url.as_str()], &[], SETTLE).await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn random_ms(low: u64, high: u64) -> Duration {
    Duration::from_millis(rand::rng().random_range(low..=high))
}

/// Waits for every task, failing the test when one is still running `DRAIN` after the run.
async fn drain(tasks: Vec<JoinHandle<()>>, what: &str) {
    for task in tasks {
        tokio::time::timeout(DRAIN, task)
            .await
            .unwrap_or_else(|_| panic!("{what}: a task still runs {DRAIN:?} after the run"))
            .expect("a task panicked");
    }
}

/// Starts `TASKS_PER_CLIENT` tasks on each of `lockers`, each running `turn(locker, holder)`
/// over and over until `until` (`holder` numbers the tasks from 0).
fn spawn_tasks<L, F, T>(lockers: Vec<L>, until: Instant, turn: F) -> Vec<JoinHandle<()>>
where
    L: Clone + Send + 'static,
    F: Fn(L, usize) -> T + Clone + Send + 'static,
    T: Future<Output = ()> + Send,
{
    let mut tasks = Vec::new();
    for (client, locker) in lockers.into_iter().enumerate() {
        for task in 0..TASKS_PER_CLIENT {
            let (locker, turn) = (locker.clone(), turn.clone());
            let holder = client * TASKS_PER_CLIENT + task;
            tasks.push(tokio::spawn(async move {
                while Instant::now() < until {
                    turn(locker.clone(), holder).await;
                }
            }));
        }
    }
    tasks
}

/// The holds recorded by every task, and the attempts that ended in an error.
#[derive(Default)]
struct Record {
    holds: Mutex<Vec<SharedHold>>,
    errors: AtomicUsize,
}

impl Record {
    fn hold(&self, holder: usize, claim: Claim, from: Instant, to: Instant) {
        self.holds.lock().unwrap().push(SharedHold {
            holder,
            claim,
            from,
            to,
        });
    }

    fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Holds the guard an acquire returned for `hold`, or until its lease is lost, then releases it
/// (an error leaves it to its lease); returns when the hold began (the acquire returned) and
/// ended (the guard's validity deadline, when the lease was lost first). `None` when the
/// acquire failed.
async fn hold_for<B: lock_core::LockBackend>(
    acquired: lock_core::Result<lock_core::LockGuard<B>>,
    hold: Duration,
) -> Option<(Instant, Instant)> {
    let guard = acquired.ok()?;
    let from = Instant::now();
    tokio::select! {
        () = tokio::time::sleep(hold) => {}
        _ = guard.lost() => {}
    }
    let to = Instant::now().min(guard.valid_until());
    let _ = guard.release().await;
    Some((from, to))
}

#[test]
fn read_write_lock_readers_share_writers_are_alone_under_faults() {
    runtime().block_on(async {
        let rig = Rig::start().await;
        let name = fresh_name("family-faults-rw");
        let record = Arc::new(Record::default());
        let options = LockOptions::new()
            .watchdog_lease(LEASE)
            .wait(Duration::from_secs(5));
        let faults = rig.faults();
        let until = Instant::now() + RUN;
        // Half the clients hold new readers back while writers wait; both kinds interoperate.
        let lockers = rig
            .clients
            .iter()
            .enumerate()
            .map(|(client, backend)| {
                let lock = Locker::new(backend.clone())
                    .read_write(&name)
                    .expect("a valid name");
                match client % 2 {
                    0 => lock,
                    _ => lock.prefer_writers(),
                }
            })
            .collect();
        let tasks = spawn_tasks(lockers, until, {
            let record = record.clone();
            move |locker: ReadWriteLock<RedisBackend>, holder| {
                let (record, options) = (record.clone(), options.clone());
                async move {
                    let hold = random_ms(2, 20);
                    let held = if rand::rng().random_ratio(1, 4) {
                        let held = hold_for(locker.write_with(&options).await, hold).await;
                        held.map(|span| (Claim::Exclusive, span))
                    } else {
                        let held = hold_for(locker.read_with(&options).await, hold).await;
                        held.map(|span| (Claim::Shared(1), span))
                    };
                    match held {
                        Some((claim, (from, to))) => record.hold(holder, claim, from, to),
                        None => record.error(),
                    }
                }
            }
        });
        tokio::time::sleep_until(until).await;
        let faults = faults.stop().await;
        drain(tasks, "read-write lock").await;

        let holds = record.holds.lock().unwrap().clone();
        let report = check_sharing(&holds, u32::MAX);
        eprintln!(
            "read-write lock under {} faults: {report}{} errors; faults: {faults:?}",
            faults.len(),
            record.errors.load(Ordering::Relaxed)
        );
        assert!(report.is_clean(), "{report}");
        assert!(faults.len() >= MIN_FAULTS, "too few faults: {faults:?}");
        assert!(
            report.exclusive >= 20 && report.holds - report.exclusive >= 100,
            "too few holds to judge: {report}"
        );
        assert!(
            report.most_shared_holds >= 2,
            "readers never overlapped: {report}"
        );
        rig.assert_clean(&[]).await;
    });
}

#[test]
fn semaphore_never_has_more_permits_out_than_it_has_under_faults() {
    const PERMITS: u32 = 3;
    runtime().block_on(async {
        let rig = Rig::start().await;
        let name = fresh_name("family-faults-semaphore");
        let record = Arc::new(Record::default());
        let setter = Locker::new(rig.clients[0].clone())
            .semaphore(&name)
            .expect("a valid name");
        assert!(
            setter
                .try_set_permits(PERMITS)
                .await
                .expect("set the permits")
        );
        let faults = rig.faults();
        let until = Instant::now() + RUN;
        let semaphores = rig
            .clients
            .iter()
            .map(|backend| {
                Locker::new(backend.clone())
                    .semaphore(&name)
                    .expect("a valid name")
            })
            .collect();
        let tasks = spawn_tasks(semaphores, until, {
            let record = record.clone();
            move |semaphore: Semaphore<RedisBackend>, holder| {
                let record = record.clone();
                async move {
                    let permits = rand::rng().random_range(1..=2);
                    let hold = random_ms(2, 20);
                    let wait = Wait::Upto(Duration::from_secs(2));
                    if semaphore.acquire_with(permits, wait).await.is_err() {
                        // Not taken, or maybe taken with the answer lost: then leaked, which
                        // lowers the capacity but never raises it.
                        record.error();
                        return;
                    }
                    let from = Instant::now();
                    tokio::time::sleep(hold).await;
                    // The hold ends when the release is sent.
                    record.hold(holder, Claim::Shared(permits), from, Instant::now());
                    if semaphore.release(permits).await.is_err() {
                        record.error();
                    }
                }
            }
        });
        tokio::time::sleep_until(until).await;
        let faults = faults.stop().await;
        drain(tasks, "semaphore").await;

        let available = loop {
            match setter.available().await {
                Ok(available) => break available,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let holds = record.holds.lock().unwrap().clone();
        let report = check_sharing(&holds, PERMITS);
        eprintln!(
            "semaphore under {} faults: {report}{} errors; {available} of {PERMITS} permits \
             available after (the rest lost with ambiguous answers); faults: {faults:?}",
            faults.len(),
            record.errors.load(Ordering::Relaxed)
        );
        assert!(report.is_clean(), "{report}");
        assert!(
            (0..=i64::from(PERMITS)).contains(&available),
            "{available} permits available of {PERMITS}: a permit was given back twice"
        );
        assert!(faults.len() >= MIN_FAULTS, "too few faults: {faults:?}");
        // Permits lost with ambiguous answers lower the capacity as the run goes (a documented
        // limit of the plain semaphore): a run whose kill -9s and pauses lose all three early
        // has few holds (33 in one CI run), so the bound only asks that there were some to judge.
        assert!(report.holds >= 20, "too few holds to judge: {report}");
        assert!(
            report.most_shared_units >= 2,
            "permits were never out together: {report}"
        );
        assert!(setter.delete().await.expect("delete the semaphore"));
        rig.assert_clean(&[]).await;
    });
}

#[test]
fn fair_lock_grants_in_arrival_order_under_faults() {
    runtime().block_on(async {
        let rig = Rig::start().await;
        let name = fresh_name("family-faults-fair");
        let record = Arc::new(Record::default());
        let arrivals = Arc::new(Arrivals::default());
        let options = LockOptions::new()
            .watchdog_lease(LEASE)
            .wait(Duration::from_secs(8));
        let faults = rig.faults();
        let until = Instant::now() + RUN;
        let lockers = rig
            .clients
            .iter()
            .map(|backend| Locker::new(BookedBackend::new(backend.fair_side(), arrivals.clone())))
            .collect();
        let tasks = spawn_tasks(lockers, until, {
            let (name, record) = (name.clone(), record.clone());
            move |locker: Locker<BookedBackend<RedisFairSide>>, holder| {
                let (name, record, options) = (name.clone(), record.clone(), options.clone());
                async move {
                    let acquired = locker.lock_with(&name, &options).await;
                    match hold_for(acquired, random_ms(1, 5)).await {
                        Some((from, to)) => record.hold(holder, Claim::Exclusive, from, to),
                        None => record.error(),
                    }
                }
            }
        });
        tokio::time::sleep_until(until).await;
        let faults = faults.stop().await;
        drain(tasks, "fair lock").await;

        let tally = arrivals.tally();
        let holds = record.holds.lock().unwrap().clone();
        let report = check_sharing(&holds, u32::MAX);
        eprintln!(
            "fair lock under {} faults: {tally}; {report}{} errors; faults: {faults:?}",
            faults.len(),
            record.errors.load(Ordering::Relaxed)
        );
        // Counted, and bounded: a lock that ignored the queue would pass over a waiter at most
        // grants (the plain lock in lockbench W9: most of them); rarely, a waiter is passed over
        // for a run of grants with no failed attempt of its own seen (docs/safety.md).
        assert!(
            tally.out_of_order * 20 <= tally.grants,
            "more than 1 in 20 grants out of arrival order: {tally}"
        );
        assert!(report.is_clean(), "{report}");
        assert!(faults.len() >= MIN_FAULTS, "too few faults: {faults:?}");
        assert!(tally.grants >= 100, "too few grants to judge: {tally}");
        rig.assert_clean(&[]).await;
    });
}

#[test]
fn latch_lets_no_waiter_through_early_and_leaves_none_hanging_under_faults() {
    const COUNT: u64 = 3;
    const WAITERS: usize = 6;
    /// Longest a waiter may still wait once the count was seen at zero: a re-check period
    /// (1 s), plus a fault in the way (a restart, a pause), plus a retry.
    const LET_THROUGH_WITHIN: Duration = Duration::from_secs(3);
    runtime().block_on(async {
        let rig = Rig::start().await;
        let latches: Vec<Locker<RedisBackend>> =
            rig.clients.iter().cloned().map(Locker::new).collect();
        let faults = rig.faults();
        let until = Instant::now() + RUN;
        let (mut rounds, mut slowest, mut errors) = (0usize, Duration::ZERO, 0usize);
        while Instant::now() < until {
            rounds += 1;
            let name = fresh_name("family-faults-latch");
            let counter = latches[0].latch(&name).expect("a valid name");
            // Set it (retried: a lost answer to a set that landed says `false` next time).
            loop {
                match counter.try_set_count(COUNT).await {
                    Ok(_) => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            let mut waiters = Vec::new();
            for waiter in 0..WAITERS {
                let latch = latches[waiter % latches.len()]
                    .latch(&name)
                    .expect("a valid name");
                waiters.push(tokio::spawn(async move {
                    let outcome = latch.wait_timeout(Duration::from_secs(20)).await;
                    (outcome, Instant::now())
                }));
            }
            // Count down to zero; a count-down whose answer was lost may or may not have
            // counted, so each is followed by a read until one is answered.
            let (mut sent, mut last_sent_at) = (0u64, None);
            let zero_seen_at = loop {
                tokio::time::sleep(random_ms(20, 150)).await;
                sent += 1;
                if sent >= COUNT && last_sent_at.is_none() {
                    // The count cannot reach zero before the COUNT-th count-down is sent.
                    last_sent_at = Some(Instant::now());
                }
                let left = match counter.count_down().await {
                    Ok(left) => left,
                    Err(_) => loop {
                        match counter.count().await {
                            Ok(left) => break left,
                            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                        }
                    },
                };
                if left == 0 {
                    break Instant::now();
                }
            };
            let earliest = last_sent_at.expect("at least COUNT count-downs were sent");
            for waiter in waiters {
                let (outcome, returned_at) = waiter.await.expect("a waiter panicked");
                match outcome {
                    Ok(true) => {}
                    Ok(false) => panic!("round {rounds}: a waiter was left waiting 20 s"),
                    Err(error) => {
                        errors += 1;
                        eprintln!("round {rounds}: a waiter failed: {error}");
                        continue;
                    }
                }
                assert!(
                    returned_at >= earliest,
                    "round {rounds}: a waiter was let through {:?} before the last count-down \
                     was sent",
                    earliest - returned_at
                );
                slowest = slowest.max(returned_at.saturating_duration_since(zero_seen_at));
            }
        }
        let faults = faults.stop().await;
        eprintln!(
            "latch under {} faults: {rounds} rounds of {WAITERS} waiters, the slowest let \
             through {slowest:?} after the count was seen at zero, {errors} waiters failed; \
             faults: {faults:?}",
            faults.len()
        );
        assert_eq!(errors, 0, "waiters failed under faults");
        assert!(
            slowest <= LET_THROUGH_WITHIN,
            "a waiter was let through {slowest:?} after the count was seen at zero"
        );
        assert!(faults.len() >= MIN_FAULTS, "too few faults: {faults:?}");
        assert!(rounds >= 5, "too few rounds: {rounds}");
        rig.assert_clean(&[]).await;
    });
}

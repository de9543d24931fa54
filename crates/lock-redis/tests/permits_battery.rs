//! The lease-bound permits under faults, on a single Redis node: 3 permits, 4 clients (each its
//! own `RedisBackend`, 3 tasks each) taking permits with short watchdog leases and recording
//! their holds, while every client's connections are killed, the server is paused (shorter than
//! a lease, and once longer, so that leases are lost), subscriptions are killed, and one client
//! dies mid-run holding permits (its guards forgotten, its runtime — watchdog, connections and
//! backend — dropped, as a killed process).
//!
//! Asserted: never more than 3 holders at once among the recorded holds (a hold ends when the
//! holder lets go, or at its guard's validity deadline when `lost()` fires first); every
//! snapshot of the semaphore accounts for exactly 3 permits (available + held + expired); one
//! lease after the client died none of its permits is held any more, and at the end the 3
//! permits are all back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockBackend, LockOptions, Locker, Permits};
use lock_redis::RedisBackend;
use lock_testkit::RedisServer;
use lock_testkit::conformance::fresh_name;
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;

const PERMITS: u32 = 3;
const CLIENTS: usize = 4;
const TASKS_PER_CLIENT: usize = 3;
const LEASE: Duration = Duration::from_millis(1200);
const RUN: Duration = Duration::from_secs(8);
/// When the last client dies, from the start.
const KILL_AT: Duration = Duration::from_secs(3);
/// How long after a kill its permits may still be held: a lease, plus the time for a renewal
/// or an acquire sent just before the kill to be applied.
const GIVEN_BACK_WITHIN: Duration = LEASE.saturating_add(Duration::from_millis(500));

/// One recorded hold: from the acquire's return to the release's start, or to the guard's
/// validity deadline when its lease was lost first, or to the holder's death.
#[derive(Clone, Copy, Debug)]
struct Held {
    client: usize,
    from: Instant,
    to: Instant,
    lost: bool,
}

#[derive(Default)]
struct Record {
    holds: Mutex<Vec<Held>>,
    errors: AtomicUsize,
    /// Permits held when their client died.
    forgotten: AtomicUsize,
}

/// One task of client `client`: takes a permit, holds it 5–40 ms (a sitter: to the end of the
/// run, renewed by the watchdog) or until `lost()` fires or its process dies, lets it go; until
/// `until` or death. From `keep_from` on, a permit taken is kept until death (so that the client
/// dies holding permits).
async fn worker(
    (client, sitter): (usize, bool),
    permits: Permits<RedisBackend>,
    (until, keep_from): (Instant, Option<Instant>),
    record: Arc<Record>,
    mut dead: watch::Receiver<bool>,
) {
    let options = LockOptions::new()
        .watchdog_lease(LEASE)
        .wait(Duration::from_secs(2));
    while Instant::now() < until && !*dead.borrow() {
        let acquired = tokio::select! {
            acquired = permits.acquire_with(&options) => acquired,
            _ = dead.changed() => return,
        };
        let guard = match acquired {
            Ok(guard) => guard,
            Err(_) => {
                record.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let from = Instant::now();
        let hold = if keep_from.is_some_and(|keep_from| from >= keep_from) {
            RUN
        } else if sitter {
            // Until the lease is lost (the long pause) or the run ends: renewed meanwhile.
            until.saturating_duration_since(from)
        } else {
            Duration::from_millis(rand::rng().random_range(5..=40))
        };
        let (lost, died) = tokio::select! {
            () = tokio::time::sleep(hold) => (false, false),
            _ = guard.lost() => (true, false),
            _ = dead.changed() => (false, true),
        };
        let to = Instant::now().min(guard.valid_until());
        record.holds.lock().unwrap().push(Held {
            client,
            from,
            to,
            lost,
        });
        if died {
            // The process is gone: nothing is released, nothing renewed once its runtime is.
            record.forgotten.fetch_add(1, Ordering::Relaxed);
            std::mem::forget(guard);
            return std::future::pending::<()>().await;
        }
        // Errors here (a fault) leave the permit to its lease.
        let _ = guard.release().await;
    }
}

/// The largest number of recorded holds at one instant (a hold ending at the instant another
/// starts does not overlap it).
fn most_at_once(holds: &[Held]) -> (usize, Option<Instant>) {
    let mut events: Vec<(Instant, i32)> = holds
        .iter()
        // A hold whose lease was already over when its acquire returned held nothing.
        .filter(|hold| hold.to > hold.from)
        .flat_map(|hold| [(hold.from, 1), (hold.to, -1)])
        .collect();
    events.sort();
    let (mut now, mut most, mut at) = (0i32, 0i32, None);
    for (instant, step) in events {
        now += step;
        if now > most {
            most = now;
            at = Some(instant);
        }
    }
    (usize::try_from(most).unwrap_or(0), at)
}

#[test]
fn permits_stay_bounded_under_faults() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // The client that dies has a runtime of its own: dropping it stops its watchdog and closes
    // its connections, as the end of a process does.
    let doomed_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime of the client that dies");
    let doomed_handle = doomed_runtime.handle().clone();
    let mut doomed_runtime = Some(doomed_runtime);
    runtime.block_on(async {
        let server = Arc::new(Mutex::new(
            RedisServer::start().expect("start redis-server"),
        ));
        let url = server.lock().unwrap().url();
        let name = fresh_name("permits-battery");
        let connect = move || {
            let url = url.clone();
            async move {
                RedisBackend::builder(url)
                    .command_timeout(Duration::from_millis(300))
                    .connect()
                    .await
                    .expect("connect")
            }
        };
        let observer = Locker::new(connect().await)
            .permits(&name)
            .expect("a valid name");
        assert!(observer.try_set_permits(PERMITS).await.expect("set"));

        let started = Instant::now();
        let until = started + RUN;
        let record = Arc::new(Record::default());
        let (kill, dead) = watch::channel(false);
        // The survivors' "death" never comes (its sender lives to the end).
        let (_never_sent, never) = watch::channel(false);
        let mut tasks = Vec::new();
        let mut doomed_id = String::new();
        for client in 0..CLIENTS {
            let doomed = client == CLIENTS - 1;
            let backend = if doomed {
                doomed_handle
                    .spawn(connect())
                    .await
                    .expect("connect on the doomed runtime")
            } else {
                connect().await
            };
            if doomed {
                doomed_id = backend.client_id().to_owned();
            }
            let permits = Locker::new(backend).permits(&name).expect("a valid name");
            for task in 0..TASKS_PER_CLIENT {
                let work = worker(
                    // One sitter, on the first client.
                    (client, client == 0 && task == 0),
                    permits.clone(),
                    (
                        until,
                        doomed.then(|| started + KILL_AT - Duration::from_millis(400)),
                    ),
                    record.clone(),
                    // Only the doomed client hears of its death.
                    if doomed { dead.clone() } else { never.clone() },
                );
                tasks.push(if doomed {
                    doomed_handle.spawn(work)
                } else {
                    tokio::spawn(work)
                });
            }
        }

        // Faults, every 250–500 ms until the end; none in the 600 ms before the kill, so that
        // no request of the dying client is held up past it by a pause; once, after the dead
        // client's permits are back, a pause longer than a lease, so that leases are lost.
        let faults = tokio::spawn({
            let server = server.clone();
            async move {
                let mut done = Vec::new();
                let mut n = 0usize;
                let mut long_pause = true;
                while Instant::now() + Duration::from_millis(500) < until {
                    let gap = Duration::from_millis(rand::rng().random_range(250..=500));
                    let pause = Duration::from_millis(rand::rng().random_range(100..=300));
                    tokio::time::sleep(gap).await;
                    let since = started.elapsed();
                    let near_kill = since + Duration::from_millis(600) > KILL_AT && since < KILL_AT;
                    n += 1;
                    if long_pause
                        && since > KILL_AT + GIVEN_BACK_WITHIN + Duration::from_millis(500)
                    {
                        long_pause = false;
                        let pause = LEASE + Duration::from_millis(600);
                        server.lock().unwrap().pause().expect("pause");
                        tokio::time::sleep(pause).await;
                        server.lock().unwrap().resume().expect("resume");
                        done.push(format!("pause {pause:?}"));
                        continue;
                    }
                    match n % 3 {
                        0 if !near_kill => {
                            server.lock().unwrap().pause().expect("pause");
                            tokio::time::sleep(pause).await;
                            server.lock().unwrap().resume().expect("resume");
                            done.push(format!("pause {pause:?}"));
                        }
                        1 => {
                            let killed = server.lock().unwrap().kill_normal_clients();
                            done.push(format!("kill normal clients: {killed:?}"));
                        }
                        _ => {
                            let killed = server.lock().unwrap().kill_pubsub_clients();
                            done.push(format!("kill pubsub clients: {killed:?}"));
                        }
                    }
                }
                done
            }
        });

        // Every snapshot accounts for every permit.
        let sampler = tokio::spawn({
            let observer = observer.clone();
            async move {
                let (mut samples, mut wrong) = (0usize, Vec::new());
                while Instant::now() < until {
                    if let Ok(Ok(state)) =
                        tokio::time::timeout(Duration::from_millis(500), observer.state()).await
                    {
                        samples += 1;
                        let total = state.available.unwrap_or(0)
                            + i64::from(state.held())
                            + i64::from(state.expired);
                        if total != i64::from(PERMITS) {
                            wrong.push(format!("{state:?}"));
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                (samples, wrong)
            }
        });

        // The kill.
        tokio::time::sleep_until(started + KILL_AT).await;
        kill.send(true).expect("the doomed client listens");
        let killed_at = Instant::now();
        // Its tasks have forgotten their guards; then the process ends.
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Some(doomed) = doomed_runtime.take() {
            doomed.shutdown_background();
        }

        // One lease later, nothing of the dead client is held.
        tokio::time::sleep_until(killed_at + GIVEN_BACK_WITHIN).await;
        let holders = loop {
            match tokio::time::timeout(Duration::from_millis(500), observer.state()).await {
                Ok(Ok(state)) => break state.holders,
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let prefix = format!("{doomed_id}:");
        assert!(
            !holders.iter().any(|(owner, _)| owner.starts_with(&prefix)),
            "the dead client still holds permits {:?} after {:?}: {holders:?}",
            killed_at.elapsed(),
            GIVEN_BACK_WITHIN
        );

        for task in tasks {
            // The doomed client's tasks ended with its runtime (cancelled).
            let _ = task.await;
        }
        let faults = faults.await.expect("faults");
        let (samples, wrong) = sampler.await.expect("sampler");

        let holds = record.holds.lock().unwrap().clone();
        let (most, at) = most_at_once(&holds);
        let lost = holds.iter().filter(|hold| hold.lost).count();
        let doomed_holds = holds
            .iter()
            .filter(|hold| hold.client == CLIENTS - 1)
            .count();
        let forgotten = record.forgotten.load(Ordering::Relaxed);
        eprintln!(
            "{} holds ({doomed_holds} by the client that died, {forgotten} held at its death, \
             {lost} lost), {} acquire errors, at most {most} at once, {samples} snapshots; \
             faults: {faults:?}",
            holds.len(),
            record.errors.load(Ordering::Relaxed),
        );
        assert!(
            most <= PERMITS as usize,
            "{most} holders at once at {:?} after the start",
            at.map(|at| at.duration_since(started))
        );
        assert!(
            wrong.is_empty(),
            "snapshots not adding up to {PERMITS}: {wrong:?}"
        );
        assert!(
            holds.len() >= 100,
            "too few holds to judge: {}",
            holds.len()
        );
        assert_eq!(most, PERMITS as usize, "the permits were never all out");
        assert!(forgotten > 0, "the client died holding nothing");
        // The dead client's permits serve the others again.
        let back_at = killed_at + GIVEN_BACK_WITHIN;
        let after: Vec<Held> = holds
            .iter()
            .filter(|hold| hold.from > back_at)
            .copied()
            .collect();
        assert_eq!(
            most_at_once(&after).0,
            PERMITS as usize,
            "after the dead client's leases, the others never held all the permits"
        );
        assert!(lost > 0, "no lease lost to the long pause");
        assert!(faults.len() >= 10, "too few faults: {faults:?}");

        // Everyone has let go (a release lost to a fault within a lease): every permit is
        // available or expired, and the next acquire takes the expired ones back.
        let give_up = Instant::now() + LEASE + Duration::from_secs(2);
        let state = loop {
            let state = observer.state().await.expect("state");
            if state.held() == 0 {
                break state;
            }
            assert!(Instant::now() < give_up, "still held at the end: {state:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            state.available.unwrap_or(0) + i64::from(state.expired),
            i64::from(PERMITS),
            "{state:?}"
        );
        let last = observer
            .try_acquire()
            .await
            .expect("try")
            .expect("a permit is free");
        assert!(last.release().await.expect("release").was_held());
        let state = observer.state().await.expect("state");
        assert_eq!(
            (state.available, state.held(), state.expired),
            (Some(i64::from(PERMITS)), 0, 0),
            "{state:?}"
        );
    });
}

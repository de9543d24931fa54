//! How fast a watchdog-mode guard learns that its lease is gone, and that a short server pause
//! costs nobody their lease. Lease 900 ms (renewed every 300 ms), command timeout 150 ms.
//!
//! - A lock deleted behind the holder's back: `lost()` resolves with `NotOurs` at the next
//!   renewal, within one renewal interval + the command timeout.
//! - The server paused for 1.5 × the lease: no renewal gets through, and `lost()` resolves with
//!   `Expired` at the validity deadline, at most one lease after the pause started (the bound
//!   asserted is lease + renewal interval + command timeout).
//! - A pause shorter than the lease minus one renewal interval: every lock is renewed after the
//!   resume and is still held.

use std::time::Duration;

use lock_core::{LeaseLoss, LockGuard, LockOptions, Locker, ReleaseOutcome};
use lock_redis::RedisBackend;
use lock_testkit::RedisServer;
use tokio::time::{Instant, sleep, timeout};

const LEASE: Duration = Duration::from_millis(900);
const RENEWAL_INTERVAL: Duration = Duration::from_millis(300); // LEASE / 3
const COMMAND_TIMEOUT: Duration = Duration::from_millis(150);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(100);

async fn locker(server: &RedisServer) -> Locker<RedisBackend> {
    let backend = RedisBackend::builder(server.url())
        .command_timeout(COMMAND_TIMEOUT)
        .connect()
        .await
        .expect("connect");
    Locker::new(backend)
}

fn watchdog() -> LockOptions {
    LockOptions::new().watchdog_lease(LEASE).no_wait()
}

async fn take(locker: &Locker<RedisBackend>, name: &str) -> LockGuard<RedisBackend> {
    locker
        .lock_with(name, &watchdog())
        .await
        .unwrap_or_else(|error| panic!("lock {name}: {error}"))
}

fn max(durations: &[Duration]) -> Duration {
    durations.iter().copied().max().unwrap_or_default()
}

/// A raw `DEL` of the lock key while the guard lives, at several points of the renewal cycle
/// (0 to 290 ms after the acquire or a renewal): `lost()` resolves with `NotOurs` within one
/// renewal interval + the command timeout (+ slack) of the delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_lock_is_noticed_within_one_renewal_interval() {
    let server = start();
    let holder = locker(&server).await;
    let mut raw = server.connection().await;
    let bound = RENEWAL_INTERVAL + COMMAND_TIMEOUT + SLACK;
    let mut noticed = Vec::new();
    for round in 0..8u32 {
        let name = format!("loss:del:{round}");
        let guard = take(&holder, &name).await;
        // Let a renewal or two happen, then delete somewhere in the cycle.
        sleep(RENEWAL_INTERVAL * (round % 3) + Duration::from_millis(40) * round).await;
        assert!(!guard.is_lost());
        let deleted_at = Instant::now(); // before the DEL is sent: a conservative origin
        let deleted: u32 = redis::cmd("DEL")
            .arg(&name)
            .query_async(&mut raw)
            .await
            .expect("DEL");
        assert_eq!(deleted, 1);
        let loss = timeout(LEASE * 2, guard.lost())
            .await
            .unwrap_or_else(|_| panic!("round {round}: lost() did not fire within 2 leases"));
        let after = deleted_at.elapsed();
        assert_eq!(loss, LeaseLoss::NotOurs, "round {round}");
        assert!(guard.is_lost());
        assert!(
            after <= bound,
            "round {round}: the loss was noticed {after:?} after the DEL (bound {bound:?})"
        );
        noticed.push(after);
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotHeld);
    }
    println!(
        "DEL behind the holder's back → lost(NotOurs) after {noticed:?}; max {:?} (bound {bound:?})",
        max(&noticed)
    );
}

/// The server frozen (`SIGSTOP`) for 1.5 × the lease while 5 watchdog locks, acquired 60 ms
/// apart, are held: each `lost()` resolves with `Expired` before the resume, at most
/// lease + renewal interval + command timeout after the pause started (in practice at its
/// validity deadline, at most one lease after the pause started), and not right at the first
/// failed renewal. After the resume the locks are gone and another client takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_the_lease_expires_the_guards() {
    let mut server = start();
    let holder = locker(&server).await;
    let names: Vec<String> = (0..5).map(|n| format!("loss:pause:{n}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(take(&holder, name).await);
        sleep(Duration::from_millis(60)).await;
    }
    sleep(Duration::from_millis(500)).await; // a renewal or two for each
    assert!(guards.iter().all(|guard| !guard.is_lost()));

    let pause = LEASE * 3 / 2;
    let paused_at = Instant::now(); // before SIGSTOP: a conservative origin
    tokio::task::block_in_place(|| server.pause()).expect("pause");
    let resume_at = paused_at + pause;
    let remaining: Vec<Duration> = guards.iter().map(LockGuard::remaining).collect();
    let losses = futures_util::future::join_all(guards.iter().map(|guard| async move {
        let loss = timeout(pause, guard.lost()).await;
        (loss, paused_at.elapsed())
    }))
    .await;
    let now = Instant::now();
    if now < resume_at {
        sleep(resume_at - now).await;
    }
    let paused_for = paused_at.elapsed();
    tokio::task::block_in_place(|| server.resume()).expect("resume");

    let bound = LEASE + RENEWAL_INTERVAL + COMMAND_TIMEOUT;
    let mut after = Vec::new();
    for (n, (loss, at)) in losses.into_iter().enumerate() {
        let loss = loss
            .unwrap_or_else(|_| panic!("lock {n}: lost() did not fire during a {pause:?} pause"));
        assert_eq!(loss, LeaseLoss::Expired, "lock {n}");
        assert!(
            at <= bound,
            "lock {n}: lost {at:?} after the pause started (bound {bound:?})"
        );
        assert!(
            at >= RENEWAL_INTERVAL,
            "lock {n}: lost only {at:?} after the pause started: renewals are retried until the \
             validity deadline"
        );
        after.push(at);
    }
    println!(
        "server paused {paused_for:?} (1.5 × lease {LEASE:?}): remaining validity at the pause \
         {remaining:?}; lost(Expired) after {after:?}, max {:?} (bound {bound:?})",
        max(&after)
    );

    // The keys expired on the server during the pause: another client gets every lock, and
    // the old guards release nothing.
    let other = locker(&server).await;
    for (name, guard) in names.iter().zip(guards) {
        let taken = other
            .lock_with(name, &watchdog().wait(Duration::from_secs(2)))
            .await
            .unwrap();
        match guard.release().await {
            Ok(outcome) => assert_eq!(outcome, ReleaseOutcome::NotHeld, "{name}"),
            // The command connection may still be being replaced after the timeouts.
            Err(error) => assert!(error.is_retryable(), "{name}: {error}"),
        }
        assert_eq!(taken.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

/// Three pauses of 400 ms (shorter than lease − one renewal interval = 600 ms) while 20 watchdog
/// locks are held: after each resume every lock is still ours (not lost, our field on the server,
/// a positive PTTL), and a lease later too (renewed after the resume).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_server_pause_keeps_every_watchdog_lock() {
    const PAUSE: Duration = Duration::from_millis(400);
    let mut server = start();
    let holder = locker(&server).await;
    let names: Vec<String> = (0..20).map(|n| format!("loss:short:{n}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(take(&holder, name).await);
        sleep(Duration::from_millis(7)).await; // spread over the renewal cycle
    }
    let mut raw = server.connection().await;
    let mut least_remaining = Vec::new();
    for round in 0..3 {
        sleep(Duration::from_millis(250 + 70 * round)).await;
        tokio::task::block_in_place(|| server.pause()).expect("pause");
        sleep(PAUSE).await;
        tokio::task::block_in_place(|| server.resume()).expect("resume");
        // How close the pause brought the guards to their deadline.
        least_remaining.push(guards.iter().map(LockGuard::remaining).min().unwrap());
        assert_all_held(
            &mut raw,
            &names,
            &guards,
            &format!("round {round}, resumed"),
        )
        .await;
        // Past the validity every guard had at the resume: renewed after it.
        sleep(LEASE).await;
        assert_all_held(
            &mut raw,
            &names,
            &guards,
            &format!("round {round}, a lease later"),
        )
        .await;
    }
    println!(
        "3 pauses of {PAUSE:?} with 20 watchdog locks (lease {LEASE:?}): all held; least \
         remaining validity right after each resume {least_remaining:?}"
    );
    for guard in guards {
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

async fn assert_all_held(
    raw: &mut redis::aio::MultiplexedConnection,
    names: &[String],
    guards: &[LockGuard<RedisBackend>],
    when: &str,
) {
    for (name, guard) in names.iter().zip(guards) {
        assert!(
            !guard.is_lost(),
            "{when}: {name} lost ({:?})",
            guard.remaining()
        );
        let (pttl, mine): (i64, bool) = redis::pipe()
            .cmd("PTTL")
            .arg(name)
            .cmd("HEXISTS")
            .arg(name)
            .arg(guard.owner_field())
            .query_async(raw)
            .await
            .expect("PTTL + HEXISTS");
        assert!(pttl > 0, "{when}: {name} has PTTL {pttl}");
        assert!(mine, "{when}: {name} is not held by its guard's owner");
    }
}

fn start() -> RedisServer {
    RedisServer::start().expect("start redis-server")
}

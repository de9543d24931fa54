//! Subscriptions the server may hold without the backend having counted them must still be
//! undone once no local waiter wants the channel, or they stay on the server for the life of
//! the backend:
//!
//! - a SUBSCRIBE that timed out on a paused server (the server applies it when it resumes);
//! - an UNSUBSCRIBE that was lost before a reconnect (redis-rs re-subscribes, on the new
//!   connection, every channel the server had confirmed).

use std::time::Duration;

use lock_core::{Error, LockOptions, Locker, ReleaseOutcome};
use lock_redis::{RedisBackend, keys};
use lock_testkit::{Fault, FaultProxy, RedisServer};
use tokio::time::{Instant, sleep};

const COMMAND_TIMEOUT: Duration = Duration::from_millis(200);
/// How long in-flight or retried unsubscribes may take to reach the server.
const SETTLE: Duration = Duration::from_secs(5);

async fn backend(url: String) -> RedisBackend {
    RedisBackend::builder(url)
        .command_timeout(COMMAND_TIMEOUT)
        .connect()
        .await
        .expect("connect")
}

async fn channels(server: &RedisServer) -> Vec<String> {
    let mut raw = server.connection().await;
    redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(&mut raw)
        .await
        .expect("PUBSUB CHANNELS")
}

/// Polls `PUBSUB CHANNELS` until `done` holds for it, for at most `within`; returns the last
/// answer.
async fn channels_until(
    server: &RedisServer,
    within: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let channels = channels(server).await;
        if done(&channels) || Instant::now() >= deadline {
            return channels;
        }
        sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `backend` has exactly `count` watched locks (at most `within`).
async fn watched_until(backend: &RedisBackend, count: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while backend.watched_locks() != count {
        assert!(
            Instant::now() < deadline,
            "{} watched locks, expected {count}",
            backend.watched_locks()
        );
        sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_timed_out_on_a_paused_server_is_undone_after_resume() {
    let mut server = RedisServer::start().expect("start redis-server");
    let holder = Locker::new(backend(server.url()).await);
    let waiter_backend = backend(server.url()).await;
    let waiter = Locker::new(waiter_backend.clone());

    // Open the waiter's notification connection (made on its first watch): a SUBSCRIBE can only
    // outlive its timeout on a connection that exists before the pause.
    let warm = holder
        .lock_with(
            "leak:warm-up",
            &LockOptions::new().fixed_lease(Duration::from_secs(10)),
        )
        .await
        .expect("lock");
    let missed = waiter
        .lock_with(
            "leak:warm-up",
            &LockOptions::new().wait(Duration::from_millis(300)),
        )
        .await;
    assert!(
        matches!(missed, Err(Error::NotAcquired { .. })),
        "the warm-up lock is held: {missed:?}"
    );
    assert_eq!(
        warm.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let left = channels_until(&server, SETTLE, <[String]>::is_empty).await;
    assert!(left.is_empty(), "warm-up subscription left: {left:?}");

    let name = "leak:paused";
    let held = holder
        .lock_with(
            name,
            &LockOptions::new().fixed_lease(Duration::from_secs(3)),
        )
        .await
        .expect("lock");

    // On the paused server the waiter's first attempt times out, then its SUBSCRIBE does: it
    // polls instead, and its watch is gone at once (`watched_locks` goes 1 → 0).
    server.pause().expect("pause");
    let waiting = tokio::spawn(async move {
        waiter
            .lock_with(name, &LockOptions::new().wait(Duration::from_secs(10)))
            .await
    });
    watched_until(&waiter_backend, 1, Duration::from_secs(5)).await;
    watched_until(&waiter_backend, 0, Duration::from_secs(5)).await;
    server.resume().expect("resume");

    // The waiter still gets the lock (by polling) once the holder lets go.
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let guard = waiting
        .await
        .expect("waiter task")
        .expect("acquired after the release");
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(waiter_backend.watched_locks(), 0);

    // The backend is still alive: its notification connection must not hold the channel.
    let left = channels_until(&server, SETTLE, <[String]>::is_empty).await;
    assert!(
        left.is_empty(),
        "subscriptions left on the server: {left:?} (the timed-out SUBSCRIBE of {:?})",
        keys::channel(name)
    );
    drop(waiter_backend);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsubscribe_lost_before_a_reconnect_is_sent_again() {
    let server = RedisServer::start().expect("start redis-server");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let holder = Locker::new(backend(server.url()).await);
    let waiter_backend = backend(proxy.url()).await;
    let waiter = Locker::new(waiter_backend.clone());

    let name = "leak:reconnect";
    let channel = keys::channel(name);
    let held = holder
        .lock_with(
            name,
            &LockOptions::new().fixed_lease(Duration::from_secs(30)),
        )
        .await
        .expect("lock");
    let waiting = tokio::spawn(async move {
        waiter
            .lock_with(name, &LockOptions::new().wait(Duration::from_secs(30)))
            .await
    });
    let live = channels_until(&server, SETTLE, |channels| channels.contains(&channel)).await;
    assert_eq!(live, [channel], "the waiter never subscribed");

    // The waiter goes away while its UNSUBSCRIBE cannot reach the server; then the connection is
    // cut, and redis-rs re-subscribes the channel (which the server had confirmed) on the new one.
    proxy.set_fault(Fault::Blackhole);
    waiting.abort();
    let _ = waiting.await;
    assert_eq!(waiter_backend.watched_locks(), 0);
    sleep(COMMAND_TIMEOUT * 2).await;
    proxy.reset_connections();
    proxy.clear();

    let left = channels_until(&server, SETTLE, <[String]>::is_empty).await;
    assert!(
        left.is_empty(),
        "subscriptions left on the server: {left:?}"
    );
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    drop(waiter_backend);
}

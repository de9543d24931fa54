//! The fast lock's release announces itself only when someone waits (its waiting mark, see
//! `kind/fast.rs`): a release nobody waits for publishes nothing, and every waiter is still
//! woken by the release it waits for, not by its timer: in another client, several in one
//! client (one release wakes one of them, whose attempt marks the lock again for the others),
//! and a waiter whose lease is far shorter than the holder's (so its mark would lapse long
//! before the holder's lease ends). On a server with its own compare-and-delete (Valkey 9,
//! Redis 8.4) the release always announces and nothing is marked: the same waits must hold.
//!
//! Each waiter's timer would wait for the holder's lease, or for its own lease: the bounds
//! below are far shorter than either, and far longer than a notified hand-off takes.

use std::time::Duration;

use futures_util::StreamExt;
use lock_core::{Fencing, LockOptions, Locker, ReleaseOutcome};
use lock_redis::{Capability, LockKind, RedisBackend, keys};
use lock_testkit::RedisServer;
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, sleep, timeout};

async fn fast(url: String) -> Locker<RedisBackend> {
    let backend = RedisBackend::builder(url)
        .lock_kind(LockKind::Fast)
        .connect()
        .await
        .expect("connect");
    Locker::new(backend)
}

fn leased(lease: Duration) -> LockOptions {
    LockOptions::new().fixed_lease(lease)
}

/// Calls of `command` the server has run so far, inside scripts too (`INFO commandstats`).
async fn calls(raw: &mut MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |count| count.parse().unwrap())
}

async fn exists(raw: &mut MultiplexedConnection, key: &str) -> bool {
    let found: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(raw)
        .await
        .unwrap();
    found == 1
}

/// Waits until a waiter of `waiters` waits for `name`: its marked attempt has landed (the
/// mark exists), or with the native release (no mark) it has subscribed; at most 10 s.
async fn until_waiting(
    raw: &mut MultiplexedConnection,
    waiters: &Locker<RedisBackend>,
    name: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let native = native_release(waiters);
    let mark = keys::waiting_key(name);
    loop {
        let waiting = if native {
            waiters.backend().watched_locks() == 1
        } else {
            exists(raw, &mark).await
        };
        if waiting {
            break;
        }
        assert!(Instant::now() < deadline, "nobody waits for {name}");
        sleep(Duration::from_millis(10)).await;
    }
    if native {
        // Its attempt after subscribing.
        sleep(Duration::from_millis(200)).await;
    }
}

/// Whether the backend releases with the server's own compare-and-delete (Valkey 9, Redis
/// 8.4), which always announces and never marks.
fn native_release(locker: &Locker<RedisBackend>) -> bool {
    let capabilities = locker.backend().capabilities();
    capabilities.supports(Capability::DelIfEq) || capabilities.supports(Capability::DelEx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_nobody_waits_for_publishes_nothing() {
    let server = RedisServer::start().unwrap();
    let mut raw = server.connection().await;
    let mut listener = server.client().get_async_pubsub().await.unwrap();
    listener.subscribe(keys::channel("quiet")).await.unwrap();
    let locker = fast(server.url()).await;
    if native_release(&locker) {
        // The native release is a pipeline: it cannot make its announcement depend on the
        // mark, and announces every time (docs/redis-layout.md).
        let guard = locker.lock("quiet").await.unwrap();
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        let mut messages = listener.on_message();
        timeout(Duration::from_secs(2), messages.next())
            .await
            .expect("the native release announces itself");
        return;
    }
    let publishes = calls(&mut raw, "publish").await;
    for _ in 0..20 {
        let guard = locker
            .lock_with("quiet", &leased(Duration::from_secs(20)))
            .await
            .unwrap();
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
    assert_eq!(calls(&mut raw, "publish").await, publishes);
    let mut messages = listener.on_message();
    assert!(
        timeout(Duration::from_millis(300), messages.next())
            .await
            .is_err(),
        "a release nobody waited for was announced"
    );
    assert!(!exists(&mut raw, "quiet").await);
    assert!(!exists(&mut raw, &keys::waiting_key("quiet")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_another_client_is_woken_by_the_release() {
    woken_by_the_release(leased(Duration::from_secs(30))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_waiter_is_woken_by_the_release() {
    // Its attempts are the fenced-acquire script, which sets the mark itself.
    woken_by_the_release(leased(Duration::from_secs(30)).fenced()).await;
}

async fn woken_by_the_release<F: Fencing + 'static>(lease: LockOptions<F>) {
    let server = RedisServer::start().unwrap();
    let mut raw = server.connection().await;
    let holder = fast(server.url()).await;
    let waiter = fast(server.url()).await;
    let guard = holder.lock_with("busy", &lease).await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        let lease = lease.clone();
        async move {
            let guard = waiter.lock_with("busy", &lease).await.unwrap();
            let granted = Instant::now();
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            granted
        }
    });
    until_waiting(&mut raw, &waiter, "busy").await;
    let publishes = calls(&mut raw, "publish").await;
    let released = Instant::now();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    let granted = timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was not woken by the release")
        .unwrap();
    assert!(
        granted - released < Duration::from_secs(5),
        "woken after {:?}: by its timer, not the release",
        granted - released
    );
    assert!(calls(&mut raw, "publish").await > publishes);
    // The waiter's own release deleted the mark its attempt set.
    assert!(!exists(&mut raw, "busy").await);
    assert!(!exists(&mut raw, &keys::waiting_key("busy")).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_client_are_woken_in_turn() {
    let server = RedisServer::start().unwrap();
    let mut raw = server.connection().await;
    let holder = fast(server.url()).await;
    let waiters = fast(server.url()).await;
    let lease = leased(Duration::from_secs(30));
    let guard = holder.lock_with("line", &lease).await.unwrap();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let waiters = waiters.clone();
            let lease = lease.clone();
            tokio::spawn(async move {
                // Held to the end of the scope, as applications hold it.
                let _guard = waiters.lock_with("line", &lease).await.unwrap();
                sleep(Duration::from_millis(20)).await;
            })
        })
        .collect();
    until_waiting(&mut raw, &waiters, "line").await;
    // Every task is registered and has made its marked attempt by now.
    sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    for task in tasks {
        timeout(Duration::from_secs(20), task)
            .await
            .expect("a waiter was left asleep")
            .unwrap();
    }
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "four hand-offs took {:?}: some waiter slept to its timer",
        released.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while exists(&mut raw, "line").await || exists(&mut raw, &keys::waiting_key("line")).await {
        assert!(Instant::now() < deadline, "the lock or its mark was left");
        sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_with_a_short_lease_is_woken_by_a_long_holders_release() {
    let server = RedisServer::start().unwrap();
    let mut raw = server.connection().await;
    let holder = fast(server.url()).await;
    let waiter = fast(server.url()).await;
    let guard = holder
        .lock_with("long", &leased(Duration::from_secs(120)))
        .await
        .unwrap();
    // The waiter's mark lives two of its leases (8 s), far less than the holder's 120 s; it
    // must look again, and mark again, before its mark lapses.
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            let guard = waiter
                .lock_with("long", &leased(Duration::from_secs(4)))
                .await
                .unwrap();
            let granted = Instant::now();
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            granted
        }
    });
    until_waiting(&mut raw, &waiter, "long").await;
    // Past the first mark's end (8 s) and between two of the waiter's looks (every 4 s at
    // most): a release the waiter is not told of is found only up to 4 s later.
    sleep(Duration::from_millis(10_000)).await;
    let released = Instant::now();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    let granted = timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter never got the lock")
        .unwrap();
    assert!(
        granted - released < Duration::from_millis(1_500),
        "woken after {:?}: by its timer, not the release",
        granted - released
    );
}

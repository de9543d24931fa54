//! The fast lock's release announces itself only when someone waits (its waiting mark, see
//! `kind/fast.rs`): a release nobody waits for publishes nothing, and every waiter is still
//! woken by the release it waits for, not by its timer: in another client (plain and fenced),
//! and several in one client (one release wakes one of them; when it wins, its own release
//! announces itself for the others). On a server with its own compare-and-delete (Valkey 9,
//! Redis 8.4) the release always announces: the same waits must hold, and the marks the
//! waiters set are left to lapse.
//!
//! Each waiter's timer would wait for the holder's lease (30 s): the bounds below are far
//! shorter, and far longer than a notified hand-off takes.

use std::time::Duration;

use futures_util::StreamExt;
use lock_core::{
    AcquireOutcome, AcquireRequest, Fencing, LockBackend, LockOptions, Locker, Owner,
    ReleaseOutcome,
};
use lock_redis::{Capability, LockKind, RedisBackend, keys};
use lock_testkit::RedisServer;
use lock_testkit::commandstats::command_calls;
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

async fn exists(raw: &mut MultiplexedConnection, key: &str) -> bool {
    let found: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(raw)
        .await
        .unwrap();
    found == 1
}

/// Whether the backend releases with the server's own compare-and-delete (Valkey 9, Redis
/// 8.4), which always announces and leaves the marks to lapse.
fn native_release(locker: &Locker<RedisBackend>) -> bool {
    let capabilities = locker.backend().capabilities();
    capabilities.supports(Capability::DelIfEq) || capabilities.supports(Capability::DelEx)
}

/// Waits until a waiter waits for `name`: its attempt after registering found the lock held
/// and marked it; at most 10 s.
async fn until_marked(raw: &mut MultiplexedConnection, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !exists(raw, &keys::waiting_key(name)).await {
        assert!(Instant::now() < deadline, "nobody waits for {name}");
        sleep(Duration::from_millis(10)).await;
    }
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
    let publishes = command_calls(&mut raw, "publish").await;
    for _ in 0..20 {
        let guard = locker
            .lock_with("quiet", &leased(Duration::from_secs(20)))
            .await
            .unwrap();
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
    assert_eq!(command_calls(&mut raw, "publish").await, publishes);
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
    woken_by_the_release("busy", leased(Duration::from_secs(30))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_waiter_is_woken_by_the_release() {
    // Its attempts are the fenced-acquire script, which sets the mark itself; a name with its
    // own hash tag, whose channel the release script derives without adding braces.
    woken_by_the_release("{t}:busy", leased(Duration::from_secs(30)).fenced()).await;
}

async fn woken_by_the_release<F: Fencing + 'static>(name: &'static str, lease: LockOptions<F>) {
    let server = RedisServer::start().unwrap();
    let mut raw = server.connection().await;
    let holder = fast(server.url()).await;
    let waiter = fast(server.url()).await;
    let guard = holder.lock_with(name, &lease).await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        let lease = lease.clone();
        async move {
            let guard = waiter.lock_with(name, &lease).await.unwrap();
            let granted = Instant::now();
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            granted
        }
    });
    until_marked(&mut raw, name).await;
    let publishes = command_calls(&mut raw, "publish").await;
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
    assert!(command_calls(&mut raw, "publish").await > publishes);
    assert!(!exists(&mut raw, name).await);
    // The scripted release that announced deleted the mark with the lock.
    if !native_release(&holder) {
        assert!(!exists(&mut raw, &keys::waiting_key(name)).await);
    }
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
    until_marked(&mut raw, "line").await;
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
    let native = native_release(&holder);
    let deadline = Instant::now() + Duration::from_secs(5);
    while exists(&mut raw, "line").await
        || (!native && exists(&mut raw, &keys::waiting_key("line")).await)
    {
        assert!(Instant::now() < deadline, "the lock or its mark was left");
        sleep(Duration::from_millis(20)).await;
    }
}

/// An attempt of a caller that waits reports at most half a mark's life (30 s) as the time
/// left, whether or not a waiter of its client watches the name: a composite (RedLock,
/// MultiLock) whose subscription to one node failed sleeps for the longest time its nodes
/// report, and a 120 s lease there must not make it sleep past the marks it set on the others.
/// A single attempt (`try_lock`) reports the lease as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_attempt_looks_again_before_its_marks_lapse() {
    let server = RedisServer::start().unwrap();
    let holder = fast(server.url()).await;
    let _held = holder
        .lock_with("long", &leased(Duration::from_secs(120)))
        .await
        .unwrap();
    let backend = fast(server.url()).await.backend().clone();
    let owner = Owner::new().field(backend.client_id());
    for waits in [true, false] {
        let request = AcquireRequest {
            name: "long",
            owner_field: &owner,
            lease: Duration::from_secs(10),
            fencing: false,
            known_holds: 0,
            waits,
        };
        let AcquireOutcome::Held { ttl: Some(ttl) } = backend.try_acquire(request).await.unwrap()
        else {
            panic!("held, with a TTL");
        };
        if waits {
            assert!(ttl <= Duration::from_secs(30), "{ttl:?}");
        } else {
            assert!(ttl > Duration::from_secs(100), "{ttl:?}");
        }
    }
}

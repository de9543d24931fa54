//! Compile-time checks that the public types are `Send + Sync` and that the futures of the lock
//! API are `Send`, so they can be used from `tokio::spawn` on a multi-thread runtime (in the style
//! of tokio's `async_send_sync` test). Most checks are `const` items and functions that never run:
//! if one of them stops holding, this file stops compiling.
//!
//! Each feature's types are checked under that feature (CI builds this file with no default
//! features and with each feature alone); `tls-rustls` adds no type of its own and turns on
//! `redis`, whose checks then apply.
#![allow(dead_code)]

use std::sync::Arc;

use distlock::backend::{DynLockBackend, LockBackend, ReleaseHub, ReleaseWatch};
use distlock::{
    CountDownLatch, Election, Error, FairLock, LeaderObserver, Leadership, LeaseLoss, LockGuard,
    LockOptions, LockState, Locker, MemoryBackend, Owner, Permits, ReadWriteLock, ReleaseOutcome,
    Semaphore,
};

const fn assert_send_sync<T: Send + Sync + ?Sized>() {}
const fn assert_send_sync_static<T: Send + Sync + 'static>() {}
fn assert_send<T: Send>(_: &T) {}

// The Redis backend (feature `redis`).
#[cfg(feature = "redis")]
const _: () = {
    use distlock::{NotificationMode, RedisBackend, RedisBackendBuilder, RedisLocker};
    assert_send_sync_static::<Locker<RedisBackend>>();
    assert_send_sync_static::<RedisLocker>();
    assert_send_sync_static::<LockGuard<RedisBackend>>();
    assert_send_sync_static::<RedisBackend>();
    assert_send_sync_static::<RedisBackendBuilder>();
    assert_send_sync_static::<NotificationMode>();
    assert_send_sync_static::<FairLock<RedisBackend>>();
    assert_send_sync_static::<ReadWriteLock<RedisBackend>>();
    assert_send_sync_static::<Permits<RedisBackend>>();
    assert_send_sync_static::<Semaphore<RedisBackend>>();
    assert_send_sync_static::<CountDownLatch<RedisBackend>>();
    assert_send_sync_static::<Election<RedisBackend>>();
    assert_send_sync_static::<Leadership<RedisBackend>>();
    assert_send_sync_static::<LeaderObserver<RedisBackend>>();
};

// The backend-independent types (every build).
const _: () = assert_send_sync_static::<Error>();
const _: () = assert_send_sync_static::<LockOptions>();
const _: () = assert_send_sync_static::<Owner>();
const _: () = assert_send_sync_static::<ReleaseOutcome>();
const _: () = assert_send_sync_static::<LockState>();
const _: () = assert_send_sync_static::<LeaseLoss>();
const _: () = assert_send_sync_static::<ReleaseHub>();
const _: () = assert_send_sync_static::<ReleaseWatch>();
const _: () = assert_send_sync_static::<Locker<MemoryBackend>>();
const _: () = assert_send_sync_static::<LockGuard<MemoryBackend>>();
const _: () = assert_send_sync_static::<FairLock<MemoryBackend>>();
const _: () = assert_send_sync_static::<ReadWriteLock<MemoryBackend>>();
const _: () = assert_send_sync_static::<Permits<MemoryBackend>>();
const _: () = assert_send_sync_static::<Semaphore<MemoryBackend>>();
const _: () = assert_send_sync_static::<CountDownLatch<MemoryBackend>>();
const _: () = assert_send_sync_static::<Election<MemoryBackend>>();
const _: () = assert_send_sync_static::<Leadership<MemoryBackend>>();
const _: () = assert_send_sync_static::<LeaderObserver<MemoryBackend>>();
const _: () = assert_send_sync_static::<Locker<Arc<dyn DynLockBackend>>>();
const _: () = assert_send_sync::<dyn DynLockBackend>();

// The composites (features `multi`, `redlock`).
#[cfg(feature = "multi")]
const _: () = {
    use distlock::MultiLock;
    use distlock::multi::{AllNodes, CompositeBuilder};
    assert_send_sync_static::<MultiLock>();
    assert_send_sync_static::<Locker<MultiLock>>();
    assert_send_sync_static::<LockGuard<MultiLock>>();
    assert_send_sync_static::<CompositeBuilder<AllNodes>>();
};
#[cfg(feature = "redlock")]
const _: () = {
    use distlock::RedLock;
    use distlock::redlock::{CompositeBuilder, Majority};
    assert_send_sync_static::<RedLock>();
    assert_send_sync_static::<Locker<RedLock>>();
    assert_send_sync_static::<LockGuard<RedLock>>();
    assert_send_sync_static::<CompositeBuilder<Majority>>();
};

/// The futures of the Redis locker are `Send`. Never run: it only has to compile.
#[cfg(feature = "redis")]
async fn redis_futures_are_send(locker: distlock::RedisLocker) {
    use std::time::Duration;

    use distlock::RedisBackend;

    assert_send(&distlock::connect("redis://127.0.0.1/"));
    assert_send(&RedisBackend::connect("redis://127.0.0.1/"));
    assert_send(&RedisBackend::builder("redis://127.0.0.1/").connect());

    let lock = locker.lock("x");
    assert_send(&lock);
    let guard = lock.await.expect("compile-only");
    assert_send(&locker.try_lock("x"));
    assert_send(&locker.lock_with("x", &LockOptions::new()));
    assert_send(&locker.unlock("x", Owner::new()));
    assert_send(&locker.force_unlock("x"));
    assert_send(&locker.state("x"));
    assert_send(&locker.is_locked("x"));
    assert_send(&guard.lost());
    assert_send(&guard.extend(Duration::from_secs(1)));
    assert_send(&guard.release());

    // Every primitive's handle makes `Send` futures too.
    let fair = locker.fair("x").expect("compile-only");
    assert_send(&fair.lock());
    assert_send(&fair.state());
    let rw = locker.read_write("x").expect("compile-only");
    assert_send(&rw.read());
    assert_send(&rw.write());
    let permits = locker.permits("x").expect("compile-only");
    assert_send(&permits.acquire());
    let semaphore = locker.semaphore("x").expect("compile-only");
    assert_send(&semaphore.acquire(1));
    let latch = locker.latch("x").expect("compile-only");
    assert_send(&latch.wait());
    let election = locker.election("x").expect("compile-only");
    assert_send(&election.campaign("v"));
    let mut observer = election.observe();
    assert_send(&observer.changed());
}

/// The lock API of MultiLock makes `Send` futures, and so does connecting one (with `redis`).
/// Never run.
#[cfg(feature = "multi")]
async fn multi_futures_are_send(multi: Locker<distlock::MultiLock>) {
    #[cfg(feature = "redis")]
    assert_send(&distlock::connect_multi(&["redis://127.0.0.1:6379/"]));
    generic_futures_are_send(multi).await;
}

/// The lock API of RedLock makes `Send` futures, and so does connecting one (with `redis`).
/// Never run.
#[cfg(feature = "redlock")]
async fn redlock_futures_are_send(redlock: Locker<distlock::RedLock>) {
    #[cfg(feature = "redis")]
    assert_send(&distlock::connect_redlock(&["redis://127.0.0.1:6379/"]));
    generic_futures_are_send(redlock).await;
}

/// The same holds for any backend, not only the concrete ones. Never run.
async fn generic_futures_are_send<B: LockBackend>(locker: Locker<B>) {
    let lock = locker.lock("x");
    assert_send(&lock);
    let guard = lock.await.expect("compile-only");
    assert_send(&locker.lock_with("x", &LockOptions::new()));
    assert_send(&guard.lost());
    assert_send(&guard.release());
}

/// A guard can be held across `.await` points inside a spawned task and released from another
/// task; this runs for real against the in-memory backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_futures_run_on_spawned_tasks() {
    let locker = Locker::new(MemoryBackend::new());
    let guard = tokio::spawn({
        let locker = locker.clone();
        async move {
            let guard = locker.lock("send-sync").await.expect("lock");
            tokio::task::yield_now().await;
            guard
        }
    })
    .await
    .expect("task");
    let outcome = tokio::spawn(async move { guard.release().await })
        .await
        .expect("task")
        .expect("release");
    assert_eq!(outcome, ReleaseOutcome::Released);
    assert!(!locker.is_locked("send-sync").await.expect("state"));
}

/// Every lock future can be spawned, which asks the compiler for its whole layout: a future
/// nested more deeply than rustc's default recursion limit (128) builds as an `async fn`'s
/// local but fails where it is spawned, in the application ("queries overflow the depth
/// limit"). The spawns are compiled, never run (the branch is opaque to the compiler, and no
/// locker is ever made). With `#![recursion_limit = "106"]` this file fails to build and with
/// 110 it builds (so the deepest future is 18–21 levels inside the default limit).
#[test]
fn every_lock_future_can_be_spawned() {
    #[cfg(feature = "redis")]
    if let Some(locker) = std::hint::black_box(None::<distlock::RedisLocker>) {
        spawn_every_redis_future(locker);
    }
    #[cfg(feature = "multi")]
    if let Some(locker) = std::hint::black_box(None::<Locker<distlock::MultiLock>>) {
        spawn_lock_futures(locker);
    }
    #[cfg(feature = "redlock")]
    if let Some(locker) = std::hint::black_box(None::<Locker<distlock::RedLock>>) {
        spawn_lock_futures(locker);
    }
    if let Some(locker) = std::hint::black_box(None::<Locker<Arc<dyn DynLockBackend>>>) {
        spawn_lock_futures(locker);
    }
}

/// Spawns the lock, release and extend futures of any backend's locker.
fn spawn_lock_futures<B: LockBackend>(locker: Locker<B>) {
    use std::time::Duration;

    let other = locker.clone();
    tokio::spawn(async move { other.try_lock("x").await });
    let other = locker.clone();
    tokio::spawn(async move { other.unlock("x", Owner::new()).await });
    tokio::spawn(async move {
        let guard = locker.lock_with("x", &LockOptions::new()).await?;
        guard.extend(Duration::from_secs(1)).await?;
        guard.release().await
    });
}

/// Spawns the futures of every primitive of the Redis locker.
#[cfg(feature = "redis")]
fn spawn_every_redis_future(locker: distlock::RedisLocker) {
    spawn_lock_futures(locker.clone());
    let handle = locker.fair("x").expect("compile-only");
    tokio::spawn(async move { handle.lock().await?.release().await });
    let handle = locker.read_write("x").expect("compile-only");
    let writer = handle.clone();
    tokio::spawn(async move { handle.read().await?.release().await });
    tokio::spawn(async move { writer.write().await?.release().await });
    let handle = locker.permits("x").expect("compile-only");
    tokio::spawn(async move { handle.acquire().await?.release().await });
    let handle = locker.semaphore("x").expect("compile-only");
    tokio::spawn(async move { handle.acquire(1).await });
    let handle = locker.latch("x").expect("compile-only");
    tokio::spawn(async move { handle.wait().await });
    let handle = locker.election("x").expect("compile-only");
    tokio::spawn(async move { handle.campaign("v").await });
}

//! The loop applications write most — lock, work, let the guard drop at the end of the block,
//! lock again at once — on every kind of lock, with another client asking for the same lock
//! while it runs (see `lock_testkit::relock`).
//!
//! Each lock of the loop must be a fresh hold (`hold_count() == 1`): the release of the guard
//! just dropped runs before the owner's next call on the name. And the other client must get
//! the lock while the loop runs: on a plain lock at one of the loop's releases (it races the
//! loop's next attempt, so within a few jobs), on a fair lock at the loop's next release (the
//! loop's next attempt queues behind it).
//!
//! `DISTLOCK_RELOCK_ITERATIONS` sets the loop's length (default 200; the figure is
//! 1,000).

use std::sync::Arc;
use std::time::Duration;

use lock_core::{DynLockBackend, FairBackend, LockBackend, Locker, MemoryBackend};
use lock_multi::{Composite, RedLock};
use lock_redis::{LockKind, RedisBackend};
use lock_testkit::relock::{RelockPlan, RelockReport, relock_loop};
use lock_testkit::{RedisNodes, RedisServer};

fn iterations() -> usize {
    std::env::var("DISTLOCK_RELOCK_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

/// The longest the other client may wait for a lock the loop releases every job (5 ms): the
/// figure the loop must meet on a quiet machine, with room for debug builds.
const LONGEST_WAIT: Duration = Duration::from_millis(250);

/// The longest wait allowed for a loop that took `elapsed`: [`LONGEST_WAIT`], or a quarter of
/// the loop on a machine so loaded that the loop itself ran slow (CI saw a wait of 287 ms in a
/// 1.36 s loop of 200 jobs on the in-memory store). A starved client waits about the whole
/// loop, which either bound still refuses.
fn longest_wait_allowed(elapsed: Duration) -> Duration {
    LONGEST_WAIT.max(elapsed / 4)
}

fn check(kind: &str, report: &RelockReport) {
    eprintln!("{kind}: {report}");
    assert_eq!(report.reentries, 0, "{kind}: {report}");
    assert_eq!(report.other_gave_up, 0, "{kind}: {report}");
    assert!(
        !report.other_waits.is_empty(),
        "{kind}: the other client asked at least once: {report}"
    );
    let allowed = longest_wait_allowed(report.elapsed);
    assert!(
        report.longest_wait() <= allowed,
        "{kind}: the other client got the lock within {allowed:?}: {report}"
    );
}

async fn run<B: LockBackend, O: LockBackend>(
    kind: &str,
    looping: Locker<B>,
    other: Locker<O>,
) -> RelockReport {
    let plan = RelockPlan::new(&format!("relock:{kind}"), iterations());
    let report = relock_loop(&looping, &other, &plan).await;
    check(kind, &report);
    // The last guard's release runs in the background after the loop: give it a moment.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while looping.is_locked(&plan.name).await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{kind}: the lock is left 2 s after the loop"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    let store = MemoryBackend::new();
    let other = store.new_client();
    run("memory", Locker::new(store), Locker::new(other)).await;
}

async fn redis(server: &RedisServer, kind: LockKind) -> RedisBackend {
    RedisBackend::builder(server.url())
        .lock_kind(kind)
        .connect()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_reentrant() {
    let server = RedisServer::start().expect("redis-server");
    let looping = Locker::new(redis(&server, LockKind::Reentrant).await);
    let other = Locker::new(redis(&server, LockKind::Reentrant).await);
    run("reentrant", looping, other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fast() {
    let server = RedisServer::start().expect("redis-server");
    let looping = Locker::new(redis(&server, LockKind::Fast).await);
    let other = Locker::new(redis(&server, LockKind::Fast).await);
    run("fast", looping, other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fair() {
    let server = RedisServer::start().expect("redis-server");
    let looping = Locker::new(redis(&server, LockKind::Reentrant).await.fair_side());
    let other = Locker::new(redis(&server, LockKind::Reentrant).await.fair_side());
    run("fair", looping, other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_three() {
    let nodes = RedisNodes::start(3).expect("three redis-server nodes");
    let mut clients = Vec::new();
    for _ in 0..2 {
        let mut backends: Vec<Arc<dyn DynLockBackend>> = Vec::new();
        for url in nodes.urls() {
            backends.push(Arc::new(
                RedisBackend::connect(&url).await.expect("connect"),
            ));
        }
        let redlock: RedLock = Composite::new(backends).expect("three nodes");
        clients.push(Locker::new(redlock));
    }
    let other = clients.pop().unwrap();
    let looping = clients.pop().unwrap();
    run("redlock", looping, other).await;
}

/// A PostgreSQL server with the distlock schema, and two backends on it.
async fn postgres_pair() -> (
    lock_testkit::PostgresServer,
    lock_postgres::PostgresBackend,
    lock_postgres::PostgresBackend,
) {
    let server = lock_testkit::PostgresServer::start().expect("PostgreSQL");
    let connect = || async {
        lock_postgres::PostgresBackend::builder(&server.url())
            .expect("url")
            .install_schema(true)
            .connect()
            .await
            .expect("connect")
    };
    let (looping, other) = (connect().await, connect().await);
    (server, looping, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let (_server, looping, other) = postgres_pair().await;
    run("postgres", Locker::new(looping), Locker::new(other)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fair() {
    let (_server, looping, other) = postgres_pair().await;
    run(
        "postgres fair",
        Locker::new(looping.fair_side()),
        Locker::new(other.fair_side()),
    )
    .await;
}

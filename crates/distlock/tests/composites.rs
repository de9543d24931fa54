//! `connect_multi` and `connect_redlock` against three real, independent `redis-server`
//! processes started by the testkit.
#![cfg(all(feature = "multi", feature = "redlock", feature = "redis"))]

use distlock::{Error, LockOptions, Owner, ReleaseOutcome};
use lock_testkit::RedisNodes;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_redlock_locks_over_a_majority() {
    let nodes = RedisNodes::start(3).expect("start 3 redis-server nodes");
    let locker = distlock::connect_redlock(&nodes.urls())
        .await
        .expect("connect");
    assert_eq!(locker.backend().nodes().len(), 3);
    assert_eq!(locker.backend().required(), 2);

    let guard = locker.lock("composites:redlock").await.expect("lock");
    let other = LockOptions::new().no_wait().owner(Owner::new());
    let second = locker.lock_with("composites:redlock", &other).await;
    assert!(
        matches!(second, Err(Error::NotAcquired { .. })),
        "another owner got a held lock: {second:?}"
    );
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(!locker.is_locked("composites:redlock").await.expect("state"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_multi_locks_on_every_node() {
    let nodes = RedisNodes::start(3).expect("start 3 redis-server nodes");
    let urls = nodes.urls();
    let locker = distlock::connect_multi(&urls).await.expect("connect");
    assert_eq!(locker.backend().required(), 3);

    let guard = locker.lock("composites:multi").await.expect("lock");
    // Every node holds it: a single-node locker on any of them sees it taken.
    for url in &urls {
        let single = distlock::connect(url).await.expect("connect one node");
        assert!(
            single.is_locked("composites:multi").await.expect("state"),
            "{url}"
        );
    }
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(!locker.is_locked("composites:multi").await.expect("state"));
}

/// Whether the call was refused as a bad configuration.
fn invalid<T>(result: distlock::Result<T>) -> bool {
    matches!(result, Err(Error::InvalidConfig { .. }))
}

#[tokio::test]
async fn bad_node_lists_are_refused_before_any_connection() {
    assert!(invalid(distlock::connect_redlock(&[] as &[&str]).await));
    assert!(invalid(distlock::connect_multi(&[] as &[&str]).await));
    // Nothing listens on this address: an attempt to connect would fail with another error.
    let twice = ["redis://127.0.0.1:1/", "redis://127.0.0.1:1/"];
    assert!(invalid(distlock::connect_redlock(&twice).await));
    assert!(invalid(distlock::connect_multi(&twice).await));
}

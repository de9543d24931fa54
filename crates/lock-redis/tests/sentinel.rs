//! Sentinel mode: the conformance suite and the semaphore, lease-bound permit, latch, read-write
//! lock, fair lock and election suites (and the lock suite on the write side and on the fair
//! side) on the primary of a Sentinel service (one group, 1 primary + 1 replica + 3 Sentinels,
//! shared by the cases), and locks held across a failover.
#![cfg(feature = "sentinel")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockOptions, Locker, ReleaseOutcome};
use lock_redis::{LockKind, NotificationMode, RedisBackend};
use lock_testkit::conformance::Harness;
use lock_testkit::{SentinelGroup, SharedFixture};

static SHARED: SharedFixture<SentinelGroup> = SharedFixture::new();

fn shared_group() -> Arc<SentinelGroup> {
    SHARED.get_or_start(|| SentinelGroup::start(1).expect("start a Sentinel group"))
}

struct Sentinel {
    group: Arc<SentinelGroup>,
    kind: LockKind,
}

async fn backend(group: &SentinelGroup, kind: LockKind) -> RedisBackend {
    RedisBackend::builder(lock_redis::RedisTarget::sentinel(
        group.sentinel_urls(),
        group.service(),
    ))
    .lock_kind(kind)
    .notifications(NotificationMode::PubSub)
    .command_timeout(Duration::from_secs(2))
    .connect()
    .await
    .expect("connect through the Sentinels")
}

impl Harness for Sentinel {
    type Backend = RedisBackend;

    async fn client(&self) -> RedisBackend {
        backend(&self.group, self.kind).await
    }
}

fn start(kind: LockKind) -> Sentinel {
    Sentinel {
        group: shared_group(),
        kind,
    }
}

/// Every suite behind the Sentinels, on the reentrant lock.
mod reentrant {
    use super::*;
    lock_testkit::family_conformance_tests!(start(LockKind::Reentrant));
}

mod fast {
    use super::*;
    lock_testkit::conformance_tests!(start(LockKind::Fast));
}

/// A lock held under the watchdog while the Sentinels fail over (coordinated: the replica has
/// every write): renewals follow the new primary, the lease is never lost, the release is a
/// release, and a waiter waiting through it is woken by it.
#[test]
fn locks_follow_a_failover() {
    lock_testkit::conformance::run(async {
        let mut group = SentinelGroup::start(1).expect("start a Sentinel group");
        for (kind, name) in [
            (LockKind::Reentrant, "sentinel:reentrant"),
            (LockKind::Fast, "sentinel:fast"),
        ] {
            let holder = Locker::new(backend(&group, kind).await);
            let waiter = Locker::new(backend(&group, kind).await);
            let held = holder
                .lock_with(
                    name,
                    &LockOptions::new().watchdog_lease(Duration::from_secs(6)),
                )
                .await
                .expect("lock");
            let waiting = tokio::spawn(async move {
                let guard = waiter
                    .lock_with(name, &LockOptions::new().wait(Duration::from_secs(30)))
                    .await;
                (guard, Instant::now())
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            let old = group.primary().expect("primary");
            tokio::task::block_in_place(|| group.failover().expect("fail over"));
            assert_ne!(group.primary().expect("primary"), old);
            // Past a renewal period (2 s), on the new primary.
            tokio::time::sleep(Duration::from_millis(2500)).await;
            if held.is_lost() {
                let loss = held.lost().await;
                let state = holder.state(name).await;
                panic!("{kind:?}: lease lost across the failover: {loss:?}; state now {state:?}");
            }
            assert!(!waiting.is_finished(), "the waiter still waits");
            let released_at = Instant::now();
            assert_eq!(
                held.release().await.expect("release"),
                ReleaseOutcome::Released
            );
            let (guard, acquired_at) = waiting.await.expect("waiter task");
            let guard = guard.expect("the waiter gets the lock");
            let woke_after = acquired_at.duration_since(released_at);
            assert!(
                woke_after < Duration::from_secs(2),
                "woken by the release, not its timer: {woke_after:?}"
            );
            assert_eq!(
                guard.release().await.expect("release"),
                ReleaseOutcome::Released
            );
        }
        killed_primary(&mut group).await;
    });
}

/// The primary is killed (SIGKILL) while a lock is held (its grant on the replica already) and
/// a waiter waits: the Sentinels notice within `down-after` (1 s) and promote the replica. New
/// grants work again soon after the promotion, the held lock keeps its lease, and its release
/// wakes the waiter at once: its notification connection moved to the new primary.
async fn killed_primary(group: &mut SentinelGroup) {
    let locker = Locker::new(backend(group, LockKind::Reentrant).await);
    let waiter = Locker::new(backend(group, LockKind::Reentrant).await);
    let held = locker
        .lock_with(
            "sentinel:killed",
            &LockOptions::new().watchdog_lease(Duration::from_secs(6)),
        )
        .await
        .expect("lock");
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock_with(
                "sentinel:killed",
                &LockOptions::new().wait(Duration::from_secs(60)),
            )
            .await;
        (guard, Instant::now())
    });
    let old = group.primary().expect("primary");
    // The grant has reached the replica: the promotion keeps it.
    let replica = (0..group.len()).find(|&node| node != old && group.node(node).pid().is_some());
    let replica = replica.expect("a live replica");
    let mut replica = group
        .node(replica)
        .client()
        .get_connection()
        .expect("connect");
    while !redis::cmd("EXISTS")
        .arg("sentinel:killed")
        .query::<bool>(&mut replica)
        .expect("EXISTS")
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let killed_at = Instant::now();
    tokio::task::block_in_place(|| group.node_mut(old).kill().expect("kill the primary"));
    // Keep asking for fresh locks until one is granted.
    let mut attempt = 0;
    let granted_at = loop {
        attempt += 1;
        let name = format!("sentinel:after-kill:{attempt}");
        let options = LockOptions::new()
            .fixed_lease(Duration::from_secs(5))
            .no_wait();
        if let Ok(Ok(guard)) = tokio::time::timeout(
            Duration::from_millis(500),
            locker.lock_with(&name, &options),
        )
        .await
        {
            let at = Instant::now();
            assert_eq!(
                guard.release().await.expect("release"),
                ReleaseOutcome::Released
            );
            break at;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "no grant within 30 s of killing the primary"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let promoted = tokio::task::block_in_place(|| group.wait_new_primary(old)).expect("promotion");
    assert_ne!(promoted, old);
    let grants_after = granted_at.duration_since(killed_at);
    eprintln!(
        "killed primary: new grants after {grants_after:?}; held lease lost: {}",
        held.is_lost()
    );
    // The goal: down-after (1 s) + the failover (a few seconds here) + 1 s.
    assert!(
        grants_after < lock_testkit::sentinel::DOWN_AFTER + Duration::from_secs(10),
        "new grants took {grants_after:?}"
    );
    assert!(!held.is_lost(), "the lease survived the promotion");
    assert!(!waiting.is_finished(), "the waiter still waits");
    // The waiter listens on the new primary (not only polls): its subscription moved there.
    let channel = lock_redis::keys::channel("sentinel:killed");
    let mut primary = group
        .node(promoted)
        .client()
        .get_connection()
        .expect("connect");
    let subscribed_by = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, subscribers): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut primary)
            .expect("PUBSUB NUMSUB");
        if subscribers > 0 {
            break;
        }
        assert!(
            Instant::now() < subscribed_by,
            "no subscriber of the lock's channel on the new primary"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released_at = Instant::now();
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let (guard, acquired_at) = waiting.await.expect("waiter task");
    let guard = guard.expect("the waiter gets the lock");
    let woke_after = acquired_at.duration_since(released_at);
    assert!(
        woke_after < Duration::from_secs(2),
        "woken by the release on the new primary, not its timer: {woke_after:?}"
    );
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(!locker.is_locked("sentinel:killed").await.expect("state"));
}

//! Sentinel mode: the conformance suite on the primary of a Sentinel service (one group, 1
//! primary + 1 replica + 3 Sentinels, shared by the cases), and locks held across a failover.
#![cfg(feature = "sentinel")]

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use lock_core::{LockOptions, Locker, ReleaseOutcome};
use lock_redis::{LockKind, NotificationMode, RedisBackend};
use lock_testkit::SentinelGroup;
use lock_testkit::conformance::Harness;

static SHARED: Mutex<Weak<SentinelGroup>> = Mutex::new(Weak::new());

fn shared_group() -> Arc<SentinelGroup> {
    let mut shared = SHARED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(group) = shared.upgrade() {
        return group;
    }
    let group = Arc::new(SentinelGroup::start(1).expect("start a Sentinel group"));
    *shared = Arc::downgrade(&group);
    group
}

struct Sentinel {
    group: Arc<SentinelGroup>,
    kind: LockKind,
}

async fn backend(group: &SentinelGroup, kind: LockKind) -> RedisBackend {
    RedisBackend::sentinel_builder(group.sentinel_urls(), group.service())
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

mod reentrant {
    use super::*;
    lock_testkit::conformance_tests!(start(LockKind::Reentrant));
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
                .expect("lock")
                .expect("granted");
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
            let guard = guard.expect("lock").expect("the waiter gets the lock");
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
    });
}

//! The conformance suite on a Redis Cluster (3 primaries × 1 replica), for both lock kinds,
//! with pub/sub notifications and with polling.
//!
//! One cluster (6 processes) serves every case of this file: cases use fresh lock names, and
//! the cluster is started by the first case and stopped when the last one running lets go.
#![cfg(feature = "cluster")]

use std::sync::{Arc, Mutex, Weak};

use lock_redis::{LockKind, NotificationMode, RedisBackend};
use lock_testkit::RedisCluster;
use lock_testkit::conformance::Harness;

static SHARED: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());

fn shared_cluster() -> Arc<RedisCluster> {
    let mut shared = SHARED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(RedisCluster::start(3, 1).expect("start a cluster"));
    *shared = Arc::downgrade(&cluster);
    cluster
}

struct Cluster {
    cluster: Arc<RedisCluster>,
    notifications: NotificationMode,
    kind: LockKind,
}

impl Harness for Cluster {
    type Backend = RedisBackend;

    async fn client(&self) -> RedisBackend {
        RedisBackend::cluster_builder(self.cluster.urls())
            .notifications(self.notifications)
            .lock_kind(self.kind)
            .connect()
            .await
            .expect("connect to the test cluster")
    }
}

fn start(notifications: NotificationMode, kind: LockKind) -> Cluster {
    Cluster {
        cluster: shared_cluster(),
        notifications,
        kind,
    }
}

const POLL: NotificationMode = NotificationMode::Polling(std::time::Duration::from_millis(50));

mod pubsub {
    use super::*;
    lock_testkit::conformance_tests!(start(NotificationMode::PubSub, LockKind::Reentrant));
}

mod polling {
    use super::*;
    lock_testkit::conformance_tests!(start(POLL, LockKind::Reentrant));
}

mod fast_pubsub {
    use super::*;
    lock_testkit::conformance_tests!(start(NotificationMode::PubSub, LockKind::Fast));
}

/// Watchdog renewals of many locks in many slots (one renewal batch): each lock's renewal goes
/// to its own slot's primary, and every lease outlives several renewal periods.
#[test]
fn renewals_span_slots() {
    use lock_core::{LockOptions, Locker};
    use std::time::Duration;

    lock_testkit::conformance::run(async {
        let harness = start(NotificationMode::PubSub, LockKind::Reentrant);
        let holder = Locker::new(harness.client().await);
        let observer = Locker::new(harness.client().await);
        let names: Vec<String> = (0..40)
            .map(|i| lock_testkit::conformance::fresh_name(&format!("span-{i}")))
            .collect();
        let slots: std::collections::BTreeSet<u16> = names
            .iter()
            .map(|name| lock_redis::keys::slot(name))
            .collect();
        assert!(slots.len() > 10, "the names spread over many slots");
        let options = LockOptions::new().watchdog_lease(Duration::from_millis(600));
        let mut guards = Vec::new();
        for name in &names {
            guards.push(
                holder
                    .lock_with(name, &options)
                    .await
                    .expect("lock")
                    .expect("granted"),
            );
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for (name, guard) in names.iter().zip(&guards) {
            assert!(!guard.is_lost(), "{name} kept its lease");
            assert!(
                observer.is_locked(name).await.expect("state"),
                "{name} still held"
            );
        }
        for guard in guards {
            assert_eq!(
                guard.release().await.expect("release"),
                lock_core::ReleaseOutcome::Released
            );
        }
        for name in &names {
            assert!(!observer.is_locked(name).await.expect("state"));
        }
    });
}

//! The conformance suite once on a Redis Cluster in containers (3 primaries × 1 replica, each
//! node a container of `DISTLOCK_REDIS_IMAGE` on the host network), pub/sub notifications,
//! reentrant locks, then the semaphore, lease-bound permit, latch, read-write lock, fair lock and
//! election suites: the cluster connection against exactly the image given.
//!
//! One test runs every case in turn on one cluster, so only one cluster of containers is ever
//! alive. Without an image or a container engine the test says why on stderr and passes
//! (scripts/ensure-docker.sh provides both).
#![cfg(feature = "cluster")]

use lock_redis::{LockKind, NotificationMode, RedisBackend};
use lock_testkit::conformance::Harness;
use lock_testkit::containers::image_or_skip;
use lock_testkit::{RedisCluster, ServerOptions};

struct ContainerCluster {
    cluster: RedisCluster,
}

impl Harness for ContainerCluster {
    type Backend = RedisBackend;

    async fn client(&self) -> RedisBackend {
        RedisBackend::builder(lock_redis::RedisTarget::cluster(self.cluster.urls()))
            .notifications(NotificationMode::PubSub)
            .lock_kind(LockKind::Reentrant)
            .connect()
            .await
            .expect("connect to the cluster in containers")
    }
}

#[test]
fn conformance_on_a_cluster_in_containers() {
    let Some(image) = image_or_skip("conformance_on_a_cluster_in_containers") else {
        return;
    };
    let cluster = RedisCluster::start_with(3, 1, ServerOptions::new().container(&image))
        .unwrap_or_else(|err| panic!("start a cluster in {image}: {err}"));
    assert!(cluster.node(0).container_id().is_some());
    let harness = ContainerCluster { cluster };
    lock_testkit::conformance::run(lock_testkit::conformance_tests!(@sequence &harness));
    lock_testkit::conformance::run(lock_testkit::semaphore_conformance_tests!(@sequence &harness));
    lock_testkit::conformance::run(lock_testkit::permit_conformance_tests!(@sequence &harness));
    lock_testkit::conformance::run(lock_testkit::rw_conformance_tests!(@sequence &harness));
    lock_testkit::conformance::run(lock_testkit::fair_conformance_tests!(@sequence &harness));
    lock_testkit::conformance::run(lock_testkit::election_conformance_tests!(@sequence &harness));
    lock_testkit::conformance::run(lock_testkit::latch_conformance_tests!(@sequence &harness));
}

//! The in-model fault battery on a Redis Cluster (3 primaries × 1 replica): 8 workers in 4
//! simulated processes take one fenced lock 3,000 times while the lock's slot moves to another
//! primary (held and awaited), its primary fails over to its replica (coordinated: nothing
//! acknowledged is lost), its primary is paused (shorter than the cluster's node timeout and
//! the lease), and the connections of its primary and the notification connections of every
//! node are killed. The history checker must see no overlap, no lost update and no fence
//! rejection, and nothing may be left on any node.
#![cfg(feature = "cluster")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockOptions, Locker};
use lock_redis::{RedisBackend, keys};
use lock_testkit::{
    FailoverMode, FaultFuture, FencedResource, RedisCluster, RedisServer, Schedule,
    assert_battery_verdict, run_schedule,
};
use rand::Rng;

const LEASE: Duration = Duration::from_millis(3000);
/// After the lease, how long unsubscribes may take to land (a failed one is retried within 2 s).
const SETTLE: Duration = Duration::from_secs(5);
const LOCK: &str = "battery:cluster";

/// Runs `change` on the cluster on a blocking thread (the fixture's calls block).
async fn with_cluster<T: Send + 'static>(
    cluster: &Arc<Mutex<RedisCluster>>,
    change: impl FnOnce(&mut RedisCluster) -> T + Send + 'static,
) -> T {
    let cluster = cluster.clone();
    tokio::task::spawn_blocking(move || change(&mut cluster.lock().unwrap()))
        .await
        .expect("cluster task")
}

fn faults(cluster: Arc<Mutex<RedisCluster>>) -> impl FnMut(usize) -> FaultFuture {
    let slot = keys::slot(LOCK);
    move |n| {
        let cluster = cluster.clone();
        // Random choices made up front: the thread-local generator cannot cross an await.
        let pause = Duration::from_millis(rand::rng().random_range(100..=300));
        Box::pin(async move {
            match n % 5 {
                0 => {
                    with_cluster(&cluster, move |cluster| {
                        let from = cluster.primary_of_slot(slot).expect("owner");
                        let to = (0..cluster.len())
                            .find(|&node| node != from && cluster.role(node).unwrap_or(false))
                            .expect("another primary");
                        cluster.move_slot(slot, to).expect("move the slot");
                        format!("move slot {slot} from node {from} to node {to}")
                    })
                    .await
                }
                1 => {
                    with_cluster(&cluster, move |cluster| {
                        let primary = cluster.primary_of_slot(slot).expect("owner");
                        let replica = cluster.replicas_of(primary).expect("replicas")[0];
                        cluster
                            .failover(replica, FailoverMode::Coordinated)
                            .expect("fail over");
                        format!("failover of node {primary} to node {replica}")
                    })
                    .await
                }
                2 => {
                    let primary = with_cluster(&cluster, move |cluster| {
                        let primary = cluster.primary_of_slot(slot).expect("owner");
                        cluster.node_mut(primary).pause().expect("pause");
                        primary
                    })
                    .await;
                    tokio::time::sleep(pause).await;
                    with_cluster(&cluster, move |cluster| {
                        cluster.node_mut(primary).resume().expect("resume");
                    })
                    .await;
                    format!("pause node {primary} for {pause:?}")
                }
                3 => {
                    with_cluster(&cluster, move |cluster| {
                        let primary = cluster.primary_of_slot(slot).expect("owner");
                        let killed = cluster
                            .node(primary)
                            .kill_normal_clients()
                            .expect("client kill");
                        format!("kill {killed} connections of node {primary}")
                    })
                    .await
                }
                _ => {
                    with_cluster(&cluster, |cluster| {
                        let killed: usize = (0..cluster.len())
                            .map(|node| cluster.node(node).kill_pubsub_clients().expect("kill"))
                            .sum();
                        format!("kill {killed} notification connections")
                    })
                    .await
                }
            }
        })
    }
}

#[test]
fn in_model_faults_cluster() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let cluster = RedisCluster::start(3, 1).expect("start a cluster");
        let resource_server = RedisServer::start().expect("start the resource server");
        let mut lockers = Vec::new();
        for _ in 0..4 {
            let backend = RedisBackend::builder(lock_redis::RedisTarget::cluster(cluster.urls()))
                .command_timeout(Duration::from_millis(500))
                .connect()
                .await
                .expect("connect to the cluster");
            lockers.push(Locker::new(backend));
        }
        let resource = FencedResource::connect(&resource_server.url())
            .await
            .expect("resource");
        let options = LockOptions::new()
            .watchdog_lease(LEASE)
            .fenced()
            .wait(Duration::from_secs(10));
        let mut schedule = Schedule::new(8, 3000, options);
        schedule.lock_name = LOCK.to_owned();
        schedule.fault_gap = (Duration::from_millis(100), Duration::from_millis(300));
        let urls = cluster.urls();
        let cluster = Arc::new(Mutex::new(cluster));
        let kept = lockers.clone();
        let report = run_schedule(&schedule, lockers, resource, faults(cluster.clone())).await;
        // Every node: a key or subscription left anywhere (a primary, or a replica that kept
        // its old primary's data) is a leak.
        assert_battery_verdict("cluster", &schedule, &report, urls, LEASE + SETTLE).await;
        for locker in &kept {
            assert_eq!(locker.backend().watched_locks(), 0);
        }
    });
}

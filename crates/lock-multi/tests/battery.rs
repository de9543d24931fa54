//! The in-model fault battery over three nodes, for MultiLock and for RedLock: 8 workers in 4
//! simulated processes (4 composites, each with its own node clients) take one fenced lock
//! 2,000 times while the nodes, each behind its own fault proxy, are slowed, reset, paused
//! (shorter than the lease minus one renewal period), have their scripts flushed and their
//! notification connections killed, and are killed with `kill -9` and restarted from an
//! `appendfsync always` AOF. RedLock also loses a minority node (one node down for 1–2 s, then
//! restarted from its AOF); MultiLock cannot grant while any node is away, so its outages stay
//! short. Never more than one node is down at once. The history checker must see no overlap, no
//! lost update and no fence rejection.
//!
//! `DISTLOCK_BATTERY=long` multiplies the acquisitions by 5 (for manual runs).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{DynLockBackend, LockOptions, Locker};
use lock_multi::{AllNodes, Composite, Majority, Quorum};
use lock_redis::RedisBackend;
use lock_testkit::{
    Fault, FaultFuture, FaultProxy, FencedResource, RedisNodes, RedisServer, Schedule,
    ScheduleReport, ServerOptions, assert_battery_verdict, run_schedule,
};
use rand::Rng;

const NODES: usize = 3;
const PROCESSES: usize = 4;
const WORKERS: usize = 8;
const ACQUISITIONS: usize = 2000;
/// The watchdog lease; renewals come every lease / 3 = 500 ms.
const LEASE: Duration = Duration::from_millis(1500);
/// The wait budget of every acquisition.
const WAIT: Duration = Duration::from_secs(5);
/// The client's timeout for each Redis command.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(300);
/// The composite's timeout for each node call.
const NODE_TIMEOUT: Duration = Duration::from_millis(150);
/// After the lease, how long unsubscribes may take to land (a failed one is retried within 2 s).
const SETTLE: Duration = Duration::from_secs(5);

/// The faults, one after another in this order (each on a random node).
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Proxy latency on one node, or a different latency on every node.
    Latency,
    /// Every proxied connection of one node cut.
    Reset,
    /// One node frozen (`SIGSTOP`) for less than the lease minus one renewal period.
    Pause,
    /// `CLIENT KILL TYPE pubsub` on one node.
    KillPubsub,
    /// `SCRIPT FLUSH` on one node.
    ScriptFlush,
    /// `kill -9` and an immediate restart from the AOF.
    Restart,
    /// `kill -9`, 1–2 s down (a minority node lost), then a restart from the AOF.
    NodeLoss,
}

const MULTI_FAULTS: &[Kind] = &[
    Kind::Latency,
    Kind::Reset,
    Kind::Pause,
    Kind::KillPubsub,
    Kind::ScriptFlush,
    Kind::Restart,
];

const REDLOCK_FAULTS: &[Kind] = &[
    Kind::Latency,
    Kind::Reset,
    Kind::Pause,
    Kind::KillPubsub,
    Kind::ScriptFlush,
    Kind::Restart,
    Kind::NodeLoss,
];

/// Restarts node `node` (killed) from its AOF on a blocking thread.
async fn restart(nodes: &Arc<Mutex<RedisNodes>>, node: usize) {
    let nodes = nodes.clone();
    tokio::task::spawn_blocking(move || {
        nodes
            .lock()
            .unwrap()
            .restart(node)
            .expect("restart from the AOF");
    })
    .await
    .expect("restart task");
}

fn faults(
    kinds: &'static [Kind],
    nodes: Arc<Mutex<RedisNodes>>,
    proxies: Arc<Vec<FaultProxy>>,
) -> impl FnMut(usize) -> FaultFuture {
    move |n| {
        let (nodes, proxies) = (nodes.clone(), proxies.clone());
        // Random choices made up front: the thread-local generator cannot cross an await.
        let mut rng = rand::rng();
        let node = rng.random_range(0..NODES);
        let latencies: Vec<Duration> = (0..NODES)
            .map(|_| Duration::from_millis(rng.random_range(10..=40)))
            .collect();
        let latency_for = Duration::from_millis(rng.random_range(200..=400));
        let pause = Duration::from_millis(rng.random_range(100..=400));
        let down = Duration::from_millis(rng.random_range(1000..=2000));
        let kind = kinds[n % kinds.len()];
        Box::pin(async move {
            match kind {
                Kind::Latency if (n / kinds.len()).is_multiple_of(2) => {
                    proxies[node].set_fault(Fault::Latency(latencies[node]));
                    tokio::time::sleep(latency_for).await;
                    proxies[node].clear();
                    format!("node {node}: latency {:?}", latencies[node])
                }
                Kind::Latency => {
                    for (proxy, latency) in proxies.iter().zip(&latencies) {
                        proxy.set_fault(Fault::Latency(*latency));
                    }
                    tokio::time::sleep(latency_for).await;
                    for proxy in proxies.iter() {
                        proxy.clear();
                    }
                    format!("every node: latencies {latencies:?}")
                }
                Kind::Reset => {
                    proxies[node].reset_connections();
                    format!("node {node}: reset connections")
                }
                Kind::Pause => {
                    // Shorter than the lease minus one renewal period: every hold survives.
                    nodes.lock().unwrap().pause(node).expect("pause");
                    tokio::time::sleep(pause).await;
                    nodes.lock().unwrap().resume(node).expect("resume");
                    format!("node {node}: pause {pause:?}")
                }
                Kind::KillPubsub => {
                    let killed = nodes.lock().unwrap()[node]
                        .kill_pubsub_clients()
                        .expect("client kill");
                    format!("node {node}: kill {killed} pubsub clients")
                }
                Kind::ScriptFlush => {
                    nodes.lock().unwrap()[node]
                        .script_flush()
                        .expect("script flush");
                    format!("node {node}: script flush")
                }
                Kind::Restart => {
                    nodes.lock().unwrap().kill(node).expect("kill -9");
                    restart(&nodes, node).await;
                    format!("node {node}: kill -9 + restart (appendfsync always)")
                }
                Kind::NodeLoss => {
                    nodes.lock().unwrap().kill(node).expect("kill -9");
                    tokio::time::sleep(down).await;
                    restart(&nodes, node).await;
                    format!("node {node}: lost for {down:?}, then restarted (appendfsync always)")
                }
            }
        })
    }
}

/// One composite per simulated process, each over its own clients of every node (through the
/// node's proxy).
async fn composites<P: Quorum + Default>(proxies: &[FaultProxy]) -> Vec<Locker<Composite<P>>> {
    let mut lockers = Vec::with_capacity(PROCESSES);
    for _ in 0..PROCESSES {
        let mut nodes: Vec<Arc<dyn DynLockBackend>> = Vec::with_capacity(proxies.len());
        for proxy in proxies {
            let backend = RedisBackend::builder(proxy.url())
                .command_timeout(COMMAND_TIMEOUT)
                .connect()
                .await
                .expect("connect through the proxy");
            nodes.push(Arc::new(backend));
        }
        let composite = Composite::<P>::builder(nodes)
            .node_timeout(NODE_TIMEOUT)
            .build()
            .expect("valid composite");
        lockers.push(Locker::new(composite));
    }
    lockers
}

fn acquisitions() -> usize {
    match std::env::var("DISTLOCK_BATTERY").as_deref() {
        Ok("long") => ACQUISITIONS * 5,
        _ => ACQUISITIONS,
    }
}

/// Runs the battery with policy `P` and the fault `kinds`, asserts its verdict (`what` names it
/// in the summary) and returns the report for the checks particular to one policy.
fn battery<P: Quorum + Default>(what: &str, kinds: &'static [Kind]) -> ScheduleReport {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let nodes = RedisNodes::start_with(NODES, ServerOptions::new().aof_fsync_always(true))
            .expect("start the lock nodes");
        let resource_server = RedisServer::start().expect("start the resource server");
        let mut proxies = Vec::with_capacity(NODES);
        for node in &nodes {
            proxies.push(FaultProxy::start(node.addr()).await.expect("proxy"));
        }
        let lockers = composites::<P>(&proxies).await;
        let resource = FencedResource::connect(&resource_server.url())
            .await
            .expect("resource");
        let options = LockOptions::new().watchdog_lease(LEASE).fenced().wait(WAIT);
        let mut schedule = Schedule::new(WORKERS, acquisitions(), options);
        // Faults one after another with short gaps, and a 3 ms critical section: the run lasts
        // long enough for well over 20 faults even on a fast machine (node losses alone keep a
        // node down 1–2 s each).
        schedule.fault_gap = (Duration::from_millis(100), Duration::from_millis(300));
        schedule.hold_pause = Duration::from_millis(3);
        let nodes = Arc::new(Mutex::new(nodes));
        let proxies = Arc::new(proxies);
        let kept = lockers.clone();
        let report = run_schedule(
            &schedule,
            lockers,
            resource,
            faults(kinds, nodes.clone(), proxies.clone()),
        )
        .await;
        // The verdict, while the clients are still alive; for leaks: within one lease (a
        // release lost to a fault expires by then) no lock key, and within a few more seconds
        // (unsubscribes retried after a fault) no subscription, on any node.
        let urls = nodes.lock().unwrap().urls();
        assert_battery_verdict(what, &schedule, &report, urls, LEASE + SETTLE).await;
        drop(kept);
        report
    })
}

#[test]
fn in_model_faults_multilock_over_3() {
    battery::<AllNodes>("MultiLock over 3", MULTI_FAULTS);
}

#[test]
fn in_model_faults_redlock_over_3() {
    let report = battery::<Majority>("RedLock over 3", REDLOCK_FAULTS);
    let losses = report
        .faults
        .iter()
        .filter(|fault| fault.contains("lost for"))
        .count();
    assert!(losses >= 2, "only {losses} minority node losses");
}

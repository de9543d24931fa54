//! The in-model fault battery on a single Redis node: 8 workers in 4 simulated processes take
//! one fenced lock 2,000 times while the server is paused (shorter than the lease), slowed,
//! reset, restarted from an `appendfsync always` AOF, and has its scripts flushed and its
//! notification connections killed. The history checker must see no overlap, no lost update and
//! no fence rejection.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LockOptions, Locker};
use lock_redis::RedisBackend;
use lock_testkit::{
    FaultFuture, FaultProxy, FencedResource, RedisServer, Schedule, ServerOptions,
    assert_battery_verdict, run_schedule,
};
use rand::Rng;

const LEASE: Duration = Duration::from_millis(1200);
/// After the lease, how long unsubscribes may take to land (a failed one is retried within 2 s).
const SETTLE: Duration = Duration::from_secs(5);

fn faults(
    server: Arc<Mutex<RedisServer>>,
    proxy: Arc<FaultProxy>,
) -> impl FnMut(usize) -> FaultFuture {
    move |n| {
        let (server, proxy) = (server.clone(), proxy.clone());
        // Random choices made up front: the thread-local generator cannot cross an await.
        let latency = Duration::from_millis(rand::rng().random_range(10..=40));
        let pause = Duration::from_millis(rand::rng().random_range(100..=300));
        Box::pin(async move {
            match n % 6 {
                0 => {
                    proxy.set_fault(lock_testkit::Fault::Latency(latency));
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    proxy.clear();
                    format!("latency {latency:?}")
                }
                1 => {
                    proxy.reset_connections();
                    "reset connections".to_owned()
                }
                2 => {
                    // Shorter than the lease minus one renewal period: every hold survives.
                    server.lock().unwrap().pause().expect("pause");
                    tokio::time::sleep(pause).await;
                    server.lock().unwrap().resume().expect("resume");
                    format!("pause {pause:?}")
                }
                3 => {
                    let killed = server
                        .lock()
                        .unwrap()
                        .kill_pubsub_clients()
                        .expect("client kill");
                    format!("kill {killed} pubsub clients")
                }
                4 => {
                    server.lock().unwrap().script_flush().expect("script flush");
                    "script flush".to_owned()
                }
                _ => {
                    let server = server.clone();
                    tokio::task::spawn_blocking(move || {
                        let mut server = server.lock().unwrap();
                        server.kill().expect("kill -9");
                        server.restart().expect("restart from the AOF");
                    })
                    .await
                    .expect("restart task");
                    "kill -9 + restart (appendfsync always)".to_owned()
                }
            }
        })
    }
}

#[test]
fn in_model_faults_single_node() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = RedisServer::start_with(ServerOptions::new().aof_fsync_always(true))
            .expect("start the lock server");
        let resource_server = RedisServer::start().expect("start the resource server");
        let proxy = Arc::new(FaultProxy::start(server.addr()).await.expect("proxy"));
        let mut lockers = Vec::new();
        for _ in 0..4 {
            let backend = RedisBackend::builder(proxy.url())
                .command_timeout(Duration::from_millis(300))
                .connect()
                .await
                .expect("connect through the proxy");
            lockers.push(Locker::new(backend));
        }
        let resource = FencedResource::connect(&resource_server.url())
            .await
            .expect("resource");
        let options = LockOptions::new()
            .watchdog_lease(LEASE)
            .fenced()
            .wait(Duration::from_secs(5));
        // `DISTLOCK_BATTERY=long` for a longer manual run.
        let scale = if std::env::var("DISTLOCK_BATTERY").as_deref() == Ok("long") {
            5
        } else {
            1
        };
        let mut schedule = Schedule::new(8, 2000 * scale, options);
        schedule.fault_gap = (Duration::from_millis(50), Duration::from_millis(200));
        let server = Arc::new(Mutex::new(server));
        let kept = lockers.clone();
        let report =
            run_schedule(&schedule, lockers, resource, faults(server.clone(), proxy)).await;
        // The verdict, while the clients are still alive; for leaks: within one lease (a
        // release lost to a fault expires by then) no lock key, and within a few more seconds
        // (unsubscribes retried after a fault) no subscription; no local watch either.
        let url = server.lock().unwrap().url();
        assert_battery_verdict("single node", &schedule, &report, [url], LEASE + SETTLE).await;
        for locker in &kept {
            assert_eq!(locker.backend().watched_locks(), 0);
        }
    });
}

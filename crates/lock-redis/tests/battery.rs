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
    FaultProxy, FencedResource, RedisServer, Schedule, ServerOptions, assert_battery_verdict,
    faults, run_schedule,
};

const LEASE: Duration = Duration::from_millis(1200);
/// After the lease, how long unsubscribes may take to land (a failed one is retried within 2 s).
const SETTLE: Duration = Duration::from_secs(5);

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
        let report = run_schedule(
            &schedule,
            lockers,
            resource,
            faults::single_node(server.clone(), proxy),
        )
        .await;
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

//! The in-model fault battery on the lock family's exclusive members: the write side of the
//! read-write lock, the fair lock and an election's campaign side are each an exclusive lock,
//! so each takes the single-node battery (`battery.rs`): 8 workers in 4 simulated processes
//! take one fenced lock 1,500 times while the server is paused, slowed, reset, restarted from its AOF, has
//! its scripts flushed and its notification connections killed. The history checker must see
//! no overlap, no lost update, no fence rejection, and nothing may be left on the server (the
//! fair lock's queue and the election's leader values included).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{ElectionBackend, FairBackend, LockBackend, LockOptions, Locker, ReadWriteBackend};
use lock_redis::{RedisBackend, keys};
use lock_testkit::{
    FaultProxy, FencedResource, RedisServer, Schedule, ServerOptions, assert_battery_verdict,
    assert_nothing_left, faults, run_schedule,
};

const LEASE: Duration = Duration::from_millis(1200);
/// After the lease, how long unsubscribes may take to land (a failed one is retried within 2 s).
const SETTLE: Duration = Duration::from_secs(5);

/// Runs the battery on the side `side` makes of each client, then checks the verdict and that
/// none of `extra_keys` is left.
fn battery<S: LockBackend>(
    what: &str,
    side: impl Fn(RedisBackend) -> S,
    extra_keys: impl Fn(&str) -> Vec<String>,
) {
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
            lockers.push(Locker::new(side(backend)));
        }
        let resource = FencedResource::connect(&resource_server.url())
            .await
            .expect("resource");
        let options = LockOptions::new()
            .watchdog_lease(LEASE)
            .fenced()
            .wait(Duration::from_secs(5));
        // Long enough for the verdict's minimum of faults on a fast machine.
        let mut schedule = Schedule::new(8, 1500, options);
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
        let url = server.lock().unwrap().url();
        assert_battery_verdict(what, &schedule, &report, [url.clone()], LEASE + SETTLE).await;
        let extra = extra_keys(&schedule.lock_name);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        assert_nothing_left([url], &extra, SETTLE).await;
        drop(kept);
    });
}

#[test]
fn in_model_faults_write_side() {
    battery(
        "read-write lock, write side",
        |backend| backend.write_side(),
        |_| Vec::new(),
    );
}

#[test]
fn in_model_faults_fair_lock() {
    battery(
        "fair lock",
        |backend| backend.fair_side(),
        |name| vec![keys::fair_queue(name), keys::fair_timeouts(name)],
    );
}

#[test]
fn in_model_faults_election() {
    battery(
        "election",
        |backend| backend.campaign_side(),
        |name| vec![keys::election_values(name)],
    );
}

//! The fault batteries on PostgreSQL, through a fault proxy while, in turn, the proxy adds
//! latency, the proxy resets every connection, the whole server is frozen (every process
//! `SIGSTOP`ped, shorter than the lease), the sessions are terminated on the server
//! (`pg_terminate_backend`), another session sits on the lock rows (so the backend's statements
//! wait on row locks), and the server restarts (a fast shutdown and a start):
//!
//! - the in-model battery: 8 workers in 4 simulated processes take one fenced lock 1,500 times;
//!   the history checker must see no overlap, no lost update and no fence rejection;
//! - the usage battery (`lock_testkit::usage`) on the lock and on the fair lock: the public API
//!   driven the way applications use it (guards dropped at the end of a scope, re-entries,
//!   cancelled calls and critical sections, relocking at once), two clients, checked for
//!   exclusion, hold counts, liveness (and, for the fair lock, arrival order);
//!
//! and afterwards no hold is left, and the lapsed rows are swept.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{FairBackend, LockBackend, LockOptions, Locker};
use lock_postgres::PostgresBackend;
use lock_testkit::arrivals::{Arrivals, BookedBackend};
use lock_testkit::usage::{UsagePlan, run_usage};
use lock_testkit::{
    Fault, FaultFuture, FaultLoop, FaultProxy, FencedResource, PostgresServer, RedisServer,
    Schedule, assert_battery_verdict, run_schedule,
};
use tokio_postgres::{Client, NoTls};

const LEASE: Duration = Duration::from_millis(1200);
/// Each step's deadline (the server's statement and lock timeouts are ¾ of it).
const CALL_TIMEOUT: Duration = Duration::from_millis(400);
/// After the lease, how long a release lost to a fault may take to be made moot.
const SETTLE: Duration = Duration::from_secs(5);

/// A connection of the test's own, straight to the server (not through the proxy).
async fn direct(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect to the server");
    tokio::spawn(connection);
    client
}

/// The faults, in turn (see the module's documentation). The variations are drawn from `n`, so
/// a run is the same every time but for the timing.
fn faults(
    server: Arc<Mutex<PostgresServer>>,
    proxy: Arc<FaultProxy>,
) -> impl FnMut(usize) -> FaultFuture {
    move |n| {
        let (server, proxy) = (server.clone(), proxy.clone());
        let url = server.lock().unwrap().url();
        let latency = Duration::from_millis(10 + (n as u64 * 7) % 31);
        let freeze = Duration::from_millis(100 + (n as u64 * 37) % 201);
        Box::pin(async move {
            match n % 6 {
                0 => {
                    proxy.set_fault(Fault::Latency(latency));
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
                    let stopped = server.lock().unwrap().freeze().expect("freeze");
                    tokio::time::sleep(freeze).await;
                    server.lock().unwrap().thaw().expect("thaw");
                    format!("freeze {stopped} processes for {freeze:?}")
                }
                3 => {
                    let client = direct(&url).await;
                    let ended: i64 = client
                        .query_one(
                            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                             WHERE application_name = 'distlock' AND pid <> pg_backend_pid()",
                            &[],
                        )
                        .await
                        .expect("terminate the sessions")
                        .get(0);
                    format!("terminate {ended} sessions")
                }
                4 => {
                    // Another session locks every lock row for a while: the backend's
                    // statements on them wait (until their lock timeout ends them).
                    let mut client = direct(&url).await;
                    let transaction = client.transaction().await.expect("begin");
                    transaction
                        .batch_execute(
                            "SELECT 1 FROM distlock.locks FOR UPDATE; \
                             SELECT 1 FROM distlock.fencing FOR UPDATE",
                        )
                        .await
                        .expect("lock the rows");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    transaction.rollback().await.expect("rollback");
                    "rows locked by another session for 200ms".to_owned()
                }
                _ => {
                    let started = std::time::Instant::now();
                    tokio::task::spawn_blocking(move || {
                        server.lock().unwrap().restart().expect("restart");
                    })
                    .await
                    .expect("restart task");
                    format!("restart (fast shutdown + start) in {:?}", started.elapsed())
                }
            }
        })
    }
}

/// A server with the schema, behind a fault proxy.
struct Faulted {
    server: Arc<Mutex<PostgresServer>>,
    proxy: Arc<FaultProxy>,
    /// The server itself, for the test's own statements.
    url: String,
    /// The proxy, for the backends.
    through_proxy: String,
}

impl Faulted {
    async fn start() -> Faulted {
        let server = PostgresServer::start().expect("start PostgreSQL");
        let url = server.url();
        lock_postgres::install_schema(&url.parse().expect("url"))
            .await
            .expect("install the schema");
        let upstream = format!("127.0.0.1:{}", server.port())
            .parse()
            .expect("address");
        let proxy = Arc::new(FaultProxy::start(upstream).await.expect("proxy"));
        let through_proxy = url.replace(
            &format!(":{}/", server.port()),
            &format!(":{}/", proxy.addr().port()),
        );
        Faulted {
            server: Arc::new(Mutex::new(server)),
            proxy,
            url,
            through_proxy,
        }
    }

    async fn backend(&self) -> PostgresBackend {
        PostgresBackend::builder(&self.through_proxy)
            .expect("url")
            .call_timeout(CALL_TIMEOUT)
            .connect()
            .await
            .expect("connect through the proxy")
    }

    fn faults(&self) -> impl FnMut(usize) -> FaultFuture + use<> {
        faults(self.server.clone(), self.proxy.clone())
    }

    /// Waits until no hold of `name` is live (within a lease and the settling time: a release
    /// lost to a fault lapses by then), then sweeps the lapsed rows and checks none is left.
    async fn assert_nothing_left(&self, name: &str, lease: Duration) {
        let client = direct(&self.url).await;
        let live = "SELECT count(*) FROM distlock.locks \
                    WHERE name = convert_to($1, 'UTF8') AND expires_at > clock_timestamp()";
        let deadline = tokio::time::Instant::now() + lease + SETTLE;
        loop {
            let held: i64 = client
                .query_one(live, &[&name])
                .await
                .expect("count live holds")
                .get(0);
            if held == 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "a hold of {name:?} was left after {:?}",
                lease + SETTLE
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let swept: i32 = client
            .query_one("SELECT distlock.sweep(0, 1000)", &[])
            .await
            .expect("sweep")
            .get(0);
        let rows: i64 = client
            .query_one("SELECT count(*) FROM distlock.locks", &[])
            .await
            .expect("count rows")
            .get(0);
        eprintln!("swept {swept} lapsed rows; {rows} left");
        assert_eq!(rows, 0, "rows left after the sweep");
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn in_model_faults_postgres() {
    runtime().block_on(async {
        let faulted = Faulted::start().await;
        let resource_server = RedisServer::start().expect("start the resource server");
        let mut lockers = Vec::new();
        for _ in 0..4 {
            lockers.push(Locker::new(faulted.backend().await));
        }
        let resource = FencedResource::connect(&resource_server.url())
            .await
            .expect("resource");
        let options = LockOptions::new()
            .watchdog_lease(LEASE)
            .fenced()
            .wait(Duration::from_secs(5));
        let scale = if std::env::var("DISTLOCK_BATTERY").as_deref() == Ok("long") {
            5
        } else {
            1
        };
        let mut schedule = Schedule::new(8, 1500 * scale, options);
        schedule.fault_gap = (Duration::from_millis(50), Duration::from_millis(200));
        let report = run_schedule(&schedule, lockers.clone(), resource, faulted.faults()).await;
        // The history's verdict (no Redis holds the lock: the leftover check is the table's).
        assert_battery_verdict("postgres", &schedule, &report, [] as [&str; 0], SETTLE).await;
        faulted
            .assert_nothing_left(&schedule.lock_name, LEASE)
            .await;
        drop(lockers);
    });
}

/// Runs one seed of the usage battery on `clients` under the faults, and fails with its seed
/// and problems.
async fn usage<B: LockBackend>(
    kind: &str,
    faulted: &Faulted,
    clients: &[Locker<B>],
) -> (UsagePlan, String) {
    let plan = match std::env::var("DISTLOCK_USAGE_SEED") {
        Ok(seed) => UsagePlan::new(USAGE_ACQUISITIONS).with_seed(seed.parse().expect("a u64")),
        Err(_) => UsagePlan::new(USAGE_ACQUISITIONS),
    };
    let name = format!("usage:{kind}:{}", plan.seed);
    let faults = FaultLoop::start(faulted.faults(), FAULT_GAP);
    let report = run_usage(&plan, &name, clients, Some(&faults)).await;
    let faults = faults.stop().await;
    eprintln!("postgres {kind} under {} faults: {report}", faults.len());
    let problems = report.problems();
    assert!(
        problems.is_empty(),
        "{kind}, seed {} (DISTLOCK_USAGE_SEED={} to replay): {problems:#?}\n{} faults (each \
         with its time from the start of the run, to lay against the problems): {faults:?}",
        report.seed,
        report.seed,
        faults.len(),
    );
    assert!(
        faults.len() >= plan.min_faults,
        "{kind}: too few faults: {faults:?}"
    );
    (plan, name)
}

/// Acquisitions of one usage seed (as the CI pass of the Redis usage battery).
const USAGE_ACQUISITIONS: usize = 1000;
const FAULT_GAP: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(200));

#[test]
fn usage_battery_postgres_lock() {
    runtime().block_on(async {
        let faulted = Faulted::start().await;
        let clients = vec![
            Locker::new(faulted.backend().await),
            Locker::new(faulted.backend().await),
        ];
        let (plan, name) = usage("lock", &faulted, &clients).await;
        faulted.assert_nothing_left(&name, plan.lease).await;
    });
}

#[test]
fn usage_battery_postgres_fair() {
    runtime().block_on(async {
        let faulted = Faulted::start().await;
        let arrivals = Arc::new(Arrivals::default());
        let mut clients = Vec::new();
        for _ in 0..2 {
            let fair = faulted.backend().await.fair_side();
            clients.push(Locker::new(BookedBackend::new(fair, arrivals.clone())));
        }
        let (plan, name) = usage("fair", &faulted, &clients).await;
        let tally = arrivals.tally();
        eprintln!("postgres fair: {tally}");
        // As on Redis: under faults a waiter whose own attempt failed may be passed over
        // (counted apart); the others rarely are, bounded as in the Redis usage battery.
        assert!(
            tally.out_of_order * 20 <= tally.grants,
            "fair, seed {}: more than 1 in 20 grants out of arrival order: {tally}",
            plan.seed
        );
        faulted.assert_nothing_left(&name, plan.lease).await;
    });
}

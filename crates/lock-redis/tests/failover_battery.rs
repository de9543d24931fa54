//! Out of model: a primary killed while replication is asynchronous, and its replica promoted,
//! as Sentinel or a cluster does. The overlap rate over at least 200 grants, without and with
//! replica acknowledgement (`ReplicaAck`), and fencing against the overlaps that happen.
//!
//! Set-up: a primary and a replica that replicates through a [`FaultProxy`] adding 1 ms each
//! way (replication lag, as between two hosts). In each round, 25 clients take 25 locks at
//! random moments over 10 ms; at 8 ms (12 ms with acknowledgement, whose grants take a
//! replica round trip) the primary "dies": the replication link is cut (what it
//! still carried is dropped) and the primary is frozen (`SIGSTOP`), so no client hears from it
//! again. The replica is promoted (`REPLICAOF NO ONE`). Every grant that **returned to its
//! client before the primary died** is a trial: a second client asks the promoted replica for
//! the same lock; if it gets it, the two overlap (the first still believes it holds the lock).
//! Both then write to a fenced resource, the newer holder first, and the [`History`] checker
//! counts overlaps, stale writes and their rejections.
//!
//! Expected: without acknowledgement the grants of the last moments before the death are lost
//! with the primary, so some trials overlap (the failure is exercised), and fencing rejects
//! every stale write; with acknowledgement a grant returns only once the replica has it, so no
//! trial overlaps. The rates are printed (`--nocapture`); `docs/deployments.md` has them.

use std::time::Duration;

use lock_core::{Fenced, LockOptions, Locker};
use lock_redis::{RedisBackend, ReplicaAck};
use lock_testkit::{
    CheckOptions, Fault, FaultProxy, FencedResource, History, RedisServer, WriteStatus, granted,
};
use rand::Rng;
use tokio::time::{Instant, sleep};

/// Grants per mode that must have returned before a primary died.
const TRIALS: usize = 200;
/// Clients (and locks) per round.
const CLIENTS: usize = 25;
/// The spread of the clients' start times.
const WINDOW: Duration = Duration::from_millis(10);
/// When the primary dies, from the round's start, without acknowledgement: most grants have
/// returned by then, those of its last moment are still on their way to the replica.
const DEATH: Duration = Duration::from_millis(8);
/// When the primary dies with acknowledgement: later, since an acknowledged grant takes a
/// replica round trip through the lagging link (about 5 ms here) and, for the grants queued
/// behind it, the next one too. Whether a grant that returned is lost does not depend on
/// when the death comes: it returned only once the replica had it.
const DEATH_ACKNOWLEDGED: Duration = Duration::from_millis(12);
/// One-way delay of the replication link.
const LAG: Duration = Duration::from_millis(1);
/// Rounds at most per mode (a round yields ~15-20 trials without acknowledgement, ~5-8 with).
const MAX_ROUNDS: usize = 150;

#[derive(Debug, Default)]
struct Tally {
    rounds: usize,
    trials: usize,
    overlaps: u64,
    stale_writes: u64,
    stale_writes_rejected: u64,
    lost_updates: i64,
}

/// A primary, its replica behind a lagging proxy, and the resource server.
struct Failover {
    primary: RedisServer,
    replica: RedisServer,
    proxy: FaultProxy,
    resource: FencedResource,
    _resource_server: RedisServer,
}

impl Failover {
    async fn start() -> Failover {
        let primary = RedisServer::start().expect("start the primary");
        let replica = RedisServer::start().expect("start the replica");
        let proxy = FaultProxy::start(primary.addr())
            .await
            .expect("start the replication proxy");
        let resource_server = RedisServer::start().expect("start the resource server");
        let resource = FencedResource::connect(&resource_server.url())
            .await
            .expect("connect to the resource");
        Failover {
            primary,
            replica,
            proxy,
            resource,
            _resource_server: resource_server,
        }
    }

    /// Empties the primary and makes the replica replicate it through the lagging proxy, until
    /// the replica acknowledges writes.
    fn link(&mut self) {
        self.proxy.set_fault(Fault::Latency(LAG));
        let mut primary = self.primary.client().get_connection().expect("primary");
        let _: () = redis::cmd("FLUSHALL")
            .query(&mut primary)
            .expect("FLUSHALL");
        // The full sync starts at once, not after the default 5 s wait for more replicas.
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("repl-diskless-sync-delay")
            .arg(0)
            .query(&mut primary)
            .expect("CONFIG SET");
        let mut replica = self.replica.client().get_connection().expect("replica");
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(self.proxy.addr().port())
            .query(&mut replica)
            .expect("REPLICAOF the proxy");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (acknowledged,): (u32,) = redis::pipe()
                .cmd("SET")
                .arg("battery:probe")
                .arg(1)
                .ignore()
                .cmd("DEL")
                .arg("battery:probe")
                .ignore()
                .cmd("WAIT")
                .arg(1)
                .arg(50)
                .query(&mut primary)
                .expect("probe the replica");
            if acknowledged == 1 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the replica never acknowledged"
            );
        }
    }

    /// The primary dies: the replication link is cut (its in-flight bytes dropped) and the
    /// primary frozen. Returns when it died.
    fn kill_primary(&mut self) -> Instant {
        self.proxy.set_fault(Fault::Blackhole);
        self.proxy.reset_connections();
        self.primary.pause().expect("freeze the primary");
        Instant::now()
    }

    /// Promotes the replica; the old primary comes back (as a node nobody uses until the next
    /// round empties it).
    fn promote(&mut self) {
        let mut replica = self.replica.client().get_connection().expect("replica");
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut replica)
            .expect("promote the replica");
        self.primary.resume().expect("thaw the old primary");
    }
}

async fn locker(url: &str, ack: Option<ReplicaAck>) -> Locker<RedisBackend> {
    let mut builder = RedisBackend::builder(url).command_timeout(Duration::from_millis(300));
    if let Some(ack) = ack {
        builder = builder.replica_ack(ack);
    }
    Locker::new(builder.connect().await.expect("connect"))
}

fn options() -> LockOptions<Fenced> {
    LockOptions::new()
        .fixed_lease(Duration::from_secs(30))
        .fenced()
        .no_wait()
}

async fn battery(
    setup: &mut Failover,
    mode: &str,
    ack: Option<ReplicaAck>,
    death: Duration,
) -> Tally {
    let mut tally = Tally::default();
    while tally.trials < TRIALS {
        assert!(
            tally.rounds < MAX_ROUNDS,
            "{mode}: only {} trials in {MAX_ROUNDS} rounds",
            tally.trials
        );
        let round = tally.rounds;
        tally.rounds += 1;
        tokio::task::block_in_place(|| setup.link());
        let a = locker(&setup.primary.url(), ack).await;
        let started = Instant::now();
        let takers: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let a = a.clone();
                let delay = rand::rng().random_range(Duration::ZERO..WINDOW);
                let name = format!("battery:{mode}:{round}:{client}");
                tokio::spawn(async move {
                    sleep(delay).await;
                    let guard = a.lock_with(&name, &options()).await;
                    (name, guard, Instant::now())
                })
            })
            .collect();
        sleep(death.saturating_sub(started.elapsed())).await;
        let died = tokio::task::block_in_place(|| setup.kill_primary());
        let mut granted_to_a = Vec::new();
        for taker in takers {
            let (name, guard, returned) = taker.await.expect("taker");
            if let Ok(guard) = guard
                && returned < died
            {
                granted_to_a.push((name, guard, returned));
            }
        }
        tokio::task::block_in_place(|| setup.promote());
        let b = locker(&setup.replica.url(), None).await;
        for (name, guard_a, returned) in granted_to_a {
            tally.trials += 1;
            let history = History::new();
            let key = format!("{name}:resource");
            let mut hold_a =
                history.begin_at(0, guard_a.owner_field(), guard_a.fencing_token(), returned);
            if let Some(guard_b) =
                granted(b.lock_with(&name, &options()).await).expect("B's attempt")
            {
                let mut hold_b = history.begin(1, guard_b.owner_field(), guard_b.fencing_token());
                let step = setup
                    .resource
                    .increment(
                        &key,
                        guard_b.fencing_token(),
                        guard_b.owner_field(),
                        Duration::ZERO,
                    )
                    .await
                    .expect("B's write");
                hold_b.write_sent_at(step.write_sent_at);
                hold_b.end(Some(step.outcome.into()));
                drop(guard_b);
            }
            let step = setup
                .resource
                .increment(
                    &key,
                    guard_a.fencing_token(),
                    guard_a.owner_field(),
                    Duration::ZERO,
                )
                .await
                .expect("A's write");
            hold_a.write_sent_at(step.write_sent_at);
            hold_a.end(Some(WriteStatus::from(step.outcome)));
            // A's primary is gone: its guard is dropped, not released.
            drop(guard_a);
            let value = setup.resource.read(&key).await.expect("read").value;
            // Overlaps are expected here (that is what is counted): no picture per trial.
            let report = history.check_with(value, 0, &CheckOptions::new().without_timeline());
            tally.overlaps += report.overlaps;
            tally.stale_writes += report.stale_writes;
            tally.stale_writes_rejected += report.stale_writes_rejected;
            tally.lost_updates += report.lost_updates;
        }
    }
    println!(
        "failover battery, {mode}: {} trials in {} rounds, {} overlaps ({:.1} %), {} stale \
         writes, {} rejected, {} lost updates",
        tally.trials,
        tally.rounds,
        tally.overlaps,
        100.0 * tally.overlaps as f64 / tally.trials as f64,
        tally.stale_writes,
        tally.stale_writes_rejected,
        tally.lost_updates
    );
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_with_and_without_replica_acknowledgement() {
    let mut setup = Failover::start().await;

    let unacknowledged = battery(&mut setup, "async", None, DEATH).await;
    assert!(
        unacknowledged.overlaps >= 1,
        "without acknowledgement some grant must be lost with the primary: {unacknowledged:?}"
    );
    assert_eq!(
        unacknowledged.stale_writes_rejected, unacknowledged.stale_writes,
        "fencing rejects every stale write: {unacknowledged:?}"
    );
    assert_eq!(unacknowledged.lost_updates, 0, "{unacknowledged:?}");

    let ack = ReplicaAck::replicas(1).timeout(Duration::from_millis(100));
    let acknowledged = battery(&mut setup, "acknowledged", Some(ack), DEATH_ACKNOWLEDGED).await;
    assert_eq!(
        acknowledged.overlaps, 0,
        "an acknowledged grant survives the promotion: {acknowledged:?}"
    );
    assert_eq!(acknowledged.stale_writes, 0, "{acknowledged:?}");
    assert_eq!(acknowledged.lost_updates, 0, "{acknowledged:?}");
}

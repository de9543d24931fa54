//! Canaries for RedLock's known out-of-model failure: a node restarted without persistence.
//!
//! Three nodes without persistence. Holder A gets the lock from a bare majority, nodes 0 and 1
//! (node 2 is held by a foreign owner at that moment, which lets it go right after), and takes
//! a fenced read of the protected resource. Node 1 is then killed with `kill -9`, and holder B,
//! another process, starts asking for the lock.
//!
//! - **Restarted at once** (empty): B is granted by nodes 1 and 2 while A still holds node 0
//!   and its lease: two holders at once. The history checker must **see** the overlap, and A's
//!   write, sent after B's, must be refused by the fenced resource (B's token is higher).
//! - **Restart delayed past the lease**: B cannot make a majority until A's lease has run out
//!   on node 0, so it gets the lock only after A's lease: no overlap.
//!
//! The holds and writes of A and B go through [`History`] and [`FencedResource`], as in the
//! batteries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{DynLockBackend, LockOptions, Locker, Owner, ReleaseOutcome};
use lock_multi::RedLock;
use lock_redis::RedisBackend;
use lock_testkit::{
    FencedResource, History, RedisNodes, RedisServer, Report, WriteOutcome, WriteStatus,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A's fixed lease (no watchdog: A cannot renew once it holds a single node anyway).
const LEASE: Duration = Duration::from_secs(2);
/// A writes this long before its validity ends at the latest.
const A_MARGIN: Duration = Duration::from_millis(300);
/// How long B keeps the lock after its write.
const B_HOLD: Duration = Duration::from_millis(80);
/// B's wait budget: covers A's whole lease in the delayed variant.
const B_WAIT: Duration = Duration::from_secs(6);
/// The restart delay of the delayed variant, counted from the kill (past A's whole lease).
const PAST_THE_LEASE: Duration = Duration::from_millis(2300);
const NAME: &str = "canary:lock";
const KEY: &str = "canary";

/// What one canary run saw.
struct Outcome {
    report: Report,
    token_a: u64,
    token_b: u64,
    write_a: WriteOutcome,
    write_b: WriteOutcome,
    /// When A asked for the lock (before its first send).
    a_asked_at: Instant,
    /// A's validity deadline, as its guard computed it.
    a_valid_until: Instant,
    /// When B's acquire returned.
    b_acquired_at: Instant,
}

/// A RedLock over its own fresh client of every node (a separate process).
async fn redlock(urls: &[String]) -> Locker<RedLock> {
    let mut nodes: Vec<Arc<dyn DynLockBackend>> = Vec::with_capacity(urls.len());
    for url in urls {
        let backend = RedisBackend::builder(url.as_str())
            .command_timeout(Duration::from_millis(300))
            .connect()
            .await
            .expect("connect");
        nodes.push(Arc::new(backend));
    }
    Locker::new(RedLock::new(nodes).expect("redlock"))
}

/// `HGETALL NAME` on every node, over fresh connections (a restarted node breaks old ones).
async fn lock_hashes(urls: &[String]) -> Vec<HashMap<String, i64>> {
    let mut hashes = Vec::with_capacity(urls.len());
    for url in urls {
        let client = redis::Client::open(url.as_str()).expect("url");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("raw connection");
        let hash: HashMap<String, i64> = redis::cmd("HGETALL")
            .arg(NAME)
            .query_async(&mut connection)
            .await
            .expect("HGETALL");
        hashes.push(hash);
    }
    hashes
}

/// Runs the scenario; node 1 comes back (empty) `restart_after` after it was killed.
async fn canary(restart_after: Duration) -> Outcome {
    let nodes = RedisNodes::start(3).expect("start the lock nodes (no persistence)");
    let urls = nodes.urls();
    let resource_server = RedisServer::start().expect("start the resource server");
    let resource = FencedResource::connect(&resource_server.url())
        .await
        .expect("resource");
    resource.reset(KEY).await.expect("reset the resource");
    let history = History::new();

    let a = redlock(&urls).await;
    let b = redlock(&urls).await;
    let foreign = Locker::new(
        RedisBackend::connect(urls[2].as_str())
            .await
            .expect("connect"),
    );

    // Node 2 is taken by a foreign owner, so A gets a bare majority: nodes 0 and 1.
    let foreign_guard = foreign
        .lock_with(
            NAME,
            &LockOptions::new()
                .no_wait()
                .fixed_lease(Duration::from_secs(10))
                .owner(Owner::new()),
        )
        .await
        .expect("foreign lock");
    let a_asked_at = Instant::now();
    let guard_a = a
        .lock_with(
            NAME,
            &LockOptions::new()
                .no_wait()
                .fixed_lease(LEASE)
                .fenced()
                .owner(Owner::new()),
        )
        .await
        .expect("A's attempt");
    let mut hold_a = history.begin(0, guard_a.owner_field(), guard_a.fencing_token());
    hold_a.set_waited(a_asked_at.elapsed());
    let owner_a = guard_a.owner_field().to_owned();
    let token_a = guard_a.fencing_token();
    let hashes = lock_hashes(&urls).await;
    for (i, hash) in hashes.iter().enumerate().take(2) {
        assert_eq!(hash.get(&owner_a), Some(&1), "A on node {i}: {hash:?}");
    }
    assert_eq!(
        hashes[2],
        HashMap::from([(foreign_guard.owner_field().to_owned(), 1)]),
        "node 2 is the foreign owner's only"
    );
    eprintln!("A holds nodes 0 and 1 with token {token_a}");
    let read_a = resource
        .read_fenced(KEY, token_a, &owner_a)
        .await
        .expect("A's fenced read");
    assert_eq!(read_a.outcome, WriteOutcome::Accepted);
    assert_eq!(
        foreign_guard.release().await.expect("foreign release"),
        ReleaseOutcome::Released
    );

    // Node 1 crashes and loses A's hold; B, another process, starts asking at once.
    let nodes = Arc::new(Mutex::new(nodes));
    nodes.lock().unwrap().kill(1).expect("kill -9 node 1");
    let killed_at = Instant::now();
    let restarter = {
        let nodes = nodes.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(killed_at + restart_after).await;
            tokio::task::spawn_blocking(move || {
                nodes
                    .lock()
                    .unwrap()
                    .restart(1)
                    .expect("restart node 1, empty");
            })
            .await
            .expect("restart task");
            eprintln!(
                "node 1 restarted empty {:?} after the kill",
                killed_at.elapsed()
            );
        })
    };
    let (b_wrote, b_has_written) = oneshot::channel::<()>();
    let b_task = {
        let (history, resource) = (history.clone(), resource.clone());
        tokio::spawn(async move {
            let asked_at = Instant::now();
            let guard = b
                .lock_with(
                    NAME,
                    &LockOptions::new()
                        .wait(B_WAIT)
                        .fixed_lease(LEASE)
                        .fenced()
                        .owner(Owner::new()),
                )
                .await
                .expect("B's attempt");
            let acquired_at = Instant::now();
            let token = guard.fencing_token();
            let mut hold = history.begin_at(1, guard.owner_field(), Some(token), acquired_at);
            hold.set_waited(acquired_at - asked_at);
            eprintln!(
                "B granted after {:?} with token {token}",
                acquired_at - asked_at
            );
            let step = resource
                .increment(KEY, Some(token), guard.owner_field(), Duration::ZERO)
                .await
                .expect("B's increment");
            hold.write_sent_at(step.write_sent_at);
            let _ = b_wrote.send(());
            tokio::time::sleep(B_HOLD).await;
            hold.set_lost_signal(guard.is_lost());
            hold.end(Some(step.outcome.into()));
            let owner = guard.owner_field().to_owned();
            let released = guard.release().await;
            eprintln!("B released: {released:?}");
            (token, step.outcome, acquired_at, owner)
        })
    };

    // A works until B has written (if B gets in while A holds) or until shortly before its
    // validity ends, then writes what it read plus one.
    let a_valid_until = guard_a.valid_until();
    let b_got_in = tokio::select! {
        signal = b_has_written => signal.is_ok(),
        () = tokio::time::sleep_until(a_valid_until - A_MARGIN) => false,
    };
    if b_got_in {
        eprintln!(
            "B wrote while A holds its lease ({:?} left)",
            guard_a.remaining()
        );
    }
    let write_sent_at = Instant::now();
    let write_a = resource
        .write(KEY, read_a.state.value + 1, Some(token_a), &owner_a)
        .await
        .expect("A's write");
    hold_a.write_sent_at(write_sent_at);
    hold_a.set_lost_signal(guard_a.is_lost());
    // Only when B got in: otherwise node 1 may still be down.
    let hashes_during_a = if b_got_in {
        Some(lock_hashes(&urls).await)
    } else {
        None
    };
    hold_a.end(Some(WriteStatus::from(write_a)));
    // A lets go only once its lease is over: until then, its hold blocks node 0.
    tokio::time::sleep_until(a_asked_at + LEASE + Duration::from_millis(100)).await;
    eprintln!("A released: {:?}", guard_a.release().await);

    let (token_b, write_b, b_acquired_at, owner_b) = b_task.await.expect("B's task");
    restarter.await.expect("the restarter");
    if let Some(hashes_during_a) = hashes_during_a {
        // Two holders at once, on the nodes themselves.
        eprintln!("lock hashes while both held: {hashes_during_a:?}");
        assert_eq!(hashes_during_a[0].get(&owner_a), Some(&1), "A keeps node 0");
        for (i, hash) in hashes_during_a.iter().enumerate().skip(1) {
            assert_eq!(hash.get(&owner_b), Some(&1), "B on node {i}: {hash:?}");
        }
    }
    let final_value = resource.read(KEY).await.expect("read").value;
    let report = history.check(final_value, 0);
    eprintln!("tokens: A {token_a}, B {token_b}; writes: A {write_a:?}, B {write_b:?}");
    eprintln!("report: {report}");
    Outcome {
        report,
        token_a,
        token_b,
        write_a,
        write_b,
        a_asked_at,
        a_valid_until,
        b_acquired_at,
    }
}

/// A node restarted at once without persistence hands the lock to a second owner while the
/// first still holds it: the checker must observe the overlap, and the fenced resource must
/// refuse the older holder's write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_is_observed() {
    let outcome = canary(Duration::ZERO).await;
    let report = &outcome.report;
    assert!(
        outcome.b_acquired_at < outcome.a_valid_until,
        "B was not granted during A's validity: the canary did not fire"
    );
    assert!(
        report.overlaps >= 1,
        "the checker missed the overlap: {report}"
    );
    // The checker drew the holds around the overlap: the picture is left under `target/` for a
    // reader to see the hole.
    let picture = report.timeline.as_ref().expect("a timeline of the overlap");
    let size = std::fs::metadata(picture).map_or(0, |meta| meta.len());
    assert!(size > 0, "{} is missing or empty", picture.display());
    eprintln!("timeline: {}", picture.display());
    // A finding if it fails: the token of the second holder must exceed the first's.
    assert!(
        outcome.token_b > outcome.token_a,
        "RedLock token order broken: B (later holder) got {} <= A's {}",
        outcome.token_b,
        outcome.token_a
    );
    assert_eq!(outcome.write_b, WriteOutcome::Accepted);
    assert_eq!(
        outcome.write_a,
        WriteOutcome::RejectedStale {
            last_token: outcome.token_b
        },
        "A's stale write must be refused"
    );
    assert!(report.stale_writes >= 1, "{report}");
    assert_eq!(
        report.stale_writes_rejected_ratio,
        Some(1.0),
        "every stale write refused: {report}"
    );
    assert_eq!(report.fence_rejections, 1);
    assert_eq!(report.lost_updates, 0);
}

/// The same crash with the restart delayed past the lease: B only gets the lock once A's lease
/// has run out, so there is no overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_delayed_past_the_lease_is_safe() {
    let outcome = canary(PAST_THE_LEASE).await;
    let report = &outcome.report;
    eprintln!(
        "B granted {:?} after A asked (lease {LEASE:?})",
        outcome.b_acquired_at - outcome.a_asked_at
    );
    assert!(
        outcome.b_acquired_at >= outcome.a_valid_until,
        "B was granted {:?} before A's validity ended",
        outcome.a_valid_until - outcome.b_acquired_at
    );
    assert!(
        outcome.b_acquired_at >= outcome.a_asked_at + LEASE,
        "B was granted before A's lease could have run out on node 0"
    );
    assert_eq!(report.overlaps, 0, "{report}");
    assert!(
        outcome.token_b > outcome.token_a,
        "RedLock token order broken: B (later holder) got {} <= A's {}",
        outcome.token_b,
        outcome.token_a
    );
    assert_eq!(outcome.write_a, WriteOutcome::Accepted);
    assert_eq!(outcome.write_b, WriteOutcome::Accepted);
    assert_eq!(report.stale_writes, 0, "{report}");
    assert_eq!(report.fence_rejections, 0);
    assert_eq!(report.lost_updates, 0);
}

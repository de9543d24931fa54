//! Canaries: situations that are known to break mutual exclusion on Redis (outside the model
//! of `docs/design.md`, "What is guaranteed and what is not"). Two holders really do overlap
//! here, and each test checks that
//!
//! - the [`History`] checker **sees** it (`overlaps >= 1`): if a canary ever comes out clean,
//!   the test setup (or the checker) has stopped exercising the failure, and
//! - fencing **stops** it: every stale write (a write by the older holder sent after the newer
//!   holder acquired) is rejected by the [`FencedResource`], the newer holder's token is larger
//!   (tokens are `max(counter + 1, server time in µs)`, so they rise even when the counter is
//!   lost), and no update is lost.
//!
//! The canaries:
//!
//! - a replica promoted before it replicated the grant (failover, [`ReplicatedPair`]);
//! - a single node killed and restarted without persistence;
//! - a holder paused past its lease: simulated in-process (a fixed-lease holder that stops for
//!   1 s between its read and its write), and for real: a child process holding a
//!   watchdog-mode lock frozen with `SIGSTOP` (its watchdog cannot renew while frozen).
//!
//! A control test shows the restart canary disappears with `appendfsync always`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use lock_core::{Error, Fenced, LockGuard, LockOptions, Locker, ReleaseOutcome};
use lock_redis::RedisBackend;
use lock_testkit::resource::Increment;
use lock_testkit::{
    FencedResource, History, RedisServer, ReplicatedPair, Report, ServerOptions, WriteOutcome,
    WriteStatus,
};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

/// The resource key every canary increments.
const KEY: &str = "canary";
/// Rounds of each in-process canary (each one is one overlap).
const ROUNDS: usize = 3;

async fn locker(url: &str) -> Locker<RedisBackend> {
    let backend = RedisBackend::builder(url)
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap_or_else(|error| panic!("connect to {url}: {error}"));
    Locker::new(backend)
}

async fn resource(server: &RedisServer) -> FencedResource {
    let resource = FencedResource::connect(&server.url())
        .await
        .expect("connect to the resource server");
    resource.reset(KEY).await.expect("reset the resource");
    resource
}

/// A fenced watchdog-mode lock taken at once (the canaries take free locks).
fn fenced_watchdog(lease: Duration) -> LockOptions<Fenced> {
    LockOptions::new().watchdog_lease(lease).fenced().no_wait()
}

fn token<B: lock_core::LockBackend>(guard: &LockGuard<B, Fenced>) -> u64 {
    guard.fencing_token()
}

/// The fenced read-modify-write of the holder of `guard`: a fenced read, then a fenced write of
/// the value read plus one.
async fn rmw<B: lock_core::LockBackend>(
    resource: &FencedResource,
    guard: &LockGuard<B, Fenced>,
) -> Increment {
    resource
        .increment(KEY, Some(token(guard)), guard.owner_field(), Duration::ZERO)
        .await
        .expect("resource increment")
}

/// Checks a canary's report: the overlap is seen, every stale write was refused, nothing lost.
fn assert_seen_and_fenced(name: &str, report: &Report, rounds: usize) {
    println!("canary {name}: {report}");
    println!(
        "canary {name}: {} overlaps, {} stale writes, {} rejected, ratio {:?}, {} lost updates",
        report.overlaps,
        report.stale_writes,
        report.stale_writes_rejected,
        report.stale_writes_rejected_ratio,
        report.lost_updates
    );
    assert!(
        report.overlaps >= rounds as u64,
        "{name}: the checker must see the overlap of every round: {report}"
    );
    assert!(
        report.stale_writes >= rounds as u64,
        "{name}: every round has a stale write: {report}"
    );
    assert_eq!(
        report.stale_writes_rejected_ratio,
        Some(1.0),
        "{name}: fencing must reject 100 % of the stale writes: {report}"
    );
    assert_eq!(
        report.stale_writes_rejected, report.fence_rejections,
        "{name}: only stale writes are rejected: {report}"
    );
    assert_eq!(report.lost_updates, 0, "{name}: {report}");
    assert_timeline_left(name, report);
}

/// The checker drew the holds around the overlap: the picture is left under `target/` for a
/// reader to see the hole.
fn assert_timeline_left(name: &str, report: &Report) {
    let path = report
        .timeline
        .as_ref()
        .unwrap_or_else(|| panic!("{name}: no timeline picture: {report}"));
    let size = std::fs::metadata(path).map_or(0, |meta| meta.len());
    assert!(size > 0, "{name}: {} is missing or empty", path.display());
    println!("canary {name}: timeline {}", path.display());
}

/// Failover to a replica that had not replicated the grant. The replica knew the lock and its
/// fencing counter from earlier grants (replicated before the cut); the last grant, made after
/// the link was cut, never reached it. After the promotion a second client gets the same lock
/// from the new primary while the first still holds it on the old one (and keeps renewing it
/// there: its guard never reports a loss).
///
/// The link is cut *before* A's grant: on loopback, a grant made before the cut is replicated
/// within a millisecond, and the replica would then refuse B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_promoted_before_it_replicated() {
    let mut pair = ReplicatedPair::start().expect("start a primary and a replica");
    let resource_server = RedisServer::start().expect("start the resource server");
    let resource = resource(&resource_server).await;
    let history = History::new();
    let options = fenced_watchdog(Duration::from_secs(2));
    for round in 0..ROUNDS {
        let name = format!("canary:failover:{round}");
        if round > 0 {
            tokio::task::block_in_place(|| pair.link()).expect("relink the replica");
        }
        let a = locker(&pair.primary().url()).await;
        // Earlier grants of the name, replicated: the replica knows the counter.
        for _ in 0..3 {
            let guard = a.lock_with(&name, &options).await.unwrap();
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        }
        tokio::task::block_in_place(|| {
            pair.wait_replicated().expect("replicated");
            pair.cut_link()
        })
        .expect("cut the replication link");

        let guard_a = a.lock_with(&name, &options).await.unwrap();
        let mut hold_a = history.begin(0, guard_a.owner_field(), guard_a.fencing_token());
        tokio::task::block_in_place(|| pair.promote()).expect("promote the replica");

        let b = locker(&pair.replica().url()).await;
        let guard_b = b.lock_with(&name, &options).await.unwrap();
        let mut hold_b = history.begin(1, guard_b.owner_field(), guard_b.fencing_token());
        assert!(
            token(&guard_b) > token(&guard_a),
            "B's token {} must be above A's {}",
            token(&guard_b),
            token(&guard_a)
        );
        assert!(
            !guard_a.is_lost(),
            "A cannot know: its primary still has its lock"
        );

        // B (the newer holder) works first, then A, which still believes it holds the lock.
        let step_b = rmw(&resource, &guard_b).await;
        assert_eq!(step_b.outcome, WriteOutcome::Accepted, "B's write");
        hold_b.write_sent_at(step_b.write_sent_at);
        hold_b.end(Some(step_b.outcome.into()));
        let step_a = rmw(&resource, &guard_a).await;
        hold_a.write_sent_at(step_a.write_sent_at);
        hold_a.set_lost_signal(guard_a.is_lost());
        hold_a.end(Some(step_a.outcome.into()));
        assert_eq!(
            WriteStatus::from(step_a.outcome),
            WriteStatus::Rejected,
            "A's stale write (token {} < {})",
            token(&guard_a),
            token(&guard_b)
        );
        println!(
            "failover round {round}: A token {} on the old primary, B token {} on the promoted \
             replica (+{} µs); A's write: {:?}",
            token(&guard_a),
            token(&guard_b),
            token(&guard_b) - token(&guard_a),
            step_a.outcome
        );
        // Split brain: each primary has its own holder, and each release succeeds.
        assert_eq!(guard_b.release().await.unwrap(), ReleaseOutcome::Released);
        assert_eq!(guard_a.release().await.unwrap(), ReleaseOutcome::Released);
    }
    let value = resource.read(KEY).await.unwrap().value;
    assert_eq!(value, ROUNDS as i64, "only B's writes were applied");
    assert_seen_and_fenced("failover", &history.check(value, 0), ROUNDS);
}

/// `kill -9` of a node without persistence while A holds a watchdog-mode lock, then a restart:
/// the node has forgotten the lock and its fencing counter, and B gets the lock at once. B's
/// token is still larger than A's, because tokens never go below the server's clock in µs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence() {
    let mut server = RedisServer::start().expect("start the lock server (no persistence)");
    let resource_server = RedisServer::start().expect("start the resource server");
    let resource = resource(&resource_server).await;
    let history = History::new();
    let options = fenced_watchdog(Duration::from_secs(3));
    for round in 0..ROUNDS {
        let name = format!("canary:restart:{round}");
        let (a, b) = (locker(&server.url()).await, locker(&server.url()).await);
        let guard_a = a.lock_with(&name, &options).await.unwrap();
        let mut hold_a = history.begin(0, guard_a.owner_field(), guard_a.fencing_token());

        tokio::task::block_in_place(|| {
            server.kill()?;
            server.restart()
        })
        .expect("kill -9 + restart");

        // B's connection was broken by the crash; a wait rides out the reconnect.
        let guard_b = b
            .lock_with(&name, &options.clone().wait(Duration::from_secs(5)))
            .await
            .unwrap();
        let mut hold_b = history.begin(1, guard_b.owner_field(), guard_b.fencing_token());
        assert!(
            token(&guard_b) > token(&guard_a),
            "B's token {} must be above A's {} although the counter was lost",
            token(&guard_b),
            token(&guard_a)
        );

        let step_b = rmw(&resource, &guard_b).await;
        assert_eq!(step_b.outcome, WriteOutcome::Accepted, "B's write");
        hold_b.write_sent_at(step_b.write_sent_at);
        hold_b.end(Some(step_b.outcome.into()));
        // A may or may not have noticed by now (its next renewal finds the lock gone); a holder
        // that does not check, or checked just before the crash, writes anyway.
        let a_noticed = guard_a.is_lost();
        let step_a = rmw(&resource, &guard_a).await;
        hold_a.write_sent_at(step_a.write_sent_at);
        hold_a.set_lost_signal(a_noticed);
        hold_a.end(Some(step_a.outcome.into()));
        assert!(
            !step_a.outcome.is_accepted(),
            "A's stale write must be rejected"
        );
        println!(
            "restart round {round}: A token {}, B token {} after the restart (+{} µs); A had \
             noticed the loss: {a_noticed}; A's write: {:?}",
            token(&guard_a),
            token(&guard_b),
            token(&guard_b) - token(&guard_a),
            step_a.outcome
        );
        assert_eq!(guard_b.release().await.unwrap(), ReleaseOutcome::Released);
        // A's connection died with the server; if nothing has used it since, the release is
        // the call that finds out (releases are not retried). Either way A holds nothing.
        match guard_a.release().await {
            Ok(outcome) => assert_eq!(outcome, ReleaseOutcome::NotHeld),
            Err(error) => assert!(error.is_ambiguous(), "{error}"),
        }
    }
    let value = resource.read(KEY).await.unwrap().value;
    assert_eq!(value, ROUNDS as i64, "only B's writes were applied");
    assert_seen_and_fenced(
        "restart without persistence",
        &history.check(value, 0),
        ROUNDS,
    );
}

/// The control for [`restart_without_persistence`]: with `appendfsync always` the restarted
/// node still has A's lock, and B does not get it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_restart_with_fsynced_aof_keeps_the_lock() {
    let mut server =
        RedisServer::start_with(ServerOptions::new().aof_fsync_always(true)).expect("start");
    let name = "canary:restart-aof";
    let options = fenced_watchdog(Duration::from_secs(3));
    let (a, b) = (locker(&server.url()).await, locker(&server.url()).await);
    let guard_a = a.lock_with(name, &options).await.unwrap();
    let token_a = token(&guard_a);
    tokio::task::block_in_place(|| {
        server.kill()?;
        server.restart()
    })
    .expect("kill -9 + restart");
    let refused = b
        .lock_with(name, &options.clone().wait(Duration::from_millis(800)))
        .await;
    assert!(
        matches!(refused, Err(Error::NotAcquired { .. })),
        "the AOF kept A's lock: {refused:?}"
    );
    sleep(Duration::from_millis(1200)).await; // A's watchdog renews after reconnecting
    assert!(!guard_a.is_lost(), "{:?}", guard_a.remaining());
    assert_eq!(guard_a.release().await.unwrap(), ReleaseOutcome::Released);
    let guard_b = b.lock_with(name, &options).await.unwrap();
    assert!(token(&guard_b) > token_a);
    assert_eq!(guard_b.release().await.unwrap(), ReleaseOutcome::Released);
}

/// A holder paused past its lease, simulated in one process: A takes a **fixed** 500 ms lease
/// (nothing renews it, as nothing runs in a frozen process), does the fenced read of its
/// read-modify-write, checks that its lease is not lost, and then "freezes" for 1 s without
/// touching anything. B acquires when A's lease expires and does its own read-modify-write. A
/// then wakes and sends its write, based on the value it read before the pause. The check
/// before the pause passed, so only fencing stops the write.
///
/// [`frozen_holder_process`] does the same with a real process frozen by `SIGSTOP`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_paused_past_its_lease_in_process() {
    const LEASE: Duration = Duration::from_millis(500);
    const FREEZE: Duration = Duration::from_secs(1);
    let server = RedisServer::start().expect("start the lock server");
    let resource_server = RedisServer::start().expect("start the resource server");
    let resource = resource(&resource_server).await;
    let history = History::new();
    for round in 0..ROUNDS {
        let name = format!("canary:pause:{round}");
        let (a, b) = (locker(&server.url()).await, locker(&server.url()).await);
        let a_asked = Instant::now();
        let guard_a = a
            .lock_with(
                &name,
                &LockOptions::new().fixed_lease(LEASE).fenced().no_wait(),
            )
            .await
            .unwrap();
        let a_acquired = Instant::now();
        let mut hold_a = history.begin_at(
            0,
            guard_a.owner_field(),
            guard_a.fencing_token(),
            a_acquired,
        );
        let read = resource
            .read_fenced(KEY, token(&guard_a), guard_a.owner_field())
            .await
            .unwrap();
        assert!(read.outcome.is_accepted());
        assert!(!guard_a.is_lost(), "A checks its lease before the pause");

        // A freezes: it sends nothing and renews nothing for FREEZE.
        let frozen = {
            let (resource, owner, token_a) = (
                resource.clone(),
                guard_a.owner_field().to_owned(),
                token(&guard_a),
            );
            tokio::spawn(async move {
                sleep(FREEZE).await;
                let sent_at = Instant::now();
                let outcome = resource
                    .write(KEY, read.state.value + 1, Some(token_a), &owner)
                    .await
                    .expect("A's write");
                (sent_at, outcome)
            })
        };

        let asked = Instant::now();
        let guard_b = b
            .lock_with(
                &name,
                &LockOptions::new()
                    .fixed_lease(Duration::from_secs(5))
                    .fenced()
                    .wait(Duration::from_secs(3)),
            )
            .await
            .unwrap();
        let b_acquired = Instant::now();
        let mut hold_b = history.begin_at(
            1,
            guard_b.owner_field(),
            guard_b.fencing_token(),
            b_acquired,
        );
        assert!(token(&guard_b) > token(&guard_a));
        let step_b = rmw(&resource, &guard_b).await;
        assert_eq!(step_b.outcome, WriteOutcome::Accepted, "B's write");
        hold_b.write_sent_at(step_b.write_sent_at);
        hold_b.end(Some(step_b.outcome.into()));

        let (a_sent_at, a_outcome) = frozen.await.expect("A's task");
        hold_a.write_sent_at(a_sent_at);
        hold_a.set_lost_signal(guard_a.is_lost());
        hold_a.end(Some(a_outcome.into()));
        assert!(!a_outcome.is_accepted(), "A's stale write must be rejected");
        println!(
            "pause round {round}: B got the lock {:?} after A (waited {:?}); A wrote {:?} after \
             A's acquire: {a_outcome:?}",
            b_acquired - a_acquired,
            b_acquired - asked,
            a_sent_at - a_acquired
        );
        assert!(
            b_acquired - a_asked >= LEASE,
            "B got the lock before A's lease ended"
        );
        assert_eq!(guard_b.release().await.unwrap(), ReleaseOutcome::Released);
        assert_eq!(guard_a.release().await.unwrap(), ReleaseOutcome::NotHeld);
    }
    let value = resource.read(KEY).await.unwrap().value;
    assert_eq!(value, ROUNDS as i64, "only B's writes were applied");
    assert_seen_and_fenced(
        "paused holder (in process)",
        &history.check(value, 0),
        ROUNDS,
    );
}

// ---------------------------------------------------------------------------------------------
// A real frozen process.

/// Set (to the lock server's URL) when this test binary runs as the frozen child.
const CHILD_LOCK_URL: &str = "DISTLOCK_CANARY_CHILD_LOCK_URL";
/// The resource server's URL, for the child.
const CHILD_RESOURCE_URL: &str = "DISTLOCK_CANARY_CHILD_RESOURCE_URL";
/// The child's lines on stdout start with this (libtest prints its own lines there too).
const CHILD_PREFIX: &str = "CHILD ";
const FROZEN_LOCK: &str = "canary:sigstop";
const CHILD_LEASE: Duration = Duration::from_millis(600);

/// Not a test on its own: the body of the child process of [`frozen_holder_process`], which
/// runs this test binary again with this test as the only one. Returns at once otherwise.
///
/// The child takes a fenced watchdog-mode lock (600 ms lease), does the fenced read of its
/// read-modify-write, checks its lease, reports, and blocks reading stdin; the parent freezes it
/// there. Once a line arrives, it sends its write at once, with no further check (a process
/// resumed from a pause continues where it stopped), reports the outcome and releases.
#[test]
fn frozen_holder_child() {
    let (Ok(lock_url), Ok(resource_url)) = (
        std::env::var(CHILD_LOCK_URL),
        std::env::var(CHILD_RESOURCE_URL),
    ) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let locker = locker(&lock_url).await;
        let resource = FencedResource::connect(&resource_url).await.unwrap();
        let guard = locker
            .lock_with(FROZEN_LOCK, &fenced_watchdog(CHILD_LEASE))
            .await
            .unwrap();
        let owner = guard.owner_field().to_owned();
        let read = resource
            .read_fenced(KEY, token(&guard), &owner)
            .await
            .unwrap();
        assert!(read.outcome.is_accepted());
        let lost = guard.is_lost();
        println!("{CHILD_PREFIX}acquired {} {owner} {lost}", token(&guard));
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap(); // frozen in here
        let outcome = resource
            .write(KEY, read.state.value + 1, Some(token(&guard)), &owner)
            .await
            .unwrap();
        let lost = guard.is_lost();
        println!(
            "{CHILD_PREFIX}wrote {} {lost}",
            if outcome.is_accepted() {
                "accepted"
            } else {
                "rejected"
            }
        );
        std::io::stdout().flush().unwrap();
        let released = guard.release().await.unwrap();
        println!("{CHILD_PREFIX}released {released:?}");
    });
}

/// `kill -STOP` / `kill -CONT` (no `unsafe` libc call), then waits until `/proc` shows the
/// process stopped or running.
fn signal(child: &Child, stop: bool) {
    let pid = child.id().to_string();
    let status = Command::new("kill")
        .arg(if stop { "-STOP" } else { "-CONT" })
        .arg(&pid)
        .status()
        .expect("run kill");
    assert!(status.success(), "kill failed");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name in parentheses, which may contain spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if matches!(state, Some("T" | "t")) == stop {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pid {pid} state {state:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Kills the child if the test fails half-way.
struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
}

impl ChildProcess {
    fn spawn(lock_url: &str, resource_url: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "frozen_holder_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_LOCK_URL, lock_url)
            .env(CHILD_RESOURCE_URL, resource_url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may have printed `test frozen_holder_child ... ` on the same line.
                if let Some(at) = line.find(CHILD_PREFIX) {
                    let _ = tx.send(line[at + CHILD_PREFIX.len()..].to_owned());
                }
            }
        });
        ChildProcess {
            child,
            stdin,
            lines,
        }
    }

    async fn line(&mut self) -> Vec<String> {
        let line = timeout(Duration::from_secs(10), self.lines.recv())
            .await
            .expect("the child reports within 10 s")
            .expect("the child exited early");
        line.split_whitespace().map(str::to_owned).collect()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A holder process frozen past its (watchdog-mode) lease with `SIGSTOP`: while it is frozen
/// its watchdog cannot renew, the lock expires, and B takes it and writes. The frozen process
/// had checked its lease right before the freeze; resumed, it sends the write it was about to
/// send. Fencing rejects it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holder_process() {
    let server = RedisServer::start().expect("start the lock server");
    let resource_server = RedisServer::start().expect("start the resource server");
    let resource = resource(&resource_server).await;
    let history = History::new();
    let mut child = ChildProcess::spawn(&server.url(), &resource_server.url());

    let acquired = child.line().await;
    let child_seen_at = Instant::now();
    assert_eq!(acquired[0], "acquired", "{acquired:?}");
    let token_a: u64 = acquired[1].parse().unwrap();
    let owner_a = acquired[2].clone();
    assert_eq!(
        acquired[3], "false",
        "the child's lease was fine before the freeze"
    );
    // The interval recorded for the child lies inside the time it acted as the holder: it
    // starts when the parent saw the acquire and ends when the parent saw the write's answer.
    let mut hold_a = history.begin_at(0, owner_a.as_str(), Some(token_a), child_seen_at);
    tokio::task::block_in_place(|| signal(&child.child, true));
    let frozen_at = Instant::now();

    let b = locker(&server.url()).await;
    let guard_b = b
        .lock_with(
            FROZEN_LOCK,
            &fenced_watchdog(Duration::from_secs(5)).wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let b_acquired = Instant::now();
    let mut hold_b = history.begin_at(
        1,
        guard_b.owner_field(),
        guard_b.fencing_token(),
        b_acquired,
    );
    assert!(token(&guard_b) > token_a);
    let step_b = rmw(&resource, &guard_b).await;
    assert_eq!(step_b.outcome, WriteOutcome::Accepted, "B's write");
    hold_b.write_sent_at(step_b.write_sent_at);
    hold_b.end(Some(step_b.outcome.into()));
    sleep(Duration::from_millis(100)).await;

    // The go-ahead waits in the pipe; on SIGCONT the child reads it and writes at once.
    let stdin = child.stdin.as_mut().expect("stdin");
    stdin.write_all(b"go\n").unwrap();
    stdin.flush().unwrap();
    let resumed_at = Instant::now();
    tokio::task::block_in_place(|| signal(&child.child, false));
    let wrote = child.line().await;
    hold_a.write_sent_at(resumed_at); // the child's write was sent after this
    hold_a.set_lost_signal(wrote[2] == "true");
    let status = if wrote[1] == "accepted" {
        WriteStatus::Accepted
    } else {
        WriteStatus::Rejected
    };
    hold_a.end(Some(status));
    let released = child.line().await;
    println!(
        "frozen process: token {token_a}, frozen for {:?}; B got the lock {:?} after the freeze \
         (token {}); the child's write: {}, its guard lost after resuming: {}; its release: {}",
        resumed_at - frozen_at,
        b_acquired - frozen_at,
        token(&guard_b),
        wrote[1],
        wrote[2],
        released[1]
    );
    assert_eq!(
        status,
        WriteStatus::Rejected,
        "the frozen child's stale write"
    );
    assert_eq!(released[1], "NotHeld");
    assert_eq!(guard_b.release().await.unwrap(), ReleaseOutcome::Released);
    let exit = tokio::task::block_in_place(|| child.child.wait()).expect("wait for the child");
    assert!(exit.success(), "the child failed: {exit}");

    let value = resource.read(KEY).await.unwrap().value;
    assert_eq!(value, 1, "only B's write was applied");
    assert_seen_and_fenced("paused holder (SIGSTOP)", &history.check(value, 0), 1);
}

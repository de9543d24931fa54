//! The history checker against real servers: a lock server, a separate resource server, and
//! workloads that must pass (a fenced lock) or must fail (no lock at all; tokens but no lock).

use std::time::Duration;

use lock_core::{LockOptions, Locker};
use lock_redis::RedisBackend;
use lock_testkit::history::{CheckOptions, History, Report, WriteStatus};
use lock_testkit::resource::{FencedResource, WriteOutcome};
use lock_testkit::{RedisServer, ServerError};
use tokio::time::Instant;

const TASKS: usize = 8;
const ITERATIONS: usize = 50;
const KEY: &str = "counter";
/// The pause between the read and the write of an unprotected read-modify-write.
const RMW_PAUSE: Duration = Duration::from_millis(2);

fn start_server() -> RedisServer {
    match RedisServer::start() {
        Ok(server) => server,
        Err(err @ ServerError::BinaryNotFound { .. }) => panic!("{err}"),
        Err(err) => panic!("could not start a test server: {err}"),
    }
}

/// How each unlocked worker gets its token.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unlocked {
    /// No token: plain read, unfenced write.
    Unfenced,
    /// A token from an INCR counter, taken before the read; fenced read and write.
    Fenced,
    /// A token from an INCR counter, taken before the read; plain read, fenced write.
    WriteFencedOnly,
}

/// `TASKS` workers × `ITERATIONS` read-modify-writes on the resource without any lock, each
/// worker its own owner. Returns the report and the resource's final state.
async fn run_unlocked(mode: Unlocked) -> (Report, FencedResource, i64) {
    let server = start_server();
    let resource = FencedResource::connect(&server.url())
        .await
        .expect("connect to the resource server");
    let history = History::new();
    let initial = resource.read(KEY).await.expect("read").value;

    let mut tasks = Vec::new();
    for worker in 0..TASKS {
        let (resource, history) = (resource.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("worker-{worker}");
            for _ in 0..ITERATIONS {
                let token = match mode {
                    Unlocked::Unfenced => None,
                    Unlocked::Fenced | Unlocked::WriteFencedOnly => {
                        Some(resource.next_token(KEY).await.expect("INCR"))
                    }
                };
                // "Acquired" without a lock: the hold spans the whole read-modify-write.
                let mut hold = history.begin(worker, owner.as_str(), token);
                let step = match (mode, token) {
                    (Unlocked::WriteFencedOnly, Some(token)) => {
                        resource
                            .increment_write_fenced(KEY, token, &owner, RMW_PAUSE)
                            .await
                    }
                    _ => resource.increment(KEY, token, &owner, RMW_PAUSE).await,
                }
                .expect("increment");
                hold.write_sent_at(step.write_sent_at);
                hold.end(Some(step.outcome.into()));
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker panicked");
    }

    let final_value = resource.read(KEY).await.expect("read").value;
    let report = history.check(final_value, initial);
    (report, resource, final_value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_lock_has_no_overlaps_and_no_lost_updates() {
    let lock_server = start_server();
    let resource_server = start_server();
    let locker = Locker::new(
        RedisBackend::connect(&lock_server.url())
            .await
            .expect("connect to the lock server"),
    );
    let resource = FencedResource::connect(&resource_server.url())
        .await
        .expect("connect to the resource server");
    let history = History::new();
    let initial = resource.read(KEY).await.expect("read").value;

    let mut tasks = Vec::new();
    for worker in 0..TASKS {
        let (locker, resource, history) = (locker.clone(), resource.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            let options = LockOptions::new().fenced().wait(Duration::from_secs(60));
            for _ in 0..ITERATIONS {
                let asked = Instant::now();
                let guard = locker
                    .lock_with("history-test", &options)
                    .await
                    .expect("lock");
                let token = guard.fencing_token();
                let mut hold = history.begin(worker, guard.owner_field(), token);
                hold.set_waited(hold.hold().acquired_at - asked);

                // Same pause as the unlocked controls, so a broken lock would lose updates.
                let step = resource
                    .increment(KEY, token, guard.owner_field(), RMW_PAUSE)
                    .await
                    .expect("increment");
                hold.write_sent_at(step.write_sent_at);
                hold.set_lost_signal(guard.is_lost());
                hold.end(Some(step.outcome.into()));
                let released = guard.release().await.expect("release");
                assert!(released.was_held(), "the lock was held until released");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker panicked");
    }

    let final_value = resource.read(KEY).await.expect("read").value;
    let report = history.check_with(
        final_value,
        initial,
        &CheckOptions::new().wait_budget(Duration::from_secs(5)),
    );
    println!("{report}");
    let total = (TASKS * ITERATIONS) as u64;
    assert_eq!(report.acquisitions, TASKS * ITERATIONS, "{report}");
    assert_eq!(report.owners, TASKS, "one owner per task: {report}");
    assert_eq!(report.overlaps, 0, "{report}");
    assert_eq!(report.lost_updates, 0, "{report}");
    assert_eq!(report.fence_rejections, 0, "{report}");
    assert_eq!(report.accepted_writes, total, "{report}");
    assert_eq!(report.lost_signals, 0, "{report}");
    assert_eq!(report.stale_writes_rejected_ratio, None, "{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(final_value, initial + total as i64);
    let wait = report.wait.expect("waits recorded");
    assert_eq!(wait.count, TASKS * ITERATIONS);
    assert!(wait.p50 <= wait.p99 && wait.p99 <= wait.max, "{report}");
    let stats = resource.stats();
    assert_eq!(
        (stats.accepted, stats.rejected, stats.stale_reads),
        (total, 0, 0)
    );
}

/// Negative control: without any lock the checker must see overlaps and lost updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_lock_shows_overlaps_and_lost_updates() {
    let (report, resource, _) = run_unlocked(Unlocked::Unfenced).await;
    println!("{report}");
    assert_eq!(report.acquisitions, TASKS * ITERATIONS, "{report}");
    assert!(report.overlaps > 0, "{report}");
    assert!(!report.overlap_examples.is_empty(), "{report}");
    assert!(report.lost_updates > 0, "{report}");
    assert_eq!(
        report.fence_rejections, 0,
        "unfenced writes are never refused: {report}"
    );
    assert!(!report.is_clean());
    assert!(report.to_string().contains("Overlaps: worker"), "{report}");
    assert_eq!(resource.stats().accepted, (TASKS * ITERATIONS) as u64);
}

/// Negative control: tokens without a lock. Holds overlap, but the fence (on the read and the
/// write) turns every conflicting write into a rejection, so no update is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_without_lock_are_rejected_not_lost() {
    let (report, resource, final_value) = run_unlocked(Unlocked::Fenced).await;
    println!("{report}");
    assert!(report.overlaps > 0, "{report}");
    assert!(report.fence_rejections > 0, "{report}");
    assert_eq!(report.lost_updates, 0, "{report}");
    assert!(report.stale_writes_rejected > 0, "{report}");
    let stats = resource.stats();
    assert_eq!(stats.accepted, report.accepted_writes);
    assert_eq!(stats.rejected, report.fence_rejections);
    assert_eq!(stats.accepted + stats.rejected, (TASKS * ITERATIONS) as u64);
    assert_eq!(final_value, i64::try_from(stats.accepted).unwrap());
}

/// Fencing only the write does not protect a read-modify-write: two holders read the same
/// value and both write it back, in token order, both accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn write_only_fencing_still_loses_updates() {
    let (report, _, _) = run_unlocked(Unlocked::WriteFencedOnly).await;
    println!("{report}");
    assert!(report.overlaps > 0, "{report}");
    assert!(report.lost_updates > 0, "{report}");
}

/// The fencing rule on one server, step by step.
#[tokio::test]
async fn fencing_rule() {
    let server = start_server();
    let resource = FencedResource::new(server.connection().await);
    let state = resource.read("r").await.expect("read");
    assert_eq!(
        (state.value, state.last_token, state.last_owner),
        (0, None, None)
    );

    let write = |value, token, owner: &'static str| {
        let resource = resource.clone();
        async move {
            resource
                .write("r", value, token, owner)
                .await
                .expect("write")
        }
    };
    assert_eq!(write(1, Some(5), "a").await, WriteOutcome::Accepted);
    assert_eq!(
        write(2, Some(5), "a").await,
        WriteOutcome::Accepted,
        "same holder, again"
    );
    assert_eq!(
        write(3, Some(5), "b").await,
        WriteOutcome::RejectedStale { last_token: 5 },
        "same token, other owner"
    );
    assert_eq!(
        write(3, Some(4), "a").await,
        WriteOutcome::RejectedStale { last_token: 5 }
    );
    // Compared as integers, not strings or doubles.
    assert_eq!(write(3, Some(10), "c").await, WriteOutcome::Accepted);
    assert_eq!(
        write(4, Some(9), "d").await,
        WriteOutcome::RejectedStale { last_token: 10 }
    );
    let big = (1 << 53) + 1;
    assert_eq!(write(4, Some(big), "e").await, WriteOutcome::Accepted);
    assert_eq!(
        write(5, Some(big - 1), "f").await,
        WriteOutcome::RejectedStale { last_token: big }
    );
    assert_eq!(write(5, Some(u64::MAX), "g").await, WriteOutcome::Accepted);
    // Unfenced writes always go through and leave the token alone.
    assert_eq!(write(-7, None, "h").await, WriteOutcome::Accepted);
    let state = resource.read("r").await.expect("read");
    assert_eq!(state.value, -7);
    assert_eq!(state.last_token, Some(u64::MAX));
    assert_eq!(state.last_owner.as_deref(), Some("h"));

    // A fenced read claims the resource for its token.
    resource.reset("r").await.expect("reset");
    let read = resource.read_fenced("r", 3, "x").await.expect("read");
    assert_eq!(read.outcome, WriteOutcome::Accepted);
    assert_eq!(
        (read.state.last_token, read.state.last_owner.as_deref()),
        (Some(3), Some("x"))
    );
    let stale = resource.read_fenced("r", 2, "y").await.expect("read");
    assert_eq!(stale.outcome, WriteOutcome::RejectedStale { last_token: 3 });
    assert_eq!(stale.state.last_owner.as_deref(), Some("x"));
    assert_eq!(
        resource.write("r", 1, Some(2), "y").await.expect("write"),
        WriteOutcome::RejectedStale { last_token: 3 }
    );
    assert_eq!(
        resource.write("r", 1, Some(3), "x").await.expect("write"),
        WriteOutcome::Accepted
    );
    assert_eq!(resource.next_token("r").await.expect("INCR"), 1);
    assert_eq!(resource.next_token("r").await.expect("INCR"), 2);

    let stats = resource.stats();
    assert_eq!(
        (stats.accepted, stats.rejected, stats.stale_reads),
        (7, 5, 1)
    );
    assert_eq!(
        WriteStatus::from(WriteOutcome::Accepted),
        WriteStatus::Accepted
    );
}

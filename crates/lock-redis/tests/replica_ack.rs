//! Replica-acknowledged locks (`ReplicaAck`) on a primary with one replica: the conformance
//! suite with every write waiting for the replica, and what each call does when the replica
//! stops acknowledging (its link cut): a grant is given back and refused, a renewal is left
//! undecided so the lease runs out, a release stands; `Shortfall::Accept` keeps the grant;
//! `fsynced` needs `WAITAOF` with `appendonly yes`; bad settings are refused before any I/O.

use std::time::{Duration, Instant};

use lock_core::{Error, LeaseLoss, LockBackend, LockOptions, Locker, ReleaseOutcome};
use lock_redis::{LockKind, RedisBackend, ReplicaAck, Shortfall};
use lock_testkit::conformance::Harness;
use lock_testkit::{ReplicatedPair, ServerOptions};

/// The wait for the replica in the fault cases: short, so a shortfall costs little.
const ACK_WAIT: Duration = Duration::from_millis(150);
const COMMAND_TIMEOUT: Duration = Duration::from_millis(600);

struct Acked {
    pair: ReplicatedPair,
    kind: LockKind,
}

impl Harness for Acked {
    type Backend = RedisBackend;

    async fn client(&self) -> RedisBackend {
        RedisBackend::builder(self.pair.primary().url())
            .lock_kind(self.kind)
            .replica_ack(ReplicaAck::replicas(1))
            .connect()
            .await
            .expect("connect to the test primary")
    }
}

fn start(kind: LockKind) -> Acked {
    Acked {
        pair: ReplicatedPair::start().expect("start a primary and a replica"),
        kind,
    }
}

mod conformance_reentrant {
    use super::*;
    lock_testkit::conformance_tests!(start(LockKind::Reentrant));
}

mod conformance_fast {
    use super::*;
    lock_testkit::conformance_tests!(start(LockKind::Fast));
}

async fn backend(pair: &ReplicatedPair, kind: LockKind, ack: ReplicaAck) -> RedisBackend {
    RedisBackend::builder(pair.primary().url())
        .lock_kind(kind)
        .command_timeout(COMMAND_TIMEOUT)
        .replica_ack(ack)
        .connect()
        .await
        .expect("connect to the test primary")
}

fn ack() -> ReplicaAck {
    ReplicaAck::replicas(1).timeout(ACK_WAIT)
}

/// How many keys the primary holds.
async fn keys_on(pair: &ReplicatedPair) -> usize {
    let mut raw = pair.primary().connection().await;
    redis::cmd("DBSIZE")
        .query_async(&mut raw)
        .await
        .expect("DBSIZE")
}

/// With the replica's link cut, a grant waits for the acknowledgement, gets none, gives the
/// lock back and fails with `NotReplicated` (retryable); nothing is left on the primary. With
/// `Shortfall::Accept` the same grant stands; once the link is back, grants work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_without_acknowledgement_is_given_back() {
    let mut pair = ReplicatedPair::start().expect("start a primary and a replica");
    for kind in [LockKind::Reentrant, LockKind::Fast] {
        pair.cut_link().expect("cut the replica's link");
        let locker = Locker::new(backend(&pair, kind, ack()).await);
        let started = Instant::now();
        let refused = locker.try_lock("ack:grant").await;
        let took = started.elapsed();
        match refused {
            Err(Error::NotReplicated {
                acknowledged: 0,
                required: 1,
            }) => {}
            other => panic!("{kind:?}: expected NotReplicated, got {other:?}"),
        }
        assert!(
            Error::NotReplicated {
                acknowledged: 0,
                required: 1
            }
            .is_retryable()
        );
        assert!(
            took >= ACK_WAIT,
            "{kind:?}: refused after {took:?}, before the wait"
        );
        assert_eq!(
            keys_on(&pair).await,
            0,
            "{kind:?}: the grant was left behind"
        );

        // A fenced grant (a script for the fast lock) is given back too.
        let fenced = locker
            .lock_with("ack:fenced", &LockOptions::new().fenced().no_wait())
            .await;
        assert!(
            matches!(fenced, Err(Error::NotReplicated { .. })),
            "{kind:?}: {fenced:?}"
        );
        let state = locker
            .backend()
            .inspect("ack:fenced")
            .await
            .expect("inspect");
        assert!(!state.is_locked(), "{kind:?}: {state:?}");

        // Accepting the shortfall keeps the grant.
        let accepting =
            Locker::new(backend(&pair, kind, ack().on_shortfall(Shortfall::Accept)).await);
        let guard = accepting
            .try_lock("ack:grant")
            .await
            .expect("accepted shortfall")
            .expect("the lock is free");
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );

        pair.link().expect("link the replica again");
        let guard = locker
            .try_lock("ack:grant")
            .await
            .expect("acknowledged grant")
            .expect("the lock is free");
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        let mut raw = pair.primary().connection().await;
        let _: () = redis::cmd("DEL")
            .arg(lock_redis::keys::token_key("ack:fenced"))
            .query_async(&mut raw)
            .await
            .expect("DEL the fencing counter");
    }
}

/// While the replicas fall short, concurrent grants each get their refusal, not a timeout: a
/// `WAIT` holds the connection until it answers, so acknowledged calls go out one pipeline at a
/// time and share its `WAIT` (five waits of 150 ms one behind the other would pass the 600 ms
/// call timeout). Fenced fast grants are scripts, so this covers the script path too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_grants_are_refused_not_timed_out() {
    let mut pair = ReplicatedPair::start().expect("start a primary and a replica");
    pair.cut_link().expect("cut the replica's link");
    for kind in [LockKind::Reentrant, LockKind::Fast] {
        let locker = Locker::new(backend(&pair, kind, ack()).await);
        let attempts = (0..5).map(|n| {
            let locker = locker.clone();
            tokio::spawn(async move {
                locker
                    .lock_with(
                        &format!("ack:concurrent:{n}"),
                        &LockOptions::new().fenced().no_wait(),
                    )
                    .await
            })
        });
        for attempt in futures_util::future::join_all(attempts).await {
            let attempt = attempt.expect("task");
            assert!(
                matches!(attempt, Err(Error::NotReplicated { .. })),
                "{kind:?}: {attempt:?}"
            );
        }
        let mut raw = pair.primary().connection().await;
        let left: Vec<String> = redis::cmd("KEYS")
            .arg("ack:concurrent:*")
            .query_async(&mut raw)
            .await
            .expect("KEYS");
        assert!(left.is_empty(), "{kind:?}: grants left behind: {left:?}");
    }
}

/// A re-entry that is not acknowledged is given back to the holds known before it: the outer
/// hold stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_reentry_keeps_the_outer_hold() {
    let mut pair = ReplicatedPair::start().expect("start a primary and a replica");
    let locker = Locker::new(backend(&pair, LockKind::Reentrant, ack()).await);
    let outer = locker
        .try_lock("ack:reentry")
        .await
        .expect("first grant")
        .expect("free");
    pair.cut_link().expect("cut the replica's link");
    let inner = locker.try_lock("ack:reentry").await;
    assert!(
        matches!(inner, Err(Error::NotReplicated { .. })),
        "{inner:?}"
    );
    let state = locker
        .backend()
        .inspect("ack:reentry")
        .await
        .expect("inspect");
    assert_eq!(state.holders.len(), 1, "{state:?}");
    assert_eq!(
        state.holders[0].1, 1,
        "the refused re-entry was not given back: {state:?}"
    );
    assert!(!outer.is_lost());
    assert_eq!(
        outer.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(keys_on(&pair).await, 0);
}

/// Renewals that the replica does not acknowledge do not count: the watchdog keeps trying, and
/// the guard reports its lease lost at the validity deadline, as if the renewals had failed.
/// The release afterwards stands on the primary whatever the replica says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_renewals_let_the_lease_run_out() {
    let lease = Duration::from_millis(1200);
    let mut pair = ReplicatedPair::start().expect("start a primary and a replica");
    let locker = Locker::new(backend(&pair, LockKind::Reentrant, ack()).await);
    let guard = locker
        .lock_with(
            "ack:renew",
            &LockOptions::new().watchdog_lease(lease).no_wait(),
        )
        .await
        .expect("grant");
    // Renewed (and acknowledged) past the first lease while the link is up.
    tokio::time::sleep(lease + lease / 2).await;
    assert!(
        !guard.is_lost(),
        "acknowledged renewals must keep the lease"
    );
    pair.cut_link().expect("cut the replica's link");
    let cut = Instant::now();
    let loss = tokio::time::timeout(lease * 3, guard.lost())
        .await
        .expect("the guard must learn its renewals do not count");
    assert_eq!(loss, LeaseLoss::Expired);
    assert!(
        cut.elapsed() <= lease + Duration::from_secs(1),
        "lost {:?} after the cut",
        cut.elapsed()
    );
    // The release of a lost guard is the owner's best effort; whatever it reports, nothing
    // may stay once the lease has run out.
    let _ = guard.release().await;
    tokio::time::sleep(lease).await;
    assert_eq!(keys_on(&pair).await, 0);
}

/// A release with the replica's link cut still gives the lock back (after the wait), for both
/// kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_stands_without_acknowledgement() {
    let mut pair = ReplicatedPair::start().expect("start a primary and a replica");
    for kind in [LockKind::Reentrant, LockKind::Fast] {
        let locker = Locker::new(backend(&pair, kind, ack()).await);
        let guard = locker
            .lock_with(
                "ack:release",
                &LockOptions::new()
                    .fixed_lease(Duration::from_secs(30))
                    .no_wait(),
            )
            .await
            .expect("grant");
        pair.cut_link().expect("cut the replica's link");
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        assert_eq!(keys_on(&pair).await, 0, "{kind:?}");
        pair.link().expect("link the replica again");
    }
}

/// `fsynced` asks with `WAITAOF`: refused when connecting to a primary without `appendonly`
/// (or a server without `WAITAOF`); on a pair with `appendonly yes` (`appendfsync always`) and
/// `WAITAOF` it grants, and
/// refuses grants once the replica's link is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsynced_acknowledgement_needs_waitaof_and_appendonly() {
    let pair = ReplicatedPair::start().expect("start a primary and a replica");
    let refused = RedisBackend::builder(pair.primary().url())
        .replica_ack(ack().fsynced())
        .connect()
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidConfig { .. })),
        "appendonly no: {refused:?}"
    );
    drop(pair);

    // `appendfsync always`: with the default `everysec` a replica fsyncs (and so acknowledges
    // a `WAITAOF`) only once a second, later than this test's 150 ms wait.
    let mut pair = ReplicatedPair::start_with(ServerOptions::default().aof_fsync_always(true))
        .expect("start a primary and a replica with appendonly");
    let mut raw = pair.primary().connection().await;
    let probe: redis::RedisResult<redis::Value> = redis::cmd("WAITAOF")
        .arg(0)
        .arg(0)
        .arg(1)
        .query_async(&mut raw)
        .await;
    // A replica reports its fsyncs in its periodic acknowledgement (about once a second, seen
    // on Valkey 9.1), so the wait must cover a second.
    let fsynced = ReplicaAck::replicas(1)
        .timeout(Duration::from_millis(1500))
        .fsynced();
    let connected = RedisBackend::builder(pair.primary().url())
        .command_timeout(Duration::from_secs(4))
        .replica_ack(fsynced)
        .connect()
        .await;
    if probe.is_err() {
        eprintln!("this server has no WAITAOF (Redis 7.2+ or Valkey): only the refusal is checked");
        assert!(
            matches!(connected, Err(Error::InvalidConfig { .. })),
            "no WAITAOF: {connected:?}"
        );
        return;
    }
    let locker = Locker::new(connected.expect("appendonly yes and WAITAOF"));
    let started = Instant::now();
    let guard = locker
        .try_lock("ack:aof")
        .await
        .expect("fsynced grant")
        .expect("free");
    eprintln!("fsynced grant in {:?}", started.elapsed());
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    pair.cut_link().expect("cut the replica's link");
    let refused = locker.try_lock("ack:aof").await;
    assert!(
        matches!(refused, Err(Error::NotReplicated { .. })),
        "{refused:?}"
    );
    assert_eq!(keys_on(&pair).await, 0);
}

/// Bad settings are refused before anything is sent (nothing listens at the URL).
#[tokio::test]
async fn bad_settings_are_refused_before_any_io() {
    let nowhere = "redis://127.0.0.1:1/";
    for (what, ack, timeout) in [
        ("no replicas", ReplicaAck::replicas(0), COMMAND_TIMEOUT),
        (
            "no wait",
            ReplicaAck::replicas(1).timeout(Duration::ZERO),
            COMMAND_TIMEOUT,
        ),
        (
            "wait = command timeout",
            ReplicaAck::replicas(1).timeout(COMMAND_TIMEOUT),
            COMMAND_TIMEOUT,
        ),
        (
            "wait > command timeout",
            ReplicaAck::replicas(1),
            Duration::from_millis(500),
        ),
    ] {
        let built = RedisBackend::builder(nowhere)
            .command_timeout(timeout)
            .replica_ack(ack)
            .connect()
            .await;
        match built {
            Err(Error::InvalidConfig { reason }) => {
                assert!(reason.contains("replica"), "{what}: {reason}")
            }
            other => panic!("{what}: expected InvalidConfig, got {other:?}"),
        }
    }
}

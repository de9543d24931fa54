//! Locks on a Redis Cluster while it changes under them: the lock's slot moves to another
//! primary, and its primary fails over to its replica, while the lock is held and a waiter
//! waits; replica acknowledgement asked of the lock's own primary; and watchdog renewals put
//! in one script per primary, following slots that move under them. One test, so one cluster
//! (6 processes) is alive at a time.
#![cfg(feature = "cluster")]

use std::time::{Duration, Instant};

use lock_core::{Error, LockOptions, Locker, ReleaseOutcome};
use lock_redis::{LockKind, RedisBackend, ReplicaAck, ShardedPubSub, keys};
use lock_testkit::{FailoverMode, RedisCluster};

async fn locker(
    cluster: &RedisCluster,
    kind: LockKind,
    sharded: ShardedPubSub,
) -> Locker<RedisBackend> {
    Locker::new(
        RedisBackend::builder(lock_redis::RedisTarget::cluster(cluster.urls()))
            .lock_kind(kind)
            .sharded_pubsub(sharded)
            .command_timeout(Duration::from_secs(2))
            .connect()
            .await
            .expect("connect to the cluster"),
    )
}

/// `command` (with its arguments) answered by every primary.
fn on_primaries<T: redis::FromRedisValue>(cluster: &RedisCluster, command: &[&str]) -> Vec<T> {
    (0..cluster.len())
        .filter(|&node| cluster.role(node).unwrap_or(false))
        .map(|node| {
            let mut connection = cluster
                .node(node)
                .client()
                .get_connection()
                .expect("connect");
            let mut query = redis::cmd(command[0]);
            for arg in &command[1..] {
                query.arg(*arg);
            }
            query
                .query::<T>(&mut connection)
                .unwrap_or_else(|error| panic!("{command:?}: {error}"))
        })
        .collect()
}

/// How many keys every primary holds.
fn keys_left(cluster: &RedisCluster) -> usize {
    on_primaries::<usize>(cluster, &["DBSIZE"])
        .into_iter()
        .sum()
}

/// A waiter blocked on `name` gets the lock soon after the holder releases, over a change of
/// the cluster made by `change` while the lock is held.
async fn held_across(
    cluster: &mut RedisCluster,
    (kind, sharded): (LockKind, ShardedPubSub),
    name: &str,
    change: impl FnOnce(&mut RedisCluster),
) {
    let a = locker(cluster, kind, sharded).await;
    let b = locker(cluster, kind, sharded).await;
    let held = a
        .lock_with(
            name,
            &LockOptions::new().watchdog_lease(Duration::from_secs(6)),
        )
        .await
        .expect("lock");
    let owned = name.to_owned();
    let waiter = tokio::spawn(async move {
        let guard = b
            .lock_with(&owned, &LockOptions::new().wait(Duration::from_secs(20)))
            .await;
        (b, guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::task::block_in_place(|| change(cluster));
    // Past a renewal period (2 s): the watchdog renewed through the change. The lease is long
    // enough that a waiter woken by its timer (the holder's remaining lease, 4 s or more)
    // rather than the release fails the check below.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!held.is_lost(), "the lease survived the change");
    assert!(!waiter.is_finished(), "the waiter still waits");
    let released_at = Instant::now();
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let (b, guard, acquired_at) = waiter.await.expect("waiter task");
    let guard = guard.expect("the waiter gets the lock");
    let woke_after = acquired_at.duration_since(released_at);
    assert!(
        woke_after < Duration::from_secs(1),
        "woken by the release, not its timer: {woke_after:?}"
    );
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    drop((a, b));
}

/// The acknowledgement is asked of the primary that took the write: with the replica of one
/// primary paused, grants of a lock on that primary are refused (`NotReplicated`) and given
/// back, while a lock on another primary is granted. (A `WAIT` sent alone through the cluster
/// client would go to every primary; one sent to another primary would answer at once.)
async fn acknowledgement_is_asked_of_the_locks_primary(cluster: &mut RedisCluster) {
    let on_primary = |cluster: &RedisCluster, name: &str| {
        cluster
            .primary_of_slot(keys::slot(name))
            .expect("the slot's primary")
    };
    let paused_name = "cluster-ack:paused";
    let primary = on_primary(cluster, paused_name);
    let other_name = (0..)
        .map(|n| format!("cluster-ack:other:{n}"))
        .find(|name| on_primary(cluster, name) != primary)
        .expect("a name on another primary");
    let replica = cluster.replicas_of(primary).expect("replicas")[0];
    let locker = Locker::new(
        RedisBackend::builder(lock_redis::RedisTarget::cluster(cluster.urls()))
            .command_timeout(Duration::from_secs(2))
            .replica_ack(ReplicaAck::replicas(1).timeout(Duration::from_millis(150)))
            .connect()
            .await
            .expect("connect to the cluster"),
    );
    // Acknowledged everywhere while every replica runs.
    for name in [paused_name, other_name.as_str()] {
        let guard = locker.try_lock(name).await.expect("grant").expect("free");
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    }
    // Shorter than the cluster's node timeout: the replica is slow, not failed.
    cluster
        .node_mut(replica)
        .pause()
        .expect("pause the replica");
    let refused = locker.try_lock(paused_name).await;
    let granted = locker.try_lock(&other_name).await;
    cluster
        .node_mut(replica)
        .resume()
        .expect("resume the replica");
    assert!(
        matches!(
            refused,
            Err(Error::NotReplicated {
                acknowledged: 0,
                required: 1
            })
        ),
        "lock on the paused replica's primary: {refused:?}"
    );
    let granted = granted.expect("grant on another primary").expect("free");
    assert_eq!(
        granted.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(keys_left(cluster), 0, "the refused grant was given back");
}

/// How many scripts the primaries have run by hash, all together.
fn scripts_run(cluster: &RedisCluster) -> u64 {
    on_primaries::<String>(cluster, &["INFO", "commandstats"])
        .iter()
        .map(|stats| lock_testkit::commandstats::calls_in(stats, "evalsha"))
        .sum()
}

/// Watchdog renewals of locks in many slots go in one script per primary (not one per slot),
/// and keep renewing locks whose slot moved to another primary (the script answers "not
/// served here" for them, or the whole script is redirected, and they are renewed by slot; the
/// copy of the slot owners is read again). A renewal lost that way would end a lease of 1.5 s
/// within the 3 s the test holds the locks after the move.
async fn renewals_go_one_script_per_primary(cluster: &mut RedisCluster, kind: LockKind) {
    const LOCKS: usize = 48;
    let locker = locker(cluster, kind, ShardedPubSub::Auto).await;
    let lease = LockOptions::new().watchdog_lease(Duration::from_millis(1500));
    let names: Vec<String> = (0..LOCKS)
        .map(|n| format!("cluster-renew:{kind:?}:{n}"))
        .collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(locker.lock_with(name, &lease).await.expect("lock"));
    }
    let slots: std::collections::BTreeSet<u16> =
        names.iter().map(|name| keys::slot(name)).collect();
    // Listed from every primary.
    let listed = locker
        .backend()
        .list_locks(&format!("cluster-renew:{kind:?}:*"), 1000)
        .await
        .expect("list the locks");
    assert_eq!(listed.locks.len(), LOCKS);
    // Renewals every 0.5 s: some 4 rounds in 2 s, each at most two batches (the watchdog
    // groups leases by when they fall due) of one script per primary: at most 3 × 2 × 5. One
    // script per slot would be some 4 × 48.
    let window = |cluster: &RedisCluster| {
        let before = scripts_run(cluster);
        std::thread::sleep(Duration::from_secs(2));
        scripts_run(cluster) - before
    };
    let grouped = tokio::task::block_in_place(|| window(cluster));
    assert!(
        grouped <= 30,
        "{grouped} renewal scripts in 2 s for {LOCKS} locks in {} slots",
        slots.len()
    );

    // Two locks of one primary move to another while held.
    let from = cluster
        .primary_of_slot(keys::slot(&names[0]))
        .expect("owner");
    let to = (0..cluster.len())
        .find(|&node| node != from && cluster.role(node).unwrap_or(false))
        .expect("another primary");
    let moving: Vec<u16> = names
        .iter()
        .map(|name| keys::slot(name))
        .filter(|&slot| cluster.primary_of_slot(slot).expect("owner") == from)
        .take(2)
        .collect();
    tokio::task::block_in_place(|| {
        for &slot in &moving {
            cluster.move_slot(slot, to).expect("move the slot");
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let regrouped = tokio::task::block_in_place(|| window(cluster));
    assert!(
        regrouped <= 30,
        "{regrouped} renewal scripts in 2 s after the move"
    );
    for (name, guard) in names.iter().zip(&guards) {
        assert!(!guard.is_lost(), "{name} (slot {}) kept", keys::slot(name));
    }
    for guard in guards {
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    }
    assert_eq!(keys_left(cluster), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_follow_slot_moves_and_failovers() {
    let mut cluster = RedisCluster::start(3, 1).expect("start a cluster");
    for kind in [LockKind::Reentrant, LockKind::Fast] {
        renewals_go_one_script_per_primary(&mut cluster, kind).await;
    }
    acknowledgement_is_asked_of_the_locks_primary(&mut cluster).await;
    // Sharded-only waiters (`On`) show the subscription following the slot: the server drops
    // it when the slot leaves its node, and it is made again where the slot lives now.
    for (setup, name) in [
        (
            (LockKind::Reentrant, ShardedPubSub::Auto),
            "cluster-faults:reentrant",
        ),
        ((LockKind::Fast, ShardedPubSub::Auto), "cluster-faults:fast"),
        (
            (LockKind::Reentrant, ShardedPubSub::On),
            "cluster-faults:sharded",
        ),
    ] {
        let slot = keys::slot(name);
        assert_eq!(slot, cluster.slot_of(name).expect("keyslot"));

        // The slot moves to another primary while the lock is held and awaited.
        let from = cluster.primary_of_slot(slot).expect("owner");
        let to = (0..cluster.len())
            .find(|&node| node != from && cluster.role(node).unwrap_or(false))
            .expect("another primary");
        held_across(&mut cluster, setup, name, |cluster| {
            cluster.move_slot(slot, to).expect("move the slot");
        })
        .await;
        assert_eq!(cluster.primary_of_slot(slot).expect("owner"), to);

        // Its primary fails over to its replica (coordinated: nothing acknowledged is lost).
        let replica = cluster.replicas_of(to).expect("replicas")[0];
        held_across(&mut cluster, setup, name, |cluster| {
            cluster
                .failover(replica, FailoverMode::Coordinated)
                .expect("fail over");
        })
        .await;
        assert_eq!(cluster.primary_of_slot(slot).expect("owner"), replica);
    }
    // Every lock was released: no key is left on any primary.
    assert_eq!(keys_left(&cluster), 0);
}

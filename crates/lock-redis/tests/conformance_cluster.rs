//! The conformance suite on a Redis Cluster (3 primaries × 1 replica), for both lock kinds,
//! with pub/sub notifications and with polling; and the semaphore, lease-bound permit, latch,
//! read-write lock, fair lock and election suites (and the lock suite on the write side and on
//! the fair side), with plain and sharded pub/sub.
//!
//! One cluster (6 processes) serves every case of this file: cases use fresh lock names, and
//! the cluster is started by the first case and stopped when the last one running lets go.
#![cfg(feature = "cluster")]

use std::sync::Arc;

use lock_redis::{LockKind, NotificationMode, RedisBackend, ShardedPubSub};
use lock_testkit::conformance::Harness;
use lock_testkit::{RedisCluster, SharedFixture};

static SHARED: SharedFixture<RedisCluster> = SharedFixture::new();

fn shared_cluster() -> Arc<RedisCluster> {
    SHARED.get_or_start(|| RedisCluster::start(3, 1).expect("start a cluster"))
}

struct Cluster {
    cluster: Arc<RedisCluster>,
    notifications: NotificationMode,
    kind: LockKind,
    sharded: ShardedPubSub,
}

impl Harness for Cluster {
    type Backend = RedisBackend;

    async fn client(&self) -> RedisBackend {
        RedisBackend::builder(lock_redis::RedisTarget::cluster(self.cluster.urls()))
            .notifications(self.notifications)
            .lock_kind(self.kind)
            .sharded_pubsub(self.sharded)
            .connect()
            .await
            .expect("connect to the test cluster")
    }
}

fn start(notifications: NotificationMode, kind: LockKind) -> Cluster {
    start_sharded(notifications, kind, ShardedPubSub::Auto)
}

fn start_sharded(
    notifications: NotificationMode,
    kind: LockKind,
    sharded: ShardedPubSub,
) -> Cluster {
    Cluster {
        cluster: shared_cluster(),
        notifications,
        kind,
        sharded,
    }
}

const POLL: NotificationMode = NotificationMode::Polling(std::time::Duration::from_millis(50));

mod pubsub {
    use super::*;
    lock_testkit::conformance_tests!(start(NotificationMode::PubSub, LockKind::Reentrant));
}

mod polling {
    use super::*;
    lock_testkit::conformance_tests!(start(POLL, LockKind::Reentrant));
}

mod sharded_only {
    use super::*;
    lock_testkit::conformance_tests!(start_sharded(
        NotificationMode::PubSub,
        LockKind::Reentrant,
        ShardedPubSub::On
    ));
}

mod plain_only {
    use super::*;
    lock_testkit::conformance_tests!(start_sharded(
        NotificationMode::PubSub,
        LockKind::Fast,
        ShardedPubSub::Off
    ));
}

mod fast_pubsub {
    use super::*;
    lock_testkit::conformance_tests!(start(NotificationMode::PubSub, LockKind::Fast));
}

/// Runs one of the testkit's suites (`$suite`, a macro of `lock_testkit`) with waiters on each
/// kind of pub/sub: `pubsub` (both, as `ShardedPubSub::Auto` does on Redis 7), `sharded_only`
/// and `plain_only`. A release announces on what its waiters listen to, so each mode checks
/// that the primitive's channel and keys live in the name's slot and its wake-ups arrive.
macro_rules! in_every_pubsub_mode {
    ($suite:ident) => {
        mod pubsub {
            use super::super::*;
            lock_testkit::$suite!(start(NotificationMode::PubSub, LockKind::Reentrant));
        }

        mod sharded_only {
            use super::super::*;
            lock_testkit::$suite!(start_sharded(
                NotificationMode::PubSub,
                LockKind::Reentrant,
                ShardedPubSub::On
            ));
        }

        mod plain_only {
            use super::super::*;
            lock_testkit::$suite!(start_sharded(
                NotificationMode::PubSub,
                LockKind::Reentrant,
                ShardedPubSub::Off
            ));
        }
    };
}

// The semaphore: its count and channel live in the name's slot.
mod semaphore {
    in_every_pubsub_mode!(semaphore_conformance_tests);
}

// The read-write lock: the hash, its read timeout keys and its channel share the name's slot
// (Redisson's `{name}` suffixes); read renewals of many names in one batch go through the
// cross-slot script per primary.
mod rw {
    in_every_pubsub_mode!(rw_conformance_tests);
}

// The lock suite on the write side (one mode: its scripts and notifications are the same in
// every mode).
mod write_side_pubsub {
    use super::*;
    lock_testkit::conformance_tests!(lock_testkit::rw_conformance::WriteSide(start(
        NotificationMode::PubSub,
        LockKind::Reentrant
    )));
}

// The fair lock: the lock hash, its queue and deadlines and every waiter's channel live in the
// name's slot. `fair_a_crashed_waiter_is_dropped` (QUEUE_TIMEOUT, ~10 s) runs in every mode:
// the cases run side by side, so it adds no wall time of its own.
mod fair {
    in_every_pubsub_mode!(fair_conformance_tests);
}

// The lock suite on the fair side (one mode, as the write side).
mod fair_side_pubsub {
    use super::*;
    use lock_testkit::fair_conformance::FairSide;
    lock_testkit::conformance_tests!(FairSide(start(
        NotificationMode::PubSub,
        LockKind::Reentrant
    )));
}

// Leader election: the election's lock, its leader values and its channel live in the name's
// slot.
mod election {
    in_every_pubsub_mode!(election_conformance_tests);
}

// Lease-bound permits: the count, `{name}:timeout` and the channel share the name's slot.
mod permits {
    in_every_pubsub_mode!(permit_conformance_tests);
}

// The countdown latch: its count lives in the name's slot, and so does its channel for a name
// without a hash tag (the suite's names).
mod latch {
    in_every_pubsub_mode!(latch_conformance_tests);
}

/// Watchdog renewals of many locks in many slots (one renewal batch): each lock's renewal goes
/// to its own slot's primary, and every lease outlives several renewal periods.
#[test]
fn renewals_span_slots() {
    use lock_core::{LockOptions, Locker};
    use std::time::Duration;

    lock_testkit::conformance::run(async {
        let harness = start(NotificationMode::PubSub, LockKind::Reentrant);
        let holder = Locker::new(harness.client().await);
        let observer = Locker::new(harness.client().await);
        let names: Vec<String> = (0..40)
            .map(|i| lock_testkit::conformance::fresh_name(&format!("span-{i}")))
            .collect();
        let slots: std::collections::BTreeSet<u16> = names
            .iter()
            .map(|name| lock_redis::keys::slot(name))
            .collect();
        assert!(slots.len() > 10, "the names spread over many slots");
        let options = LockOptions::new().watchdog_lease(Duration::from_millis(600));
        let mut guards = Vec::new();
        for name in &names {
            guards.push(holder.lock_with(name, &options).await.expect("lock"));
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for (name, guard) in names.iter().zip(&guards) {
            assert!(!guard.is_lost(), "{name} kept its lease");
            assert!(
                observer.is_locked(name).await.expect("state"),
                "{name} still held"
            );
        }
        for guard in guards {
            assert_eq!(
                guard.release().await.expect("release"),
                lock_core::ReleaseOutcome::Released
            );
        }
        for name in &names {
            assert!(!observer.is_locked(name).await.expect("state"));
        }
    });
}

/// Who gives a lock back in [`mixed_fleets_wake_promptly`].
#[derive(Clone, Copy, Debug)]
enum Releaser {
    /// A distlock client with this setting.
    Distlock(ShardedPubSub),
    /// Another client (Redisson with `shardedSubscriptionMode` OFF, or an older one): DEL and
    /// `PUBLISH`.
    Publish,
    /// Another client with sharded pub/sub (Redisson's default on Redis 7): DEL and `SPUBLISH`.
    SPublish,
}

/// A waiter wakes on the release (well before the holder's 30 s lease would end) whenever the
/// releaser announces on a kind the waiter listens to: in `Auto` it listens to both, so every
/// client of a mixed fleet wakes it.
#[test]
fn mixed_fleets_wake_promptly() {
    use lock_core::{LockOptions, Locker, ReleaseOutcome};
    use std::time::{Duration, Instant};

    let cases = [
        (ShardedPubSub::Auto, Releaser::Distlock(ShardedPubSub::Auto)),
        (ShardedPubSub::Auto, Releaser::Distlock(ShardedPubSub::On)),
        (ShardedPubSub::Auto, Releaser::Distlock(ShardedPubSub::Off)),
        (ShardedPubSub::Auto, Releaser::Publish),
        (ShardedPubSub::Auto, Releaser::SPublish),
        (ShardedPubSub::On, Releaser::Distlock(ShardedPubSub::Auto)),
        (ShardedPubSub::On, Releaser::SPublish),
        (ShardedPubSub::Off, Releaser::Distlock(ShardedPubSub::Auto)),
        (ShardedPubSub::Off, Releaser::Publish),
    ];
    lock_testkit::conformance::run(async {
        let cluster = shared_cluster();
        let connect = |sharded| {
            RedisBackend::builder(lock_redis::RedisTarget::cluster(cluster.urls()))
                .sharded_pubsub(sharded)
                .connect()
        };
        for (listen, releaser) in cases {
            let name = lock_testkit::conformance::fresh_name("mixed");
            let holder_mode = match releaser {
                Releaser::Distlock(mode) => mode,
                Releaser::Publish | Releaser::SPublish => ShardedPubSub::Auto,
            };
            let holder = Locker::new(connect(holder_mode).await.expect("connect"));
            let waiter = Locker::new(connect(listen).await.expect("connect"));
            let held = holder
                .lock_with(
                    &name,
                    &LockOptions::new().fixed_lease(Duration::from_secs(30)),
                )
                .await
                .expect("lock");
            let wanted = name.clone();
            let waiting = tokio::spawn(async move {
                let guard = waiter
                    .lock_with(&wanted, &LockOptions::new().wait(Duration::from_secs(20)))
                    .await;
                (guard, Instant::now())
            });
            tokio::time::sleep(Duration::from_millis(300)).await;
            let released_at = Instant::now();
            match releaser {
                Releaser::Distlock(_) => {
                    assert_eq!(
                        held.release().await.expect("release"),
                        ReleaseOutcome::Released
                    );
                }
                Releaser::Publish | Releaser::SPublish => {
                    let node = cluster
                        .primary_of_slot(lock_redis::keys::slot(&name))
                        .expect("owner");
                    let mut connection = cluster
                        .node(node)
                        .client()
                        .get_connection()
                        .expect("connect");
                    let command = if matches!(releaser, Releaser::Publish) {
                        "PUBLISH"
                    } else {
                        "SPUBLISH"
                    };
                    redis::pipe()
                        .cmd("DEL")
                        .arg(&name)
                        .cmd(command)
                        .arg(lock_redis::keys::channel(&name))
                        .arg(lock_redis::keys::UNLOCK_MESSAGE)
                        .exec(&mut connection)
                        .expect("release as another client");
                    // Released behind its back: the guard's own release finds nothing of its own.
                    drop(held);
                }
            }
            let (guard, acquired_at) = waiting.await.expect("waiter task");
            let guard = guard.expect("the waiter gets the lock");
            let woke_after = acquired_at.duration_since(released_at);
            assert!(
                woke_after < Duration::from_secs(2),
                "listening {listen:?}, released by {releaser:?}: woke after {woke_after:?}"
            );
            assert_eq!(
                guard.release().await.expect("release"),
                ReleaseOutcome::Released
            );
        }
    });
}

/// Redisson's `RedissonSemaphore.releaseAsync` script, verbatim: KEYS = [name, channel],
/// ARGV = [permits, publish command] (`SPUBLISH` where Redisson uses sharded pub/sub, its
/// default on a Redis 7 cluster; `PUBLISH` otherwise). tests/semaphore_interop.rs checks the
/// rest of Redisson's semaphore on one server.
const REDISSON_SEMAPHORE_RELEASE: &str = concat!(
    "local value = redis.call('incrby', KEYS[1], ARGV[1]); ",
    "redis.call(ARGV[2], KEYS[2], value); ",
);

/// Semaphores shared with Redisson on a cluster, both ways: a Redisson release (announced with
/// `SPUBLISH` or `PUBLISH`) wakes a distlock waiter listening to that kind at once, and a
/// distlock release reaches a Redisson client subscribed (`SSUBSCRIBE` or `SUBSCRIBE`) to the
/// kind the distlock setting announces on, with the new count as the message.
#[test]
fn semaphores_shared_with_redisson() {
    use lock_core::Locker;
    use std::time::{Duration, Instant};

    // The waiters' backstop re-check is 1 s after their attempt: a wake-up heard is far sooner.
    const HAND_OFF: Duration = Duration::from_millis(700);
    let wakes = [
        (ShardedPubSub::Auto, "SPUBLISH"),
        (ShardedPubSub::Auto, "PUBLISH"),
        (ShardedPubSub::On, "SPUBLISH"),
        (ShardedPubSub::Off, "PUBLISH"),
    ];
    let heard = [
        (ShardedPubSub::Auto, "SSUBSCRIBE"),
        (ShardedPubSub::Auto, "SUBSCRIBE"),
        (ShardedPubSub::On, "SSUBSCRIBE"),
        (ShardedPubSub::Off, "SUBSCRIBE"),
    ];
    lock_testkit::conformance::run(async {
        let cluster = shared_cluster();
        let semaphore = async |sharded, name: &str| {
            let backend = RedisBackend::builder(lock_redis::RedisTarget::cluster(cluster.urls()))
                .sharded_pubsub(sharded)
                .connect()
                .await
                .expect("connect");
            Locker::new(backend).semaphore(name).expect("a valid name")
        };
        // A plain connection to the primary serving `name`'s slot, as Redisson's would be.
        let owner = |name: &str| {
            let node = cluster
                .primary_of_slot(lock_redis::keys::slot(name))
                .expect("owner");
            cluster
                .node(node)
                .client()
                .get_connection()
                .expect("connect")
        };
        for (listen, publish) in wakes {
            let name = lock_testkit::conformance::fresh_name("redisson-semaphore");
            let waiting = semaphore(listen, &name).await;
            assert!(waiting.try_set_permits(0).await.expect("set"));
            let waiter = tokio::spawn(async move {
                waiting.acquire(1).await.expect("acquire");
                (waiting, Instant::now())
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!waiter.is_finished(), "nothing to take yet");
            let released_at = Instant::now();
            let () = redis::cmd("EVAL")
                .arg(REDISSON_SEMAPHORE_RELEASE)
                .arg(2)
                .arg(&name)
                .arg(lock_redis::keys::semaphore_channel(&name))
                .arg(1)
                .arg(publish)
                .query(&mut owner(&name))
                .expect("Redisson's release");
            let (waiting, taken_at) = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("the waiter gets its permit")
                .expect("waiter task");
            let hand_off = taken_at.duration_since(released_at);
            assert!(
                hand_off < HAND_OFF,
                "listening {listen:?}, Redisson announcing with {publish}: woken after {hand_off:?}"
            );
            assert!(waiting.delete().await.expect("clean up"));
        }
        for (announce, subscribe) in heard {
            let name = lock_testkit::conformance::fresh_name("redisson-semaphore");
            let channel = lock_redis::keys::semaphore_channel(&name);
            let mut subscriber = owner(&name);
            subscriber
                .set_read_timeout(Some(Duration::from_secs(2)))
                .expect("read timeout");
            subscriber
                .send_packed_command(&redis::cmd(subscribe).arg(&channel).get_packed_command())
                .expect(subscribe);
            let confirmed = subscriber.recv_response().expect("subscribed");
            assert!(
                matches!(&confirmed, redis::Value::Array(items) if items.len() == 3),
                "{confirmed:?}"
            );
            let releasing = semaphore(announce, &name).await;
            assert_eq!(releasing.release(3).await.expect("release"), 3);
            let message = tokio::task::block_in_place(|| subscriber.recv_response())
                .unwrap_or_else(|err| {
                    panic!("{subscribe} heard nothing of a {announce:?} release: {err}")
                });
            // RESP2: [message | smessage, channel, payload].
            let (kind, heard_on, count): (String, String, String) =
                redis::from_redis_value(message).expect("a message");
            let expected = if subscribe == "SSUBSCRIBE" {
                "smessage"
            } else {
                "message"
            };
            assert_eq!(
                (kind.as_str(), heard_on.as_str()),
                (expected, channel.as_str())
            );
            assert_eq!(count, "3", "announced with {announce:?}");
            assert!(releasing.delete().await.expect("clean up"));
        }
    });
}

/// Redisson's `RedissonCountDownLatch.countDownAsync` script, verbatim: KEYS = [name, channel],
/// ARGV = [ZERO_COUNT_MESSAGE (0), publish command] (`SPUBLISH` where Redisson uses sharded
/// pub/sub, `PUBLISH` otherwise). tests/latch_interop.rs checks the rest of Redisson's latch on
/// one server.
const REDISSON_COUNT_DOWN: &str = concat!(
    "local v = redis.call('decr', KEYS[1]);",
    "if v <= 0 then redis.call('del', KEYS[1]) end;",
    "if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;",
);

/// `RedissonCountDownLatch.getChannelName`, written out here, not taken from distlock, so the
/// tests check distlock's own derivation: braces around the whole name, whatever it is.
fn redisson_latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// How long a latch waiter may take to go on after an announced opening: well under its
/// one-second re-check.
const LATCH_WAKE_UP: std::time::Duration = std::time::Duration::from_millis(700);

/// How long a latch waiter may take to go on after an opening it cannot hear: its re-check
/// comes at most a second after its last look, plus a margin for a loaded machine.
const LATCH_BACKSTOP: std::time::Duration = std::time::Duration::from_millis(1500);

/// A countdown latch on the shared cluster, its client set to `sharded`.
async fn cluster_latch(
    cluster: &RedisCluster,
    sharded: ShardedPubSub,
    name: &str,
) -> lock_core::CountDownLatch<RedisBackend> {
    let backend = RedisBackend::builder(lock_redis::RedisTarget::cluster(cluster.urls()))
        .sharded_pubsub(sharded)
        .connect()
        .await
        .expect("connect");
    lock_core::Locker::new(backend)
        .latch(name)
        .expect("a valid name")
}

/// A plain connection to the primary serving `key`'s slot, as Redisson's would be.
fn owner_of(cluster: &RedisCluster, key: &str) -> redis::Connection {
    let node = cluster
        .primary_of_slot(lock_redis::keys::slot(key))
        .expect("owner");
    cluster
        .node(node)
        .client()
        .get_connection()
        .expect("connect")
}

/// Latches shared with Redisson on a cluster, both ways: a Redisson countDown reaching zero
/// (announced with `SPUBLISH` or `PUBLISH`) lets a distlock waiter listening to that kind go on
/// at once, and a distlock count_down reaching zero reaches a Redisson client subscribed
/// (`SSUBSCRIBE` or `SUBSCRIBE`) to the kind the distlock setting announces on, with `0`.
#[test]
fn latches_shared_with_redisson() {
    use std::time::{Duration, Instant};

    let wakes = [
        (ShardedPubSub::Auto, "SPUBLISH"),
        (ShardedPubSub::Auto, "PUBLISH"),
        (ShardedPubSub::On, "SPUBLISH"),
        (ShardedPubSub::Off, "PUBLISH"),
    ];
    let heard = [
        (ShardedPubSub::Auto, "SSUBSCRIBE"),
        (ShardedPubSub::Auto, "SUBSCRIBE"),
        (ShardedPubSub::On, "SSUBSCRIBE"),
        (ShardedPubSub::Off, "SUBSCRIBE"),
    ];
    lock_testkit::conformance::run(async {
        let cluster = shared_cluster();
        for (listen, publish) in wakes {
            let name = lock_testkit::conformance::fresh_name("redisson-latch");
            let waiting = cluster_latch(&cluster, listen, &name).await;
            assert!(waiting.try_set_count(1).await.expect("set"));
            let waiter = tokio::spawn(async move {
                waiting.wait().await.expect("wait");
                (waiting, Instant::now())
            });
            // Open just after the waiter's own re-check (a second after its first look): found
            // by that re-check alone, the opening would take it most of a second more.
            tokio::time::sleep(Duration::from_millis(1050)).await;
            assert!(!waiter.is_finished(), "closed");
            let opened_at = Instant::now();
            let () = redis::cmd("EVAL")
                .arg(REDISSON_COUNT_DOWN)
                .arg(2)
                .arg(&name)
                .arg(redisson_latch_channel(&name))
                .arg(0)
                .arg(publish)
                .query(&mut owner_of(&cluster, &name))
                .expect("Redisson's countDown");
            let (waiting, went_on_at) = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("the waiter goes on")
                .expect("waiter task");
            let wake_up = went_on_at.duration_since(opened_at);
            assert!(
                wake_up < LATCH_WAKE_UP,
                "listening {listen:?}, Redisson announcing with {publish}: went on after {wake_up:?}"
            );
            assert_eq!(waiting.count().await.expect("count"), 0);
        }
        for (announce, subscribe) in heard {
            let name = lock_testkit::conformance::fresh_name("redisson-latch");
            let channel = redisson_latch_channel(&name);
            let mut subscriber = owner_of(&cluster, &name);
            subscriber
                .set_read_timeout(Some(Duration::from_secs(2)))
                .expect("read timeout");
            subscriber
                .send_packed_command(&redis::cmd(subscribe).arg(&channel).get_packed_command())
                .expect(subscribe);
            let confirmed = subscriber.recv_response().expect("subscribed");
            assert!(
                matches!(&confirmed, redis::Value::Array(items) if items.len() == 3),
                "{confirmed:?}"
            );
            let counting = cluster_latch(&cluster, announce, &name).await;
            assert!(counting.try_set_count(1).await.expect("set"));
            assert_eq!(counting.count_down().await.expect("down"), 0);
            // RESP2: [message | smessage, channel, payload]; the set's `1`, then the opening's
            // `0`.
            let expected = if subscribe == "SSUBSCRIBE" {
                "smessage"
            } else {
                "message"
            };
            for want in ["1", "0"] {
                let message = tokio::task::block_in_place(|| subscriber.recv_response())
                    .unwrap_or_else(|err| {
                        panic!("{subscribe} heard nothing of a {announce:?} latch: {err}")
                    });
                let (kind, heard_on, payload): (String, String, String) =
                    redis::from_redis_value(message).expect("a message");
                assert_eq!(
                    (kind.as_str(), heard_on.as_str()),
                    (expected, channel.as_str())
                );
                assert_eq!(payload, want, "announced with {announce:?}");
            }
        }
    });
}

/// A latch whose name has its own hash tag (`{t}:x`) has its channel in another slot
/// (`redisson_countdownlatch__channel__{{t}:x}` hashes `{t`), here on another primary than its
/// count. A waiter that listens with sharded pub/sub only cannot hear the opening (an `SPUBLISH`
/// from the count's script cannot reach another slot) and goes on by its one-second re-check;
/// with plain pub/sub it hears the `PUBLISH` at once. Redisson's own scripts, which name the
/// channel as a key, are refused with `CROSSSLOT` on such a name.
#[test]
fn hash_tagged_latches_on_a_sharded_cluster() {
    use std::time::{Duration, Instant};

    lock_testkit::conformance::run(async {
        let cluster = shared_cluster();
        let primary = |key: &str| {
            cluster
                .primary_of_slot(lock_redis::keys::slot(key))
                .expect("owner")
        };
        for (listen, within) in [
            (ShardedPubSub::On, LATCH_BACKSTOP),
            (ShardedPubSub::Auto, LATCH_WAKE_UP),
            (ShardedPubSub::Off, LATCH_WAKE_UP),
        ] {
            // A tag whose channel lands on another primary than the count.
            let name = (0..)
                .map(|i| {
                    format!(
                        "{{t{i}}}:{}",
                        lock_testkit::conformance::fresh_name("latch")
                    )
                })
                .find(|name| primary(name) != primary(&lock_redis::keys::latch_channel(name)))
                .expect("a name");
            let channel = lock_redis::keys::latch_channel(&name);
            assert_eq!(channel, redisson_latch_channel(&name));
            let counting = cluster_latch(&cluster, ShardedPubSub::Auto, &name).await;
            let waiting = cluster_latch(&cluster, listen, &name).await;
            assert!(counting.try_set_count(1).await.expect("set"));
            let waiter = tokio::spawn(async move {
                waiting.wait().await.expect("wait");
                Instant::now()
            });
            // Open just after the waiter's own re-check, as in latches_shared_with_redisson:
            // a waiter that heard nothing goes on most of a second later.
            tokio::time::sleep(Duration::from_millis(1050)).await;
            assert!(!waiter.is_finished(), "{listen:?}: closed");
            let opened_at = Instant::now();
            assert_eq!(counting.count_down().await.expect("down"), 0);
            let went_on = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("the waiter goes on")
                .expect("waiter task")
                .duration_since(opened_at);
            eprintln!("{name}, listening {listen:?}: went on {went_on:?} after the opening");
            assert!(
                went_on < within,
                "{name}, listening {listen:?}: went on {went_on:?} after the opening"
            );

            // Redisson's countDown names the count and the channel as keys: two slots.
            assert!(counting.try_set_count(1).await.expect("set"));
            let refused = redis::cmd("EVAL")
                .arg(REDISSON_COUNT_DOWN)
                .arg(2)
                .arg(&name)
                .arg(&channel)
                .arg(0)
                .arg("SPUBLISH")
                .query::<()>(&mut owner_of(&cluster, &name))
                .expect_err("keys in two slots");
            assert_eq!(refused.code(), Some("CROSSSLOT"), "{refused}");
            assert_eq!(counting.count().await.expect("count"), 1, "nothing changed");
            assert!(counting.delete().await.expect("clean up"));
        }
    });
}

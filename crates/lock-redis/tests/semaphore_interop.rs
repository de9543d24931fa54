//! Wire compatibility with Redisson's `RSemaphore`: Redisson's own Lua scripts, copied verbatim
//! from `org.redisson.RedissonSemaphore`, sent with `EVAL` on a plain connection with the keys
//! and arguments Redisson passes, against the same counter and channel as distlock's
//! [`Semaphore`](lock_core::Semaphore). Each side sees and wakes the other.
//!
//! One server serves every case of this file: cases use fresh names, and the server is started
//! by the first case and stopped when the last one running lets go.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::{Error, Locker, ReleaseOutcome, Semaphore};
use lock_redis::RedisBackend;
use lock_redis::redis::{self, aio::MultiplexedConnection};
use lock_testkit::conformance::{fresh_name, run};
use lock_testkit::{RedisServer, SharedFixture};

/// How long a woken waiter may take to get its permits: well under the one-second re-check
/// (`RECHECK_WITHOUT_TTL`) that would get them without any announcement heard.
const HAND_OFF: Duration = Duration::from_millis(700);

// Redisson's scripts, verbatim (the Java string concatenations, piece by piece), from
// redisson/src/main/java/org/redisson/RedissonSemaphore.java at Redisson commit 66863978b4a9.

/// `RedissonSemaphore.tryAcquireAsync0` (behind `tryAcquire(permits)`): KEYS = [name],
/// ARGV = [permits]; 1 when taken.
const TRY_ACQUIRE: &str = concat!(
    "local value = redis.call('get', KEYS[1]); ",
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then ",
    "local val = redis.call('decrby', KEYS[1], ARGV[1]); ",
    "return 1; ",
    "end; ",
    "return 0;",
);

/// `RedissonSemaphore.releaseAsync(permits)`: KEYS = [name, channel], ARGV = [permits,
/// publish command].
const RELEASE: &str = concat!(
    "local value = redis.call('incrby', KEYS[1], ARGV[1]); ",
    "redis.call(ARGV[2], KEYS[2], value); ",
);

/// `RedissonSemaphore.drainPermitsAsync`: KEYS = [name]; the count before.
const DRAIN_PERMITS: &str = concat!(
    "local value = redis.call('get', KEYS[1]); ",
    "if (value == false) then ",
    "return 0; ",
    "end; ",
    "redis.call('set', KEYS[1], 0); ",
    "return value;",
);

/// `RedissonSemaphore.trySetPermitsAsync(permits)`: KEYS = [name, channel], ARGV = [permits,
/// publish command]; 1 when set.
const TRY_SET_PERMITS: &str = concat!(
    "local value = redis.call('get', KEYS[1]); ",
    "if (value == false) then ",
    "redis.call('set', KEYS[1], ARGV[1]); ",
    "redis.call(ARGV[2], KEYS[2], ARGV[1]); ",
    "return 1;",
    "end;",
    "return 0;",
);

/// `RedissonSemaphore.addPermitsAsync(permits)`: KEYS = [name, channel], ARGV = [permits,
/// publish command].
const ADD_PERMITS: &str = concat!(
    "local value = redis.call('get', KEYS[1]); ",
    "if (value == false) then ",
    "value = 0;",
    "end;",
    "redis.call('set', KEYS[1], value + ARGV[1]); ",
    "redis.call(ARGV[2], KEYS[2], value + ARGV[1]); ",
);

/// `PublishSubscribeService.getPublishCommand()` without sharded pub/sub (one server):
/// `RedisCommands.PUBLISH.getName()`.
const PUBLISH_COMMAND: &str = "PUBLISH";

/// `RedissonObject.prefixName`, as Redisson derives a semaphore's channel
/// (`RedissonSemaphore.getChannelName`): written out here, not taken from distlock, so the
/// test checks distlock's own derivation.
fn redisson_channel(name: &str) -> String {
    let prefix = "redisson_sc";
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// A Redisson `RSemaphore` on `name`: its scripts and commands on a plain connection.
struct Redisson {
    con: MultiplexedConnection,
    name: String,
}

impl Redisson {
    fn eval(&self, script: &str, keys: &[&str]) -> redis::Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(script).arg(keys.len()).arg(keys);
        eval
    }

    fn both_keys(&self) -> [String; 2] {
        [self.name.clone(), redisson_channel(&self.name)]
    }

    /// `tryAcquire(permits)`.
    async fn try_acquire(&mut self, permits: i32) -> bool {
        let taken: i64 = self
            .eval(TRY_ACQUIRE, &[&self.name])
            .arg(permits)
            .query_async(&mut self.con)
            .await
            .expect("Redisson tryAcquire");
        taken == 1
    }

    /// `release(permits)`.
    async fn release(&mut self, permits: i32) {
        let [name, channel] = self.both_keys();
        let () = self
            .eval(RELEASE, &[&name, &channel])
            .arg(permits)
            .arg(PUBLISH_COMMAND)
            .query_async(&mut self.con)
            .await
            .expect("Redisson release");
    }

    /// `trySetPermits(permits)`.
    async fn try_set_permits(&mut self, permits: i32) -> bool {
        let [name, channel] = self.both_keys();
        let set: i64 = self
            .eval(TRY_SET_PERMITS, &[&name, &channel])
            .arg(permits)
            .arg(PUBLISH_COMMAND)
            .query_async(&mut self.con)
            .await
            .expect("Redisson trySetPermits");
        set == 1
    }

    /// `addPermits(permits)`.
    async fn add_permits(&mut self, permits: i32) {
        let [name, channel] = self.both_keys();
        let () = self
            .eval(ADD_PERMITS, &[&name, &channel])
            .arg(permits)
            .arg(PUBLISH_COMMAND)
            .query_async(&mut self.con)
            .await
            .expect("Redisson addPermits");
    }

    /// `drainPermits()`.
    async fn drain_permits(&mut self) -> i64 {
        self.eval(DRAIN_PERMITS, &[&self.name])
            .query_async(&mut self.con)
            .await
            .expect("Redisson drainPermits")
    }

    /// `availablePermits()`: `GET` read with `IntegerReplayConvertor(0)` (absent: 0).
    async fn available_permits(&mut self) -> i64 {
        let count: Option<i64> = redis::cmd("GET")
            .arg(&self.name)
            .query_async(&mut self.con)
            .await
            .expect("Redisson availablePermits");
        count.unwrap_or(0)
    }
}

static SHARED: SharedFixture<RedisServer> = SharedFixture::new();

fn shared_server() -> Arc<RedisServer> {
    SHARED.get_or_start(|| RedisServer::start().expect("start redis-server"))
}

/// One distlock client and one Redisson client of the semaphore `name`.
struct Pair {
    // Kept alive while the case runs.
    server: Arc<RedisServer>,
    ours: Semaphore<RedisBackend>,
    redisson: Redisson,
}

async fn pair(name: &str) -> Pair {
    let server = shared_server();
    let backend = RedisBackend::connect(server.url())
        .await
        .expect("connect to the test server");
    let ours = Locker::new(backend).semaphore(name).expect("a valid name");
    let redisson = Redisson {
        con: server.connection().await,
        name: name.to_owned(),
    };
    Pair {
        server,
        ours,
        redisson,
    }
}

/// A Redisson `release` (INCRBY, then PUBLISH of the new count on `redisson_sc:{name}`) wakes a
/// distlock waiter blocked in `acquire` at once, for a plain name and a hash-tagged one.
#[test]
fn a_redisson_release_wakes_our_waiter() {
    run(async {
        for name in [
            fresh_name("interop-wake"),
            format!("{{tenant}}:{}", fresh_name("interop-wake")),
        ] {
            let Pair {
                server: _server,
                ours,
                mut redisson,
            } = pair(&name).await;
            assert!(redisson.try_set_permits(0).await, "{name}: set");
            let waiter = tokio::spawn({
                let ours = ours.clone();
                async move {
                    ours.acquire(2).await.expect("acquire");
                    Instant::now()
                }
            });
            // The waiter has made its attempt and waits: its backstop re-check is ~1 s away.
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!waiter.is_finished(), "{name}: nothing to take yet");
            let released_at = Instant::now();
            redisson.release(2).await;
            let taken_at = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("the waiter gets its permits")
                .expect("waiter task");
            let hand_off = taken_at.duration_since(released_at);
            assert!(
                hand_off < HAND_OFF,
                "{name}: woken {hand_off:?} after Redisson's release (not by it)"
            );
            assert_eq!(redisson.available_permits().await, 0, "{name}");
            assert!(ours.delete().await.expect("clean up"), "{name}");
        }
    });
}

/// What distlock announces is what a Redisson client listens for: a plain SUBSCRIBE on
/// `redisson_sc:{name}` (Redisson's derivation) receives each new count as the message (read
/// as a Long by Redisson's `SemaphorePubSub.onMessage`), for a plain name and a hash-tagged one.
#[test]
fn our_announcements_reach_a_redisson_subscriber() {
    run(async {
        for name in [
            fresh_name("interop-announce"),
            format!("{{tenant}}:{}", fresh_name("interop-announce")),
        ] {
            let Pair { server, ours, .. } = pair(&name).await;
            let mut messages = redisson_subscriber(&server, &name).await;
            assert!(ours.try_set_permits(3).await.expect("set"));
            assert_eq!(next_count(&mut messages, &name).await, 3, "try_set_permits");
            assert_eq!(ours.release(2).await.expect("release"), 5);
            assert_eq!(next_count(&mut messages, &name).await, 5, "release");
            assert_eq!(ours.add_permits(-4).await.expect("add"), 1);
            assert_eq!(next_count(&mut messages, &name).await, 1, "add_permits");
            assert_eq!(ours.reset(7).await.expect("reset"), Some(1));
            assert_eq!(next_count(&mut messages, &name).await, 7, "reset");
            assert!(ours.delete().await.expect("clean up"));
        }
    });
}

/// The messages of a plain SUBSCRIBE on Redisson's channel for `name`, subscribed when it
/// returns.
async fn redisson_subscriber(
    server: &RedisServer,
    name: &str,
) -> impl futures_util::Stream<Item = redis::Msg> + Unpin {
    let mut subscriber = server
        .client()
        .get_async_pubsub()
        .await
        .expect("a pub/sub connection");
    subscriber
        .subscribe(redisson_channel(name))
        .await
        .expect("SUBSCRIBE");
    subscriber.into_on_message()
}

/// The next message on Redisson's channel for `name`, read as Redisson reads it: a Long.
async fn next_count(
    messages: &mut (impl futures_util::Stream<Item = redis::Msg> + Unpin),
    name: &str,
) -> i64 {
    let channel = redisson_channel(name);
    let message = tokio::time::timeout(Duration::from_secs(2), messages.next())
        .await
        .unwrap_or_else(|_| panic!("nothing heard on {channel}"))
        .expect("the subscription ended");
    assert_eq!(message.get_channel_name(), channel);
    let count: String = message.get_payload().expect("a text payload");
    count
        .parse()
        .unwrap_or_else(|_| panic!("{channel}: {count:?} does not read as a Long"))
}

/// Redisson's `trySetPermits`, `tryAcquire`, `availablePermits`, `drainPermits`, `addPermits`
/// and `release` and distlock's methods read and change one counter, in both directions.
#[test]
fn redisson_and_distlock_share_the_counter() {
    run(async {
        let name = fresh_name("interop-counter");
        let Pair {
            server: _server,
            ours,
            mut redisson,
        } = pair(&name).await;
        assert_eq!(redisson.available_permits().await, 0);
        assert_eq!(ours.state().await.expect("state").available, None);

        // Set by Redisson: distlock sees it and cannot set it again.
        assert!(redisson.try_set_permits(5).await);
        assert!(!ours.try_set_permits(9).await.expect("set"), "set once");
        assert_eq!(ours.available().await.expect("available"), 5);

        assert!(redisson.try_acquire(2).await);
        assert_eq!(ours.available().await.expect("available"), 3);
        assert!(!ours.try_acquire(4).await.expect("try 4 of 3"));
        assert!(ours.try_acquire(3).await.expect("try 3 of 3"));
        assert_eq!(redisson.available_permits().await, 0);
        assert!(!redisson.try_acquire(1).await, "Redisson sees none left");

        assert_eq!(ours.release(4).await.expect("release"), 4);
        assert_eq!(redisson.available_permits().await, 4);
        redisson.release(1).await;
        assert_eq!(ours.available().await.expect("available"), 5);

        assert_eq!(redisson.drain_permits().await, 5);
        assert_eq!(ours.available().await.expect("available"), 0);
        assert_eq!(ours.add_permits(6).await.expect("add"), 6);
        assert_eq!(redisson.drain_permits().await, 6);

        redisson.add_permits(-2).await;
        assert_eq!(ours.available().await.expect("available"), -2);
        assert!(!ours.try_acquire(1).await.expect("try below zero"));
        assert_eq!(ours.add_permits(3).await.expect("add"), 1);
        redisson.add_permits(2).await;
        assert_eq!(ours.drain().await.expect("drain"), 3);
        assert_eq!(redisson.available_permits().await, 0);

        // Set by distlock: Redisson sees it and cannot set it again.
        assert!(ours.delete().await.expect("delete"));
        assert!(ours.try_set_permits(2).await.expect("set"));
        assert!(!redisson.try_set_permits(8).await, "set once");
        assert_eq!(redisson.available_permits().await, 2);
        assert!(redisson.try_acquire(2).await);
        assert_eq!(ours.available().await.expect("available"), 0);

        // The key is the bare name, a string holding the count (Redisson's layout).
        let mut con = redisson.con.clone();
        let kind: String = redis::cmd("TYPE")
            .arg(&name)
            .query_async(&mut con)
            .await
            .expect("TYPE");
        assert_eq!(kind, "string");
        assert!(ours.delete().await.expect("clean up"));
    });
}

/// A hash-tagged name (`{tenant}:pool`): the key is the bare name and the channel is
/// `redisson_sc:{tenant}:pool`, as Redisson derives them, so counts and wake-ups cross over.
#[test]
fn hash_tagged_names_follow_redisson() {
    run(async {
        let name = "{tenant}:pool";
        assert_eq!(redisson_channel(name), "redisson_sc:{tenant}:pool");
        let Pair {
            server,
            ours,
            mut redisson,
        } = pair(name).await;
        assert!(redisson.try_set_permits(2).await);
        assert_eq!(ours.available().await.expect("available"), 2);
        assert!(ours.try_acquire(1).await.expect("try"));
        assert_eq!(redisson.available_permits().await, 1);
        // Redisson waits on a hash-tagged channel too: a distlock release reaches it.
        let mut messages = redisson_subscriber(&server, name).await;
        assert_eq!(ours.release(1).await.expect("release"), 2);
        assert_eq!(next_count(&mut messages, name).await, 2);
        assert!(ours.delete().await.expect("clean up"));
        assert_eq!(redisson.available_permits().await, 0);
        // distlock's public derivation says the same.
        assert_eq!(
            lock_redis::keys::semaphore_channel(name),
            redisson_channel(name)
        );
    });
}

/// `reset` and `delete` refuse a name that holds a lock (a hash) with `WrongType`, and the lock
/// is left as it was.
#[test]
fn reset_and_delete_leave_a_lock_alone() {
    run(async {
        let name = fresh_name("interop-lock");
        let server = shared_server();
        let locker = Locker::new(
            RedisBackend::connect(server.url())
                .await
                .expect("connect to the test server"),
        );
        let guard = locker.lock(&name).await.expect("lock");
        let semaphore = locker.semaphore(&name).expect("a valid name");
        let refused = semaphore.reset(3).await;
        assert!(matches!(refused, Err(Error::WrongType(_))), "{refused:?}");
        let refused = semaphore.delete().await;
        assert!(matches!(refused, Err(Error::WrongType(_))), "{refused:?}");
        let mut con = server.connection().await;
        let kind: String = redis::cmd("TYPE")
            .arg(&name)
            .query_async(&mut con)
            .await
            .expect("TYPE");
        assert_eq!(kind, "hash", "the lock is still a hash");
        assert!(!guard.is_lost());
        assert!(locker.is_locked(&name).await.expect("state"));
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    });
}

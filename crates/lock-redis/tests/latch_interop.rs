//! Wire compatibility with Redisson's `RCountDownLatch`: Redisson's own Lua scripts, copied
//! verbatim from `org.redisson.RedissonCountDownLatch`, sent with `EVAL` on a plain connection
//! with the keys and arguments Redisson passes, against the same count and channel as
//! distlock's [`CountDownLatch`](lock_core::CountDownLatch). Each side sees and wakes the
//! other; and a waiter whose announcement is lost still goes on, by its one-second re-check.
//!
//! One server serves every case of this file: cases use fresh names, and the server is started
//! by the first case and stopped when the last one running lets go.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::{CountDownLatch, Locker};
use lock_redis::RedisBackend;
use lock_redis::redis::{self, aio::MultiplexedConnection};
use lock_testkit::conformance::{fresh_name, run};
use lock_testkit::{RedisServer, SharedFixture};

/// How long a waiter may take to go on after the latch opens: well under the one-second
/// re-check that would find it open without any announcement heard.
const WAKE_UP: Duration = Duration::from_millis(700);

/// How long a waiter may take to go on when the opening is not announced at all: its re-check
/// comes at most a second after its last look, plus a margin for a loaded machine.
const BACKSTOP: Duration = Duration::from_millis(1500);

// Redisson's scripts, verbatim (the Java string concatenations, piece by piece), from
// redisson/src/main/java/org/redisson/RedissonCountDownLatch.java at Redisson commit
// 66863978b4a9.

/// `RedissonCountDownLatch.trySetCountAsync(count)`: KEYS = [name, channel], ARGV =
/// [NEW_COUNT_MESSAGE (1), count, publish command]; 1 when set.
const TRY_SET_COUNT: &str = concat!(
    "if redis.call('exists', KEYS[1]) == 0 then ",
    "redis.call('set', KEYS[1], ARGV[2]); ",
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); ",
    "return 1 ",
    "else ",
    "return 0 ",
    "end",
);

/// `RedissonCountDownLatch.countDownAsync`: KEYS = [name, channel], ARGV =
/// [ZERO_COUNT_MESSAGE (0), publish command]; no reply (nil).
const COUNT_DOWN: &str = concat!(
    "local v = redis.call('decr', KEYS[1]);",
    "if v <= 0 then redis.call('del', KEYS[1]) end;",
    "if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;",
);

/// `RedissonCountDownLatch.deleteAsync`: KEYS = [name, channel], ARGV = [NEW_COUNT_MESSAGE (1),
/// publish command]; 1 when it existed.
const DELETE: &str = concat!(
    "if redis.call('del', KEYS[1]) == 1 then ",
    "redis.call(ARGV[2], KEYS[2], ARGV[1]); ",
    "return 1 ",
    "else ",
    "return 0 ",
    "end",
);

/// `CountDownLatchPubSub.ZERO_COUNT_MESSAGE`: the latch opened.
const ZERO_COUNT_MESSAGE: i64 = 0;
/// `CountDownLatchPubSub.NEW_COUNT_MESSAGE`: a new count (set, delete).
const NEW_COUNT_MESSAGE: i64 = 1;

/// `PublishSubscribeService.getPublishCommand()` without sharded pub/sub (one server):
/// `RedisCommands.PUBLISH.getName()`.
const PUBLISH_COMMAND: &str = "PUBLISH";

/// `RedissonCountDownLatch.getChannelName`, written out here, not taken from distlock, so the
/// test checks distlock's own derivation: the braces always, whatever the name.
fn redisson_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// A Redisson `RCountDownLatch` on `name`: its scripts and commands on a plain connection.
struct Redisson {
    con: MultiplexedConnection,
    name: String,
}

impl Redisson {
    /// `EVAL script 2 name channel`, Redisson's keys for every latch script.
    fn eval(&self, script: &str) -> redis::Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(script)
            .arg(2)
            .arg(&self.name)
            .arg(redisson_channel(&self.name));
        eval
    }

    /// `trySetCount(count)`.
    async fn try_set_count(&mut self, count: i64) -> bool {
        let set: i64 = self
            .eval(TRY_SET_COUNT)
            .arg(NEW_COUNT_MESSAGE)
            .arg(count)
            .arg(PUBLISH_COMMAND)
            .query_async(&mut self.con)
            .await
            .expect("Redisson trySetCount");
        set == 1
    }

    /// `countDown()`.
    async fn count_down(&mut self) {
        let () = self
            .eval(COUNT_DOWN)
            .arg(ZERO_COUNT_MESSAGE)
            .arg(PUBLISH_COMMAND)
            .query_async(&mut self.con)
            .await
            .expect("Redisson countDown");
    }

    /// `delete()`.
    async fn delete(&mut self) -> bool {
        let deleted: i64 = self
            .eval(DELETE)
            .arg(NEW_COUNT_MESSAGE)
            .arg(PUBLISH_COMMAND)
            .query_async(&mut self.con)
            .await
            .expect("Redisson delete");
        deleted == 1
    }

    /// `getCount()`: `GET` read with `LongReplayConvertor` (absent: 0).
    async fn get_count(&mut self) -> i64 {
        let count: Option<i64> = redis::cmd("GET")
            .arg(&self.name)
            .query_async(&mut self.con)
            .await
            .expect("Redisson getCount");
        count.unwrap_or(0)
    }
}

static SHARED: SharedFixture<RedisServer> = SharedFixture::new();

fn shared_server() -> Arc<RedisServer> {
    SHARED.get_or_start(|| RedisServer::start().expect("start redis-server"))
}

/// One distlock client and one Redisson client of the latch `name`.
struct Pair {
    // Kept alive while the case runs.
    server: Arc<RedisServer>,
    ours: CountDownLatch<RedisBackend>,
    redisson: Redisson,
}

async fn pair(name: &str) -> Pair {
    let server = shared_server();
    let backend = RedisBackend::connect(server.url())
        .await
        .expect("connect to the test server");
    let ours = Locker::new(backend).latch(name).expect("a valid name");
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

/// A waiter on `latch`, answering when it went on.
fn waiter(latch: &CountDownLatch<RedisBackend>) -> tokio::task::JoinHandle<Instant> {
    let latch = latch.clone();
    tokio::spawn(async move {
        latch.wait().await.expect("wait");
        Instant::now()
    })
}

/// Waits for `waiter` to go on (5 s at most) and answers how long after `opened_at` it did.
async fn went_on_after(waiter: tokio::task::JoinHandle<Instant>, opened_at: Instant) -> Duration {
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter goes on")
        .expect("waiter task")
        .duration_since(opened_at)
}

/// A Redisson `countDown` that reaches zero (DECR, DEL, then PUBLISH `0` on
/// `redisson_countdownlatch__channel__{name}`) lets a distlock waiter go on at once, for a plain
/// name and a hash-tagged one.
#[test]
fn a_redisson_count_down_wakes_our_waiter() {
    run(async {
        for name in [
            fresh_name("interop-latch-wake"),
            format!("{{tenant}}:{}", fresh_name("interop-latch-wake")),
        ] {
            let Pair {
                server: _server,
                ours,
                mut redisson,
            } = pair(&name).await;
            assert!(redisson.try_set_count(2).await, "{name}: set");
            let waiter = waiter(&ours);
            tokio::time::sleep(Duration::from_millis(300)).await;
            redisson.count_down().await;
            // Open just after the waiter's own re-check (a second after its first look): found
            // by that re-check alone, the opening would take it most of a second more.
            tokio::time::sleep(Duration::from_millis(750)).await;
            assert!(!waiter.is_finished(), "{name}: one count left");
            let opened_at = Instant::now();
            redisson.count_down().await;
            let wake_up = went_on_after(waiter, opened_at).await;
            assert!(
                wake_up < WAKE_UP,
                "{name}: went on {wake_up:?} after Redisson's countDown (not woken by it)"
            );
            assert_eq!(redisson.get_count().await, 0, "{name}");
            assert!(
                !ours.delete().await.expect("gone"),
                "{name}: deleted at zero"
            );
        }
    });
}

/// What distlock announces is what a Redisson client listens for: a plain SUBSCRIBE on
/// `redisson_countdownlatch__channel__{name}` receives `1` (NEW_COUNT_MESSAGE) for a
/// `try_set_count` that sets and a `delete` that deletes, `0` (ZERO_COUNT_MESSAGE) for the
/// `count_down` that reaches zero, and nothing for one that does not; for a plain name and a
/// hash-tagged one.
#[test]
fn our_announcements_reach_a_redisson_subscriber() {
    run(async {
        for name in [
            fresh_name("interop-latch-announce"),
            format!("{{tenant}}:{}", fresh_name("interop-latch-announce")),
        ] {
            let Pair { server, ours, .. } = pair(&name).await;
            let mut messages = redisson_subscriber(&server, &name).await;
            assert!(ours.try_set_count(2).await.expect("set"));
            assert_eq!(next_message(&mut messages, &name).await, NEW_COUNT_MESSAGE);
            assert!(!ours.try_set_count(4).await.expect("set again"));
            assert_eq!(ours.count_down().await.expect("down"), 1);
            assert_eq!(ours.count_down().await.expect("down"), 0);
            // Nothing was heard for the refused set and the first count_down: the next message
            // is the opening.
            assert_eq!(next_message(&mut messages, &name).await, ZERO_COUNT_MESSAGE);
            assert!(ours.try_set_count(1).await.expect("a new round"));
            assert_eq!(next_message(&mut messages, &name).await, NEW_COUNT_MESSAGE);
            assert!(ours.delete().await.expect("delete"));
            assert_eq!(next_message(&mut messages, &name).await, NEW_COUNT_MESSAGE);
            assert!(!ours.delete().await.expect("delete again"));
            assert_eq!(ours.count_down().await.expect("down an open latch"), 0);
            nothing_more(&mut messages, &name).await;
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

/// The next message on Redisson's channel for `name`, read as `CountDownLatchPubSub` reads it:
/// a Long.
async fn next_message(
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

/// Nothing more is heard on Redisson's channel for `name` within 300 ms.
async fn nothing_more(
    messages: &mut (impl futures_util::Stream<Item = redis::Msg> + Unpin),
    name: &str,
) {
    if let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(300), messages.next()).await
    {
        panic!(
            "{name}: unexpected message {:?}",
            message.get_payload::<String>()
        );
    }
}

/// Redisson's `trySetCount`, `countDown`, `getCount` and `delete` and distlock's methods read
/// and change one count, in both directions.
#[test]
fn redisson_and_distlock_share_the_count() {
    run(async {
        let name = fresh_name("interop-latch-count");
        let Pair {
            server: _server,
            ours,
            mut redisson,
        } = pair(&name).await;
        assert_eq!(redisson.get_count().await, 0);
        assert_eq!(ours.count().await.expect("count"), 0);

        // Set by Redisson: distlock sees it and cannot set it again.
        assert!(redisson.try_set_count(3).await);
        assert!(!ours.try_set_count(9).await.expect("set"), "set once");
        assert_eq!(ours.count().await.expect("count"), 3);
        redisson.count_down().await;
        assert_eq!(ours.count().await.expect("count"), 2);
        assert_eq!(ours.count_down().await.expect("down"), 1);
        assert_eq!(redisson.get_count().await, 1);
        redisson.count_down().await;
        assert_eq!(ours.count().await.expect("count"), 0);
        assert!(
            ours.wait_timeout(Duration::from_millis(100))
                .await
                .expect("wait"),
            "open"
        );
        // Redisson counting down an open latch leaves nothing behind (DECR to -1, then DEL).
        redisson.count_down().await;
        assert_eq!(ours.count().await.expect("count"), 0);
        assert!(!ours.delete().await.expect("delete"), "nothing left");

        // Set by distlock: Redisson sees it and cannot set it again.
        assert!(ours.try_set_count(2).await.expect("set"));
        assert!(!redisson.try_set_count(8).await, "set once");
        assert_eq!(redisson.get_count().await, 2);
        // The key is the bare name, a string holding the count (Redisson's layout).
        let mut con = redisson.con.clone();
        let kind: String = redis::cmd("TYPE")
            .arg(&name)
            .query_async(&mut con)
            .await
            .expect("TYPE");
        assert_eq!(kind, "string");
        // Deleted by Redisson: distlock sees it open, and can set it again.
        assert!(redisson.delete().await);
        assert_eq!(ours.count().await.expect("count"), 0);
        assert!(!redisson.delete().await, "gone");
        assert!(ours.try_set_count(1).await.expect("set again"));
        assert_eq!(ours.count_down().await.expect("down"), 0);
        assert_eq!(redisson.get_count().await, 0);
    });
}

/// How another client opens the latch in [`a_lost_announcement_does_not_hang_our_waiter`]:
/// without any announcement.
#[derive(Clone, Copy, Debug)]
enum Silently {
    /// `DECR` to zero, then `DEL` (a countDown with its PUBLISH lost).
    Decr,
    /// `DEL` (a delete with its PUBLISH lost).
    Del,
}

/// An opening whose announcement is lost (the count brought to zero by raw commands that publish
/// nothing) still lets a distlock waiter go on, within about a second: its re-check finds the
/// latch open. Redisson's untimed `await` has no such re-check.
#[test]
fn a_lost_announcement_does_not_hang_our_waiter() {
    run(async {
        for how in [Silently::Decr, Silently::Del] {
            let name = fresh_name("interop-latch-lost");
            let Pair {
                server: _server,
                ours,
                mut redisson,
            } = pair(&name).await;
            assert!(ours.try_set_count(1).await.expect("set"), "{how:?}");
            let waiter = waiter(&ours);
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!waiter.is_finished(), "{how:?}: closed");
            let opened_at = Instant::now();
            match how {
                Silently::Decr => {
                    let left: i64 = redis::cmd("DECR")
                        .arg(&name)
                        .query_async(&mut redisson.con)
                        .await
                        .expect("DECR");
                    assert_eq!(left, 0);
                    let () = redis::cmd("DEL")
                        .arg(&name)
                        .query_async(&mut redisson.con)
                        .await
                        .expect("DEL");
                }
                Silently::Del => {
                    let () = redis::cmd("DEL")
                        .arg(&name)
                        .query_async(&mut redisson.con)
                        .await
                        .expect("DEL");
                }
            }
            let went_on = went_on_after(waiter, opened_at).await;
            assert!(
                went_on < BACKSTOP,
                "{how:?}: went on {went_on:?} after an unannounced opening"
            );
            eprintln!("{how:?}: went on {went_on:?} after an unannounced opening");
        }
    });
}

/// A hash-tagged name (`{t}:x`): the key is the bare name and the channel is
/// `redisson_countdownlatch__channel__{{t}:x}`, Redisson's literal form (braces around the whole
/// name, hash tag and all), so counts and wake-ups cross over.
#[test]
fn hash_tagged_names_follow_redisson() {
    run(async {
        let name = "{t}:x";
        assert_eq!(
            redisson_channel(name),
            "redisson_countdownlatch__channel__{{t}:x}"
        );
        // distlock's public derivation says the same.
        assert_eq!(
            lock_redis::keys::latch_channel(name),
            redisson_channel(name)
        );
        let Pair {
            server,
            ours,
            mut redisson,
        } = pair(name).await;
        assert!(redisson.try_set_count(2).await);
        assert_eq!(ours.count().await.expect("count"), 2);
        let mut con = redisson.con.clone();
        let count: i64 = redis::cmd("GET")
            .arg("{t}:x")
            .query_async(&mut con)
            .await
            .expect("GET");
        assert_eq!(count, 2, "the key is the bare name");

        // Redisson waits on the literal channel: distlock's opening reaches it.
        let mut messages = redisson_subscriber(&server, name).await;
        assert_eq!(ours.count_down().await.expect("down"), 1);
        assert_eq!(redisson.get_count().await, 1);
        assert_eq!(ours.count_down().await.expect("down"), 0);
        assert_eq!(next_message(&mut messages, name).await, ZERO_COUNT_MESSAGE);

        // And distlock's waiter hears Redisson's opening on it.
        assert!(redisson.try_set_count(1).await);
        assert_eq!(next_message(&mut messages, name).await, NEW_COUNT_MESSAGE);
        let waiter = waiter(&ours);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "closed");
        // Just after the waiter's re-check, as in a_redisson_count_down_wakes_our_waiter.
        tokio::time::sleep(Duration::from_millis(750)).await;
        let opened_at = Instant::now();
        redisson.count_down().await;
        let wake_up = went_on_after(waiter, opened_at).await;
        assert!(
            wake_up < WAKE_UP,
            "went on {wake_up:?} after Redisson's countDown"
        );
        assert_eq!(ours.count().await.expect("count"), 0);
    });
}

/// `count_down`, `count` and `delete` refuse a name that holds a lock (a hash) with
/// `WrongType`, and the lock is left as it was; `try_set_count` answers `false` (the key
/// exists).
#[test]
fn latch_calls_leave_a_lock_alone() {
    use lock_core::{Error, ReleaseOutcome};

    run(async {
        let name = fresh_name("interop-latch-lock");
        let server = shared_server();
        let locker = Locker::new(
            RedisBackend::connect(server.url())
                .await
                .expect("connect to the test server"),
        );
        let guard = locker.lock(&name).await.expect("lock");
        let latch = locker.latch(&name).expect("a valid name");
        let refused = latch.count_down().await;
        assert!(matches!(refused, Err(Error::WrongType(_))), "{refused:?}");
        let refused = latch.count().await;
        assert!(matches!(refused, Err(Error::WrongType(_))), "{refused:?}");
        let refused = latch.delete().await;
        assert!(matches!(refused, Err(Error::WrongType(_))), "{refused:?}");
        assert!(
            !latch.try_set_count(2).await.expect("set"),
            "the key exists"
        );
        let mut con = server.connection().await;
        let kind: String = redis::cmd("TYPE")
            .arg(&name)
            .query_async(&mut con)
            .await
            .expect("TYPE");
        assert_eq!(kind, "hash", "the lock is still a hash");
        assert!(!guard.is_lost());
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    });
}

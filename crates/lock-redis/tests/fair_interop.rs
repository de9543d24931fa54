//! Wire compatibility with Redisson's `RFairLock`: Redisson's own Lua scripts, copied verbatim
//! from `org.redisson.RedissonFairLock`, sent with `EVAL` on a plain connection with the keys
//! and arguments Redisson builds (owner field `<uuid>:<threadId>`, `currentTime` from this
//! test's clock, `wait` = Redisson's default `fairLockWaitTimeout` of 5 minutes), against the
//! same lock hash, queue, deadlines and per-waiter channels as distlock's fair lock
//! ([`Locker::fair`]). Each side queues behind the other and tells the other's head
//! its turn.
//!
//! Where the two differ: Redisson keeps its queue deadlines cumulative (each waiter's deadline is
//! the one before it plus `wait`, by the client's clock) and, on every grant, takes `wait` off
//! every queued deadline; distlock gives each waiter a deadline of its own (`QUEUE_TIMEOUT`
//! from now by the server's clock), refreshed at each of its attempts. So a Redisson grant (or
//! a Redisson `acquireFailed` ahead of it) makes a distlock waiter's deadline lapse at once; the
//! distlock waiter keeps its place only if it tries again before anyone sweeps the lapsed head
//! (see [`a_redisson_grant_lapses_our_queued_deadlines`]).
//!
//! One server serves every case of this file: cases use fresh names, and the server is started
//! by the first case and stopped when the last one running lets go.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use lock_core::fair_backend::QUEUE_TIMEOUT;
use lock_core::{FairLock, FairState, LockOptions, Locker};
use lock_redis::RedisBackend;
use lock_redis::redis::{self, aio::MultiplexedConnection};
use lock_testkit::conformance::{fresh_name, run};
use lock_testkit::{RedisServer, SharedFixture};

/// How long a waiter may take to get the lock once told its turn: well under the third of
/// `QUEUE_TIMEOUT` after which it would try again on its own.
const HAND_OFF: Duration = Duration::from_millis(700);

/// The lease of holders that only a release should end.
const LONG_LEASE: Duration = Duration::from_secs(20);

// Redisson's scripts, verbatim (the Java string concatenations, piece by piece), from
// redisson/src/main/java/org/redisson/RedissonFairLock.java at Redisson commit 66863978b4a9.

/// `RedissonFairLock.tryLockInnerAsync` with `EVAL_LONG` (behind `lock()` and `tryLock(wait,
/// ...)`: it queues): KEYS = [name, queue, timeouts], ARGV = [lease, lock name, wait,
/// currentTime]; nil when acquired, else the ms to wait.
const TRY_LOCK_LONG: &str = concat!(
    // remove stale threads
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end;",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then ",
    // remove the item from the queue and timeout set
    // NOTE we do not alter any other timeout
    "redis.call('zrem', KEYS[3], firstThreadId2);",
    "redis.call('lpop', KEYS[2]);",
    "else ",
    "break;",
    "end;",
    "end;",
    // check if the lock can be acquired now
    "if (redis.call('exists', KEYS[1]) == 0) ",
    "and ((redis.call('exists', KEYS[2]) == 0) ",
    "or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then ",
    // remove this thread from the queue and timeout set
    "redis.call('lpop', KEYS[2]);",
    "redis.call('zrem', KEYS[3], ARGV[2]);",
    // decrease timeouts for all waiting in the queue
    "local keys = redis.call('zrange', KEYS[3], 0, -1);",
    "for i = 1, #keys, 1 do ",
    "redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);",
    "end;",
    // acquire the lock and set the TTL for the lease
    "redis.call('hset', KEYS[1], ARGV[2], 1);",
    "redis.call('pexpire', KEYS[1], ARGV[1]);",
    "return nil;",
    "end;",
    // check if the lock is already held, and this is a re-entry
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then ",
    "redis.call('hincrby', KEYS[1], ARGV[2],1);",
    "redis.call('pexpire', KEYS[1], ARGV[1]);",
    "return nil;",
    "end;",
    // the lock cannot be acquired
    // check if the thread is already in the queue
    "local timeout = redis.call('zscore', KEYS[3], ARGV[2]);",
    "if timeout ~= false then ",
    "local ttl = redis.call('pttl', KEYS[1]);",
    "return math.max(0, ttl); ",
    "end;",
    // add the thread to the queue at the end, and set its timeout in the timeout set to the
    // timeout of the prior thread in the queue (or the timeout of the lock if the queue is
    // empty) plus the threadWaitTime
    "local lastThreadId = redis.call('lindex', KEYS[2], -1);",
    "local ttl;",
    "if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then ",
    "ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);",
    "else ",
    "ttl = redis.call('pttl', KEYS[1]);",
    "end;",
    "local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);",
    "if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then ",
    "redis.call('rpush', KEYS[2], ARGV[2]);",
    "end;",
    "return ttl;",
);

/// `RedissonFairLock.tryLockInnerAsync` with `EVAL_NULL_BOOLEAN` (behind `tryLock()`: a single
/// attempt, not queued): KEYS = [name, queue, timeouts], ARGV = [lease, lock name,
/// currentTime, wait]; nil when acquired, 1 when not.
const TRY_LOCK_ONCE: &str = concat!(
    // remove stale threads
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end;",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[3]) then ",
    // remove the item from the queue and timeout set
    // NOTE we do not alter any other timeout
    "redis.call('zrem', KEYS[3], firstThreadId2);",
    "redis.call('lpop', KEYS[2]);",
    "else ",
    "break;",
    "end;",
    "end;",
    "if (redis.call('exists', KEYS[1]) == 0) ",
    "and ((redis.call('exists', KEYS[2]) == 0) ",
    "or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then ",
    "redis.call('lpop', KEYS[2]);",
    "redis.call('zrem', KEYS[3], ARGV[2]);",
    // decrease timeouts for all waiting in the queue
    "local keys = redis.call('zrange', KEYS[3], 0, -1);",
    "for i = 1, #keys, 1 do ",
    "redis.call('zincrby', KEYS[3], -tonumber(ARGV[4]), keys[i]);",
    "end;",
    "redis.call('hset', KEYS[1], ARGV[2], 1);",
    "redis.call('pexpire', KEYS[1], ARGV[1]);",
    "return nil;",
    "end;",
    "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then ",
    "redis.call('hincrby', KEYS[1], ARGV[2], 1);",
    "redis.call('pexpire', KEYS[1], ARGV[1]);",
    "return nil;",
    "end;",
    "return 1;",
);

/// `RedissonFairLock.acquireFailedAsync` (a timed `tryLock` gave up): KEYS = [queue,
/// timeouts], ARGV = [lock name, wait]; no reply.
const ACQUIRE_FAILED: &str = concat!(
    // get the existing timeout for the thread to remove
    "local queue = redis.call('lrange', KEYS[1], 0, -1);",
    // find the location in the queue where the thread is
    "local i = 1;",
    "while i <= #queue and queue[i] ~= ARGV[1] do ",
    "i = i + 1;",
    "end;",
    // go to the next index which will exist after the current thread is removed
    "i = i + 1;",
    // decrement the timeout for the rest of the queue after the thread being removed
    "while i <= #queue do ",
    "redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i]);",
    "i = i + 1;",
    "end;",
    // remove the thread from the queue and timeouts set
    "redis.call('zrem', KEYS[2], ARGV[1]);",
    "redis.call('lrem', KEYS[1], 0, ARGV[1]);",
);

/// `RedissonFairLock.unlockInnerAsync`: KEYS = [name, queue, timeouts, channel, unlock latch],
/// ARGV = [UNLOCK_MESSAGE (0), internalLockLeaseTime, lock name, currentTime, publish command,
/// latch expiry]; 1 when freed, 0 when still held, nil when not held.
const UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[5]); ",
    "if val ~= false then ",
    "return tonumber(val);",
    "end; ",
    // remove stale threads
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end; ",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then ",
    "redis.call('zrem', KEYS[3], firstThreadId2); ",
    "redis.call('lpop', KEYS[2]); ",
    "else ",
    "break;",
    "end; ",
    "end;",
    "if (redis.call('exists', KEYS[1]) == 0) then ",
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); ",
    "if nextThreadId ~= false then ",
    "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); ",
    "end; ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); ",
    "return 1; ",
    "end;",
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then ",
    "return nil;",
    "end; ",
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); ",
    "if (counter > 0) then ",
    "redis.call('pexpire', KEYS[1], ARGV[2]); ",
    "redis.call('set', KEYS[5], 0, 'px', ARGV[6]); ",
    "return 0; ",
    "end; ",
    "redis.call('del', KEYS[1]); ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); ",
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); ",
    "if nextThreadId ~= false then ",
    "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); ",
    "end; ",
    "return 1; ",
);

/// `Config.fairLockWaitTimeout`'s default (`threadWaitTime`): 5 minutes, the `wait` of every
/// script above when no wait time is given.
const WAIT_MS: i64 = 300_000;

/// Redisson's lease when none is given: `lockWatchdogTimeout`, 30 s (`internalLockLeaseTime`).
const REDISSON_LEASE_MS: i64 = 30_000;

/// `PublishSubscribeService.getPublishCommand()` without sharded pub/sub (one server).
const PUBLISH_COMMAND: &str = "PUBLISH";

/// `LockPubSub.UNLOCK_MESSAGE`.
const UNLOCK_MESSAGE: i64 = 0;

/// `RedissonObject.prefixName`, as Redisson derives the queue, the deadlines and the channel:
/// written out here, not taken from distlock, so the test checks distlock's own derivation.
fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `System.currentTimeMillis()` of this (the Redisson) client.
fn current_time() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    i64::try_from(since.as_millis()).expect("ms fit in an i64")
}

/// One Redisson client (`ServiceManager.id`, a UUID) of the fair lock `name`: its scripts on a
/// plain connection; each Java thread is a `thread` number.
struct Redisson {
    con: MultiplexedConnection,
    id: String,
    name: String,
}

impl Redisson {
    /// `getLockName(threadId)`: the owner field and queue entry `<uuid>:<threadId>`.
    fn lock_name(&self, thread: u64) -> String {
        format!("{}:{thread}", self.id)
    }

    fn queue(&self) -> String {
        prefix_name("redisson_lock_queue", &self.name)
    }

    fn timeouts(&self) -> String {
        prefix_name("redisson_lock_timeout", &self.name)
    }

    /// `getChannelName()`; a waiter's own channel is `<channel>:<lock name>`.
    fn channel(&self) -> String {
        prefix_name("redisson_lock__channel", &self.name)
    }

    fn eval(script: &str, keys: &[&str]) -> redis::Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(script).arg(keys.len()).arg(keys);
        eval
    }

    /// One attempt of `lock()` / `tryLock(wait, ...)` (`EVAL_LONG`): queues when it does not get
    /// the lock. `None` when acquired, else the ms Redisson would wait.
    async fn try_lock_queued(&mut self, thread: u64) -> Option<i64> {
        let (queue, timeouts) = (self.queue(), self.timeouts());
        Self::eval(TRY_LOCK_LONG, &[&self.name, &queue, &timeouts])
            .arg(REDISSON_LEASE_MS)
            .arg(self.lock_name(thread))
            .arg(WAIT_MS)
            .arg(current_time())
            .query_async(&mut self.con)
            .await
            .expect("Redisson tryLockInnerAsync (EVAL_LONG)")
    }

    /// `tryLock()` (`EVAL_NULL_BOOLEAN`): one attempt, never queued. `true` when acquired.
    async fn try_lock_once(&mut self, thread: u64) -> bool {
        let (queue, timeouts) = (self.queue(), self.timeouts());
        let refused: Option<i64> = Self::eval(TRY_LOCK_ONCE, &[&self.name, &queue, &timeouts])
            .arg(REDISSON_LEASE_MS)
            .arg(self.lock_name(thread))
            .arg(current_time())
            .arg(WAIT_MS)
            .query_async(&mut self.con)
            .await
            .expect("Redisson tryLockInnerAsync (EVAL_NULL_BOOLEAN)");
        refused.is_none()
    }

    /// `acquireFailedAsync` of a waiter that gave up, with the default wait.
    async fn acquire_failed(&mut self, thread: u64) {
        let (queue, timeouts) = (self.queue(), self.timeouts());
        let () = Self::eval(ACQUIRE_FAILED, &[&queue, &timeouts])
            .arg(self.lock_name(thread))
            .arg(WAIT_MS)
            .query_async(&mut self.con)
            .await
            .expect("Redisson acquireFailedAsync");
    }

    /// `unlock()` (`unlockInnerAsync` under a fresh request id, whose latch key Redisson then
    /// deletes): 1 when freed.
    async fn unlock(&mut self, thread: u64) -> Option<i64> {
        let (queue, timeouts, channel) = (self.queue(), self.timeouts(), self.channel());
        let latch = format!(
            "{}:{}",
            prefix_name("redisson_unlock_latch", &self.name),
            lock_core::new_client_id().replace('-', "")
        );
        let freed: Option<i64> =
            Self::eval(UNLOCK, &[&self.name, &queue, &timeouts, &channel, &latch])
                .arg(UNLOCK_MESSAGE)
                .arg(REDISSON_LEASE_MS)
                .arg(self.lock_name(thread))
                .arg(current_time())
                .arg(PUBLISH_COMMAND)
                // (timeout + retry delay) × retry attempts: only how long a repeated unlock is
                // answered from the latch.
                .arg(30_000)
                .query_async(&mut self.con)
                .await
                .expect("Redisson unlockInnerAsync");
        let () = redis::cmd("DEL")
            .arg(&latch)
            .query_async(&mut self.con)
            .await
            .expect("DEL the unlock latch");
        freed
    }

    /// A Redisson waiter's subscription (`RedissonFairLock.subscribe`): a plain SUBSCRIBE on
    /// `redisson_lock__channel:{name}:<lock name>`, subscribed when it returns.
    async fn subscribe(
        &self,
        server: &RedisServer,
        thread: u64,
    ) -> impl futures_util::Stream<Item = redis::Msg> + Unpin + use<> {
        let mut subscriber = server
            .client()
            .get_async_pubsub()
            .await
            .expect("a pub/sub connection");
        subscriber
            .subscribe(format!("{}:{}", self.channel(), self.lock_name(thread)))
            .await
            .expect("SUBSCRIBE");
        subscriber.into_on_message()
    }
}

/// The next message on a Redisson waiter's channel, read as `LockPubSub.onMessage` reads it: a
/// Long, which must be `UNLOCK_MESSAGE`.
async fn told_its_turn(messages: &mut (impl futures_util::Stream<Item = redis::Msg> + Unpin)) {
    let message = tokio::time::timeout(Duration::from_secs(3), messages.next())
        .await
        .expect("the Redisson waiter is told its turn")
        .expect("the subscription ended");
    let payload: String = message.get_payload().expect("a text payload");
    assert_eq!(payload.parse::<i64>(), Ok(UNLOCK_MESSAGE), "{payload:?}");
}

static SHARED: SharedFixture<RedisServer> = SharedFixture::new();

fn shared_server() -> Arc<RedisServer> {
    SHARED.get_or_start(|| RedisServer::start().expect("start redis-server"))
}

/// distlock's side of one case: a client (for the fair lock's state) and fair locks, each on a
/// distlock client of its own.
struct Ours {
    locker: Locker<RedisBackend>,
    url: String,
}

impl Ours {
    async fn new(server: &RedisServer) -> Ours {
        let url = server.url();
        Ours {
            locker: Locker::new(
                RedisBackend::connect(&url)
                    .await
                    .expect("connect to the test server"),
            ),
            url,
        }
    }

    /// The fair lock `name` on a client of its own.
    async fn fair(&self, name: &str) -> FairLock<RedisBackend> {
        let backend = RedisBackend::connect(&self.url)
            .await
            .expect("connect to the test server");
        Locker::new(backend).fair(name).expect("a valid name")
    }

    async fn state(&self, name: &str) -> FairState {
        self.locker
            .fair(name)
            .expect("a valid name")
            .state()
            .await
            .expect("fair_state")
    }

    /// The queued owner fields, in order.
    async fn queue(&self, name: &str) -> Vec<String> {
        let state = self.state(name).await;
        state.queue.into_iter().map(|(field, _)| field).collect()
    }

    /// Waits until `field` is queued and its deadline has not lapsed (its own attempt refreshed
    /// it), at most `within`.
    async fn until_refreshed(&self, name: &str, field: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let queue = self.state(name).await.queue;
            if queue
                .iter()
                .any(|(queued, left)| queued == field && left.is_some_and(|left| !left.is_zero()))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{field}'s place was not refreshed: {queue:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// A distlock waiter on `name` in its own task: its owner field once queued (and its first
/// attempts made), and its task, which answers when it got the lock (after holding it `hold`,
/// then releasing).
async fn our_waiter(
    ours: &Ours,
    name: &str,
    hold: Duration,
) -> (String, tokio::task::JoinHandle<Instant>) {
    let lock = ours.fair(name).await;
    let before = ours.queue(name).await;
    let task = tokio::spawn(async move {
        let options = LockOptions::new().fixed_lease(LONG_LEASE);
        let guard = lock.lock_with(&options).await.expect("lock");
        let at = Instant::now();
        tokio::time::sleep(hold).await;
        assert!(guard.release().await.expect("release").was_held());
        at
    });
    // Its first attempt queues it.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let queue = ours.queue(name).await;
        if let Some(field) = queue.iter().find(|field| !before.contains(field)) {
            // Its attempt once registered for its notifications comes right after: let it
            // pass, so the next attempt is seconds away.
            tokio::time::sleep(Duration::from_millis(200)).await;
            return (field.clone(), task);
        }
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn finished(task: tokio::task::JoinHandle<Instant>, within: Duration) -> Instant {
    tokio::time::timeout(within, task)
        .await
        .expect("the waiter gets the lock")
        .expect("waiter task")
}

/// A distlock waiter that queued after a Redisson waiter is granted after it: our acquire keeps
/// a Redisson entry (client-clock deadline, 5 minutes ahead) at the head, our release tells
/// that head on its channel, and our waiter gets the lock once Redisson's holder unlocks.
#[test]
fn our_waiter_queues_behind_a_redisson_waiter() {
    run(async {
        let server = shared_server();
        let name = fresh_name("fair-interop-behind");
        let ours = Ours::new(&server).await;
        let mut redisson = Redisson {
            con: server.connection().await,
            id: lock_core::new_client_id(),
            name: name.clone(),
        };
        let holder = ours.fair(&name).await;
        let held = holder
            .lock_with(&LockOptions::new().fixed_lease(LONG_LEASE))
            .await
            .expect("lock");
        let mut turn = redisson.subscribe(&server, 1).await;
        assert!(redisson.try_lock_queued(1).await.is_some(), "held: queued");
        let (field, waiter) = our_waiter(&ours, &name, Duration::ZERO).await;
        assert_eq!(ours.queue(&name).await, vec![redisson.lock_name(1), field]);

        assert!(held.release().await.expect("release").was_held());
        told_its_turn(&mut turn).await;
        // A Redisson client slow to take its turn keeps it: ours waits.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "our waiter got ahead of Redisson's");
        assert_eq!(redisson.try_lock_queued(1).await, None, "Redisson's turn");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "granted while Redisson holds it");
        let unlocked_at = Instant::now();
        assert_eq!(redisson.unlock(1).await, Some(1));
        // Promptly or at its next attempt (a_redisson_grant_lapses_our_queued_deadlines).
        let granted_at = finished(waiter, QUEUE_TIMEOUT).await;
        assert!(granted_at > unlocked_at);
        assert!(ours.state(&name).await.queue.is_empty());
    });
}

/// A Redisson waiter that queued after a distlock waiter is told its turn on its own channel
/// (`redisson_lock__channel:{name}:<uuid>:<tid>`, message 0) when ours releases, and its
/// attempt then gets the lock. Our grant does not shift its deadline.
#[test]
fn a_redisson_waiter_behind_ours_is_told_its_turn() {
    run(async {
        let server = shared_server();
        let name = fresh_name("fair-interop-ahead");
        let ours = Ours::new(&server).await;
        let mut redisson = Redisson {
            con: server.connection().await,
            id: lock_core::new_client_id(),
            name: name.clone(),
        };
        let holder = ours.fair(&name).await;
        let held = holder
            .lock_with(&LockOptions::new().fixed_lease(LONG_LEASE))
            .await
            .expect("lock");
        let (field, waiter) = our_waiter(&ours, &name, Duration::from_millis(100)).await;
        let mut turn = redisson.subscribe(&server, 7).await;
        assert!(redisson.try_lock_queued(7).await.is_some(), "held: queued");
        let state = ours.state(&name).await;
        assert_eq!(
            state
                .queue
                .iter()
                .map(|(f, _)| f.clone())
                .collect::<Vec<_>>(),
            vec![field, redisson.lock_name(7)]
        );
        let redisson_deadline = state.queue[1].1;

        let released_at = Instant::now();
        assert!(held.release().await.expect("release").was_held());
        let granted_at = finished(waiter, Duration::from_secs(5)).await;
        assert!(granted_at.duration_since(released_at) < HAND_OFF);
        let left = ours.state(&name).await.queue;
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(
            left[0].1.unwrap_or_default() + Duration::from_secs(1)
                > redisson_deadline.unwrap_or_default(),
            "our grant shifted Redisson's deadline: {redisson_deadline:?} then {left:?}"
        );
        told_its_turn(&mut turn).await;
        assert_eq!(redisson.try_lock_queued(7).await, None, "Redisson's turn");
        let lock: Vec<String> = redis::cmd("HKEYS")
            .arg(&name)
            .query_async(&mut redisson.con)
            .await
            .expect("HKEYS");
        assert_eq!(lock, vec![redisson.lock_name(7)]);
        assert_eq!(redisson.unlock(7).await, Some(1));
        assert!(ours.state(&name).await.queue.is_empty());
    });
}

/// Redisson's `unlock` tells our waiter at the head of the queue on our channel, and it gets
/// the lock at once (not at its next attempt); Redisson's `tryLock()` meanwhile does not get
/// ahead of it.
#[test]
fn a_redisson_unlock_wakes_our_head_waiter() {
    run(async {
        let server = shared_server();
        let name = fresh_name("fair-interop-wake");
        let ours = Ours::new(&server).await;
        let mut redisson = Redisson {
            con: server.connection().await,
            id: lock_core::new_client_id(),
            name: name.clone(),
        };
        assert!(redisson.try_lock_once(3).await, "free: Redisson's");
        // It holds the lock a while once granted: Redisson's `tryLock()` right after the unlock
        // then finds our waiter at the head or holding, never a free lock (with no hold, a
        // loaded machine could let our waiter in and out before it, and Redisson's would win).
        let (field, waiter) = our_waiter(&ours, &name, Duration::from_millis(300)).await;
        assert_eq!(ours.queue(&name).await, vec![field.clone()]);
        assert!(!redisson.try_lock_once(4).await, "held");
        // Our waiter's next attempt is seconds away: only the announcement can wake it now.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let unlocked_at = Instant::now();
        assert_eq!(redisson.unlock(3).await, Some(1));
        assert!(!redisson.try_lock_once(4).await, "our waiter's turn");
        let granted_at = finished(waiter, Duration::from_secs(5)).await;
        let hand_off = granted_at.duration_since(unlocked_at);
        assert!(hand_off < HAND_OFF, "woken {hand_off:?} after the unlock");
        assert!(ours.state(&name).await.queue.is_empty());
    });
}

/// Redisson's `acquireFailed` (its timed `tryLock` gave up) takes only its own entry out of the
/// queue; it also takes `wait` (5 minutes) off the deadline of every waiter behind it, so ours
/// behind it lapses. Our waiters keep their places: the one behind refreshes its deadline at
/// its next attempt, before it comes to the head, and each is granted in order, at once.
#[test]
fn a_redisson_acquire_failed_removes_only_its_own_entry() {
    run(async {
        let server = shared_server();
        let name = fresh_name("fair-interop-failed");
        let ours = Ours::new(&server).await;
        let mut redisson = Redisson {
            con: server.connection().await,
            id: lock_core::new_client_id(),
            name: name.clone(),
        };
        let holder = ours.fair(&name).await;
        let held = holder
            .lock_with(&LockOptions::new().fixed_lease(LONG_LEASE))
            .await
            .expect("lock");
        let hold = Duration::from_millis(100);
        let (first, first_waiter) = our_waiter(&ours, &name, hold).await;
        assert!(redisson.try_lock_queued(2).await.is_some(), "held: queued");
        let (second, second_waiter) = our_waiter(&ours, &name, hold).await;
        let before = ours.state(&name).await.queue;

        redisson.acquire_failed(2).await;
        let after = ours.state(&name).await.queue;
        assert_eq!(
            after.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>(),
            vec![first.clone(), second.clone()]
        );
        assert!(
            after[0].1.unwrap_or_default() + Duration::from_secs(1)
                > before[0].1.unwrap_or_default(),
            "the waiter ahead was shifted: {before:?} then {after:?}"
        );
        assert_eq!(
            after[1].1,
            Some(Duration::ZERO),
            "Redisson shifts the ones behind by its wait: {after:?}"
        );
        ours.until_refreshed(&name, &second, QUEUE_TIMEOUT / 3 + Duration::from_secs(1))
            .await;

        let released_at = Instant::now();
        assert!(held.release().await.expect("release").was_held());
        let first_at = finished(first_waiter, Duration::from_secs(5)).await;
        let second_at = finished(second_waiter, Duration::from_secs(5)).await;
        assert!(first_at.duration_since(released_at) < HAND_OFF);
        assert!(second_at > first_at + hold);
        assert!(second_at.duration_since(first_at + hold) < HAND_OFF);
        assert!(ours.state(&name).await.queue.is_empty());
    });
}

/// What a Redisson grant does to our queued waiters: its `zincrby` of −wait (5 minutes) on
/// every queued member makes their deadlines lapse at once. Our waiter is not lost either way:
///
/// - when a Redisson script runs before our waiter's next attempt (here Redisson's unlock; a
///   Redisson `tryLock` sweeps the same way, and so does another distlock waiter's attempt),
///   it sweeps the lapsed head out of the queue, and the unlock tells nobody; our waiter gets
///   the lock at its next attempt (at most a third of `QUEUE_TIMEOUT` after its last one), or,
///   when someone queued meanwhile, queues again behind them: re-queued, not in order;
/// - when our waiter's own next attempt is the first script to run, it refreshes its deadline
///   and keeps its place, ahead of a Redisson waiter that came after it, and Redisson's unlock
///   tells it its turn: in order, at once.
#[test]
fn a_redisson_grant_lapses_our_queued_deadlines() {
    run(async {
        let server = shared_server();
        let ours = Ours::new(&server).await;
        for keeps_its_place in [false, true] {
            let name = fresh_name("fair-interop-grant");
            let mut redisson = Redisson {
                con: server.connection().await,
                id: lock_core::new_client_id(),
                name: name.clone(),
            };
            let holder = ours.fair(&name).await;
            let held = holder
                .lock_with(&LockOptions::new().fixed_lease(LONG_LEASE))
                .await
                .expect("lock");
            let mut turn = redisson.subscribe(&server, 5).await;
            assert!(redisson.try_lock_queued(5).await.is_some(), "held: queued");
            let queued_at = Instant::now();
            let (field, waiter) = our_waiter(&ours, &name, Duration::ZERO).await;
            // In the second run a Redisson waiter comes after ours: its deadline is ours plus
            // its wait, so Redisson's grant below leaves it 10 s ahead, not lapsed.
            let mut next_turn = redisson.subscribe(&server, 6).await;
            if keeps_its_place {
                assert!(redisson.try_lock_queued(6).await.is_some(), "held: queued");
            }
            assert!(held.release().await.expect("release").was_held());
            told_its_turn(&mut turn).await;
            assert_eq!(redisson.try_lock_queued(5).await, None, "Redisson's turn");
            let queue = ours.state(&name).await.queue;
            assert_eq!(
                queue[0],
                (field.clone(), Some(Duration::ZERO)),
                "Redisson's grant lapses our deadline"
            );

            if keeps_its_place {
                assert!(queue[1].1.is_some_and(|left| !left.is_zero()), "{queue:?}");
                // Our waiter's next attempt, the first script to run, refreshes its deadline
                // where it is, at the head: its own lapsed entry is not swept by its own
                // attempt, so it stays ahead of the Redisson waiter that came after it.
                ours.until_refreshed(&name, &field, QUEUE_TIMEOUT / 3 + Duration::from_secs(1))
                    .await;
                assert_eq!(
                    ours.queue(&name).await,
                    vec![field.clone(), redisson.lock_name(6)],
                    "our waiter kept its place"
                );
                let unlocked_at = Instant::now();
                assert_eq!(redisson.unlock(5).await, Some(1));
                let granted_at = finished(waiter, Duration::from_secs(5)).await;
                let hand_off = granted_at.duration_since(unlocked_at);
                assert!(hand_off < HAND_OFF, "{name}: told its turn: {hand_off:?}");
                told_its_turn(&mut next_turn).await;
                assert_eq!(redisson.try_lock_queued(6).await, None, "then Redisson's");
                assert_eq!(redisson.unlock(6).await, Some(1));
            } else {
                let unlocked_at = Instant::now();
                assert_eq!(redisson.unlock(5).await, Some(1));
                assert!(
                    ours.state(&name).await.queue.is_empty(),
                    "Redisson's unlock sweeps our lapsed waiter out"
                );
                let granted_at = finished(waiter, QUEUE_TIMEOUT).await;
                let after = granted_at.duration_since(queued_at);
                assert!(
                    granted_at.duration_since(unlocked_at) > HAND_OFF,
                    "not told: it goes on at its next attempt"
                );
                assert!(
                    after < QUEUE_TIMEOUT / 3 + Duration::from_secs(1),
                    "its next attempt took {after:?}"
                );
            }
            assert!(ours.state(&name).await.queue.is_empty());
        }
    });
}

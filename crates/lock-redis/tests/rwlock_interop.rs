//! Wire compatibility with Redisson's `RReadWriteLock`: Redisson's own Lua scripts, copied
//! verbatim from `org.redisson.RedissonReadLock` and `org.redisson.RedissonWriteLock`, sent with
//! `EVAL` on a plain connection with the keys and arguments Redisson passes, against the same
//! hash, timeout keys and channel as distlock's read-write lock (`Locker::read_write`). Each side
//! sees, blocks and wakes the other.
//!
//! One server serves every case of this file: cases use fresh names, and the server is started
//! by the first case and stopped when the last one running lets go.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::{LockOptions, Locker, ReadWriteLock, ReadWriteMode, ReleaseOutcome};
use lock_redis::RedisBackend;
use lock_redis::redis::{self, aio::MultiplexedConnection};
use lock_testkit::conformance::{fresh_name, run};
use lock_testkit::{RedisServer, SharedFixture};

/// How long a woken waiter may take to get the lock: far under the 30 s leases of the holders,
/// which would let it in without any announcement heard.
const HAND_OFF: Duration = Duration::from_millis(700);

/// How long a case waits for something that must happen, before calling it a hang.
const PATIENCE: Duration = Duration::from_secs(5);

/// Redisson's `internalLockLeaseTime` (the watchdog's 30 s), the lease of every Redisson hold
/// here: a waiter let in before it ends was woken by an announcement.
const REDISSON_LEASE_MS: u64 = 30_000;

/// The `timeout` argument of Redisson's unlock scripts: how long the unlock latch
/// (`redisson_unlock_latch:{name}:<request id>`) lives. Redisson computes it from its
/// `timeout`, `retryDelay` and `retryAttempts` settings; this is its order of magnitude with the
/// defaults (any positive value behaves the same here).
const UNLOCK_LATCH_MS: u64 = 20_000;

// Redisson's scripts, verbatim (the Java string concatenations, piece by piece), from
// redisson/src/main/java/org/redisson/RedissonReadLock.java and RedissonWriteLock.java at
// Redisson commit 66863978b4a9.

/// `RedissonReadLock.tryLockInnerAsync`: KEYS = [name, timeout prefix
/// (`{name}:<uuid>:<threadId>:rwlock_timeout`)], ARGV = [lease ms, `<uuid>:<threadId>`,
/// `<uuid>:<threadId>:write`]; nil when taken, else the lock's pttl.
const READ_TRY_LOCK: &str = concat!(
    "local mode = redis.call('hget', KEYS[1], 'mode'); ",
    "if (mode == false) then ",
    "redis.call('hset', KEYS[1], 'mode', 'read'); ",
    "redis.call('hset', KEYS[1], ARGV[2], 1); ",
    "redis.call('set', KEYS[2] .. ':1', 1); ",
    "redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); ",
    "redis.call('pexpire', KEYS[1], ARGV[1]); ",
    "return nil; ",
    "end; ",
    "if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then ",
    "local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); ",
    "local key = KEYS[2] .. ':' .. ind;",
    "redis.call('set', key, 1); ",
    "redis.call('pexpire', key, ARGV[1]); ",
    "local remainTime = redis.call('pttl', KEYS[1]); ",
    "redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); ",
    "return nil; ",
    "end;",
    "return redis.call('pttl', KEYS[1]);",
);

/// `RedissonReadLock.unlockInnerAsync`: KEYS = [name, channel, timeout prefix, key prefix
/// (`{name}`), unlock latch], ARGV = [0 (`UNLOCK_MESSAGE`), `<uuid>:<threadId>`, publish
/// command, latch timeout]; 1 when the lock went, 0 when it stays, nil when not held.
const READ_UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[5]); ",
    "if val ~= false then ",
    "return tonumber(val);",
    "end; ",
    "local mode = redis.call('hget', KEYS[1], 'mode'); ",
    "if (mode == false) then ",
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); ",
    "return nil; ",
    "end; ",
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); ",
    "if (lockExists == 0) then ",
    "return nil;",
    "end; ",
    "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); ",
    "if (counter == 0) then ",
    "redis.call('hdel', KEYS[1], ARGV[2]); ",
    "end;",
    "redis.call('del', KEYS[3] .. ':' .. (counter+1)); ",
    "if (redis.call('hlen', KEYS[1]) > 1) then ",
    "local maxRemainTime = -3; ",
    "local keys = redis.call('hkeys', KEYS[1]); ",
    "for n, key in ipairs(keys) do ",
    "counter = tonumber(redis.call('hget', KEYS[1], key)); ",
    "if type(counter) == 'number' then ",
    "for i=counter, 1, -1 do ",
    "local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); ",
    "maxRemainTime = math.max(remainTime, maxRemainTime);",
    "end; ",
    "end; ",
    "end; ",
    "if maxRemainTime > 0 then ",
    "redis.call('pexpire', KEYS[1], maxRemainTime); ",
    "redis.call('set', KEYS[5], 0, 'px', ARGV[4]); ",
    "return 0; ",
    "end;",
    "if mode == 'write' then ",
    "redis.call('set', KEYS[5], 0, 'px', ARGV[4]); ",
    "return 0;",
    "end; ",
    "end; ",
    "redis.call('del', KEYS[1]); ",
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); ",
    "return 1; ",
);

/// `RedissonWriteLock.tryLockInnerAsync`: KEYS = [name], ARGV = [lease ms,
/// `<uuid>:<threadId>:write`]; nil when taken, else the lock's pttl.
const WRITE_TRY_LOCK: &str = concat!(
    "local mode = redis.call('hget', KEYS[1], 'mode'); ",
    "if (mode == false) then ",
    "redis.call('hset', KEYS[1], 'mode', 'write'); ",
    "redis.call('hset', KEYS[1], ARGV[2], 1); ",
    "redis.call('pexpire', KEYS[1], ARGV[1]); ",
    "return nil; ",
    "end; ",
    "if (mode == 'write') then ",
    "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then ",
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); ",
    "local currentExpire = redis.call('pttl', KEYS[1]); ",
    "redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); ",
    "return nil; ",
    "end; ",
    "end;",
    "return redis.call('pttl', KEYS[1]);",
);

/// `RedissonWriteLock.unlockInnerAsync`: KEYS = [name, channel, unlock latch], ARGV = [1
/// (`READ_UNLOCK_MESSAGE`), lease ms, `<uuid>:<threadId>:write`, publish command, latch
/// timeout]; 1 when the last write hold went, 0 when holds stay, nil when not held.
const WRITE_UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[3]); ",
    "if val ~= false then ",
    "return tonumber(val);",
    "end; ",
    "local mode = redis.call('hget', KEYS[1], 'mode'); ",
    "if (mode == false) then ",
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); ",
    "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); ",
    "return nil; ",
    "end;",
    "if (mode == 'write') then ",
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); ",
    "if (lockExists == 0) then ",
    "return nil;",
    "else ",
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); ",
    "if (counter > 0) then ",
    "redis.call('pexpire', KEYS[1], ARGV[2]); ",
    "redis.call('set', KEYS[3], 0, 'px', ARGV[5]); ",
    "return 0; ",
    "else ",
    "redis.call('hdel', KEYS[1], ARGV[3]); ",
    "if (redis.call('hlen', KEYS[1]) == 1) then ",
    "redis.call('del', KEYS[1]); ",
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); ",
    "else ",
    "redis.call('hset', KEYS[1], 'mode', 'read'); ",
    "end; ",
    "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); ",
    "return 1; ",
    "end; ",
    "end; ",
    "end; ",
    "return nil;",
);

/// `LockPubSub.UNLOCK_MESSAGE`: a read unlock that freed the lock (wakes one waiter).
const UNLOCK_MESSAGE: &str = "0";

/// `LockPubSub.READ_UNLOCK_MESSAGE`: a write unlock that freed the lock (wakes every waiter).
const READ_UNLOCK_MESSAGE: &str = "1";

/// `PublishSubscribeService.getPublishCommand()` without sharded pub/sub (one server).
const PUBLISH_COMMAND: &str = "PUBLISH";

/// `RedissonObject.prefixName`, as Redisson derives the lock's channel
/// (`getChannelName`: `prefixName("redisson_rwlock", name)`). Written out here, not taken from
/// distlock, so the test checks distlock's own derivation.
fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `RedissonObject.suffixName`, as Redisson derives the read timeout prefix.
fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// Request ids of Redisson's unlocks (`ServiceManager.generateId`: random hex), unique here.
fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{:032x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A Redisson client's `RReadWriteLock` on `name`: its scripts on a plain connection, for any of
/// its threads.
struct Redisson {
    con: MultiplexedConnection,
    name: String,
    /// The client's id (`ServiceManager.getId()`, a UUID).
    id: String,
}

impl Redisson {
    /// `getLockName(threadId)`: the read side's hash field.
    fn lock_name(&self, thread: u64) -> String {
        format!("{}:{thread}", self.id)
    }

    /// `RedissonReadLock.getWriteLockName` / `RedissonWriteLock.getLockName`.
    fn write_lock_name(&self, thread: u64) -> String {
        format!("{}:{thread}:write", self.id)
    }

    /// `getReadWriteTimeoutNamePrefix(threadId)`.
    fn timeout_prefix(&self, thread: u64) -> String {
        format!(
            "{}:rwlock_timeout",
            suffix_name(&self.name, &self.lock_name(thread))
        )
    }

    /// `RedissonReadLock.getKeyPrefix`: the timeout prefix up to the lock name.
    fn key_prefix(&self, thread: u64) -> String {
        let prefix = self.timeout_prefix(thread);
        let cut = format!(":{}", self.lock_name(thread));
        prefix
            .split(&cut)
            .next()
            .expect("split yields a first piece")
            .to_owned()
    }

    fn channel(&self) -> String {
        prefix_name("redisson_rwlock", &self.name)
    }

    /// `getUnlockLatchName(requestId)`.
    fn unlock_latch(&self, request: &str) -> String {
        format!(
            "{}:{request}",
            prefix_name("redisson_unlock_latch", &self.name)
        )
    }

    fn eval(script: &str, keys: &[&str]) -> redis::Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(script).arg(keys.len()).arg(keys);
        eval
    }

    /// `readLock().tryLock()` of `thread` (one attempt): `None` when taken, else the pttl.
    async fn read_try_lock(&mut self, thread: u64) -> Option<i64> {
        Self::eval(READ_TRY_LOCK, &[&self.name, &self.timeout_prefix(thread)])
            .arg(REDISSON_LEASE_MS)
            .arg(self.lock_name(thread))
            .arg(self.write_lock_name(thread))
            .query_async(&mut self.con)
            .await
            .expect("Redisson read tryLock")
    }

    /// `writeLock().tryLock()` of `thread` (one attempt): `None` when taken, else the pttl.
    async fn write_try_lock(&mut self, thread: u64) -> Option<i64> {
        Self::eval(WRITE_TRY_LOCK, &[&self.name])
            .arg(REDISSON_LEASE_MS)
            .arg(self.write_lock_name(thread))
            .query_async(&mut self.con)
            .await
            .expect("Redisson write tryLock")
    }

    /// `readLock().unlock()` of `thread`: the script's reply (`Some(1)` freed, `Some(0)` still
    /// held, `None` not held), then the latch deleted as `RedissonBaseLock.unlockInnerAsync`
    /// does.
    async fn read_unlock(&mut self, thread: u64) -> Option<i64> {
        let request = request_id();
        let latch = self.unlock_latch(&request);
        let reply = Self::eval(
            READ_UNLOCK,
            &[
                &self.name,
                &self.channel(),
                &self.timeout_prefix(thread),
                &self.key_prefix(thread),
                &latch,
            ],
        )
        .arg(UNLOCK_MESSAGE)
        .arg(self.lock_name(thread))
        .arg(PUBLISH_COMMAND)
        .arg(UNLOCK_LATCH_MS)
        .query_async(&mut self.con)
        .await
        .expect("Redisson read unlock");
        self.delete_latch(&latch).await;
        reply
    }

    /// `writeLock().unlock()` of `thread`, as [`read_unlock`](Self::read_unlock).
    async fn write_unlock(&mut self, thread: u64) -> Option<i64> {
        let request = request_id();
        let latch = self.unlock_latch(&request);
        let reply = Self::eval(WRITE_UNLOCK, &[&self.name, &self.channel(), &latch])
            .arg(READ_UNLOCK_MESSAGE)
            .arg(REDISSON_LEASE_MS)
            .arg(self.write_lock_name(thread))
            .arg(PUBLISH_COMMAND)
            .arg(UNLOCK_LATCH_MS)
            .query_async(&mut self.con)
            .await
            .expect("Redisson write unlock");
        self.delete_latch(&latch).await;
        reply
    }

    async fn delete_latch(&mut self, latch: &str) {
        let _: i64 = redis::cmd("DEL")
            .arg(latch)
            .query_async(&mut self.con)
            .await
            .expect("DEL the unlock latch");
    }

    /// The lock's `mode` field, as `RedissonWriteLock.isLocked` reads it.
    async fn mode(&mut self) -> Option<String> {
        redis::cmd("HGET")
            .arg(&self.name)
            .arg("mode")
            .query_async(&mut self.con)
            .await
            .expect("HGET mode")
    }
}

static SHARED: SharedFixture<RedisServer> = SharedFixture::new();

fn shared_server() -> Arc<RedisServer> {
    SHARED.get_or_start(|| RedisServer::start().expect("start redis-server"))
}

/// One distlock client and one Redisson client of the lock `name`.
struct Pair {
    // Kept alive while the case runs.
    server: Arc<RedisServer>,
    ours: ReadWriteLock<RedisBackend>,
    redisson: Redisson,
}

/// The read-write lock `name` of a new distlock client.
async fn ours(server: &RedisServer, name: &str) -> ReadWriteLock<RedisBackend> {
    Locker::new(
        RedisBackend::connect(server.url())
            .await
            .expect("connect to the test server"),
    )
    .read_write(name)
    .expect("a valid name")
}

async fn pair(name: &str) -> Pair {
    let server = shared_server();
    let ours = ours(&server, name).await;
    let redisson = Redisson {
        con: server.connection().await,
        name: name.to_owned(),
        id: "7c1a3f52-4b8e-4d7a-9f0e-2b6c8d1e5a93".to_owned(),
    };
    Pair {
        server,
        ours,
        redisson,
    }
}

/// A plain name and a hash-tagged one (`{tenant}:…`, whose keys and channel Redisson derives
/// without extra braces).
fn names(case: &str) -> [String; 2] {
    [fresh_name(case), format!("{{tenant}}:{}", fresh_name(case))]
}

/// Holds that only a release is meant to end.
fn long() -> LockOptions {
    LockOptions::new().fixed_lease(Duration::from_millis(REDISSON_LEASE_MS))
}

/// Waits for a waiting task that returns the instant it got the lock; fails unless that came
/// within [`HAND_OFF`] of `since`.
async fn promptly<T>(task: tokio::task::JoinHandle<(Instant, T)>, since: Instant, what: &str) -> T {
    let (at, value) = tokio::time::timeout(PATIENCE, task)
        .await
        .unwrap_or_else(|_| panic!("{what}: not woken"))
        .expect("waiting task");
    let hand_off = at.duration_since(since);
    assert!(hand_off < HAND_OFF, "{what}: took {hand_off:?}");
    value
}

/// A Redisson read lock keeps our writer waiting; Redisson's read unlock (DEL and `0` on
/// `redisson_rwlock:{name}`) lets it in at once, and then Redisson's readers and writers are
/// refused with the pttl of our write lease.
#[test]
fn a_redisson_reader_blocks_our_writer_and_its_unlock_wakes_it() {
    run(async {
        for name in names("rw-interop-reader") {
            let Pair {
                server: _server,
                ours,
                mut redisson,
            } = pair(&name).await;
            assert_eq!(redisson.read_try_lock(1).await, None, "{name}: read");
            assert!(
                ours.try_write().await.expect("try").is_none(),
                "{name}: a Redisson reader holds it"
            );
            let writer = tokio::spawn({
                let ours = ours.clone();
                async move {
                    let writing = ours.write_with(&long()).await.expect("write");
                    (Instant::now(), writing)
                }
            });
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!writer.is_finished(), "{name}: the writer waits");
            let unlocked_at = Instant::now();
            assert_eq!(redisson.read_unlock(1).await, Some(1), "{name}: freed");
            let writing = promptly(writer, unlocked_at, &name).await;
            assert_eq!(redisson.mode().await.as_deref(), Some("write"));
            for refused in [
                redisson.read_try_lock(2).await,
                redisson.write_try_lock(2).await,
            ] {
                let pttl = refused.expect("refused while we write");
                assert!(pttl > 0 && pttl <= 30_000, "{name}: pttl {pttl}");
            }
            assert_eq!(
                writing.release().await.expect("release"),
                ReleaseOutcome::Released
            );
            assert_eq!(redisson.mode().await, None, "{name}: free");
        }
    });
}

/// Our read lock refuses a Redisson writer (its tryLock returns the pttl of our read lease);
/// our read release frees the lock with Redisson's `0` message, which a Redisson waiter
/// subscribed to the channel hears, and its next tryLock gets in.
#[test]
fn our_reader_blocks_a_redisson_writer_and_our_release_lets_it_in() {
    run(async {
        for name in names("rw-interop-our-reader") {
            let Pair {
                server,
                ours,
                mut redisson,
            } = pair(&name).await;
            let reading = ours.read_with(&long()).await.expect("read");
            let pttl = redisson
                .write_try_lock(1)
                .await
                .unwrap_or_else(|| panic!("{name}: Redisson's writer got in past our reader"));
            assert!(pttl > 20_000 && pttl <= 30_000, "{name}: pttl {pttl}");
            let mut messages = subscriber(&server, &redisson.channel()).await;
            assert_eq!(
                reading.release().await.expect("release"),
                ReleaseOutcome::Released
            );
            assert_eq!(next_message(&mut messages, &name).await, UNLOCK_MESSAGE);
            assert_eq!(redisson.write_try_lock(1).await, None, "{name}: in");
            assert!(
                ours.try_read().await.expect("try").is_none(),
                "{name}: Redisson writes"
            );
            assert_eq!(redisson.write_unlock(1).await, Some(1), "{name}: freed");
            assert_eq!(
                next_message(&mut messages, &name).await,
                READ_UNLOCK_MESSAGE
            );
        }
    });
}

/// A Redisson write lock keeps our readers (several, on two clients) waiting; its unlock
/// (`1`) wakes every one of them at once, and they hold the lock together, a Redisson reader
/// with them.
#[test]
fn a_redisson_writer_wakes_all_our_readers() {
    run(async {
        for name in names("rw-interop-writer") {
            let Pair {
                server,
                ours,
                mut redisson,
            } = pair(&name).await;
            let other = self::ours(&server, &name).await;
            assert_eq!(redisson.write_try_lock(1).await, None, "{name}: write");
            let mut readers = Vec::new();
            for locks in [&ours, &other, &ours, &other] {
                readers.push(tokio::spawn({
                    let locks = locks.clone();
                    async move {
                        let reading = locks.read_with(&long()).await.expect("read");
                        (Instant::now(), reading)
                    }
                }));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                readers.iter().all(|reader| !reader.is_finished()),
                "{name}: Redisson's writer keeps our readers out"
            );
            let unlocked_at = Instant::now();
            assert_eq!(redisson.write_unlock(1).await, Some(1), "{name}: freed");
            let mut guards = Vec::new();
            for reader in readers {
                guards.push(promptly(reader, unlocked_at, &name).await);
            }
            let state = ours.state().await.expect("state");
            assert_eq!(state.mode, Some(ReadWriteMode::Read), "{name}");
            assert_eq!(state.readers.len(), 4, "{name}: {state:?}");
            assert_eq!(redisson.read_try_lock(2).await, None, "{name}: shared");
            assert!(redisson.write_try_lock(3).await.is_some(), "{name}: read");
            for guard in guards {
                assert!(guard.release().await.expect("release").was_held());
            }
            assert_eq!(redisson.read_unlock(2).await, Some(1), "{name}: freed");
            assert_eq!(redisson.mode().await, None, "{name}: free");
        }
    });
}

/// Our readers and Redisson's readers (two threads) hold the lock at once, each under its own
/// field with its own timeout keys; writers of either side are refused until the last of them,
/// whoever it is, leaves.
#[test]
fn our_readers_and_redisson_readers_share() {
    run(async {
        for name in names("rw-interop-share") {
            let Pair {
                server: _server,
                ours,
                mut redisson,
            } = pair(&name).await;
            assert_eq!(redisson.read_try_lock(1).await, None, "{name}");
            let reading = ours.read_with(&long()).await.expect("read");
            assert_eq!(redisson.read_try_lock(2).await, None, "{name}");
            let state = ours.state().await.expect("state");
            let mut expected = vec![
                (redisson.lock_name(1), 1),
                (redisson.lock_name(2), 1),
                (reading.owner_field().to_owned(), 1),
            ];
            expected.sort();
            assert_eq!(state.readers, expected, "{name}");
            // Our hold's timeout key is where Redisson's scripts look for it.
            let our_key = format!(
                "{}:1",
                suffix_name(&name, &format!("{}:rwlock_timeout", reading.owner_field()))
            );
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&our_key)
                .query_async(&mut redisson.con)
                .await
                .expect("PTTL");
            assert!(pttl > 20_000, "{name}: {our_key} pttl {pttl}");
            // Another task: ours would be an upgrade.
            let refused = tokio::spawn({
                let ours = ours.clone();
                async move { ours.try_write().await.expect("try").is_none() }
            });
            assert!(refused.await.expect("task"), "{name}: readers hold it");
            assert!(redisson.write_try_lock(3).await.is_some(), "{name}");
            assert_eq!(redisson.read_unlock(1).await, Some(0), "{name}: held on");
            assert_eq!(
                reading.release().await.expect("release"),
                ReleaseOutcome::Released
            );
            assert!(ours.try_write().await.expect("try").is_none());
            assert_eq!(redisson.read_unlock(2).await, Some(1), "{name}: freed");
            let writing = ours.try_write().await.expect("try").expect("free");
            assert!(writing.release().await.expect("release").was_held());
        }
    });
}

/// A Redisson writer takes its own read lock and unlocks the write lock (a downgrade): the lock
/// stays in read mode, so our writer keeps waiting and our readers share it; Redisson's read
/// unlock then wakes our writer at once.
#[test]
fn a_redisson_downgrade_keeps_our_writer_waiting() {
    run(async {
        for name in names("rw-interop-their-downgrade") {
            let Pair {
                server: _server,
                ours,
                mut redisson,
            } = pair(&name).await;
            assert_eq!(redisson.write_try_lock(1).await, None, "{name}: write");
            assert_eq!(redisson.read_try_lock(1).await, None, "{name}: downgrade");
            let writer = tokio::spawn({
                let ours = ours.clone();
                async move {
                    let writing = ours.write_with(&long()).await.expect("write");
                    (Instant::now(), writing)
                }
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(
                redisson.write_unlock(1).await,
                Some(1),
                "{name}: downgraded"
            );
            assert_eq!(redisson.mode().await.as_deref(), Some("read"), "{name}");
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!writer.is_finished(), "{name}: Redisson still reads");
            let reading = ours
                .try_read()
                .await
                .expect("try")
                .unwrap_or_else(|| panic!("{name}: read mode is shared"));
            assert!(reading.release().await.expect("release").was_held());
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!writer.is_finished(), "{name}: Redisson still reads");
            let unlocked_at = Instant::now();
            assert_eq!(redisson.read_unlock(1).await, Some(1), "{name}: freed");
            let writing = promptly(writer, unlocked_at, &name).await;
            assert!(writing.release().await.expect("release").was_held());
        }
    });
}

/// Our writer takes the read lock too and releases the write lock (a downgrade): Redisson's
/// read tryLock is refused while we write and gets in once the lock is in read mode; its
/// writer stays out until our read hold goes.
#[test]
fn our_downgrade_is_read_mode_for_redisson() {
    run(async {
        for name in names("rw-interop-our-downgrade") {
            let Pair {
                server: _server,
                ours,
                mut redisson,
            } = pair(&name).await;
            let writing = ours.write_with(&long()).await.expect("write");
            let reading = ours.read_with(&long()).await.expect("downgrade");
            assert!(
                redisson.read_try_lock(1).await.is_some(),
                "{name}: we write"
            );
            assert_eq!(
                writing.release().await.expect("release"),
                ReleaseOutcome::Released
            );
            assert_eq!(redisson.mode().await.as_deref(), Some("read"), "{name}");
            assert_eq!(redisson.read_try_lock(1).await, None, "{name}: shared");
            assert!(redisson.write_try_lock(2).await.is_some(), "{name}: read");
            assert_eq!(redisson.read_unlock(1).await, Some(0), "{name}: we read on");
            assert!(redisson.write_try_lock(2).await.is_some(), "{name}: read");
            assert!(reading.release().await.expect("release").was_held());
            assert_eq!(redisson.write_try_lock(2).await, None, "{name}: free");
            assert_eq!(redisson.write_unlock(2).await, Some(1), "{name}");
        }
    });
}

/// distlock derives Redisson's channel and timeout keys for plain and hash-tagged names alike
/// (the cases above run on both; this pins the strings).
#[test]
fn hash_tagged_names_follow_redisson() {
    for name in ["catalog", "{tenant}:catalog"] {
        assert_eq!(
            lock_redis::keys::rw_channel(name),
            prefix_name("redisson_rwlock", name)
        );
        let field = "7c1a3f52:1";
        assert_eq!(
            lock_redis::keys::rw_timeout_key(name, field, 2),
            format!("{}:rwlock_timeout:2", suffix_name(name, field))
        );
    }
    assert_eq!(
        lock_redis::keys::rw_channel("{tenant}:catalog"),
        "redisson_rwlock:{tenant}:catalog"
    );
    assert_eq!(
        lock_redis::keys::rw_channel("catalog"),
        "redisson_rwlock:{catalog}"
    );
}

/// The messages of a plain SUBSCRIBE on `channel`, subscribed when it returns.
async fn subscriber(
    server: &RedisServer,
    channel: &str,
) -> impl futures_util::Stream<Item = redis::Msg> + Unpin + use<> {
    let mut subscriber = server
        .client()
        .get_async_pubsub()
        .await
        .expect("a pub/sub connection");
    subscriber.subscribe(channel).await.expect("SUBSCRIBE");
    subscriber.into_on_message()
}

async fn next_message(
    messages: &mut (impl futures_util::Stream<Item = redis::Msg> + Unpin),
    name: &str,
) -> String {
    let message = tokio::time::timeout(Duration::from_secs(2), messages.next())
        .await
        .unwrap_or_else(|_| panic!("{name}: nothing heard"))
        .expect("the subscription ended");
    message.get_payload().expect("a text payload")
}

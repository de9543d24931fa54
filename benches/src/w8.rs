//! W8: the read side of the read-write lock. `--w8-tasks` tasks (64) on one client take the read
//! lock of one name and release it at once, in a loop; readers share the lock, so nobody waits
//! for anybody. An op is one read lock + release pair and its latency runs from the lock call to
//! the release's return; `acquire_p50_us` / `acquire_p99_us` are the lock call alone.
//!
//! Rows, each on a name (and connections) of its own:
//!
//! - `distlock-read`: `ReadWriteLock<RedisBackend>::read` with the default settings (watchdog
//!   lease, pub/sub release notifications), then `guard.release()`;
//! - `distlock-exclusive`: the same 64 tasks on `Locker<RedisBackend>::lock` of the plain
//!   (reentrant, `RLock`) lock of one name: what the read lock buys over the exclusive lock,
//!   whose tasks queue for the one hold;
//! - `raw-scripts`: a raw redis-rs client running Redisson's own `RReadWriteLock` read `tryLock`
//!   and read `unlock` scripts (copied from `RedissonReadLock.java`) by `EVALSHA` on a
//!   `MultiplexedConnection`, as `raw-scripts` runs Redisson's semaphore scripts in W7. Each task
//!   is one Redisson "thread" (`<client uuid>:<task>`), as each distlock task is one owner. As
//!   Redisson's unlock does, each release is followed by a `DEL` of the script's unlock latch key,
//!   sent without waiting for it. It waits as Redisson's `lock()` does (see [`RawRwLock`]),
//!   which W8 never needs: no writer.
//!
//! The measured phase of each row is cut into `--slices` slices of `--duration` ÷ slices that
//! take turns between the rows; a slice stops taking new turns at its deadline, every task
//! releases before the slice ends, and the run then checks that nothing of the lock is left on
//! the server (its hash, its read timeout keys, Redisson's unlock latch keys): an error
//! otherwise. `fair_min` / `fair_max` are the fewest and most pairs of one task over the row.
//!
//! Requests per op are counted from the commands a client sends itself (scripts, `PING`...)
//! without `SET` / `GET` / `DEL`, which the read-write scripts call themselves (the probe's
//! general rule would count those as requests too), plus the raw client's own latch `DEL`s,
//! which it counts as it sends them.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lock_core::{Locker, ReadWriteLock, ReleaseOutcome};
use lock_redis::RedisBackend;
use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Script, Value};

use crate::contenders::BenchError;
use crate::measurement::{Measurement, Metric, Ratio, Tally, new_histogram, record};
use crate::probe::{Counters, Probe};

/// The workload's label in rows and ratios.
const WORKLOAD: &str = "W8";

/// Redisson's watchdog lease (`internalLockLeaseTime`, 30 s), the lease its `lock()` asks for.
/// The raw client renews nothing: every hold here lasts milliseconds.
pub const LEASE_MS: u64 = 30_000;

/// The unlock scripts' `timeout` argument: how long the unlock latch key lives if the client's
/// `DEL` never comes; Redisson's default settings make it (3 s + retry delay) × 4 attempts.
const UNLOCK_LATCH_MS: u64 = 20_000;

/// Redisson's read `tryLock` (`RedissonReadLock.tryLockInnerAsync`). `KEYS[1]` the lock hash,
/// `KEYS[2]` the thread's timeout key prefix; `ARGV[1]` the lease in ms, `ARGV[2]` the thread's
/// lock name, `ARGV[3]` its write lock name. Nil when taken, else the lock's pttl.
static READ_TRY_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local mode = redis.call('hget', KEYS[1], 'mode'); \
         if (mode == false) then \
         redis.call('hset', KEYS[1], 'mode', 'read'); \
         redis.call('hset', KEYS[1], ARGV[2], 1); \
         redis.call('set', KEYS[2] .. ':1', 1); \
         redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); \
         redis.call('pexpire', KEYS[1], ARGV[1]); \
         return nil; \
         end; \
         if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then \
         local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); \
         local key = KEYS[2] .. ':' .. ind;\
         redis.call('set', key, 1); \
         redis.call('pexpire', key, ARGV[1]); \
         local remainTime = redis.call('pttl', KEYS[1]); \
         redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); \
         return nil; \
         end;\
         return redis.call('pttl', KEYS[1]);",
    )
});

/// Redisson's read `unlock` (`RedissonReadLock.unlockInnerAsync`). `KEYS[1]` the lock hash,
/// `KEYS[2]` its channel, `KEYS[3]` the thread's timeout key prefix, `KEYS[4]` the key prefix
/// (`{name}`), `KEYS[5]` the unlock latch key; `ARGV[1]` the message (`0`), `ARGV[2]` the
/// thread's lock name, `ARGV[3]` the publish command, `ARGV[4]` the latch key's life in ms. Nil
/// when the thread held no read hold.
static READ_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local val = redis.call('get', KEYS[5]); \
         if val ~= false then \
         return tonumber(val);\
         end; \
         local mode = redis.call('hget', KEYS[1], 'mode'); \
         if (mode == false) then \
         redis.call(ARGV[3], KEYS[2], ARGV[1]); \
         redis.call('set', KEYS[5], 1, 'px', ARGV[4]); \
         return nil; \
         end; \
         local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); \
         if (lockExists == 0) then \
         return nil;\
         end; \
         local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); \
         if (counter == 0) then \
         redis.call('hdel', KEYS[1], ARGV[2]); \
         end;\
         redis.call('del', KEYS[3] .. ':' .. (counter+1)); \
         if (redis.call('hlen', KEYS[1]) > 1) then \
         local maxRemainTime = -3; \
         local keys = redis.call('hkeys', KEYS[1]); \
         for n, key in ipairs(keys) do \
         counter = tonumber(redis.call('hget', KEYS[1], key)); \
         if type(counter) == 'number' then \
         for i=counter, 1, -1 do \
         local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); \
         maxRemainTime = math.max(remainTime, maxRemainTime);\
         end; \
         end; \
         end; \
         if maxRemainTime > 0 then \
         redis.call('pexpire', KEYS[1], maxRemainTime); \
         redis.call('set', KEYS[5], 0, 'px', ARGV[4]); \
         return 0; \
         end;\
         if mode == 'write' then \
         redis.call('set', KEYS[5], 0, 'px', ARGV[4]); \
         return 0;\
         end; \
         end; \
         redis.call('del', KEYS[1]); \
         redis.call(ARGV[3], KEYS[2], ARGV[1]); \
         redis.call('set', KEYS[5], 1, 'px', ARGV[4]); \
         return 1; ",
    )
});

/// Redisson's write `tryLock` (`RedissonWriteLock.tryLockInnerAsync`). `KEYS[1]` the lock hash;
/// `ARGV[1]` the lease in ms, `ARGV[2]` the thread's write lock name. Nil when taken, else the
/// lock's pttl.
static WRITE_TRY_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local mode = redis.call('hget', KEYS[1], 'mode'); \
         if (mode == false) then \
         redis.call('hset', KEYS[1], 'mode', 'write'); \
         redis.call('hset', KEYS[1], ARGV[2], 1); \
         redis.call('pexpire', KEYS[1], ARGV[1]); \
         return nil; \
         end; \
         if (mode == 'write') then \
         if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
         redis.call('hincrby', KEYS[1], ARGV[2], 1); \
         local currentExpire = redis.call('pttl', KEYS[1]); \
         redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); \
         return nil; \
         end; \
         end;\
         return redis.call('pttl', KEYS[1]);",
    )
});

/// Redisson's write `unlock` (`RedissonWriteLock.unlockInnerAsync`). `KEYS[1]` the lock hash,
/// `KEYS[2]` its channel, `KEYS[3]` the unlock latch key; `ARGV[1]` the message (`1`), `ARGV[2]`
/// the lease in ms, `ARGV[3]` the thread's write lock name, `ARGV[4]` the publish command,
/// `ARGV[5]` the latch key's life in ms. Nil when the thread held no write hold.
static WRITE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local val = redis.call('get', KEYS[3]); \
         if val ~= false then \
         return tonumber(val);\
         end; \
         local mode = redis.call('hget', KEYS[1], 'mode'); \
         if (mode == false) then \
         redis.call(ARGV[4], KEYS[2], ARGV[1]); \
         redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
         return nil; \
         end;\
         if (mode == 'write') then \
         local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); \
         if (lockExists == 0) then \
         return nil;\
         else \
         local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
         if (counter > 0) then \
         redis.call('pexpire', KEYS[1], ARGV[2]); \
         redis.call('set', KEYS[3], 0, 'px', ARGV[5]); \
         return 0; \
         else \
         redis.call('hdel', KEYS[1], ARGV[3]); \
         if (redis.call('hlen', KEYS[1]) == 1) then \
         redis.call('del', KEYS[1]); \
         redis.call(ARGV[4], KEYS[2], ARGV[1]); \
         else \
         redis.call('hset', KEYS[1], 'mode', 'read'); \
         end; \
         redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
         return 1; \
         end; \
         end; \
         end; \
         return nil;",
    )
});

/// W8's settings on the command line; the measured time and its slices are `--duration` and
/// `--slices`.
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w8")]
pub struct Args {
    /// Tasks taking and releasing the read lock of one name, on one client per row.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub w8_tasks: u64,
}

/// W8's settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Tasks per row, all on the row's one client.
    pub tasks: usize,
    /// Measured time per row, over all its slices.
    pub duration: Duration,
    /// Slices per row.
    pub slices: u32,
    /// Unmeasured time per row before the slices.
    pub warmup: Duration,
}

/// The latch of Redisson's lock waiters (`RedissonLockEntry`, shared by the client's threads
/// waiting on one lock), opened by the lock's channel as `LockPubSub` does: `0` (the last reader
/// or a plain unlock left) lets one waiter look again, `1` (a writer left) all of them. Unlike
/// Redisson's latch it never keeps more openings than there are registered waiters, so a message
/// nobody waited for does not let a later waiter through without a look.
struct Latch {
    /// Threads registered as waiting (between their first failed attempt and their success).
    waiting: AtomicI64,
    opened: tokio::sync::Semaphore,
}

impl Latch {
    fn new() -> Self {
        Latch {
            waiting: AtomicI64::new(0),
            opened: tokio::sync::Semaphore::new(0),
        }
    }

    /// A message on the lock's channel.
    fn announce(&self, message: &str) {
        let waiting = self.waiting.load(Ordering::Acquire);
        let open = i64::try_from(self.opened.available_permits()).unwrap_or(i64::MAX);
        let wake = match message {
            "0" => 1,
            "1" => waiting,
            _ => 0,
        }
        .min(waiting - open);
        if let Ok(wake) = usize::try_from(wake)
            && wake > 0
        {
            self.opened.add_permits(wake);
        }
    }
}

/// Which side of the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Read,
    Write,
}

/// The `raw-scripts` client: Redisson's `RReadWriteLock` scripts by `EVALSHA` on one lock,
/// waiting on its own subscription. A "thread" is a number the caller picks (a task index).
///
/// Waiting is Redisson's `lock()` / `tryLock(waitTime)`: one attempt; then, registered as a
/// waiter, an attempt and a wait on the latch for at most the lock's pttl (or what is left of
/// the wait) in a loop, until an attempt succeeds. The client subscribes once, at connection,
/// rather than per wait as Redisson does (one `SUBSCRIBE` / `UNSUBSCRIBE` pair fewer per wait).
#[derive(Clone)]
pub struct RawRwLock {
    connection: MultiplexedConnection,
    name: Arc<str>,
    channel: Arc<str>,
    /// `{name}` (Redisson's key prefix of the timeout keys; the bare name when it has braces).
    key_prefix: Arc<str>,
    /// Redisson's client id (`ServiceManager.id`), the first part of every lock name.
    id: Arc<str>,
    latch: Arc<Latch>,
    /// Unlock latch `DEL`s sent, and answered.
    dels_sent: Arc<AtomicU64>,
    dels_done: Arc<AtomicU64>,
    /// The subscribed connection, kept open as long as the client lives.
    _listener: MultiplexedConnection,
}

impl RawRwLock {
    /// A client of the lock `name` at `url`: one connection for the scripts, one RESP3
    /// connection subscribed to the lock's channel.
    pub async fn connect(url: &str, name: &str) -> Result<Self, BenchError> {
        let connection = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        // Redisson's channel name (`prefixName("redisson_rwlock", name)`), the one distlock uses.
        let channel: Arc<str> = lock_redis::keys::rw_channel(name).into();
        let latch = Arc::new(Latch::new());
        let heard = latch.clone();
        let on_push = move |push: PushInfo| {
            if push.kind == PushKind::Message
                && let Some(Value::BulkString(message)) = push.data.get(1)
                && let Ok(message) = std::str::from_utf8(message)
            {
                heard.announce(message);
            }
            Ok::<(), redis::aio::SendError>(())
        };
        let separator = if url.contains('?') { '&' } else { '?' };
        let config = redis::AsyncConnectionConfig::new().set_push_sender(on_push);
        let mut listener = redis::Client::open(format!("{url}{separator}protocol=resp3"))?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        listener.subscribe(&*channel).await?;
        let key_prefix = if name.contains('{') {
            name.to_owned()
        } else {
            format!("{{{name}}}")
        };
        Ok(RawRwLock {
            connection,
            name: name.into(),
            channel,
            key_prefix: key_prefix.into(),
            id: uuid::Uuid::new_v4().to_string().into(),
            latch,
            dels_sent: Arc::new(AtomicU64::new(0)),
            dels_done: Arc::new(AtomicU64::new(0)),
            _listener: listener,
        })
    }

    /// Redisson's `getLockName(threadId)`: `<client id>:<thread>`.
    fn lock_name(&self, thread: u64) -> String {
        format!("{}:{thread}", self.id)
    }

    /// The thread's read timeout key prefix (`suffixName(name, lockName) + ":rwlock_timeout"`).
    fn timeout_prefix(&self, thread: u64) -> String {
        format!(
            "{}:{}:rwlock_timeout",
            self.key_prefix,
            self.lock_name(thread)
        )
    }

    /// `prefixName("redisson_unlock_latch", name)`: the unlock latch keys' prefix.
    fn latch_prefix(&self) -> String {
        if self.name.contains('{') {
            format!("redisson_unlock_latch:{}", self.name)
        } else {
            format!("redisson_unlock_latch:{{{}}}", self.name)
        }
    }

    /// A fresh unlock latch key (`prefixName("redisson_unlock_latch", name) + ":" + requestId`).
    fn unlock_latch(&self) -> String {
        format!("{}:{}", self.latch_prefix(), uuid::Uuid::new_v4().simple())
    }

    /// One attempt at `side`: `None` when taken, else the lock's pttl.
    async fn try_lock(&self, side: Side, thread: u64) -> Result<Option<i64>, BenchError> {
        let mut connection = self.connection.clone();
        let name = self.lock_name(thread);
        let ttl: Option<i64> = match side {
            Side::Read => {
                READ_TRY_LOCK
                    .key(&*self.name)
                    .key(self.timeout_prefix(thread))
                    .arg(LEASE_MS)
                    .arg(&name)
                    .arg(format!("{name}:write"))
                    .invoke_async(&mut connection)
                    .await?
            }
            Side::Write => {
                WRITE_TRY_LOCK
                    .key(&*self.name)
                    .arg(LEASE_MS)
                    .arg(format!("{name}:write"))
                    .invoke_async(&mut connection)
                    .await?
            }
        };
        Ok(ttl)
    }

    /// Takes `side` for `thread`, waiting at most `wait` (forever when `None`). Returns whether it
    /// was taken.
    pub async fn lock(
        &self,
        side: Side,
        thread: u64,
        wait: Option<Duration>,
    ) -> Result<bool, BenchError> {
        let started = Instant::now();
        if self.try_lock(side, thread).await?.is_none() {
            return Ok(true);
        }
        self.latch.waiting.fetch_add(1, Ordering::AcqRel);
        let taken = async {
            loop {
                let Some(ttl) = self.try_lock(side, thread).await? else {
                    return Ok::<bool, BenchError>(true);
                };
                let mut limit = Duration::from_millis(u64::try_from(ttl).unwrap_or(LEASE_MS));
                if let Some(wait) = wait {
                    let left = wait.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    limit = limit.min(left);
                }
                if let Ok(opened) = tokio::time::timeout(limit, self.latch.opened.acquire()).await {
                    opened?.forget();
                }
            }
        }
        .await;
        self.latch.waiting.fetch_sub(1, Ordering::AcqRel);
        taken
    }

    /// Releases `side` for `thread`: the unlock script, then (not waited for) the `DEL` of its
    /// latch key, as Redisson's `unlockInnerAsync` sends it.
    pub async fn unlock(&self, side: Side, thread: u64) -> Result<(), BenchError> {
        let mut connection = self.connection.clone();
        let name = self.lock_name(thread);
        let latch = self.unlock_latch();
        let answer: Option<i64> = match side {
            Side::Read => {
                READ_UNLOCK
                    .key(&*self.name)
                    .key(&*self.channel)
                    .key(self.timeout_prefix(thread))
                    .key(&*self.key_prefix)
                    .key(&latch)
                    .arg(0)
                    .arg(&name)
                    .arg("publish")
                    .arg(UNLOCK_LATCH_MS)
                    .invoke_async(&mut connection)
                    .await?
            }
            Side::Write => {
                WRITE_UNLOCK
                    .key(&*self.name)
                    .key(&*self.channel)
                    .key(&latch)
                    .arg(1)
                    .arg(LEASE_MS)
                    .arg(format!("{name}:write"))
                    .arg("publish")
                    .arg(UNLOCK_LATCH_MS)
                    .invoke_async(&mut connection)
                    .await?
            }
        };
        self.dels_sent.fetch_add(1, Ordering::AcqRel);
        let done = self.dels_done.clone();
        tokio::spawn(async move {
            let _: Result<i64, _> = redis::cmd("DEL")
                .arg(&latch)
                .query_async(&mut connection)
                .await;
            done.fetch_add(1, Ordering::AcqRel);
        });
        match answer {
            Some(_) => Ok(()),
            None => Err(format!(
                "raw-scripts: {side:?} unlock of {} by a thread that did not hold it",
                self.name
            )
            .into()),
        }
    }

    /// Latch `DEL`s sent so far.
    pub fn dels_sent(&self) -> u64 {
        self.dels_sent.load(Ordering::Acquire)
    }

    /// Waits until every latch `DEL` sent was answered.
    pub async fn settle(&self) {
        while self.dels_done.load(Ordering::Acquire) < self.dels_sent.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// The keys a read-write lock `name` may leave: its hash, the read timeout keys, and (the raw
/// client's) unlock latch keys. Errors when any is left. Call [`RawRwLock::settle`] first: the
/// latch `DEL`s are not waited for.
pub async fn check_left(
    probe: &Probe,
    workload: &str,
    row: &str,
    name: &str,
    raw: Option<&RawRwLock>,
) -> Result<(), BenchError> {
    let timeouts = if name.contains('{') {
        format!("{name}:*")
    } else {
        format!("{{{name}}}:*")
    };
    let mut patterns = vec![name.to_owned(), timeouts];
    if let Some(raw) = raw {
        patterns.push(format!("{}:*", raw.latch_prefix()));
    }
    for pattern in patterns {
        let left = probe.count_keys(&pattern).await?;
        if left > 0 {
            return Err(
                format!("{workload} {row}: {left} key(s) {pattern} left after a run").into(),
            );
        }
    }
    Ok(())
}

/// Requests per op for the read-write rows: the commands clients send themselves but `SET`,
/// `GET` and `DEL` (the read-write scripts call those themselves, and `INFO commandstats` counts
/// them alike), plus `client_dels` (the raw client's latch `DEL`s, which it counted).
pub fn requests(counters: &Counters, ops: u64, client_dels: u64) -> f64 {
    let sent = counters.calls(&[
        "evalsha",
        "eval",
        "evalsha_ro",
        "eval_ro",
        "fcall",
        "script",
        "ping",
        "hello",
        "client",
        "select",
        "subscribe",
        "unsubscribe",
        "ssubscribe",
        "multi",
        "exec",
        "wait",
        "waitaof",
    ]);
    (sent + client_dels) as f64 / ops.max(1) as f64
}

/// One row's client.
#[derive(Clone)]
enum Client {
    /// The read-write lock of the row's name.
    Read(ReadWriteLock<RedisBackend>),
    Exclusive(Locker<RedisBackend>),
    Raw(RawRwLock),
}

impl Client {
    /// The raw client, for the `raw-scripts` row.
    fn raw(&self) -> Option<&RawRwLock> {
        match self {
            Client::Raw(raw) => Some(raw),
            Client::Read(_) | Client::Exclusive(_) => None,
        }
    }

    /// One lock + release pair by task `thread`; returns the time the lock call took.
    async fn pair(&self, name: &str, thread: u64) -> Result<Duration, BenchError> {
        let sent = Instant::now();
        match self {
            Client::Read(lock) => {
                let guard = lock.read().await?;
                let took = sent.elapsed();
                released(guard.release().await?)?;
                Ok(took)
            }
            Client::Exclusive(locker) => {
                let guard = locker.lock(name).await?;
                let took = sent.elapsed();
                released(guard.release().await?)?;
                Ok(took)
            }
            Client::Raw(client) => {
                client.lock(Side::Read, thread, None).await?;
                let took = sent.elapsed();
                client.unlock(Side::Read, thread).await?;
                Ok(took)
            }
        }
    }
}

/// A distlock release that gave the owner's (only) hold back.
pub fn released(outcome: ReleaseOutcome) -> Result<(), BenchError> {
    match outcome {
        ReleaseOutcome::Released => Ok(()),
        other => Err(format!("release answered {other:?}").into()),
    }
}

/// One W8 row: its name, client and lock name.
struct Row {
    name: &'static str,
    client: Client,
    key: String,
}

/// One task's figures over one slice.
struct TaskTally {
    pairs: u64,
    pair: Histogram<u64>,
    acquire: Histogram<u64>,
}

/// One row's figures over all its slices.
struct RowTally {
    tally: Tally,
    acquire: Histogram<u64>,
    per_task: Vec<u64>,
    client_dels: u64,
}

/// Connects the rows to `url`, each on a lock name of its own under `prefix` and its own
/// connections.
async fn connect(url: &str, prefix: &str) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::with_capacity(3);
    for name in ["distlock-read", "distlock-exclusive", "raw-scripts"] {
        let key = format!("{prefix}:w8:{name}");
        let client = match name {
            "distlock-read" => {
                Client::Read(Locker::new(RedisBackend::connect(url).await?).read_write(&key)?)
            }
            "distlock-exclusive" => {
                Client::Exclusive(Locker::new(RedisBackend::connect(url).await?))
            }
            _ => Client::Raw(RawRwLock::connect(url, &key).await?),
        };
        rows.push(Row { name, client, key });
    }
    Ok(rows)
}

/// Runs W8 against `url`: a warm-up per row, then every row's slices, interleaved; one
/// measurement per row.
pub async fn run(
    url: &str,
    probe: &Probe,
    prefix: &str,
    config: Config,
) -> Result<Vec<Measurement>, BenchError> {
    let rows = connect(url, prefix).await?;
    let slices = config.slices.max(1);
    let each = config.duration / slices;
    for row in &rows {
        slice(row, config.tasks, config.warmup).await?;
        check_left(probe, WORKLOAD, row.name, &row.key, row.client.raw()).await?;
    }
    let mut tallies: Vec<RowTally> = rows
        .iter()
        .map(|_| RowTally {
            tally: Tally::new(),
            acquire: new_histogram(),
            per_task: vec![0; config.tasks],
            client_dels: 0,
        })
        .collect();
    for turn in 0..slices as usize {
        for offset in 0..rows.len() {
            let index = (turn + offset) % rows.len();
            let row = &rows[index];
            let row_tally = &mut tallies[index];
            let dels_before = raw_dels(&row.client);
            let before = probe.snapshot().await?;
            let (tasks, elapsed) = slice(row, config.tasks, each).await?;
            row_tally
                .tally
                .counters
                .add(&probe.snapshot().await?.since(&before));
            // After the counters: the check's `SCAN`s are no part of the row.
            check_left(probe, WORKLOAD, row.name, &row.key, row.client.raw()).await?;
            row_tally.client_dels += raw_dels(&row.client) - dels_before;
            row_tally.tally.elapsed += elapsed;
            for (task, tally) in tasks.iter().enumerate() {
                row_tally.per_task[task] += tally.pairs;
                row_tally.tally.ops += tally.pairs;
                row_tally.tally.latency.add(&tally.pair)?;
                row_tally.acquire.add(&tally.acquire)?;
            }
        }
    }
    let mut out = Vec::with_capacity(rows.len());
    for tallied in tallies {
        let fair_min = tallied.per_task.iter().copied().min().unwrap_or(0);
        let fair_max = tallied.per_task.iter().copied().max().unwrap_or(0);
        let requests = requests(
            &tallied.tally.counters,
            tallied.tally.ops,
            tallied.client_dels,
        );
        let row = &rows[out.len()];
        let mut measurement = tallied.tally.into_row(WORKLOAD, row.name, config.tasks, 1);
        measurement.cost.requests = requests;
        measurement.extra = vec![
            (
                "acquire_p50_us",
                tallied.acquire.value_at_quantile(0.5) as f64 / 1e3,
            ),
            (
                "acquire_p99_us",
                tallied.acquire.value_at_quantile(0.99) as f64 / 1e3,
            ),
            ("fair_min", fair_min as f64),
            ("fair_max", fair_max as f64),
        ];
        out.push(measurement);
    }
    Ok(out)
}

/// The raw client's latch `DEL`s so far (0 for the distlock rows).
fn raw_dels(client: &Client) -> u64 {
    client.raw().map_or(0, RawRwLock::dels_sent)
}

/// One slice of one row: `tasks` tasks take and release the lock in a loop until `length` has
/// passed. Returns each task's figures and the slice's
/// wall time (until the last task released).
async fn slice(
    row: &Row,
    tasks: usize,
    length: Duration,
) -> Result<(Vec<TaskTally>, Duration), BenchError> {
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let client = row.client.clone();
            let key = row.key.clone();
            let thread = task as u64;
            tokio::spawn(async move {
                let mut tally = TaskTally {
                    pairs: 0,
                    pair: new_histogram(),
                    acquire: new_histogram(),
                };
                while started.elapsed() < length {
                    let sent = Instant::now();
                    let took = client.pair(&key, thread).await?;
                    record(&mut tally.acquire, took);
                    record(&mut tally.pair, sent.elapsed());
                    tally.pairs += 1;
                }
                Ok::<_, BenchError>(tally)
            })
        })
        .collect();
    let mut tallies = Vec::with_capacity(handles.len());
    for handle in handles {
        tallies.push(handle.await??);
    }
    let elapsed = started.elapsed();
    // The latch `DEL`s still in flight belong to this slice's counters.
    if let Some(raw) = row.client.raw() {
        raw.settle().await;
    }
    Ok((tallies, elapsed))
}

/// The W8 ratios: `distlock-read` ÷ `raw-scripts` (distlock against Redisson's scripts) and
/// `distlock-read` ÷ `distlock-exclusive` (the read lock against the exclusive lock); ops/s
/// (higher = the numerator faster) and p50 (lower = the numerator faster).
pub fn ratios(rows: &[&Measurement]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for (numerator, denominator) in [
        ("distlock-read", "raw-scripts"),
        ("distlock-read", "distlock-exclusive"),
    ] {
        for metric in [Metric::Throughput, Metric::P50] {
            out.extend(Ratio::between(
                rows,
                WORKLOAD,
                metric,
                numerator,
                denominator,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_leaving_opens_the_latch_for_one_waiter_and_a_writer_for_all() {
        let latch = Latch::new();
        latch.waiting.store(3, Ordering::Release);
        latch.announce("0");
        assert_eq!(latch.opened.available_permits(), 1);
        latch.announce("1");
        assert_eq!(latch.opened.available_permits(), 3);
        // Never more openings than registered waiters, and nothing for other messages.
        latch.announce("1");
        latch.announce("0");
        latch.announce("7");
        assert_eq!(latch.opened.available_permits(), 3);
        latch.waiting.store(0, Ordering::Release);
        let fresh = Latch::new();
        fresh.announce("0");
        fresh.announce("1");
        assert_eq!(fresh.opened.available_permits(), 0);
    }

    fn row(contender: &'static str, ops: u64, p50: Duration) -> Measurement {
        let mut tally = Tally::new();
        tally.ops = ops;
        tally.elapsed = Duration::from_secs(1);
        record(&mut tally.latency, p50);
        tally.into_row(WORKLOAD, contender, 64, 1)
    }

    #[test]
    fn ratios_divide_the_read_row_by_the_raw_and_the_exclusive_rows() {
        let rows = [
            row("distlock-read", 900, Duration::from_micros(300)),
            row("distlock-exclusive", 600, Duration::from_micros(100)),
            row("raw-scripts", 1_000, Duration::from_micros(200)),
        ];
        let refs: Vec<&Measurement> = rows.iter().collect();
        let found: Vec<(&str, &str, Metric, f64)> = ratios(&refs)
            .into_iter()
            .map(|ratio| {
                (
                    ratio.numerator,
                    ratio.denominator,
                    ratio.metric,
                    ratio.value,
                )
            })
            .collect();
        let expected = [
            ("distlock-read", "raw-scripts", Metric::Throughput, 0.9),
            ("distlock-read", "raw-scripts", Metric::P50, 1.5),
            (
                "distlock-read",
                "distlock-exclusive",
                Metric::Throughput,
                1.5,
            ),
            ("distlock-read", "distlock-exclusive", Metric::P50, 3.0),
        ];
        assert_eq!(found.len(), expected.len(), "{found:?}");
        for ((n, d, m, v), (en, ed, em, ev)) in found.into_iter().zip(expected) {
            assert_eq!((n, d, m), (en, ed, em));
            assert!((v - ev).abs() < 0.01, "{n} {d} {m:?}: {v} != {ev}");
        }
    }

    #[test]
    fn requests_leave_out_the_scripts_own_key_commands_and_add_the_clients_dels() {
        let mut counters = Counters::default();
        counters.record_calls(&[
            ("evalsha", 200),
            ("ping", 10),
            ("set", 100),
            ("get", 100),
            ("del", 300),
            ("hget", 4_000),
        ]);
        assert!((requests(&counters, 100, 0) - 2.1).abs() < 1e-9);
        assert!((requests(&counters, 100, 100) - 3.1).abs() < 1e-9);
        assert!((requests(&counters, 0, 0) - 210.0).abs() < 1e-9);
    }
}

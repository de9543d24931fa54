//! W9: fair-lock handoffs. `--w9-tasks` tasks (16), each a separate owner on the row's one
//! client, take one lock, hold it `--w9-hold-ms` (1), release it and queue again at once, in a
//! loop: the lock passes from one waiter to the next while the others wait. An op is one turn;
//! its latency is the wait, from the lock call to the grant.
//!
//! `out_of_order` counts the grants to a task while another task that came before it was still
//! waiting. A task comes when its first attempt of a turn runs on the server (for the fair lock:
//! when it enters the queue): the first attempts of every row pass one at a time through a gate
//! that numbers them, so the numbering is the server's order, not the order in which the tasks
//! happened to be polled. A grant while a lower number waits is out of order.
//!
//! Rows, each on a lock (and connections) of its own:
//!
//! - `distlock-fair`: `Locker<RedisFairSide>` (`FairBackend::fair_side`) with the default
//!   settings, `lock` then `release`. Its `out_of_order` must be 0, and the run fails otherwise;
//! - `distlock-lock`: the same on the plain reentrant lock (`Locker<RedisBackend>`), which grants
//!   to whoever tries first after a release, the releasing task included: its `out_of_order` is
//!   expected to be high;
//! - `raw-fair-scripts`: a raw redis-rs client running Redisson's own `RFairLock` scripts
//!   (`tryLockInnerAsync` with `EVAL_LONG` and `unlockInnerAsync`, copied from
//!   `RedissonFairLock.java`) by `EVALSHA`, each task a Java thread (`<uuid>:<task>`), waiting
//!   the way Redisson's `lock()` does: an attempt; then attempts and waits for the task's latch at
//!   most the returned ttl; a message on the task's own channel
//!   `redisson_lock__channel:{name}:<uuid>:<task>` (heard on a RESP3 connection subscribed to
//!   every task's channel once, where Redisson subscribes per `lock()` call) opens it. After each
//!   unlock the unlock latch key is deleted without waiting, as Redisson does.
//!
//! Each row's measured phase is cut into `--slices` slices of `--duration` ÷ slices that take
//! turns between the rows; a slice stops taking new turns at its deadline, every queued task
//! gets its last turn, and the run then checks that the lock and its queue are gone.
//! `fair_min` / `fair_max` are the fewest and most turns of one task over the row.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lock_core::{FairBackend, Locker, ReleaseOutcome};
use lock_redis::{RedisBackend, RedisFairSide};
use lock_testkit::arrivals::{Arrivals, BookedBackend};
use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Script, Value};

use crate::contenders::BenchError;
use crate::measurement::{Measurement, Metric, Ratio, Tally, new_histogram, record};
use crate::probe::Probe;

/// The workload's label in rows and ratios.
const WORKLOAD: &str = "W9";

/// Redisson's lease when none is given (`lockWatchdogTimeout`, 30 s); no renewal is needed for
/// holds this short.
const REDISSON_LEASE_MS: i64 = 30_000;

/// Redisson's `fairLockWaitTimeout` default: the `wait` of its scripts.
const REDISSON_WAIT_MS: i64 = 300_000;

/// Redisson's `RFairLock` attempt that queues (`RedissonFairLock.tryLockInnerAsync` with
/// `EVAL_LONG`). `KEYS` = [name, queue, timeouts], `ARGV` = [lease, lock name, wait,
/// currentTime]; nil when acquired, else the ms to wait.
static TRY_LOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "while true do \
         local firstThreadId2 = redis.call('lindex', KEYS[2], 0);\
         if firstThreadId2 == false then \
         break;\
         end;\
         local timeout = redis.call('zscore', KEYS[3], firstThreadId2);\
         if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then \
         redis.call('zrem', KEYS[3], firstThreadId2);\
         redis.call('lpop', KEYS[2]);\
         else \
         break;\
         end;\
         end;\
         if (redis.call('exists', KEYS[1]) == 0) \
         and ((redis.call('exists', KEYS[2]) == 0) \
         or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then \
         redis.call('lpop', KEYS[2]);\
         redis.call('zrem', KEYS[3], ARGV[2]);\
         local keys = redis.call('zrange', KEYS[3], 0, -1);\
         for i = 1, #keys, 1 do \
         redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);\
         end;\
         redis.call('hset', KEYS[1], ARGV[2], 1);\
         redis.call('pexpire', KEYS[1], ARGV[1]);\
         return nil;\
         end;\
         if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
         redis.call('hincrby', KEYS[1], ARGV[2],1);\
         redis.call('pexpire', KEYS[1], ARGV[1]);\
         return nil;\
         end;\
         local timeout = redis.call('zscore', KEYS[3], ARGV[2]);\
         if timeout ~= false then \
         local ttl = redis.call('pttl', KEYS[1]);\
         return math.max(0, ttl); \
         end;\
         local lastThreadId = redis.call('lindex', KEYS[2], -1);\
         local ttl;\
         if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then \
         ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);\
         else \
         ttl = redis.call('pttl', KEYS[1]);\
         end;\
         local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);\
         if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then \
         redis.call('rpush', KEYS[2], ARGV[2]);\
         end;\
         return ttl;",
    )
});

/// Redisson's `RFairLock` unlock (`RedissonFairLock.unlockInnerAsync`). `KEYS` = [name, queue,
/// timeouts, channel, unlock latch], `ARGV` = [0, lease, lock name, currentTime, publish
/// command, latch expiry]; 1 when freed.
static UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local val = redis.call('get', KEYS[5]); \
         if val ~= false then \
         return tonumber(val);\
         end; \
         while true do \
         local firstThreadId2 = redis.call('lindex', KEYS[2], 0);\
         if firstThreadId2 == false then \
         break;\
         end; \
         local timeout = redis.call('zscore', KEYS[3], firstThreadId2);\
         if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then \
         redis.call('zrem', KEYS[3], firstThreadId2); \
         redis.call('lpop', KEYS[2]); \
         else \
         break;\
         end; \
         end;\
         if (redis.call('exists', KEYS[1]) == 0) then \
         local nextThreadId = redis.call('lindex', KEYS[2], 0); \
         if nextThreadId ~= false then \
         redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); \
         end; \
         redis.call('set', KEYS[5], 1, 'px', ARGV[6]); \
         return 1; \
         end;\
         if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
         return nil;\
         end; \
         local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
         if (counter > 0) then \
         redis.call('pexpire', KEYS[1], ARGV[2]); \
         redis.call('set', KEYS[5], 0, 'px', ARGV[6]); \
         return 0; \
         end; \
         redis.call('del', KEYS[1]); \
         redis.call('set', KEYS[5], 1, 'px', ARGV[6]); \
         local nextThreadId = redis.call('lindex', KEYS[2], 0); \
         if nextThreadId ~= false then \
         redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); \
         end; \
         return 1; ",
    )
});

/// W9's settings on the command line; the measured time and its slices are `--duration` and
/// `--slices`.
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w9")]
pub struct Args {
    /// Tasks (separate owners) taking turns on one lock, on one client per row.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    pub w9_tasks: u64,
    /// How long each turn holds the lock, in ms.
    #[arg(long, default_value_t = 1)]
    pub w9_hold_ms: u64,
}

/// W9's settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Tasks per row (separate owners), all on the row's one client.
    pub tasks: usize,
    /// How long each task holds the lock per turn.
    pub hold: Duration,
    /// Measured time per row, over all its slices.
    pub duration: Duration,
    /// Slices per row.
    pub slices: u32,
    /// Unmeasured time per row before the slices.
    pub warmup: Duration,
}

/// The `raw-fair-scripts` client: Redisson's scripts by `EVALSHA`, each task's latch opened by
/// a message on its own channel.
struct RawFair {
    connection: MultiplexedConnection,
    name: String,
    keys: [String; 3],
    channel: String,
    id: String,
    /// Each task's latch (`RedissonLockEntry`'s), by task.
    latches: Vec<Arc<tokio::sync::Semaphore>>,
    /// The subscribed connection, kept open as long as the client lives.
    _listener: MultiplexedConnection,
}

impl RawFair {
    /// A client of the fair lock `name` at `url` for `tasks` tasks: one connection for the
    /// scripts, one RESP3 connection subscribed to every task's channel.
    async fn connect(url: &str, name: &str, tasks: usize) -> Result<Self, BenchError> {
        let connection = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        let id = lock_core::new_client_id();
        // Redisson's names (`prefixName`), the ones distlock uses.
        let channel = lock_redis::keys::channel(name);
        let latches: Vec<_> = (0..tasks)
            .map(|_| Arc::new(tokio::sync::Semaphore::new(0)))
            .collect();
        let by_channel: HashMap<Vec<u8>, Arc<tokio::sync::Semaphore>> = latches
            .iter()
            .enumerate()
            .map(|(task, latch)| (format!("{channel}:{id}:{task}").into_bytes(), latch.clone()))
            .collect();
        let on_push = move |push: PushInfo| {
            if push.kind == PushKind::Message
                && let Some(Value::BulkString(channel)) = push.data.first()
                && let Some(latch) = by_channel.get(channel)
            {
                latch.add_permits(1);
            }
            Ok::<(), redis::aio::SendError>(())
        };
        let separator = if url.contains('?') { '&' } else { '?' };
        let config = redis::AsyncConnectionConfig::new().set_push_sender(on_push);
        let mut listener = redis::Client::open(format!("{url}{separator}protocol=resp3"))?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        for task in 0..tasks {
            listener.subscribe(format!("{channel}:{id}:{task}")).await?;
        }
        Ok(RawFair {
            connection,
            name: name.to_owned(),
            keys: [
                name.to_owned(),
                lock_redis::keys::fair_queue(name),
                lock_redis::keys::fair_timeouts(name),
            ],
            channel,
            id,
            latches,
            _listener: listener,
        })
    }

    fn lock_name(&self, task: usize) -> String {
        format!("{}:{task}", self.id)
    }

    /// One `tryLockInnerAsync` (`EVAL_LONG`): `None` when acquired, else the ms to wait.
    async fn try_lock(&self, task: usize) -> Result<Option<i64>, BenchError> {
        let mut connection = self.connection.clone();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis();
        Ok(TRY_LOCK
            .key(&self.keys[0])
            .key(&self.keys[1])
            .key(&self.keys[2])
            .arg(REDISSON_LEASE_MS)
            .arg(self.lock_name(task))
            .arg(REDISSON_WAIT_MS)
            .arg(u64::try_from(now)?)
            .invoke_async(&mut connection)
            .await?)
    }

    /// `lock()` as Redisson's: an attempt; then attempts and waits for the latch at most the
    /// returned ttl, until an attempt succeeds.
    async fn lock(&self, task: usize, arrivals: &Arrivals) -> Result<(), BenchError> {
        let owner = self.lock_name(task);
        let mut ttl = None;
        let granted = arrivals
            .attempt(&owner, async {
                ttl = self.try_lock(task).await?;
                Ok::<_, BenchError>(ttl.is_none())
            })
            .await?;
        if granted {
            return Ok(());
        }
        loop {
            let mut left = None;
            let granted = arrivals
                .attempt(&owner, async {
                    left = self.try_lock(task).await?;
                    Ok::<_, BenchError>(left.is_none())
                })
                .await?;
            if granted {
                return Ok(());
            }
            let wait = Duration::from_millis(u64::try_from(left.unwrap_or(0)).unwrap_or(0));
            if let Ok(opened) = tokio::time::timeout(wait, self.latches[task].acquire()).await {
                opened?.forget();
            }
        }
    }

    /// `unlock()`: the script under a fresh request id, then the latch key deleted without
    /// waiting for it.
    async fn unlock(&self, task: usize) -> Result<(), BenchError> {
        let mut connection = self.connection.clone();
        let latch = format!(
            "{}:{}",
            lock_redis::keys::channel(&self.name).replacen(
                "redisson_lock__channel",
                "redisson_unlock_latch",
                1
            ),
            lock_core::new_client_id().replace('-', "")
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis();
        let freed: Option<i64> = UNLOCK
            .key(&self.keys[0])
            .key(&self.keys[1])
            .key(&self.keys[2])
            .key(&self.channel)
            .key(&latch)
            .arg(0)
            .arg(REDISSON_LEASE_MS)
            .arg(self.lock_name(task))
            .arg(u64::try_from(now)?)
            .arg("publish")
            .arg(30_000)
            .invoke_async(&mut connection)
            .await?;
        if freed.is_none() {
            return Err(format!("W9 raw-fair-scripts: task {task} did not hold the lock").into());
        }
        tokio::spawn(async move {
            let _: redis::RedisResult<i64> = redis::cmd("DEL")
                .arg(latch)
                .query_async(&mut connection)
                .await;
        });
        Ok(())
    }
}

/// One row's client.
enum Client {
    Fair(Locker<BookedBackend<RedisFairSide>>),
    Lock(Locker<BookedBackend<RedisBackend>>),
    Raw(Box<RawFair>),
}

/// What a row's tasks share: its name, client, lock and arrival book.
struct Shared {
    name: &'static str,
    client: Client,
    key: String,
    arrivals: Arc<Arrivals>,
}

impl Shared {
    /// One turn of `task`: the lock, held `hold`, released. Returns the wait for the grant.
    async fn turn(&self, task: usize, hold: Duration) -> Result<Duration, BenchError> {
        let sent = Instant::now();
        match &self.client {
            Client::Fair(locker) => {
                let guard = locker.lock(&self.key).await?;
                let waited = sent.elapsed();
                tokio::time::sleep(hold).await;
                released(self.name, guard.release().await?)?;
                Ok(waited)
            }
            Client::Lock(locker) => {
                let guard = locker.lock(&self.key).await?;
                let waited = sent.elapsed();
                tokio::time::sleep(hold).await;
                released(self.name, guard.release().await?)?;
                Ok(waited)
            }
            Client::Raw(client) => {
                client.lock(task, &self.arrivals).await?;
                let waited = sent.elapsed();
                tokio::time::sleep(hold).await;
                client.unlock(task).await?;
                Ok(waited)
            }
        }
    }
}

/// One W9 row: what its tasks share, and a plain connection for the checks.
struct Row {
    shared: Arc<Shared>,
    check: MultiplexedConnection,
}

fn released(row: &str, outcome: ReleaseOutcome) -> Result<(), BenchError> {
    if outcome.was_held() {
        Ok(())
    } else {
        Err(format!("W9 {row}: a turn's lock was no longer held at its release").into())
    }
}

/// One task's figures over one slice.
struct TaskTally {
    turns: u64,
    wait: Histogram<u64>,
}

/// One row's figures over all its slices.
struct RowTally {
    tally: Tally,
    per_task: Vec<u64>,
}

/// Connects the rows to `url`, each on a lock of its own under `prefix`, with its own
/// connections.
async fn connect(url: &str, prefix: &str, config: &Config) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::with_capacity(3);
    for name in ["distlock-fair", "distlock-lock", "raw-fair-scripts"] {
        let key = format!("{prefix}:w9:{name}");
        let arrivals = Arc::new(Arrivals::default());
        let client = match name {
            "distlock-fair" => Client::Fair(Locker::new(BookedBackend::new(
                RedisBackend::connect(url).await?.fair_side(),
                arrivals.clone(),
            ))),
            "distlock-lock" => Client::Lock(Locker::new(BookedBackend::new(
                RedisBackend::connect(url).await?,
                arrivals.clone(),
            ))),
            _ => Client::Raw(Box::new(RawFair::connect(url, &key, config.tasks).await?)),
        };
        let check = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        rows.push(Row {
            shared: Arc::new(Shared {
                name,
                client,
                key,
                arrivals,
            }),
            check,
        });
    }
    Ok(rows)
}

/// Runs W9 against `url`: a warm-up per row, then every row's slices, interleaved; one
/// measurement per row. Fails when the fair lock granted out of order.
pub async fn run(
    url: &str,
    probe: &Probe,
    prefix: &str,
    config: Config,
) -> Result<Vec<Measurement>, BenchError> {
    let rows = connect(url, prefix, &config).await?;
    let slices = config.slices.max(1);
    let each = config.duration / slices;
    for row in &rows {
        slice(row, &config, config.warmup).await?;
    }
    // The warm-up's grants are not counted.
    let warm: Vec<u64> = rows
        .iter()
        .map(|row| row.shared.arrivals.tally().out_of_order)
        .collect();
    let mut tallies: Vec<RowTally> = rows
        .iter()
        .map(|_| RowTally {
            tally: Tally::new(),
            per_task: vec![0; config.tasks],
        })
        .collect();
    for turn in 0..slices as usize {
        for offset in 0..rows.len() {
            let index = (turn + offset) % rows.len();
            let row = &rows[index];
            let row_tally = &mut tallies[index];
            let before = probe.snapshot().await?;
            let (tasks, elapsed) = slice(row, &config, each).await?;
            row_tally
                .tally
                .counters
                .add(&probe.snapshot().await?.since(&before));
            row_tally.tally.elapsed += elapsed;
            for (task, tally) in tasks.iter().enumerate() {
                row_tally.per_task[task] += tally.turns;
                row_tally.tally.ops += tally.turns;
                row_tally.tally.latency.add(&tally.wait)?;
            }
        }
    }
    let mut out = Vec::with_capacity(rows.len());
    for ((row, tallied), warm) in rows.iter().zip(tallies).zip(warm) {
        let out_of_order = row.shared.arrivals.tally().out_of_order - warm;
        if row.shared.name == "distlock-fair" && out_of_order > 0 {
            return Err(
                format!("W9 distlock-fair: {out_of_order} grants out of arrival order").into(),
            );
        }
        let fair_min = tallied.per_task.iter().copied().min().unwrap_or(0);
        let fair_max = tallied.per_task.iter().copied().max().unwrap_or(0);
        let mut measurement = tallied
            .tally
            .into_row(WORKLOAD, row.shared.name, config.tasks, 1);
        measurement.extra = vec![
            ("hold_ms", config.hold.as_secs_f64() * 1e3),
            ("out_of_order", out_of_order as f64),
            ("fair_min", fair_min as f64),
            ("fair_max", fair_max as f64),
        ];
        out.push(measurement);
    }
    Ok(out)
}

/// One slice of one row: the tasks take turns until `length` has passed, then the lock and its
/// queue must be gone. Returns each task's figures and the slice's wall time (until the last
/// task released).
async fn slice(
    row: &Row,
    config: &Config,
    length: Duration,
) -> Result<(Vec<TaskTally>, Duration), BenchError> {
    let started = Instant::now();
    let mut handles = Vec::with_capacity(config.tasks);
    for task in 0..config.tasks {
        let shared = row.shared.clone();
        let hold = config.hold;
        handles.push(tokio::spawn(async move {
            let mut tally = TaskTally {
                turns: 0,
                wait: new_histogram(),
            };
            while started.elapsed() < length {
                let waited = shared.turn(task, hold).await?;
                record(&mut tally.wait, waited);
                tally.turns += 1;
            }
            Ok::<_, BenchError>(tally)
        }));
    }
    let mut tallies = Vec::with_capacity(handles.len());
    for handle in handles {
        tallies.push(handle.await??);
    }
    let elapsed = started.elapsed();
    let mut check = row.check.clone();
    let key = &row.shared.key;
    let left: i64 = redis::cmd("EXISTS")
        .arg(key)
        .arg(lock_redis::keys::fair_queue(key))
        .arg(lock_redis::keys::fair_timeouts(key))
        .query_async(&mut check)
        .await?;
    if left != 0 {
        return Err(format!(
            "W9 {}: the lock or its queue is left after a slice",
            row.shared.name
        )
        .into());
    }
    Ok((tallies, elapsed))
}

/// The W9 ratios: `distlock-fair` ÷ Redisson's scripts and ÷ the plain lock, ops/s (higher =
/// the fair lock faster) and p50 wait (lower = the fair lock's waiters get in sooner).
pub fn ratios(rows: &[&Measurement]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for other in ["raw-fair-scripts", "distlock-lock"] {
        for metric in [Metric::Throughput, Metric::P50] {
            out.extend(Ratio::between(
                rows,
                WORKLOAD,
                metric,
                "distlock-fair",
                other,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_divide_the_fair_row_by_the_others() {
        let row = |contender: &'static str, ops: u64, p50: Duration| {
            let mut tally = Tally::new();
            tally.ops = ops;
            tally.elapsed = Duration::from_secs(1);
            record(&mut tally.latency, p50);
            tally.into_row(WORKLOAD, contender, 16, 1)
        };
        let rows = [
            row("distlock-fair", 500, Duration::from_millis(30)),
            row("distlock-lock", 1_000, Duration::from_millis(10)),
            row("raw-fair-scripts", 400, Duration::from_millis(40)),
        ];
        let refs: Vec<&Measurement> = rows.iter().collect();
        let found: Vec<(&str, Metric, f64)> = ratios(&refs)
            .into_iter()
            .map(|ratio| (ratio.denominator, ratio.metric, ratio.value))
            .collect();
        let expected = [
            ("raw-fair-scripts", Metric::Throughput, 1.25),
            ("raw-fair-scripts", Metric::P50, 0.75),
            ("distlock-lock", Metric::Throughput, 0.5),
            ("distlock-lock", Metric::P50, 3.0),
        ];
        assert_eq!(found.len(), expected.len(), "{found:?}");
        for ((d, m, v), (ed, em, ev)) in found.into_iter().zip(expected) {
            assert_eq!((d, m), (ed, em));
            assert!((v - ev).abs() < 0.01, "{d} {m:?}: {v} != {ev}");
        }
    }
}

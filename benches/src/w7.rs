//! W7: the counting semaphore. `--w7-tasks` tasks (16) on one client take one permit of a
//! semaphore of `--w7-permits` permits (4) and give it back at once, in a loop; with more tasks
//! than permits most of them wait for a permit at any time. An op is one `acquire(1)` +
//! `release(1)` pair and its latency runs from the acquire call to the release's return, the
//! wait for a permit included; `acquire_p50_us` / `acquire_p99_us` are the acquire call alone.
//!
//! Rows, each on a semaphore (and connections) of its own:
//!
//! - `distlock-semaphore`: `Locker<RedisBackend>::semaphore` with the default settings (pub/sub
//!   count announcements), `acquire(1)` (waits forever) then `release(1)`;
//! - `raw-scripts`: a raw redis-rs client running Redisson's own `RSemaphore` scripts
//!   (`tryAcquire` and `release`, copied from `RedissonSemaphore.java`) by `EVALSHA` on a
//!   `MultiplexedConnection`, as `raw-script` runs distlock's lock scripts in W1 and W2. It waits
//!   the way Redisson's `acquire` does: one attempt, then, registered as a waiter, attempt and
//!   wait for the latch in a loop; a count message on `redisson_sc:{name}` (heard on a second,
//!   RESP3 connection subscribed once) opens the latch for as many waiters as it announces
//!   permits (Redisson's `SemaphorePubSub`), and a waiter looks again after a second without one;
//! - `distlock-semaphore-nowait` and `raw-scripts-nowait`: the same with as many permits as
//!   tasks, so nobody ever waits: what taking and giving back costs without the wait.
//!
//! Each row's measured phase is cut into `--slices` slices of `--duration` ÷ slices that take
//! turns between the rows; a slice stops taking new turns at its deadline and every task gives
//! its permit back before the slice ends, and the run then checks that the count is back at its
//! permits (an error otherwise). `fair_min` / `fair_max` are the fewest and most pairs of one
//! task over the row.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lock_core::{Locker, Semaphore};
use lock_redis::RedisBackend;
use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Script, Value};

use crate::contenders::BenchError;
use crate::measurement::{Measurement, Metric, Ratio, Tally, new_histogram, record};
use crate::probe::Probe;

/// The workload's label in rows and ratios.
const WORKLOAD: &str = "W7";

/// How long a raw waiter waits for the latch before it looks again (distlock's waiters re-check
/// at least every second too).
const RECHECK: Duration = Duration::from_secs(1);

/// Redisson's `RSemaphore.tryAcquire(permits)` script, as `RedissonSemaphore.tryAcquireAsync0`
/// sends it. `KEYS[1]` the semaphore; `ARGV[1]` the permits. 1 when taken, 0 otherwise.
static TRY_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local value = redis.call('get', KEYS[1]); \
         if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then \
         local val = redis.call('decrby', KEYS[1], ARGV[1]); \
         return 1; \
         end; \
         return 0;",
    )
});

/// Redisson's `RSemaphore.release(permits)` script (`RedissonSemaphore.releaseAsync`): adds the
/// permits and publishes the new count. `KEYS[1]` the semaphore, `KEYS[2]` its channel;
/// `ARGV[1]` the permits, `ARGV[2]` the publish command (`publish` on one server).
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local value = redis.call('incrby', KEYS[1], ARGV[1]); \
         redis.call(ARGV[2], KEYS[2], value); ",
    )
});

/// Redisson's `RSemaphore.trySetPermits(permits)` script (`trySetPermitsAsync`), for the setup.
static TRY_SET_PERMITS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local value = redis.call('get', KEYS[1]); \
         if (value == false) then \
         redis.call('set', KEYS[1], ARGV[1]); \
         redis.call(ARGV[2], KEYS[2], ARGV[1]); \
         return 1;\
         end;\
         return 0;",
    )
});

/// W7's settings on the command line; the measured time and its slices are `--duration` and
/// `--slices`.
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w7")]
pub struct Args {
    /// Tasks taking and giving back one permit, on one client per row.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    pub w7_tasks: u64,
    /// The permits of the contended rows (the `-nowait` rows have one per task).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub w7_permits: u32,
}

/// W7's settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Tasks per row, all on the row's one client.
    pub tasks: usize,
    /// The permits of the contended rows (the `-nowait` rows have one per task).
    pub permits: u32,
    /// Measured time per row, over all its slices.
    pub duration: Duration,
    /// Slices per row.
    pub slices: u32,
    /// Unmeasured time per row before the slices.
    pub warmup: Duration,
}

/// Redisson's semaphore waiters' latch (`RedissonLockEntry`'s): a count message opens it for
/// as many of the registered waiters as it announces permits.
struct Latch {
    /// Tasks registered as waiting (between their first failed attempt and their success).
    waiting: AtomicI64,
    opened: tokio::sync::Semaphore,
}

impl Latch {
    /// A count message: lets up to `count` registered waiters look again.
    fn announce(&self, count: i64) {
        let wake = count.min(self.waiting.load(Ordering::Acquire));
        if let Ok(wake) = usize::try_from(wake)
            && wake > 0
        {
            self.opened.add_permits(wake);
        }
    }
}

/// The `raw-scripts` client: Redisson's scripts by `EVALSHA`, waiting on its own subscription.
#[derive(Clone)]
struct RawSemaphore {
    connection: MultiplexedConnection,
    name: Arc<str>,
    channel: Arc<str>,
    latch: Arc<Latch>,
    /// The subscribed connection, kept open as long as the client lives.
    _listener: MultiplexedConnection,
}

impl RawSemaphore {
    /// A client of the semaphore `name` at `url`: one connection for the scripts, one RESP3
    /// connection subscribed to the semaphore's channel.
    async fn connect(url: &str, name: &str) -> Result<Self, BenchError> {
        let connection = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        // Redisson's channel name (`prefixName("redisson_sc", name)`), the one distlock uses.
        let channel: Arc<str> = lock_redis::keys::semaphore_channel(name).into();
        let latch = Arc::new(Latch {
            waiting: AtomicI64::new(0),
            opened: tokio::sync::Semaphore::new(0),
        });
        let heard = latch.clone();
        let on_push = move |push: PushInfo| {
            if push.kind == PushKind::Message
                && let Some(Value::BulkString(message)) = push.data.get(1)
                && let Some(count) = std::str::from_utf8(message)
                    .ok()
                    .and_then(|count| count.parse().ok())
            {
                heard.announce(count);
            }
            Ok::<(), redis::aio::SendError>(())
        };
        let separator = if url.contains('?') { '&' } else { '?' };
        let config = redis::AsyncConnectionConfig::new().set_push_sender(on_push);
        let mut listener = redis::Client::open(format!("{url}{separator}protocol=resp3"))?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        listener.subscribe(&*channel).await?;
        Ok(RawSemaphore {
            connection,
            name: name.into(),
            channel,
            latch,
            _listener: listener,
        })
    }

    /// `trySetPermits(permits)`.
    async fn try_set_permits(&self, permits: u32) -> Result<bool, BenchError> {
        let mut connection = self.connection.clone();
        let set: i64 = TRY_SET_PERMITS
            .key(&*self.name)
            .key(&*self.channel)
            .arg(permits)
            .arg("publish")
            .invoke_async(&mut connection)
            .await?;
        Ok(set == 1)
    }

    /// One `tryAcquire(1)`.
    async fn try_acquire(&self) -> Result<bool, BenchError> {
        let mut connection = self.connection.clone();
        let taken: i64 = TRY_ACQUIRE
            .key(&*self.name)
            .arg(1)
            .invoke_async(&mut connection)
            .await?;
        Ok(taken == 1)
    }

    /// `acquire(1)` as Redisson's: an attempt; then, registered as a waiter, an attempt and a
    /// wait for the latch, until an attempt succeeds.
    async fn acquire(&self) -> Result<(), BenchError> {
        if self.try_acquire().await? {
            return Ok(());
        }
        self.latch.waiting.fetch_add(1, Ordering::AcqRel);
        let taken = async {
            loop {
                if self.try_acquire().await? {
                    return Ok::<(), BenchError>(());
                }
                if let Ok(opened) = tokio::time::timeout(RECHECK, self.latch.opened.acquire()).await
                {
                    opened?.forget();
                }
            }
        }
        .await;
        self.latch.waiting.fetch_sub(1, Ordering::AcqRel);
        taken
    }

    /// `release(1)`.
    async fn release(&self) -> Result<(), BenchError> {
        let mut connection = self.connection.clone();
        let () = RELEASE
            .key(&*self.name)
            .key(&*self.channel)
            .arg(1)
            .arg("publish")
            .invoke_async(&mut connection)
            .await?;
        Ok(())
    }

    /// The permits available now.
    async fn available(&self) -> Result<i64, BenchError> {
        let mut connection = self.connection.clone();
        let count: Option<i64> = redis::cmd("GET")
            .arg(&*self.name)
            .query_async(&mut connection)
            .await?;
        Ok(count.unwrap_or(0))
    }

    /// Deletes the semaphore.
    async fn delete(&self) -> Result<(), BenchError> {
        let mut connection = self.connection.clone();
        let _: i64 = redis::cmd("DEL")
            .arg(&*self.name)
            .query_async(&mut connection)
            .await?;
        Ok(())
    }
}

/// One row's client.
#[derive(Clone)]
enum Client {
    Distlock(Semaphore<RedisBackend>),
    Raw(RawSemaphore),
}

impl Client {
    async fn try_set_permits(&self, permits: u32) -> Result<bool, BenchError> {
        match self {
            Client::Distlock(semaphore) => Ok(semaphore.try_set_permits(permits).await?),
            Client::Raw(client) => client.try_set_permits(permits).await,
        }
    }

    async fn acquire(&self) -> Result<(), BenchError> {
        match self {
            Client::Distlock(semaphore) => Ok(semaphore.acquire(1).await?),
            Client::Raw(client) => client.acquire().await,
        }
    }

    async fn release(&self) -> Result<(), BenchError> {
        match self {
            Client::Distlock(semaphore) => semaphore.release(1).await.map(drop).map_err(Into::into),
            Client::Raw(client) => client.release().await,
        }
    }

    async fn available(&self) -> Result<i64, BenchError> {
        match self {
            Client::Distlock(semaphore) => Ok(semaphore.available().await?),
            Client::Raw(client) => client.available().await,
        }
    }

    async fn delete(&self) -> Result<(), BenchError> {
        match self {
            Client::Distlock(semaphore) => semaphore.delete().await.map(drop).map_err(Into::into),
            Client::Raw(client) => client.delete().await,
        }
    }
}

/// One W7 row: its name, client and permits.
struct Row {
    name: &'static str,
    client: Client,
    permits: u32,
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
}

/// Connects the rows to `url` (each on a semaphore of its own under `prefix`, with its own
/// connections) and sets their permits.
async fn connect(url: &str, prefix: &str, config: &Config) -> Result<Vec<Row>, BenchError> {
    let contended = config.permits.max(1);
    let free = u32::try_from(config.tasks).unwrap_or(u32::MAX).max(1);
    let mut rows = Vec::with_capacity(4);
    for (name, permits, raw) in [
        ("distlock-semaphore", contended, false),
        ("raw-scripts", contended, true),
        ("distlock-semaphore-nowait", free, false),
        ("raw-scripts-nowait", free, true),
    ] {
        let key = format!("{prefix}:w7:{name}");
        let client = if raw {
            Client::Raw(RawSemaphore::connect(url, &key).await?)
        } else {
            let locker = Locker::new(RedisBackend::connect(url).await?);
            Client::Distlock(locker.semaphore(&key)?)
        };
        if !client.try_set_permits(permits).await? {
            return Err(format!("W7 {name}: the semaphore {key} existed already").into());
        }
        rows.push(Row {
            name,
            client,
            permits,
        });
    }
    Ok(rows)
}

/// Runs W7 against `url`: a warm-up per row, then every row's slices, interleaved; one
/// measurement per row.
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
        slice(row, config.tasks, config.warmup).await?;
    }
    let mut tallies: Vec<RowTally> = rows
        .iter()
        .map(|_| RowTally {
            tally: Tally::new(),
            acquire: new_histogram(),
            per_task: vec![0; config.tasks],
        })
        .collect();
    for turn in 0..slices as usize {
        for offset in 0..rows.len() {
            let index = (turn + offset) % rows.len();
            let row = &rows[index];
            let row_tally = &mut tallies[index];
            let before = probe.snapshot().await?;
            let (tasks, elapsed) = slice(row, config.tasks, each).await?;
            row_tally
                .tally
                .counters
                .add(&probe.snapshot().await?.since(&before));
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
    for (row, tallied) in rows.iter().zip(tallies) {
        row.client.delete().await?;
        let fair_min = tallied.per_task.iter().copied().min().unwrap_or(0);
        let fair_max = tallied.per_task.iter().copied().max().unwrap_or(0);
        let mut measurement = tallied.tally.into_row(WORKLOAD, row.name, config.tasks, 1);
        measurement.extra = vec![
            ("permits", f64::from(row.permits)),
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

/// One slice of one row: `tasks` tasks take and give back one permit in a loop until `length`
/// has passed, then check the count is back at the row's permits. Returns each task's figures
/// and the slice's wall time (until the last task gave its permit back).
async fn slice(
    row: &Row,
    tasks: usize,
    length: Duration,
) -> Result<(Vec<TaskTally>, Duration), BenchError> {
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let client = row.client.clone();
            tokio::spawn(async move {
                let mut tally = TaskTally {
                    pairs: 0,
                    pair: new_histogram(),
                    acquire: new_histogram(),
                };
                while started.elapsed() < length {
                    let sent = Instant::now();
                    client.acquire().await?;
                    record(&mut tally.acquire, sent.elapsed());
                    client.release().await?;
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
    let left = row.client.available().await?;
    if left != i64::from(row.permits) {
        return Err(format!(
            "W7 {}: {left} permits available after a slice, {} expected",
            row.name, row.permits
        )
        .into());
    }
    Ok((tallies, elapsed))
}

/// The W7 ratios: each distlock row ÷ its raw row, ops/s (higher = distlock faster) and p50
/// (lower = distlock faster).
pub fn ratios(rows: &[&Measurement]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for (distlock, raw) in [
        ("distlock-semaphore", "raw-scripts"),
        ("distlock-semaphore-nowait", "raw-scripts-nowait"),
    ] {
        for metric in [Metric::Throughput, Metric::P50] {
            out.extend(Ratio::between(rows, WORKLOAD, metric, distlock, raw));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_message_opens_the_latch_for_at_most_the_registered_waiters() {
        let latch = Latch {
            waiting: AtomicI64::new(2),
            opened: tokio::sync::Semaphore::new(0),
        };
        latch.announce(4);
        assert_eq!(latch.opened.available_permits(), 2);
        latch.announce(1);
        assert_eq!(latch.opened.available_permits(), 3);
        latch.announce(0);
        latch.announce(-3);
        assert_eq!(latch.opened.available_permits(), 3);
        latch.waiting.store(0, Ordering::Release);
        latch.announce(5);
        assert_eq!(latch.opened.available_permits(), 3);
    }

    #[test]
    fn ratios_divide_each_distlock_row_by_its_raw_row() {
        let row = |contender: &'static str, ops: u64, p50: Duration| {
            let mut tally = Tally::new();
            tally.ops = ops;
            tally.elapsed = Duration::from_secs(1);
            record(&mut tally.latency, p50);
            tally.into_row(WORKLOAD, contender, 16, 1)
        };
        let rows = [
            row("distlock-semaphore", 600, Duration::from_micros(300)),
            row("raw-scripts", 1_000, Duration::from_micros(200)),
            row("distlock-semaphore-nowait", 900, Duration::from_micros(100)),
            row("raw-scripts-nowait", 1_000, Duration::from_micros(100)),
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
            ("distlock-semaphore", "raw-scripts", Metric::Throughput, 0.6),
            ("distlock-semaphore", "raw-scripts", Metric::P50, 1.5),
            (
                "distlock-semaphore-nowait",
                "raw-scripts-nowait",
                Metric::Throughput,
                0.9,
            ),
            (
                "distlock-semaphore-nowait",
                "raw-scripts-nowait",
                Metric::P50,
                1.0,
            ),
        ];
        assert_eq!(found.len(), expected.len(), "{found:?}");
        for ((n, d, m, v), (en, ed, em, ev)) in found.into_iter().zip(expected) {
            assert_eq!((n, d, m), (en, ed, em));
            assert!((v - ev).abs() < 0.01, "{n} {m:?}: {v} != {ev}");
        }
    }
}

//! W4: one task, lock + unlock on a fresh key per iteration, over several independent nodes.
//!
//! Rows, for every node count `n` of `--nodes`: `multi-n` (`Locker<MultiLock>`: every node
//! must grant), `redlock-n` (`Locker<RedLock>`: a majority must grant) and `rslock-n` (rslock's
//! Redlock `LockManager` over the same nodes), next to one `single` row (`Locker<RedisBackend>`
//! on node 0). The distlock rows take a fixed 30 s lease without waiting
//! (`lock_with(no_wait().fixed_lease(30 s))`, as W1's `distlock-fixed`), rslock asks for the same TTL.
//! Every row has its own connections, and all rows of all node counts run in one interleaved
//! sequence of chunks, as in W1, so a slow spell of the machine hits them all alike.

use std::sync::Arc;
use std::time::Instant;

use lock_core::DynLockBackend;
use lock_multi::{MultiLock, RedLock};
use lock_redis::{LockKind, RedisBackend};

use crate::contenders::BenchError;
use crate::contenders::distlock::{Distlock, Mode};
#[cfg(feature = "rslock")]
use crate::contenders::rslock::Rslock;
use crate::measurement::{Measurement, Metric, Ratio, Tally, record};
use crate::probe::{self, Probe};

/// The workload's label in rows and ratios.
const WORKLOAD: &str = "W4";

/// W4's settings on the command line; its warm-up and turns are W1's `--warmup` and `--chunk`.
#[derive(Clone, Debug, clap::Args)]
#[group(id = "w4")]
pub struct Args {
    /// Use these independent servers (comma list or repeated) instead of starting throw-away
    /// ones; at least as many as the largest `--nodes`. Node 0 serves `single`.
    #[arg(long, value_delimiter = ',')]
    pub urls: Vec<String>,
    /// Node counts; each gets `multi-n`, `redlock-n` and `rslock-n` rows over the first `n`
    /// nodes.
    #[arg(long, value_delimiter = ',', default_value = "3,5")]
    pub nodes: Vec<usize>,
    /// Measured lock + unlock pairs per row.
    #[arg(long, default_value_t = 5_000)]
    pub w4_iterations: u64,
    /// Run only these rows (comma list of names as printed, e.g. `redlock-fast-3,rslock-3`):
    /// to profile one row alone. Ratios and targets whose rows did not run are left out.
    #[arg(long, value_delimiter = ',')]
    pub w4_rows: Vec<String>,
}

impl Args {
    /// `--smoke`'s count.
    pub fn smoke(&mut self) {
        self.w4_iterations = 300;
    }
}

/// One W4 row: a client and the nodes it spans (the first `nodes` of the node list).
#[derive(Clone)]
pub struct Row {
    name: &'static str,
    nodes: usize,
    client: Client,
}

#[derive(Clone)]
enum Client {
    Single(Distlock),
    Multi(Distlock<MultiLock>),
    RedLock(Distlock<RedLock>),
    #[cfg(feature = "rslock")]
    Rslock(Rslock),
}

impl Client {
    async fn lock_unlock(&self, key: &str) -> Result<(), BenchError> {
        match self {
            Client::Single(client) => client.lock_unlock(key).await,
            Client::Multi(client) => client.lock_unlock(key).await,
            Client::RedLock(client) => client.lock_unlock(key).await,
            #[cfg(feature = "rslock")]
            Client::Rslock(client) => client.lock_unlock(key).await,
        }
    }
}

/// `family-n`, e.g. `redlock-3`. Rows are named once per round, so leaking is bounded.
fn row_name(family: &str, nodes: usize) -> &'static str {
    format!("{family}-{nodes}").leak()
}

/// One `RedisBackend` (its own connection) per URL, keeping locks of `kind`.
async fn backends(
    urls: &[String],
    kind: LockKind,
) -> Result<Vec<Arc<dyn DynLockBackend>>, BenchError> {
    let mut nodes: Vec<Arc<dyn DynLockBackend>> = Vec::with_capacity(urls.len());
    for url in urls {
        let backend = RedisBackend::builder(url.as_str())
            .lock_kind(kind)
            .connect()
            .await?;
        nodes.push(Arc::new(backend));
    }
    Ok(nodes)
}

/// Connects every row: `single` on `urls[0]`, then per node count `n` (at most `urls.len()`)
/// `multi-n`, `redlock-n` and `rslock-n` over `urls[..n]`.
pub async fn connect(urls: &[String], counts: &[usize]) -> Result<Vec<Row>, BenchError> {
    let first = urls.first().ok_or("W4: no node URLs")?;
    let mut rows = vec![Row {
        name: "single",
        nodes: 1,
        client: Client::Single(Distlock::connect(first, Mode::Fixed).await?),
    }];
    for &n in counts {
        let urls = urls
            .get(..n)
            .ok_or_else(|| format!("W4: {n} nodes asked for, {} known", urls.len()))?;
        rows.push(Row {
            name: row_name("multi", n),
            nodes: n,
            client: Client::Multi(Distlock::new(
                MultiLock::new(backends(urls, LockKind::Reentrant).await?)?,
                Mode::Fixed,
            )),
        });
        rows.push(Row {
            name: row_name("redlock", n),
            nodes: n,
            client: Client::RedLock(Distlock::new(
                RedLock::new(backends(urls, LockKind::Reentrant).await?)?,
                Mode::Fixed,
            )),
        });
        // The same RedLock over nodes that keep the fast (string-key) lock: like for like with
        // rslock, whose nodes hold plain SET NX keys.
        rows.push(Row {
            name: row_name("redlock-fast", n),
            nodes: n,
            client: Client::RedLock(Distlock::new(
                RedLock::new(backends(urls, LockKind::Fast).await?)?,
                Mode::Fixed,
            )),
        });
        #[cfg(feature = "rslock")]
        rows.push(Row {
            name: row_name("rslock", n),
            nodes: n,
            client: Client::Rslock(Rslock::over(urls)),
        });
    }
    if cfg!(not(feature = "rslock")) {
        eprintln!("W4: rslock-n rows not built (feature `rslock` is off)");
    }
    Ok(rows)
}

/// Keeps the rows named in `names` (all of them when `names` is empty).
pub fn only(mut rows: Vec<Row>, names: &[String]) -> Vec<Row> {
    if !names.is_empty() {
        rows.retain(|row| names.iter().any(|name| name == row.name));
    }
    rows
}

/// Runs `warmup` unmeasured pairs per row, then `iterations` measured ones, in chunks of `chunk`
/// pairs that take turns between the rows (rotating who goes first). `probes` are the nodes in
/// order; each row's server counters are summed over the nodes it spans. Everything runs in one
/// spawned task, on a runtime worker as application code does.
pub async fn run(
    rows: Vec<Row>,
    probes: &[Probe],
    prefix: &str,
    warmup: u64,
    iterations: u64,
    chunk: u64,
) -> Result<Vec<Measurement>, BenchError> {
    let probes = probes.to_vec();
    let prefix = format!("{prefix}:w4");
    tokio::spawn(async move {
        for row in &rows {
            for i in 0..warmup {
                let key = format!("{prefix}:{}:warm:{i}", row.name);
                row.client.lock_unlock(&key).await?;
            }
        }
        let mut tallies: Vec<Tally> = rows.iter().map(|_| Tally::new()).collect();
        let chunks = iterations.div_ceil(chunk.max(1));
        for turn in 0..chunks {
            for offset in 0..rows.len() {
                let index = (turn as usize + offset) % rows.len();
                let row = &rows[index];
                let tally = &mut tallies[index];
                let count = chunk.min(iterations - tally.ops);
                let spanned = &probes[..row.nodes];
                let before = probe::snapshot_all(spanned).await?;
                let started = Instant::now();
                for i in tally.ops..tally.ops + count {
                    let key = format!("{prefix}:{}:{i}", row.name);
                    let sent = Instant::now();
                    row.client.lock_unlock(&key).await?;
                    record(&mut tally.latency, sent.elapsed());
                }
                tally.elapsed += started.elapsed();
                tally.ops += count;
                tally
                    .counters
                    .add(&probe::snapshot_all(spanned).await?.since(&before));
            }
        }
        Ok(rows
            .iter()
            .zip(tallies)
            .map(|(row, tally)| tally.into_row(WORKLOAD, row.name, 1, row.nodes))
            .collect())
    })
    .await?
}

/// The W4 ratios, for every node count `n`: `redlock-n` and `multi-n` p50 ÷ `single` p50 (the
/// price of more nodes), `redlock-n` ÷ `rslock-n` throughput (distlock against its peer), and
/// between consecutive node counts `a < b`, `X-b` p50 ÷ `X-a` p50 (does latency grow with the
/// node count?). Rows that did not run are left out.
pub fn ratios(rows: &[&Measurement], counts: &[usize]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let mut push = |metric, numerator: &str, denominator: &str| {
        out.extend(Ratio::between(
            rows,
            WORKLOAD,
            metric,
            numerator,
            denominator,
        ));
    };
    for &n in counts {
        let (redlock, multi, rslock) = (
            format!("redlock-{n}"),
            format!("multi-{n}"),
            format!("rslock-{n}"),
        );
        push(Metric::P50, &redlock, "single");
        push(Metric::Throughput, &redlock, &rslock);
        push(Metric::P50, &multi, "single");
        push(Metric::P50, &rslock, "single");
    }
    for pair in counts.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        for family in ["redlock", "multi", "rslock"] {
            push(
                Metric::P50,
                &format!("{family}-{b}"),
                &format!("{family}-{a}"),
            );
        }
    }
    out
}

//! cyclecost: many tasks on one `Locker`, each locking and releasing (explicitly) a lock per
//! cycle, for a fixed number of cycles, then the rate. Meant to run under
//! `valgrind --tool=callgrind`, which counts the client's instructions exactly where wall-clock
//! benchmarks on a shared machine cannot: the difference between a run of N and one of 3N
//! cycles, divided by 2N, is the client's cost of one cycle with connecting left out.
//!
//! It uses only the public API, so the same file, copied into a checkout of an older commit
//! (`benches/src/bin/`), measures that commit like for like.
//!
//! ```sh
//! cargo build --release -p distlock-bench --bin cyclecost
//! valgrind --tool=callgrind target/release/cyclecost --cycles 40 --url redis://127.0.0.1:6379/
//! valgrind --tool=callgrind target/release/cyclecost --cycles 120 --url redis://127.0.0.1:6379/
//! ```
//!
//! `--rslock` counts the peer crate's cycle (like for like with `--fast`), `--raw-script` a bare
//! redis-rs client running distlock's own scripts (like for like with the reentrant lock).

use std::time::Instant;

use clap::Parser;
use lock_core::{LockOptions, Locker, MemoryBackend, ReleaseOutcome};
use lock_redis::{LockKind, RedisBackend};

#[derive(Parser)]
#[command(about = "Lock + release cycles on one Locker, to count the client's cost per cycle")]
struct Args {
    /// The Redis server to lock on; the in-memory backend without it.
    #[arg(long)]
    url: Option<String>,
    /// Concurrent tasks.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
    /// Cycles per task.
    #[arg(long, default_value_t = 100)]
    cycles: u64,
    /// The fast (non-reentrant) lock instead of the reentrant one (with `--url`).
    #[arg(long)]
    fast: bool,
    /// `lock_with(no_wait().fixed_lease(30 s))` instead of `lock()`: no watchdog and no wait,
    /// as lockbench's `distlock-fixed` and `distlock-fast` rows (and the peers) take locks.
    #[arg(long)]
    fixed: bool,
    /// Each task locks the same name every cycle, instead of a fresh one per cycle (as W2).
    #[arg(long)]
    same_name: bool,
    /// The peer crate rslock on `--url` instead of distlock (`lock` + `unlock`, TTL 30 s): the
    /// same count for the peer, like for like with `--fast`.
    #[cfg(feature = "rslock")]
    #[arg(long, requires = "url")]
    rslock: bool,
    /// A bare redis-rs client running distlock's own acquire and release scripts on `--url`
    /// (lockbench's `raw-script` row): the same count, like for like with the reentrant lock.
    #[arg(long, requires = "url", conflicts_with = "fast")]
    raw_script: bool,
}

/// lockbench's floors, compiled in from its own file so both measure the same code (it takes
/// [`BenchError`] and [`LEASE`] from its parent, here the crate root).
#[allow(dead_code)]
#[path = "../contenders/raw.rs"]
mod raw;

/// What [`raw`] returns on failure, as in lockbench.
type BenchError = Box<dyn std::error::Error + Send + Sync>;
/// The lease [`raw`] takes, as in lockbench.
const LEASE: std::time::Duration = std::time::Duration::from_secs(30);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let rate = match &args.url {
            #[cfg(feature = "rslock")]
            Some(url) if args.rslock => rslock_cycles(url, &args).await?,
            Some(url) if args.raw_script => raw_script_cycles(url, &args).await?,
            Some(url) => {
                let kind = if args.fast {
                    LockKind::Fast
                } else {
                    LockKind::Reentrant
                };
                let backend = RedisBackend::builder(url.as_str())
                    .lock_kind(kind)
                    .connect()
                    .await?;
                cycles(Locker::new(backend), &args).await?
            }
            None => cycles(Locker::new(MemoryBackend::new()), &args).await?,
        };
        println!(
            "{} tasks x {} cycles: {rate:.0} cycles/s",
            args.tasks, args.cycles
        );
        Ok(())
    })
}

/// Runs the cycles and returns cycles per second.
async fn cycles<B: lock_core::LockBackend>(
    locker: Locker<B>,
    args: &Args,
) -> Result<f64, Box<dyn std::error::Error>> {
    let fixed = args
        .fixed
        .then(|| LockOptions::new().no_wait().fixed_lease(LEASE));
    per_task(args, move |name| {
        let locker = locker.clone();
        let fixed = fixed.clone();
        async move {
            let guard = match &fixed {
                Some(options) => locker.lock_with(&name, options).await,
                None => locker.lock(&name).await,
            };
            let guard = guard.map_err(|e| e.to_string())?;
            let outcome = guard.release().await.map_err(|e| e.to_string())?;
            assert_eq!(outcome, ReleaseOutcome::Released, "{name}: a lone holder");
            Ok(())
        }
    })
    .await
}

/// [`cycles`] with rslock's `LockManager` on one node.
#[cfg(feature = "rslock")]
async fn rslock_cycles(url: &str, args: &Args) -> Result<f64, Box<dyn std::error::Error>> {
    let manager = rslock::LockManager::new(vec![url.to_owned()]);
    per_task(args, move |name| {
        let manager = manager.clone();
        async move {
            let lock = manager
                .lock(name.as_str(), std::time::Duration::from_secs(30))
                .await
                .map_err(|error| format!("{name}: {error:?}"))?;
            manager.unlock(&lock).await;
            Ok(())
        }
    })
    .await
}

/// [`cycles`] with lockbench's `raw-script` client (distlock's scripts, nothing around them).
async fn raw_script_cycles(url: &str, args: &Args) -> Result<f64, Box<dyn std::error::Error>> {
    let connection = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let client = raw::ScriptLock::new(connection);
    per_task(args, move |name| {
        let client = client.clone();
        async move { client.lock_unlock(&name).await.map_err(|e| e.to_string()) }
    })
    .await
}

/// `--tasks` tasks each running `cycle` on `--cycles` names in a row (the same one with
/// `--same-name`); returns cycles per second.
async fn per_task<F, Fut>(args: &Args, cycle: F) -> Result<f64, Box<dyn std::error::Error>>
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..args.tasks {
        let (cycle, count, same_name) = (cycle.clone(), args.cycles, args.same_name);
        tasks.push(tokio::spawn(async move {
            for n in 0..count {
                let name = if same_name {
                    format!("cyclecost:{task}")
                } else {
                    format!("cyclecost:{task}:{n}")
                };
                cycle(name).await?;
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let total = args.tasks as f64 * args.cycles as f64;
    Ok(total / started.elapsed().as_secs_f64())
}

//! `lockbench`: the cost of a distlock lock + unlock against its floors and its peer, on a real
//! `redis-server`.
//!
//! Rows (contenders): `raw-setnx` (SET NX PX + compare-and-delete), `raw-script` (distlock's own
//! acquire/release Lua by EVALSHA on a `MultiplexedConnection`), `raw-script-cm` (the same on a
//! `ConnectionManager`), `distlock-fixed` / `distlock-try_lock` / `distlock-lock`
//! (`Locker<RedisBackend>`), and `rslock`. Workloads: W1 (one task) and W2 (many tasks on one
//! client). An op is one lock + unlock pair; latencies are per pair.
//!
//! ```text
//! cargo run --release -p distlock-bench --bin lockbench -- --workloads w1,w2 --json out.json
//! ```

mod contenders;
mod measurement;
mod probe;
mod server_limit;
mod w1;
mod w2;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use lock_testkit::RedisServer;

use contenders::{BenchError, Contender, Kind};
use measurement::Measurement;
use probe::Probe;
use server_limit::ServerLimit;

/// The workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// One task, fresh key per iteration.
    W1,
    /// `--tasks` tasks on one client, fresh keys.
    W2,
}

/// Measures distlock's lock + unlock against raw-protocol floors and rslock.
#[derive(Debug, Parser)]
#[command(name = "lockbench")]
struct Args {
    /// Use this server instead of starting a throw-away `redis-server`.
    #[arg(long)]
    url: Option<String>,
    /// W1: measured lock + unlock pairs per contender.
    #[arg(long, default_value_t = 20_000)]
    iterations: u64,
    /// W1: unmeasured pairs per contender before measuring.
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// W1: the contenders take turns every this many pairs.
    #[arg(long, default_value_t = 1_000)]
    chunk: u64,
    /// W2: concurrent tasks.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
    /// W2: measured seconds per contender.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// W2: a fixed number of pairs per task instead of `--duration`.
    #[arg(long)]
    per_task: Option<u64>,
    /// W2: the measured phase of each contender is cut into this many slices, which take turns
    /// between the contenders.
    #[arg(long, default_value_t = 6)]
    slices: u32,
    /// Workloads to run.
    #[arg(long, value_delimiter = ',', default_value = "w1,w2")]
    workloads: Vec<Workload>,
    /// Contenders to run (default: all).
    #[arg(long, value_delimiter = ',')]
    contenders: Option<Vec<Kind>>,
    /// distlock rows: hold this many watchdog locks on the same locker while measuring (a
    /// non-empty watchdog registry).
    #[arg(long, default_value_t = 0)]
    background_holds: usize,
    /// Run every workload × contender this many times, interleaved; the summary and the ratios
    /// use each row's median round.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Tokio worker threads (1 = current-thread runtime).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Skip `redis-benchmark` (never run against `--url`, as it writes a key of its own).
    #[arg(long)]
    no_redis_benchmark: bool,
    /// Also write the results to this JSON file.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    // Started before the runtime: `RedisServer::start` blocks until the server answers.
    let (server, url) = match &args.url {
        Some(url) => (None, url.clone()),
        None => {
            let server = RedisServer::start()?;
            let url = server.url();
            (Some(server), url)
        }
    };
    let version = server
        .as_ref()
        .map_or("external", |server| server.version());
    println!(
        "lockbench: server {url} ({version}), runtime {} thread(s), one connection per contender, op = lock+unlock, loadavg {}",
        args.threads,
        loadavg()
    );

    let runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    let rows = runtime.block_on(run_all(&args, &url))?;
    drop(runtime);

    let medians = measurement::medians(&rows);
    if args.rounds > 1 {
        println!("--- median of {} rounds ---", args.rounds);
        medians.iter().for_each(|row| row.print_line());
    }
    let ratios = measurement::ratios(&medians);
    println!(
        "--- throughput ratios (higher = distlock faster), loadavg {} ---",
        loadavg()
    );
    measurement::print_ratios(&ratios);

    // Only against our own throw-away server: redis-benchmark leaves `key:__rand_int__` behind.
    let limits = match &server {
        Some(server) if !args.no_redis_benchmark => {
            server_limit::measure("127.0.0.1", server.port())
        }
        _ => Vec::new(),
    };
    if !limits.is_empty() {
        println!("--- raw server limit (one command per request) ---");
        limits.iter().for_each(ServerLimit::print_line);
    }

    if let Some(path) = &args.json {
        let json = to_json(&args, &url, version, &rows, &medians, &ratios, &limits);
        std::fs::write(path, json)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Every selected workload × contender, each contender on a fresh connection.
async fn run_all(args: &Args, url: &str) -> Result<Vec<Measurement>, BenchError> {
    let kinds = args
        .contenders
        .clone()
        .unwrap_or_else(|| Kind::ALL.to_vec());
    // Unique per run, so keys never meet leftovers on an existing server.
    let prefix = format!(
        "lockbench:{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let slices = args.slices.max(1);
    let each = match args.per_task {
        Some(count) => w2::Stop::Count(count.div_ceil(u64::from(slices))),
        None => w2::Stop::After(Duration::from_secs_f64(args.duration / f64::from(slices))),
    };
    let slices = w2::Slices {
        count: slices,
        each,
    };
    let probe = Probe::connect(url).await?;
    let mut rows = Vec::new();
    for round in 1..=args.rounds.max(1) {
        if args.rounds > 1 {
            println!("--- round {round}/{} ---", args.rounds);
        }
        for &workload in &args.workloads {
            let prefix = format!("{prefix}:r{round}");
            let mut entrants = Vec::new();
            for &kind in &kinds {
                match Contender::connect(kind, url).await? {
                    Some(contender) => entrants.push((kind, contender)),
                    None => eprintln!("{}: not built (feature `rslock` is off)", kind.name()),
                }
            }
            let mut held = Vec::new();
            for (_, contender) in &entrants {
                let prefix = format!("{prefix}:held:{}", held.len());
                held.push(
                    contender
                        .hold_background(&prefix, args.background_holds)
                        .await?,
                );
            }
            let measured = match workload {
                Workload::W1 => {
                    let (warmup, iterations) = (args.warmup, args.iterations);
                    w1::run(&entrants, &probe, &prefix, warmup, iterations, args.chunk).await?
                }
                Workload::W2 => {
                    let warmup = Duration::from_millis(300);
                    w2::run(&entrants, &probe, &prefix, args.tasks, warmup, slices).await?
                }
            };
            for (mut row, guards) in measured.into_iter().zip(held) {
                row.round = round;
                row.background = guards.len();
                for guard in guards {
                    let _ = guard.release().await?;
                }
                row.print_line();
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// `/proc/loadavg`'s first three fields (`?` elsewhere): other work on the machine skews results.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".to_owned(),
        |text| text.split(' ').take(3).collect::<Vec<_>>().join(" "),
    )
}

fn to_json(
    args: &Args,
    url: &str,
    version: &str,
    rows: &[Measurement],
    medians: &[&Measurement],
    ratios: &[measurement::Ratio],
    limits: &[ServerLimit],
) -> String {
    let list = |items: Vec<String>| format!("[\n    {}\n  ]", items.join(",\n    "));
    format!(
        "{{\n  \"url\": \"{url}\",\n  \"server\": \"{version}\",\n  \"threads\": {},\n  \"rounds\": {},\n  \"loadavg_end\": \"{}\",\n  \"results\": {},\n  \"medians\": {},\n  \"ratios\": {},\n  \"server_limit\": {}\n}}\n",
        args.threads,
        args.rounds,
        loadavg(),
        list(rows.iter().map(Measurement::to_json).collect()),
        list(medians.iter().map(|row| row.to_json()).collect()),
        list(ratios.iter().map(measurement::Ratio::to_json).collect()),
        list(limits.iter().map(ServerLimit::to_json).collect()),
    )
}

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
    /// W1: unmeasured pairs before measuring.
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// W2: concurrent tasks.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
    /// W2: measured seconds per contender.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// W2: a fixed number of pairs per task instead of `--duration`.
    #[arg(long)]
    per_task: Option<u64>,
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
    /// Skip `redis-benchmark`.
    #[arg(long)]
    no_redis_benchmark: bool,
    /// Also write the results to this JSON file.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    // Started before the runtime: `RedisServer::start` blocks until the server answers.
    let server = match &args.url {
        Some(_) => None,
        None => Some(RedisServer::start()?),
    };
    let url = match (&args.url, &server) {
        (Some(url), _) => url.clone(),
        (None, Some(server)) => server.url(),
        (None, None) => unreachable!("a server was started"),
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

    let limits = if args.no_redis_benchmark {
        Vec::new()
    } else {
        server_limit_for(&url)
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
    let stop = match args.per_task {
        Some(count) => w2::Stop::Count(count),
        None => w2::Stop::After(Duration::from_secs_f64(args.duration)),
    };
    let probe = Probe::connect(url).await?;
    let mut rows = Vec::new();
    for round in 1..=args.rounds.max(1) {
        if args.rounds > 1 {
            println!("--- round {round}/{} ---", args.rounds);
        }
        for &workload in &args.workloads {
            for &kind in &kinds {
                let prefix = format!("{prefix}:r{round}");
                let row = measure_row(args, url, &probe, &prefix, workload, kind, stop).await?;
                if let Some(mut row) = row {
                    row.round = round;
                    row.print_line();
                    rows.push(row);
                }
            }
        }
    }
    Ok(rows)
}

/// One workload for one contender on a fresh connection; `None` when the contender is not built.
async fn measure_row(
    args: &Args,
    url: &str,
    probe: &Probe,
    prefix: &str,
    workload: Workload,
    kind: Kind,
    stop: w2::Stop,
) -> Result<Option<Measurement>, BenchError> {
    let Some(contender) = Contender::connect(kind, url).await? else {
        eprintln!(
            "{}: not built (feature `rslock` is off); skipped",
            kind.name()
        );
        return Ok(None);
    };
    let held = contender
        .hold_background(&format!("{prefix}:held"), args.background_holds)
        .await?;
    let mut row = match workload {
        Workload::W1 => {
            w1::run(
                &contender,
                probe,
                kind,
                prefix,
                args.warmup,
                args.iterations,
            )
            .await?
        }
        Workload::W2 => {
            let warmup = Duration::from_millis(300);
            w2::run(&contender, probe, kind, prefix, args.tasks, warmup, stop).await?
        }
    };
    row.background = held.len();
    for guard in held {
        let _ = guard.release().await?;
    }
    Ok(Some(row))
}

/// Runs `redis-benchmark` against the host and port of `url` (not for password-protected URLs).
fn server_limit_for(url: &str) -> Vec<ServerLimit> {
    use redis::IntoConnectionInfo;
    let info = match url.into_connection_info() {
        Ok(info) => info,
        Err(error) => {
            eprintln!("redis-benchmark skipped: {error}");
            return Vec::new();
        }
    };
    if info.redis_settings().password().is_some() {
        eprintln!("redis-benchmark skipped: the URL carries a password");
        return Vec::new();
    }
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => server_limit::measure(host, *port),
        other => {
            eprintln!("redis-benchmark skipped: not a plain TCP address ({other:?})");
            Vec::new()
        }
    }
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

//! One application, three lock backends: the same code runs under a lock on one Redis node,
//! under a RedLock over several independent nodes, or under a lock on PostgreSQL. Only
//! [`make_locker`] knows which; it is picked at compile time by the examples' `redlock` or
//! `postgres` feature.
//!
//! ```text
//! cargo run -p distlock-examples --bin pick_backend                                # one node
//! cargo run -p distlock-examples --bin pick_backend --features redlock             # RedLock, 3 nodes
//! cargo run -p distlock-examples --bin pick_backend --features redlock -- --nodes 5
//! cargo run -p distlock-examples --bin pick_backend --features postgres            # PostgreSQL
//! cargo run -p distlock-examples --bin pick_backend --features postgres -- --postgres postgres://app@127.0.0.1/app
//! ```
//!
//! With `postgres` the locks live in PostgreSQL (`--postgres URL`, or a private server started
//! for the run) and the counter stays on Redis: the lock store is chosen apart from the data
//! it protects.
//!
//! Without `--url` the demo starts its own private `redis-server`s (one, or `--nodes` of them).
//! With `--url redis://host:port/` it uses running servers instead: one URL for the single node,
//! one `--url` per node for RedLock. The application, [`run_workers`], has tasks increment a
//! counter with a non-atomic `GET` + `SET` under the lock; the counter lives on the first node.
//! Exits with 1 when the total is wrong or a release finds the lock no longer held, 2 when no
//! server could be started.
//!
//! A release reports `PartlyReleased` only when some node could not be reached; under RedLock a
//! lock granted by a bare majority still releases as `Released` (the other nodes had nothing of
//! ours).

use std::any::Any;
use std::error::Error;
use std::process::ExitCode;

use clap::Parser;
use distlock::backend::LockBackend;
use distlock::{Locker, ReleaseOutcome};
use distlock_examples::raw_connection;
use tokio::task::JoinSet;

type BoxError = Box<dyn Error + Send + Sync>;

/// Run the same locked counter on one Redis node or, built with `--features redlock`, on a
/// RedLock over several.
#[derive(Parser, Debug)]
#[command(name = "pick_backend")]
struct Args {
    /// Redis URL of a running server; repeat it once per node for RedLock. Without it private
    /// servers are started for the run.
    #[arg(long)]
    url: Vec<String>,

    /// How many private nodes to start for RedLock (only with `--features redlock`).
    #[arg(long, conflicts_with = "url", value_parser = clap::value_parser!(u16).range(1..=15))]
    nodes: Option<u16>,

    /// How many tasks (each one a separate lock owner).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    tasks: u32,

    /// How many increments each task makes, each under the lock.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    increments: u32,

    /// The PostgreSQL database of the locks (only with `--features postgres`): without it a
    /// private server is started for the run.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,

    /// The lock name; the counter is the key `<lock-name>:value` on the first node.
    #[arg(long, default_value = "distlock:demo:pick-backend")]
    lock_name: String,
}

/// The key of the counter, on the first node.
fn counter_key(args: &Args) -> String {
    format!("{}:value", args.lock_name)
}

/// What [`make_locker`] sets up.
struct Setup<B: LockBackend> {
    locker: Locker<B>,
    /// Which backend, for the output.
    description: String,
    /// The Redis that holds the counter (the first node).
    data_url: String,
    /// The private servers, if any: they stop when this is dropped.
    _servers: Box<dyn Any>,
}

/// One Redis node: [`distlock::connect`] (the default build).
#[cfg(not(any(feature = "redlock", feature = "postgres")))]
async fn make_locker(args: &Args) -> Result<Setup<impl LockBackend>, ExitCode> {
    if args.url.len() > 1 || args.nodes.is_some_and(|n| n != 1) {
        eprintln!("error: several nodes need a RedLock: add `--features redlock` to cargo run");
        return Err(ExitCode::FAILURE);
    }
    let redis = distlock_examples::DemoRedis::from_arg(args.url.first().cloned())?;
    let locker = distlock::connect(redis.url()).await.map_err(fail)?;
    Ok(Setup {
        locker,
        description: "single node (RedisBackend): 1 node, quorum 1".to_owned(),
        data_url: redis.url().to_owned(),
        _servers: Box::new(redis),
    })
}

/// A RedLock over `--nodes` private servers (3 by default) or the `--url`s:
/// [`distlock::connect_redlock`] (built with `--features redlock`).
#[cfg(feature = "redlock")]
async fn make_locker(args: &Args) -> Result<Setup<impl LockBackend>, ExitCode> {
    let (urls, servers) = if args.url.is_empty() {
        let n = usize::from(args.nodes.unwrap_or(3));
        let nodes = lock_testkit::RedisNodes::start(n).map_err(|error| {
            eprintln!("error: no --url given and {n} private servers did not start: {error}");
            eprintln!("(or pass --url redis://host:port/ once per running server)");
            ExitCode::from(distlock_examples::NO_SERVER_EXIT_CODE)
        })?;
        println!("no --url given: started {n} private servers; they stop when the demo ends");
        (nodes.urls(), Some(nodes))
    } else {
        (args.url.clone(), None)
    };
    let locker = distlock::connect_redlock(&urls).await.map_err(fail)?;
    let redlock = locker.backend();
    Ok(Setup {
        description: format!(
            "RedLock: {} nodes, quorum {} (a majority)",
            redlock.nodes().len(),
            redlock.required()
        ),
        locker,
        data_url: urls[0].clone(),
        _servers: Box::new(servers),
    })
}

/// A lock on PostgreSQL (`--postgres URL`, or a private server), the schema installed on
/// connect, with the counter on a Redis node (`--url`, or a private one): built with
/// `--features postgres`.
#[cfg(all(feature = "postgres", not(feature = "redlock")))]
async fn make_locker(args: &Args) -> Result<Setup<impl LockBackend>, ExitCode> {
    let redis = distlock_examples::DemoRedis::from_arg(args.url.first().cloned())?;
    let (url, server) = match &args.postgres {
        Some(url) => (url.clone(), None),
        None => {
            let server = lock_testkit::PostgresServer::start().map_err(|error| {
                eprintln!("error: no --postgres given and no private PostgreSQL started: {error}");
                eprintln!("(or pass --postgres postgres://user@host/db)");
                ExitCode::from(distlock_examples::NO_SERVER_EXIT_CODE)
            })?;
            println!(
                "no --postgres given: started a private PostgreSQL; it stops when the demo ends"
            );
            (server.url(), Some(server))
        }
    };
    let backend = distlock::PostgresBackend::builder(&url)
        .map_err(fail)?
        .install_schema(true)
        .connect()
        .await
        .map_err(fail)?;
    Ok(Setup {
        locker: Locker::new(backend),
        description:
            "PostgreSQL (PostgresBackend): the locks in the database, the counter on Redis"
                .to_owned(),
        data_url: redis.url().to_owned(),
        _servers: Box::new((redis, server)),
    })
}

/// Prints a setup error and gives the exit code for it.
fn fail(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

/// How the releases went.
#[derive(Debug, Default)]
struct Releases {
    /// Every node gave the lock back.
    released: u64,
    /// RedLock only: a majority gave it back, but not every node had granted it (a competing
    /// attempt held the others at the time); what is left there is nothing of ours.
    partly: u64,
    /// `NotHeld`: the lock had expired or been taken meanwhile; the increment may have overlapped
    /// with another. Never expected here.
    lost: u64,
}

/// The application: `tasks` tasks each add 1 to the counter `increments` times, each time with a
/// `GET` then a separate `SET` that only the lock keeps exact. It works with any backend.
async fn run_workers<B: LockBackend>(
    locker: &Locker<B>,
    data_url: &str,
    args: &Args,
) -> Result<Releases, BoxError> {
    let key = counter_key(args);
    let raw = raw_connection(data_url).await?;
    let mut tasks = JoinSet::new();
    for _ in 0..args.tasks {
        let (locker, mut raw) = (locker.clone(), raw.clone());
        let (lock_name, key, increments) = (args.lock_name.clone(), key.clone(), args.increments);
        tasks.spawn(async move {
            let mut releases = Releases::default();
            for _ in 0..increments {
                // Each task is its own owner: `lock()` is owned by the current tokio task.
                let guard = locker.lock(&lock_name).await?;
                let value: Option<u64> = redis::cmd("GET").arg(&key).query_async(&mut raw).await?;
                redis::cmd("SET")
                    .arg(&key)
                    .arg(value.unwrap_or(0) + 1)
                    .exec_async(&mut raw)
                    .await?;
                match guard.release().await? {
                    ReleaseOutcome::Released => releases.released += 1,
                    ReleaseOutcome::PartlyReleased { .. } => releases.partly += 1,
                    _ => releases.lost += 1,
                }
            }
            Ok::<_, BoxError>(releases)
        });
    }
    let mut total = Releases::default();
    while let Some(result) = tasks.join_next().await {
        let releases = result??;
        total.released += releases.released;
        total.partly += releases.partly;
        total.lost += releases.lost;
    }
    Ok(total)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let setup = match make_locker(&args).await {
        Ok(setup) => setup,
        Err(code) => return code,
    };
    println!("backend: {}", setup.description);
    let expected = u64::from(args.tasks) * u64::from(args.increments);
    println!(
        "{} tasks x {} increments under the lock {:?}",
        args.tasks, args.increments, args.lock_name
    );

    let run = async {
        let key = counter_key(&args);
        let mut raw = raw_connection(&setup.data_url).await?;
        redis::cmd("SET")
            .arg(&key)
            .arg(0)
            .exec_async(&mut raw)
            .await?;
        let releases = run_workers(&setup.locker, &setup.data_url, &args).await?;
        let total: Option<u64> = redis::cmd("GET").arg(&key).query_async(&mut raw).await?;
        Ok::<_, BoxError>((total.unwrap_or(0), releases))
    };
    let (total, releases) = match run.await {
        Ok(result) => result,
        Err(error) => return fail(error),
    };
    println!(
        "releases: {} Released, {} PartlyReleased (a node unreachable), {} NotHeld",
        releases.released, releases.partly, releases.lost
    );
    println!("counter: {total} (expected {expected})");
    if total != expected {
        eprintln!("MISMATCH: the lock did not protect the counter");
        return ExitCode::FAILURE;
    }
    if releases.lost > 0 {
        eprintln!("FAILED: a release found the lock no longer held");
        return ExitCode::FAILURE;
    }
    println!("OK: every increment was made under the lock");
    ExitCode::SUCCESS
}

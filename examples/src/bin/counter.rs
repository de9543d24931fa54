//! The classic distributed-lock demo: many tasks, optionally spread over several OS processes,
//! each increment a counter kept in Redis with a plain `GET` then `SET`: a read-modify-write that
//! is deliberately not atomic, so only the lock makes the final total exact.
//!
//! ```text
//! cargo run -p distlock-examples --bin counter -- --tasks 500 --processes 2
//! cargo run -p distlock-examples --bin counter -- --url redis://127.0.0.1:6379/ --increments 10
//! cargo run -p distlock-examples --bin counter -- --cluster redis://127.0.0.1:7000/,redis://127.0.0.1:7001/
//! cargo run -p distlock-examples --bin counter -- --sentinel redis://127.0.0.1:26379/ --service mymaster
//! cargo run -p distlock-examples --bin counter -- --url rediss://127.0.0.1:6380/ \
//!     --tls-ca ca.crt --tls-cert client.crt --tls-key client.key
//! ```
//!
//! `--tls-ca` (a CA bundle to trust) and `--tls-cert` with `--tls-key` (a client certificate for
//! mutual TLS) apply to `rediss://` URLs in every mode: the locks and the counter's own
//! connections.
//!
//! Without `--url`, `--cluster` or `--sentinel` a private `redis-server` is started for the run. With `--processes P` the
//! program re-executes itself P times as worker processes (hidden `--child` flag), all talking to
//! the same server; the parent resets the counter before and reads it after they all exit.
//! Exits with 1 when the total is wrong (or a worker failed), 2 when no server could be started.

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use distlock::{LockBackend, ReleaseOutcome};
use distlock_examples::{DemoRedis, DemoTls, Deployment, RawConnection};
use tokio::task::JoinSet;
use tokio::time::Instant;

type BoxError = Box<dyn Error + Send + Sync>;

/// Increment a Redis counter from many tasks and processes under one distlock lock.
#[derive(Parser, Debug)]
#[command(name = "counter")]
struct Args {
    /// Redis URL (`redis://host:port/`, `rediss://` for TLS). Without it (or `--cluster`,
    /// `--sentinel`) a private redis-server is started for the run.
    #[arg(long, conflicts_with_all = ["cluster", "sentinel"])]
    url: Option<String>,

    /// A Redis Cluster: seed URLs, comma-separated.
    #[arg(long, value_delimiter = ',', conflicts_with = "sentinel")]
    cluster: Vec<String>,

    /// Sentinels (URLs, comma-separated) watching the primary named by `--service`.
    #[arg(long, value_delimiter = ',', requires = "service")]
    sentinel: Vec<String>,

    /// The Sentinel service name (with `--sentinel`).
    #[arg(long, requires = "sentinel")]
    service: Option<String>,

    /// A CA bundle (PEM) to trust for `rediss://` URLs instead of the webpki roots, in every
    /// mode (the Sentinels and the data nodes alike).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,

    /// A client certificate (PEM) for mutual TLS, with `--tls-key`.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// The private key (PEM) of `--tls-cert`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// The lock name. The counter is kept in the key `<lock-name>:value`.
    #[arg(long, default_value = "distlock:demo:counter")]
    lock_name: String,

    /// How many tasks in total, over all processes.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    tasks: u32,

    /// How many OS processes to spread the tasks over.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    processes: u32,

    /// How many increments each task makes (one lock / GET / SET / release cycle each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    increments: u32,

    /// Skip the lock, to see the race it prevents: the total then comes out short.
    #[arg(long)]
    no_lock: bool,

    /// Run as a worker process of a multi-process run (set by the parent).
    #[arg(long, hide = true)]
    child: bool,
}

impl Args {
    /// The deployment named on the command line, if any.
    fn deployment(&self) -> Option<Deployment> {
        if !self.cluster.is_empty() {
            return Some(Deployment::Cluster(self.cluster.clone()));
        }
        if let (false, Some(service)) = (self.sentinel.is_empty(), &self.service) {
            return Some(Deployment::Sentinel {
                sentinels: self.sentinel.clone(),
                service: service.clone(),
            });
        }
        self.url.clone().map(Deployment::Single)
    }

    /// The TLS files named on the command line, read.
    fn tls(&self) -> std::io::Result<DemoTls> {
        DemoTls::from_files(
            self.tls_ca.clone(),
            self.tls_cert.clone(),
            self.tls_key.clone(),
        )
    }
}

/// The key holding the counter.
fn counter_key(lock_name: &str) -> String {
    format!("{lock_name}:value")
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let result = if args.child {
        child(&args).await
    } else {
        parent(args).await
    };
    result.unwrap_or_else(|error| {
        eprintln!("error: {error}");
        ExitCode::FAILURE
    })
}

async fn parent(args: Args) -> Result<ExitCode, BoxError> {
    let tls = args.tls()?;
    // A private server only when no deployment is named.
    let (deployment, _private) = match args.deployment() {
        Some(deployment) => (deployment, None),
        None => match DemoRedis::from_arg(None) {
            Ok(redis) => (Deployment::Single(redis.url().to_owned()), Some(redis)),
            Err(code) => return Ok(code),
        },
    };
    let processes = args.processes.min(args.tasks);
    let expected = u64::from(args.tasks) * u64::from(args.increments);
    let key = counter_key(&args.lock_name);
    println!(
        "{} task(s) x {} increment(s) over {processes} process(es); lock {:?}, counter key {key:?}",
        args.tasks, args.increments, args.lock_name
    );

    let mut raw = deployment.raw(&tls).await?;
    let mut reset = redis::cmd("SET");
    reset.arg(&key).arg(0);
    raw.query::<()>(&reset).await?;

    // In a task of its own, like the workers: `lock()` is owned by the current tokio task.
    tokio::spawn(show_layout(
        deployment.clone(),
        tls.clone(),
        args.lock_name.clone(),
    ))
    .await??;

    let started = Instant::now();
    let mut failed = false;
    let tally = if processes == 1 {
        run_tasks(
            &deployment,
            &tls,
            &args.lock_name,
            args.tasks,
            args.increments,
            !args.no_lock,
        )
        .await?
    } else {
        // Re-execute this very binary as worker processes, all on the same server.
        let exe = std::env::current_exe()?;
        let mut children = Vec::new();
        for index in 0..processes {
            let share = args.tasks / processes + u32::from(index < args.tasks % processes);
            let child = tokio::process::Command::new(&exe)
                .arg("--child")
                .args(deployment.flags())
                .args(tls.flags())
                .args(["--lock-name", &args.lock_name])
                .args(["--tasks", &share.to_string()])
                .args(["--increments", &args.increments.to_string()])
                .args(args.no_lock.then_some("--no-lock"))
                .kill_on_drop(true)
                .spawn()?;
            children.push(child);
        }
        for mut child in children {
            let status = child.wait().await?;
            if !status.success() {
                eprintln!("a worker process failed: {status}");
                failed = true;
            }
        }
        Tally::default()
    };
    let elapsed = started.elapsed();

    let mut read = redis::cmd("GET");
    read.arg(&key);
    let actual: Option<u64> = raw.query(&read).await?;
    let actual = actual.unwrap_or(0);
    let seconds = elapsed.as_secs_f64();
    println!("expected total: {expected}");
    println!("actual total:   {actual}");
    println!(
        "elapsed: {:.3} s, {:.0} increments per second{}",
        seconds,
        expected as f64 / seconds.max(f64::EPSILON),
        if processes > 1 {
            " (including worker process start-up)"
        } else {
            ""
        }
    );
    if args.no_lock {
        println!("(--no-lock: the increments ran without the lock)");
    } else if processes == 1 {
        tally.report("this process");
        failed |= !tally.clean();
    }
    if failed {
        eprintln!("FAILED: a task or worker process reported an error or a lost lock");
        return Ok(ExitCode::FAILURE);
    }
    if actual != expected {
        if args.no_lock {
            eprintln!(
                "MISMATCH: {} increments lost to the race (as expected without the lock)",
                expected.saturating_sub(actual)
            );
        } else {
            eprintln!("MISMATCH: the lock did not protect the counter");
        }
        return Ok(ExitCode::FAILURE);
    }
    println!("OK: every increment was made under the lock");
    Ok(ExitCode::SUCCESS)
}

/// A worker process of a multi-process run.
async fn child(args: &Args) -> Result<ExitCode, BoxError> {
    let deployment = args
        .deployment()
        .ok_or("--child needs --url, --cluster or --sentinel")?;
    let tls = args.tls()?;
    let tally = run_tasks(
        &deployment,
        &tls,
        &args.lock_name,
        args.tasks,
        args.increments,
        !args.no_lock,
    )
    .await?;
    let who = format!("worker pid {} ({} tasks)", std::process::id(), args.tasks);
    if args.no_lock {
        println!("{who}: done, without the lock");
    } else {
        tally.report(&who);
    }
    Ok(if tally.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Takes the lock once, before the run, and prints what it looks like on the server: Redisson's
/// `RLock` layout.
async fn show_layout(
    deployment: Deployment,
    tls: DemoTls,
    lock_name: String,
) -> Result<(), BoxError> {
    let lock_name = lock_name.as_str();
    let locker = deployment.locker(&tls).await?;
    let guard = locker.lock(lock_name).await?;
    let mut raw = deployment.raw(&tls).await?;
    let mut hgetall = redis::cmd("HGETALL");
    hgetall.arg(lock_name);
    let fields: Vec<(String, String)> = raw.query(&hgetall).await?;
    let mut pttl = redis::cmd("PTTL");
    pttl.arg(lock_name);
    let pttl: i64 = raw.query(&pttl).await?;
    let fields: Vec<String> = fields
        .iter()
        .map(|(field, count)| format!("{field:?}: {count}"))
        .collect();
    println!("the lock on the server while held (Redisson's RLock layout):");
    println!("  HGETALL {lock_name}  ->  {{{}}}", fields.join(", "));
    println!(
        "      field = <client id>:<holder id> = {}:{} (this client's UUID : the id of the holding tokio task)",
        locker.backend().client_id(),
        guard.owner()
    );
    println!(
        "  PTTL {lock_name}  ->  {pttl} ms (30 s watchdog lease, renewed every 10 s while held)"
    );
    println!(
        "  release channel: {} (a release publishes \"0\" there; waiters subscribe to it)",
        distlock::redis::keys::channel(lock_name)
    );
    match guard.release().await? {
        ReleaseOutcome::Released => Ok(()),
        other => Err(format!("releasing the layout demo lock gave {other:?}").into()),
    }
}

/// How the releases of one process went.
#[derive(Debug, Default)]
struct Tally {
    /// Releases that freed the lock: the expected outcome.
    released: u64,
    /// Releases that found the lock no longer ours (expired or deleted while we held it): the
    /// increment may have overlapped with another holder's.
    not_held: u64,
    /// Any other outcome (a reentrant hold left over): not expected here, each task holds once.
    other: u64,
    /// Releases that failed (their outcome unknown: the lease ends the hold).
    release_errors: u64,
}

impl Tally {
    fn clean(&self) -> bool {
        self.not_held == 0 && self.other == 0
    }

    fn add(&mut self, other: &Tally) {
        self.released += other.released;
        self.not_held += other.not_held;
        self.other += other.other;
        self.release_errors += other.release_errors;
    }

    fn report(&self, who: &str) {
        println!(
            "{who}: release() outcomes: {} Released, {} NotHeld, {} other, {} failed",
            self.released, self.not_held, self.other, self.release_errors
        );
    }
}

/// Runs `tasks` tasks in this process, each making `increments` increments, each under the lock.
async fn run_tasks(
    deployment: &Deployment,
    tls: &DemoTls,
    lock_name: &str,
    tasks: u32,
    increments: u32,
    use_lock: bool,
) -> Result<Tally, BoxError> {
    // One locker (one client id, one watchdog, one pub/sub subscription) for the whole process;
    // each task is its own owner, since `lock()` is owned by the current tokio task.
    let locker = deployment.locker(tls).await?;
    let raw: RawConnection = deployment.raw(tls).await?;
    let key = counter_key(lock_name);
    let mut set = JoinSet::new();
    for _ in 0..tasks {
        let locker = locker.clone();
        let mut raw = raw.clone();
        let lock_name = lock_name.to_owned();
        let key = key.clone();
        set.spawn(async move {
            let mut tally = Tally::default();
            for _ in 0..increments {
                // The critical section: a read-modify-write that is not atomic on its own.
                let increment = async {
                    let mut read = redis::cmd("GET");
                    read.arg(&key);
                    let value: Option<u64> = raw.query(&read).await?;
                    let mut write = redis::cmd("SET");
                    write.arg(&key).arg(value.unwrap_or(0) + 1);
                    raw.query::<()>(&write).await
                };
                if !use_lock {
                    increment.await?;
                    continue;
                }
                // A failover or a slot move can make a call time out or fail for a moment:
                // such errors are retryable (the locker has cleaned up after the attempt), so
                // try again, for up to a minute, as an application would.
                let mut retry_until = None;
                let guard = loop {
                    match locker.lock(&lock_name).await {
                        Ok(guard) => break guard,
                        Err(error) if error.is_retryable() => {
                            let until = *retry_until.get_or_insert_with(|| {
                                Instant::now() + std::time::Duration::from_secs(60)
                            });
                            if Instant::now() >= until {
                                return Err(error.into());
                            }
                            eprintln!("lock: {error}; trying again");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                        Err(error) => return Err(error.into()),
                    }
                };
                // Race it against the loss of the lease: never keep writing without the lock.
                tokio::select! {
                    written = increment => written?,
                    loss = guard.lost() => {
                        return Err(format!("lease lost during an increment: {loss:?}").into());
                    }
                }
                // Check what the release says: NotHeld means the lock expired or was deleted
                // while we held it, so another holder may have run at the same time.
                // A release that fails (a timeout during a failover) leaves the lock to its
                // lease at worst: slower, never wrong. Counted and reported, not fatal.
                let released = match guard.release().await {
                    Ok(outcome) => outcome,
                    Err(error) => {
                        eprintln!("warning: release failed ({error}); the lease ends the hold");
                        tally.release_errors += 1;
                        continue;
                    }
                };
                match released {
                    ReleaseOutcome::Released => tally.released += 1,
                    ReleaseOutcome::NotHeld => {
                        eprintln!("warning: the lock was no longer ours at release");
                        tally.not_held += 1;
                    }
                    other => {
                        eprintln!("warning: unexpected release outcome {other:?}");
                        tally.other += 1;
                    }
                }
            }
            Ok::<Tally, BoxError>(tally)
        });
    }
    let mut total = Tally::default();
    let mut first_error = None;
    while let Some(joined) = set.join_next().await {
        match joined? {
            Ok(tally) => total.add(&tally),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(total),
    }
}

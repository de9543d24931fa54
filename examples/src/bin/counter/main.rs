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
//!
//! # On PostgreSQL
//!
//! ```text
//! cargo run -p distlock-examples --bin counter -- --postgres --tasks 500 --processes 2
//! cargo run -p distlock-examples --bin counter -- --postgres postgres://app@127.0.0.1/app
//! ```
//!
//! With `--postgres URL` the locks are distlock's PostgreSQL backend (the schema installed on
//! the way) and the counter is a row of a table in the same database; `--postgres` alone starts
//! a private PostgreSQL for the run. There the critical section also shows fencing: the read
//! claims the row with the grant's fencing token and the write only lands while the row still
//! carries it, so a holder whose lease ran out cannot overwrite a newer holder's count (see
//! `postgres.rs`).
//!
//! # Riding through stalls
//!
//! A server that stalls for a moment (a slow disk, a fork for a snapshot, a paused VM; on one
//! server or a cluster, a failover) delays the locks and the counter's own `GET` and `SET` alike. The locks ride
//! through it: each call waits up to the backend's command timeout, and a failed `lock()` is
//! tried again. The counter's data calls do the same (see [`retry_while_held`]): their
//! connection waits as long for a reply as the locks do (`--command-timeout`, one setting for
//! both), and a call that times out or loses its connection is tried again as long as the lock
//! is still held, never after `lost()` has fired.

use std::error::Error;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

mod postgres;

use clap::Parser;
use distlock::backend::LockBackend;
use distlock::{
    Fencing, LeaseLoss, LockGuard, LockKind, LockOptions, Locker, RedisBackend, RedisLocker,
    ReleaseOutcome,
};
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
    #[arg(long, conflicts_with_all = ["cluster", "sentinel", "postgres"])]
    url: Option<String>,

    /// PostgreSQL instead of Redis: the locks on distlock's PostgreSQL backend and the counter
    /// in a table of the same database (`postgres://user@host:port/db`). Without a URL a
    /// private PostgreSQL server is started for the run.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "",
          conflicts_with_all = ["cluster", "sentinel", "tls_ca", "tls_cert"])]
    postgres: Option<String>,

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

    /// The lock kind: `reentrant` (the default, Redisson's `RLock` layout) or `fast` (a plain
    /// string key; the one that runs on a server without scripts but with `SET IFEQ` and
    /// `DELIFEQ`/`DELEX`).
    #[arg(long, value_enum, default_value_t = Kind::Reentrant)]
    kind: Kind,

    /// How many tasks in total, over all processes.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    tasks: u32,

    /// How many OS processes to spread the tasks over.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    processes: u32,

    /// How many increments each task makes (one lock / GET / SET / release cycle each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    increments: u32,

    /// The timeout of each call to the server: the lock backend's command timeout, and the
    /// same for the reply to each of the counter's own `GET`s and `SET`s (one setting, so that a
    /// stall the locks ride through does not fail the data calls made under them).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout,
          default_value_t = distlock::redis::DEFAULT_COMMAND_TIMEOUT.into())]
    command_timeout: humantime::Duration,

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

    /// The timeout of every call to the server, the locks' and the counter's own.
    fn command_timeout(&self) -> Duration {
        self.command_timeout.into()
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

/// `--kind`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Kind {
    Reentrant,
    Fast,
}

impl Kind {
    fn lock_kind(self) -> LockKind {
        match self {
            Kind::Reentrant => LockKind::Reentrant,
            Kind::Fast => LockKind::Fast,
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Kind::Reentrant => "reentrant",
            Kind::Fast => "fast",
        }
    }
}

/// Where the locks are and how they connect: what every process needs to make its locker.
#[derive(Clone)]
struct Locks {
    deployment: Deployment,
    tls: DemoTls,
    timeout: Duration,
    kind: LockKind,
}

impl Locks {
    async fn locker(&self) -> distlock::Result<RedisLocker> {
        self.deployment
            .locker_of_kind(&self.tls, self.timeout, self.kind)
            .await
    }
}

/// `--command-timeout`: a duration such as `3s` or `800ms`, at least 1 ms (the lock backend
/// refuses more than an hour itself).
fn parse_timeout(text: &str) -> Result<humantime::Duration, String> {
    let timeout: humantime::Duration = text.parse().map_err(|error| format!("{error}"))?;
    if *timeout < Duration::from_millis(1) {
        return Err("the command timeout must be at least 1ms".into());
    }
    Ok(timeout)
}

/// The key holding the counter.
fn counter_key(lock_name: &str) -> String {
    format!("{lock_name}:value")
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let result = if args.postgres.is_some() {
        postgres::main(&args).await
    } else if args.child {
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

    let timeout = args.command_timeout();
    let mut raw = deployment.raw(&tls, timeout).await?;
    let mut reset = redis::cmd("SET");
    reset.arg(&key).arg(0);
    // No lock here (the workers have not started, or are done): nothing can be lost, and
    // setting or reading a value twice does no harm, so every stall is waited out.
    retry_while_held::<()>(never_lost(), &mut raw, &reset).await?;

    // In a task of its own, like the workers: `lock()` is owned by the current tokio task.
    let locks = Locks {
        deployment: deployment.clone(),
        tls: tls.clone(),
        timeout,
        kind: args.kind.lock_kind(),
    };
    tokio::spawn(show_layout(locks.clone(), args.lock_name.clone())).await??;

    let started = Instant::now();
    let mut failed = false;
    let tally = if processes == 1 {
        run_tasks(
            &locks,
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
                .args(["--command-timeout", &args.command_timeout.to_string()])
                .args(["--kind", args.kind.flag()])
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
    let actual: Option<u64> = retry_while_held(never_lost(), &mut raw, &read).await?;
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
    let locks = Locks {
        deployment,
        tls,
        timeout: args.command_timeout(),
        kind: args.kind.lock_kind(),
    };
    let tally = run_tasks(
        &locks,
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
async fn show_layout(locks: Locks, lock_name: String) -> Result<(), BoxError> {
    let lock_name = lock_name.as_str();
    let locker = locks.locker().await?;
    let guard = locker.lock(lock_name).await?;
    let mut raw = locks.deployment.raw(&locks.tls, locks.timeout).await?;
    if locks.kind == LockKind::Fast {
        let mut get = redis::cmd("GET");
        get.arg(lock_name);
        let owner: String = raw.query(&get).await?;
        println!("the lock on the server while held (the fast lock: a string key):");
        println!("  GET {lock_name}  ->  {owner:?} (<client id>:<holder id>)");
        return match guard.release().await? {
            ReleaseOutcome::Released => Ok(()),
            other => Err(format!("releasing the layout demo lock gave {other:?}").into()),
        };
    }
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

/// How the increments of one process went.
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
    /// Leases lost before the `SET` was sent: nothing was written, the increment was made again
    /// under a new hold. Harmless.
    lost_before_write: u64,
    /// Leases lost while the `SET` was in flight: it may or may not have been applied, so the
    /// total can no longer be trusted.
    lost_during_write: u64,
    /// Writes the store refused because a newer holder had claimed the data with a higher
    /// fencing token (PostgreSQL only): nothing was written, the increment was made again.
    fenced_off: u64,
}

impl Tally {
    fn clean(&self) -> bool {
        self.not_held == 0 && self.other == 0 && self.lost_during_write == 0
    }

    fn add(&mut self, other: &Tally) {
        self.released += other.released;
        self.not_held += other.not_held;
        self.other += other.other;
        self.release_errors += other.release_errors;
        self.lost_before_write += other.lost_before_write;
        self.lost_during_write += other.lost_during_write;
        self.fenced_off += other.fenced_off;
    }

    fn report(&self, who: &str) {
        println!(
            "{who}: release() outcomes: {} Released, {} NotHeld, {} other, {} failed; \
             leases lost mid-section: {} before the write (redone), {} during it; \
             writes refused by a fencing token: {} (redone)",
            self.released,
            self.not_held,
            self.other,
            self.release_errors,
            self.lost_before_write,
            self.lost_during_write,
            self.fenced_off
        );
    }
}

/// How long a task keeps trying a call again (`lock()` or a data call) before it gives up, as
/// an application would: long enough for a failover, short enough to notice a server that is
/// gone.
const RETRY_WINDOW: Duration = Duration::from_secs(60);

/// The first pause before a data call is tried again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(20);

/// The longest pause between two tries of a data call.
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Why a data call gave up.
#[derive(Debug)]
enum Interrupted {
    /// The lease was lost (`lost()` fired): stop, and send nothing more under that hold.
    Lost(LeaseLoss),
    /// An error that trying again cannot fix, or a retryable one that outlasted
    /// [`RETRY_WINDOW`].
    Failed(redis::RedisError),
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Interrupted::Lost(loss) => write!(f, "the lease was lost ({loss:?})"),
            Interrupted::Failed(error) => write!(f, "{error}"),
        }
    }
}

impl Error for Interrupted {}

/// Whether trying `error`'s call again can help: the reply did not come within the timeout
/// (a stalled server), the connection was lost (the next call reconnects), or the server asked
/// to come back later (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`). Anything else
/// (a wrong type, a refused command) fails the same way every time.
fn is_retryable(error: &redis::RedisError) -> bool {
    error.is_timeout()
        || error.is_connection_dropped()
        || matches!(error.retry_method(), redis::RetryMethod::WaitAndRetry)
}

/// A `lost()` that never fires, for calls made without the lock (the parent's reset and final
/// read), where nothing can be lost.
fn never_lost() -> impl Future<Output = LeaseLoss> {
    std::future::pending()
}

/// Runs `command` on `raw`, and tries it again after a retryable error (see [`is_retryable`]),
/// with a small growing pause between tries, as long as `lost` (the guard's `lost()`) has not
/// fired and [`RETRY_WINDOW`] has not passed.
///
/// Only for commands that may run more than once: a try that timed out may still be applied
/// later (the server was only slow), so the server can end up running the first try *and* the
/// retry. A `GET` may; so may a `SET` of an absolute value computed under the lock (see
/// [`increment_under`] for why).
///
/// The loss of the lease wins every race (a biased `select!` that looks at `lost` first): once
/// `lost()` has fired, no further try is sent, and a reply that comes at the same moment is
/// not trusted.
async fn retry_while_held<T: redis::FromRedisValue>(
    lost: impl Future<Output = LeaseLoss>,
    raw: &mut RawConnection,
    command: &redis::Cmd,
) -> Result<T, Interrupted> {
    tokio::pin!(lost);
    let give_up_at = Instant::now() + RETRY_WINDOW;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let error = tokio::select! {
            biased;
            loss = &mut lost => return Err(Interrupted::Lost(loss)),
            reply = raw.query(command) => match reply {
                Ok(value) => return Ok(value),
                Err(error) => error,
            },
        };
        if !is_retryable(&error) || Instant::now() + backoff >= give_up_at {
            return Err(Interrupted::Failed(error));
        }
        eprintln!("data call: {error}; trying again while the lock is held");
        tokio::select! {
            biased;
            loss = &mut lost => return Err(Interrupted::Lost(loss)),
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// How one increment under the lock went.
enum Increment {
    /// Read, incremented and written while the lock was held.
    Done,
    /// The lease was lost before the `SET` was sent: nothing was written.
    LostBeforeWrite(LeaseLoss),
    /// The lease was lost while the `SET` was in flight: it may or may not have been applied.
    LostDuringWrite(LeaseLoss),
}

/// The critical section: a read-modify-write of the counter at `key` that is not atomic on its
/// own, made while `guard` holds the lock.
async fn increment_under(
    guard: &LockGuard<RedisBackend>,
    raw: &mut RawConnection,
    key: &str,
) -> Result<Increment, redis::RedisError> {
    let mut read = redis::cmd("GET");
    read.arg(key);
    let value: Option<u64> = match retry_while_held(guard.lost(), raw, &read).await {
        Ok(value) => value,
        Err(Interrupted::Lost(loss)) => return Ok(Increment::LostBeforeWrite(loss)),
        Err(Interrupted::Failed(error)) => return Err(error),
    };
    // Trying this SET again after a timeout is safe for two reasons, and only for them:
    // - the value is absolute: a try that timed out may still be applied (the server was only
    //   slow), and `SET key n+1` applied twice still leaves n+1, where an `INCR` tried again
    //   would count twice;
    // - the lock is still held (retry_while_held stops as soon as `lost()` fires), so nobody
    //   has written since our GET, and n+1 is still the right value. Once the lock is lost, a
    //   retry could overwrite another holder's newer value with our stale one.
    // On one server the tries go down one connection, in order (a cluster client may resend on
    // a new connection of its own): when the retry's reply comes, the first try
    // has been applied or dropped, before the lock is released. Only a try left behind in a
    // connection that was lost could still land later, after the next holder's write: closing
    // that gap takes a store that checks fencing tokens (`LockOptions::fenced`), which a
    // plain Redis SET does not.
    let mut write = redis::cmd("SET");
    write.arg(key).arg(value.unwrap_or(0) + 1);
    match retry_while_held::<()>(guard.lost(), raw, &write).await {
        Ok(()) => Ok(Increment::Done),
        Err(Interrupted::Lost(loss)) => Ok(Increment::LostDuringWrite(loss)),
        Err(Interrupted::Failed(error)) => Err(error),
    }
}

/// Takes the lock `name`, trying again after a retryable error for up to [`RETRY_WINDOW`].
async fn acquire(locker: &RedisLocker, name: &str) -> Result<LockGuard<RedisBackend>, BoxError> {
    acquire_with(locker, name, &LockOptions::new()).await
}

/// Takes the lock `name` with `options` (for a fencing token, say), trying again after a
/// retryable error for up to [`RETRY_WINDOW`].
async fn acquire_with<B: LockBackend, F: Fencing>(
    locker: &Locker<B>,
    name: &str,
    options: &LockOptions<F>,
) -> Result<LockGuard<B, F>, BoxError> {
    // A stall, a failover or a slot move can make a call time out or fail for a moment: such
    // errors are retryable (the locker has cleaned up after the attempt), so try again, as an
    // application would.
    let mut give_up_at = None;
    loop {
        match locker.lock_with(name, options).await {
            Ok(guard) => return Ok(guard),
            Err(error) if error.is_retryable() => {
                let until = *give_up_at.get_or_insert_with(|| Instant::now() + RETRY_WINDOW);
                if Instant::now() >= until {
                    return Err(error.into());
                }
                eprintln!("lock: {error}; trying again");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Releases `guard` and counts the outcome in `tally`.
async fn release<B: LockBackend, F: Fencing>(guard: LockGuard<B, F>, tally: &mut Tally) {
    // Check what the release says: NotHeld means the lock expired or was deleted while we held
    // it, so another holder may have run at the same time. A release that fails (a timeout
    // during a failover) leaves the lock to its lease at worst: slower, never wrong. Counted
    // and reported, not fatal.
    match guard.release().await {
        Ok(ReleaseOutcome::Released) => tally.released += 1,
        Ok(ReleaseOutcome::NotHeld) => {
            eprintln!("warning: the lock was no longer ours at release");
            tally.not_held += 1;
        }
        Ok(other) => {
            eprintln!("warning: unexpected release outcome {other:?}");
            tally.other += 1;
        }
        Err(error) => {
            eprintln!("warning: release failed ({error}); the lease ends the hold");
            tally.release_errors += 1;
        }
    }
}

/// Runs `tasks` tasks in this process, each making `increments` increments, each under the lock.
async fn run_tasks(
    locks: &Locks,
    lock_name: &str,
    tasks: u32,
    increments: u32,
    use_lock: bool,
) -> Result<Tally, BoxError> {
    // One locker (one client id, one watchdog, one pub/sub subscription) for the whole process;
    // each task is its own owner, since `lock()` is owned by the current tokio task. The data
    // connection waits for replies as long as the locks do.
    let locker = locks.locker().await?;
    let raw: RawConnection = locks.deployment.raw(&locks.tls, locks.timeout).await?;
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
                if !use_lock {
                    // The race the lock prevents, on display: no retries either.
                    let mut read = redis::cmd("GET");
                    read.arg(&key);
                    let value: Option<u64> = raw.query(&read).await?;
                    let mut write = redis::cmd("SET");
                    write.arg(&key).arg(value.unwrap_or(0) + 1);
                    raw.query::<()>(&write).await?;
                    continue;
                }
                loop {
                    let guard = acquire(&locker, &lock_name).await?;
                    match increment_under(&guard, &mut raw, &key).await? {
                        Increment::Done => {
                            release(guard, &mut tally).await;
                            break;
                        }
                        Increment::LostBeforeWrite(loss) => {
                            // Nothing was written: take the lock again and make this
                            // increment anew. (The release frees the lock if it is still
                            // ours after all, e.g. the lease ran out here but not yet on the
                            // server, and stops the watchdog.)
                            eprintln!(
                                "warning: lease lost ({loss:?}) before the write; nothing written, taking the lock again"
                            );
                            tally.lost_before_write += 1;
                            let _ = guard.release().await;
                        }
                        Increment::LostDuringWrite(loss) => {
                            // The write may or may not have landed: making it again could
                            // count it twice, not making it could count it never. Stop here
                            // and report it.
                            eprintln!(
                                "warning: lease lost ({loss:?}) while the write was in flight; it may or may not have landed"
                            );
                            tally.lost_during_write += 1;
                            let _ = guard.release().await;
                            break;
                        }
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

#[cfg(test)]
mod tests {
    //! [`retry_while_held`] against a real server frozen with `SIGSTOP` (the end-to-end run
    //! through stalls is in `tests/counter_stalls.rs`).

    use super::*;
    use lock_testkit::RedisServer;

    /// A server, the counter's connection to it with `timeout` for each reply, and a command.
    async fn setup(timeout: Duration) -> (RedisServer, RawConnection) {
        let server = RedisServer::start().expect("start a server");
        let raw = Deployment::Single(server.url())
            .raw(&DemoTls::default(), timeout)
            .await
            .expect("connect");
        (server, raw)
    }

    fn get(key: &str) -> redis::Cmd {
        let mut command = redis::cmd("GET");
        command.arg(key);
        command
    }

    fn set(key: &str, value: u64) -> redis::Cmd {
        let mut command = redis::cmd("SET");
        command.arg(key).arg(value);
        command
    }

    /// The server frozen now and thawed after `stall`, by a thread that hands it back.
    fn stall(mut server: RedisServer, stall: Duration) -> std::thread::JoinHandle<RedisServer> {
        server.pause().expect("SIGSTOP the server");
        std::thread::spawn(move || {
            std::thread::sleep(stall);
            server.resume().expect("SIGCONT the server");
            server
        })
    }

    #[tokio::test]
    async fn a_call_is_tried_again_through_a_stall_longer_than_its_timeout() {
        let (server, mut raw) = setup(Duration::from_millis(200)).await;
        retry_while_held::<()>(never_lost(), &mut raw, &set("k", 7))
            .await
            .expect("SET");
        let started = Instant::now();
        let thawed = stall(server, Duration::from_millis(900));
        // Four timeouts or so, then the answer.
        let value: Option<u64> = retry_while_held(never_lost(), &mut raw, &get("k"))
            .await
            .expect("the GET, tried until the server answered");
        assert_eq!(value, Some(7));
        assert!(started.elapsed() >= Duration::from_millis(900));
        drop(thawed.join().expect("the thawing thread"));
    }

    #[tokio::test]
    async fn a_call_is_tried_again_on_a_new_connection_after_a_restart() {
        let (mut server, mut raw) = setup(Duration::from_millis(500)).await;
        server.restart().expect("restart the server on its port");
        // The first try finds the connection lost; the next ones go over a new one.
        let value: Option<u64> = retry_while_held(never_lost(), &mut raw, &get("k"))
            .await
            .expect("the GET, on a new connection");
        assert_eq!(value, None, "a fresh server without persistence");
    }

    #[tokio::test]
    async fn nothing_is_sent_once_the_lease_is_lost() {
        let (server, mut raw) = setup(Duration::from_millis(200)).await;
        let lost = std::future::ready(LeaseLoss::NotOurs);
        let outcome = retry_while_held::<()>(lost, &mut raw, &set("k", 1)).await;
        assert!(matches!(
            outcome,
            Err(Interrupted::Lost(LeaseLoss::NotOurs))
        ));
        let value: Option<u64> = raw.query(&get("k")).await.expect("GET");
        assert_eq!(value, None, "the SET was not sent");
        drop(server);
    }

    #[tokio::test]
    async fn the_tries_stop_when_the_lease_is_lost_during_a_stall() {
        let (server, mut raw) = setup(Duration::from_millis(200)).await;
        let started = Instant::now();
        let thawed = stall(server, Duration::from_secs(2));
        let lost = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            LeaseLoss::Expired
        };
        let outcome = retry_while_held::<()>(lost, &mut raw, &set("k", 1)).await;
        assert!(matches!(
            outcome,
            Err(Interrupted::Lost(LeaseLoss::Expired))
        ));
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_millis(900),
            "gave up {waited:?} after the stall began, not soon after the loss"
        );
        drop(thawed.join().expect("the thawing thread"));
    }
}

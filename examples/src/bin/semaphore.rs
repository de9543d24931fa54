//! A counting semaphore shared by OS processes: each run takes some permits, holds them for a
//! while and gives them back, printing when it held them, so that several runs started at once
//! can be checked never to hold more permits together than the semaphore has.
//!
//! ```text
//! cargo run -p distlock-examples --bin semaphore -- --url redis://127.0.0.1:6379/ \
//!     --name distlock:demo:exports --permits 2 --acquire 1 --hold-ms 200
//! ```
//!
//! The run connects, creates the semaphore with `--permits` permits unless it exists
//! (`try_set_permits`: only the first run to get there sets the count), waits for `--acquire`
//! permits, and prints on stdout, one line each, with the time in milliseconds since the Unix
//! epoch:
//!
//! - `ACQUIRED <unix-ms>` as soon as it has the permits;
//! - `RELEASING <unix-ms>` after `--hold-ms`, just before giving them back;
//! - `RELEASED <unix-ms>` once they are back.
//!
//! From `ACQUIRED` to `RELEASING` the run surely holds its permits (the take happened before the
//! first line, the give-back after the second): those are the intervals to compare between runs.
//! `RELEASED` can come after another run's `ACQUIRED`, since the permits are back on the server
//! before the reply reaches this run.
//!
//! The semaphore is Redisson's `RSemaphore` (the string key `--name` holds the available
//! permits), so a Java service using `redisson.getSemaphore(name)` shares it. Its permits have
//! no owner and no lease: a run killed while holding leaks them (see `docs/lock-family.md`).
//!
//! With `--leased` the permits are lease-bound instead ([`distlock::Permits`], Redisson's
//! `RPermitExpirableSemaphore`: `redisson.getPermitExpirableSemaphore(name)` shares them): each
//! is held under a watchdog lease (30 s, renewed while the run lives) and comes back by itself
//! at most one lease after a run is killed. The `--acquire` permits are then taken **one at a
//! time**, not in one atomic step: runs that each need several can each end up holding some and
//! waiting for the rest, so keep `--acquire` at 1 when runs compete, or give every run's total a
//! permit to spare. A run whose lease was lost while it held (a stalled process, a server
//! unreachable for a lease) says so and exits with 1.
//!
//! Exits with 0 after giving the permits back; 2 for bad input (0 permits, more permits asked
//! for than the semaphore has, a name or URL the backend refuses), found before anything is
//! sent; 1 for any other failure (a server that cannot be reached, a failed call).

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;

/// Take permits of a distributed counting semaphore, hold them, give them back.
#[derive(Parser, Debug)]
#[command(name = "semaphore")]
struct Args {
    /// Redis URL (`redis://host:port/`, `rediss://` for TLS).
    #[arg(long)]
    url: String,

    /// The semaphore's name (its key on the server).
    #[arg(long)]
    name: String,

    /// The permits the semaphore is created with when it does not exist yet.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    permits: u32,

    /// How many permits to take (at most `--permits`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    acquire: u32,

    /// How long to hold the permits, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    hold_ms: u64,

    /// Take lease-bound permits (Redisson's `RPermitExpirableSemaphore`): each held under a
    /// watchdog lease, and back by itself at most one lease after this run dies. The `--acquire`
    /// permits are taken one at a time, not atomically: runs that each take several can wait
    /// on each other for ever.
    #[arg(long)]
    leased: bool,
}

impl Args {
    /// What clap's own checks cannot say: the permits asked for fit in the semaphore, and the
    /// name is one the backend accepts. Checked before connecting.
    fn check(&self) -> Result<(), String> {
        if self.acquire > self.permits {
            return Err(format!(
                "--acquire {} is more than the semaphore's --permits {}: it could never be granted",
                self.acquire, self.permits
            ));
        }
        distlock::redis::keys::check_name(&self.name).map_err(|error| error.to_string())
    }
}

/// Milliseconds since the Unix epoch: comparable between processes of one machine.
fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(reason) = args.check() {
        eprintln!("error: {reason}");
        return ExitCode::from(2);
    }
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            // Bad input (a URL the backend refuses) is found before any I/O: a usage error.
            if error.is_input_error() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

async fn run(args: &Args) -> distlock::Result<()> {
    // A bad URL is refused here, before any I/O (`Error::InvalidConfig`).
    let locker = distlock::connect(args.url.as_str()).await?;
    if args.leased {
        return run_leased(args, locker.permits(&args.name)?).await;
    }
    let semaphore = locker.semaphore(&args.name)?;
    if semaphore.try_set_permits(args.permits).await? {
        eprintln!("created {:?} with {} permits", args.name, args.permits);
    }

    semaphore.acquire(args.acquire).await?;
    println!("ACQUIRED {}", unix_ms());

    tokio::time::sleep(Duration::from_millis(args.hold_ms)).await;

    println!("RELEASING {}", unix_ms());
    // No retry on an error: a release that failed ambiguously may have given the permits back
    // already, and a second one could then give them back twice.
    let available = semaphore.release(args.acquire).await?;
    println!("RELEASED {}", unix_ms());
    eprintln!(
        "gave back {} permit(s); {available} available",
        args.acquire
    );
    Ok(())
}

/// `--leased`: the same steps with lease-bound permits, one guard per permit.
async fn run_leased(
    args: &Args,
    permits: distlock::Permits<distlock::RedisBackend>,
) -> distlock::Result<()> {
    if permits.try_set_permits(args.permits).await? {
        eprintln!("created {:?} with {} permits", args.name, args.permits);
    }

    // One at a time: each acquire takes one permit (each permit its own owner).
    let mut guards = Vec::new();
    for _ in 0..args.acquire {
        guards.push(permits.acquire().await?);
    }
    println!("ACQUIRED {}", unix_ms());

    tokio::time::sleep(Duration::from_millis(args.hold_ms)).await;

    // A lease lost meanwhile (or a permit found no longer ours at the release) means the permit
    // may have gone to another run: not a clean hold.
    println!("RELEASING {}", unix_ms());
    let mut lost = 0;
    for guard in guards.into_iter().rev() {
        let was_lost = guard.is_lost();
        if !guard.release().await?.was_held() || was_lost {
            lost += 1;
        }
    }
    println!("RELEASED {}", unix_ms());
    if lost > 0 {
        eprintln!("{lost} of {} permit lease(s) lost while held", args.acquire);
        return Err(distlock::Error::LeaseLost);
    }
    let available = permits.state().await?.available.unwrap_or(0);
    eprintln!(
        "gave back {} leased permit(s); {available} available",
        args.acquire
    );
    Ok(())
}

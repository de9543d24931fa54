//! A fair lock shared by OS processes: each run waits for the lock in its turn, holds it for a
//! while and releases it, printing when it held it, so that several runs started one after the
//! other can be checked to be granted in the order they came and never to overlap.
//!
//! ```text
//! cargo run -p distlock-examples --bin fairlock -- --url redis://127.0.0.1:6379/ \
//!     --lock-name distlock:demo:printer --hold-ms 200
//! ```
//!
//! The run connects, waits for the fair lock `--lock-name` (queued behind every run that asked
//! before it), and prints on stdout, one line each, with the time in milliseconds since the Unix
//! epoch:
//!
//! - `ACQUIRED <unix-ms>` as soon as it holds the lock;
//! - `RELEASING <unix-ms>` after `--hold-ms`, just before releasing it;
//! - `RELEASED <unix-ms>` once it is released.
//!
//! From `ACQUIRED` to `RELEASING` the run surely holds the lock (the grant happened before the
//! first line, the release after the second): those are the intervals to compare between runs.
//! `RELEASED` can come after the next run's `ACQUIRED`, since the lock is free on the server
//! (and the next waiter told) before the reply reaches this run.
//!
//! The lock is Redisson's `RFairLock` (the lock hash `--lock-name`, the queue
//! `redisson_lock_queue:{name}`, the deadlines `redisson_lock_timeout:{name}`), so a Java
//! service using `redisson.getFairLock(name)` waits in the same queue (see
//! `docs/lock-family.md`). A run killed while waiting holds the ones behind it up at most
//! `QUEUE_TIMEOUT` (10 s); one killed while holding, until its lease ends (the watchdog's 30 s).
//!
//! Exits with 0 after releasing; 2 for bad input (a name or URL the backend refuses), found
//! before anything is sent; 1 for any other failure (a server that cannot be reached, a failed
//! call).

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use distlock::{Locker, RedisBackend};

/// Wait for a distributed fair lock in turn, hold it, release it.
#[derive(Parser, Debug)]
#[command(name = "fairlock")]
struct Args {
    /// Redis URL (`redis://host:port/`, `rediss://` for TLS).
    #[arg(long)]
    url: String,

    /// The lock's name (its hash on the server).
    #[arg(long)]
    lock_name: String,

    /// How long to hold the lock, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    hold_ms: u64,
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
    // A name the backend refuses is refused here, before connecting.
    if let Err(error) = distlock::redis::keys::check_name(&args.lock_name) {
        eprintln!("error: {error}");
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
    let locker = Locker::new(RedisBackend::connect(args.url.as_str()).await?);
    let fair = locker.fair(&args.lock_name)?;

    let guard = fair.lock().await?;
    println!("ACQUIRED {}", unix_ms());

    tokio::time::sleep(Duration::from_millis(args.hold_ms)).await;

    println!("RELEASING {}", unix_ms());
    let outcome = guard.release().await?;
    println!("RELEASED {}", unix_ms());
    if !outcome.was_held() {
        // The lease ran out while held (a stalled process): the next waiter may have had it.
        eprintln!("the lock was no longer held when released");
    }
    Ok(())
}

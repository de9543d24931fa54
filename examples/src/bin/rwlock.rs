//! A read-write lock shared by OS processes: each run takes the read or the write side of one
//! lock, holds it for a while and releases it, printing when it held it, so that several runs
//! started at once can be checked: readers together, a writer alone.
//!
//! ```text
//! cargo run -p distlock-examples --bin rwlock -- --url redis://127.0.0.1:6379/ \
//!     --lock-name distlock:demo:catalog --mode read --hold-ms 200
//! ```
//!
//! The run connects, waits for the lock in `--mode` (`read`: shared with other readers, kept
//! out by a writer; `write`: alone), and prints on stdout, one line each, with the time in
//! milliseconds since the Unix epoch:
//!
//! - `ACQUIRED <unix-ms>` as soon as it holds the lock;
//! - `RELEASING <unix-ms>` after `--hold-ms`, just before releasing it;
//! - `RELEASED <unix-ms>` once it is released.
//!
//! From `ACQUIRED` to `RELEASING` the run surely holds the lock (granted before the first line,
//! released after the second): those are the intervals to compare between runs. `RELEASED` can
//! come after another run's `ACQUIRED`, since the lock is free on the server before the reply
//! reaches this run.
//!
//! The lock is Redisson's `RReadWriteLock` (a hash `--lock-name` with its `mode`), so a Java
//! service using `redisson.getReadWriteLock(name)` shares it. The hold is renewed by the
//! watchdog however long `--hold-ms` is; a run killed while holding keeps the lock until its
//! 30 s lease ends.
//!
//! Exits with 0 after releasing; 2 for bad input (a mode other than `read` or `write`, a name
//! or URL the backend refuses), found before anything is sent; 1 for any other failure (a
//! server that cannot be reached, a failed call).

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use distlock::Locker;
use distlock::redis::RedisBackend;

/// Which side of the lock a run takes.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

/// Take one side of a distributed read-write lock, hold it, release it.
#[derive(Parser, Debug)]
#[command(name = "rwlock")]
struct Args {
    /// Redis URL (`redis://host:port/`, `rediss://` for TLS).
    #[arg(long)]
    url: String,

    /// The lock's name (its key on the server).
    #[arg(long)]
    lock_name: String,

    /// `read` or `write`.
    #[arg(long, value_enum)]
    mode: Mode,

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
    // The name is checked before connecting (clap has already refused a bad mode).
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
    // The name is bound to the handle (and checked again) here.
    let lock = locker.read_write(&args.lock_name)?;
    let hold = Duration::from_millis(args.hold_ms);
    // Both sides' guards release the same way; each arm holds its own kind.
    let released = match args.mode {
        Mode::Read => {
            let reading = lock.read().await?;
            println!("ACQUIRED {}", unix_ms());
            tokio::time::sleep(hold).await;
            println!("RELEASING {}", unix_ms());
            reading.release().await?
        }
        Mode::Write => {
            let writing = lock.write().await?;
            println!("ACQUIRED {}", unix_ms());
            tokio::time::sleep(hold).await;
            println!("RELEASING {}", unix_ms());
            writing.release().await?
        }
    };
    println!("RELEASED {}", unix_ms());
    eprintln!("released the {:?} lock: {released:?}", args.mode);
    Ok(())
}

//! A countdown latch shared by OS processes: some runs set it, some count it down, some wait for
//! it to open, printing when, so that runs started together can be checked never to go on before
//! the last count-down.
//!
//! ```text
//! cargo run -p distlock-examples --bin latch -- --url redis://127.0.0.1:6379/ \
//!     --name distlock:demo:shards-loaded --set 3
//! cargo run -p distlock-examples --bin latch -- --url redis://127.0.0.1:6379/ \
//!     --name distlock:demo:shards-loaded --wait --timeout-ms 60000
//! cargo run -p distlock-examples --bin latch -- --url redis://127.0.0.1:6379/ \
//!     --name distlock:demo:shards-loaded --count-down
//! ```
//!
//! Each run does one thing, and prints on stdout one line for it, with times in milliseconds
//! since the Unix epoch:
//!
//! - `--set N`: sets the count to `N` unless the latch exists (`try_set_count`: only the first
//!   run to get there sets it); prints `SET <n>` with the count it then has (`N`, or the count
//!   an earlier run left).
//! - `--count-down`: counts down by one; prints `COUNT <left>` (0: the latch is open, every
//!   waiter goes on).
//! - `--wait [--timeout-ms T]`: waits until the count is zero (at most `T` ms), then prints
//!   `ACQUIRED <unix-ms>` (its permission to go on) and at once `RELEASED <unix-ms>`. A latch
//!   has no hold: nothing is taken and nothing is given back, so the two lines come together
//!   and only `ACQUIRED` means anything; `RELEASED` is there so that tools reading the other
//!   examples' output read this one too. A wait that times out prints `TIMEOUT <unix-ms>` and
//!   exits with 1.
//!
//! The latch is Redisson's `RCountDownLatch` (the string key `--name` holds the count; the
//! opening is announced on `redisson_countdownlatch__channel__{name}`), so a Java service using
//! `redisson.getCountDownLatch(name)` shares it. A waiter also reads the count again every
//! second, so a lost announcement delays it by at most about a second (see
//! `docs/lock-family.md`).
//!
//! Exits with 0 when done; 2 for bad input (not exactly one of `--set`, `--count-down`,
//! `--wait`; `--timeout-ms` without `--wait` or 0; a name or URL the backend refuses), found
//! before anything is sent; 1 for any other failure (a server that cannot be reached, a failed
//! call, a wait that timed out).

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{ArgGroup, Parser};

/// Set, count down or wait for a distributed countdown latch.
#[derive(Parser, Debug)]
#[command(name = "latch")]
#[command(group(ArgGroup::new("mode").required(true).args(["set", "count_down", "wait"])))]
struct Args {
    /// Redis URL (`redis://host:port/`, `rediss://` for TLS).
    #[arg(long)]
    url: String,

    /// The latch's name (its key on the server).
    #[arg(long)]
    name: String,

    /// Set the count to N unless the latch exists.
    #[arg(long, value_name = "N")]
    set: Option<u64>,

    /// Count down by one.
    #[arg(long)]
    count_down: bool,

    /// Wait until the count is zero.
    #[arg(long)]
    wait: bool,

    /// With `--wait`: give up after this many milliseconds (default: wait as long as it takes).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_ms: Option<u64>,
}

impl Args {
    /// What clap's own checks cannot say: a timeout only with `--wait` (clap's `requires` takes
    /// an absent flag's default `false` for present), and one a wait accepts; the name one the
    /// backend accepts. Checked before connecting.
    fn check(&self) -> Result<(), String> {
        if let Some(ms) = self.timeout_ms {
            if !self.wait {
                return Err(format!("--timeout-ms {ms} is only for --wait"));
            }
            distlock::options::check_wait(distlock::Wait::Upto(Duration::from_millis(ms)))
                .map_err(|error| format!("--timeout-ms {ms}: {error}"))?;
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
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
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

/// Does what `args` ask; `false` for a wait that timed out.
async fn run(args: &Args) -> distlock::Result<bool> {
    // A bad URL is refused here, before any I/O (`Error::InvalidConfig`).
    let locker = distlock::connect(args.url.as_str()).await?;
    let latch = locker.latch(&args.name)?;
    if let Some(count) = args.set {
        if latch.try_set_count(count).await? {
            eprintln!("set {:?} to {count}", args.name);
        }
        println!("SET {}", latch.count().await?);
    } else if args.count_down {
        // No retry on an error: a count-down that failed ambiguously may have counted down
        // already, and a second one could count down twice.
        println!("COUNT {}", latch.count_down().await?);
    } else {
        let open = match args.timeout_ms {
            Some(ms) => latch.wait_timeout(Duration::from_millis(ms)).await?,
            None => latch.wait().await.map(|()| true)?,
        };
        if !open {
            println!("TIMEOUT {}", unix_ms());
            return Ok(false);
        }
        println!("ACQUIRED {}", unix_ms());
        // Nothing to give back: a latch has no hold.
        println!("RELEASED {}", unix_ms());
    }
    Ok(true)
}

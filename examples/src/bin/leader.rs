//! Leader election among OS processes: each run campaigns, leads for a while and resigns,
//! printing when it led and with which term, so that runs started together can be checked never
//! to lead at once; an observer run prints every change of leader.
//!
//! ```text
//! cargo run -p distlock-examples --bin leader -- --url redis://127.0.0.1:6379/ \
//!     --name distlock:demo:scheduler --value 10.0.0.7:9000 --hold-ms 2000
//! cargo run -p distlock-examples --bin leader -- --url redis://127.0.0.1:6379/ \
//!     --name distlock:demo:scheduler --observe --for-ms 60000
//! ```
//!
//! A candidate run (`--value V`) campaigns with `V` (waiting as long as it takes) and prints on
//! stdout, one line each, with times in milliseconds since the Unix epoch:
//!
//! - `ACQUIRED <unix-ms>` as soon as it leads, then `TERM <term>`: its term, the fencing token
//!   to pass along with whatever the leader writes;
//! - `LOST <unix-ms>` if the leadership is lost before `--hold-ms` has passed (the lease could
//!   not be renewed, or an operator deposed it), and it stops leading at once;
//! - `RELEASING <unix-ms>` after `--hold-ms` (or at the loss), just before resigning;
//! - `RELEASED <unix-ms>` once it has resigned.
//!
//! From `ACQUIRED` to `RELEASING` the run surely leads (the grant happened before the first
//! line, the resignation after the second): those are the intervals to compare between runs.
//! `RELEASED` can come after the next leader's `ACQUIRED`.
//!
//! An observer run (`--observe`) prints `LEADER <unix-ms> <value>` with the leadership it finds
//! at once and then with each change (`-` for nobody), until it is killed or `--for-ms` has
//! passed. Changes are announced by the candidates' scripts and read again every second besides;
//! a leader that came and went between two reads with its announcements lost is not seen (see
//! `docs/lock-family.md`).
//!
//! The leadership is a lease (`--lease-ms`, 30 s by default) renewed by the watchdog while the
//! run leads: a run killed while leading is replaced by another candidate one lease later. The
//! layout is distlock's own (the reentrant lock's hash under `--name`, the leader's value in
//! `distlock_leader:{name}`, changes on `distlock_leader_channel:{name}`); Redisson has no
//! election.
//!
//! Exits with 0 after resigning (or at the end of `--for-ms`); 2 for bad input (neither or both
//! of `--value` and `--observe`, a value that is empty, `-` or has white space, `--hold-ms` or
//! `--lease-ms` with `--observe`, `--for-ms` without it, a lease out of range, a name or URL the
//! backend refuses), found before anything is sent; 1 for any other failure (a server that
//! cannot be reached, a failed call, a leadership lost before `--hold-ms`).

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{ArgGroup, Parser};
use distlock::{LeaderObserver, LockOptions, Locker, RedisBackend};

/// Campaign for the leadership of an election and lead for a while, or observe who leads.
#[derive(Parser, Debug)]
#[command(name = "leader")]
#[command(group(ArgGroup::new("mode").required(true).args(["value", "observe"])))]
struct Args {
    /// Redis URL (`redis://host:port/`, `rediss://` for TLS).
    #[arg(long)]
    url: String,

    /// The election's name.
    #[arg(long)]
    name: String,

    /// Campaign with this value (what observers and `leader` read: an address, say).
    #[arg(long)]
    value: Option<String>,

    /// How long to lead, in milliseconds, before resigning.
    #[arg(long)]
    hold_ms: Option<u64>,

    /// The leadership's lease in milliseconds, renewed by the watchdog (default 30000).
    #[arg(long)]
    lease_ms: Option<u64>,

    /// Print each change of leader instead of campaigning.
    #[arg(long)]
    observe: bool,

    /// With `--observe`: stop after this many milliseconds (default: until killed).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    for_ms: Option<u64>,
}

/// Leads this long when `--hold-ms` is not given.
const DEFAULT_HOLD_MS: u64 = 1000;

impl Args {
    /// What clap's own checks cannot say: which options go with which mode, a value that the
    /// observer's lines can carry, a lease the watchdog accepts, a name the backend accepts.
    /// Checked before connecting.
    fn check(&self) -> Result<(), String> {
        if self.observe {
            for (given, option) in [
                (self.hold_ms.is_some(), "--hold-ms"),
                (self.lease_ms.is_some(), "--lease-ms"),
            ] {
                if given {
                    return Err(format!("{option} is only for a candidate (--value)"));
                }
            }
        } else if let Some(ms) = self.for_ms {
            return Err(format!("--for-ms {ms} is only for --observe"));
        }
        if let Some(value) = &self.value {
            // One word, and not the observer's "nobody": `LEADER <ms> <value>` stays parseable.
            if value.is_empty() || value == "-" || value.chars().any(char::is_whitespace) {
                return Err(format!(
                    "--value {value:?}: a value is one word, not empty and not \"-\""
                ));
            }
        }
        if let Some(ms) = self.lease_ms {
            distlock::options::check_lease(Duration::from_millis(ms))
                .map_err(|error| format!("--lease-ms {ms}: {error}"))?;
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
    let done = match &args.value {
        Some(value) => campaign(&args, value).await,
        None => observe(&args).await.map(|()| true),
    };
    match done {
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

/// Campaigns, leads, resigns; `false` when the leadership was lost before `--hold-ms`.
async fn campaign(args: &Args, value: &str) -> distlock::Result<bool> {
    // A bad URL is refused here, before any I/O (`Error::InvalidConfig`).
    let locker = Locker::new(RedisBackend::connect(args.url.as_str()).await?);
    let election = locker.election(&args.name)?;
    let mut options = LockOptions::new();
    if let Some(ms) = args.lease_ms {
        options = options.watchdog_lease(Duration::from_millis(ms));
    }
    let leadership = election.campaign_with(value, &options).await?;
    println!("ACQUIRED {}", unix_ms());
    println!("TERM {}", leadership.term());

    let hold = Duration::from_millis(args.hold_ms.unwrap_or(DEFAULT_HOLD_MS));
    let kept = tokio::select! {
        () = tokio::time::sleep(hold) => true,
        loss = leadership.lost() => {
            // Stop leading at once: another candidate may lead from now on.
            println!("LOST {}", unix_ms());
            eprintln!("leadership lost: {loss:?}");
            false
        }
    };

    println!("RELEASING {}", unix_ms());
    // No retry on an error: the lease ends by itself, and another candidate may lead by then.
    let held = leadership.resign().await?;
    println!("RELEASED {}", unix_ms());
    eprintln!("resigned {:?} (still held: {held})", args.name);
    Ok(kept)
}

/// Prints `LEADER <unix-ms> <value or ->` for the leadership now and each change, until
/// `--for-ms` has passed (or forever).
async fn observe(args: &Args) -> distlock::Result<()> {
    let locker = Locker::new(RedisBackend::connect(args.url.as_str()).await?);
    let observer = locker.election(&args.name)?.observe();
    match args.for_ms {
        Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), follow(observer)).await {
            Ok(failed) => failed,
            Err(_elapsed) => Ok(()),
        },
        None => follow(observer).await,
    }
}

/// Prints each leadership `observer` returns; ends only with an error.
async fn follow(mut observer: LeaderObserver<RedisBackend>) -> distlock::Result<()> {
    loop {
        let leader = observer.changed().await?;
        let value = leader.as_ref().map_or("-", |leader| leader.value.as_str());
        println!("LEADER {} {value}", unix_ms());
    }
}

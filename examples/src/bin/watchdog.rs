//! A job that outlives its lease and keeps the lock anyway: the watchdog renews the lease while
//! the guard lives.
//!
//! ```text
//! cargo run -p distlock-examples --bin watchdog
//! cargo run -p distlock-examples --bin watchdog -- --url redis://127.0.0.1:6379/
//! ```
//!
//! Client A takes a lock with a 1 s watchdog lease (renewed every ~333 ms) and runs a 4 s job,
//! racing it against `guard.lost()`. Every 500 ms it prints the validity the guard knows of, the
//! PTTL on the server, and whether client B can take the lock (it cannot). Client B meanwhile
//! waits for the lock and gets it as soon as A releases. For contrast, the same job under a fixed
//! 1 s lease (no watchdog) is cut short by `lost()`.

use std::error::Error;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use distlock::{LockOptions, RedisLocker, ReleaseOutcome};
use distlock_examples::DemoRedis;
use tokio::time::{Instant, sleep, sleep_until};

type BoxError = Box<dyn Error + Send + Sync>;

const LEASE: Duration = Duration::from_secs(1);
const JOB: Duration = Duration::from_secs(4);
const TICK: Duration = Duration::from_millis(500);

/// Show the watchdog keeping a lock through a job four times longer than its lease.
#[derive(Parser, Debug)]
#[command(name = "watchdog")]
struct Args {
    /// Redis URL (`redis://host:port/`). Without it a private redis-server is started for the
    /// run.
    #[arg(long)]
    url: Option<String>,

    /// The lock name.
    #[arg(long, default_value = "distlock:demo:watchdog")]
    lock_name: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let redis = match DemoRedis::from_arg(args.url.clone()) {
        Ok(redis) => redis,
        Err(code) => return code,
    };
    match run(&redis, &args.lock_name).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(redis: &DemoRedis, name: &str) -> Result<ExitCode, BoxError> {
    // Two clients, as two processes would be: different client ids, so different owners.
    let a = distlock::connect(redis.url()).await?;
    let b = distlock::connect(redis.url()).await?;
    let mut raw = redis.raw_connection().await?;

    let options = LockOptions::new().watchdog_lease(LEASE);
    let guard = a.lock_with(name, &options).await?;
    let started = Instant::now();
    println!(
        "client A holds {name:?} with a {LEASE:?} watchdog lease (renewed every ~{} ms); the job takes {JOB:?}",
        (LEASE / 3).as_millis()
    );

    // Client B waits for the lock in the background (up to 10 s), from now on.
    let waiter = tokio::spawn(wait_for_lock(b.clone(), name.to_owned()));

    let job = async {
        let mut tick = 0;
        while started.elapsed() < JOB {
            tick += 1;
            sleep_until(started + TICK * tick).await;
            // The guard's view first: it counts from the send time of the last renewal, so it
            // never claims more than the server grants (unless a renewal lands in between).
            let remaining = guard.remaining();
            let pttl: i64 = redis::cmd("PTTL").arg(name).query_async(&mut raw).await?;
            let b_got_it = match b.try_lock(name).await? {
                Some(stolen) => {
                    drop(stolen);
                    "TOOK IT (should not happen)"
                }
                None => "no, held",
            };
            println!(
                "  t={:>4} ms  guard.remaining()={:>4} ms  server PTTL={:>4} ms  client B try_lock: {b_got_it}",
                started.elapsed().as_millis(),
                remaining.as_millis(),
                pttl,
            );
        }
        Ok::<(), BoxError>(())
    };
    tokio::select! {
        done = job => done?,
        loss = guard.lost() => {
            eprintln!("the lease was lost ({loss:?}) after {:?}: job abandoned", started.elapsed());
            return Ok(ExitCode::FAILURE);
        }
    }
    println!(
        "job done after {} ms ({}x the lease), lock kept throughout",
        started.elapsed().as_millis(),
        JOB.as_millis() / LEASE.as_millis()
    );

    let released_at = Instant::now();
    match guard.release().await? {
        ReleaseOutcome::Released => println!("client A: release() -> Released"),
        other => {
            eprintln!("client A: release() -> {other:?}: the lock was not ours any more");
            return Ok(ExitCode::FAILURE);
        }
    }
    let acquired_at = waiter.await??;
    println!(
        "client B, waiting since t=0, got the lock {} ms after A's release (woken by the message on {})",
        acquired_at
            .saturating_duration_since(released_at)
            .as_millis(),
        distlock::redis::keys::channel(name)
    );

    // For contrast: the same job under a fixed lease, which nothing renews.
    let guard = a
        .lock_with(name, &LockOptions::new().fixed_lease(LEASE))
        .await?;
    let started = Instant::now();
    println!("without the watchdog: a fixed {LEASE:?} lease and the same {JOB:?} job");
    tokio::select! {
        () = sleep(JOB) => {
            eprintln!("the job finished under an expired lease: lost() should have fired");
            return Ok(ExitCode::FAILURE);
        }
        loss = guard.lost() => println!(
            "  lost() fired after {} ms with {loss:?}: the job was cancelled",
            started.elapsed().as_millis()
        ),
    }
    let outcome = guard.release().await?;
    println!("  release() -> {outcome:?} (the lock had already expired)");
    if outcome != ReleaseOutcome::NotHeld {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Client B: waits up to 10 s, then releases at once. Returns when it got the lock.
async fn wait_for_lock(b: RedisLocker, name: String) -> Result<Instant, BoxError> {
    let options = LockOptions::new().wait(Duration::from_secs(10));
    let guard = b.lock_with(&name, &options).await?;
    let acquired_at = Instant::now();
    if !guard.release().await?.was_held() {
        return Err("client B's lock expired before its release".into());
    }
    Ok(acquired_at)
}

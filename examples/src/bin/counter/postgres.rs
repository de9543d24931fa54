//! `counter --postgres`: the same demo with the locks and the counter in one PostgreSQL
//! database, and the counter's writes fenced.
//!
//! The counter is a row of `distlock_demo.counters (name, value, token)`. Each increment under
//! the lock is a read and a write, as on Redis, with the grant's fencing token:
//!
//! 1. *claim and read*: `UPDATE … SET token = $token WHERE token <= $token RETURNING value`.
//!    The row now carries our token; a holder with an older token (one whose lease ran out
//!    while it was paused) can no longer write.
//! 2. *write*: `UPDATE … SET value = $value + 1 WHERE token = $token`. It lands only while no
//!    newer holder has claimed the row since our read; otherwise it changes nothing, and the
//!    increment is made again under a new grant.
//!
//! So the total is exact even when a lease is lost in the middle of the critical section: the
//! store, not the lock, has the last word. (Claiming at the read matters: fencing only the
//! write would let an old holder's write land between a newer holder's read and write, and one
//! increment would be lost.)

use std::process::ExitCode;

use distlock::{LockOptions, PostgresLocker};
use lock_testkit::PostgresServer;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_postgres::{Client, NoTls};

use crate::{Args, BoxError, Tally, acquire_with, release};

/// The demo's table, created when missing.
const CREATE: &str = "CREATE SCHEMA IF NOT EXISTS distlock_demo;
    CREATE TABLE IF NOT EXISTS distlock_demo.counters (
        name  text   PRIMARY KEY,
        value bigint NOT NULL,
        token bigint NOT NULL
    )";

/// Claims the counter for a fencing token and reads it: no row back when a newer token holds
/// it.
const CLAIM: &str = "UPDATE distlock_demo.counters SET token = $2
    WHERE name = $1 AND token <= $2 RETURNING value";

/// Writes the counter while the row still carries the token.
const WRITE: &str = "UPDATE distlock_demo.counters SET value = $2 WHERE name = $1 AND token = $3";

/// `counter --postgres`: the parent (which starts a private server when no URL is given), or a
/// worker process with `--child`.
pub async fn main(args: &Args) -> Result<ExitCode, BoxError> {
    let given = args.postgres.clone().filter(|url| !url.is_empty());
    if args.child {
        let url = given.ok_or("--child --postgres needs the URL")?;
        let tally = run_tasks(&url, args, args.tasks).await?;
        tally.report(&format!(
            "worker pid {} ({} tasks)",
            std::process::id(),
            args.tasks
        ));
        return Ok(if tally.clean() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let (url, _private) = match given {
        Some(url) => (url, None),
        None => match PostgresServer::start() {
            Ok(server) => {
                println!("no URL given: started a private PostgreSQL; it stops when the demo ends");
                (server.url(), Some(server))
            }
            Err(error) => {
                eprintln!("error: no --postgres URL given and no private server started: {error}");
                eprintln!(
                    "(install PostgreSQL's server, or pass --postgres postgres://user@host/db)"
                );
                return Ok(ExitCode::from(distlock_examples::NO_SERVER_EXIT_CODE));
            }
        },
    };
    parent(&url, args).await
}

async fn parent(url: &str, args: &Args) -> Result<ExitCode, BoxError> {
    let data = connect(url).await?;
    data.batch_execute(CREATE).await?;
    data.execute(
        "INSERT INTO distlock_demo.counters (name, value, token) VALUES ($1, 0, 0)
         ON CONFLICT (name) DO UPDATE SET value = 0, token = 0",
        &[&args.lock_name],
    )
    .await?;
    // The lock's schema, installed once by the parent (the workers only use it).
    distlock::PostgresBackend::builder(url)?
        .install_schema(true)
        .connect()
        .await?;

    let processes = args.processes.min(args.tasks);
    let expected = u64::from(args.tasks) * u64::from(args.increments);
    println!(
        "{} task(s) x {} increment(s) over {processes} process(es) on PostgreSQL; lock {:?}, \
         counter row {:?} of distlock_demo.counters",
        args.tasks, args.increments, args.lock_name, args.lock_name
    );
    let started = Instant::now();
    let mut failed = false;
    if processes == 1 {
        let tally = run_tasks(url, args, args.tasks).await?;
        tally.report("this process");
        failed |= !tally.clean();
    } else {
        let exe = std::env::current_exe()?;
        let mut children = Vec::new();
        for index in 0..processes {
            let share = args.tasks / processes + u32::from(index < args.tasks % processes);
            children.push(
                tokio::process::Command::new(&exe)
                    .args(["--child", "--postgres", url])
                    .args(["--lock-name", &args.lock_name])
                    .args(["--tasks", &share.to_string()])
                    .args(["--increments", &args.increments.to_string()])
                    .args(args.no_lock.then_some("--no-lock"))
                    .kill_on_drop(true)
                    .spawn()?,
            );
        }
        for mut child in children {
            let status = child.wait().await?;
            if !status.success() {
                eprintln!("a worker process failed: {status}");
                failed = true;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let actual: i64 = data
        .query_one(
            "SELECT value FROM distlock_demo.counters WHERE name = $1",
            &[&args.lock_name],
        )
        .await?
        .get(0);
    println!("expected total: {expected}");
    println!("actual total:   {actual}");
    println!(
        "elapsed: {seconds:.3} s, {:.0} increments per second",
        expected as f64 / seconds.max(f64::EPSILON)
    );
    if failed {
        eprintln!("FAILED: a task or worker process reported an error or a lost lock");
        return Ok(ExitCode::FAILURE);
    }
    if u64::try_from(actual).ok() != Some(expected) {
        if args.no_lock {
            eprintln!(
                "MISMATCH: {} increments lost to the race (as expected without the lock)",
                expected.saturating_sub(u64::try_from(actual).unwrap_or(0))
            );
        } else {
            eprintln!("MISMATCH: the lock did not protect the counter");
        }
        return Ok(ExitCode::FAILURE);
    }
    println!("OK: every increment was made under the lock");
    Ok(ExitCode::SUCCESS)
}

/// A data connection of its own (the lock backend keeps its connections to itself).
async fn connect(url: &str) -> Result<Client, BoxError> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            eprintln!("the counter's connection ended: {error}");
        }
    });
    Ok(client)
}

/// Runs `tasks` tasks in this process, each making `args.increments` fenced increments.
async fn run_tasks(url: &str, args: &Args, tasks: u32) -> Result<Tally, BoxError> {
    let locker: PostgresLocker = distlock::connect_postgres(url).await?;
    let data = std::sync::Arc::new(connect(url).await?);
    let options = LockOptions::new().fenced();
    let mut set = JoinSet::new();
    for _ in 0..tasks {
        let (locker, data, options) = (locker.clone(), data.clone(), options.clone());
        let (name, increments, use_lock) = (args.lock_name.clone(), args.increments, !args.no_lock);
        set.spawn(async move {
            let mut tally = Tally::default();
            for _ in 0..increments {
                if !use_lock {
                    // The race the lock prevents: a read and a write with nothing around them.
                    let value: i64 = data
                        .query_one(
                            "SELECT value FROM distlock_demo.counters WHERE name = $1",
                            &[&name],
                        )
                        .await?
                        .get(0);
                    data.execute(
                        "UPDATE distlock_demo.counters SET value = $2 WHERE name = $1",
                        &[&name, &(value + 1)],
                    )
                    .await?;
                    continue;
                }
                loop {
                    let guard = acquire_with(&locker, &name, &options).await?;
                    if increment(&data, &name, guard.fencing_token()).await? {
                        release(guard, &mut tally).await;
                        break;
                    }
                    // A newer holder claimed the row: our lease ran out meanwhile. Nothing was
                    // written; take the lock again and make this increment anew.
                    eprintln!(
                        "warning: a newer fencing token holds the counter; redoing the increment"
                    );
                    tally.fenced_off += 1;
                    let _ = guard.release().await;
                }
            }
            Ok::<Tally, BoxError>(tally)
        });
    }
    let mut total = Tally::default();
    while let Some(joined) = set.join_next().await {
        total.add(&joined??);
    }
    Ok(total)
}

/// One increment fenced by `token`: whether it landed (false: a newer token claimed the row,
/// nothing was written).
async fn increment(data: &Client, name: &str, token: u64) -> Result<bool, BoxError> {
    let token = i64::try_from(token)?;
    let Some(row) = data.query_opt(CLAIM, &[&name, &token]).await? else {
        return Ok(false);
    };
    let value: i64 = row.get(0);
    Ok(data.execute(WRITE, &[&name, &(value + 1), &token]).await? == 1)
}

//! `distlock`: run a command under a distributed lock on Redis, Valkey or PostgreSQL.
//!
//! ```text
//! distlock run reports:daily --wait 10s -- ./make-report.sh
//! ```
//!
//! See `distlock --help`, and the exit codes in [`exit`].

mod connection;
mod doctor;
mod exit;
mod list;
mod postgres;
mod run;
mod status;
mod unlock;

use std::process::ExitCode;

use clap::Parser;

/// Distributed locks on Redis / Valkey (Redisson's layout) or PostgreSQL from the command line.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, about)]
struct Cli {
    #[command(flatten)]
    connection: connection::ConnectionArgs,
    #[command(subcommand)]
    command: Commands,
}

#[derive(Debug, clap::Subcommand)]
enum Commands {
    /// Hold a lock while a command runs; exit with the command's status.
    ///
    /// Exit codes of its own: 75 not acquired within --wait, 70 lease lost (the command was
    /// stopped), 69 the server could not be reached or refused a call, 126/127 the command
    /// could not be started, 2 bad arguments.
    Run(run::RunArgs),
    /// Show what a name holds, whichever kind uses it (locks, read-write and fair locks,
    /// elections, permits, semaphores, latches): holders, lease, fencing counter, waiters.
    Status(status::StatusArgs),
    /// List the names of every kind matching a glob, with their kind (SCAN on every primary,
    /// never KEYS).
    List(list::ListArgs),
    /// Show a lock live, again whenever it changes, until interrupted.
    Watch(status::WatchArgs),
    /// Release a name whoever holds it, as its kind does (asks first on a terminal; `--yes`
    /// otherwise); a semaphore's or latch's count is left to the library's calls.
    Unlock(unlock::UnlockArgs),
    /// What the server (or a proxy in front of it) does with each command the library may
    /// use, then which lock kinds, primitives, notification modes and guarantees work there.
    ///
    /// Exit codes: 0 the default lock works there, 69 it does not (or the server cannot be
    /// reached), 2 bad arguments.
    Doctor(doctor::DoctorArgs),
    /// PostgreSQL: print the `distlock` schema's SQL, or install it in the database `--url`
    /// names.
    #[command(subcommand)]
    Postgres(postgres::PostgresCommand),
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let connection = &cli.connection;
    if let Some(url) = connection.postgres_url() {
        return on_postgres(connection, url, cli.command).await;
    }
    match cli.command {
        Commands::Run(args) => match connection.locker().await {
            Ok(locker) => run::run(locker, args).await,
            Err(error) => cannot_connect(&error),
        },
        Commands::Status(args) => match connection.locker().await {
            Ok(locker) => status::status(locker, args).await,
            Err(error) => cannot_connect(&error),
        },
        Commands::List(args) => match connection.locker().await {
            Ok(locker) => list::list(locker, args).await,
            Err(error) => cannot_connect(&error),
        },
        Commands::Watch(args) => match connection.locker().await {
            Ok(locker) => status::watch(locker, args).await,
            Err(error) => cannot_connect(&error),
        },
        // It picks the lock kind from what the server holds.
        Commands::Unlock(args) => unlock::unlock(connection, args).await,
        // Probes only: a server where no lock works still gets its table.
        Commands::Doctor(args) => doctor::doctor(connection, args).await,
        Commands::Postgres(command) => postgres::command(None, command).await,
    }
}

/// The commands on a PostgreSQL database.
async fn on_postgres(
    connection: &connection::ConnectionArgs,
    url: &str,
    command: Commands,
) -> ExitCode {
    match command {
        Commands::Postgres(command) => postgres::command(Some(url), command).await,
        Commands::Doctor(_) => {
            eprintln!(
                "distlock: `doctor` probes Redis servers; on PostgreSQL, `distlock postgres install` checks the schema"
            );
            exit::code(exit::USAGE)
        }
        Commands::Run(args) => match connection.postgres_locker(url).await {
            Ok(locker) => run::run(locker, args).await,
            Err(error) => cannot_connect(&error),
        },
        other => postgres::family_command(connection, url, other).await,
    }
}

/// Says why connecting failed, and gives the exit code for it.
fn cannot_connect(error: &distlock::Error) -> ExitCode {
    eprintln!("distlock: cannot connect: {error}");
    exit::code(match error {
        distlock::Error::InvalidConfig { .. } => exit::USAGE,
        _ => exit::BACKEND_ERROR,
    })
}

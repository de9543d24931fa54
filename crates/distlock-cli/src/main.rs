//! `distlock`: run a command under a distributed lock on Redis or Valkey.
//!
//! ```text
//! distlock run reports:daily --wait 10s -- ./make-report.sh
//! ```
//!
//! See `distlock --help`, and the exit codes in [`exit`].

mod connection;
mod exit;
mod run;

use std::process::ExitCode;

use clap::Parser;

/// Distributed locks on Redis / Valkey (Redisson's layout) from the command line.
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
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let locker = match cli.connection.locker().await {
        Ok(locker) => locker,
        Err(error) => {
            eprintln!("distlock: cannot connect: {error}");
            return exit::code(match error {
                distlock::Error::InvalidConfig { .. } => exit::USAGE,
                _ => exit::BACKEND_ERROR,
            });
        }
    };
    match cli.command {
        Commands::Run(args) => run::run(locker, args).await,
    }
}

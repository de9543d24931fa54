//! `distlock unlock --force NAME`: deletes a lock whoever holds it (its holders learn at their
//! next renewal), after a confirmation on a terminal, or with `--yes`.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use distlock::redis::Layout;

use crate::connection::{ConnectionArgs, Kind};
use crate::exit;
use crate::status::as_text;

/// `distlock unlock --force NAME [--yes]`
#[derive(Debug, clap::Args)]
pub struct UnlockArgs {
    /// The lock's name.
    name: String,
    /// Required: release the lock whoever holds it (there is no unlock on behalf of a holder).
    #[arg(long, required = true)]
    force: bool,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long)]
    yes: bool,
}

/// Runs `distlock unlock --force`.
pub async fn unlock(connection: &ConnectionArgs, args: UnlockArgs) -> ExitCode {
    let _ = args.force;
    let locker = match connection.locker().await {
        Ok(locker) => locker,
        Err(error) => return crate::cannot_connect(&error),
    };
    let lock = match locker.backend().describe(&args.name).await {
        Ok(lock) => lock,
        Err(error) => {
            eprintln!("distlock: cannot read {:?}: {error}", args.name);
            return exit::code(exit::BACKEND_ERROR);
        }
    };
    // The release script of the kind the key has.
    let kind = match &lock.layout {
        Layout::Free => {
            println!("{}: free; nothing to release", args.name);
            return ExitCode::SUCCESS;
        }
        Layout::Reentrant => Kind::Reentrant,
        Layout::Fast => Kind::Fast,
        other => {
            eprintln!(
                "distlock: {:?} is not a lock ({other:?}); not deleting it",
                args.name
            );
            return exit::code(exit::USAGE);
        }
    };
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            eprintln!(
                "distlock: not a terminal: pass --yes to force-release {:?}",
                args.name
            );
            return exit::code(exit::USAGE);
        }
        print!("{}force-release it? [y/N] ", as_text(&args.name, &lock));
        let _ = std::io::stdout().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("left as it is");
            return exit::code(exit::USAGE);
        }
    }
    let locker = match connection.locker_of(kind).await {
        Ok(locker) => locker,
        Err(error) => return crate::cannot_connect(&error),
    };
    match locker.force_unlock(&args.name).await {
        Ok(true) => {
            println!("{}: released", args.name);
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("{}: already free", args.name);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("distlock: cannot release {:?}: {error}", args.name);
            exit::code(exit::BACKEND_ERROR)
        }
    }
}

//! `distlock unlock --force NAME`: releases a name of the family whoever holds it (its holders
//! learn at their next renewal), after a confirmation on a terminal, or with `--yes`, with the
//! library's force call of the kind the server holds: a lock of either kind, a read-write lock
//! (either mode), a fair lock (the head of its queue is told), an election (its leader is
//! deposed), lease-bound permits (every permit given back). A semaphore's or a latch's count
//! has no holder: it is left alone, with a pointer to the library's calls that change it.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use distlock::RedisLocker;
use distlock::redis::Layout;

use crate::connection::{ConnectionArgs, Kind};
use crate::exit;
use crate::status::as_text;

/// The library's force call for each kind.
#[derive(Clone, Copy)]
enum Force {
    /// `Locker::force_unlock` with the lock kind's scripts.
    Lock(Kind),
    /// `ReadWriteLock::force_unlock`: deletes the lock in either mode and announces it.
    ReadWrite,
    /// `FairLock::force_unlock`: deletes the lock and tells the head of the queue.
    Fair,
    /// `Election::depose`: deletes the lock and the leader value, tells candidates and
    /// observers.
    Election,
    /// The permit side's `force_unlock`: gives every permit out back to the count.
    Permits,
}

/// `distlock unlock --force NAME [--yes]`
#[derive(Debug, clap::Args)]
pub struct UnlockArgs {
    /// The lock's name.
    pub(crate) name: String,
    /// Required: release the lock whoever holds it (there is no unlock on behalf of a holder).
    #[arg(long, required = true)]
    force: bool,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long)]
    pub(crate) yes: bool,
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
    // The force call of the kind the name has.
    let kind = match &lock.layout {
        Layout::Free => {
            println!("{}: free; nothing to release", args.name);
            return ExitCode::SUCCESS;
        }
        Layout::Reentrant => Force::Lock(Kind::Reentrant),
        Layout::Fast => Force::Lock(Kind::Fast),
        Layout::ReadWrite => Force::ReadWrite,
        Layout::Fair => Force::Fair,
        Layout::Election => Force::Election,
        Layout::Permits => Force::Permits,
        // A count has no holder to release, and the server cannot say which kind a count
        // nobody waits on belongs to: the operator decides, with the library's own calls.
        Layout::Semaphore | Layout::Latch | Layout::Counter => {
            let what = match &lock.layout {
                Layout::Semaphore => {
                    "a semaphore's count; set it with Semaphore::reset or remove it with \
                     Semaphore::delete"
                }
                Layout::Latch => "a countdown latch's count; remove it with CountDownLatch::delete",
                _ => {
                    "a count of a semaphore or a countdown latch (both store the same data); \
                     set or remove it with the library's Semaphore::reset or Semaphore::delete, \
                     or CountDownLatch::delete"
                }
            };
            eprintln!(
                "distlock: {:?} is {what}: it has no holder to release; not changing it",
                args.name
            );
            return exit::code(exit::USAGE);
        }
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
    let released = match kind {
        Force::Lock(kind) => match connection.locker_of(kind).await {
            Ok(locker) => locker.force_unlock(&args.name).await,
            Err(error) => return crate::cannot_connect(&error),
        },
        family => force_family(&locker, family, &args.name).await,
    };
    match released {
        Ok(true) => {
            let done = match kind {
                Force::Election => "deposed",
                Force::Permits => "every permit given back",
                _ => "released",
            };
            println!("{}: {done}", args.name);
            ExitCode::SUCCESS
        }
        Ok(false) => {
            let already = match kind {
                Force::Election => "nobody leads",
                Force::Permits => "no permit out",
                _ => "already free",
            };
            println!("{}: {already}", args.name);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("distlock: cannot release {:?}: {error}", args.name);
            exit::code(exit::BACKEND_ERROR)
        }
    }
}

/// The force call of a family member's `kind` on `name`, through the handle `locker` gives out
/// on it.
async fn force_family(locker: &RedisLocker, kind: Force, name: &str) -> distlock::Result<bool> {
    match kind {
        Force::ReadWrite => locker.read_write(name)?.force_unlock().await,
        Force::Fair => locker.fair(name)?.force_unlock().await,
        Force::Election => locker.election(name)?.depose().await,
        Force::Permits => locker.permits(name)?.locker().force_unlock(name).await,
        Force::Lock(_) => unreachable!("a lock is forced through the locker of its kind"),
    }
}

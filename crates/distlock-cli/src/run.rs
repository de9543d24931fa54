//! `distlock run`: holds a lock while a command runs.
//!
//! The order of things: acquire (waiting up to `--wait`, with a progress line on a terminal),
//! start the command (the fencing token in its environment when asked), then whichever comes
//! first: the command ends (release, exit with its status); the lease is lost (stop the
//! command: SIGTERM, SIGKILL after `--grace`; exit [`exit::LEASE_LOST`]); this tool gets
//! SIGINT or SIGTERM (pass the signal on, wait for the command as above, release, exit with
//! the command's status).

use std::ffi::OsString;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use distlock::backend::LockBackend;
use distlock::{Error, Fencing, LockGuard, LockOptions, Locker, Owner};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use crate::exit;

/// `distlock run NAME [--wait DUR] [--lease DUR] [--fencing-env VAR] -- CMD ARGS…`
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The lock's name.
    name: String,
    /// How long to wait for the lock: `0` tries once; without it, waits as long as it takes.
    #[arg(long, value_parser = humantime::parse_duration)]
    wait: Option<Duration>,
    /// The lease, renewed every third of it while the command runs (a crashed `distlock`
    /// leaves the lock taken for at most this long).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// Hand the command a fencing token in this environment variable (a number that grows with
    /// every grant: a resource that remembers the highest it saw can refuse a stale holder).
    #[arg(long, value_name = "VAR")]
    fencing_env: Option<String>,
    /// After SIGTERM, how long the command has to exit before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Runs `distlock run`.
pub async fn run<B: LockBackend>(locker: Locker<B>, args: RunArgs) -> ExitCode {
    // An owner of its own, to wait for its calls by when a signal stops the wait.
    let owner = Owner::new();
    let mut options = LockOptions::new().watchdog_lease(args.lease).owner(owner);
    options = match args.wait {
        None => options.wait_forever(),
        Some(wait) if wait.is_zero() => options.no_wait(),
        Some(wait) => options.wait(wait),
    };
    // The fencing choice is part of the options' type: two instances of one body.
    if args.fencing_env.is_some() {
        run_as(locker, args, owner, options.fenced()).await
    } else {
        run_as(locker, args, owner, options).await
    }
}

/// `distlock run` with options of either fencing kind.
async fn run_as<B: LockBackend, F: Fencing>(
    locker: Locker<B>,
    args: RunArgs,
    owner: Owner,
    options: LockOptions<F>,
) -> ExitCode {
    let (mut interrupt, mut terminate) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("distlock: cannot listen for signals: {error}");
            return exit::code(exit::BACKEND_ERROR);
        }
    };

    let acquired = tokio::select! {
        acquired = acquire(&locker, &args.name, &options) => acquired,
        _ = interrupt.recv() => return stop_waiting(&locker, &args.name, owner, Signal::SIGINT).await,
        _ = terminate.recv() => return stop_waiting(&locker, &args.name, owner, Signal::SIGTERM).await,
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(Error::NotAcquired { .. }) => {
            eprintln!(
                "distlock: {:?} is held by another owner; not acquired within --wait",
                args.name
            );
            return exit::code(exit::NOT_ACQUIRED);
        }
        Err(error) => {
            eprintln!("distlock: could not acquire {:?}: {error}", args.name);
            return exit::code(exit::BACKEND_ERROR);
        }
    };

    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    // Fenced options (asked for with --fencing-env) always carry a token.
    if let (Some(variable), Some(token)) = (&args.fencing_env, F::token_of(guard.token())) {
        command.env(variable, token.to_string());
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!("distlock: cannot run {:?}: {error}", args.command[0]);
            release(guard).await;
            return exit::code(match error.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            });
        }
    };

    tokio::select! {
        status = child.wait() => {
            release(guard).await;
            match status {
                Ok(status) => exit::of_status(status),
                Err(error) => {
                    eprintln!("distlock: lost track of the command: {error}");
                    exit::code(exit::BACKEND_ERROR)
                }
            }
        }
        loss = guard.lost() => {
            eprintln!(
                "distlock: the lease on {:?} was lost ({loss:?}); stopping the command",
                args.name
            );
            stop(&mut child, Signal::SIGTERM, args.grace).await;
            exit::code(exit::LEASE_LOST)
        }
        _ = interrupt.recv() => finish_on_signal(child, guard, Signal::SIGINT, args.grace).await,
        _ = terminate.recv() => finish_on_signal(child, guard, Signal::SIGTERM, args.grace).await,
    }
}

/// Acquires `name`, showing a progress line on stderr while waiting when it is a terminal.
async fn acquire<B: LockBackend, F: Fencing>(
    locker: &Locker<B>,
    name: &str,
    options: &LockOptions<F>,
) -> distlock::Result<LockGuard<B, F>> {
    let waiting = locker.lock_with(name, options);
    if !std::io::stderr().is_terminal() {
        return waiting.await;
    }
    let started = Instant::now();
    let progress = async {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let held_by = match locker.state(name).await {
                Ok(state) => match (state.holders.first(), state.ttl) {
                    (Some((owner, holds)), Some(ttl)) => format!(
                        "held by {owner} ({holds} holds), {:.1} s left",
                        ttl.as_secs_f64()
                    ),
                    (Some((owner, holds)), None) => format!("held by {owner} ({holds} holds)"),
                    (None, _) => "free, acquiring".to_owned(),
                },
                Err(error) => format!("state unknown ({error})"),
            };
            eprint!(
                "\r\x1b[2Kwaiting for {name:?}: {held_by}, waited {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
    };
    let acquired = tokio::select! {
        acquired = waiting => acquired,
        never = progress => match never {},
    };
    if started.elapsed() >= Duration::from_millis(500) {
        // Clear the progress line.
        eprint!("\r\x1b[2K");
    }
    acquired
}

/// A signal while waiting for the lock: the lock call is dropped (the grant may be on its way
/// back), and what it left on the store is given back before exiting: the runtime's end would
/// drop that cleanup, leaving the lock held until its lease ends.
async fn stop_waiting<B: LockBackend>(
    locker: &Locker<B>,
    name: &str,
    owner: Owner,
    signal: Signal,
) -> ExitCode {
    if let Err(error) = locker.flush(name, owner).await {
        eprintln!(
            "distlock: could not wait for the lock call to be undone ({error}); its lease will end it"
        );
    }
    exit::of_signal(signal)
}

/// Passes `signal` on to the command, waits for it (SIGKILL after `grace`), releases, and
/// exits with the command's status.
async fn finish_on_signal<B: LockBackend, F: Fencing>(
    mut child: Child,
    guard: LockGuard<B, F>,
    signal: Signal,
    grace: Duration,
) -> ExitCode {
    let status = stop(&mut child, signal, grace).await;
    release(guard).await;
    status.map_or_else(|| exit::of_signal(signal), exit::of_status)
}

/// Sends `signal` to the command and waits up to `grace` for it to end, then kills it.
async fn stop(
    child: &mut Child,
    signal: Signal,
    grace: Duration,
) -> Option<std::process::ExitStatus> {
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            eprintln!(
                "distlock: the command did not exit within {grace:?} of {signal}; killing it"
            );
            let _ = child.kill().await;
            child.wait().await.ok()
        }
    }
}

/// Releases the lock, saying so when that fails (the lease ends it anyway).
async fn release<B: LockBackend, F: Fencing>(guard: LockGuard<B, F>) {
    let name = guard.name().to_owned();
    if let Err(error) = guard.release().await {
        eprintln!("distlock: could not release {name:?} ({error}); its lease will end it");
    }
}

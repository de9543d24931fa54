//! Process control by POSIX signal: stop, continue, terminate, kill.

use std::fmt;
#[cfg(target_os = "linux")]
use std::fs;
use std::io;
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

/// The signals the fault controls send.
#[derive(Clone, Copy)]
pub(super) enum Signal {
    Stop,
    Cont,
    Term,
    /// PostgreSQL's fast shutdown.
    Int,
    /// A crash: a child of a stopped PostgreSQL postmaster (the postmaster itself goes through
    /// `Child::kill`).
    Kill,
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Stop => "SIGSTOP",
            Self::Cont => "SIGCONT",
            Self::Term => "SIGTERM",
            Self::Int => "SIGINT",
            Self::Kill => "SIGKILL",
        })
    }
}

/// Sends `sig` to `pid`, which must be our own unreaped child, or an unreaped child of one
/// that is stopped (so it cannot be reaped, and its pid reused, meanwhile).
#[cfg(unix)]
pub(super) fn signal(pid: u32, sig: Signal) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    let signo = match sig {
        Signal::Stop => libc::SIGSTOP,
        Signal::Cont => libc::SIGCONT,
        Signal::Term => libc::SIGTERM,
        Signal::Int => libc::SIGINT,
        Signal::Kill => libc::SIGKILL,
    };
    #[allow(unsafe_code)]
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is a positive pid of our own
    // child that has not been reaped yet (or of its child, while it is stopped and cannot reap
    // it), so it cannot belong to another process.
    let rc = unsafe { libc::kill(pid, signo) };
    if rc == 0 {
        Ok(())
    } else {
        let err = io::Error::last_os_error();
        Err(io::Error::new(err.kind(), format!("{sig} to {pid}: {err}")))
    }
}

#[cfg(not(unix))]
pub(super) fn signal(_pid: u32, sig: Signal) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{sig} needs a Unix platform"),
    ))
}

/// Waits until `child` has exited, at most `timeout`, then kills it; reaps it either way.
pub(super) fn wait_or_kill(child: &mut Child, timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    while child.try_wait()?.is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            child.wait()?;
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Waits (up to 1 s) until `/proc/<pid>/stat` shows the process stopped (or not).
#[cfg(target_os = "linux")]
pub(super) fn wait_for_stopped_state(pid: u32, stopped: bool) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return;
        };
        // Format: `pid (comm) state ...`; comm may contain spaces and parentheses.
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next());
        match state {
            Some('T' | 't') if stopped => return,
            Some('T' | 't') => {}
            Some(_) if !stopped => return,
            Some(_) => {}
            None => return,
        }
        thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn wait_for_stopped_state(_pid: u32, _stopped: bool) {
    thread::sleep(Duration::from_millis(20));
}

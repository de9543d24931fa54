//! The exit codes of `distlock` itself. A command run under the lock that ran to its end gives
//! its own exit status instead (128 + the signal when a signal ended it, as shells report it).

use std::process::ExitCode;

/// The lock was not acquired within `--wait`.
pub const NOT_ACQUIRED: u8 = 75;
/// The lease was lost while the command ran; the command was stopped.
pub const LEASE_LOST: u8 = 70;
/// The lock store could not be reached, or refused a call.
pub const BACKEND_ERROR: u8 = 69;
/// Bad arguments (also clap's own code for a command line it cannot parse).
pub const USAGE: u8 = 2;
/// The command could not be started: not executable.
pub const CANNOT_EXECUTE: u8 = 126;
/// The command could not be started: not found.
pub const NOT_FOUND: u8 = 127;

/// An exit code of `distlock` (see the constants).
pub fn code(code: u8) -> ExitCode {
    ExitCode::from(code)
}

/// The exit code that reports `status` of a finished command the way a shell does: its own
/// code, or 128 + the number of the signal that ended it.
pub fn of_status(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        (None, Some(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(255)),
        (None, None) => ExitCode::from(1),
    }
}

/// The exit code for ending on `signal` before any command ran: 128 + its number.
pub fn of_signal(signal: nix::sys::signal::Signal) -> ExitCode {
    ExitCode::from(u8::try_from(128 + signal as i32).unwrap_or(255))
}

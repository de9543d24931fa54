//! One run of the server binary, up to the moment it answers (or why it did not).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::error::ServerError;
use super::options::ServerOptions;
use super::probe::probe;
use super::spawn::{set_parent_death_signal, spawn};

/// How long a launch (for `RedisServer::start` and `RedisServer::restart`) waits for the server
/// to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines of server log shown in errors.
const LOG_TAIL_LINES: usize = 40;
/// What the server logs when its port (or cluster bus port) is taken.
const ADDR_IN_USE: &str = "Address already in use";

/// One attempt at running the server binary with the config file and waiting for it.
pub(super) struct Launch<'a> {
    pub(super) binary: &'a Path,
    pub(super) config_path: &'a Path,
    pub(super) log_path: &'a Path,
    pub(super) dir: &'a Path,
    pub(super) port: u16,
    /// The server's options: whether it is a Sentinel (`--sentinel`), and how the probe
    /// reaches it (password, TLS).
    pub(super) options: &'a ServerOptions,
}

/// Why a launch failed.
pub(super) enum LaunchError {
    /// The port (or cluster bus port) was taken: worth retrying.
    PortInUse(ServerError),
    Fatal(ServerError),
}

impl From<io::Error> for LaunchError {
    fn from(err: io::Error) -> Self {
        Self::Fatal(err.into())
    }
}

impl Launch<'_> {
    /// Runs the binary and waits until it answers; the child is reaped on failure.
    pub(super) fn run(&self) -> Result<Child, LaunchError> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path)?;
        let log_start = log.seek(SeekFrom::End(0))?;
        writeln!(
            log,
            "--- lock-testkit: starting {} on port {} ---",
            self.binary.display(),
            self.port
        )?;
        let mut command = Command::new(self.binary);
        command.arg(self.config_path);
        if self.options.is_sentinel() {
            command.arg("--sentinel");
        }
        command
            .current_dir(self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        set_parent_death_signal(&mut command);
        let mut child =
            spawn(command).map_err(|err| LaunchError::Fatal(ServerError::Spawn(err)))?;

        let outcome = wait_ready(&mut child, self.port, self.options);
        let (reason, exited) = match outcome {
            Ok(()) => return Ok(child),
            Err(Failure::Exited(status)) => (format!("the server exited ({status})"), true),
            Err(Failure::Timeout(last)) => (
                format!(
                    "no PONG within {} s (last probe: {last})",
                    READY_TIMEOUT.as_secs()
                ),
                false,
            ),
            Err(Failure::Io(err)) => (format!("I/O error while waiting: {err}"), false),
        };
        if !exited {
            let _ = child.kill();
        }
        let _ = child.wait();
        let this_run = read_log_tail(self.log_path, log_start, usize::MAX);
        let err = ServerError::NotReady {
            port: self.port,
            reason,
            log_tail: read_log_tail(self.log_path, 0, LOG_TAIL_LINES),
        };
        if exited && this_run.contains(ADDR_IN_USE) {
            Err(LaunchError::PortInUse(err))
        } else if exited && self.tls_refused(&this_run) {
            Err(LaunchError::Fatal(ServerError::TlsUnsupported {
                binary: self.binary.to_path_buf(),
                log_tail: read_log_tail(self.log_path, log_start, LOG_TAIL_LINES),
            }))
        } else {
            Err(LaunchError::Fatal(err))
        }
    }
}

impl Launch<'_> {
    /// Whether the server exited because its binary has no TLS (only asked of a TLS server).
    #[cfg(feature = "tls")]
    fn tls_refused(&self, log: &str) -> bool {
        self.options.tls.is_some() && crate::tls::says_tls_unsupported(log)
    }

    #[cfg(not(feature = "tls"))]
    fn tls_refused(&self, _log: &str) -> bool {
        false
    }
}

/// Why a started server is not ready.
enum Failure {
    Exited(ExitStatus),
    Timeout(String),
    Io(io::Error),
}

/// Polls with raw RESP until *our* process answers `PONG` (another server that grabbed the
/// port in the meantime is recognised by its `process_id` and ignored).
fn wait_ready(child: &mut Child, port: u16, options: &ServerOptions) -> Result<(), Failure> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut delay = Duration::from_millis(5);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Err(Failure::Exited(status)),
            Ok(None) => {}
            Err(err) => return Err(Failure::Io(err)),
        }
        let last = match probe(port, options) {
            Ok(Some(pid)) if pid == child.id() => return Ok(()),
            Ok(Some(pid)) => format!("port answered by another server (pid {pid})"),
            Ok(None) => "server answered PONG without process_id".to_owned(),
            Err(err) => err.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(Failure::Timeout(last));
        }
        thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(100));
    }
}

/// The last `max_lines` lines of the log written from byte `from` on.
pub(super) fn read_log_tail(path: &Path, from: u64, max_lines: usize) -> String {
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(from))?;
        file.read_to_end(&mut bytes)
    });
    if read.is_err() {
        return String::new();
    }
    last_lines(&String::from_utf8_lossy(&bytes), max_lines)
}

/// The last `max_lines` lines of `text` (of a server's log file or a container's log).
pub(super) fn last_lines(text: &str, max_lines: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max_lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_of_a_log() {
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(last_lines("a\nb\nc\n", 5), "a\nb\nc");
        assert_eq!(last_lines("", 3), "");
    }
}

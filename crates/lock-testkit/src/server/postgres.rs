//! Real PostgreSQL servers for tests: a data directory of their own, a free loopback port.
//!
//! `initdb` and `postgres` refuse to run as root, so a test process running as root starts them
//! as an unprivileged user (`postgres` when the system has one, else `nobody`) and hands that
//! user the server's directory. The binaries are found by [`find_postgres_bin_dir`].

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::ports::PortReservation;
use super::signals::{Signal, signal, wait_for_stopped_state, wait_or_kill};
use super::spawn::{set_parent_death_signal, spawn};

/// Environment variable naming the directory of PostgreSQL's server binaries (`initdb`,
/// `postgres`).
pub const POSTGRES_BIN_DIR_ENV: &str = "DISTLOCK_POSTGRES_BIN_DIR";

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a fast shutdown may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The role (a superuser, trusted from loopback) and database the tests use.
pub const POSTGRES_USER: &str = "distlock";

/// Errors from starting or controlling a [`PostgresServer`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresServerError {
    /// No PostgreSQL server binaries were found.
    #[error(
        "no PostgreSQL server binaries found (looked in {searched}): install them with \
         `sudo apt-get install postgresql` (Debian/Ubuntu), or set \
         DISTLOCK_POSTGRES_BIN_DIR to the directory holding initdb and postgres"
    )]
    BinaryNotFound {
        /// Where was looked.
        searched: String,
    },
    /// A process could not be spawned, or a file of the server could not be written.
    #[error("PostgreSQL server: {0}")]
    Io(#[from] io::Error),
    /// `initdb` failed.
    #[error("initdb failed ({status}):\n{output}")]
    Initdb {
        /// Its exit status.
        status: String,
        /// What it printed.
        output: String,
    },
    /// The server did not accept connections in time, or exited while starting.
    #[error(
        "the PostgreSQL server on 127.0.0.1:{port} did not become ready: {reason}\n\
         --- tail of the server log ---\n{log_tail}"
    )]
    NotReady {
        /// The port the server was started on.
        port: u16,
        /// Why it is considered not ready.
        reason: String,
        /// The last lines of the server's log.
        log_tail: String,
    },
    /// The operation needs a running server.
    #[error("the PostgreSQL server on 127.0.0.1:{port} is not running")]
    NotRunning {
        /// The server's port.
        port: u16,
    },
}

/// Finds the directory of PostgreSQL's server binaries: `DISTLOCK_POSTGRES_BIN_DIR`, else
/// the newest `/usr/lib/postgresql/<version>/bin` (Debian's layout), else `initdb` on `PATH`.
///
/// # Errors
///
/// [`PostgresServerError::BinaryNotFound`], whose message says how to install them.
pub fn find_postgres_bin_dir() -> Result<PathBuf, PostgresServerError> {
    let has_binaries = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os(POSTGRES_BIN_DIR_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        return if has_binaries(&dir) {
            Ok(dir)
        } else {
            Err(PostgresServerError::BinaryNotFound {
                searched: format!("{POSTGRES_BIN_DIR_ENV}={}", dir.display()),
            })
        };
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_binaries(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Ok(dir);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .find(|dir| has_binaries(dir))
        .ok_or_else(|| PostgresServerError::BinaryNotFound {
            searched: format!("{POSTGRES_BIN_DIR_ENV}, /usr/lib/postgresql/<version>/bin and PATH"),
        })
}

/// The user a server runs as: the current one, or an unprivileged one when that is root.
#[derive(Clone, Copy, Debug)]
struct RunAs {
    uid: u32,
    gid: u32,
}

impl RunAs {
    /// `None`: run as the current user (not root).
    fn pick() -> io::Result<Option<RunAs>> {
        if !is_root() {
            return Ok(None);
        }
        let passwd = fs::read_to_string("/etc/passwd")?;
        for wanted in ["postgres", "nobody"] {
            let found = passwd.lines().find_map(|line| {
                let fields: Vec<&str> = line.split(':').collect();
                (fields.len() > 3 && fields[0] == wanted)
                    .then(|| {
                        Some(RunAs {
                            uid: fields[2].parse().ok()?,
                            gid: fields[3].parse().ok()?,
                        })
                    })
                    .flatten()
            });
            if let Some(found) = found {
                return Ok(Some(found));
            }
        }
        Err(io::Error::other(
            "running as root, and neither a `postgres` nor a `nobody` user exists to run \
             PostgreSQL as (initdb and postgres refuse root)",
        ))
    }

    fn apply(self, command: &mut Command) {
        use std::os::unix::process::CommandExt;
        command.uid(self.uid).gid(self.gid);
    }
}

fn is_root() -> bool {
    // The owner of a file this process just made is its effective user.
    fs::metadata("/proc/self")
        .map(|meta| std::os::unix::fs::MetadataExt::uid(&meta) == 0)
        .unwrap_or(false)
}

/// A throw-away PostgreSQL server on a free loopback port: its own data directory (under a
/// temporary directory removed on drop), `fsync` off, trust authentication for the superuser
/// [`POSTGRES_USER`] from 127.0.0.1 only, no Unix socket. Killed on drop and, on Linux, when
/// the test process dies.
///
/// # Example
///
/// ```no_run
/// use lock_testkit::PostgresServer;
///
/// let server = PostgresServer::start().expect("PostgreSQL installed");
/// println!("connect to {}", server.url());
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    dir: TempDir,
    bin_dir: PathBuf,
    run_as: Option<RunAs>,
    port: u16,
    _ports: PortReservation,
    child: Option<Child>,
    paused: bool,
}

impl PostgresServer {
    /// Makes a data directory with `initdb` and starts a server on it.
    ///
    /// # Errors
    ///
    /// [`PostgresServerError::BinaryNotFound`] without PostgreSQL; the failures of `initdb` or
    /// of the server's start, with its log.
    pub fn start() -> Result<Self, PostgresServerError> {
        let bin_dir = find_postgres_bin_dir()?;
        let run_as = RunAs::pick()?;
        let dir = tempfile::Builder::new().prefix("distlock-pg-").tempdir()?;
        if let Some(user) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid))?;
        }
        let mut initdb = Command::new(bin_dir.join("initdb"));
        initdb
            .arg("-D")
            .arg(dir.path().join("data"))
            .args([
                "-U",
                POSTGRES_USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ])
            .args(["--locale=C", "--no-instructions"])
            .stdin(Stdio::null());
        if let Some(user) = run_as {
            user.apply(&mut initdb);
        }
        let output = initdb.output()?;
        if !output.status.success() {
            return Err(PostgresServerError::Initdb {
                status: output.status.to_string(),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            });
        }
        let ports = PortReservation::new(1)?;
        let port = ports.ports[0];
        let mut server = PostgresServer {
            dir,
            bin_dir,
            run_as,
            port,
            _ports: ports,
            child: None,
            paused: false,
        };
        server.launch()?;
        Ok(server)
    }

    fn launch(&mut self) -> Result<(), PostgresServerError> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let mut command = Command::new(self.bin_dir.join("postgres"));
        command
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-p")
            .arg(self.port.to_string())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(user) = self.run_as {
            user.apply(&mut command);
        }
        set_parent_death_signal(&mut command);
        let started = Instant::now();
        let log_start = fs::metadata(self.log_path()).map_or(0, |meta| meta.len());
        self.child = Some(spawn(command)?);
        loop {
            let log = fs::read(self.log_path()).unwrap_or_default();
            let fresh = String::from_utf8_lossy(
                &log[usize::try_from(log_start).unwrap_or(0).min(log.len())..],
            )
            .into_owned();
            if fresh.contains("ready to accept connections") {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(self.not_ready(format!("postgres exited with {status}")));
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(self.not_ready(format!("not ready after {START_TIMEOUT:?}")));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn not_ready(&self, reason: String) -> PostgresServerError {
        PostgresServerError::NotReady {
            port: self.port,
            reason,
            log_tail: self.log_tail(30),
        }
    }

    /// The connection URL of the superuser [`POSTGRES_USER`] on the `postgres` database.
    #[must_use]
    pub fn url(&self) -> String {
        format!(
            "postgres://{POSTGRES_USER}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// The server's port on 127.0.0.1.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's pid while it runs.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's log file.
    #[must_use]
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// The last `max_lines` lines of the server's log.
    #[must_use]
    pub fn log_tail(&self, max_lines: usize) -> String {
        let log = fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(max_lines)..].join("\n")
    }

    fn running_pid(&mut self) -> Result<u32, PostgresServerError> {
        let port = self.port;
        let child = self
            .child
            .as_mut()
            .ok_or(PostgresServerError::NotRunning { port })?;
        if child.try_wait()?.is_some() {
            self.child = None;
            return Err(PostgresServerError::NotRunning { port });
        }
        Ok(child.id())
    }

    /// Freezes the postmaster (`SIGSTOP`): new connections hang; sessions already connected
    /// run on in their own processes.
    ///
    /// # Errors
    ///
    /// [`PostgresServerError::NotRunning`].
    pub fn pause(&mut self) -> Result<(), PostgresServerError> {
        let pid = self.running_pid()?;
        signal(pid, Signal::Stop)?;
        wait_for_stopped_state(pid, true);
        self.paused = true;
        Ok(())
    }

    /// Continues a paused postmaster.
    ///
    /// # Errors
    ///
    /// [`PostgresServerError::NotRunning`].
    pub fn resume(&mut self) -> Result<(), PostgresServerError> {
        let pid = self.running_pid()?;
        signal(pid, Signal::Cont)?;
        wait_for_stopped_state(pid, false);
        self.paused = false;
        Ok(())
    }

    /// Stops the server with a fast shutdown (`SIGINT`: sessions are ended, nothing is
    /// waited for), killing it after 10 s. Nothing when it is not running.
    ///
    /// # Errors
    ///
    /// Signalling or waiting failed.
    pub fn stop(&mut self) -> Result<(), PostgresServerError> {
        let Ok(pid) = self.running_pid() else {
            return Ok(());
        };
        signal(pid, Signal::Int)?;
        if self.paused {
            signal(pid, Signal::Cont)?;
            self.paused = false;
        }
        let child = self.child.as_mut().expect("running_pid checked it");
        wait_or_kill(child, STOP_TIMEOUT)?;
        self.child = None;
        Ok(())
    }

    /// Starts the server again on the same port and data directory after [`stop`](Self::stop).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn restart(&mut self) -> Result<(), PostgresServerError> {
        self.stop()?;
        self.launch()
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // A fast shutdown ends the server's own child processes too (a SIGKILL of the
        // postmaster would leave them to notice on their own).
        let _ = self.stop();
    }
}

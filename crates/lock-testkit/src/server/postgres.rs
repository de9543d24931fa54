//! Real PostgreSQL servers for tests: a data directory of their own, a free loopback port.
//!
//! `initdb` and `postgres` refuse to run as root, so a test process running as root starts them
//! as an unprivileged user (`postgres` when the system has one, else `nobody`) and hands that
//! user the server's directory. The binaries are found by [`find_postgres_bin_dir`].
//!
//! A server can also be a streaming standby of another
//! ([`PostgresServer::start_standby_of`]), cut off from it
//! ([`PostgresServer::detach_from_primary`]) and promoted ([`PostgresServer::promote`]); with
//! [`PostgresServer::kill`] for a crash of the primary, that is what replication canaries need.

use std::fs;
use std::io::{self, Write as _};
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
/// How long a standby may take to stream, or a promotion to finish.
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(60);

/// The settings that make a throw-away server fast, appended to its `postgresql.conf`. They
/// are in the configuration file, not on the command line, because `ALTER SYSTEM` cannot
/// override a command-line setting: synchronous replication needs `synchronous_commit` back
/// on. A standby copies the file with the data directory.
const FAST_SETTINGS: &str = "
# lock-testkit: a throw-away server (nothing survives a crash of the machine)
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
";

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
    /// A client program (`psql`, `pg_basebackup`) failed, or a server did not reach the state
    /// asked for (streaming, promoted) in time.
    #[error("{what} failed on 127.0.0.1:{port}: {output}")]
    Client {
        /// The port of the server it ran against.
        port: u16,
        /// What was run.
        what: String,
        /// Its exit status and what it printed, or why it was given up.
        output: String,
    },
}

/// How a standby started by [`PostgresServer::start_standby_of`] replicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostgresReplication {
    /// The primary acknowledges a commit once it is in its own WAL; the standby may still
    /// lack it when the primary dies (the default of PostgreSQL).
    Asynchronous,
    /// The primary acknowledges a commit only once this standby has flushed it
    /// (`synchronous_standby_names` naming it, `synchronous_commit = on`).
    Synchronous,
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
        // Appending keeps the file initdb made, and with it its owner.
        fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("data").join("postgresql.conf"))?
            .write_all(FAST_SETTINGS.as_bytes())?;
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
            // A standby is "ready to accept read-only connections".
            if fresh.contains("database system is ready to accept") {
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

    /// Freezes the whole server (`SIGSTOP` to the postmaster, then to every process it
    /// started: the sessions, the writer, the WAL writer…), as a paused VM would be: connected
    /// clients get no answer until [`thaw`](Self::thaw). Returns how many processes were
    /// stopped.
    ///
    /// The postmaster is stopped first, so it neither starts nor reaps a process meanwhile: a
    /// child that exits stays a zombie holding its pid, and no pid read here can be reused
    /// before [`thaw`](Self::thaw) signals it again.
    ///
    /// # Errors
    ///
    /// [`PostgresServerError::NotRunning`], or signalling failed.
    pub fn freeze(&mut self) -> Result<usize, PostgresServerError> {
        let pid = self.running_pid()?;
        signal(pid, Signal::Stop)?;
        wait_for_stopped_state(pid, true);
        self.paused = true;
        let children = children_of(pid);
        for &child in &children {
            // A child that exited meanwhile is a zombie: the signal does nothing.
            let _ = signal(child, Signal::Stop);
        }
        Ok(children.len() + 1)
    }

    /// Continues a server [`freeze`](Self::freeze) stopped: its processes first, the
    /// postmaster last.
    ///
    /// # Errors
    ///
    /// [`PostgresServerError::NotRunning`], or signalling failed.
    pub fn thaw(&mut self) -> Result<(), PostgresServerError> {
        let pid = self.running_pid()?;
        for child in children_of(pid) {
            let _ = signal(child, Signal::Cont);
        }
        signal(pid, Signal::Cont)?;
        wait_for_stopped_state(pid, false);
        self.paused = false;
        Ok(())
    }

    /// Stops the server with a fast shutdown (`SIGINT`: sessions are ended, nothing is
    /// waited for), killing it after 10 s; a paused or frozen server is continued for it.
    /// Nothing when it is not running.
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
            // After a freeze its processes too (the postmaster, still stopped, keeps their
            // pids): a stopped one would hold the shutdown up, then outlive the killed
            // postmaster, stopped for good.
            for child in children_of(pid) {
                let _ = signal(child, Signal::Cont);
            }
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

    /// Crashes the server: `SIGKILL` to every one of its processes at once, as a machine
    /// losing power would end them (only the operating system's page cache survives). Nothing
    /// is flushed and no session is told: a WAL sender dies with what it had not sent yet.
    /// [`restart`](Self::restart) then starts it with crash recovery.
    ///
    /// As in [`freeze`](Self::freeze), the postmaster is stopped first, so no pid read here can
    /// be reaped and reused before it is signalled; it is killed (and reaped) last.
    ///
    /// # Errors
    ///
    /// [`PostgresServerError::NotRunning`], or signalling failed.
    pub fn kill(&mut self) -> Result<(), PostgresServerError> {
        let pid = self.running_pid()?;
        signal(pid, Signal::Stop)?;
        wait_for_stopped_state(pid, true);
        for child in children_of(pid) {
            // A child that exited meanwhile is a zombie: the signal does nothing.
            let _ = signal(child, Signal::Kill);
        }
        let child = self.child.as_mut().expect("running_pid checked it");
        // `SIGKILL` ends a stopped process too.
        child.kill()?;
        child.wait()?;
        self.child = None;
        self.paused = false;
        Ok(())
    }

    /// Runs one SQL statement with `psql` as the superuser [`POSTGRES_USER`] on the `postgres`
    /// database and returns what it printed, trimmed: the rows one a line, their fields
    /// separated by `|`, without headers (`psql -At`).
    ///
    /// # Errors
    ///
    /// [`PostgresServerError::Client`] when `psql` fails; its output holds the server's error.
    pub fn psql(&self, statement: &str) -> Result<String, PostgresServerError> {
        self.psql_each(&[statement])
    }

    /// Runs `statements` with `psql`, each in a transaction of its own (`ALTER SYSTEM` may not
    /// run in one with others), stopping at the first error.
    fn psql_each(&self, statements: &[&str]) -> Result<String, PostgresServerError> {
        let mut command = Command::new(self.bin_dir.join("psql"));
        command
            .args(["-X", "-w", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(format!(
                "host=127.0.0.1 port={} user={POSTGRES_USER} dbname=postgres connect_timeout=10",
                self.port
            ));
        for statement in statements {
            command.arg("-c").arg(statement);
        }
        command.stdin(Stdio::null());
        let output = command.output()?;
        if !output.status.success() {
            return Err(PostgresServerError::Client {
                port: self.port,
                what: format!("psql {statements:?}"),
                output: format!(
                    "{}\n{}{}",
                    output.status,
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Runs `query` until it prints `expected`, for at most [`REPLICATION_TIMEOUT`].
    fn await_output(&self, query: &str, expected: &str) -> Result<(), PostgresServerError> {
        let started = Instant::now();
        loop {
            let last = self.psql(query)?;
            if last == expected {
                return Ok(());
            }
            if started.elapsed() > REPLICATION_TIMEOUT {
                return Err(PostgresServerError::Client {
                    port: self.port,
                    what: format!("waiting for `{query}` to give `{expected}`"),
                    output: format!("still `{last}` after {REPLICATION_TIMEOUT:?}"),
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a streaming standby of `primary`: a base backup of it (`pg_basebackup` over
    /// 127.0.0.1, as the user the primary runs as) in a temporary directory of its own,
    /// started on a free port with `standby.signal` and a `primary_conninfo` naming it
    /// `distlock_standby_<port>`; returns once the primary's `pg_stat_replication` shows it
    /// streaming. The standby accepts read-only connections at [`url`](Self::url).
    ///
    /// The primary's `synchronous_commit` is set back to `on` (`ALTER SYSTEM`, reloaded;
    /// PostgreSQL's default, off on a throw-away server): a commit it acknowledges from then on
    /// is in its WAL, where a crash ([`kill`](Self::kill)) does not lose it, so what a standby
    /// lacks after a failover is what replication did not carry. With
    /// [`PostgresReplication::Synchronous`], `synchronous_standby_names` also names this
    /// standby, and this returns once every process of the primary took the setting: a commit
    /// made from then on is acknowledged only after the standby flushed it (and blocks while
    /// the standby is gone).
    ///
    /// # Errors
    ///
    /// [`PostgresServerError::Client`] when the base backup fails or the standby does not
    /// stream within 60 s; the errors of [`start`](Self::start).
    pub fn start_standby_of(
        primary: &PostgresServer,
        replication: PostgresReplication,
    ) -> Result<Self, PostgresServerError> {
        let run_as = primary.run_as;
        let dir = tempfile::Builder::new()
            .prefix("distlock-pg-standby-")
            .tempdir()?;
        if let Some(user) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid))?;
        }
        let ports = PortReservation::new(1)?;
        let port = ports.ports[0];
        let name = format!("distlock_standby_{port}");
        let data = dir.path().join("data");
        let mut backup = Command::new(primary.bin_dir.join("pg_basebackup"));
        backup
            .arg("-D")
            .arg(&data)
            .arg("-d")
            .arg(format!(
                "host=127.0.0.1 port={} user={POSTGRES_USER}",
                primary.port
            ))
            // A fast checkpoint: the default spreads it over minutes.
            .args([
                "--wal-method=stream",
                "--checkpoint=fast",
                "--no-sync",
                "-w",
            ])
            .stdin(Stdio::null());
        if let Some(user) = run_as {
            user.apply(&mut backup);
        }
        let output = backup.output()?;
        if !output.status.success() {
            return Err(PostgresServerError::Client {
                port: primary.port,
                what: "pg_basebackup".to_owned(),
                output: format!(
                    "{}\n{}{}",
                    output.status,
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            });
        }
        // What `pg_basebackup -R` would write, with the standby's name (its
        // `application_name` on the primary) for `synchronous_standby_names`.
        let signal_file = data.join("standby.signal");
        fs::write(&signal_file, "")?;
        fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.auto.conf"))?
            .write_all(
                format!(
                    "primary_conninfo = 'host=127.0.0.1 port={} user={POSTGRES_USER} \
                     application_name={name}'\n",
                    primary.port
                )
                .as_bytes(),
            )?;
        if let Some(user) = run_as {
            // Promotion deletes the signal file; the server must own what it may change.
            std::os::unix::fs::chown(&signal_file, Some(user.uid), Some(user.gid))?;
        }
        let mut standby = PostgresServer {
            dir,
            bin_dir: primary.bin_dir.clone(),
            run_as,
            port,
            _ports: ports,
            child: None,
            paused: false,
        };
        standby.launch()?;
        let query = format!(
            "SELECT state || ' ' || sync_state FROM pg_stat_replication \
             WHERE application_name = '{name}'"
        );
        // Each in a transaction of its own: `ALTER SYSTEM` may not share one.
        let mut settings = vec!["ALTER SYSTEM SET synchronous_commit = on".to_owned()];
        if replication == PostgresReplication::Synchronous {
            settings.push(format!(
                "ALTER SYSTEM SET synchronous_standby_names = '{name}'"
            ));
        }
        settings.push("SELECT pg_reload_conf()".to_owned());
        primary.psql_each(&settings.iter().map(String::as_str).collect::<Vec<_>>())?;
        // A session started after the postmaster reloaded sees the new setting; the
        // postmaster signalled its processes before starting that session.
        primary.await_output("SHOW synchronous_commit", "on")?;
        match replication {
            PostgresReplication::Asynchronous => primary.await_output(&query, "streaming async")?,
            PostgresReplication::Synchronous => {
                // Commits wait for a standby only once the checkpointer, on its reload, has
                // marked synchronous standbys as defined. It handles a pending reload at the top
                // of each round, before looking for checkpoint requests: the second checkpoint
                // starts a round that began after the reload was signalled.
                primary.psql_each(&["CHECKPOINT", "CHECKPOINT"])?;
                primary.await_output(&query, "streaming sync")?;
            }
        }
        Ok(standby)
    }

    /// Cuts this standby off its primary, as a network partition would: `primary_conninfo`
    /// is cleared (`ALTER SYSTEM`, reloaded) and this returns once its WAL receiver has exited
    /// (`pg_stat_wal_receiver` is empty). Nothing the primary writes from then on reaches this
    /// server, which stays a read-only standby until [`promote`](Self::promote)d.
    ///
    /// (Freezing a standby does not do that: the primary's WAL sender keeps writing into the
    /// connection, the kernel keeps what it sends, and the thawed standby reads it.)
    ///
    /// # Errors
    ///
    /// [`PostgresServerError::Client`] when the server is not a standby, refuses the setting,
    /// or its receiver does not exit within 60 s.
    pub fn detach_from_primary(&mut self) -> Result<(), PostgresServerError> {
        self.psql_each(&[
            "ALTER SYSTEM SET primary_conninfo = ''",
            "SELECT pg_reload_conf()",
        ])?;
        self.await_output("SELECT count(*) FROM pg_stat_wal_receiver", "0")
    }

    /// Promotes this standby to a primary with `SELECT pg_promote(true, 60)`: it replays the
    /// WAL it has, leaves recovery on a new timeline and accepts writes when this returns.
    /// (`pg_promote` waits until the server is out of recovery, when writes are allowed;
    /// `pg_ctl promote -w` returns when the control file says so, a moment earlier.)
    ///
    /// # Errors
    ///
    /// [`PostgresServerError::Client`] when the server is not a standby or did not finish
    /// promoting within 60 s.
    pub fn promote(&mut self) -> Result<(), PostgresServerError> {
        let promoted = self.psql("SELECT pg_promote(true, 60)")?;
        if promoted == "t" {
            Ok(())
        } else {
            Err(PostgresServerError::Client {
                port: self.port,
                what: "pg_promote".to_owned(),
                output: format!("not promoted within 60 s (`{promoted}`)"),
            })
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // A fast shutdown ends the server's own child processes too (a SIGKILL of the
        // postmaster would leave them to notice on their own).
        let _ = self.stop();
    }
}

/// The processes whose parent is `parent`, from `/proc` (empty where there is none).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // `pid (comm) state ppid …`; comm may contain spaces and parentheses.
                stat.rfind(')')
                    .and_then(|end| stat[end + 1..].split_whitespace().nth(1)?.parse().ok())
                    == Some(parent)
            })
        })
        .collect()
}

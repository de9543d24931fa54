//! [`RedisServer`]: one server process in its own directory, started, paused, resumed, killed,
//! stopped and restarted.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::thread;
use std::time::Duration;

use tempfile::TempDir;

use super::binary::{resolve_binary, server_version};
#[cfg(feature = "testcontainers")]
use super::container::{self, Container};
use super::error::ServerError;
use super::launch::{Launch, LaunchError, read_log_tail};
#[cfg(feature = "testcontainers")]
use super::options::render_args;
use super::options::{ServerOptions, render_config};
use super::ports::PortReservation;
use super::signals::{Signal, signal, wait_for_stopped_state, wait_or_kill};

/// How long [`RedisServer::stop`] waits after `SIGTERM` before sending `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How many fresh ports [`RedisServer::start`] tries when the chosen port is taken meanwhile.
const PORT_ATTEMPTS: usize = 5;
/// How many times [`RedisServer::restart`] retries its (fixed) port when it is taken.
const RESTART_ATTEMPTS: usize = 5;

/// The server log (stdout and stderr of every run), in the server's directory.
const LOG_FILE: &str = "server.log";
/// The configuration file, in the server's directory.
const CONFIG_FILE: &str = "server.conf";

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
    /// `Some` for a server in a container (then `child` is always `None`); removes the
    /// container when dropped.
    #[cfg(feature = "testcontainers")]
    container: Option<Container>,
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
    ///
    /// With `ServerOptions::container` (feature `testcontainers`) the server runs in a
    /// container instead, on the host network (see the `containers` module).
    pub fn start_with(options: ServerOptions) -> Result<Self, ServerError> {
        #[cfg(feature = "testcontainers")]
        if let Some(image) = options.container.clone() {
            return Self::start_in_container(&image, options);
        }
        let binary = resolve_binary(options.binary.as_deref())?;
        let version = server_version(&binary)?;
        let dir = tempfile::Builder::new()
            .prefix("distlock-redis-")
            .tempdir()?;
        let config_path = dir.path().join(CONFIG_FILE);
        let log_path = dir.path().join(LOG_FILE);

        let (child, ports) = on_free_ports(&options, |port, cluster_port| {
            let config = render_config(&options, dir.path(), port, cluster_port)
                .map_err(LaunchError::Fatal)?;
            fs::write(&config_path, config)?;
            Launch {
                binary: &binary,
                config_path: &config_path,
                log_path: &log_path,
                dir: dir.path(),
                port,
                options: &options,
            }
            .run()
        })?;
        Ok(Self {
            child: Some(child),
            #[cfg(feature = "testcontainers")]
            container: None,
            paused: false,
            port: ports.ports[0],
            cluster_port: ports.ports.get(1).copied(),
            binary,
            version,
            options,
            config_path,
            log_path,
            _ports: ports,
            dir,
        })
    }

    /// [`start_with`](Self::start_with) for [`ServerOptions::container`]: the same free ports
    /// and retries, a container instead of a process.
    #[cfg(feature = "testcontainers")]
    fn start_in_container(image: &str, options: ServerOptions) -> Result<Self, ServerError> {
        let dir = tempfile::Builder::new()
            .prefix("distlock-redis-")
            .tempdir()?;
        let config_path = dir.path().join(CONFIG_FILE);
        let log_path = dir.path().join(LOG_FILE);
        let ((container, version), ports) = on_free_ports(&options, |port, cluster_port| {
            let args = render_args(&options, port, cluster_port).map_err(LaunchError::Fatal)?;
            // For the record: what the server was started with.
            fs::write(
                &config_path,
                format!("# docker run {image} {}\n", args.join(" ")),
            )?;
            container::launch(image, &args, port, options.requirepass.as_deref())
        })?;
        Ok(Self {
            child: None,
            container: Some(container),
            paused: false,
            port: ports.ports[0],
            cluster_port: ports.ports.get(1).copied(),
            binary: PathBuf::from("docker"),
            version,
            options,
            config_path,
            log_path,
            _ports: ports,
            dir,
        })
    }

    /// The id of the container the server runs in (`None` for a process); feature
    /// `testcontainers`.
    #[cfg(feature = "testcontainers")]
    pub fn container_id(&self) -> Option<&str> {
        self.container.as_ref().map(Container::id)
    }

    /// The image of the container the server runs in (`None` for a process); feature
    /// `testcontainers`.
    #[cfg(feature = "testcontainers")]
    pub fn image(&self) -> Option<&str> {
        self.container.as_ref().map(Container::image)
    }

    /// Whether the server runs in a container rather than as a process of ours.
    fn in_container(&self) -> bool {
        #[cfg(feature = "testcontainers")]
        return self.container.is_some();
        #[cfg(not(feature = "testcontainers"))]
        false
    }

    /// Whether the server was started and not killed or stopped since (a process that exited
    /// by itself counts until noticed; a container counts until dropped).
    pub(crate) fn is_up(&self) -> bool {
        self.child.is_some() || self.in_container()
    }

    /// [`ServerError::Unsupported`] for the process controls on a server in a container.
    fn process_only(&self, operation: &'static str) -> Result<(), ServerError> {
        if self.in_container() {
            return Err(ServerError::Unsupported {
                port: self.port,
                operation,
                reason: "the server runs in a container, not in a process of the test's own \
                         to signal or start again",
            });
        }
        Ok(())
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
    /// (password percent-encoded) when started with [`ServerOptions::requirepass`];
    /// `rediss://` for a server on TLS (`ServerOptions::tls`, feature `tls`).
    pub fn url(&self) -> String {
        let scheme = if self.is_tls() { "rediss" } else { "redis" };
        match &self.options.requirepass {
            Some(password) => format!(
                "{scheme}://:{}@127.0.0.1:{}/",
                percent_encode(password),
                self.port
            ),
            None => format!("{scheme}://127.0.0.1:{}/", self.port),
        }
    }

    /// Whether the server listens on TLS only (`ServerOptions::tls`, feature `tls`).
    pub fn is_tls(&self) -> bool {
        self.options.has_tls()
    }

    /// The certificates of a server on TLS (`ServerOptions::tls`), for clients of it.
    #[cfg(feature = "tls")]
    pub fn tls_certs(&self) -> Option<&crate::tls::TestCerts> {
        self.options.tls.as_ref().map(|tls| &tls.certs)
    }

    /// The password set with [`ServerOptions::requirepass`], if any.
    pub fn password(&self) -> Option<&str> {
        self.options.requirepass.as_deref()
    }

    /// The pid of the server process, or `None` after [`kill`](Self::kill) or
    /// [`stop`](Self::stop) (or once a server that exited by itself has been noticed by
    /// [`is_running`](Self::is_running) or a fault control). Always `None` for a server in a
    /// container: its process is not the test's.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's working directory (RDB/AOF files, config, log). It lives as long as this
    /// value, across [`kill`](Self::kill) and [`restart`](Self::restart). A server in a
    /// container keeps its files in the container; this directory then only holds the command
    /// line it was started with.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The path of the server log (stdout and stderr of every run, appended). Empty for a
    /// server in a container, whose log is the container's (see [`log_tail`](Self::log_tail)).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `max_lines` lines of the server log (empty if it cannot be read).
    pub fn log_tail(&self, max_lines: usize) -> String {
        #[cfg(feature = "testcontainers")]
        if let Some(container) = &self.container {
            return container.log_tail(max_lines);
        }
        read_log_tail(&self.log_path, 0, max_lines)
    }

    /// The server binary in use (`docker` for a server in a container).
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The flavour and version from `<binary> --version` (from `INFO server` for a server in a
    /// container), e.g. `Redis server v=7.0.15` or
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
        #[cfg(feature = "testcontainers")]
        if let Some(container) = &self.container {
            return container.is_running().unwrap_or(false);
        }
        self.running_pid().is_ok()
    }

    /// Whether the server is paused by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.paused && self.child.is_some()
    }

    /// Freezes the server with `SIGSTOP`: connections stay open (the kernel still accepts new
    /// ones) but no command is answered until [`resume`](Self::resume). Returns once the
    /// process is stopped (checked via `/proc` on Linux).
    ///
    /// [`ServerError::Unsupported`] for a server in a container.
    pub fn pause(&mut self) -> Result<(), ServerError> {
        self.process_only("pause")?;
        let pid = self.running_pid()?;
        signal(pid, Signal::Stop)?;
        wait_for_stopped_state(pid, true);
        self.paused = true;
        Ok(())
    }

    /// Resumes a server frozen by [`pause`](Self::pause) with `SIGCONT`.
    ///
    /// [`ServerError::Unsupported`] for a server in a container.
    pub fn resume(&mut self) -> Result<(), ServerError> {
        self.process_only("resume")?;
        let pid = self.running_pid()?;
        signal(pid, Signal::Cont)?;
        wait_for_stopped_state(pid, false);
        self.paused = false;
        Ok(())
    }

    /// Crashes the server with `SIGKILL` and reaps it. The directory stays, so with
    /// [`ServerOptions::aof_fsync_always`] a later [`restart`](Self::restart) gets the data
    /// back. Does nothing if the server is not running.
    ///
    /// [`ServerError::Unsupported`] for a server in a container.
    pub fn kill(&mut self) -> Result<(), ServerError> {
        self.process_only("kill")?;
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
    ///
    /// [`ServerError::Unsupported`] for a server in a container.
    pub fn stop(&mut self) -> Result<(), ServerError> {
        self.process_only("stop")?;
        let Ok(pid) = self.running_pid() else {
            return Ok(());
        };
        self.paused = false;
        signal(pid, Signal::Term)?;
        // A stopped process only handles SIGTERM once continued; harmless otherwise.
        let _ = signal(pid, Signal::Cont);
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        wait_or_kill(child, STOP_TIMEOUT)?;
        self.child = None;
        Ok(())
    }

    /// Starts the server again on the same port, in the same directory, with the same
    /// options, and waits until it answers `PING` (loading the AOF, if any, first). A still
    /// running server is [`stop`](Self::stop)ped first; use [`kill`](Self::kill) before to
    /// simulate a crash instead.
    ///
    /// [`ServerError::Unsupported`] for a server in a container.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.process_only("restart")?;
        self.stop()?;
        let launch = Launch {
            binary: &self.binary,
            config_path: &self.config_path,
            log_path: &self.log_path,
            dir: self.dir.path(),
            port: self.port,
            options: &self.options,
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

    /// A `redis::Client` for this server (with the password, if any; on TLS with the test CA
    /// and client certificate).
    ///
    /// # Panics
    ///
    /// Never in practice: it panics only if the crate rejects the URL built by
    /// [`url`](Self::url).
    pub fn client(&self) -> redis::Client {
        let url = self.url();
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.options.tls {
            return crate::tls::client(&url, &tls.certs)
                .unwrap_or_else(|err| panic!("invalid test server URL {url}: {err}"));
        }
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

/// Runs `launch` on freshly reserved loopback ports (a second one for the cluster bus when
/// `options` enable cluster mode) until it does not fail for a port taken meanwhile, at most
/// [`PORT_ATTEMPTS`] times; returns what it made and the ports it holds.
fn on_free_ports<T>(
    options: &ServerOptions,
    mut launch: impl FnMut(u16, Option<u16>) -> Result<T, LaunchError>,
) -> Result<(T, PortReservation), ServerError> {
    let mut last_error = None;
    for _ in 0..PORT_ATTEMPTS {
        let ports = PortReservation::new(if options.cluster_enabled { 2 } else { 1 })?;
        match launch(ports.ports[0], ports.ports.get(1).copied()) {
            Ok(made) => return Ok((made, ports)),
            Err(LaunchError::PortInUse(err)) => last_error = Some(err),
            Err(LaunchError::Fatal(err)) => return Err(err),
        }
    }
    Err(last_error.unwrap_or(ServerError::InvalidConfig(
        "no port attempt was made".to_owned(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encode_reserved() {
        assert_eq!(percent_encode("s3cr3t-._~"), "s3cr3t-._~");
        assert_eq!(percent_encode("a:b@c/d%"), "a%3Ab%40c%2Fd%25");
    }
}

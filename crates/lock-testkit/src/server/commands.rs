//! Server-side faults and introspection, sent as commands on a short blocking connection.

use std::time::Duration;

use super::client_info::ClientInfo;
use super::error::ServerError;
use super::process::RedisServer;

/// Connect timeout of the command helpers ([`RedisServer::client_list`] and friends).
const HELPER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Read and write timeout of the command helpers. Generous on purpose: a healthy server with an
/// `appendfsync always` AOF answers nothing while its `fsync` waits for a disk busy with a
/// parallel build, which on a loaded CI machine took more than 5 s (a `SCRIPT FLUSH` fault of
/// a battery timed out at 5 s), and a fault that fails to be injected fails its battery.
const HELPER_IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Server-side faults and introspection, sent as commands.
///
/// These helpers are blocking (like [`pause`](RedisServer::pause) and friends) and short: each
/// opens its own connection (1 s connect timeout, 30 s read/write timeout), sends its command and
/// closes it, so they work from plain and `#[tokio::test]` tests alike, on a server with
/// [`ServerOptions::requirepass`](crate::ServerOptions::requirepass) too. On a
/// [`pause`](RedisServer::pause)d server they fail with [`ServerError::Command`] after the
/// timeout; on a killed or stopped one with [`ServerError::NotRunning`].
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
        if !self.is_up() {
            return Err(ServerError::NotRunning { port: self.port() });
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
            port: self.port(),
            command: command.to_owned(),
            source,
        }
    }
}

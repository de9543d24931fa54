//! A primary and a replica, for tests of what replication (and its failure) does to locks.
//!
//! [`ReplicatedPair`] starts two [`RedisServer`]s and makes the second a replica of the first
//! (`REPLICAOF`), waiting for the initial sync. A test can then
//! [`cut_link`](ReplicatedPair::cut_link) (the replica stops receiving writes but stays up and
//! readable), [`promote`](ReplicatedPair::promote) the replica (`REPLICAOF NO ONE`) — after a
//! cut, that is a replica promoted before it replicated the latest writes, the classic way a
//! failover loses a lock — or [`wait_replicated`](ReplicatedPair::wait_replicated) until the
//! replica has everything the primary has.

use std::net::{Ipv4Addr, TcpListener};
use std::thread;
use std::time::{Duration, Instant};

use crate::server::info::field;
use crate::server::{RedisServer, ServerError, ServerOptions};

/// How long [`ReplicatedPair`] waits for a sync, a catch-up or a role change.
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the replication state is polled while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// The key [`ReplicatedPair::link`] writes and deletes to see the replica acknowledge.
const LINK_PROBE_KEY: &str = "lock-testkit:link-probe";
/// Lines of server log shown in replication errors.
const LOG_TAIL_LINES: usize = 20;

/// A primary and a replica of it: two real `redis-server` (or `valkey-server`) processes on
/// loopback, linked with `REPLICAOF`.
///
/// The replica is read-only (`replica-read-only yes`, the default): writes to it fail with
/// `READONLY` until it is [`promote`](Self::promote)d. Both servers keep the fault controls of
/// [`RedisServer`] through [`primary_mut`](Self::primary_mut) and
/// [`replica_mut`](Self::replica_mut). The link is set with a command, not in the config
/// file: a [`restart`](RedisServer::restart)ed primary is found again by the replica (same
/// port), but a restarted replica comes back as a standalone primary until
/// [`link`](Self::link) is called.
///
/// ```
/// use lock_testkit::ReplicatedPair;
///
/// let mut pair = ReplicatedPair::start()?;
/// let mut primary = pair.primary().client().get_connection()?;
/// let mut replica = pair.replica().client().get_connection()?;
///
/// redis::cmd("SET").arg("before").arg("1").exec(&mut primary)?;
/// pair.wait_replicated()?;
/// let value: Option<String> = redis::cmd("GET").arg("before").query(&mut replica)?;
/// assert_eq!(value.as_deref(), Some("1"));
///
/// pair.cut_link()?; // the replica keeps its data but gets no more writes
/// redis::cmd("SET").arg("after").arg("1").exec(&mut primary)?;
/// pair.promote()?; // a failover to a replica that missed the last write
/// let value: Option<String> = redis::cmd("GET").arg("after").query(&mut replica)?;
/// assert_eq!(value, None);
/// redis::cmd("SET").arg("on-replica").arg("1").exec(&mut replica)?; // writable now
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ReplicatedPair {
    primary: RedisServer,
    replica: RedisServer,
    /// While the link is cut: a listening socket that never accepts, which the replica is
    /// pointed at instead of the primary. Holding it keeps the port ours.
    black_hole: Option<TcpListener>,
}

impl ReplicatedPair {
    /// Starts a primary and a replica with the default [`ServerOptions`] and waits until the
    /// replica has completed its initial sync (at most 10 s).
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a primary and a replica, both with `options`, and waits until the replica has
    /// completed its initial sync (at most 10 s).
    ///
    /// The primary also gets `repl-diskless-sync-delay 0` (so a sync starts at once), and with
    /// [`ServerOptions::requirepass`] the replica gets the matching `masterauth`.
    pub fn start_with(options: ServerOptions) -> Result<Self, ServerError> {
        let primary =
            RedisServer::start_with(options.clone().config("repl-diskless-sync-delay", "0"))?;
        let mut replica_options = options.config("repl-diskless-sync-delay", "0");
        if let Some(password) = primary.password() {
            replica_options = replica_options.config("masterauth", password);
        }
        let replica = RedisServer::start_with(replica_options)?;
        let mut pair = Self {
            primary,
            replica,
            black_hole: None,
        };
        pair.link()?;
        Ok(pair)
    }

    /// The primary.
    pub fn primary(&self) -> &RedisServer {
        &self.primary
    }

    /// The replica (a primary itself after [`promote`](Self::promote)).
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// The primary, for its fault controls ([`RedisServer::pause`], [`RedisServer::kill`]...).
    pub fn primary_mut(&mut self) -> &mut RedisServer {
        &mut self.primary
    }

    /// The replica, for its fault controls ([`RedisServer::pause`], [`RedisServer::kill`]...).
    pub fn replica_mut(&mut self) -> &mut RedisServer {
        &mut self.replica
    }

    /// (Re)makes the replica a replica of the primary (`REPLICAOF 127.0.0.1 <primary port>`)
    /// and waits until it has synced (`master_link_status:up`, no sync in progress) and
    /// acknowledges writes (`WAIT` counts it), at most 10 s each. [`start`](Self::start) does this; call it again after [`cut_link`](Self::cut_link),
    /// [`promote`](Self::promote) or a restart of the replica. The replica's own data is
    /// replaced by the primary's.
    pub fn link(&mut self) -> Result<(), ServerError> {
        let port = self.primary.port().to_string();
        self.replica
            .query::<()>(&["REPLICAOF", "127.0.0.1", &port])?;
        self.black_hole = None;
        self.wait_for(&self.replica, "the initial sync with the primary", |info| {
            field(info, "role") == Some("slave")
                && field(info, "master_port") == Some(port.as_str())
                && field(info, "master_link_status") == Some("up")
                && field(info, "master_sync_in_progress") == Some("0")
        })?;
        // The replica can be done loading before the primary lists it as online.
        self.wait_for(&self.primary, "the replica to be online", |info| {
            info.lines().any(|line| {
                line.starts_with("slave")
                    && line.contains(&format!("port={}", self.replica.port()))
                    && line.contains("state=online")
            })
        })?;
        self.wait_acknowledging()
    }

    /// Waits until the replica acknowledges writes (`WAIT` counts it) and, with an append-only
    /// file on, fsyncs (`WAITAOF 0 1`). Online is not enough: a replica that synced without a
    /// disk gets the command stream, and is asked for acknowledgements, only after its first
    /// own `REPLCONF ACK`, up to a second later; one that just synced rewrites its file first
    /// and reports no fsync until that is done. A server without `WAITAOF` (before Redis 7.2)
    /// has no fsync to wait for.
    fn wait_acknowledging(&self) -> Result<(), ServerError> {
        let failed = |source| ServerError::Command {
            port: self.primary.port(),
            command: "SET/DEL/WAIT (the replica's acknowledgement)".to_owned(),
            source,
        };
        let mut connection = self.primary.client().get_connection().map_err(failed)?;
        let deadline = Instant::now() + REPLICATION_TIMEOUT;
        let mut wait = redis::cmd("WAIT");
        wait.arg(1).arg(50);
        self.probe_until(
            &mut connection,
            deadline,
            "writes",
            &wait,
            |reply| matches!(reply, Ok(redis::Value::Int(count)) if *count >= 1),
        )?;
        let persistence = self.primary.query::<String>(&["INFO", "persistence"])?;
        if field(&persistence, "aof_enabled") != Some("1") {
            return Ok(());
        }
        let mut waitaof = redis::cmd("WAITAOF");
        waitaof.arg(0).arg(1).arg(50);
        self.probe_until(
            &mut connection,
            deadline,
            "fsyncs",
            &waitaof,
            |reply| match reply {
                Ok(redis::Value::Array(counts)) => {
                    matches!(counts.get(1), Some(redis::Value::Int(count)) if *count >= 1)
                }
                // No `WAITAOF` on this server: nothing to wait for.
                Err(error) => error.code() == Some("ERR"),
                Ok(_) => false,
            },
        )
    }

    /// Writes a key, deletes it, and sends `wait` after them, until `done` accepts its answer
    /// or `deadline` passes.
    fn probe_until(
        &self,
        connection: &mut redis::Connection,
        deadline: Instant,
        what: &str,
        wait: &redis::Cmd,
        done: impl Fn(&redis::RedisResult<redis::Value>) -> bool,
    ) -> Result<(), ServerError> {
        loop {
            let answer: redis::RedisResult<(redis::Value,)> = redis::pipe()
                .cmd("SET")
                .arg(LINK_PROBE_KEY)
                .arg(1)
                .ignore()
                .cmd("DEL")
                .arg(LINK_PROBE_KEY)
                .ignore()
                .add_command(wait.clone())
                .query(connection);
            let answer = answer.map(|(value,)| value);
            if done(&answer) {
                return Ok(());
            }
            if let Err(error) = answer
                && error.code() != Some("ERR")
            {
                return Err(ServerError::Command {
                    port: self.primary.port(),
                    command: format!("{what} probe"),
                    source: error,
                });
            }
            if Instant::now() >= deadline {
                return Err(ServerError::Replication(format!(
                    "timed out after {REPLICATION_TIMEOUT:?} waiting for the replica on port {} \
                     to acknowledge {what} of the primary on port {}",
                    self.replica.port(),
                    self.primary.port()
                )));
            }
        }
    }

    /// Stops replication without promoting: the replica no longer receives the primary's
    /// writes, yet stays up, keeps the data it had, answers reads (`replica-serve-stale-data
    /// yes`, the default) and still refuses writes with `READONLY`.
    ///
    /// This points the replica (`REPLICAOF`) at a "black hole": a loopback port where a socket
    /// listens but never accepts, so the replica's handshake never completes
    /// (`master_link_status:down`). The primary keeps serving clients; it just has no replica.
    /// [`link`](Self::link) restores the link (with a full resync), [`promote`](Self::promote)
    /// turns the replica into a primary with the data it had at the cut.
    pub fn cut_link(&mut self) -> Result<(), ServerError> {
        let hole = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let hole_port = hole.local_addr()?.port().to_string();
        self.replica
            .query::<()>(&["REPLICAOF", "127.0.0.1", &hole_port])?;
        self.black_hole = Some(hole);
        self.wait_for(&self.replica, "the link to go down", |info| {
            field(info, "master_port") == Some(hole_port.as_str())
                && field(info, "master_link_status") == Some("down")
        })
    }

    /// Promotes the replica to a primary (`REPLICAOF NO ONE`): it now accepts writes. The old
    /// primary keeps running and knows nothing of it: two primaries with diverging data.
    ///
    /// After [`cut_link`](Self::cut_link) this is a failover to a replica that had not
    /// replicated the writes made since the cut. Without a cut (or after
    /// [`wait_replicated`](Self::wait_replicated)) it has everything acknowledged before.
    pub fn promote(&mut self) -> Result<(), ServerError> {
        self.replica.query::<()>(&["REPLICAOF", "NO", "ONE"])?;
        self.black_hole = None;
        self.wait_for(&self.replica, "the replica to become a primary", |info| {
            field(info, "role") == Some("master")
        })
    }

    /// Waits (at most 10 s) until the replica has processed everything the primary had written
    /// when this was called: the replica's replication offset reaches the primary's
    /// `master_repl_offset`.
    ///
    /// # Errors
    ///
    /// [`ServerError::Replication`] if the replica does not catch up in time, e.g. after
    /// [`cut_link`](Self::cut_link) or [`promote`](Self::promote).
    pub fn wait_replicated(&self) -> Result<(), ServerError> {
        self.wait_replicated_within(REPLICATION_TIMEOUT)
    }

    /// [`wait_replicated`](Self::wait_replicated) with another time limit, e.g. a short one to
    /// check that a write does *not* replicate.
    pub fn wait_replicated_within(&self, timeout: Duration) -> Result<(), ServerError> {
        let info = self.primary.query::<String>(&["INFO", "replication"])?;
        let target = offset(&info).ok_or_else(|| {
            ServerError::Replication("the primary reports no master_repl_offset".to_owned())
        })?;
        let port = self.primary.port().to_string();
        self.wait_for_within(
            &self.replica,
            &format!("the replica to reach offset {target}"),
            timeout,
            |info| {
                field(info, "role") == Some("slave")
                    && field(info, "master_port") == Some(port.as_str())
                    && field(info, "master_link_status") == Some("up")
                    && offset(info).is_some_and(|done| done >= target)
            },
        )
    }

    /// Polls `INFO replication` of `server` until `done` holds (at most 10 s).
    fn wait_for(
        &self,
        server: &RedisServer,
        what: &str,
        done: impl FnMut(&str) -> bool,
    ) -> Result<(), ServerError> {
        self.wait_for_within(server, what, REPLICATION_TIMEOUT, done)
    }

    /// Polls `INFO replication` of `server` until `done` holds, at most `timeout`.
    fn wait_for_within(
        &self,
        server: &RedisServer,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&str) -> bool,
    ) -> Result<(), ServerError> {
        let deadline = Instant::now() + timeout;
        loop {
            let info = server.query::<String>(&["INFO", "replication"])?;
            if done(&info) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(ServerError::Replication(format!(
                    "timed out after {timeout:?} waiting for {what} (server on port {}; \
                     primary on port {}, replica on port {})\n--- INFO replication ---\n{}\n\
                     --- tail of the primary's log ---\n{}\n\
                     --- tail of the replica's log ---\n{}",
                    server.port(),
                    self.primary.port(),
                    self.replica.port(),
                    info.trim_end(),
                    self.primary.log_tail(LOG_TAIL_LINES),
                    self.replica.log_tail(LOG_TAIL_LINES),
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

/// `master_repl_offset` from `INFO replication`: on a primary, how much it has written to its
/// replication stream; on a replica, how much of it the replica has processed.
fn offset(info: &str) -> Option<u64> {
    field(info, "master_repl_offset").and_then(|value| value.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields() {
        let info = "# Replication\r\nrole:slave\r\nmaster_port:7000\r\n\
                    master_repl_offset:42\r\nmaster_link_status:up\r\n";
        assert_eq!(field(info, "role"), Some("slave"));
        assert_eq!(field(info, "master_port"), Some("7000"));
        assert_eq!(field(info, "master"), None);
        assert_eq!(offset(info), Some(42));
    }
}

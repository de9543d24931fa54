//! A primary with replicas watched by Sentinels, for tests of Sentinel mode and of what a
//! failover does to locks.
//!
//! [`SentinelGroup`] starts a primary, its replicas (`REPLICAOF`) and three Sentinels
//! (`--sentinel`, quorum 2, `down-after-milliseconds` 1000) on free loopback ports, and returns
//! once every replica has synced and every Sentinel knows the replicas and the other
//! Sentinels, so a failover can run. A test can then [`failover`](SentinelGroup::failover)
//! (`SENTINEL FAILOVER`), or kill or pause the primary through
//! [`node_mut`](SentinelGroup::node_mut) and wait for the Sentinels to promote a replica
//! ([`wait_new_primary`](SentinelGroup::wait_new_primary)).

use std::thread;
use std::time::{Duration, Instant};

use crate::server::info::field;
use crate::server::{RedisServer, ServerError, ServerOptions};

/// The name the Sentinels know the primary by.
pub const SERVICE: &str = "distlock";
/// How long the fixture waits for the group to settle (start, failover).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the group's state is polled while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// The Sentinels' `down-after-milliseconds`.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);
/// How many Sentinels watch the group.
const SENTINELS: usize = 3;

/// A primary, its replicas and three Sentinels: real processes on loopback.
///
/// Data nodes keep their index: node 0 starts as the primary, nodes `1..` as replicas; ask
/// [`primary`](Self::primary) which one it is now.
///
/// ```
/// use lock_testkit::SentinelGroup;
///
/// let mut group = SentinelGroup::start(1)?;
/// assert_eq!(group.primary()?, 0);
/// group.failover()?;
/// assert_eq!(group.primary()?, 1);
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
#[derive(Debug)]
pub struct SentinelGroup {
    nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl SentinelGroup {
    /// Starts a primary with `replicas` replicas and three Sentinels, default options.
    ///
    /// # Errors
    ///
    /// As [`start_with`](Self::start_with).
    pub fn start(replicas: usize) -> Result<Self, ServerError> {
        Self::start_with(replicas, ServerOptions::default())
    }

    /// Starts a primary and `replicas` replicas with `options` (a password set with
    /// [`ServerOptions::requirepass`] is also given to the replicas and the Sentinels; with
    /// `ServerOptions::tls`, feature `tls`, the Sentinels run on TLS too), then three Sentinels,
    /// and waits (at most 30 s) until the group can fail over.
    ///
    /// # Errors
    ///
    /// [`ServerError::Replication`] when it does not settle in time; any error of starting a
    /// server.
    pub fn start_with(replicas: usize, options: ServerOptions) -> Result<Self, ServerError> {
        let mut data = options.config("repl-diskless-sync-delay", "0");
        let password = data.requirepass.clone();
        if let Some(password) = &password {
            data = data.config("masterauth", password.clone());
        }
        let primary = RedisServer::start_with(data.clone())?;
        let primary_port = primary.port().to_string();
        let mut nodes = vec![primary];
        for _ in 0..replicas {
            let replica = RedisServer::start_with(data.clone())?;
            replica.query::<()>(&["REPLICAOF", "127.0.0.1", &primary_port])?;
            nodes.push(replica);
        }
        #[allow(unused_mut)] // changed only with TLS
        let mut sentinel =
            ServerOptions::new().sentinel(SERVICE, nodes[0].port(), 2, DOWN_AFTER, password);
        // The Sentinels on TLS too, with TLS links to the data nodes and to each other.
        #[cfg(feature = "tls")]
        if let Some(tls) = &data.tls {
            sentinel.tls = Some(tls.clone());
        }
        let sentinels = (0..SENTINELS)
            .map(|_| RedisServer::start_with(sentinel.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let group = SentinelGroup { nodes, sentinels };
        group.wait_until(
            "the replicas to sync and the Sentinels to know each other",
            |group| Ok(group.replicas_synced(0)? && group.sentinels_ready(replicas)?),
        )?;
        Ok(group)
    }

    /// Data node `index` (0 started as the primary).
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    pub fn node(&self, index: usize) -> &RedisServer {
        &self.nodes[index]
    }

    /// Data node `index`, for its fault controls.
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }

    /// Sentinel `index` (of three), e.g. for its [`client_list`](RedisServer::client_list).
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    pub fn sentinel(&self, index: usize) -> &RedisServer {
        &self.sentinels[index]
    }

    /// The number of data nodes (primary and replicas).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there is no data node (never).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The Sentinels' URLs (`redis://127.0.0.1:<port>/`, `rediss://` on TLS).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The service name the Sentinels know the primary by.
    pub fn service(&self) -> &str {
        SERVICE
    }

    /// The data node the Sentinels name as the primary now (`SENTINEL
    /// GET-MASTER-ADDR-BY-NAME`, first Sentinel that answers).
    ///
    /// # Errors
    ///
    /// [`ServerError::Replication`] when no Sentinel answers with a known node.
    pub fn primary(&self) -> Result<usize, ServerError> {
        for sentinel in &self.sentinels {
            if let Ok((_, port)) =
                sentinel.query::<(String, u16)>(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])
                && let Some(index) = self.nodes.iter().position(|node| node.port() == port)
            {
                return Ok(index);
            }
        }
        Err(ServerError::Replication(
            "no Sentinel names a known primary".into(),
        ))
    }

    /// Makes the Sentinels fail over now (`SENTINEL FAILOVER`, no agreement needed) and waits
    /// (at most 30 s) until a replica is the primary, says so itself, and every other running
    /// data node replicates it.
    ///
    /// # Errors
    ///
    /// [`ServerError::Replication`] when that does not happen in time.
    pub fn failover(&mut self) -> Result<(), ServerError> {
        let old = self.primary()?;
        self.sentinels[0].query::<()>(&["SENTINEL", "FAILOVER", SERVICE])?;
        self.wait_new_primary(old).map(|_| ())
    }

    /// Waits (at most 30 s) until the Sentinels have promoted another node than `old`, it says
    /// it is a primary, and every other running data node has synced with it. Returns it.
    ///
    /// # Errors
    ///
    /// [`ServerError::Replication`] when that does not happen in time.
    pub fn wait_new_primary(&self, old: usize) -> Result<usize, ServerError> {
        let mut found = None;
        self.wait_until("the Sentinels to promote a replica", |group| {
            let Ok(new) = group.primary() else {
                return Ok(false);
            };
            if new == old {
                return Ok(false);
            }
            let info: String = group.nodes[new].query(&["INFO", "replication"])?;
            if field(&info, "role") != Some("master") {
                return Ok(false);
            }
            found = Some(new);
            group.replicas_synced(new)
        })?;
        found.ok_or_else(|| ServerError::Replication("no new primary".into()))
    }

    /// Whether every running data node but `primary` replicates it and has synced.
    fn replicas_synced(&self, primary: usize) -> Result<bool, ServerError> {
        let port = self.nodes[primary].port().to_string();
        for (index, node) in self.nodes.iter().enumerate() {
            if index == primary || node.pid().is_none() || node.is_paused() {
                continue;
            }
            let info: String = node.query(&["INFO", "replication"])?;
            if field(&info, "role") != Some("slave")
                || field(&info, "master_port") != Some(port.as_str())
                || field(&info, "master_link_status") != Some("up")
                || field(&info, "master_sync_in_progress") != Some("0")
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether every Sentinel knows `replicas` replicas and the other Sentinels.
    fn sentinels_ready(&self, replicas: usize) -> Result<bool, ServerError> {
        for sentinel in &self.sentinels {
            let known: Vec<redis::Value> = sentinel.query(&["SENTINEL", "REPLICAS", SERVICE])?;
            let peers: Vec<redis::Value> = sentinel.query(&["SENTINEL", "SENTINELS", SERVICE])?;
            if known.len() < replicas || peers.len() < SENTINELS - 1 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn wait_until(
        &self,
        what: &str,
        mut done: impl FnMut(&Self) -> Result<bool, ServerError>,
    ) -> Result<(), ServerError> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let last = match done(self) {
                Ok(true) => return Ok(()),
                Ok(false) => None,
                Err(error) => Some(error),
            };
            if Instant::now() >= deadline {
                return Err(ServerError::Replication(format!(
                    "timed out after {SETTLE_TIMEOUT:?} waiting for {what}{}\n\
                     --- tail of the first Sentinel's log ---\n{}",
                    last.map(|error| format!(" (last error: {error})"))
                        .unwrap_or_default(),
                    self.sentinels[0].log_tail(30),
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

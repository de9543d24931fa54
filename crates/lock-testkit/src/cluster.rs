//! A Redis Cluster of real server processes, for tests of cluster mode and of what failovers
//! and slot moves do to locks.
//!
//! [`RedisCluster`] starts `primaries × (1 + replicas)` servers with `cluster-enabled yes` on
//! free loopback ports, splits the 16,384 slots evenly between the primaries, makes the
//! replicas, and returns once every node reports `cluster_state:ok`, agrees on who serves every
//! slot and every replica has synced. A test can then hurt it: a manual failover
//! ([`failover`](RedisCluster::failover), plain, `FORCE` or `TAKEOVER`), killing or pausing a
//! node (through [`node_mut`](RedisCluster::node_mut)), or moving a slot with its keys to
//! another primary ([`move_slot`](RedisCluster::move_slot)).
//!
//! Everything is done with the servers' own commands (`CLUSTER MEET`, `ADDSLOTSRANGE`,
//! `REPLICATE`, `FAILOVER`, `SETSLOT`, `MIGRATE`), so the same fixture runs on Redis 7+ and
//! Valkey, and with its nodes in containers (feature `testcontainers`): the nodes are
//! [`RedisServer`]s started with the options given, so `ServerOptions::container(image)` makes
//! each one a container on the host network, and only the launch differs (see
//! `crate::containers`). Such nodes cannot be paused or killed ([`ServerError::Unsupported`]).

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use crate::nodes::RedisNodes;
use crate::server::info::field;
use crate::server::{RedisServer, ServerError, ServerOptions};

/// The number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16_384;
/// How long the fixture waits for the cluster to settle (formation, failover, slot move).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the cluster state is polled while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Keys moved per `MIGRATE` while moving a slot.
const MIGRATE_BATCH: usize = 100;

/// How a replica takes over in [`RedisCluster::failover`] (`CLUSTER FAILOVER [FORCE|TAKEOVER]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailoverMode {
    /// The replica and its primary agree: the primary stops taking writes, the replica catches
    /// up with it, then takes over. No acknowledged write is lost.
    Coordinated,
    /// The replica does not wait for its primary (which may be down), but still asks the other
    /// primaries to vote for it.
    Force,
    /// The replica takes over on its own, without any vote (a new config epoch of its own).
    Takeover,
}

/// A Redis Cluster of real `redis-server` (or `valkey-server`) processes on loopback.
///
/// Node indexes are fixed at start: `0..primaries` start as primaries, and the replicas of
/// primary `p` are `primaries + p * replicas ..`. Roles change with failovers; ask
/// [`primary_of_slot`](Self::primary_of_slot) and [`role`](Self::role) for the current ones.
/// Every node runs with `cluster-node-timeout 1000` (a killed primary is replaced by its replica
/// within a few seconds) and `repl-diskless-sync-delay 0`.
///
/// ```
/// use lock_testkit::{FailoverMode, RedisCluster};
///
/// let mut cluster = RedisCluster::start(3, 1)?;
/// let slot = cluster.slot_of("orders:42")?;
/// let primary = cluster.primary_of_slot(slot)?;
/// let replica = cluster.replicas_of(primary)?[0];
/// cluster.failover(replica, FailoverMode::Coordinated)?;
/// assert_eq!(cluster.primary_of_slot(slot)?, replica);
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: RedisNodes,
    /// The cluster node id of each node, by index.
    ids: Vec<String>,
    primaries: usize,
}

/// One line of `CLUSTER NODES`, as far as the fixture needs it.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    primary: bool,
    failed: bool,
    /// The id of the primary this node replicates (replicas only).
    replicates: Option<String>,
    /// Slot ranges served (primaries only).
    slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts a cluster of `primaries` primaries with `replicas` replicas each, with the default
    /// [`ServerOptions`]. See [`start_with`](Self::start_with).
    ///
    /// # Errors
    ///
    /// As [`start_with`](Self::start_with).
    pub fn start(primaries: usize, replicas: usize) -> Result<Self, ServerError> {
        Self::start_with(primaries, replicas, ServerOptions::default())
    }

    /// Starts `primaries × (1 + replicas)` servers with `options` plus cluster mode, forms the
    /// cluster and waits until it is ready (at most 30 s): `cluster_state:ok` on every node,
    /// every node agreeing on the owner of every slot, every replica synced. With
    /// `ServerOptions::tls` (feature `tls`) the cluster bus and replication run on TLS too
    /// (`tls-cluster yes`), and the nodes announce their TLS ports.
    ///
    /// # Errors
    ///
    /// [`ServerError::NoNodes`] for 0 primaries; [`ServerError::Cluster`] when the cluster does
    /// not form in time (with the state seen); any error of starting a server.
    pub fn start_with(
        primaries: usize,
        replicas: usize,
        options: ServerOptions,
    ) -> Result<Self, ServerError> {
        if primaries == 0 {
            return Err(ServerError::NoNodes);
        }
        let total = primaries * (1 + replicas);
        let mut options = options
            .cluster_enabled(true)
            .config("cluster-node-timeout", "1000")
            .config("repl-diskless-sync-delay", "0");
        // Replicas authenticate to their primary with the same password.
        if let Some(password) = options.requirepass.clone() {
            options = options.config("masterauth", password);
        }
        let nodes = RedisNodes::start_with(total, options)?;
        let ids = nodes
            .iter()
            .map(|node| node.query::<String>(&["CLUSTER", "MYID"]))
            .collect::<Result<Vec<_>, _>>()?;
        let mut cluster = RedisCluster {
            nodes,
            ids,
            primaries,
        };
        cluster.form(replicas)?;
        Ok(cluster)
    }

    fn form(&mut self, replicas: usize) -> Result<(), ServerError> {
        // Distinct config epochs up front, so the nodes need not settle collisions first.
        for (index, node) in self.nodes.iter().enumerate() {
            let epoch = (index + 1).to_string();
            node.query::<()>(&["CLUSTER", "SET-CONFIG-EPOCH", &epoch])?;
        }
        let per_primary = usize::from(SLOTS) / self.primaries;
        for primary in 0..self.primaries {
            let start = primary * per_primary;
            let end = if primary + 1 == self.primaries {
                usize::from(SLOTS) - 1
            } else {
                start + per_primary - 1
            };
            self.nodes[primary].query::<()>(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &start.to_string(),
                &end.to_string(),
            ])?;
        }
        let first = &self.nodes[0];
        for node in self.nodes.iter().skip(1) {
            let bus = node
                .cluster_port()
                .expect("cluster nodes have a bus port")
                .to_string();
            first.query::<()>(&[
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                &node.port().to_string(),
                &bus,
            ])?;
        }
        // A node can only replicate a primary it knows.
        let total = self.nodes.len();
        self.wait_until("every node to know every other node", |cluster| {
            Ok(cluster
                .nodes
                .iter()
                .all(|node| cluster_nodes(node).is_ok_and(|lines| lines.len() == total)))
        })?;
        for primary in 0..self.primaries {
            for replica in 0..replicas {
                let index = self.primaries + primary * replicas + replica;
                let id = self.ids[primary].clone();
                self.nodes[index].query::<()>(&["CLUSTER", "REPLICATE", &id])?;
            }
        }
        self.wait_ready()
    }

    /// The number of nodes (primaries and replicas).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no node (never: it has at least one primary).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `index`.
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    pub fn node(&self, index: usize) -> &RedisServer {
        &self.nodes[index]
    }

    /// Node `index`, for its fault controls ([`RedisServer::pause`], [`RedisServer::kill`]...).
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }

    /// The cluster node id of node `index`.
    ///
    /// # Panics
    ///
    /// If `index` is out of range.
    pub fn node_id(&self, index: usize) -> &str {
        &self.ids[index]
    }

    /// The URL of every node, usable as seeds for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.urls()
    }

    /// The slot of `key` (`CLUSTER KEYSLOT` on a running node).
    ///
    /// # Errors
    ///
    /// The last error met when no running node answers.
    pub fn slot_of(&self, key: &str) -> Result<u16, ServerError> {
        self.ask_any(&["CLUSTER", "KEYSLOT", key])
    }

    /// The node currently serving `slot`, as the running nodes see it (the view of the highest
    /// config epoch wins when they disagree during a change).
    ///
    /// # Errors
    ///
    /// [`ServerError::Cluster`] when no running node lists an owner for the slot.
    pub fn primary_of_slot(&self, slot: u16) -> Result<usize, ServerError> {
        let lines = self.view()?;
        lines
            .iter()
            .find(|line| line.primary && !line.failed && serves(line, slot))
            .and_then(|line| self.index_of(&line.id))
            .ok_or_else(|| ServerError::Cluster(format!("no node serves slot {slot}")))
    }

    /// The nodes currently replicating node `primary`.
    ///
    /// # Errors
    ///
    /// The last error met when no running node answers.
    pub fn replicas_of(&self, primary: usize) -> Result<Vec<usize>, ServerError> {
        let id = &self.ids[primary];
        Ok(self
            .view()?
            .iter()
            .filter(|line| line.replicates.as_deref() == Some(id.as_str()))
            .filter_map(|line| self.index_of(&line.id))
            .collect())
    }

    /// Whether node `index` is a primary (`true`) or a replica, as it says itself.
    ///
    /// # Errors
    ///
    /// Any error of asking the node (killed, paused).
    pub fn role(&self, index: usize) -> Result<bool, ServerError> {
        let lines = cluster_nodes(&self.nodes[index])?;
        Ok(lines
            .iter()
            .find(|line| line.id == self.ids[index])
            .is_some_and(|line| line.primary))
    }

    /// Makes replica `replica` take over from its primary (`CLUSTER FAILOVER` with `mode`) and
    /// waits (at most 30 s) until the running nodes agree it serves its former primary's slots
    /// and the cluster is ready again.
    ///
    /// # Errors
    ///
    /// [`ServerError::Cluster`] when `replica` is not a replica, or the takeover does not
    /// complete in time.
    pub fn failover(&mut self, replica: usize, mode: FailoverMode) -> Result<(), ServerError> {
        let view = self.view()?;
        let me = view
            .iter()
            .find(|line| line.id == self.ids[replica])
            .filter(|line| !line.primary)
            .ok_or_else(|| ServerError::Cluster(format!("node {replica} is not a replica")))?;
        let old_primary = me.replicates.clone().unwrap_or_default();
        let slots = view
            .iter()
            .find(|line| line.id == old_primary)
            .map(|line| line.slots.clone())
            .unwrap_or_default();
        let mut command = vec!["CLUSTER", "FAILOVER"];
        match mode {
            FailoverMode::Coordinated => {}
            FailoverMode::Force => command.push("FORCE"),
            FailoverMode::Takeover => command.push("TAKEOVER"),
        }
        self.nodes[replica].query::<()>(&command)?;
        let id = self.ids[replica].clone();
        // A former primary that still runs turns into a replica of the new one.
        let old_running = self
            .index_of(&old_primary)
            .is_some_and(|old| self.nodes[old].is_up() && !self.nodes[old].is_paused());
        self.wait_until("the replica to take over its primary's slots", |cluster| {
            let view = cluster.view_of_running()?;
            Ok(view.iter().all(|lines| {
                let took_over = lines.iter().any(|line| {
                    line.id == id
                        && line.primary
                        && slots.iter().all(|range| line.slots.contains(range))
                });
                let demoted = !old_running
                    || lines.iter().any(|line| {
                        line.id == old_primary && line.replicates.as_deref() == Some(id.as_str())
                    });
                took_over && demoted
            }))
        })?;
        self.wait_ready()
    }

    /// Moves `slot` and every key in it to primary `to`, the way `redis-cli --cluster reshard`
    /// does (`SETSLOT IMPORTING`/`MIGRATING`, `MIGRATE` in batches, `SETSLOT NODE`), and waits
    /// until the running nodes agree. Clients meet `ASK` while keys move and `MOVED` after.
    ///
    /// # Errors
    ///
    /// [`ServerError::Cluster`] when `to` is not a primary or the move does not settle in time;
    /// a failed command.
    pub fn move_slot(&mut self, slot: u16, to: usize) -> Result<(), ServerError> {
        let from = self.primary_of_slot(slot)?;
        if from == to {
            return Ok(());
        }
        if !self.role(to)? {
            return Err(ServerError::Cluster(format!("node {to} is not a primary")));
        }
        let slot_arg = slot.to_string();
        let (from_id, to_id) = (self.ids[from].clone(), self.ids[to].clone());
        let to_port = self.nodes[to].port().to_string();
        self.nodes[to].query::<()>(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id])?;
        self.nodes[from].query::<()>(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id])?;
        let batch = MIGRATE_BATCH.to_string();
        loop {
            let keys: Vec<String> =
                self.nodes[from].query(&["CLUSTER", "GETKEYSINSLOT", &slot_arg, &batch])?;
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000"];
            if let Some(password) = self.nodes[to].password() {
                migrate.extend(["AUTH", password]);
            }
            migrate.push("KEYS");
            migrate.extend(keys.iter().map(String::as_str));
            self.nodes[from].query::<()>(&migrate)?;
        }
        // The new owner first, so it never answers with a redirect back to the old one.
        self.nodes[to].query::<()>(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id])?;
        self.nodes[from].query::<()>(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id])?;
        for index in 0..self.nodes.len() {
            if index != from && index != to && self.role(index).unwrap_or(false) {
                let _ = self.nodes[index]
                    .query::<()>(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]);
            }
        }
        self.wait_until("every node to agree on the slot's new owner", |cluster| {
            Ok(cluster.view_of_running()?.iter().all(|lines| {
                lines
                    .iter()
                    .any(|line| line.id == to_id && serves(line, slot))
            }))
        })
    }

    /// Waits (at most 30 s) until every running node reports `cluster_state:ok`, all of them
    /// agree on the owner of every slot, and every running replica's link to its primary is up.
    ///
    /// # Errors
    ///
    /// [`ServerError::Cluster`] with the state last seen, when that does not happen in time.
    pub fn wait_ready(&self) -> Result<(), ServerError> {
        self.wait_until("the cluster to be ready", |cluster| {
            let mut owners: Option<BTreeMap<(u16, u16), String>> = None;
            for node in cluster.running() {
                let info: String = node.query(&["CLUSTER", "INFO"])?;
                if field(&info, "cluster_state") != Some("ok") {
                    return Ok(false);
                }
                let lines = cluster_nodes(node)?;
                let mine: BTreeMap<(u16, u16), String> = lines
                    .iter()
                    .filter(|line| line.primary && !line.failed)
                    .flat_map(|line| line.slots.iter().map(|range| (*range, line.id.clone())))
                    .collect();
                if owners.as_ref().is_some_and(|owners| *owners != mine) {
                    return Ok(false);
                }
                owners = Some(mine);
                let replication: String = node.query(&["INFO", "replication"])?;
                if field(&replication, "role") == Some("slave")
                    && (field(&replication, "master_link_status") != Some("up")
                        || field(&replication, "master_sync_in_progress") != Some("0"))
                {
                    return Ok(false);
                }
            }
            Ok(owners.is_some())
        })
    }

    fn running(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes
            .iter()
            .filter(|node| node.is_up() && !node.is_paused())
    }

    /// `CLUSTER NODES` of every running node.
    fn view_of_running(&self) -> Result<Vec<Vec<NodeLine>>, ServerError> {
        self.running().map(cluster_nodes).collect()
    }

    /// The view of the running node with the highest config epoch it knows of (first answering).
    fn view(&self) -> Result<Vec<NodeLine>, ServerError> {
        let mut last = None;
        let mut best: Option<(u64, Vec<NodeLine>)> = None;
        for node in self.running() {
            match (
                node.query::<String>(&["CLUSTER", "INFO"]),
                cluster_nodes(node),
            ) {
                (Ok(info), Ok(lines)) => {
                    let epoch = field(&info, "cluster_current_epoch")
                        .and_then(|epoch| epoch.parse().ok())
                        .unwrap_or(0);
                    if best.as_ref().is_none_or(|(seen, _)| epoch > *seen) {
                        best = Some((epoch, lines));
                    }
                }
                (Err(error), _) | (_, Err(error)) => last = Some(error),
            }
        }
        best.map(|(_, lines)| lines)
            .ok_or_else(|| last.unwrap_or(ServerError::Cluster("no node is running".into())))
    }

    fn ask_any<T: redis::FromRedisValue>(&self, args: &[&str]) -> Result<T, ServerError> {
        let mut last = ServerError::Cluster("no node is running".into());
        for node in self.running() {
            match node.query(args) {
                Ok(value) => return Ok(value),
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    fn index_of(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|known| known == id)
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
                let state: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|node| {
                        let nodes = node
                            .query::<String>(&["CLUSTER", "NODES"])
                            .unwrap_or_else(|error| format!("({error})"));
                        format!("--- node on port {} ---\n{}", node.port(), nodes.trim_end())
                    })
                    .collect();
                return Err(ServerError::Cluster(format!(
                    "timed out after {SETTLE_TIMEOUT:?} waiting for {what}{}\n{}",
                    last.map(|error| format!(" (last error: {error})"))
                        .unwrap_or_default(),
                    state.join("\n")
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

fn serves(line: &NodeLine, slot: u16) -> bool {
    line.slots
        .iter()
        .any(|&(start, end)| (start..=end).contains(&slot))
}

fn cluster_nodes(node: &RedisServer) -> Result<Vec<NodeLine>, ServerError> {
    let text: String = node.query(&["CLUSTER", "NODES"])?;
    Ok(text.lines().filter_map(parse_node_line).collect())
}

/// Parses `<id> <ip:port@bus> <flags> <primary id|-> <ping> <pong> <epoch> <link> <slot>...`.
fn parse_node_line(line: &str) -> Option<NodeLine> {
    let fields: Vec<&str> = line.split_ascii_whitespace().collect();
    if fields.len() < 8 {
        return None;
    }
    let flags: Vec<&str> = fields[2].split(',').collect();
    let primary = flags.contains(&"master");
    let failed = flags.contains(&"fail") || flags.contains(&"noaddr");
    let replicates = (fields[3] != "-").then(|| fields[3].to_owned());
    let slots = fields[8..]
        .iter()
        // `[slot->-id]` / `[slot-<-id]`: a slot being moved; the owner is listed elsewhere.
        .filter(|range| !range.starts_with('['))
        .filter_map(|range| match range.split_once('-') {
            Some((start, end)) => Some((start.parse().ok()?, end.parse().ok()?)),
            None => {
                let slot = range.parse().ok()?;
                Some((slot, slot))
            }
        })
        .collect();
    Some(NodeLine {
        id: fields[0].to_owned(),
        primary,
        failed,
        replicates,
        slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lines() {
        let primary = parse_node_line(
            "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004 myself,master - 0 \
             1426238317239 4 connected 0-5460 5462 [5463->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]",
        )
        .unwrap();
        assert!(primary.primary && !primary.failed);
        assert_eq!(primary.slots, vec![(0, 5460), (5462, 5462)]);
        assert_eq!(primary.replicates, None);
        let replica = parse_node_line(
            "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 slave,fail \
             07c37dfeb235213a872192d90877d0cd55635b91 0 1426238316232 2 disconnected",
        )
        .unwrap();
        assert!(!replica.primary && replica.failed);
        assert_eq!(
            replica.replicates.as_deref(),
            Some("07c37dfeb235213a872192d90877d0cd55635b91")
        );
        assert!(parse_node_line("short line").is_none());
    }
}

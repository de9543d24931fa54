//! Layer 2, the connection: one replaceable, fenced connection that knows commands, not locks
//! ([`Connection`]), the notification connection ([`pubsub`]), and the TLS settings every
//! connection is opened with ([`tls`]). Uses only the wire layer.

pub(crate) mod alignment;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod deferred;
pub(crate) mod ledger;
pub(crate) mod manners;
pub(crate) mod probe;
pub(crate) mod pubsub;
pub(crate) mod reprobe;
pub(crate) mod scan;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel_watch;
#[cfg(feature = "cluster")]
pub(crate) mod shards;
#[cfg(feature = "cluster")]
pub(crate) mod slot_owners;
pub(crate) mod source;
pub(crate) mod standalone;
pub(crate) mod tls;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;

use lock_core::Result;
use redis::{Cmd, Pipeline, RedisResult, Value};

use self::alignment::Alignment;
#[cfg(feature = "cluster")]
use self::cluster::Cluster;
use self::deferred::Deferred;
pub(crate) use self::ledger::Proof;
pub(crate) use self::manners::Manners;
#[cfg(feature = "cluster")]
use self::slot_owners::SlotOwners;
use self::standalone::Standalone;
use crate::wire::capabilities::Capabilities;
#[cfg(feature = "cluster")]
use crate::wire::capabilities::Echo;

/// The command connection of one backend: the seam where the server's topology is hidden from
/// the lock calls above it.
///
/// An enum rather than a trait object, so a call on one server costs no boxing and no dynamic
/// dispatch; each operation matches on the kind (a cluster's sends are boxed: their futures are
/// larger, and every future up the call chain would otherwise carry their size, moved a few
/// times per call): [`Connection::Standalone`] (one server) and, with the
/// `cluster` feature, `Connection::Cluster` (a Redis Cluster; see `cluster` for what it
/// does not do yet: fenced replacement, deferred cleanups).
///
/// # Contract
///
/// What the standalone kind guarantees (behind Sentinels too), and the calls layer relies on;
/// the cluster kind keeps the first three and the last, replaces its whole connection on
/// doubt without a fence, and keeps no deferred requests (see `cluster`):
///
/// - **One link per call.** A call takes the current [`Link`] ([`Connection::ready`], or
///   [`Connection::current`] to wait while a replacement is being made) and sends all its
///   requests on it: the request, a `PING` proving it in step, a resend. Replies on one link
///   come back in the order of the requests.
/// - **Request ids.** [`Connection::next_request_id`] hands out ids that differ from every id
///   in flight; scripts and `PING`s echo them, proving a reply belongs to its request.
/// - **Routes.** Each single request names its route, the lock name whose keys it touches
///   (every key of a lock shares the name's cluster slot). A pipeline's commands are routed by
///   the keys in their own arguments. Standalone ignores routes.
/// - **Discard on doubt.** A transport error in [`Connection::send`] discards the link, and
///   [`Connection::in_step`] discards a link whose `PING` comes back wrong or not at all; the
///   calls layer reports timeouts, replies out of step and failed pipelines with
///   [`Connection::discard`]. The first report for a link starts its replacement; later ones,
///   and reports for an older link, are ignored.
/// - **Fenced replacement.** A replacement is published only once every client of this
///   backend that may still run requests (the discarded link, and attempts given up after
///   sending) has been killed on the server (`CLIENT KILL ID … ADDR …`), so nothing queued
///   on an old link runs after a request on the new one. Without the right to fence, the
///   replacement goes ahead unfenced (logged).
/// - **Deferred requests first.** Requests handed to [`Connection::defer`] while there is no
///   link run on the new link in order, after the fence and before the link is published;
///   each leaves the queue only once answered (so they must be idempotent). A refusal that
///   passes (`LOADING`, `BUSY`, `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN`, `NOREPLICAS`, `OOM`,
///   behind Sentinels `READONLY`) keeps it first in line and another link tries again; only one
///   that will not pass drops it. Whoever deferred it hears the answer: `Ok` once it ran, the
///   refusal when dropped. At most 10,000 wait; beyond that `defer` refuses new ones.
/// - **Background retries.** Replacement attempts overlap (one more every 5 ms, doubling up to
///   200 ms, at most 16 in flight), each bounded by twice the command timeout (at most the
///   connect timeout), until one is published or the backend is dropped. A caller waiting for
///   a link hurries the next attempt. Callers bound their waits with their own timeouts.
/// - **Scripts preloaded.** Each new link loads every lock script into the server's cache
///   (best effort, where the capability probe found `SCRIPT LOAD`); a call that meets
///   `NOSCRIPT` sends its script whole.
/// - **Manners.** A standalone link asks the server only what the probe found it answers
///   ([`Manners`]): no `CLIENT INFO` (so no fence) and no preloading where they are missing,
///   and request ids echoed by a one-line script where `PING <id>` is.
///
/// Sentinel is not a kind of its own: a standalone connection whose [`source::Source`] looks the
/// primary up for each new link (see `sentinel_watch` for `+switch-master`).
pub(crate) enum Connection {
    /// One server.
    Standalone(Standalone),
    /// A Redis Cluster: every request routed to the primary of its route's slot.
    #[cfg(feature = "cluster")]
    Cluster(Cluster),
}

/// Which keys one script may touch.
pub(crate) enum Reach {
    /// Any key: one server.
    Everywhere,
    /// Keys of every slot its node serves (a cluster, with a script that declares one key and
    /// names the others in its arguments); which node serves which slot as last read.
    #[cfg(feature = "cluster")]
    Node(Arc<SlotOwners>),
    /// Keys of one slot (a cluster whose slot owners cannot be read now).
    #[cfg(feature = "cluster")]
    Slot,
}

/// A cluster's proven send ([`Connection::send_proven`]): boxed, as every cluster send is (its
/// futures are large, and the standalone path should not carry their size).
type ClusterSend<'a> = futures_util::future::BoxFuture<'a, RedisResult<Option<Vec<Value>>>>;

/// One established link of a [`Connection`], held for the length of one call.
#[derive(Clone)]
pub(crate) enum Link {
    /// A link of [`Connection::Standalone`].
    Standalone(Arc<standalone::Link>),
    /// A link of `Connection::Cluster`.
    #[cfg(feature = "cluster")]
    Cluster(Arc<cluster::Link>),
}

impl Connection {
    /// Connects to one server (see [`Standalone::connect`]).
    ///
    /// # Errors
    ///
    /// As for connecting: a connection error, a timeout, or refused credentials.
    pub(crate) async fn standalone(
        source: source::Source,
        capabilities: &Capabilities,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Result<Connection> {
        Standalone::connect(source, capabilities, connect_timeout, command_timeout)
            .await
            .map(Connection::Standalone)
    }

    /// What the latest capability probe found: at connect, or (one server, Sentinels) after
    /// the command connection was last replaced; `None` on a cluster, whose connections
    /// redis-rs replaces (the answers at connect stand).
    pub(crate) fn latest_capabilities(&self) -> Option<Capabilities> {
        match self {
            Connection::Standalone(standalone) => Some(standalone.latest_capabilities()),
            #[cfg(feature = "cluster")]
            Connection::Cluster(_) => None,
        }
    }

    /// Connects to a Redis Cluster through `client` (see [`Cluster::connect`]).
    ///
    /// # Errors
    ///
    /// As for connecting: a connection error, a timeout, or refused credentials.
    #[cfg(feature = "cluster")]
    pub(crate) async fn cluster(
        client: redis::cluster::ClusterClient,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Result<Connection> {
        Cluster::connect(client, connect_timeout, command_timeout)
            .await
            .map(Connection::Cluster)
    }

    /// Whether calls may share pipelines: on one server, yes; in a cluster a pipeline goes to
    /// one node, and the calls of one batch have keys in many slots.
    pub(crate) fn coalesces(&self) -> bool {
        match self {
            Connection::Standalone(_) => true,
            #[cfg(feature = "cluster")]
            Connection::Cluster(_) => false,
        }
    }

    /// Whether a request that goes alone on a link can be proven by the link's solitude (one
    /// server, whose links keep a [`ledger`]); a cluster's requests bring their own proof.
    pub(crate) fn proves_by_solitude(&self) -> bool {
        match self {
            Connection::Standalone(_) => true,
            #[cfg(feature = "cluster")]
            Connection::Cluster(_) => false,
        }
    }

    /// Which keys one script may touch, for batching renewals (see [`Reach`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub(crate) async fn script_reach(&self) -> Reach {
        match self {
            Connection::Standalone(_) => Reach::Everywhere,
            #[cfg(feature = "cluster")]
            Connection::Cluster(cluster) => {
                let Some(link) = cluster.ready() else {
                    return Reach::Slot;
                };
                match cluster.slot_owners(&link).await {
                    Some(owners) => Reach::Node(owners),
                    None => Reach::Slot,
                }
            }
        }
    }

    /// Reports that a script sent by [`Reach::Node`] found keys its node does not serve: the
    /// slot owners are read again before the next use.
    #[cfg(feature = "cluster")]
    pub(crate) fn slot_owners_stale(&self) {
        match self {
            Connection::Standalone(_) => {}
            Connection::Cluster(cluster) => cluster.slot_owners_stale(),
        }
    }

    /// The address of the node serving the lock `route`, when known without asking: the one
    /// server (behind Sentinels, the current primary); on a cluster the primary of its slot
    /// in the copy of the slot map, if one was read. For spans.
    pub(crate) fn node_of(&self, route: &str) -> Option<String> {
        let _ = route; // only a cluster routes
        match self {
            Connection::Standalone(standalone) => standalone.node().map(|node| node.to_string()),
            #[cfg(feature = "cluster")]
            Connection::Cluster(cluster) => cluster.node_of(route),
        }
    }

    /// A fresh request id.
    pub(crate) fn next_request_id(&self) -> u64 {
        match self {
            Connection::Standalone(standalone) => standalone.next_nonce(),
            #[cfg(feature = "cluster")]
            Connection::Cluster(cluster) => cluster.next_nonce(),
        }
    }

    /// The current link without waiting, if there is one.
    pub(crate) fn ready(&self) -> Option<Link> {
        match self {
            Connection::Standalone(standalone) => standalone.ready().map(Link::Standalone),
            #[cfg(feature = "cluster")]
            Connection::Cluster(cluster) => cluster.ready().map(Link::Cluster),
        }
    }

    /// The current link, waiting for a replacement to be published when one is being made.
    /// Never fails; callers bound it with their own timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the replacement runs in its own task.
    pub(crate) async fn current(&self) -> Link {
        match self {
            Connection::Standalone(standalone) => Link::Standalone(standalone.current().await),
            #[cfg(feature = "cluster")]
            Connection::Cluster(cluster) => Link::Cluster(cluster.current().await),
        }
    }

    /// Reports that `link` cannot be trusted any more (out of step, timed out or dropped).
    pub(crate) fn discard(&self, link: &Link, why: &str) {
        match (self, link) {
            (Connection::Standalone(standalone), Link::Standalone(link)) => {
                standalone.discard(link, why);
            }
            #[cfg(feature = "cluster")]
            (Connection::Cluster(cluster), Link::Cluster(link)) => cluster.discard(link, why),
            #[cfg(feature = "cluster")]
            _ => {}
        }
    }

    /// Sends `command` (about the lock named `route`) on `link` and returns the raw reply; a
    /// transport error discards the link.
    ///
    /// # Errors
    ///
    /// The mapped transport error.
    pub(crate) async fn send(&self, link: &Link, route: &str, command: &Cmd) -> Result<Value> {
        let _ = route; // only a cluster routes
        match (self, link) {
            // One server: every key is on it.
            (Connection::Standalone(standalone), Link::Standalone(link)) => {
                standalone.send(link, command).await
            }
            #[cfg(feature = "cluster")]
            (Connection::Cluster(cluster), Link::Cluster(link)) => {
                Box::pin(cluster.send(link, route, command)).await
            }
            #[cfg(feature = "cluster")]
            _ => Err(foreign_link()),
        }
    }

    /// Whether `link` is still in step for requests about `route`: a `PING` with a fresh id
    /// must come back with that id. A link found out of step (or silent) is discarded.
    pub(crate) async fn in_step(&self, link: &Link, route: &str) -> Alignment {
        let _ = route; // only a cluster routes
        match (self, link) {
            // One server: every key is on it.
            (Connection::Standalone(standalone), Link::Standalone(link)) => {
                standalone.in_step(link).await
            }
            #[cfg(feature = "cluster")]
            (Connection::Cluster(cluster), Link::Cluster(link)) => {
                Box::pin(cluster.in_step(link, route)).await
            }
            #[cfg(feature = "cluster")]
            _ => Alignment::Broken,
        }
    }

    /// Sends `pipeline` on `link` and returns its replies, error replies included, proven to
    /// be its own: `None` when they are out of step (the caller discards the link). One
    /// server proves a pipeline that went alone by the link's solitude where `proof` allows,
    /// others by a `PING` with a fresh id after it (see [`ledger`]); a cluster's links always
    /// by the `PING`. A failure is left to the caller, which discards the link.
    ///
    /// # Errors
    ///
    /// The transport error, unmapped.
    pub(crate) fn send_proven<'a>(
        &'a self,
        link: &'a Link,
        pipeline: Pipeline,
        proof: Proof,
    ) -> impl Future<Output = RedisResult<Option<Vec<Value>>>> + Send + 'a {
        // Not an `async fn`: the standalone send is returned as it is, so the call's future
        // is one layer (one state and one poll frame) shallower on the common path; the
        // cluster's is boxed, as its sends always were.
        match (self, link) {
            (Connection::Standalone(standalone), Link::Standalone(link)) => {
                Either::<_, ClusterSend<'a>>::Left(standalone.send_proven(link, pipeline, proof))
            }
            #[cfg(feature = "cluster")]
            (Connection::Cluster(cluster), Link::Cluster(link)) => {
                Either::Right(Box::pin(async move {
                    let mut pipeline = pipeline;
                    let count = pipeline.len();
                    let nonce = cluster.next_nonce();
                    pipeline.add_command(Echo::Ping.command(nonce));
                    let mut replies = cluster.send_pipeline(link, &pipeline).await?;
                    Ok(
                        crate::wire::reply::ends_with_echo(&replies, count, nonce).then(|| {
                            replies.truncate(count);
                            replies
                        }),
                    )
                }) as ClusterSend<'a>)
            }
            #[cfg(feature = "cluster")]
            _ => {
                Either::Right(Box::pin(async { Err(foreign_link_transport()) }) as ClusterSend<'a>)
            }
        }
    }

    /// Sends `command` on `link` outside the lock protocol (a question about the server): no
    /// proof, and a failure does not discard the link.
    ///
    /// # Errors
    ///
    /// The transport error, unmapped.
    pub(crate) async fn ask(&self, link: &Link, command: &Cmd) -> RedisResult<Value> {
        match (self, link) {
            (Connection::Standalone(standalone), Link::Standalone(link)) => {
                standalone.ask(link, command).await
            }
            #[cfg(feature = "cluster")]
            (Connection::Cluster(cluster), Link::Cluster(link)) => cluster.ask(link, command).await,
            #[cfg(feature = "cluster")]
            _ => Err(foreign_link_transport()),
        }
    }

    /// The keys matching `pattern` on every primary, walked with `SCAN` (each step within
    /// `step_timeout`), sorted, at most about `limit` of them (a node's last step may go past
    /// it), and whether every primary's keys were walked to the end.
    ///
    /// # Errors
    ///
    /// The first transport or server error (a refused `SCAN`, a cluster whose slot owners
    /// cannot be read).
    pub(crate) async fn scan(
        &self,
        link: &Link,
        pattern: &str,
        limit: usize,
        step_timeout: Duration,
    ) -> RedisResult<(std::collections::BTreeSet<String>, bool)> {
        let mut keys = std::collections::BTreeSet::new();
        let walked = match (self, link) {
            (Connection::Standalone(standalone), Link::Standalone(link)) => {
                let send = |step: Cmd| async move { standalone.ask(link, &step).await };
                scan::scan_node(send, pattern, limit, step_timeout, &mut keys).await?
            }
            #[cfg(feature = "cluster")]
            (Connection::Cluster(cluster), Link::Cluster(link)) => {
                cluster
                    .scan(link, pattern, limit, step_timeout, &mut keys)
                    .await?
            }
            #[cfg(feature = "cluster")]
            _ => {
                return Err(foreign_link_transport());
            }
        };
        Ok((keys, walked))
    }

    /// Keeps `request` for the next link when there is none right now, to run before anything
    /// else on it. Returns where the server's answer to it comes (`Ok` once it ran, the
    /// refusal when the server will never run it), or `None` when it was not kept: it is then
    /// the caller's to retry (a link is up, too many wait, or a cluster).
    pub(crate) fn defer(
        &self,
        request: Arc<dyn Deferred>,
    ) -> Option<tokio::sync::oneshot::Receiver<Result<()>>> {
        match self {
            Connection::Standalone(standalone) => standalone.defer(request),
            // Not kept: the locker's own retry sends the cleanup (see `cluster`).
            #[cfg(feature = "cluster")]
            Connection::Cluster(_) => None,
        }
    }
}

/// A link of one kind handed to a connection of another: a bug in the calls layer.
#[cfg(feature = "cluster")]
fn foreign_link() -> lock_core::Error {
    lock_core::Error::Protocol("a link of another connection kind".into())
}

/// [`foreign_link`] where a transport error is returned (left to the caller to map).
#[cfg(feature = "cluster")]
fn foreign_link_transport() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "a link of another connection kind",
    ))
}

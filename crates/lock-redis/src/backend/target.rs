//! Where a backend's locks live, as one value: a [`RedisTarget`] is one server, a Redis
//! Cluster, or the primary of a Sentinel service, and each of their nodes a [`RedisNode`]: a
//! URL, or redis-rs's own `Client` or `ConnectionInfo`. [`RedisBackend::builder`] and
//! [`RedisBackend::connect`] take either, so one constructor covers every deployment.
//!
//! [`RedisBackend::builder`]: crate::RedisBackend::builder
//! [`RedisBackend::connect`]: crate::RedisBackend::connect

#[cfg(any(feature = "cluster", feature = "sentinel"))]
use lock_core::Error;
use lock_core::Result;

use crate::connection::tls::Tls;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
use crate::connection::tls::has_own_certificates;

/// One node as the application names it: a URL (`redis://[user:password@]host:port[/db]`,
/// `rediss://` with a TLS feature; parsed when connecting, so a bad one is an error there), or
/// redis-rs's own connection info (from a `redis::Client` or a `ConnectionInfo`), used as it is
/// (address, database, credentials, RESP2 or RESP3, TCP settings, TLS).
///
/// # Example
///
/// ```
/// use lock_redis::RedisNode;
///
/// let by_url = RedisNode::from("redis://127.0.0.1:6379/");
/// let client = lock_redis::redis::Client::open("redis://127.0.0.1:6380/").unwrap();
/// let by_client = RedisNode::from(client);
/// # let _ = (by_url, by_client);
/// ```
#[derive(Clone, Debug)]
pub struct RedisNode(Endpoint);

#[derive(Clone, Debug)]
enum Endpoint {
    Url(String),
    // Boxed: a `ConnectionInfo` (with its TLS parameters) is several times a `String`.
    Info(Box<redis::ConnectionInfo>),
}

impl From<&str> for RedisNode {
    fn from(url: &str) -> Self {
        RedisNode(Endpoint::Url(url.to_owned()))
    }
}

impl From<String> for RedisNode {
    fn from(url: String) -> Self {
        RedisNode(Endpoint::Url(url))
    }
}

impl From<&String> for RedisNode {
    fn from(url: &String) -> Self {
        RedisNode(Endpoint::Url(url.clone()))
    }
}

impl From<redis::ConnectionInfo> for RedisNode {
    fn from(info: redis::ConnectionInfo) -> Self {
        RedisNode(Endpoint::Info(Box::new(info)))
    }
}

/// The client's connection info, every setting kept. The backend opens its own connections
/// from it (commands and release notifications, each replaced and fenced by the backend: see
/// the [reconnect contract](crate::RedisBackendBuilder#reconnect-contract-why-not-a-connectionmanager)),
/// so connections the application makes from the same client are not shared with it.
///
/// TLS: a client made with `redis::Client::build_with_tls` keeps its certificates; setting
/// [`tls_ca_pem`](crate::RedisBackendBuilder::tls_ca_pem) or
/// [`tls_client_identity`](crate::RedisBackendBuilder::tls_client_identity) as well is an
/// [`Error::InvalidConfig`] when connecting, as is either on a client that is not on TLS. On a
/// `rediss://` client without certificates of its own they are added, as for a URL.
impl From<redis::Client> for RedisNode {
    fn from(client: redis::Client) -> Self {
        RedisNode::from(client.get_connection_info().clone())
    }
}

impl RedisNode {
    /// A client of this node, with the builder's TLS settings (see [`Tls::open_info`] for how
    /// they combine with the info's own).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`], as [`Tls::open`] and [`Tls::open_info`].
    pub(crate) fn open(&self, tls: &Tls) -> Result<redis::Client> {
        match &self.0 {
            Endpoint::Url(url) => tls.open(url),
            Endpoint::Info(info) => tls.open_info(info.as_ref().clone()),
        }
    }

    /// Refuses connection info that carries its own TLS certificates where redis-rs would use
    /// them for this one connection only (a cluster's seeds, a Sentinel service's Sentinels):
    /// the nodes found through them would be reached without them.
    #[cfg(any(feature = "cluster", feature = "sentinel"))]
    pub(crate) fn check_shared_tls(&self, what: &str) -> Result<()> {
        match &self.0 {
            Endpoint::Info(info) if has_own_certificates(info) => Err(Error::InvalidConfig {
                reason: format!(
                    "the connection info of {what} {} carries TLS certificates of its own \
                     (`redis::Client::build_with_tls`), which redis-rs would not use for the \
                     nodes found through it: give them with `tls_ca_pem` / \
                     `tls_client_identity` instead",
                    info.addr()
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// Where the locks live: one server, a Redis Cluster, or the primary of a Sentinel service.
/// One server converts from anything a [`RedisNode`] does (a URL, a `redis::Client`, a
/// `ConnectionInfo`), so `RedisBackend::connect("redis://…")` needs no `RedisTarget` spelled
/// out.
///
/// # Example
///
/// ```no_run
/// use lock_redis::{RedisBackend, RedisTarget};
///
/// # async fn demo() -> lock_core::Result<()> {
/// let one = RedisBackend::connect("redis://127.0.0.1:6379/").await?;
/// # #[cfg(feature = "cluster")]
/// let cluster = RedisBackend::connect(RedisTarget::cluster([
///     "redis://127.0.0.1:7000/",
///     "redis://127.0.0.1:7001/",
/// ]))
/// .await?;
/// # #[cfg(feature = "sentinel")]
/// let sentinel = RedisBackend::connect(RedisTarget::sentinel(
///     ["redis://127.0.0.1:26379/"],
///     "mymaster",
/// ))
/// .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisTarget(pub(crate) Target);

#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// One server.
    Standalone(RedisNode),
    /// A Redis Cluster, from these seeds.
    #[cfg(feature = "cluster")]
    Cluster(Vec<RedisNode>),
    /// The primary of a Sentinel service.
    #[cfg(feature = "sentinel")]
    Sentinel {
        sentinels: Vec<RedisNode>,
        service: String,
        /// Username and password for the data nodes (the Sentinels' own are in their URLs).
        node_auth: Option<(Option<String>, String)>,
    },
}

impl RedisTarget {
    /// One server.
    #[must_use]
    pub fn server(node: impl Into<RedisNode>) -> Self {
        RedisTarget(Target::Standalone(node.into()))
    }

    /// A Redis Cluster, found from `seeds` (any of its nodes; one is enough, more survive one
    /// being down).
    ///
    /// Every lock call goes to the primary serving its lock's slot (all keys and the channel
    /// of one lock share it), following `MOVED` and `ASK`; calls do not share pipelines.
    /// Release notifications follow [`ShardedPubSub`](crate::ShardedPubSub). See
    /// `docs/deployments.md` for what a lock guarantees on a cluster.
    ///
    /// Seeds given as `ConnectionInfo`: redis-rs takes the username, password, protocol and
    /// database of the first seed for every node, and refuses seeds that disagree (an
    /// [`Error::InvalidConfig`] when connecting). Not a `redis::cluster::ClusterClient`: the
    /// backend builds its own with redis-rs's retries off, on purpose. redis-rs resends a
    /// request whose connection dropped, and a lock script resent after it ran would apply
    /// twice (a hold counted twice, a release taking an outer hold too); the backend resends
    /// only on answers that prove the request did not run (`MOVED`, `ASK`, `TRYAGAIN`, …).
    ///
    /// TLS: the nodes found through the seeds get only the builder's certificates
    /// ([`tls_ca_pem`](crate::RedisBackendBuilder::tls_ca_pem),
    /// [`tls_client_identity`](crate::RedisBackendBuilder::tls_client_identity)), never a
    /// seed's, so a seed made with `redis::Client::build_with_tls` is an
    /// [`Error::InvalidConfig`].
    #[cfg(feature = "cluster")]
    #[must_use]
    pub fn cluster<N: Into<RedisNode>>(seeds: impl IntoIterator<Item = N>) -> Self {
        RedisTarget(Target::Cluster(seeds.into_iter().map(Into::into).collect()))
    }

    /// The primary of the Sentinel service `service`, found through `sentinels` (with the
    /// Sentinels' own credentials; the data nodes' are
    /// [`sentinel_node_auth`](crate::RedisBackendBuilder::sentinel_node_auth)).
    ///
    /// The primary is looked up when connecting and again whenever the command connection is
    /// replaced: after an I/O error or a timeout, and when the server answers `READONLY` (it
    /// was demoted by a failover; the command did not run and is sent again to the new
    /// primary). See `docs/deployments.md` for what a lock guarantees behind Sentinels.
    ///
    /// Sentinels given as `ConnectionInfo` describe the Sentinels themselves; the database
    /// and protocol of the data nodes are redis-rs's defaults (0, RESP2). TLS: the data nodes
    /// get only the builder's certificates, never a Sentinel's, so a Sentinel info made with
    /// `redis::Client::build_with_tls` is an [`Error::InvalidConfig`].
    #[cfg(feature = "sentinel")]
    #[must_use]
    pub fn sentinel<N: Into<RedisNode>>(
        sentinels: impl IntoIterator<Item = N>,
        service: impl Into<String>,
    ) -> Self {
        RedisTarget(Target::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            service: service.into(),
            node_auth: None,
        })
    }
}

impl<N: Into<RedisNode>> From<N> for RedisTarget {
    fn from(node: N) -> Self {
        RedisTarget::server(node)
    }
}

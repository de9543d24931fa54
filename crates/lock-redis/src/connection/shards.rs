//! Sharded pub/sub on a cluster: one RESP3 connection per primary, held by the notification
//! task, which alone decides where each sharded subscription lives.
//!
//! redis-rs's cluster connection would decide that by itself, and leak: it counts `SSUBSCRIBE`
//! as a read, so while a primary's connection is being repaired it sends it to a replica of the
//! shard (which accepts it), and after each repair it replays its own record of subscriptions,
//! possibly behind our `SUNSUBSCRIBE`. Either way a subscription could stay on a node our
//! `SUNSUBSCRIBE` never reached, for the life of the backend.
//!
//! Here every `SSUBSCRIBE` goes to the primary `CLUSTER SLOTS` names for the channel's slot, each
//! node a channel was sent to is recorded *before* the request leaves (a request that times out
//! may still be applied), and `SUNSUBSCRIBE` goes to each of them. Nothing re-subscribes by
//! itself: a connection that drops takes its subscriptions with it on the server, and the
//! notification task subscribes again, in order with everything else, where the slot lives now.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, ProtocolVersion, PushInfo,
    RedisError, RedisResult, ServerErrorKind, Value,
};

use crate::connection::slot_owners::SlotOwners;
use crate::connection::tls::Tls;
use crate::wire::keys::slot;

/// A node's address, as `CLUSTER SLOTS` gives it.
pub(crate) type Address = (String, u16);

/// Receives every push of every node connection, with the node's address and the number of
/// the connection (so a late report about a connection already replaced can be told apart).
pub(crate) type PushHandler = Arc<dyn Fn(&Address, u64, PushInfo) + Send + Sync>;

struct Node {
    connection: MultiplexedConnection,
    number: u64,
}

/// The sharded subscriptions of one notification task (see the module documentation).
pub(crate) struct Shards {
    seeds: Vec<ConnectionInfo>,
    tls: Tls,
    timeout: Duration,
    on_push: PushHandler,
    /// The primaries by slot, as last read; `None` once a sign says it may be stale.
    owners: Option<SlotOwners>,
    nodes: HashMap<Address, Node>,
    connections_made: u64,
    /// The nodes each channel is, or may be, subscribed on.
    placed: HashMap<String, HashSet<Address>>,
    /// Our `SUNSUBSCRIBE`s whose confirmation has not come back yet, by channel and node. Each
    /// is confirmed by a `sunsubscribe` push, which comes to the task like one the server sends
    /// by itself: taken for the server's, a late one would make the task forget a subscription
    /// made again since, and leave it on the node when the slot's owner changed meanwhile.
    unconfirmed: HashMap<(String, Address), u32>,
}

impl Shards {
    /// Reads the slot owners through `seeds` (connections to the nodes are made when first
    /// needed).
    pub(crate) async fn connect(
        seeds: Vec<ConnectionInfo>,
        tls: Tls,
        timeout: Duration,
        on_push: PushHandler,
    ) -> RedisResult<Shards> {
        if seeds.is_empty() {
            return Err(RedisError::from((
                ErrorKind::Client,
                "no cluster node given",
            )));
        }
        let mut shards = Shards {
            seeds: seeds.into_iter().map(resp3).collect(),
            tls,
            timeout,
            on_push,
            owners: None,
            nodes: HashMap::new(),
            connections_made: 0,
            placed: HashMap::new(),
            unconfirmed: HashMap::new(),
        };
        shards.load_owners().await?;
        Ok(shards)
    }

    /// Subscribes `channel` on the primary serving its slot, and undoes any earlier attempt on
    /// another node.
    pub(crate) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        // Where a MOVED sent us: tried once, before any other node.
        let mut redirected: Option<Address> = None;
        let mut moved = false;
        loop {
            let owner = match redirected.take() {
                Some(node) => node,
                None => self.owner_of(channel).await?,
            };
            let mut connection = match self.node(&owner).await {
                Ok(connection) => connection,
                Err(error) => {
                    // The node may be down for good, its slots about to fail over: look again
                    // next time.
                    self.owners = None;
                    return Err(error);
                }
            };
            self.placed
                .entry(channel.to_owned())
                .or_default()
                .insert(owner.clone());
            let subscribed = redis::cmd("SSUBSCRIBE")
                .arg(channel)
                .exec_async(&mut connection)
                .await;
            match subscribed {
                Ok(()) => {
                    let elsewhere: Vec<Address> = self.placed[channel]
                        .iter()
                        .filter(|node| **node != owner)
                        .cloned()
                        .collect();
                    for node in elsewhere {
                        // A failure leaves the node recorded: the channel's last unsubscribe
                        // tries it again.
                        let _ = self.unsubscribe_on(channel, &node).await;
                    }
                    return Ok(());
                }
                Err(error) if error.code().is_some() => {
                    // Refused, so not subscribed there.
                    self.forget(channel, &owner);
                    if error.kind() == ErrorKind::Server(ServerErrorKind::Moved) {
                        // Our copy of the slot owners is stale.
                        self.owners = None;
                        if !moved {
                            moved = true;
                            redirected = error
                                .redirect_node()
                                .map(|(host, port)| (host.to_owned(), port));
                            continue;
                        }
                    }
                    return Err(error);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Unsubscribes `channel` on every node it is, or may be, subscribed on. An error leaves the
    /// nodes not reached recorded, for the next call.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        let Some(nodes) = self.placed.get(channel).cloned() else {
            return Ok(());
        };
        let mut failed = Ok(());
        for node in nodes {
            if let Err(error) = self.unsubscribe_on(channel, &node).await {
                failed = Err(error);
            }
        }
        failed
    }

    /// The connection numbered `number` to `node` dropped, and its subscriptions with it:
    /// returns the channels it held, to subscribe again where their slots live now.
    pub(crate) fn node_lost(&mut self, node: &Address, number: u64) -> Vec<String> {
        if self
            .nodes
            .get(node)
            .is_none_or(|held| held.number != number)
        {
            return Vec::new();
        }
        self.nodes.remove(node);
        self.unconfirmed.retain(|(_, at), _| at != node);
        // The node may have dropped out in a failover.
        self.owners = None;
        let lost: Vec<String> = self
            .placed
            .iter()
            .filter(|(_, nodes)| nodes.contains(node))
            .map(|(channel, _)| channel.clone())
            .collect();
        for channel in &lost {
            self.forget(channel, node);
        }
        lost
    }

    /// `node` ended the subscription of `channel` on the connection numbered `number`. Returns
    /// whether the server did so by itself (its slot moved, or the node became a replica),
    /// rather than confirming our `SUNSUBSCRIBE`, already forgotten.
    pub(crate) fn dropped(&mut self, channel: &str, node: &Address, number: u64) -> bool {
        let current = self
            .nodes
            .get(node)
            .is_some_and(|held| held.number == number);
        if current && self.confirmed(channel, node) {
            return false;
        }
        let placed = self
            .placed
            .get(channel)
            .is_some_and(|nodes| nodes.contains(node));
        if !current || !placed {
            return false;
        }
        self.forget(channel, node);
        self.owners = None;
        true
    }

    async fn unsubscribe_on(&mut self, channel: &str, node: &Address) -> RedisResult<()> {
        let Some(held) = self.nodes.get(node) else {
            // Its connection is gone, and the subscription with it.
            self.forget(channel, node);
            return Ok(());
        };
        let mut connection = held.connection.clone();
        *self
            .unconfirmed
            .entry((channel.to_owned(), node.clone()))
            .or_default() += 1;
        let unsubscribed = redis::cmd("SUNSUBSCRIBE")
            .arg(channel)
            .exec_async(&mut connection)
            .await;
        if unsubscribed
            .as_ref()
            .is_err_and(|error| error.code().is_some())
        {
            // Refused: no confirmation will come.
            self.confirmed(channel, node);
        }
        match unsubscribed {
            Ok(()) => {
                self.forget(channel, node);
                Ok(())
            }
            Err(error) if error.code().is_some() => {
                // Answered, so nothing more to do there (a retry would get the same answer).
                self.forget(channel, node);
                Err(error)
            }
            Err(error) => Err(error),
        }
    }

    /// Takes one of our `SUNSUBSCRIBE`s of `channel` on `node` as confirmed; `false` if none was
    /// waiting for its confirmation.
    fn confirmed(&mut self, channel: &str, node: &Address) -> bool {
        let key = (channel.to_owned(), node.clone());
        match self.unconfirmed.get_mut(&key) {
            Some(count) if *count > 1 => {
                *count -= 1;
                true
            }
            Some(_) => {
                self.unconfirmed.remove(&key);
                true
            }
            None => false,
        }
    }

    fn forget(&mut self, channel: &str, node: &Address) {
        if let Some(nodes) = self.placed.get_mut(channel) {
            nodes.remove(node);
            if nodes.is_empty() {
                self.placed.remove(channel);
            }
        }
    }

    async fn owner_of(&mut self, channel: &str) -> RedisResult<Address> {
        if self.owners.is_none() {
            self.load_owners().await?;
        }
        let owner = self.owners.as_ref().and_then(|owners| {
            owners
                .node_of(slot(channel))
                .and_then(|node| owners.primaries().get(node).cloned())
        });
        owner.ok_or_else(|| {
            self.owners = None;
            RedisError::from((
                ErrorKind::Client,
                "no known primary serves the channel's slot",
            ))
        })
    }

    /// Reads `CLUSTER SLOTS` from whichever seed answers first (one may be stalled).
    async fn load_owners(&mut self) -> RedisResult<()> {
        let attempts: Vec<_> = self
            .seeds
            .iter()
            .map(|seed| {
                // Seeds come opened with the TLS settings already.
                let client = redis::Client::open(seed.clone());
                let timeout = self.timeout;
                async move {
                    let asked = async {
                        let config = AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(timeout))
                            .set_response_timeout(Some(timeout));
                        let mut connection = client?
                            .get_multiplexed_async_connection_with_config(&config)
                            .await?;
                        let reply: Value = redis::cmd("CLUSTER")
                            .arg("SLOTS")
                            .query_async(&mut connection)
                            .await?;
                        let owners = SlotOwners::from_cluster_slots(&reply);
                        if owners.nodes() == 0 {
                            return Err(RedisError::from((
                                ErrorKind::Client,
                                "CLUSTER SLOTS named no primary",
                            )));
                        }
                        Ok(owners)
                    };
                    tokio::time::timeout(timeout, asked)
                        .await
                        .unwrap_or_else(|_| Err(timed_out()))
                }
                .boxed()
            })
            .collect();
        let (owners, _) = futures_util::future::select_ok(attempts).await?;
        self.owners = Some(owners);
        Ok(())
    }

    /// The connection to `node`, made if there is none.
    async fn node(&mut self, node: &Address) -> RedisResult<MultiplexedConnection> {
        if let Some(held) = self.nodes.get(node) {
            return Ok(held.connection.clone());
        }
        self.connections_made += 1;
        let number = self.connections_made;
        let on_push = self.on_push.clone();
        let from = node.clone();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_push_sender(move |push: PushInfo| {
                on_push(&from, number, push);
                Ok::<(), redis::aio::SendError>(())
            });
        let client = self.node_client(node)?;
        let connection = tokio::time::timeout(
            self.timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .unwrap_or_else(|_| Err(timed_out()))?;
        self.nodes.insert(
            node.clone(),
            Node {
                connection: connection.clone(),
                number,
            },
        );
        Ok(connection)
    }

    /// The client of `node`: a seed's own when it is one (its certificates, if it has its own,
    /// belong to it alone); else one with a seed's credentials and scheme at the node's address,
    /// and the builder's TLS settings, as redis-rs gives the nodes a cluster client finds.
    fn node_client(&self, (host, port): &Address) -> RedisResult<redis::Client> {
        let seed = self.seeds.iter().find(|seed| match seed.addr() {
            ConnectionAddr::Tcp(seed_host, seed_port)
            | ConnectionAddr::TcpTls {
                host: seed_host,
                port: seed_port,
                ..
            } => seed_host == host && seed_port == port,
            _ => false,
        });
        if let Some(seed) = seed {
            return redis::Client::open(seed.clone());
        }
        // Never empty: `connect` refuses no seeds.
        let template = &self.seeds[0];
        let addr = match template.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => ConnectionAddr::Tcp(host.clone(), *port),
        };
        self.tls
            .open_info(template.clone().set_addr(addr))
            .map_err(|error| {
                RedisError::from((
                    ErrorKind::Client,
                    "cannot open a notification connection",
                    error.to_string(),
                ))
            })
    }
}

fn resp3(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    info.set_redis_settings(settings)
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
}

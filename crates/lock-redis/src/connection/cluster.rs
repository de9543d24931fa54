//! The cluster connection kind: a Redis Cluster through redis-rs's cluster connection, which
//! keeps the slot map, one connection per node, and reconnects nodes.
//!
//! What this file adds to redis-rs, and why:
//!
//! - **No resend of a request that may have run.** redis-rs resends a request whose connection
//!   dropped (its `Reconnect` retry): for a lock script that could apply twice (a hold counted
//!   twice, or a release taking an outer hold too). So the client is made with no retries, and
//!   this file resends only on the answers that prove the request did not run: `MOVED` (to the
//!   node it names, as redis-rs refreshes its slot map), `ASK` (an `ASKING` pipeline to the node
//!   it names, during a slot move), `TRYAGAIN`, `CLUSTERDOWN` and `MASTERDOWN` (after a short
//!   pause). Everything else comes back to the calls layer as for one server: a transport error
//!   is ambiguous.
//! - **Proofs on the right node.** Every request is routed by its route (the lock name, whose
//!   keys all share one slot), and the `PING` that proves a link in step goes to the same node
//!   (redis-rs would send a bare `PING` to every node).
//! - **Renewals by node.** redis-rs keeps its slot map to itself; [`Cluster::slot_owners`] keeps
//!   a copy of `CLUSTER SLOTS` so the renewals of one primary go in one script (see
//!   `slot_owners`), read again after a `MOVED` or a renewal answered "not served here".
//! - **Replacement.** A link found out of step (a lost reply, a call timed out) is replaced by a
//!   new cluster connection (new connections to every node). Unlike [`super::standalone`], the
//!   replacement is **not fenced** yet: requests still queued on the old connections may run
//!   after newer ones (see `docs/deployments.md`), and cleanups are not held for the new link
//!   (the locker's own retry sends them).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{Error, Result};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::sync::watch;

use crate::connection::alignment::Alignment;
use crate::connection::slot_owners::SlotOwners;
use crate::wire::errors::map_error;
use crate::wire::scripts;

/// The pause before resending after `TRYAGAIN`, `CLUSTERDOWN` or `MASTERDOWN` (a slot on the
/// move, a failover under way). Callers bound the whole call with their own timeout.
const REDIRECT_PAUSE: Duration = Duration::from_millis(10);
/// The pause between two attempts to make a replacement connection.
const REPLACE_PAUSE: Duration = Duration::from_millis(50);

/// One cluster connection (a connection to every node), held for the length of one call.
pub(crate) struct Link {
    connection: ClusterConnection,
    generation: u64,
}

struct Current {
    link: Option<Arc<Link>>,
    generation: u64,
    replacing: bool,
}

struct Shared {
    client: ClusterClient,
    attempt_timeout: Duration,
    current: Mutex<Current>,
    published: watch::Sender<u64>,
    nonce: AtomicU64,
    /// The last `CLUSTER SLOTS` read, for grouping renewals by node.
    owners: Mutex<Option<Arc<SlotOwners>>>,
    /// Whether `owners` should be read again before it is used.
    owners_stale: AtomicBool,
}

/// The command connection of one backend to a Redis Cluster.
pub(crate) struct Cluster {
    shared: Arc<Shared>,
}

/// What an error reply that redis-rs hands back (it does not retry) says about the request.
enum Redirect {
    /// It did not run; send it to this node with `ASKING` first.
    Ask(String, u16),
    /// It did not run; send it to this node (the slot's owner now).
    Moved(String, u16),
    /// It did not run; send it again after a pause.
    Later,
}

fn redirect(error: &RedisError) -> Option<Redirect> {
    let address = || {
        let (address, _slot) = error.redirect_node()?;
        let (host, port) = address.rsplit_once(':')?;
        Some((host.to_owned(), port.parse().ok()?))
    };
    match error.kind() {
        ErrorKind::Server(ServerErrorKind::Ask) => {
            address().map(|(host, port)| Redirect::Ask(host, port))
        }
        ErrorKind::Server(ServerErrorKind::Moved) => Some(
            address()
                .map(|(host, port)| Redirect::Moved(host, port))
                .unwrap_or(Redirect::Later),
        ),
        ErrorKind::Server(
            ServerErrorKind::TryAgain | ServerErrorKind::ClusterDown | ServerErrorKind::MasterDown,
        ) => Some(Redirect::Later),
        _ => None,
    }
}

/// Routes to the primary serving the slot of `route`.
fn primary_of(route: &str) -> SingleNodeRoutingInfo {
    SingleNodeRoutingInfo::SpecificNode(Route::with_key(route, SlotAddr::Master))
}

impl Cluster {
    /// Connects to the cluster through `client` (made with no retries, see the module docs).
    ///
    /// # Errors
    ///
    /// As for connecting: a connection error, a timeout, or refused credentials.
    pub(crate) async fn connect(
        client: ClusterClient,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Result<Cluster> {
        let connection = tokio::time::timeout(connect_timeout, establish(&client))
            .await
            .map_err(|_| Error::Timeout {
                after: connect_timeout,
            })??;
        let (published, _) = watch::channel(1);
        Ok(Cluster {
            shared: Arc::new(Shared {
                client,
                attempt_timeout: (command_timeout * 2).min(connect_timeout),
                current: Mutex::new(Current {
                    link: Some(Arc::new(Link {
                        connection,
                        generation: 1,
                    })),
                    generation: 1,
                    replacing: false,
                }),
                published,
                nonce: AtomicU64::new(crate::wire::reply::request_id_start()),
                owners: Mutex::new(None),
                owners_stale: AtomicBool::new(true),
            }),
        })
    }

    /// A fresh request id.
    pub(crate) fn next_nonce(&self) -> u64 {
        self.shared.nonce.fetch_add(1, Ordering::Relaxed)
    }

    /// The current link without waiting, if there is one.
    pub(crate) fn ready(&self) -> Option<Arc<Link>> {
        lock(&self.shared.current).link.clone()
    }

    /// The current link, waiting for a replacement when one is being made.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the replacement runs in its own task.
    pub(crate) async fn current(&self) -> Arc<Link> {
        let mut published = self.shared.published.subscribe();
        loop {
            if let Some(link) = self.ready() {
                return link;
            }
            self.ensure_replacing();
            let _ = published.changed().await;
        }
    }

    /// Reports that `link` cannot be trusted any more; the first report starts its replacement.
    pub(crate) fn discard(&self, link: &Arc<Link>, why: &str) {
        {
            let mut current = lock(&self.shared.current);
            if current.generation != link.generation || current.link.is_none() {
                return;
            }
            current.link = None;
            current.generation += 1;
        }
        tracing::debug!(
            why,
            generation = link.generation,
            "replacing the cluster connection"
        );
        self.ensure_replacing();
    }

    fn ensure_replacing(&self) {
        {
            let mut current = lock(&self.shared.current);
            if current.link.is_some() || current.replacing {
                return;
            }
            current.replacing = true;
        }
        let shared = self.shared.clone();
        // Clears `replacing` however the task ends (also dropped with its runtime), so the next
        // caller starts another.
        let flag = ReplacingFlag {
            shared: Arc::downgrade(&shared),
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // the flag clears `replacing`; the next caller (with a runtime) starts one
        };
        runtime.spawn(async move {
            let _flag = flag;
            loop {
                let attempt =
                    tokio::time::timeout(shared.attempt_timeout, establish(&shared.client)).await;
                match attempt {
                    Ok(Ok(connection)) => {
                        let generation = {
                            let mut current = lock(&shared.current);
                            current.link = Some(Arc::new(Link {
                                connection,
                                generation: current.generation,
                            }));
                            current.generation
                        };
                        shared.published.send_modify(|seen| *seen = generation);
                        return;
                    }
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "could not replace the cluster connection");
                    }
                    Err(_) => tracing::debug!("replacing the cluster connection timed out"),
                }
                if Arc::strong_count(&shared) == 1 {
                    return; // the backend is gone
                }
                tokio::time::sleep(REPLACE_PAUSE).await;
            }
        });
    }

    /// Sends `command` about the lock named `route` to the primary of its slot, following
    /// redirects that prove it did not run.
    pub(crate) async fn send(&self, link: &Arc<Link>, route: &str, command: &Cmd) -> Result<Value> {
        let mut pipeline = redis::pipe();
        pipeline.add_command(command.clone());
        match self.send_routed(link, primary_of(route), pipeline).await {
            Ok(mut replies) => replies
                .pop()
                .ok_or_else(|| Error::Protocol("no reply to a command".into())),
            Err(error) => Err(map_error(&error, Duration::ZERO)),
        }
    }

    /// Sends `pipeline` (the commands of one lock call; a `PING` at its end goes with them) to
    /// the primary of its first key's slot, following redirects that prove it did not run.
    pub(crate) async fn send_pipeline(
        &self,
        link: &Arc<Link>,
        pipeline: &Pipeline,
    ) -> RedisResult<Vec<Value>> {
        let routing = match pipeline.cmd_iter().find_map(first_key) {
            Some(key) => {
                SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master))
            }
            None => SingleNodeRoutingInfo::RandomPrimary,
        };
        self.send_routed(link, routing, pipeline.clone()).await
    }

    async fn send_routed(
        &self,
        link: &Arc<Link>,
        mut routing: SingleNodeRoutingInfo,
        pipeline: Pipeline,
    ) -> RedisResult<Vec<Value>> {
        let mut connection = link.connection.clone();
        let count = pipeline.len();
        let mut asking = false;
        loop {
            let sent = if asking {
                let mut with_asking = redis::pipe();
                with_asking.cmd("ASKING");
                for command in pipeline.cmd_iter() {
                    with_asking.add_command(command.clone());
                }
                connection
                    .route_pipeline(with_asking, 1, count, routing.clone())
                    .await
            } else {
                connection
                    .route_pipeline(pipeline.clone(), 0, count, routing.clone())
                    .await
            };
            let error = match sent {
                Ok(replies) => return Ok(replies),
                Err(error) => error,
            };
            match redirect(&error) {
                Some(Redirect::Ask(host, port)) => {
                    routing = SingleNodeRoutingInfo::ByAddress { host, port };
                    asking = true;
                }
                Some(Redirect::Moved(host, port)) => {
                    self.slot_owners_stale();
                    routing = SingleNodeRoutingInfo::ByAddress { host, port };
                    asking = false;
                }
                Some(Redirect::Later) => tokio::time::sleep(REDIRECT_PAUSE).await,
                None => return Err(error),
            }
        }
    }

    /// Sends `command` outside the lock protocol (a question about the server) to any primary.
    pub(crate) async fn ask(&self, link: &Arc<Link>, command: &Cmd) -> RedisResult<Value> {
        let mut connection = link.connection.clone();
        connection
            .route_command(
                command.clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
            )
            .await
    }

    /// Which primary serves each slot, read with `CLUSTER SLOTS` on `link` the first time and
    /// again once reported stale; `None` when it cannot be read now (within the attempt
    /// timeout).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read given up leaves the copy stale, to be read by the next caller.
    pub(crate) async fn slot_owners(&self, link: &Arc<Link>) -> Option<Arc<SlotOwners>> {
        // Cleared before the read, so a `MOVED` seen while it is under way marks it again.
        if !self.shared.owners_stale.swap(false, Ordering::AcqRel)
            && let Some(owners) = lock(&self.shared.owners).clone()
        {
            return Some(owners);
        }
        let mut slots = redis::cmd("CLUSTER");
        slots.arg("SLOTS");
        let read = tokio::time::timeout(self.shared.attempt_timeout, self.ask(link, &slots))
            .await
            .map(|reply| reply.and_then(Value::extract_error));
        match read {
            Ok(Ok(reply)) => {
                let owners = Arc::new(SlotOwners::from_cluster_slots(&reply));
                *lock(&self.shared.owners) = Some(owners.clone());
                Some(owners)
            }
            failed => {
                self.slot_owners_stale();
                tracing::debug!(?failed, "could not read which primary serves which slot");
                None
            }
        }
    }

    /// Adds the keys matching `pattern` on every primary (as `CLUSTER SLOTS` names them) to
    /// `into`, walked with `SCAN` node by node (each step within `step_timeout`), until `into`
    /// holds `limit` keys. Returns whether every primary's keys were walked to the end.
    ///
    /// # Errors
    ///
    /// A transport or server error, or slot owners that cannot be read.
    pub(crate) async fn scan(
        &self,
        link: &Arc<Link>,
        pattern: &str,
        limit: usize,
        step_timeout: Duration,
        into: &mut std::collections::BTreeSet<String>,
    ) -> RedisResult<bool> {
        // Read afresh: a copy from before a reshard could leave a new primary out, and the
        // walk would still answer that it saw every key. A listing is rare; one more
        // `CLUSTER SLOTS` costs it little.
        self.slot_owners_stale();
        let owners = self.slot_owners(link).await.ok_or_else(|| {
            RedisError::from((
                ErrorKind::Io,
                "could not read which primaries serve the slots",
            ))
        })?;
        let primaries = owners.primaries();
        for (index, (host, port)) in primaries.iter().enumerate() {
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port: *port,
            });
            let send = |step: Cmd| {
                let mut connection = link.connection.clone();
                let routing = routing.clone();
                async move { connection.route_command(step, routing).await }
            };
            if !super::scan::scan_node(send, pattern, limit, step_timeout, into).await? {
                return Ok(false);
            }
            if into.len() >= limit && index + 1 < primaries.len() {
                // Primaries left unwalked.
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Reports that the copy of the slot owners may be out of date.
    pub(crate) fn slot_owners_stale(&self) {
        self.shared.owners_stale.store(true, Ordering::Release);
    }

    /// The address of the primary serving the lock `route`, from the copy of the slot map if
    /// one was read (for renewals), is not known stale, and names its slot; `None` otherwise.
    /// For spans only: calls are routed by redis-rs.
    pub(crate) fn node_of(&self, route: &str) -> Option<String> {
        // A copy known stale (a `MOVED` seen since) may name the old primary: say nothing.
        if self.shared.owners_stale.load(Ordering::Acquire) {
            return None;
        }
        let owners = lock(&self.shared.owners).clone()?;
        let node = owners.node_of(crate::wire::keys::slot(route))?;
        let (host, port) = owners.primaries().get(node)?;
        Some(format!("{host}:{port}"))
    }

    /// Whether `link` is in step with the node serving `route`: a `PING` with a fresh id, sent
    /// to that node, must come back with that id.
    pub(crate) async fn in_step(&self, link: &Arc<Link>, route: &str) -> Alignment {
        let nonce = self.next_nonce();
        let mut ping = redis::cmd("PING");
        ping.arg(nonce);
        let mut connection = link.connection.clone();
        let reply = connection
            .route_command(ping, RoutingInfo::SingleNode(primary_of(route)))
            .await;
        let step = Alignment::of_ping(reply.ok(), nonce);
        if matches!(step, Alignment::Broken) {
            self.discard(link, "out of step");
        }
        step
    }
}

/// Makes a cluster connection, checks that every primary lets the user `ASKING` and `PING`,
/// and loads the scripts on every primary (best effort).
async fn establish(client: &ClusterClient) -> Result<ClusterConnection> {
    let mut connection = client
        .get_async_connection()
        .await
        .map_err(|error| map_error(&error, Duration::ZERO))?;
    // Every primary must let the user `ASKING` (sent before a request that follows `ASK`
    // while a slot moves: refused, the request would bounce between the two nodes until its
    // timeout, and a lease whose key has moved could not be renewed) and `PING` (calls prove
    // their replies with it, as on one server): refused here, by name, rather than later as a
    // `Timeout` or `ConnectionLost`. `PING` comes second, so it is the command that `ASKING`
    // applies to.
    let everywhere = RoutingInfo::MultiNode((
        MultipleNodeRoutingInfo::AllMasters,
        Some(ResponsePolicy::AllSucceeded),
    ));
    for (command, grant) in [("ASKING", "+asking"), ("PING", "+ping")] {
        let answer = connection
            .route_command(redis::cmd(command), everywhere.clone())
            .await;
        if let Err(error) = answer.and_then(Value::extract_error)
            && let Some(refused) = super::standalone::refused_right(&error, grant)
        {
            return Err(refused);
        }
    }
    for script in scripts::preloaded() {
        // redis-rs sends SCRIPT LOAD to every primary.
        if let Err(error) = script.script().load_async(&mut connection).await {
            tracing::debug!(%error, "could not preload the lock scripts");
            break;
        }
    }
    Ok(connection)
}

/// The first key of one of the commands the lock calls send (redis-rs keeps its own routing
/// table private): the key after `numkeys` for scripts, none for `PING`, else the first argument.
fn first_key(command: &Cmd) -> Option<Vec<u8>> {
    let mut args = command.args_iter().map(|arg| match arg {
        redis::Arg::Simple(bytes) => bytes,
        _ => &[],
    });
    let name = args.next()?.to_ascii_uppercase();
    match name.as_slice() {
        // No key: a `WAIT` only follows the write that routes its pipeline.
        b"PING" | b"ASKING" | b"WAIT" | b"WAITAOF" => None,
        b"EVAL" | b"EVALSHA" => {
            let _script = args.next()?;
            let keys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
            if keys == 0 {
                return None;
            }
            args.next().map(<[u8]>::to_vec)
        }
        _ => args.next().map(<[u8]>::to_vec),
    }
}

/// Clears `replacing` when the replacement task ends in any way.
struct ReplacingFlag {
    shared: std::sync::Weak<Shared>,
}

impl Drop for ReplacingFlag {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            lock(&shared.current).replacing = false;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_keys() {
        let mut set = redis::cmd("SET");
        set.arg("orders").arg("owner").arg("NX");
        assert_eq!(first_key(&set).as_deref(), Some(&b"orders"[..]));
        let mut script = redis::cmd("EVALSHA");
        script.arg("abc").arg(2).arg("lock").arg("channel").arg("x");
        assert_eq!(first_key(&script).as_deref(), Some(&b"lock"[..]));
        let mut keyless = redis::cmd("EVAL");
        keyless.arg("return 1").arg(0);
        assert_eq!(first_key(&keyless), None);
        assert_eq!(first_key(&redis::cmd("PING")), None);
        let mut wait = redis::cmd("WAIT");
        wait.arg(1).arg(100);
        assert_eq!(first_key(&wait), None);
    }
}

//! Release notifications over Redis pub/sub.
//!
//! One RESP3 connection per backend carries every plain subscription (redis-rs pushes messages to
//! us and re-subscribes by itself after a reconnect); sharded subscriptions on a cluster go over
//! one connection per primary, which nothing re-subscribes by itself (see `shards`). Subscribe
//! and unsubscribe requests go through one task, in order, with a count per channel, so a
//! channel that is dropped and watched again at the same moment never ends up unsubscribed while
//! someone waits on it. A lost connection wakes every
//! local waiter to retry, since releases may have been missed meanwhile. Against a server without
//! RESP3 the backend falls back to polling.
//!
//! A SUBSCRIBE that times out (or fails without an answer from the server) may still be applied:
//! the request stays queued on the connection, and a paused server runs it when it resumes. Its
//! channel is then remembered as *maybe subscribed*: never live for waiters (they poll, as after
//! any failed subscribe), but unsubscribed once no local topic wants the channel any more. An
//! UNSUBSCRIBE that times out or fails is sent again later (with backoff) until it succeeds or the
//! channel is watched again: redis-rs re-subscribes after a reconnect every channel the server
//! confirmed, so a failed UNSUBSCRIBE would otherwise leave the subscription on the server for
//! the life of the backend. Both go through the same ordered task as every other request.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::{Error, ReleaseHub, ReleaseWatch, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ErrorKind, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{mpsc, oneshot};

use crate::wire::announce::{Wake, wake_for};
use crate::wire::errors::map_error;

enum Command {
    /// Subscribe (or count one more watcher). Replies `Ok(false)` when the server cannot push and
    /// the caller must poll instead.
    /// Each local topic (one per name and lifetime, see `ReleaseHub`) is counted by its id, so
    /// an unsubscribe for a subscribe that never took effect is ignored.
    Subscribe(String, u64, oneshot::Sender<Result<bool>>),
    Unsubscribe(String, u64),
    /// Subscribe this sharded channel again where its slot lives now, if a topic still wants
    /// it: its subscription ended (its node's connection dropped, its slot moved, its primary
    /// was demoted). The number counts the attempts that failed so far.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Resubscribe(String, u32),
    /// The sharded listener's connection numbered so to this node dropped.
    #[cfg(feature = "cluster")]
    NodeLost(crate::connection::shards::Address, u64),
    /// This node ended this sharded subscription on the connection numbered so: our own
    /// SUNSUBSCRIBE confirmed, or the server's doing.
    #[cfg(feature = "cluster")]
    ShardDropped(String, crate::connection::shards::Address, u64),
    /// The connection numbered so dropped and must be made anew elsewhere (the primary of a
    /// Sentinel service may have moved): look it up, connect, subscribe every live channel.
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    Reconnect(u64),
}

/// How the notification task reaches the server (one per task: its size does not matter).
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
enum Connector {
    /// Plain pub/sub on one node, over a reconnecting RESP3 connection.
    Plain(redis::ConnectionInfo),
    /// Sharded pub/sub on a cluster: each channel on the node serving its slot, found through
    /// these seeds (with the TLS settings for the nodes found through them).
    #[cfg(feature = "cluster")]
    Sharded(Vec<redis::ConnectionInfo>, crate::connection::tls::Tls),
    /// Plain pub/sub on the primary of a Sentinel service, looked up again after each
    /// disconnection (redis-rs would reconnect to the old address).
    #[cfg(feature = "sentinel")]
    Primary(crate::connection::source::Source),
}

impl Connector {
    /// The client of the one server to listen on (plain pub/sub).
    async fn client(&self) -> redis::RedisResult<Client> {
        match self {
            Connector::Plain(info) => Client::open(info.clone()),
            #[cfg(feature = "sentinel")]
            Connector::Primary(source) => {
                let info = source.client().await?.get_connection_info().clone();
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_protocol(ProtocolVersion::RESP3);
                Client::open(info.set_redis_settings(settings))
            }
            #[cfg(feature = "cluster")]
            Connector::Sharded(..) => Err(redis::RedisError::from((
                ErrorKind::Client,
                "sharded pub/sub has no single server",
            ))),
        }
    }

    /// Whether a lost connection is made anew elsewhere rather than where it was.
    fn follows_primary(&self) -> bool {
        match self {
            #[cfg(feature = "sentinel")]
            Connector::Primary(_) => true,
            _ => false,
        }
    }
}

/// The notification connection the task holds.
enum Listener {
    Plain(ConnectionManager),
    #[cfg(feature = "cluster")]
    Sharded(Box<crate::connection::shards::Shards>),
}

impl Listener {
    async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Listener::Plain(manager) => manager.subscribe(channel).await,
            // One channel per call: several sharded channels in one SSUBSCRIBE must share a slot.
            #[cfg(feature = "cluster")]
            Listener::Sharded(shards) => shards.subscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        match self {
            Listener::Plain(manager) => manager.unsubscribe(channels).await,
            #[cfg(feature = "cluster")]
            Listener::Sharded(shards) => {
                let mut failed = Ok(());
                for channel in channels {
                    if let Err(error) = shards.unsubscribe(channel).await {
                        failed = Err(error);
                    }
                }
                failed
            }
        }
    }
}

/// The notification side of one backend.
pub(crate) struct Notifications {
    hub: ReleaseHub,
    /// One notification task per kind of pub/sub listened to (plain, sharded, or both); none
    /// when polling.
    commands: Vec<mpsc::UnboundedSender<Command>>,
    polling: Arc<AtomicBool>,
    poll_interval: Duration,
}

impl Notifications {
    /// Notifications by polling only.
    pub fn polling(poll_interval: Duration) -> Self {
        Notifications {
            hub: ReleaseHub::new(),
            commands: Vec::new(),
            polling: Arc::new(AtomicBool::new(true)),
            poll_interval,
        }
    }

    /// Notifications over plain pub/sub on the server of `client`, connecting lazily on the
    /// first watch. The client's connection info carries its TLS settings, if any, to the
    /// notification connection.
    pub fn pubsub(client: &Client, timeout: Duration, poll_interval: Duration) -> Self {
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        Self::listening(
            vec![Connector::Plain(info.set_redis_settings(settings))],
            timeout,
            poll_interval,
        )
    }

    /// Notifications over plain pub/sub on the primary of a Sentinel service, followed across
    /// failovers (see [`Connector::Primary`]).
    #[cfg(feature = "sentinel")]
    pub fn primary(
        source: crate::connection::source::Source,
        timeout: Duration,
        poll_interval: Duration,
    ) -> Self {
        Self::listening(vec![Connector::Primary(source)], timeout, poll_interval)
    }

    /// Notifications on a cluster: plain pub/sub through `plain` (one node: a cluster passes
    /// every `PUBLISH` to all nodes) and/or sharded pub/sub through the nodes of `sharded`
    /// (each channel on the node serving its slot; `tls` for the nodes found through them).
    /// Waiters wait on both when both are given.
    #[cfg(feature = "cluster")]
    pub fn cluster(
        plain: Option<&Client>,
        sharded: Option<Vec<redis::ConnectionInfo>>,
        tls: &crate::connection::tls::Tls,
        timeout: Duration,
        poll_interval: Duration,
    ) -> Self {
        let mut connectors = Vec::new();
        if let Some(client) = plain {
            let info = client.get_connection_info().clone();
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3);
            connectors.push(Connector::Plain(info.set_redis_settings(settings)));
        }
        if let Some(nodes) = sharded {
            connectors.push(Connector::Sharded(nodes, tls.clone()));
        }
        Self::listening(connectors, timeout, poll_interval)
    }

    fn listening(connectors: Vec<Connector>, timeout: Duration, poll_interval: Duration) -> Self {
        let (senders, receivers): (Vec<_>, Vec<_>) =
            connectors.iter().map(|_| mpsc::unbounded_channel()).unzip();
        // The hub lives inside the connections' push handlers, which the tasks own: holding
        // only weak senders here lets the tasks end when the backend is dropped.
        let weak: Vec<_> = senders
            .iter()
            .map(mpsc::UnboundedSender::downgrade)
            .collect();
        let hub = ReleaseHub::with_idle_hook(move |channel, topic| {
            for commands in weak.iter().filter_map(mpsc::WeakUnboundedSender::upgrade) {
                let _ = commands.send(Command::Unsubscribe(channel.to_owned(), topic));
            }
        });
        let polling = Arc::new(AtomicBool::new(false));
        for ((connector, receiver), sender) in connectors.into_iter().zip(receivers).zip(&senders) {
            tokio::spawn(run(
                connector,
                sender.downgrade(),
                timeout,
                hub.clone(),
                receiver,
                polling.clone(),
            ));
        }
        Notifications {
            hub,
            commands: senders,
            polling,
            poll_interval,
        }
    }

    /// A watch on `channel`, subscribed on the server before this returns.
    pub async fn watch(&self, channel: &str) -> Result<ReleaseWatch> {
        if self.commands.is_empty() {
            return Ok(ReleaseWatch::polling(self.poll_interval));
        }
        let commands = &self.commands;
        // Polling while the notifications are down: the waiter registers again at each look.
        if self.polling.load(Ordering::Relaxed) {
            return Ok(self.hub.polling_for_now(self.poll_interval));
        }
        let watch = self.hub.watch(channel);
        let subscribed = watch
            .ensure_subscribed(|topic| async move {
                // Live only once every kind listened to is subscribed: a release announced on
                // a kind not listened to would be missed.
                let answers = commands.iter().map(|commands| {
                    let (reply, answer) = oneshot::channel();
                    let sent = commands.send(Command::Subscribe(channel.to_owned(), topic, reply));
                    async move {
                        sent.map_err(|_| Error::ConnectionLost("notification task ended".into()))?;
                        answer
                            .await
                            .map_err(|_| Error::ConnectionLost("notification task ended".into()))?
                            .map(|_| ())
                    }
                });
                futures_util::future::try_join_all(answers)
                    .await
                    .map(|_| ())
            })
            .await;
        if let Err(error) = subscribed {
            // Waiting still works without notifications, only slower: poll rather than fail.
            tracing::warn!(%error, %channel, "could not subscribe to release notifications; polling");
            return Ok(self.hub.polling_for_now(self.poll_interval));
        }
        if self.polling.load(Ordering::Relaxed) {
            return Ok(self.hub.polling_for_now(self.poll_interval));
        }
        Ok(watch)
    }

    /// Whether a local waiter watches `channel` (see [`ReleaseHub::is_watched`]).
    pub fn is_watched(&self, channel: &str) -> bool {
        self.hub.is_watched(channel)
    }

    /// Whether a local waiter watches any channel: one atomic load.
    pub fn watches_any(&self) -> bool {
        self.hub.watches_any()
    }

    /// How many channels have local watchers.
    pub fn watched_channels(&self) -> usize {
        self.hub.watched_count()
    }
}

/// Tracks whether the notification connection is being re-established: releases published
/// between the disconnection and the automatic re-subscription are lost, so every waiter is
/// woken once when the connection drops **and** again when their channel's re-subscription is
/// confirmed
/// (a waiter that retried in between, found the lock still held and went back to sleep would
/// otherwise miss a release made during that gap).
#[derive(Default)]
struct PushState {
    disconnected_at: std::sync::Mutex<Option<std::time::Instant>>,
    /// `Some(number)` when a disconnection must make the task reconnect elsewhere (a Sentinel
    /// service's primary): the connection's number, so a late report of an old connection is
    /// ignored.
    reconnect: Option<u64>,
}

/// Subscription confirmations this soon after a disconnection are re-subscriptions.
const RESUBSCRIBE_WINDOW: Duration = Duration::from_secs(10);

fn on_push(
    hub: &ReleaseHub,
    state: &PushState,
    commands: &mpsc::WeakUnboundedSender<Command>,
    push: &PushInfo,
) {
    match push.kind {
        PushKind::Message | PushKind::SMessage => {
            if let Some(Value::BulkString(channel)) = push.data.first()
                && let Ok(channel) = std::str::from_utf8(channel)
            {
                let message = match push.data.get(1) {
                    Some(Value::BulkString(message)) => message.as_slice(),
                    _ => &[],
                };
                match wake_for(channel, message) {
                    Wake::One => hub.notify_released(channel),
                    Wake::UpTo(count) => hub.notify_up_to(channel, count),
                    Wake::All => hub.wake_watchers(channel),
                }
            }
        }
        PushKind::Disconnection => {
            crate::telemetry::pubsub_disconnected();
            *state
                .disconnected_at
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
            hub.wake_all();
            if let Some(number) = state.reconnect
                && let Some(commands) = commands.upgrade()
            {
                let _ = commands.send(Command::Reconnect(number));
            }
        }
        PushKind::Subscribe | PushKind::SSubscribe => {
            // A confirmation of the automatic re-subscription after a reconnect: the channel is
            // live again, so its waiters re-check what they may have missed since the drop.
            let disconnected_at = *state
                .disconnected_at
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if disconnected_at.is_some_and(|at| at.elapsed() < RESUBSCRIBE_WINDOW)
                && let Some(Value::BulkString(channel)) = push.data.first()
                && let Ok(channel) = std::str::from_utf8(channel)
            {
                hub.wake_watchers(channel);
            }
        }
        _ => {}
    }
}

fn resp3_unsupported(error: &redis::RedisError) -> bool {
    error.kind() == ErrorKind::RESP3NotSupported
        || error.to_string().to_ascii_lowercase().contains("hello")
}

async fn connect(
    connector: &Connector,
    number: u64,
    commands: mpsc::WeakUnboundedSender<Command>,
    timeout: Duration,
    hub: ReleaseHub,
) -> std::result::Result<Listener, redis::RedisError> {
    let state = PushState {
        reconnect: connector.follows_primary().then_some(number),
        ..PushState::default()
    };
    #[cfg(feature = "cluster")]
    let commands_for_shards = commands.clone();
    let on_push = move |push: PushInfo| {
        on_push(&hub, &state, &commands, &push);
        Ok::<(), redis::aio::SendError>(())
    };
    #[cfg(feature = "cluster")]
    if let Connector::Sharded(nodes, tls) = connector {
        return crate::connection::shards::Shards::connect(
            nodes.clone(),
            tls.clone(),
            timeout,
            sharded_push_handler(on_push, commands_for_shards),
        )
        .await
        .map(|shards| Listener::Sharded(Box::new(shards)));
    }
    // One server: the fixed one, or a Sentinel service's primary as found now.
    let client = connector.client().await?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_automatic_resubscription()
        .set_push_sender(on_push);
    ConnectionManager::new_with_config(client, config)
        .await
        .map(Listener::Plain)
}

/// The push handler of the sharded listener's node connections: a dropped connection or an
/// ended subscription goes to the task (which alone decides where channels are subscribed, and
/// wakes their waiters once subscribed again), everything else to `on_push`.
#[cfg(feature = "cluster")]
fn sharded_push_handler<F>(
    on_push: F,
    commands: mpsc::WeakUnboundedSender<Command>,
) -> crate::connection::shards::PushHandler
where
    F: Fn(PushInfo) -> std::result::Result<(), redis::aio::SendError> + Send + Sync + 'static,
{
    Arc::new(move |node, number, push| match push.kind {
        PushKind::Disconnection => {
            let _ = on_push(push);
            if let Some(commands) = commands.upgrade() {
                let _ = commands.send(Command::NodeLost(node.clone(), number));
            }
        }
        PushKind::SUnsubscribe => {
            if let Some(Value::BulkString(channel)) = push.data.first()
                && let Ok(channel) = std::str::from_utf8(channel)
                && let Some(commands) = commands.upgrade()
            {
                let _ = commands.send(Command::ShardDropped(
                    channel.to_owned(),
                    node.clone(),
                    number,
                ));
            }
        }
        _ => {
            let _ = on_push(push);
        }
    })
}

/// The pause before trying again to reach a Sentinel service's primary for notifications.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// The first wait before a failed UNSUBSCRIBE is sent again; doubled after each failure.
const UNSUBSCRIBE_RETRY_FIRST: Duration = Duration::from_millis(250);
/// The longest wait between two attempts at a failed UNSUBSCRIBE.
const UNSUBSCRIBE_RETRY_MAX: Duration = Duration::from_secs(2);

/// What the notification task knows of the server's subscriptions, by channel.
///
/// Invariants: a channel is in at most one of the three; `leftover` is empty without a connection.
#[derive(Debug, Default)]
struct Channels {
    /// Confirmed subscriptions, with the local topics counted on each.
    live: HashMap<String, HashSet<u64>>,
    /// Channels whose SUBSCRIBE timed out or failed without an answer from the server, with the
    /// topics that asked. The server may still apply it, so the channel is unsubscribed once
    /// none of these topics is left. Not live: their waiters poll.
    unsure: HashMap<String, HashSet<u64>>,
    /// Channels no topic wants whose UNSUBSCRIBE timed out or failed: sent again later.
    leftover: HashSet<String>,
}

impl Channels {
    /// Counts one more topic on a confirmed channel; `false` if the channel is not live.
    fn join(&mut self, channel: &str, topic: u64) -> bool {
        match self.live.get_mut(channel) {
            Some(topics) => {
                topics.insert(topic);
                true
            }
            None => false,
        }
    }

    /// A SUBSCRIBE of `channel` is about to be sent: it supersedes a failed UNSUBSCRIBE of the
    /// channel, which must not be sent again after it. Returns whether there was one.
    fn subscribing(&mut self, channel: &str) -> bool {
        self.leftover.remove(channel)
    }

    /// The server confirmed the SUBSCRIBE of `channel`, after every earlier request on the
    /// connection: from now on the channel is live, counted from `topic`.
    fn subscribed(&mut self, channel: String, topic: u64) {
        self.unsure.remove(&channel);
        self.live.insert(channel, HashSet::from([topic]));
    }

    /// The SUBSCRIBE of `channel` for `topic` timed out or failed, but may still be applied.
    fn maybe_subscribed(&mut self, channel: String, topic: u64) {
        self.unsure.entry(channel).or_default().insert(topic);
    }

    /// Forgets `topic` of `channel` (its last local watch is gone). Returns `true` when no topic
    /// wants the channel any more and it is, or may be, subscribed on the server.
    fn release(&mut self, channel: &str, topic: u64) -> bool {
        let counted =
            forget(&mut self.live, channel, topic) || forget(&mut self.unsure, channel, topic);
        counted && !self.live.contains_key(channel) && !self.unsure.contains_key(channel)
    }
}

/// Removes `topic` from the topics of `channel`, and the channel once it has none; returns
/// whether `topic` was counted there.
fn forget(map: &mut HashMap<String, HashSet<u64>>, channel: &str, topic: u64) -> bool {
    let Some(topics) = map.get_mut(channel) else {
        return false;
    };
    if !topics.remove(&topic) {
        return false;
    }
    if topics.is_empty() {
        map.remove(channel);
    }
    true
}

/// Whether the server answered `error` itself (so the request was not applied, and a retry would
/// get the same answer), rather than the request being lost or unanswered.
fn answered_by_server(error: &redis::RedisError) -> bool {
    error.code().is_some()
}

/// Sends `UNSUBSCRIBE channels...`. Returns `false` when the server may still hold the
/// subscriptions: the request timed out or the connection failed.
async fn unsubscribe(listener: &mut Listener, channels: Vec<String>, timeout: Duration) -> bool {
    match tokio::time::timeout(timeout, listener.unsubscribe(&channels)).await {
        Ok(Ok(())) => true,
        Ok(Err(error)) if answered_by_server(&error) => {
            tracing::warn!(%error, ?channels, "unsubscribe refused by the server");
            true
        }
        Ok(Err(error)) => {
            tracing::debug!(%error, ?channels, "unsubscribe failed; retried later");
            false
        }
        Err(_) => {
            tracing::debug!(?channels, "unsubscribe timed out; retried later");
            false
        }
    }
}

async fn run(
    connector: Connector,
    own_commands: mpsc::WeakUnboundedSender<Command>,
    timeout: Duration,
    hub: ReleaseHub,
    mut commands: mpsc::UnboundedReceiver<Command>,
    polling: Arc<AtomicBool>,
) {
    let mut connection: Option<Listener> = None;
    // Numbers the connections made, so a reconnect request about an old one is ignored.
    let mut connections_made: u64 = 0;
    let mut channels = Channels::default();
    // When to send the UNSUBSCRIBE of `channels.leftover` again, and the wait after that.
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut retry_delay = UNSUBSCRIBE_RETRY_FIRST;
    loop {
        let command = match retry_at {
            None => commands.recv().await,
            Some(at) => tokio::select! {
                command = commands.recv() => command,
                () = tokio::time::sleep_until(at) => {
                    retry_at = None;
                    let leftover: Vec<String> = channels.leftover.iter().cloned().collect();
                    if let Some(manager) = connection.as_mut()
                        && !leftover.is_empty()
                    {
                        if unsubscribe(manager, leftover, timeout).await {
                            // Nothing else ran meanwhile: these are still all the leftovers.
                            channels.leftover.clear();
                            retry_delay = UNSUBSCRIBE_RETRY_FIRST;
                        } else {
                            retry_delay = (retry_delay * 2).min(UNSUBSCRIBE_RETRY_MAX);
                            retry_at = Some(tokio::time::Instant::now() + retry_delay);
                        }
                    }
                    continue;
                }
            },
        };
        let Some(command) = command else {
            break;
        };
        match command {
            Command::Subscribe(channel, topic, reply) => {
                if channels.join(&channel, topic) {
                    let _ = reply.send(Ok(true));
                    continue;
                }
                if polling.load(Ordering::Relaxed) {
                    let _ = reply.send(Ok(false));
                    continue;
                }
                if connection.is_none() {
                    connections_made += 1;
                    let made = connect(
                        &connector,
                        connections_made,
                        own_commands.clone(),
                        timeout,
                        hub.clone(),
                    )
                    .await;
                    match made {
                        Ok(mut made) => {
                            // Channels still live from an earlier connection (one that dropped
                            // and could not be made again at once) are subscribed here again.
                            for channel in channels.live.keys() {
                                if let Err(error) = made.subscribe(channel).await {
                                    tracing::warn!(%error, %channel, "could not subscribe again on a new notification connection");
                                }
                            }
                            // Waits that poll meanwhile register again.
                            hub.notifications_back();
                            connection = Some(made);
                        }
                        Err(error) if resp3_unsupported(&error) => {
                            tracing::warn!(%error, "server cannot push release notifications (no RESP3); waiters will poll");
                            polling.store(true, Ordering::Relaxed);
                            let _ = reply.send(Ok(false));
                            continue;
                        }
                        Err(error) => {
                            let _ = reply.send(Err(map_error(&error, timeout)));
                            continue;
                        }
                    }
                }
                let Some(manager) = connection.as_mut() else {
                    continue;
                };
                // A leftover whose UNSUBSCRIBE may not have been applied stays "maybe
                // subscribed" if this SUBSCRIBE fails, whatever the reason.
                let was_leftover = channels.subscribing(&channel);
                let subscribed = tokio::time::timeout(timeout, manager.subscribe(&channel)).await;
                let _ = reply.send(match subscribed {
                    Ok(Ok(())) => {
                        channels.subscribed(channel, topic);
                        Ok(true)
                    }
                    Ok(Err(error)) => {
                        if was_leftover || !answered_by_server(&error) {
                            channels.maybe_subscribed(channel, topic);
                        }
                        Err(map_error(&error, timeout))
                    }
                    Err(_) => {
                        // Still queued on the connection: a paused server applies it on resume.
                        channels.maybe_subscribed(channel, topic);
                        Err(Error::Timeout { after: timeout })
                    }
                });
            }
            Command::Reconnect(number) => {
                if number != connections_made || !connector.follows_primary() {
                    continue;
                }
                // Drop the connection to the old address (its own reconnecting ends with it).
                connection = None;
                connections_made += 1;
                let made = tokio::time::timeout(
                    timeout,
                    connect(
                        &connector,
                        connections_made,
                        own_commands.clone(),
                        timeout,
                        hub.clone(),
                    ),
                )
                .await;
                match made {
                    Ok(Ok(mut listener)) => {
                        for channel in channels.live.keys() {
                            if let Err(error) = listener.subscribe(channel).await {
                                tracing::warn!(%error, %channel, "could not subscribe again on the new primary");
                            }
                        }
                        connection = Some(listener);
                        // Releases made during the gap: every waiter looks again, and waits
                        // that poll meanwhile register again.
                        hub.notifications_back();
                    }
                    _ => {
                        // Try again shortly; waiters keep their timers meanwhile.
                        let again = own_commands.clone();
                        let number = connections_made;
                        tokio::spawn(async move {
                            tokio::time::sleep(RECONNECT_PAUSE).await;
                            if let Some(commands) = again.upgrade() {
                                let _ = commands.send(Command::Reconnect(number));
                            }
                        });
                    }
                }
            }
            Command::Resubscribe(channel, failures) => {
                if !channels.live.contains_key(&channel) {
                    continue; // no longer wanted
                }
                if let Some(listener) = connection.as_mut() {
                    match tokio::time::timeout(timeout, listener.subscribe(&channel)).await {
                        // Live again: its waiters look once more, in case a release fell
                        // between the subscription ending and now.
                        Ok(Ok(())) => hub.wake_watchers(&channel),
                        // Its waiters keep their timers (capped by the holder's lease) until a
                        // later attempt succeeds.
                        failed => {
                            let error = match failed {
                                Ok(Err(error)) => error.to_string(),
                                _ => "timed out".to_owned(),
                            };
                            tracing::warn!(%error, %channel, "could not subscribe again after the subscription ended; retried later");
                            let again = own_commands.clone();
                            let pause = RECONNECT_PAUSE
                                .saturating_mul(1 << failures.min(4))
                                .min(UNSUBSCRIBE_RETRY_MAX);
                            tokio::spawn(async move {
                                tokio::time::sleep(pause).await;
                                if let Some(commands) = again.upgrade() {
                                    let _ = commands.send(Command::Resubscribe(
                                        channel,
                                        failures.saturating_add(1),
                                    ));
                                }
                            });
                        }
                    }
                }
            }
            #[cfg(feature = "cluster")]
            Command::NodeLost(node, number) => {
                if let Some(Listener::Sharded(shards)) = connection.as_mut() {
                    for channel in shards.node_lost(&node, number) {
                        if channels.live.contains_key(&channel) {
                            let _ = own_commands
                                .upgrade()
                                .map(|commands| commands.send(Command::Resubscribe(channel, 0)));
                        }
                    }
                }
            }
            #[cfg(feature = "cluster")]
            Command::ShardDropped(channel, node, number) => {
                if let Some(Listener::Sharded(shards)) = connection.as_mut()
                    && shards.dropped(&channel, &node, number)
                    && channels.live.contains_key(&channel)
                {
                    hub.wake_watchers(&channel);
                    let _ = own_commands
                        .upgrade()
                        .map(|commands| commands.send(Command::Resubscribe(channel, 0)));
                }
            }
            Command::Unsubscribe(channel, topic) => {
                if !channels.release(&channel, topic) {
                    continue;
                }
                if let Some(manager) = connection.as_mut()
                    && !unsubscribe(manager, vec![channel.clone()], timeout).await
                {
                    channels.leftover.insert(channel);
                }
            }
        }
        if channels.leftover.is_empty() {
            retry_at = None;
            retry_delay = UNSUBSCRIBE_RETRY_FIRST;
        } else if retry_at.is_none() {
            retry_at = Some(tokio::time::Instant::now() + retry_delay);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Channels;

    #[test]
    fn a_confirmed_channel_is_unsubscribed_after_its_last_topic() {
        let mut channels = Channels::default();
        assert!(!channels.join("c", 1));
        assert!(!channels.subscribing("c"));
        channels.subscribed("c".into(), 1);
        assert!(channels.join("c", 1));
        assert!(channels.join("c", 2)); // a later topic while the first is still counted
        assert!(!channels.release("c", 1));
        assert!(channels.release("c", 2));
        assert!(!channels.release("c", 2), "released twice");
        assert!(channels.live.is_empty() && channels.unsure.is_empty());
    }

    #[test]
    fn a_maybe_subscribed_channel_is_unsubscribed_but_never_live() {
        let mut channels = Channels::default();
        channels.maybe_subscribed("c".into(), 1);
        assert!(
            !channels.join("c", 1),
            "a maybe-subscribed channel is not live"
        );
        assert!(channels.release("c", 1));
        assert!(channels.unsure.is_empty());
        // An unsubscribe for a topic never sent is ignored.
        assert!(!channels.release("c", 7));
    }

    #[test]
    fn a_confirmed_subscribe_supersedes_the_maybe_subscribed_topics() {
        let mut channels = Channels::default();
        channels.maybe_subscribed("c".into(), 1);
        channels.maybe_subscribed("c".into(), 2);
        assert!(!channels.release("c", 1), "topic 2 may still retry");
        channels.subscribed("c".into(), 3);
        // The old topic going away must not unsubscribe the live channel.
        assert!(!channels.release("c", 2));
        assert!(channels.join("c", 4));
        assert!(!channels.release("c", 3));
        assert!(channels.release("c", 4));
    }

    #[test]
    fn a_subscribe_drops_the_pending_unsubscribe_retry() {
        let mut channels = Channels::default();
        channels.leftover.insert("c".into());
        assert!(channels.subscribing("c"));
        assert!(channels.leftover.is_empty());
        assert!(!channels.subscribing("c"));
    }
}

/// A sharded subscription made while its primary is unreachable must not land on a replica
/// (where our SUNSUBSCRIBE, sent to the primary, would never undo it).
#[cfg(all(test, feature = "cluster"))]
mod sharded_tests {
    use std::time::Duration;

    use lock_testkit::{RedisCluster, check_nothing_left};

    use super::Notifications;
    use crate::connection::tls::Tls;

    const CHANNEL: &str = "redisson_lock__channel:{battery:cluster}";

    async fn shard_channels(cluster: &RedisCluster, node: usize) -> Vec<String> {
        let mut raw = cluster.node(node).connection().await;
        redis::cmd("PUBSUB")
            .arg("SHARDCHANNELS")
            .query_async(&mut raw)
            .await
            .expect("PUBSUB SHARDCHANNELS")
    }

    /// Waits until `CLUSTER SLOTS` lists a replica of `primary`: Redis leaves out replicas that
    /// have replicated nothing yet, and a client only falls back to replicas it knows of.
    async fn replica_listed(cluster: &RedisCluster, primary: usize) {
        let mut raw = cluster.node(primary).connection().await;
        let key = "{battery:cluster}:written";
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(1)
            .query_async(&mut raw)
            .await
            .expect("SET");
        let _: () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut raw)
            .await
            .expect("DEL");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let slots: redis::Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async(&mut raw)
                .await
                .expect("CLUSTER SLOTS");
            let listed = match slots {
                redis::Value::Array(ranges) => ranges
                    .iter()
                    .any(|range| matches!(range, redis::Value::Array(fields) if fields.len() > 3)),
                _ => false,
            };
            if listed {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no replica listed in CLUSTER SLOTS"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscribe_during_a_primary_outage_leaves_nothing_on_its_replica() {
        let cluster = RedisCluster::start(3, 1).expect("cluster");
        let seeds = cluster
            .urls()
            .iter()
            .map(|url| {
                redis::Client::open(url.as_str())
                    .expect("url")
                    .get_connection_info()
                    .clone()
            })
            .collect();
        let notifications = Notifications::cluster(
            None,
            Some(seeds),
            &Tls::default(),
            Duration::from_millis(500),
            Duration::from_millis(100),
        );
        let primary = cluster
            .primary_of_slot(cluster.slot_of(CHANNEL).expect("slot"))
            .expect("primary");
        let replica = cluster.replicas_of(primary).expect("replicas")[0];
        replica_listed(&cluster, primary).await;

        // An idle notification connection to the primary, as after any earlier wait.
        drop(notifications.watch(CHANNEL).await.expect("first watch"));
        let left = check_nothing_left(cluster.urls(), &[], Duration::from_secs(5)).await;
        assert!(left.is_empty(), "after the first watch: {left}");

        // The primary drops our connection and stalls for a while, as under a fault.
        let mut raw = cluster.node(primary).connection().await;
        let _: redis::Value = redis::pipe()
            .atomic()
            .cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .cmd("CLIENT")
            .arg("PAUSE")
            .arg(1500)
            .arg("ALL")
            .query_async(&mut raw)
            .await
            .expect("kill and pause");
        tokio::time::sleep(Duration::from_millis(50)).await;

        let watch = notifications.watch(CHANNEL).await.expect("second watch");
        let on_replica = shard_channels(&cluster, replica).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(watch);

        let left = check_nothing_left(cluster.urls(), &[], Duration::from_secs(5)).await;
        assert!(left.is_empty(), "after the outage: {left}");
        assert!(
            on_replica.is_empty(),
            "subscribed on the replica during the outage: {on_replica:?}"
        );
    }
}

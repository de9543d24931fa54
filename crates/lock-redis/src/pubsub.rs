//! Release notifications over Redis pub/sub.
//!
//! One RESP3 connection per backend carries every subscription (redis-rs pushes messages to us and
//! re-subscribes by itself after a reconnect). Subscribe and unsubscribe requests go through one
//! task, in order, with a count per channel, so a channel that is dropped and watched again at the
//! same moment never ends up unsubscribed while someone waits on it. A lost connection wakes every
//! local waiter to retry, since releases may have been missed meanwhile. Against a server without
//! RESP3 the backend falls back to polling.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::{Error, ReleaseHub, ReleaseWatch, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ErrorKind, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{mpsc, oneshot};

use crate::errors::map_error;

enum Command {
    /// Subscribe (or count one more watcher). Replies `Ok(false)` when the server cannot push and
    /// the caller must poll instead.
    /// Each local topic (one per name and lifetime, see `ReleaseHub`) is counted by its id, so
    /// an unsubscribe for a subscribe that never took effect is ignored.
    Subscribe(String, u64, oneshot::Sender<Result<bool>>),
    Unsubscribe(String, u64),
}

/// The notification side of one backend.
pub(crate) struct Notifications {
    hub: ReleaseHub,
    commands: Option<mpsc::UnboundedSender<Command>>,
    polling: Arc<AtomicBool>,
    poll_interval: Duration,
}

impl Notifications {
    /// Notifications by polling only.
    pub fn polling(poll_interval: Duration) -> Self {
        Notifications {
            hub: ReleaseHub::new(),
            commands: None,
            polling: Arc::new(AtomicBool::new(true)),
            poll_interval,
        }
    }

    /// Notifications over pub/sub, connecting lazily on the first watch.
    pub fn pubsub(client: &Client, timeout: Duration, poll_interval: Duration) -> Self {
        let (commands, receiver) = mpsc::unbounded_channel();
        // The hub lives inside the connection's push handler, which the task owns: holding only a
        // weak sender here lets the task end when the backend is dropped.
        let weak = commands.downgrade();
        let hub = ReleaseHub::with_idle_hook(move |channel, topic| {
            if let Some(commands) = weak.upgrade() {
                let _ = commands.send(Command::Unsubscribe(channel.to_owned(), topic));
            }
        });
        let polling = Arc::new(AtomicBool::new(false));
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let resp3 = info.set_redis_settings(settings);
        tokio::spawn(run(resp3, timeout, hub.clone(), receiver, polling.clone()));
        Notifications {
            hub,
            commands: Some(commands),
            polling,
            poll_interval,
        }
    }

    /// A watch on `channel`, subscribed on the server before this returns.
    pub async fn watch(&self, channel: &str) -> Result<ReleaseWatch> {
        let Some(commands) = &self.commands else {
            return Ok(ReleaseWatch::polling(self.poll_interval));
        };
        if self.polling.load(Ordering::Relaxed) {
            return Ok(ReleaseWatch::polling(self.poll_interval));
        }
        let watch = self.hub.watch(channel);
        let subscribed = watch
            .ensure_subscribed(|topic| async move {
                let (reply, answer) = oneshot::channel();
                commands
                    .send(Command::Subscribe(channel.to_owned(), topic, reply))
                    .map_err(|_| Error::ConnectionLost("notification task ended".into()))?;
                answer
                    .await
                    .map_err(|_| Error::ConnectionLost("notification task ended".into()))?
                    .map(|_| ())
            })
            .await;
        if let Err(error) = subscribed {
            // Waiting still works without notifications, only slower: poll rather than fail.
            tracing::warn!(%error, %channel, "could not subscribe to release notifications; polling");
            return Ok(ReleaseWatch::polling(self.poll_interval));
        }
        if self.polling.load(Ordering::Relaxed) {
            return Ok(ReleaseWatch::polling(self.poll_interval));
        }
        Ok(watch)
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
}

/// Subscription confirmations this soon after a disconnection are re-subscriptions.
const RESUBSCRIBE_WINDOW: Duration = Duration::from_secs(10);

fn on_push(hub: &ReleaseHub, state: &PushState, push: &PushInfo) {
    match push.kind {
        PushKind::Message => {
            if let Some(Value::BulkString(channel)) = push.data.first()
                && let Ok(channel) = std::str::from_utf8(channel)
            {
                hub.notify_released(channel);
            }
        }
        PushKind::Disconnection => {
            *state
                .disconnected_at
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
            hub.wake_all();
        }
        PushKind::Subscribe => {
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
    info: redis::ConnectionInfo,
    timeout: Duration,
    hub: ReleaseHub,
) -> std::result::Result<ConnectionManager, redis::RedisError> {
    let client = Client::open(info)?;
    let state = PushState::default();
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_automatic_resubscription()
        .set_push_sender(move |push: PushInfo| {
            on_push(&hub, &state, &push);
            Ok::<(), redis::aio::SendError>(())
        });
    ConnectionManager::new_with_config(client, config).await
}

async fn run(
    info: redis::ConnectionInfo,
    timeout: Duration,
    hub: ReleaseHub,
    mut commands: mpsc::UnboundedReceiver<Command>,
    polling: Arc<AtomicBool>,
) {
    let mut connection: Option<ConnectionManager> = None;
    let mut watchers: HashMap<String, HashSet<u64>> = HashMap::new();
    while let Some(command) = commands.recv().await {
        match command {
            Command::Subscribe(channel, topic, reply) => {
                if let Some(topics) = watchers.get_mut(&channel) {
                    topics.insert(topic);
                    let _ = reply.send(Ok(true));
                    continue;
                }
                if polling.load(Ordering::Relaxed) {
                    let _ = reply.send(Ok(false));
                    continue;
                }
                if connection.is_none() {
                    match connect(info.clone(), timeout, hub.clone()).await {
                        Ok(made) => connection = Some(made),
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
                let subscribed = tokio::time::timeout(timeout, manager.subscribe(&channel)).await;
                let _ = reply.send(match subscribed {
                    Ok(Ok(())) => {
                        watchers.insert(channel, HashSet::from([topic]));
                        Ok(true)
                    }
                    Ok(Err(error)) => Err(map_error(&error, timeout)),
                    Err(_) => Err(Error::Timeout { after: timeout }),
                });
            }
            Command::Unsubscribe(channel, topic) => {
                let Some(topics) = watchers.get_mut(&channel) else {
                    continue;
                };
                topics.remove(&topic);
                if !topics.is_empty() {
                    continue;
                }
                watchers.remove(&channel);
                if let Some(manager) = connection.as_mut() {
                    match tokio::time::timeout(timeout, manager.unsubscribe(&channel)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => tracing::debug!(%error, %channel, "unsubscribe failed"),
                        Err(_) => tracing::debug!(%channel, "unsubscribe timed out"),
                    }
                }
            }
        }
    }
}

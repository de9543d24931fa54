//! Release notifications: one `LISTEN` connection per backend, a channel per watched name.
//!
//! A task owns the connection. Watches ask it to `LISTEN` on their name's channel (once per
//! channel, counted by topic) and the hub's idle hook to `UNLISTEN`; notifications go to the
//! hub. When the connection is lost, every waiter is woken to look again (releases may have
//! been missed), the task reconnects and listens on every channel again; while it cannot,
//! watches are polling ones.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::poll_fn;
use lock_core::{Error, ReleaseHub, ReleaseWatch, Result};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{AsyncMessage, Client, Config, NoTls};

use crate::error::classify;

enum Command {
    Listen(String, u64, oneshot::Sender<Result<()>>),
    Unlisten(String, u64),
}

/// The notification side of one backend.
pub(crate) struct Listener {
    hub: ReleaseHub,
    commands: mpsc::UnboundedSender<Command>,
    /// Set while the connection is down: watches poll.
    down: Arc<AtomicBool>,
    poll_interval: Duration,
}

impl Listener {
    /// Starts the task (it connects at the first watch).
    pub(crate) fn start(config: Config, poll_interval: Duration) -> Self {
        let (commands, receiver) = mpsc::unbounded_channel();
        // Weak: the hub lives in the task too, and the task ends (closing its connection) when
        // the backend drops the one strong sender.
        let idle = commands.downgrade();
        let hub = ReleaseHub::with_idle_hook(move |channel, topic| {
            if let Some(idle) = idle.upgrade() {
                let _ = idle.send(Command::Unlisten(channel.to_owned(), topic));
            }
        });
        let down = Arc::new(AtomicBool::new(false));
        tokio::spawn(run(config, receiver, hub.clone(), Arc::clone(&down)));
        Listener {
            hub,
            commands,
            down,
            poll_interval,
        }
    }

    /// A watch on `channel`, listening once this returns; while the listening connection is
    /// down, a watch that polls for now (the waiter registers again at each look).
    pub(crate) async fn watch(&self, channel: &str) -> ReleaseWatch {
        if self.down.load(Ordering::Relaxed) {
            return self.hub.polling_for_now(self.poll_interval);
        }
        let watch = self.hub.watch(channel);
        let listened = watch
            .ensure_subscribed(|topic| async move {
                let (reply, answer) = oneshot::channel();
                self.commands
                    .send(Command::Listen(channel.to_owned(), topic, reply))
                    .map_err(|_| Error::ConnectionLost("the notification task ended".into()))?;
                answer
                    .await
                    .map_err(|_| Error::ConnectionLost("the notification task ended".into()))?
            })
            .await;
        match listened {
            Ok(()) if !self.down.load(Ordering::Relaxed) => watch,
            Ok(()) => self.hub.polling_for_now(self.poll_interval),
            Err(error) => {
                // Waiting still works without notifications, only slower.
                tracing::warn!(%error, channel, "could not listen for release notifications; polling");
                self.hub.polling_for_now(self.poll_interval)
            }
        }
    }
}

/// The channels listened on, each with the topics that asked for it.
#[derive(Default)]
struct Channels(HashMap<String, HashSet<u64>>);

async fn run(
    config: Config,
    mut commands: mpsc::UnboundedReceiver<Command>,
    hub: ReleaseHub,
    down: Arc<AtomicBool>,
) {
    let mut channels = Channels::default();
    let mut backoff = Duration::from_millis(50);
    loop {
        // Connect, and listen on every channel a live watch asked for.
        let connected = connect(&config, &hub, &channels).await;
        let (client, mut lost) = match connected {
            Ok(connected) => {
                down.store(false, Ordering::Relaxed);
                backoff = Duration::from_millis(50);
                // Releases may have gone by while nobody listened; waits that poll meanwhile
                // register again.
                hub.notifications_back();
                connected
            }
            Err(error) => {
                down.store(true, Ordering::Relaxed);
                tracing::warn!(%error, "cannot connect for release notifications; waiters poll");
                hub.wake_all();
                // Answer what asked meanwhile, then try again.
                let retry = tokio::time::sleep(backoff);
                tokio::pin!(retry);
                loop {
                    tokio::select! {
                        () = &mut retry => break,
                        command = commands.recv() => match command {
                            None => return,
                            Some(Command::Listen(channel, topic, reply)) => {
                                channels.0.entry(channel).or_default().insert(topic);
                                let _ = reply.send(Err(Error::ConnectionLost(
                                    "no connection for release notifications".into(),
                                )));
                            }
                            Some(Command::Unlisten(channel, topic)) => {
                                channels.forget(&channel, topic);
                            }
                        },
                    }
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        loop {
            tokio::select! {
                _ = lost.recv() => break,
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Listen(channel, topic, reply)) => {
                        let first = !channels.0.contains_key(&channel);
                        channels.0.entry(channel.clone()).or_default().insert(topic);
                        let answer = if first { listen(&client, "LISTEN", &channel).await } else { Ok(()) };
                        let failed = answer.is_err();
                        let _ = reply.send(answer);
                        if failed {
                            break;
                        }
                    }
                    Some(Command::Unlisten(channel, topic)) => {
                        if channels.forget(&channel, topic) && listen(&client, "UNLISTEN", &channel).await.is_err() {
                            break;
                        }
                    }
                },
            }
        }
        down.store(true, Ordering::Relaxed);
        crate::telemetry::listen_lost();
        hub.wake_all();
    }
}

impl Channels {
    /// Forgets `topic` on `channel`; whether nobody wants the channel any more.
    fn forget(&mut self, channel: &str, topic: u64) -> bool {
        let Some(topics) = self.0.get_mut(channel) else {
            return false;
        };
        if !topics.remove(&topic) || !topics.is_empty() {
            return false;
        }
        self.0.remove(channel);
        true
    }
}

/// A new listening connection with every channel of `channels` listened on, and a receiver
/// that yields when the connection ends.
async fn connect(
    config: &Config,
    hub: &ReleaseHub,
    channels: &Channels,
) -> Result<(Client, mpsc::Receiver<()>)> {
    let (client, mut connection) = config.connect(NoTls).await.map_err(classify)?;
    let (lost_sender, lost) = mpsc::channel(1);
    let hub = hub.clone();
    tokio::spawn(async move {
        loop {
            match poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(notification))) => {
                    deliver(&hub, notification.channel(), notification.payload());
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => {
                    tracing::debug!(%error, "the notification connection failed");
                    break;
                }
                None => break,
            }
        }
        let _ = lost_sender.send(()).await;
    });
    for channel in channels.0.keys() {
        listen(&client, "LISTEN", channel).await?;
    }
    Ok((client, lost))
}

/// Hands a notification to the hub by its payload: `all` (a latch opened, a read-write lock's
/// readers let in, a leader changed) wakes every waiter on the channel; a count (a semaphore's
/// announcement) up to that many; anything else (a release: an empty payload) one.
fn deliver(hub: &ReleaseHub, channel: &str, payload: &str) {
    match payload {
        "all" => hub.wake_watchers(channel),
        _ => match payload.parse::<i64>() {
            Ok(count) => hub.notify_up_to(channel, count),
            Err(_) => hub.notify_released(channel),
        },
    }
}

/// `LISTEN` or `UNLISTEN` on `channel` (a quoted identifier: the channel is hex after a fixed
/// prefix, so it needs no escaping).
async fn listen(client: &Client, verb: &str, channel: &str) -> Result<()> {
    client
        .batch_execute(&format!("{verb} \"{channel}\""))
        .await
        .map_err(classify)
}

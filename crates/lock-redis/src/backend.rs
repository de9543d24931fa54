//! The single-node Redis / Valkey backend.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Error, Grant, LockBackend, LockState, ReleaseOutcome,
    ReleaseWatch, RenewOutcome, Renewal, Result,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script, ScriptInvocation};

use crate::errors::map_error;
use crate::keys;
use crate::pubsub::Notifications;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));
/// Sent whole with `EVAL`, not by hash: it is the cleanup after an acquire of unknown outcome,
/// and must apply in one request even when the script cache is empty and the reply is lost
/// (an `EVALSHA` would then fail with `NOSCRIPT` unseen and nothing would be undone).
const ABANDON_SOURCE: &str = include_str!("scripts/abandon.lua");
static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/force_release.lua")));
static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/inspect.lua")));

/// Renewals are sent in scripts of at most this many keys, so one huge batch never blocks the
/// server for long; the chunks go out concurrently on the multiplexed connection.
const RENEW_CHUNK: usize = 256;

/// Default per-call timeout, as Redisson's default `timeout`.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(3);
/// Default limit for making the first connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default re-check interval when release notifications are unavailable.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How waiters learn that a lock was released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotificationMode {
    /// Pub/sub on a shared RESP3 connection (falls back to polling if the server has no RESP3).
    PubSub,
    /// Re-check about this often (with jitter), capped by the holder's remaining lease.
    Polling(Duration),
}

/// Builds a [`RedisBackend`].
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use lock_redis::RedisBackend;
///
/// # async fn demo() -> Result<(), lock_core::Error> {
/// let backend = RedisBackend::builder("redis://:secret@127.0.0.1:6379/0")
///     .command_timeout(Duration::from_millis(500))
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisBackendBuilder {
    url: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    notifications: NotificationMode,
}

impl RedisBackendBuilder {
    /// The timeout of each call to the server (capped at half the lease for calls that set one).
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// The limit for making the first connection.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How waiters learn about releases.
    #[must_use]
    pub fn notifications(mut self, mode: NotificationMode) -> Self {
        self.notifications = mode;
        self
    }

    /// Checks the configuration, connects, and returns the backend.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a bad URL or timeout (before any I/O);
    /// [`Error::NotPermitted`] for bad credentials; [`Error::ConnectionLost`] or
    /// [`Error::Timeout`] when the server cannot be reached.
    pub async fn connect(self) -> Result<RedisBackend> {
        for (what, value) in [
            ("command timeout", self.command_timeout),
            ("connect timeout", self.connect_timeout),
        ] {
            if value < Duration::from_millis(1) || value > Duration::from_secs(3600) {
                return Err(Error::InvalidConfig {
                    reason: format!("{what} {value:?} is outside 1 ms ..= 1 h"),
                });
            }
        }
        if let NotificationMode::Polling(every) = self.notifications
            && (every < Duration::from_millis(1) || every > Duration::from_secs(3600))
        {
            return Err(Error::InvalidConfig {
                reason: format!("poll interval {every:?} is outside 1 ms ..= 1 h"),
            });
        }
        let client =
            redis::Client::open(self.url.as_str()).map_err(|error| Error::InvalidConfig {
                reason: format!("bad Redis URL: {error}"),
            })?;
        // No response timeout here: every call has its own (see `call_timeout`), and one timer
        // per call is enough on the hot path.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None)
            .set_number_of_retries(2);
        let manager = tokio::time::timeout(
            self.connect_timeout,
            ConnectionManager::new_with_config(client.clone(), config),
        )
        .await
        .map_err(|_| Error::Timeout {
            after: self.connect_timeout,
        })?
        .map_err(|error| map_error(&error, self.connect_timeout))?;
        preload_scripts(&manager, self.connect_timeout).await;
        let notifications = match self.notifications {
            NotificationMode::Polling(every) => Notifications::polling(every),
            NotificationMode::PubSub => {
                Notifications::pubsub(&client, self.command_timeout, DEFAULT_POLL_INTERVAL)
            }
        };
        Ok(RedisBackend {
            inner: Arc::new(Inner {
                client_id: lock_core::new_client_id(),
                connection: manager,
                command_timeout: self.command_timeout,
                notifications,
            }),
        })
    }
}

struct Inner {
    client_id: String,
    connection: ConnectionManager,
    command_timeout: Duration,
    notifications: Notifications,
}

/// A lock store on one Redis or Valkey node, with Redisson's `RLock` layout.
///
/// Cheap to clone; clones share connections and the client id. Each `RedisBackend::connect`
/// makes a new client id (a UUID v4), like a separate process.
///
/// # Example
///
/// ```no_run
/// use lock_core::Locker;
/// use lock_redis::RedisBackend;
///
/// # async fn demo() -> Result<(), lock_core::Error> {
/// let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
/// let guard = locker.lock("orders:42").await?;
/// // ... critical section ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("client_id", &self.inner.client_id)
            .field("command_timeout", &self.inner.command_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// A builder for a backend at `url` (`redis://[user:password@]host:port[/db]`, or `rediss://`
    /// with a TLS feature).
    #[must_use]
    pub fn builder(url: impl Into<String>) -> RedisBackendBuilder {
        RedisBackendBuilder {
            url: url.into(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            notifications: NotificationMode::PubSub,
        }
    }

    /// Connects with the default settings.
    ///
    /// # Errors
    ///
    /// As [`RedisBackendBuilder::connect`].
    pub async fn connect(url: impl Into<String>) -> Result<RedisBackend> {
        Self::builder(url).connect().await
    }

    /// How many lock names have local waiters subscribed to their release channel.
    #[must_use]
    pub fn watched_locks(&self) -> usize {
        self.inner.notifications.watched_channels()
    }

    /// The timeout for a call that sets `lease`: the command timeout, but never more than half
    /// the lease (an answer after that is of little use).
    fn call_timeout(&self, lease: Option<Duration>) -> Duration {
        match lease {
            Some(lease) => self.inner.command_timeout.min(lease / 2),
            None => self.inner.command_timeout,
        }
    }

    /// Runs one plain command with the same timeout handling as [`Self::invoke`]. It goes out on
    /// the one multiplexed connection, so it runs after every request sent before it (the
    /// cleanup after a timeout must not overtake the request it undoes).
    async fn query<T: FromRedisValue>(&self, command: &redis::Cmd, timeout: Duration) -> Result<T> {
        let mut connection = self.inner.connection.clone();
        match tokio::time::timeout(timeout, command.query_async(&mut connection)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(map_error(&error, timeout)),
            Err(_) => Err(Error::Timeout { after: timeout }),
        }
    }

    async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<T> {
        let mut connection = self.inner.connection.clone();
        match tokio::time::timeout(timeout, invocation.invoke_async(&mut connection)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(map_error(&error, timeout)),
            Err(_) => Err(Error::Timeout { after: timeout }),
        }
    }
}

/// Loads every script into the server's cache up front, so a call whose reply is lost has still
/// run (an `EVALSHA` of an unknown script would fail unseen instead). After a `SCRIPT FLUSH` the
/// first call of each script reloads it as usual. Best effort: a user without `SCRIPT LOAD`
/// rights still works, loading scripts through `EVAL` on first use.
async fn preload_scripts(manager: &ConnectionManager, timeout: Duration) {
    let mut connection = manager.clone();
    let load = async {
        for script in [&ACQUIRE, &RELEASE, &RENEW, &FORCE_RELEASE, &INSPECT] {
            script.load_async(&mut connection).await?;
        }
        Ok::<(), redis::RedisError>(())
    };
    match tokio::time::timeout(timeout, load).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::debug!(%error, "could not preload the lock scripts"),
        Err(_) => tracing::debug!("preloading the lock scripts timed out"),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

fn count(value: i64) -> Result<u32> {
    u32::try_from(value).map_err(|_| Error::Protocol(format!("hold count {value} out of range")))
}

impl LockBackend for RedisBackend {
    fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    fn check_name(&self, name: &str) -> Result<()> {
        keys::check_name(name)
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation
            .key(request.name)
            .key(keys::token_key(request.name))
            .arg(millis(request.lease))
            .arg(request.owner)
            .arg(if request.fencing { "1" } else { "0" });
        let reply: Vec<i64> = self
            .invoke(&invocation, self.call_timeout(Some(request.lease)))
            .await?;
        match reply.as_slice() {
            [1, hold_count, token] => Ok(AcquireOutcome::Acquired(Grant {
                hold_count: count(*hold_count)?,
                fencing_token: request.fencing.then(|| u64::try_from(*token).unwrap_or(0)),
            })),
            [0, pttl] => Ok(AcquireOutcome::Held {
                ttl: ttl_from_pttl(*pttl),
            }),
            other => Err(Error::Protocol(format!(
                "acquire script answered {other:?}"
            ))),
        }
    }

    async fn release(&self, name: &str, owner: &str, lease: Duration) -> Result<ReleaseOutcome> {
        let mut invocation = RELEASE.prepare_invoke();
        invocation
            .key(name)
            .arg(millis(lease))
            .arg(owner)
            .arg(keys::channel(name))
            .arg(keys::UNLOCK_MESSAGE);
        let reply: i64 = self.invoke(&invocation, self.call_timeout(None)).await?;
        Ok(match reply {
            -1 => ReleaseOutcome::NotHeld,
            0 => ReleaseOutcome::Released,
            remaining => ReleaseOutcome::StillHeld {
                hold_count: count(remaining)?,
            },
        })
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        let chunks = renewals.chunks(RENEW_CHUNK).map(|chunk| async move {
            let mut invocation = RENEW.prepare_invoke();
            for renewal in chunk {
                invocation
                    .key(renewal.name)
                    .arg(renewal.owner)
                    .arg(millis(renewal.lease));
            }
            let reply: Vec<i64> = self.invoke(&invocation, self.call_timeout(None)).await?;
            if reply.len() != chunk.len() {
                return Err(Error::Protocol(format!(
                    "renew script answered {} results for {} keys",
                    reply.len(),
                    chunk.len()
                )));
            }
            Ok(reply
                .into_iter()
                .map(|renewed| RenewOutcome::from_held(renewed == 1))
                .collect::<Vec<_>>())
        });
        let answers = futures_util::future::try_join_all(chunks).await?;
        Ok(answers.into_iter().flatten().collect())
    }

    async fn abandon(&self, name: &str, owner: &str, keep: u32) -> Result<()> {
        let mut eval = redis::cmd("EVAL");
        eval.arg(ABANDON_SOURCE)
            .arg(1)
            .arg(name)
            .arg(owner)
            .arg(keep)
            .arg(keys::channel(name))
            .arg(keys::UNLOCK_MESSAGE);
        let _changed: i64 = self.query(&eval, self.call_timeout(None)).await?;
        Ok(())
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let mut invocation = FORCE_RELEASE.prepare_invoke();
        invocation
            .key(name)
            .arg(keys::channel(name))
            .arg(keys::UNLOCK_MESSAGE);
        let existed: i64 = self.invoke(&invocation, self.call_timeout(None)).await?;
        Ok(existed == 1)
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        let mut invocation = INSPECT.prepare_invoke();
        invocation.key(name);
        let (flat, pttl): (Vec<String>, i64) =
            self.invoke(&invocation, self.call_timeout(None)).await?;
        let mut holders = Vec::with_capacity(flat.len() / 2);
        for pair in flat.chunks_exact(2) {
            let held: u32 = pair[1].parse().map_err(|_| {
                Error::Protocol(format!("hold count {:?} is not a number", pair[1]))
            })?;
            holders.push((pair[0].clone(), held));
        }
        holders.sort();
        let ttl = if holders.is_empty() {
            None
        } else {
            ttl_from_pttl(pttl)
        };
        Ok(LockState::new(holders, ttl))
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        self.inner.notifications.watch(&keys::channel(name)).await
    }
}

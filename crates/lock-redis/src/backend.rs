//! The single-node Redis / Valkey backend.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Error, Grant, LockBackend, LockState, ReleaseOutcome,
    ReleaseWatch, RenewOutcome, Renewal, Result,
};
use redis::aio::MultiplexedConnection;
use redis::{Cmd, FromRedisValue, Pipeline, Script, ServerErrorKind, Value};

use crate::coalesce::{Coalescer, Turn};
use crate::errors::map_error;
use crate::fast;
use crate::keys;
use crate::link::{self, Alignment, Cleanup, Link, Links};
use crate::pubsub::Notifications;

/// One lock script: sent by hash (`EVALSHA`), or whole (`EVAL`) when the server does not have
/// it cached, or always whole for the cleanup script (see [`ABANDON`]).
pub(crate) struct LockScript {
    script: Script,
    source: &'static str,
    always_whole: bool,
}

impl LockScript {
    /// One call of the script: `EVAL <source>` when `whole`, else `EVALSHA <hash>`, then the
    /// number of keys, what `fill` adds (keys, then arguments), and the request id last.
    pub(crate) fn command(
        &self,
        whole: bool,
        keys: usize,
        fill: impl FnOnce(&mut Cmd),
        request_id: u64,
    ) -> Cmd {
        let mut command = if whole {
            let mut eval = redis::cmd("EVAL");
            eval.arg(self.source);
            eval
        } else {
            let mut evalsha = redis::cmd("EVALSHA");
            evalsha.arg(self.script.get_hash());
            evalsha
        };
        command.arg(keys);
        fill(&mut command);
        command.arg(request_id);
        command
    }

    pub(crate) fn new(source: &'static str) -> Self {
        LockScript {
            script: Script::new(source),
            source,
            always_whole: false,
        }
    }
}

static ACQUIRE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("scripts/acquire.lua")));
static RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("scripts/release.lua")));
static RENEW: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("scripts/renew.lua")));
/// Sent whole with `EVAL`, not by hash: it is the cleanup after a call of unknown outcome, and
/// should apply in one request even when the script cache is empty.
static ABANDON: LazyLock<LockScript> = LazyLock::new(|| LockScript {
    always_whole: true,
    ..LockScript::new(include_str!("scripts/abandon.lua"))
});
static FORCE_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("scripts/force_release.lua")));
static INSPECT: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("scripts/inspect.lua")));

/// Every script sent by hash, loaded on each new connection.
fn preloaded() -> [&'static LockScript; 10] {
    [
        &ACQUIRE,
        &RELEASE,
        &RENEW,
        &FORCE_RELEASE,
        &INSPECT,
        &fast::ACQUIRE_FENCED,
        &fast::RELEASE,
        &fast::RENEW,
        &fast::FORCE_RELEASE,
        &fast::INSPECT,
    ]
}

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
    kind: LockKind,
}

/// Which lock the backend keeps on the server.
///
/// # Example
///
/// ```no_run
/// use lock_redis::{LockKind, RedisBackend};
///
/// # async fn demo() -> Result<(), lock_core::Error> {
/// let fast = RedisBackend::builder("redis://127.0.0.1:6379/")
///     .lock_kind(LockKind::Fast)
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// Redisson's `RLock`: a hash `{owner → hold count}`, reentrant, shared with Java services
    /// that use Redisson on the same names. Every call is one Lua script.
    #[default]
    Reentrant,
    /// A plain string key holding the owner, taken with `SET NX PX` and given back by
    /// compare-and-delete (`DELIFEQ` on Valkey 9, `DELEX … IFEQ` on Redis 8.4, a Lua script on
    /// older servers). Not reentrant: a second `lock` by the same owner is refused with
    /// [`Error::NotReentrant`] before any I/O. Same guard, watchdog, waiter, release channel
    /// and fencing tokens (asking for a token makes the acquire a script). Cheaper for the
    /// server than a hash script; not understood by Redisson's `RLock`.
    Fast,
}

impl RedisBackendBuilder {
    /// Which lock to keep: [`LockKind::Reentrant`] (the default) or [`LockKind::Fast`].
    #[must_use]
    pub fn lock_kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

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
        let links =
            Links::connect(client.clone(), self.connect_timeout, self.command_timeout).await?;
        let native_delete = match self.kind {
            LockKind::Fast => fast::NativeDelete::detect(&links, self.connect_timeout).await,
            LockKind::Reentrant => fast::NativeDelete::None,
        };
        let notifications = match self.notifications {
            NotificationMode::Polling(every) => Notifications::polling(every),
            NotificationMode::PubSub => {
                Notifications::pubsub(&client, self.command_timeout, DEFAULT_POLL_INTERVAL)
            }
        };
        Ok(RedisBackend {
            inner: Arc::new(Inner {
                client_id: lock_core::new_client_id(),
                links,
                command_timeout: self.command_timeout,
                notifications,
                kind: self.kind,
                native_delete,
                coalescer: Coalescer::default(),
            }),
        })
    }
}

struct Inner {
    client_id: String,
    links: Links,
    command_timeout: Duration,
    notifications: Notifications,
    kind: LockKind,
    /// How the fast lock is given back on this server.
    native_delete: fast::NativeDelete,
    /// Lock and unlock calls made at the same moment share pipelines.
    coalescer: Coalescer,
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
            .field("kind", &self.inner.kind)
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
            kind: LockKind::Reentrant,
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

    /// Which lock this backend keeps.
    #[must_use]
    pub fn lock_kind(&self) -> LockKind {
        self.inner.kind
    }

    pub(crate) fn native_delete(&self) -> fast::NativeDelete {
        self.inner.native_delete
    }

    pub(crate) fn links(&self) -> &Links {
        &self.inner.links
    }

    pub(crate) fn coalescer(&self) -> &Coalescer {
        &self.inner.coalescer
    }

    /// The timeout for a call that sets `lease`: the command timeout, but never more than half
    /// the lease (an answer after that is of little use).
    pub(crate) fn call_timeout(&self, lease: Option<Duration>) -> Duration {
        match lease {
            Some(lease) => self.inner.command_timeout.min(lease / 2),
            None => self.inner.command_timeout,
        }
    }

    /// Runs one lock script and decodes its reply (after the echoed request id) as `T`.
    ///
    /// `fill` adds the keys (`keys` of them) and arguments; the request id goes last. A timeout
    /// or a reply out of step discards the connection (see [`crate::link`]); an error reply is
    /// trusted only once the connection is shown to be in step.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        script: &LockScript,
        keys: usize,
        timeout: Duration,
        fill: impl Fn(&mut Cmd),
    ) -> Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        let timed_out = || Error::Timeout { after: timeout };
        let links = &self.inner.links;
        let link = self.link_by(deadline, timeout).await?;
        match tokio::time::timeout_at(deadline, self.exchange(&link, script, keys, &fill)).await {
            Ok(reply) => reply.and_then(|items| {
                T::from_redis_value(Value::Array(items)).map_err(|error| {
                    Error::Protocol(format!("unexpected lock script reply: {error}"))
                })
            }),
            Err(_) => {
                links.discard(&link, "call timed out");
                Err(timed_out())
            }
        }
    }

    /// Sends `commands` as one pipeline and returns the replies cut into groups of `counts`
    /// (error replies included as `Value::ServerError`): the pipeline of several coalesced
    /// calls.
    pub(crate) async fn pipeline_of(
        &self,
        commands: Vec<Cmd>,
        counts: &[usize],
        timeout: Duration,
    ) -> Result<Vec<Vec<Value>>> {
        let mut pipeline = redis::pipe();
        for command in commands {
            pipeline.add_command(command);
        }
        let mut replies = self.send_pipeline(pipeline, timeout).await?.into_iter();
        Ok(counts
            .iter()
            .map(|&count| replies.by_ref().take(count).collect())
            .collect())
    }

    /// Sends `pipeline` followed by a `PING` with a fresh request id (answered with that id), and returns the replies
    /// before the echo, error replies included. Timeouts and replies out of step are handled as
    /// in [`Self::run`]; an error reply is trusted at once, since the echo after it came back in
    /// step.
    async fn send_pipeline(&self, mut pipeline: Pipeline, timeout: Duration) -> Result<Vec<Value>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let links = &self.inner.links;
        let link = self.link_by(deadline, timeout).await?;
        let nonce = links.next_nonce();
        pipeline.cmd("PING").arg(nonce);
        let count = pipeline.len();
        let mut connection = link.connection();
        let sent = connection.send_packed_commands(&pipeline, 0, count);
        let mut replies = match tokio::time::timeout_at(deadline, sent).await {
            Ok(Ok(replies)) => replies,
            Ok(Err(error)) => {
                links.discard(&link, "connection error");
                return Err(map_error(&error, timeout));
            }
            Err(_) => {
                links.discard(&link, "call timed out");
                return Err(Error::Timeout { after: timeout });
            }
        };
        if replies.len() != count || !echoes(replies.last(), nonce) {
            links.discard(&link, "reply out of step");
            return Err(out_of_step());
        }
        replies.pop();
        Ok(replies)
    }

    /// Runs one lock script in a pipeline shared with concurrent calls (see [`crate::coalesce`])
    /// and decodes its reply (after the echoed request id) as `T`. The script's own request id
    /// is `0`: the `PING <id>` that ends the pipeline proves the reply is this call's.
    pub(crate) async fn run_coalesced<T: FromRedisValue>(
        &self,
        script: &LockScript,
        keys: usize,
        timeout: Duration,
        fill: impl Fn(&mut Cmd),
    ) -> Result<T> {
        let command = |whole: bool| script.command(whole, keys, &fill, 0);
        let answer = match self.take_turn(timeout, || vec![command(false)]) {
            // Alone: the script's own request id proves the reply, no `PING` needed.
            Turn::Alone(slot) => {
                let reply = self.run(script, keys, timeout, fill).await;
                drop(slot);
                return reply;
            }
            Turn::Queued(answer) => answer,
        };
        let mut reply = crate::coalesce::queued_reply(answer, timeout).await?;
        if let Some(Value::ServerError(error)) = reply.first()
            && error.kind() == Some(ServerErrorKind::NoScript)
        {
            // In step (the pipeline's echo said so): the script did not run; send it whole.
            reply = self.send_coalesced(vec![command(true)], timeout).await?;
        }
        match reply.pop() {
            Some(Value::Array(mut items)) if !items.is_empty() => {
                items.remove(0);
                T::from_redis_value(Value::Array(items)).map_err(|error| {
                    Error::Protocol(format!("unexpected lock script reply: {error}"))
                })
            }
            Some(Value::ServerError(error)) => Err(map_error(&error.into(), timeout)),
            other => Err(Error::Protocol(format!(
                "unexpected lock script reply: {other:?}"
            ))),
        }
    }

    /// The current link, waiting (until `deadline`) for a replacement if one is being made.
    async fn link_by(
        &self,
        deadline: tokio::time::Instant,
        timeout: Duration,
    ) -> Result<Arc<Link>> {
        let links = &self.inner.links;
        let link = match links.ready() {
            Some(link) => link,
            None => tokio::time::timeout_at(deadline, links.current())
                .await
                .map_err(|_| Error::Timeout { after: timeout })?,
        };
        if tokio::time::Instant::now() >= deadline {
            // Nothing sent: no reason to doubt the connection.
            return Err(Error::Timeout { after: timeout });
        }
        Ok(link)
    }

    /// One request and its reply on `link`: the reply items after the request id.
    async fn exchange(
        &self,
        link: &Arc<Link>,
        script: &LockScript,
        keys: usize,
        fill: &impl Fn(&mut Cmd),
    ) -> Result<Vec<Value>> {
        let links = &self.inner.links;
        let nonce = links.next_nonce();
        let command = |whole: bool| script.command(whole, keys, fill, nonce);
        let mut reply = link::send(links, link, &command(script.always_whole)).await?;
        if let Value::ServerError(error) = &reply
            && error.kind() == Some(ServerErrorKind::NoScript)
        {
            // Sending the script whole is safe only if this NOSCRIPT really was ours (the
            // request did not run); a reply out of step could belong to a request that did.
            match link::in_step(links, link).await {
                Alignment::Proven => {}
                Alignment::Broken => return Err(out_of_step()),
                Alignment::Refused(refusal) => return Err(unattributable(&refusal)),
            }
            reply = link::send(links, link, &command(true)).await?;
        }
        match reply {
            Value::Array(mut items) if echoes(items.first(), nonce) => {
                items.remove(0);
                Ok(items)
            }
            Value::ServerError(error) => match link::in_step(links, link).await {
                Alignment::Proven => Err(map_error(&error.into(), Duration::ZERO)),
                Alignment::Broken => Err(out_of_step()),
                // A busy or loading server refuses the PING as it refused the call: the same
                // refusal twice is the server's state, not a reply out of step.
                Alignment::Refused(refusal) if refusal.code() == error.code() => {
                    Err(map_error(&error.into(), Duration::ZERO))
                }
                Alignment::Refused(refusal) => Err(unattributable(&refusal)),
            },
            _ => {
                links.discard(link, "reply out of step");
                Err(out_of_step())
            }
        }
    }
}

/// The cleanup script as one `EVAL` (for replaying it on a new connection).
pub(crate) fn abandon_command(cleanup: &Cleanup, nonce: u64) -> Cmd {
    if cleanup.fast {
        return fast::release_command(cleanup, nonce);
    }
    let channel = keys::channel(&cleanup.name);
    ABANDON.command(
        true,
        1,
        |command| {
            abandon_arguments(
                command,
                &cleanup.name,
                &cleanup.owner,
                cleanup.keep,
                &channel,
            );
        },
        nonce,
    )
}

fn abandon_arguments(command: &mut Cmd, name: &str, owner: &str, keep: u32, channel: &str) {
    command
        .arg(name)
        .arg(owner)
        .arg(keep)
        .arg(channel)
        .arg(keys::UNLOCK_MESSAGE);
}

/// Reads an acquire script's reply (after the request id): `[1, hold count, token]` when
/// granted, `[0, pttl]` when held by someone else.
pub(crate) fn acquire_outcome(reply: &[i64], fencing: bool) -> Result<AcquireOutcome> {
    match reply {
        [1, hold_count, token] => Ok(AcquireOutcome::Acquired(Grant {
            hold_count: count(*hold_count)?,
            fencing_token: fencing.then(|| u64::try_from(*token).unwrap_or(0)),
        })),
        [0, pttl] => Ok(AcquireOutcome::Held {
            ttl: ttl_from_pttl(*pttl),
        }),
        other => Err(Error::Protocol(format!(
            "acquire script answered {other:?}"
        ))),
    }
}

/// Whether a script reply's first item is the request id `nonce`.
pub(crate) fn echoes(first: Option<&Value>, nonce: u64) -> bool {
    match first {
        Some(Value::BulkString(bytes)) => {
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                == Some(nonce)
        }
        _ => false,
    }
}

/// The error of a call whose error reply cannot be attributed: the check `PING` was refused
/// with another error. Ambiguous, since the call may have run; the connection is kept.
fn unattributable(refusal: &redis::ServerError) -> Error {
    Error::ConnectionLost(format!(
        "an error reply could not be attributed (the check PING was refused: {refusal:?})"
    ))
}

/// The error of a call whose reply cannot be told apart from another request's: it may or may
/// not have run (ambiguous), and the connection is being replaced.
fn out_of_step() -> Error {
    Error::ConnectionLost(
        "a reply was out of step with its request (a reply went missing); the command \
         connection is being replaced"
            .into(),
    )
}

/// Loads every script into the server's cache on a new connection, so that calls go out by
/// hash from the start. Best effort: a user without `SCRIPT LOAD` rights still works, sending
/// scripts whole on first use.
pub(crate) async fn preload_scripts(connection: &MultiplexedConnection) {
    // All at once: one round trip on the multiplexed connection.
    let loads = preloaded().map(|script| {
        let mut connection = connection.clone();
        async move { script.script.load_async(&mut connection).await }
    });
    for result in futures_util::future::join_all(loads).await {
        if let Err(error) = result {
            tracing::debug!(%error, "could not preload the lock scripts");
            return;
        }
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
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

    fn reentrant(&self) -> bool {
        self.inner.kind == LockKind::Reentrant
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        if self.inner.kind == LockKind::Fast {
            return fast::try_acquire(self, request).await;
        }
        let token_key = keys::token_key(request.name);
        let reply: Vec<i64> = self
            .run_coalesced(
                &ACQUIRE,
                2,
                self.call_timeout(Some(request.lease)),
                |command| {
                    command
                        .arg(request.name)
                        .arg(&token_key)
                        .arg(millis(request.lease))
                        .arg(request.owner)
                        .arg(if request.fencing { "1" } else { "0" });
                },
            )
            .await?;
        acquire_outcome(&reply, request.fencing)
    }

    async fn release(&self, name: &str, owner: &str, lease: Duration) -> Result<ReleaseOutcome> {
        if self.inner.kind == LockKind::Fast {
            return fast::release(self, name, owner).await;
        }
        let channel = keys::channel(name);
        let (reply,): (i64,) = self
            .run_coalesced(&RELEASE, 1, self.call_timeout(None), |command| {
                command
                    .arg(name)
                    .arg(millis(lease))
                    .arg(owner)
                    .arg(&channel)
                    .arg(keys::UNLOCK_MESSAGE);
            })
            .await?;
        Ok(match reply {
            -1 => ReleaseOutcome::NotHeld,
            0 => ReleaseOutcome::Released,
            remaining => ReleaseOutcome::StillHeld {
                hold_count: count(remaining)?,
            },
        })
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        let script: &LockScript = match self.inner.kind {
            LockKind::Fast => &fast::RENEW,
            LockKind::Reentrant => &RENEW,
        };
        let chunks = renewals.chunks(RENEW_CHUNK).map(|chunk| async move {
            let reply: Vec<i64> = self
                .run(script, chunk.len(), self.call_timeout(None), |command| {
                    for renewal in chunk {
                        command.arg(renewal.name);
                    }
                    for renewal in chunk {
                        command.arg(renewal.owner).arg(millis(renewal.lease));
                    }
                })
                .await?;
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
        if self.inner.kind == LockKind::Fast {
            return fast::abandon(self, name, owner, keep).await;
        }
        let channel = keys::channel(name);
        let abandoned: Result<(i64,)> = self
            .run(&ABANDON, 1, self.call_timeout(None), |command| {
                abandon_arguments(command, name, owner, keep, &channel);
            })
            .await;
        if let Err(error) = abandoned {
            let cleanup = Cleanup {
                name: name.to_owned(),
                owner: owner.to_owned(),
                keep,
                fast: false,
            };
            // Not sent, or sent on a connection now being replaced: it runs first on the new
            // one (see `Links::defer`), so it is done, not merely attempted.
            if error.is_ambiguous() && self.inner.links.defer(cleanup) {
                return Ok(());
            }
            return Err(error);
        }
        Ok(())
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let script: &LockScript = match self.inner.kind {
            LockKind::Fast => &fast::FORCE_RELEASE,
            LockKind::Reentrant => &FORCE_RELEASE,
        };
        let channel = keys::channel(name);
        let (existed,): (i64,) = self
            .run(script, 1, self.call_timeout(None), |command| {
                command.arg(name).arg(&channel).arg(keys::UNLOCK_MESSAGE);
            })
            .await?;
        Ok(existed == 1)
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        let script: &LockScript = match self.inner.kind {
            LockKind::Fast => &fast::INSPECT,
            LockKind::Reentrant => &INSPECT,
        };
        let (flat, pttl): (Vec<String>, i64) = self
            .run(script, 1, self.call_timeout(None), |command| {
                command.arg(name);
            })
            .await?;
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

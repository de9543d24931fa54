//! The standalone connection kind: one server, one multiplexed connection, and how it is
//! replaced when it can no longer be trusted.
//!
//! Every lock call goes out on one multiplexed connection, whose replies are matched to requests
//! by order. Two things can break that connection in ways redis-rs cannot see:
//!
//! - **A reply that never arrives** while the connection stays up (a middlebox or proxy eating
//!   bytes). From then on every reply is handed to the request *before* its own, so a caller
//!   could read another request's answer. The lock scripts echo a per-call id (a nonce) to
//!   catch this, and an error reply (which cannot carry the id) is only trusted after a `PING`
//!   with a fresh id comes back in step; plain commands are proven by a `PING` after them, or
//!   by having been alone on the connection (`crate::connection::ledger`). Once out of step, the
//!   connection is useless.
//! - **A timeout.** The server may be stalled, or the reply lost as above; the client cannot
//!   tell. The connection is replaced too, since a connection that is out of step times out
//!   every call when traffic is sequential.
//!
//! Replacing the connection has its own hazard: requests still queued on the old connection
//! (say, the cleanup of a timed-out acquire) could run on the server *after* newer requests on
//! the new one and undo them. So the replacement first **fences** the old connection: it asks
//! the server to kill the old client (`CLIENT KILL ID … ADDR …`, matched on both, so a restarted
//! server that reuses the id never loses an unrelated client), and publishes the new connection
//! only when that command has run. Whatever the old client had not run by then never runs. A
//! user without the right to `CLIENT INFO` / `CLIENT KILL` gets the replacement without the
//! fence (logged once per replacement); see `docs/design.md`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use lock_core::{Error, Result};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, Value};
use tokio::sync::{Notify, oneshot, watch};

use crate::connection::alignment::Alignment;
use crate::connection::deferred::{self, Deferred};
use crate::connection::ledger::{Entry, Ledger, Proof};
use crate::connection::manners::Manners;
use crate::connection::probe;
use crate::connection::reprobe::Reprobe;
use crate::connection::source::Source;
use crate::wire::capabilities::Capabilities;
use crate::wire::errors::{map_error, refused_for_now};
use crate::wire::reply;
use crate::wire::scripts;

/// How the server knows one of our connections: enough to kill exactly that client.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ServerClient {
    id: u64,
    addr: String,
}

/// One established command connection.
pub(crate) struct Link {
    connection: MultiplexedConnection,
    /// The requests out on this link, for proofs by solitude (see [`super::ledger`]).
    ledger: Ledger,
    /// The server's address (`host:port`), for the `node` field of spans.
    node: Arc<str>,
    /// `None` when the server would not say (no `CLIENT INFO` right, or a server before 6.2).
    identity: Option<ServerClient>,
    generation: u64,
}

impl Link {
    /// A handle to send requests on before the link is published (the fence, deferred
    /// cleanups): its ledger starts in doubt, so those need no entries.
    fn connection(&self) -> MultiplexedConnection {
        self.connection.clone()
    }

    /// A handle to send one request on the published link, with the request's entry in its
    /// ledger: settle it with [`Entry::answered`] once the replies are read.
    fn enter(&self) -> (MultiplexedConnection, Entry<'_>) {
        (self.connection.clone(), self.ledger.enter())
    }
}

/// What the current slot holds.
struct Current {
    /// `None` while a replacement is being made.
    link: Option<Arc<Link>>,
    generation: u64,
    /// Cleanups that failed while there was no link: replayed on the new link, in order, right
    /// after the fence and before anything else can use it.
    deferred: VecDeque<Kept>,
    /// Clients to kill before the next link is published: the discarded link, and any attempt
    /// link that sent cleanups and was then given up.
    fences: Vec<ServerClient>,
    /// The running replacement task, by number (0: none). Cleared when the task publishes a
    /// link or ends in any other way (a task dropped with its runtime is started again by the
    /// next caller); numbered so a task that ends late never clears a newer one's mark.
    replacer: u64,
    replacers_started: u64,
}

/// At most this many cleanups wait for a new connection; beyond it new ones are refused (their
/// callers keep owing them). Dropping one already accepted would break the promise made to its
/// caller.
const MAX_DEFERRED: usize = 10_000;

/// A cleanup waiting for the next link, and where the server's answer to it goes.
struct Kept {
    cleanup: Arc<dyn Deferred>,
    /// `Ok` once it ran, the refusal when the server will never run it.
    answered: oneshot::Sender<Result<()>>,
}

/// Why a new link was not published.
enum NotPublished {
    /// The server refused a deferred cleanup for now (loading, busy, ...): it stays first in
    /// line, and nothing of this backend is left in flight on the link (the refusal was its
    /// last answer), so the link needs no fence.
    RefusedForNow(Error),
    /// A fence or a replay failed or was cut short: requests may still be on their way on the
    /// link, which the next link fences.
    Broken(Error),
}

struct Shared {
    source: Source,
    config: AsyncConnectionConfig,
    manners: Manners,
    /// The capability probe's latest answers, asked again after each replacement.
    reprobe: Reprobe,
    /// The limit for connecting (and for each step of a re-probe).
    connect_timeout: Duration,
    /// The limit for one replacement attempt.
    attempt_timeout: Duration,
    current: Mutex<Current>,
    /// Bumped each time a new link is published, so callers waiting for one wake up.
    published: watch::Sender<u64>,
    /// A caller is waiting for a link: start the next attempt now rather than after the
    /// attempt interval (callers arrive at the application's pace, so this cannot spin).
    wanted: Notify,
    /// Ids for requests, echoed by the scripts. Starts at a random point below 2^32 (short ids
    /// are cheaper to format, send and compare), so two backends (or a restarted process) are
    /// unlikely to produce the same sequence.
    nonce: AtomicU64,
}

/// The command connection of one backend to one server, replaced (with a fence) on demand.
pub(crate) struct Standalone {
    shared: Arc<Shared>,
}

impl Standalone {
    /// Makes the first connection (no fence needed: nothing was sent before it).
    ///
    /// # Errors
    ///
    /// As for connecting: a connection error, a timeout, or refused credentials.
    /// `command_timeout` bounds each attempt to replace the connection later (twice that, at
    /// most `connect_timeout`): an attempt is a handful of round trips.
    pub(crate) async fn connect(
        source: Source,
        capabilities: &Capabilities,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Result<Standalone> {
        let manners = Manners::of(capabilities);
        // No response timeout in redis-rs: every call has its own, and a timed-out call
        // replaces the connection here.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None);
        let mut link = tokio::time::timeout(connect_timeout, establish(&source, &config, manners))
            .await
            .map_err(|_| Error::Timeout {
                after: connect_timeout,
            })??;
        link.generation = 1;
        let (published, _) = watch::channel(1);
        #[cfg(feature = "sentinel")]
        let sentinel = match &source {
            Source::Sentinel(service) => Some(service.clone()),
            Source::Fixed(_) => None,
        };
        let standalone = Standalone {
            shared: Arc::new(Shared {
                source,
                config,
                manners,
                reprobe: Reprobe::new(capabilities.clone()),
                connect_timeout,
                attempt_timeout: (command_timeout * 2).min(connect_timeout),
                current: Mutex::new(Current {
                    link: Some(Arc::new(link)),
                    generation: 1,
                    deferred: VecDeque::new(),
                    fences: Vec::new(),
                    replacer: 0,
                    replacers_started: 0,
                }),
                published,
                wanted: Notify::new(),
                nonce: AtomicU64::new(reply::request_id_start()),
            }),
        };
        #[cfg(feature = "sentinel")]
        if let Some(service) = sentinel {
            let shared = Arc::downgrade(&standalone.shared);
            super::sentinel_watch::follow_switches(
                service.sentinels,
                service.service,
                move |event| {
                    let Some(shared) = shared.upgrade() else {
                        return false;
                    };
                    if let Some(why) = event {
                        Standalone { shared }.discard_current(why);
                    }
                    true
                },
            );
        }
        Ok(standalone)
    }

    /// Discards the current link, if there is one (see [`Self::discard`]).
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    fn discard_current(&self, why: &str) {
        if let Some(link) = self.ready() {
            self.discard(&link, why);
        }
    }

    /// What the latest capability probe found (see [`Reprobe`]).
    pub(crate) fn latest_capabilities(&self) -> Capabilities {
        self.shared.reprobe.latest()
    }

    /// The command that echoes request id `id`.
    pub(crate) fn echo(&self, id: u64) -> Cmd {
        self.shared.manners.echo.command(id)
    }

    /// A fresh request id.
    pub(crate) fn next_nonce(&self) -> u64 {
        self.shared.nonce.fetch_add(1, Ordering::Relaxed)
    }

    /// The current link, waiting for a replacement to be published when one is being made.
    /// Never fails; callers bound it with their own timeout.
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
            self.shared.wanted.notify_one();
            // The sender lives in `shared`, which we hold: `changed` cannot fail.
            let _ = published.changed().await;
        }
    }

    /// Keeps `cleanup` for the next connection when there is none right now (the call failed
    /// because its connection is being replaced). Returns where the server's answer to it will
    /// come (`Ok` once it ran, the refusal if the server will never run it), or `None` when it
    /// was not kept: a link is up (the caller's own retry, the locker's debt, handles it in
    /// order with its next calls), or too many cleanups wait already.
    pub(crate) fn defer(
        &self,
        cleanup: Arc<dyn Deferred>,
    ) -> Option<oneshot::Receiver<Result<()>>> {
        let mut current = lock(&self.shared.current);
        if current.link.is_some() {
            return None;
        }
        if current.deferred.len() >= MAX_DEFERRED {
            tracing::warn!(
                name = %cleanup.route(),
                "too many cleanups wait for a connection; this one stays owed by its caller"
            );
            return None;
        }
        let (answered, answer) = oneshot::channel();
        current.deferred.push_back(Kept { cleanup, answered });
        Some(answer)
    }

    /// The current link without waiting, if there is one.
    pub(crate) fn ready(&self) -> Option<Arc<Link>> {
        lock(&self.shared.current).link.clone()
    }

    /// The address of the server the current link is connected to (behind Sentinels, the
    /// primary it found), if there is a link.
    pub(crate) fn node(&self) -> Option<Arc<str>> {
        lock(&self.shared.current)
            .link
            .as_ref()
            .map(|link| link.node.clone())
    }

    /// Reports that `link` cannot be trusted any more (out of step, timed out or dropped). The
    /// first report for a link starts its fenced replacement; later ones are ignored.
    pub(crate) fn discard(&self, link: &Arc<Link>, why: &str) {
        {
            let mut current = lock(&self.shared.current);
            if current.generation != link.generation || current.link.is_none() {
                return;
            }
            current.link = None;
            current.generation += 1;
            current.fences.extend(link.identity.clone());
        }
        tracing::debug!(
            why,
            generation = link.generation,
            "replacing the command connection"
        );
        self.ensure_replacing();
    }

    /// Starts the replacement task unless one runs (or a link is up).
    fn ensure_replacing(&self) {
        let number = {
            let mut current = lock(&self.shared.current);
            if current.link.is_some() || current.replacer != 0 {
                return;
            }
            current.replacers_started += 1;
            current.replacer = current.replacers_started;
            current.replacer
        };
        let flag = ReplacingFlag {
            shared: Arc::downgrade(&self.shared),
            number,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(replace(flag));
            }
            // No runtime: the next caller (which has one) starts it.
            Err(_) => drop(flag),
        }
    }

    /// Sends `command` on `link` and returns the raw reply; a transport error discards the link.
    ///
    /// Behind Sentinels, a `READONLY` answer (the server was demoted: the command did not run)
    /// discards the link and sends the command again on the next one, which goes to the primary
    /// the Sentinels name then; callers bound the whole call with their timeout.
    pub(crate) async fn send(&self, link: &Arc<Link>, command: &Cmd) -> Result<Value> {
        // The caller's link, until a demotion moves the command to a new one.
        let mut moved: Option<Arc<Link>> = None;
        loop {
            let link = moved.as_ref().unwrap_or(link);
            let sent = {
                let (mut connection, entry) = link.enter();
                let sent = connection.send_packed_command(command).await;
                if sent.is_ok() {
                    entry.answered(false);
                }
                sent
            };
            match sent {
                Ok(value) if self.demoted(link, std::slice::from_ref(&value)) => {
                    moved = Some(self.current().await);
                }
                Ok(value) => return Ok(value),
                Err(error) => {
                    self.discard(link, "connection error");
                    return Err(map_error(&error, Duration::ZERO));
                }
            }
        }
    }

    /// Whether `replies` say the server behind `link` is a replica now, while it should be the
    /// primary of a Sentinel service, and **none** of the requests ran: only then may they be
    /// sent again. The link is discarded whenever any reply says `READONLY` (its replacement
    /// looks the primary up again); when only some did (the demotion came in the middle of a
    /// pipeline), the replies go back as they are, the refused calls failing with `ReadOnly`.
    fn demoted(&self, link: &Arc<Link>, replies: &[Value]) -> bool {
        let read_only = |reply: &Value| {
            matches!(reply, Value::ServerError(error)
                if error.kind() == Some(redis::ServerErrorKind::ReadOnly))
        };
        if !self.shared.source.follows_primary() || !replies.iter().any(read_only) {
            return false;
        }
        self.discard(link, "the server is a replica now");
        replies.iter().all(read_only)
    }

    /// Sends `pipeline` on `link` and returns its replies, error replies included, proven to
    /// be its own; `None` when they are out of step (the caller discards the link). The proof
    /// is the link's solitude when the pipeline goes alone and `proof` allows it (see
    /// `connection::ledger`), else a `PING` with a fresh id after it; a lone pipeline that
    /// was overtaken is proven by a `PING` sent after its replies came back. A failure is the
    /// caller's to judge (it may be its own timeout's doing). Behind Sentinels, a pipeline
    /// whose every reply is `READONLY` (nothing ran) goes again on the next link, as in
    /// [`Self::send`].
    pub(crate) async fn send_proven(
        &self,
        link: &Arc<Link>,
        mut pipeline: Pipeline,
        proof: Proof,
    ) -> redis::RedisResult<Option<Vec<Value>>> {
        let count = pipeline.len();
        // Behind Sentinels only a pipeline whose every reply is `READONLY` goes again; one that
        // carried its `PING` never does (the `PING` is answered on a replica too), so only one
        // that went alone is resent, and on the new link (in doubt) it brings its `PING`.
        let mut echo: Option<u64> = None;
        let mut moved: Option<Arc<Link>> = None;
        loop {
            let link = moved.as_ref().unwrap_or(link);
            let (replies, proven) = {
                let (mut connection, entry) = link.enter();
                if echo.is_none() && (proof == Proof::Echo || !entry.alone()) {
                    let nonce = self.next_nonce();
                    pipeline.add_command(self.echo(nonce));
                    echo = Some(nonce);
                }
                let replies = connection
                    .send_packed_commands(&pipeline, 0, pipeline.len())
                    .await?;
                let echoed =
                    echo.is_some_and(|nonce| reply::ends_with_echo(&replies, count, nonce));
                let solitary = entry.answered(echoed) && replies.len() == count;
                (replies, echoed || solitary)
            };
            let in_step = match echo {
                None if !proven => {
                    // Overtaken: another request may have been written before this one, so
                    // a `PING` after its replies proves them (see `connection::ledger`).
                    replies.len() == count && matches!(self.in_step(link).await, Alignment::Proven)
                }
                _ => proven,
            };
            if !in_step {
                return Ok(None);
            }
            if !self.demoted(link, &replies) {
                let mut replies = replies;
                replies.truncate(count);
                return Ok(Some(replies));
            }
            moved = Some(self.current().await);
        }
    }

    /// Sends `command` on `link` outside the lock protocol: no proof, and a failure does not
    /// discard the link.
    pub(crate) async fn ask(&self, link: &Arc<Link>, command: &Cmd) -> redis::RedisResult<Value> {
        let (mut connection, entry) = link.enter();
        let reply = connection.send_packed_command(command).await?;
        entry.answered(false);
        Ok(reply)
    }

    /// Whether `link` is still in step: a `PING` with a fresh id must come back with that id.
    /// Used before trusting a reply that carries no id (an error reply). A link found out of step
    /// (or silent) is discarded.
    pub(crate) async fn in_step(&self, link: &Arc<Link>) -> Alignment {
        let nonce = self.next_nonce();
        let ping = self.shared.manners.echo.command(nonce);
        let (mut connection, entry) = link.enter();
        let reply = connection.send_packed_command(&ping).await.ok();
        let step = Alignment::of_ping(reply, nonce);
        // Only a reply read settles the entry (a broken one leaves its doubt); a proven one
        // ends any doubt before it.
        if matches!(step, Alignment::Broken) {
            self.discard(link, "out of step");
        } else {
            entry.answered(matches!(step, Alignment::Proven));
        }
        step
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these locks; recover the data if something ever did.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// At most this many connection attempts are in flight at once during a replacement (attempts
/// stuck on a fault stay in flight until their own timeout).
const MAX_ATTEMPTS: usize = 16;
/// The longest pause between the starts of two replacement attempts.
const MAX_ATTEMPT_INTERVAL: Duration = Duration::from_millis(200);
/// The shortest pause between the starts of two attempts, even when callers are waiting.
const MIN_ATTEMPT_INTERVAL: Duration = Duration::from_millis(5);

/// Clears `replacing` when the replacement task ends in any way, including being dropped with
/// its runtime before or while it runs, so that the next caller starts a new one.
struct ReplacingFlag {
    shared: Weak<Shared>,
    number: u64,
}

impl Drop for ReplacingFlag {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            let mut current = lock(&shared.current);
            if current.replacer == self.number {
                current.replacer = 0;
            }
        }
    }
}

/// Keeps trying to make the replacement link until it is published or the backend is dropped.
///
/// Attempts overlap: a new one starts every interval (5 ms, doubling up to 200 ms) even while
/// earlier ones hang, so an attempt stuck on a fault that has since cleared (a dropped reply, a
/// server that was paused) does not hold up recovery for a whole connect timeout. Only this
/// task fences, replays and publishes, one link at a time.
async fn replace(flag: ReplacingFlag) {
    let shared = flag.shared.clone();
    let mut attempts = FuturesUnordered::new();
    let mut interval = MIN_ATTEMPT_INTERVAL;
    let mut next_start = tokio::time::Instant::now();
    let mut last_start = next_start;
    // Until then waiting callers do not hurry the next attempt: the server refused a deferred
    // cleanup for now, and asking again at once would only be refused again.
    let mut hold_off = next_start;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if attempts.len() < MAX_ATTEMPTS && tokio::time::Instant::now() >= next_start {
            let (source, config) = (strong.source.clone(), strong.config.clone());
            let manners = strong.manners;
            let attempt_timeout = strong.attempt_timeout;
            attempts.push(async move {
                tokio::time::timeout(attempt_timeout, establish(&source, &config, manners))
                    .await
                    .unwrap_or(Err(Error::Timeout {
                        after: attempt_timeout,
                    }))
            });
            last_start = tokio::time::Instant::now();
            next_start = last_start + interval;
            interval = (interval * 2).min(MAX_ATTEMPT_INTERVAL);
        }
        let room = attempts.len() < MAX_ATTEMPTS;
        let wanted = async {
            strong.wanted.notified().await;
        };
        tokio::select! {
            Some(result) = attempts.next(), if !attempts.is_empty() => match result {
                Ok(mut link) => {
                    link.generation = lock(&strong.current).generation;
                    let link = Arc::new(link);
                    match tokio::time::timeout(strong.attempt_timeout, publish(&strong, &link)).await {
                        Ok(Ok(())) => {
                            reprobe_later(&strong);
                            return;
                        }
                        Ok(Err(NotPublished::RefusedForNow(error))) => {
                            // A later link asks again; this one has nothing left to fence.
                            tracing::debug!(%error, "a deferred cleanup was refused for now; retrying on another connection");
                            hold_off = tokio::time::Instant::now() + MAX_ATTEMPT_INTERVAL;
                            next_start = next_start.max(hold_off);
                            continue;
                        }
                        Ok(Err(NotPublished::Broken(error))) => tracing::debug!(%error, "could not fence or replay on a new connection; retrying"),
                        Err(_) => tracing::debug!("fencing or replaying on a new connection timed out; retrying"),
                    }
                    // This link may have sent cleanups that are still on their way: the next
                    // link fences it too.
                    lock(&strong.current).fences.extend(link.identity.clone());
                }
                Err(error) => {
                    tracing::debug!(%error, "could not replace the command connection; retrying");
                }
            },
            // Only while there is room for another attempt: with every slot taken, wait for one
            // to finish rather than spin.
            () = tokio::time::sleep_until(next_start), if room => {}
            () = wanted, if room => {
                next_start = next_start.min((last_start + MIN_ATTEMPT_INTERVAL).max(hold_off));
            }
        }
    }
}

/// Asks the server the capability probe again, in a task of its own (the new link is already
/// public: calls do not wait for it), unless one ran lately (see [`Reprobe`]).
fn reprobe_later(shared: &Arc<Shared>) {
    if !shared.reprobe.due() {
        return;
    }
    let (source, timeout) = (shared.source.clone(), shared.connect_timeout);
    let shared = Arc::downgrade(shared);
    tokio::spawn(async move {
        let found = match source.client().await {
            Ok(client) => probe::probe(&client, timeout).await,
            Err(error) => Err(map_error(&error, timeout)),
        };
        match (found, shared.upgrade()) {
            (Ok(found), Some(shared)) => shared.reprobe.settle(found),
            (Err(error), Some(_)) => {
                tracing::debug!(%error, "the capability probe after a reconnect failed");
            }
            (_, None) => {}
        }
    });
}

/// Fences every client that may still run requests of this backend, replays the deferred
/// cleanups on the new `link`, then publishes it. A cleanup leaves the queue only once the
/// server has answered it, so one cut short (a timeout) is replayed on the next link (it is
/// idempotent), and so is one the server refused for now (loading its data, busy with a
/// script, ...): it stays first in line, and nothing is published before it ran. Only a
/// refusal that will not pass (a key of another kind, a missing right) drops it, and its
/// caller hears of it. Cleanups deferred meanwhile are replayed too: the link goes public only
/// once none is left, so every deferred cleanup runs before any new request.
///
/// # Errors
///
/// A transport error, a reply out of step or a fence that failed ([`NotPublished::Broken`]),
/// or a refusal for now ([`NotPublished::RefusedForNow`]); the caller tries again with another
/// link.
async fn publish(shared: &Shared, link: &Arc<Link>) -> std::result::Result<(), NotPublished> {
    let fences = lock(&shared.current).fences.clone();
    for old in &fences {
        fence(link, old).await.map_err(NotPublished::Broken)?;
    }
    loop {
        let next = {
            let mut current = lock(&shared.current);
            match current.deferred.front() {
                Some(kept) => kept.cleanup.clone(),
                None => {
                    current.link = Some(link.clone());
                    current.fences.clear();
                    // Done: a discard of this new link may start the next replacement at once.
                    current.replacer = 0;
                    let generation = link.generation;
                    drop(current);
                    shared
                        .published
                        .send_modify(|published| *published = generation);
                    return Ok(());
                }
            }
        };
        let nonce = shared.nonce.fetch_add(1, Ordering::Relaxed);
        let request = next.request(nonce);
        let mut connection = link.connection();
        let reply = connection
            .send_packed_commands(&request, 0, request.len())
            .await
            .map(|replies| deferred::answer(&request, replies, nonce));
        let answer = match reply {
            Ok(Some(Value::ServerError(error))) if passes(&error, &shared.source) => {
                return Err(NotPublished::RefusedForNow(map_error(
                    &error.into(),
                    Duration::ZERO,
                )));
            }
            // Refused for good (the key is of another kind, a missing right, ...): sent again
            // it would be refused again and hold up every call. Its caller hears of it.
            Ok(Some(Value::ServerError(error))) => {
                tracing::warn!(
                    ?error,
                    name = %next.route(),
                    "a deferred cleanup was refused; its hold ends with its lease"
                );
                Err(map_error(&error.into(), Duration::ZERO))
            }
            Ok(Some(_)) => Ok(()),
            Ok(None) => {
                return Err(NotPublished::Broken(Error::Protocol(
                    "a deferred cleanup's replies were out of step".into(),
                )));
            }
            Err(error) => return Err(NotPublished::Broken(map_error(&error, Duration::ZERO))),
        };
        // Only this task removes from the front, and `defer` only adds at the back.
        let kept = lock(&shared.current).deferred.pop_front();
        if let Some(kept) = kept {
            // Its caller may have stopped waiting: the answer is then nobody's.
            let _ = kept.answered.send(answer);
        }
    }
}

/// Whether a deferred cleanup's refusal passes, so that it is sent again rather than dropped:
/// [`refused_for_now`], the server out of memory for now, or behind Sentinels a demoted server
/// (the next link goes to the primary the Sentinels name then).
fn passes(error: &redis::ServerError, source: &Source) -> bool {
    let code = error.code();
    refused_for_now(Some(code)) || code == "OOM" || (code == "READONLY" && source.follows_primary())
}

/// Connects, learns how the server names this client, and loads the scripts (each as far as
/// `manners` allow).
async fn establish(
    source: &Source,
    config: &AsyncConnectionConfig,
    manners: Manners,
) -> Result<Link> {
    let client = source
        .client()
        .await
        .map_err(|error| map_error(&error, Duration::ZERO))?;
    let mut connection = client
        .get_multiplexed_async_connection_with_config(config)
        .await
        .map_err(|error| map_error(&error, Duration::ZERO))?;
    let node = client.get_connection_info().addr().to_string().into();
    let identity = if !manners.fence {
        None
    } else {
        match redis::cmd("CLIENT")
            .arg("INFO")
            .query_async::<String>(&mut connection)
            .await
        {
            Ok(info) => parse_client_info(&info),
            Err(error) if lacks_right(&error) => {
                tracing::warn!(%error, "CLIENT INFO refused; connection replacements will not be fenced");
                None
            }
            // Busy, loading, a broken connection: try again with another connection.
            Err(error) => return Err(map_error(&error, Duration::ZERO)),
        }
    };
    may_ping(&mut connection).await?;
    if manners.preload {
        preload_scripts(&connection).await;
    }
    Ok(Link {
        connection,
        ledger: Ledger::default(),
        node,
        identity,
        generation: 0,
    })
}

/// Refuses a user the ACL denies `PING`: calls prove their replies with `PING <id>` (every
/// pipeline ends with one, and an error reply is trusted only after one), so without it the
/// first shared pipeline would look out of step (`ConnectionLost`, the connection replaced
/// again and again) rather than say what is missing.
///
/// # Errors
///
/// [`Error::NotPermitted`] when the server refuses `PING` with `NOPERM`; the connection's
/// error when no answer comes at all. Any other error reply is left to the calls (a busy or
/// loading server refuses everything for a while).
async fn may_ping(connection: &mut MultiplexedConnection) -> Result<()> {
    match redis::cmd("PING").query_async::<Value>(connection).await {
        // No answer at all: the link is no good (it used to be found out by `CLIENT INFO`,
        // which a server the probe found without it is not asked).
        Err(error) if error.code().is_none() => Err(map_error(&error, Duration::ZERO)),
        Err(error) => refused_right(&error, "+ping").map_or(Ok(()), Err),
        Ok(_) => Ok(()),
    }
}

/// The error for a command the ACL refused (`NOPERM`), naming the `grant` it takes; `None`
/// for any other error.
pub(crate) fn refused_right(error: &redis::RedisError, grant: &str) -> Option<Error> {
    (error.code() == Some("NOPERM")).then(|| {
        Error::NotPermitted(lock_core::error::Cause::with_source(
            format!("{error} (distlock needs {grant}: see docs/deployments.md, \"ACL\")"),
            error.clone(),
        ))
    })
}

/// Loads every script into the server's cache on a new connection, so that calls go out by
/// hash from the start. Best effort: a user without `SCRIPT LOAD` rights still works, sending
/// scripts whole on first use.
async fn preload_scripts(connection: &MultiplexedConnection) {
    // All at once: one round trip on the multiplexed connection.
    let loads = scripts::preloaded().map(|script| {
        let mut connection = connection.clone();
        async move { script.script().load_async(&mut connection).await }
    });
    for result in futures_util::future::join_all(loads).await {
        if let Err(error) = result {
            tracing::debug!(%error, "could not preload the lock scripts");
            return;
        }
    }
}

/// Kills the old client on the server, so nothing it still has queued can run after requests
/// on the new link. Returns once the server has run the kill (or it could not be sent for a
/// reason that will not change, such as a missing right).
async fn fence(link: &Link, old: &ServerClient) -> Result<()> {
    let mut kill = redis::cmd("CLIENT");
    kill.arg("KILL")
        .arg("ID")
        .arg(old.id)
        .arg("ADDR")
        .arg(&old.addr);
    let mut connection = link.connection();
    match connection.send_packed_command(&kill).await {
        // 0 or 1 killed: either way the old client runs nothing more.
        Ok(Value::Int(_)) => Ok(()),
        Ok(Value::ServerError(error)) if lacks_right(&error.clone().into()) => {
            tracing::warn!(
                error = ?error,
                "could not fence the old command connection (CLIENT KILL refused); its queued \
                 requests may still run"
            );
            Ok(())
        }
        // Busy, loading, ...: the kill did not run; try again.
        Ok(Value::ServerError(error)) => Err(map_error(&error.into(), Duration::ZERO)),
        Ok(other) => Err(Error::Protocol(
            format!("CLIENT KILL answered {other:?}").into(),
        )),
        Err(error) => Err(map_error(&error, Duration::ZERO)),
    }
}

/// Whether the server refused a command for good: no right to it (ACL), or no such command.
fn lacks_right(error: &redis::RedisError) -> bool {
    error.code() == Some("NOPERM") || error.to_string().to_ascii_lowercase().contains("unknown")
}

/// Reads `id` and `addr` out of a `CLIENT INFO` line.
fn parse_client_info(info: &str) -> Option<ServerClient> {
    let mut id = None;
    let mut addr = None;
    for field in info.split_ascii_whitespace() {
        if let Some(value) = field.strip_prefix("id=") {
            id = value.parse().ok();
        } else if let Some(value) = field.strip_prefix("addr=") {
            addr = Some(value.to_owned());
        }
    }
    Some(ServerClient {
        id: id?,
        addr: addr?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_info_gives_id_and_address() {
        let line = "id=7 addr=127.0.0.1:52618 laddr=127.0.0.1:6379 fd=8 name= age=0 idle=0";
        assert_eq!(
            parse_client_info(line),
            Some(ServerClient {
                id: 7,
                addr: "127.0.0.1:52618".into()
            })
        );
        assert_eq!(parse_client_info("name=x"), None);
    }
}

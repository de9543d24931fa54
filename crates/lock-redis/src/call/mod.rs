//! Layer 3, the calls: one lock call, alone or coalesced with concurrent ones, within its
//! timeout, with its reply proven to be its own. Uses the connection and wire layers.

pub(crate) mod coalesce;

use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::future::Either;
use lock_core::{Error, Result};
use redis::{Cmd, FromRedisValue, Pipeline, ServerErrorKind, Value};

use self::coalesce::{Carrier, Coalescer, Turn, queued_reply, take_turn, take_turn_behind};
use crate::connection::alignment::Alignment;
use crate::connection::deferred::Deferred;
use crate::connection::{Connection, Link, Proof};
use crate::wire::announce::Announce;
use crate::wire::errors::map_error;
use crate::wire::lock_script::LockScript;
use crate::wire::replication::ReplicaAck;
use crate::wire::reply::{out_of_step, unattributable};

/// What the replicas said of a write: `None` when no acknowledgement is asked for
/// ([`Calls::replication`]), else how many acknowledged, or why the server refused to say.
pub(crate) type Acknowledged = Option<Result<u32>>;

/// How one backend makes its lock calls: the command connection, the queue that lets
/// concurrent calls share pipelines, and the command timeout.
pub(crate) struct Calls {
    connection: Connection,
    /// Lock and unlock calls made at the same moment share pipelines.
    coalescer: Coalescer,
    command_timeout: Duration,
    /// How releases are announced (plain, sharded or both kinds of pub/sub).
    announce: Announce,
    /// Whether writes wait for replicas, and how many.
    replication: Option<ReplicaAck>,
    /// With replicas to wait for on a connection that does not share pipelines (a cluster):
    /// one acknowledged write in flight at a time (see [`Calls::new`]).
    wait_gate: Option<tokio::sync::Semaphore>,
    /// Fencing counters are kept for good instead of expiring once the server's clock has
    /// passed their last token (see `docs/redis-layout.md`).
    keep_fencing_counters: bool,
    /// How scripts are sent, if at all.
    scripting: Scripting,
}

/// How a backend's scripts reach the server, as the capability probe found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Scripting {
    /// By hash (`EVALSHA`), sent whole once after a `NOSCRIPT`.
    ByHash,
    /// Always whole (`EVAL`): `EVALSHA` is refused (an ACL, a proxy) while `EVAL` runs.
    Whole,
    /// Not at all, with why (the probe's answers to `EVAL` and `EVALSHA`): a server that
    /// only keeps the fast lock, on its native commands. Every script call is refused before
    /// any I/O with these reasons.
    Never(Vec<String>),
}

impl Calls {
    pub(crate) fn new(
        connection: Connection,
        command_timeout: Duration,
        announce: Announce,
        replication: Option<ReplicaAck>,
        keep_fencing_counters: bool,
        scripting: Scripting,
    ) -> Self {
        // With replicas to wait for, one `WAIT` at a time: a `WAIT` holds its connection on the
        // server until it answers, so a call behind two of them could miss its deadline while
        // the replicas are short, and see a timeout instead of a shortfall. On one server the
        // queue is the gate, and calls arriving meanwhile go out together under the next `WAIT`
        // (a group commit); on a cluster, where each call is its own pipeline, a semaphore is.
        let coalescer = match (connection.coalesces(), replication.is_some()) {
            (false, _) => Coalescer::never(),
            (true, false) => Coalescer::default(),
            (true, true) => Coalescer::one_at_a_time(),
        };
        let wait_gate = (replication.is_some() && !connection.coalesces())
            .then(|| tokio::sync::Semaphore::new(1));
        Calls {
            connection,
            coalescer,
            command_timeout,
            announce,
            replication,
            wait_gate,
            keep_fencing_counters,
            scripting,
        }
    }

    /// Whether this server runs scripts (else only the fast lock works, on native commands).
    pub(crate) fn runs_scripts(&self) -> bool {
        !matches!(self.scripting, Scripting::Never(_))
    }

    /// Whether `script` goes out whole (`EVAL`) rather than by hash, even before a `NOSCRIPT`.
    fn whole(&self, script: &LockScript) -> bool {
        script.always_whole() || self.scripting == Scripting::Whole
    }

    /// Refuses a script call, before any I/O, on a server that runs none.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] naming what the probe found of `EVAL` and `EVALSHA`.
    fn scripts_run(&self) -> Result<()> {
        match &self.scripting {
            Scripting::ByHash | Scripting::Whole => Ok(()),
            Scripting::Never(missing) => Err(Error::Unsupported {
                needs: "a Lua script (every lock but the fast lock, fencing tokens and \
                        describe run one; see docs/deployments.md)"
                    .into(),
                missing: missing.clone(),
            }),
        }
    }

    /// The acquire scripts' fencing argument: `0` for no token, `1` for a token whose counter
    /// expires once the clock has passed it (and a lease more), `k` for one whose counter is
    /// kept.
    pub(crate) fn token_flag(&self, fencing: bool) -> &'static str {
        match (fencing, self.keep_fencing_counters) {
            (false, _) => "0",
            (true, false) => "1",
            (true, true) => "k",
        }
    }

    /// The replica acknowledgement asked after each write, if any.
    pub(crate) fn replication(&self) -> Option<&ReplicaAck> {
        self.replication.as_ref()
    }

    /// How releases are announced on the lock's channel.
    pub(crate) fn announce(&self) -> Announce {
        self.announce
    }

    /// The command connection (for deferring a cleanup, or a question about the server).
    pub(crate) fn connection(&self) -> &Connection {
        &self.connection
    }

    /// The timeout of each call to the server.
    pub(crate) fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// The timeout for a call that sets `lease`: the command timeout, but never more than half
    /// the lease (an answer after that is of little use).
    pub(crate) fn call_timeout(&self, lease: Option<Duration>) -> Duration {
        match lease {
            Some(lease) => self.command_timeout.min(lease / 2),
            None => self.command_timeout,
        }
    }

    /// Runs one lock script about the lock named `route` and decodes its reply (after the
    /// echoed request id) as `T`.
    ///
    /// `fill` adds the keys (`keys` of them) and arguments; the request id goes last. A timeout
    /// or a reply out of step discards the connection (see [`crate::connection`]); an error
    /// reply is trusted only once the connection is shown to be in step.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        route: &str,
        script: &LockScript,
        keys: usize,
        timeout: Duration,
        fill: impl Fn(&mut Cmd),
    ) -> Result<T> {
        let (reply, _) = self
            .run_alone(route, script, keys, timeout, &fill, false)
            .await?;
        Ok(reply)
    }

    /// [`Self::run`]; with `acked`, for a script that writes, and when writes wait for
    /// replicas ([`Self::replication`]), the acknowledgement is asked in the same pipeline, on
    /// the same connection, right after the script, and comes back beside its reply. Only one
    /// such call is out at a time: callers hold the queue's slot (one server), or wait for the
    /// gate here (a cluster; see [`Calls::new`]).
    ///
    /// One function for both, and the exchange picked here rather than by a step below: every
    /// layer is one more state and poll frame on every call (see `docs/performance.md`).
    async fn run_alone<T: FromRedisValue>(
        &self,
        route: &str,
        script: &LockScript,
        keys: usize,
        timeout: Duration,
        fill: &impl Fn(&mut Cmd),
        acked: bool,
    ) -> Result<(T, Acknowledged)> {
        self.scripts_run()?;
        let deadline = tokio::time::Instant::now() + timeout;
        let replication = self.replication.filter(|_| acked);
        let _turn = match (&self.wait_gate, replication) {
            // Nothing is sent while waiting here: a timeout leaves the connection trusted.
            (Some(gate), Some(_)) => Some(
                tokio::time::timeout_at(deadline, gate.acquire())
                    .await
                    .map_err(|_| Error::Timeout { after: timeout })?
                    .map_err(|_| Error::Unavailable("the backend is shutting down".into()))?,
            ),
            _ => None,
        };
        // The replicas' wait is capped by what is left of the call once its turn came.
        let wait = replication.map(|replication| {
            replication.command(deadline.saturating_duration_since(tokio::time::Instant::now()))
        });
        let then = wait.as_ref();
        let link = self.link_by(deadline, timeout).await?;
        let expiry = pin!(tokio::time::sleep_until(deadline));
        let exchange = pin!(if self.sends_request_id(script) {
            Either::Left(self.exchange(&link, route, script, keys, fill, then))
        } else {
            Either::Right(self.exchange_proven(&link, script, keys, fill, then))
        });
        let (items, after) = match by_deadline(expiry, exchange).await {
            Some(reply) => reply?,
            None => {
                self.connection.discard(&link, "call timed out");
                return Err(Error::Timeout { after: timeout });
            }
        };
        let acknowledged = replication.map(|replication| match after {
            Some(after) => replication.acknowledged(after),
            None => Err(out_of_step()),
        });
        Ok((decode(items)?, acknowledged))
    }

    /// Sends `commands` that write, as [`Self::send_coalesced`], and returns what the replicas
    /// said of them when they are asked ([`Self::replication`]).
    ///
    /// # Errors
    ///
    /// As [`Self::send_coalesced`].
    pub(crate) fn send_write(
        self: &Arc<Self>,
        commands: Vec<Cmd>,
        timeout: Duration,
    ) -> impl Future<Output = Result<(Vec<Value>, Acknowledged)>> + Send + '_ {
        // Not an `async fn`: a wrapper that only awaits would be one more state and poll frame
        // on every fast lock call.
        self.send_in_turn(commands, timeout, false, true)
    }

    /// Takes the acknowledgement's answer off the end of a call's replies from a shared
    /// pipeline, where [`Carrier::pipeline_of`] put it (only when replicas are asked).
    fn take_acknowledgement(&self, replies: &mut Vec<Value>) -> Acknowledged {
        let replication = self.replication.as_ref()?;
        Some(match replies.pop() {
            Some(reply) => replication.acknowledged(reply),
            None => Err(out_of_step()),
        })
    }

    /// Sends `pipeline` and returns its replies, error replies included, proven to be its own
    /// (by the link's solitude, or a `PING` with a fresh request id after it: see
    /// [`Connection::send_proven`]). Timeouts and replies out of step are handled as in
    /// [`Self::run`]; an error reply is trusted at once, since it was proven in step.
    async fn send_pipeline(
        &self,
        pipeline: Pipeline,
        proof: Proof,
        timeout: Duration,
    ) -> Result<Vec<Value>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let connection = &self.connection;
        let link = self.link_by(deadline, timeout).await?;
        let expiry = pin!(tokio::time::sleep_until(deadline));
        let sent = pin!(connection.send_proven(&link, pipeline, proof));
        match by_deadline(expiry, sent).await {
            Some(Ok(Some(replies))) => Ok(replies),
            Some(Ok(None)) => {
                connection.discard(&link, "reply out of step");
                Err(out_of_step())
            }
            Some(Err(error)) => {
                connection.discard(&link, "connection error");
                Err(map_error(&error, timeout))
            }
            None => {
                connection.discard(&link, "call timed out");
                Err(Error::Timeout { after: timeout })
            }
        }
    }

    /// Runs one lock script that writes, about the lock named `route`, in a pipeline shared
    /// with concurrent calls (see [`coalesce`]), and decodes its reply (after the echoed
    /// request id) as `T`; with replicas to wait for ([`Self::replication`]) the pipeline ends
    /// with the acknowledgement request, whose answer comes back with the reply. The
    /// script's own request id is `0`: the pipeline's proof (the `PING <id>` that ends it, or
    /// its solitude on the link) shows the reply is this call's.
    pub(crate) async fn run_write<T: FromRedisValue>(
        self: &Arc<Self>,
        route: &str,
        script: &LockScript,
        keys: usize,
        timeout: Duration,
        fill: impl Fn(&mut Cmd),
    ) -> Result<(T, Acknowledged)> {
        self.scripts_run()?;
        let command = |whole: bool| script.command(whole, keys, &fill, script.proven_id());
        let answer = match take_turn(self, timeout, || vec![command(self.whole(script))]) {
            // Alone: the script's own request id proves the reply, no `PING` needed.
            Turn::Alone(slot) => {
                let reply = self
                    .run_alone(route, script, keys, timeout, &fill, true)
                    .await;
                drop(slot);
                return reply;
            }
            Turn::Queued(answer) => answer,
        };
        let (reply, acknowledged) = self
            .queued_script(answer, || command(true), timeout)
            .await?;
        Ok((script_reply(script, reply, timeout)?, acknowledged))
    }

    /// The replies of a script call that was queued (`answer`), with what the pipeline's
    /// replica wait said; after a `NOSCRIPT` (in step: the pipeline's echo said so, the script
    /// did not run) the call `whole` makes is sent in its place.
    async fn queued_script(
        self: &Arc<Self>,
        answer: tokio::sync::oneshot::Receiver<Result<Vec<Value>>>,
        whole: impl FnOnce() -> Cmd,
        timeout: Duration,
    ) -> Result<(Vec<Value>, Acknowledged)> {
        let mut reply = queued_reply(answer, timeout).await?;
        let mut acknowledged = self.take_acknowledgement(&mut reply);
        if let Some(Value::ServerError(error)) = reply.first()
            && error.kind() == Some(ServerErrorKind::NoScript)
        {
            crate::telemetry::noscript_reload();
            (reply, acknowledged) = self.send_write(vec![whole()], timeout).await?;
        }
        Ok((reply, acknowledged))
    }

    /// Runs one lock script about the lock named `route`, as [`Self::run`], but written only
    /// after every pipeline already sent or being put together (see
    /// [`coalesce::take_turn_behind`]): for the cleanup that undoes a call whose caller went
    /// away, which must reach the server after that call. No replica acknowledgement is asked
    /// of it (queued, it may share a pipeline whose replica wait other calls asked for).
    /// `script` is sent whole when it is [`LockScript::always_whole`] (or every script is).
    pub(crate) async fn run_behind<T: FromRedisValue>(
        self: &Arc<Self>,
        route: &str,
        script: &LockScript,
        keys: usize,
        timeout: Duration,
        fill: impl Fn(&mut Cmd),
    ) -> Result<T> {
        self.scripts_run()?;
        if !self.connection.coalesces() {
            // No shared pipelines (a cluster): every call is written when it is made, so
            // the call being cleaned up after went out before this one; and queued cleanups
            // would share one pipeline across slots.
            return self.run(route, script, keys, timeout, fill).await;
        }
        let whole = self.whole(script);
        let command = |whole: bool| script.command(whole, keys, &fill, script.proven_id());
        let answer = match take_turn_behind(self, timeout, || vec![command(whole)]) {
            Turn::Alone(slot) => {
                let reply = self.run(route, script, keys, timeout, &fill).await;
                drop(slot);
                return reply;
            }
            Turn::Queued(answer) => answer,
        };
        // Queued, it shares a pipeline with other calls, which ends with their replicas' wait
        // when one is asked: that answer is theirs.
        let (reply, _theirs) = self
            .queued_script(answer, || command(true), timeout)
            .await?;
        script_reply(script, reply, timeout)
    }

    /// Sends `commands` as [`Self::send_coalesced`], but written only after every pipeline
    /// already sent or being put together, as [`Self::run_behind`] does for a script: for the
    /// cleanups made of plain commands (the fast lock's native compare-and-delete). Their
    /// replies come back in order, error replies included; no replica acknowledgement is
    /// asked, and when the call shares a pipeline that asked one, its answer is dropped.
    ///
    /// # Errors
    ///
    /// As [`Self::send_coalesced`].
    pub(crate) async fn send_behind(
        self: &Arc<Self>,
        commands: Vec<Cmd>,
        timeout: Duration,
    ) -> Result<Vec<Value>> {
        let count = commands.len();
        let (mut replies, _) = self.send_in_turn(commands, timeout, true, false).await?;
        replies.truncate(count);
        Ok(replies)
    }

    /// Settles a cleanup after a call of unknown outcome, once its own call (`run_behind`,
    /// started at `started`, within `timeout`) answered `sent`. When that outcome is unknown
    /// too and there is no connection right now (it is being replaced), the cleanup `deferred`
    /// makes is kept for the next connection, to run there before anything else (see
    /// [`Connection::defer`]), and its answer is awaited for what is left of `timeout`.
    ///
    /// A step apart from the call rather than a wrapper around it: callers' futures are nested
    /// deep enough already (the compiler's query depth limit).
    ///
    /// # Errors
    ///
    /// `Ok` only once the cleanup ran on the server. Otherwise the call's error when the
    /// cleanup was not kept (a refusal, a link up again, a cluster, too many kept already);
    /// the server's refusal when the kept copy was refused for good; `Timeout` when the kept
    /// copy still waits for the next connection. It runs there all the same, and since it is
    /// idempotent the caller may send it again meanwhile (the locker does: an error leaves a
    /// debt).
    pub(crate) async fn settle_cleanup<T>(
        &self,
        sent: Result<T>,
        started: tokio::time::Instant,
        timeout: Duration,
        deferred: impl FnOnce() -> Arc<dyn Deferred>,
    ) -> Result<()> {
        let error = match sent {
            Ok(_) => return Ok(()),
            Err(error) => error,
        };
        // Refused or failed for sure: nothing to wait for; the caller owes the cleanup.
        if !error.is_ambiguous() {
            return Err(error);
        }
        let Some(answer) = self.connection.defer(deferred()) else {
            return Err(error);
        };
        // Until the server ran it, it is only promised: an `Ok` now would let the caller's next
        // call go out while a refusal could still drop the cleanup.
        match tokio::time::timeout_at(started + timeout, answer).await {
            Ok(Ok(answered)) => answered,
            // The connection is gone with the backend: the cleanup was never sent.
            Ok(Err(_)) => Err(error),
            Err(_) => Err(Error::Timeout { after: timeout }),
        }
    }

    /// Sends `commands` in a pipeline (shared with concurrent calls) and returns their replies,
    /// in order, error replies included as `Value::ServerError`; with replicas to wait for, the
    /// answer of the pipeline's acknowledgement request comes last (see
    /// [`Self::send_write`]).
    ///
    /// # Errors
    ///
    /// `Timeout` or `ConnectionLost` (both ambiguous) when the pipeline as a whole failed.
    ///
    /// # Cancel safety
    ///
    /// Dropped while queued, nothing is sent; dropped after sending, the commands still run.
    pub(crate) async fn send_coalesced(
        self: &Arc<Self>,
        commands: Vec<Cmd>,
        timeout: Duration,
    ) -> Result<Vec<Value>> {
        let (replies, _) = self.send_in_turn(commands, timeout, false, false).await?;
        Ok(replies)
    }

    /// [`Self::send_coalesced`] (`behind`: [`Self::send_behind`]): alone when its turn comes
    /// at once, else in the next shared pipeline. With `acked` ([`Self::send_write`]), the
    /// acknowledgement's answer is taken off the replies and returned beside them; else it
    /// stays last among them and `None` is returned beside them.
    async fn send_in_turn(
        self: &Arc<Self>,
        commands: Vec<Cmd>,
        timeout: Duration,
        behind: bool,
        acked: bool,
    ) -> Result<(Vec<Value>, Acknowledged)> {
        let mut commands = Some(commands);
        let make = || commands.take().unwrap_or_default();
        let turn = if behind {
            take_turn_behind(self, timeout, make)
        } else {
            take_turn(self, timeout, make)
        };
        let replies = match turn {
            Turn::Alone(slot) => {
                // A lone call's replies are the pipeline's, the acknowledgement's answer last,
                // as `pipeline_of` would cut them for one call; sent from here, one layer fewer.
                let commands = commands.unwrap_or_default();
                let (pipeline, proof) = self.pipeline(commands, 1, timeout);
                let replies = self.send_pipeline(pipeline, proof, timeout).await;
                drop(slot);
                replies
            }
            Turn::Queued(answer) => queued_reply(answer, timeout).await,
        };
        let mut replies = replies?;
        let acknowledged = if acked {
            self.take_acknowledgement(&mut replies)
        } else {
            None
        };
        Ok((replies, acknowledged))
    }

    /// The keys matching `pattern` on every primary (see [`Connection::scan`]), at most about
    /// `limit`, and whether the walk reached the end of every primary's keys; each `SCAN` step
    /// within the command timeout.
    ///
    /// # Errors
    ///
    /// As any call: a timeout, a lost connection, a refusal.
    pub(crate) async fn scan(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<(std::collections::BTreeSet<String>, bool)> {
        let timeout = self.command_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let link = self.link_by(deadline, timeout).await?;
        self.connection
            .scan(&link, pattern, limit, timeout)
            .await
            .map_err(|error| map_error(&error, timeout))
    }

    /// The current link, waiting (until `deadline`) for a replacement if one is being made.
    async fn link_by(&self, deadline: tokio::time::Instant, timeout: Duration) -> Result<Link> {
        let connection = &self.connection;
        let link = match connection.ready() {
            Some(link) => link,
            None => tokio::time::timeout_at(deadline, connection.current())
                .await
                .map_err(|_| Error::Timeout { after: timeout })?,
        };
        if tokio::time::Instant::now() >= deadline {
            // Nothing sent: no reason to doubt the connection.
            return Err(Error::Timeout { after: timeout });
        }
        Ok(link)
    }

    /// One request about the lock named `route`, carrying its request id (see
    /// [`Self::sends_request_id`]; [`Self::exchange_proven`] sends one without), and its reply
    /// on `link`: the reply items after the request id, and the reply to `then`, a command sent
    /// right after the request in one pipeline (the replica acknowledgement), when there is one.
    async fn exchange(
        &self,
        link: &Link,
        route: &str,
        script: &LockScript,
        keys: usize,
        fill: &impl Fn(&mut Cmd),
        then: Option<&Cmd>,
    ) -> Result<(Vec<Value>, Option<Value>)> {
        let connection = &self.connection;
        let nonce = connection.next_request_id();
        let command = |whole: bool| script.command(whole, keys, fill, Some(nonce));
        let send = |whole: bool| async move {
            if then.is_none() {
                return Ok((connection.send(link, route, &command(whole)).await?, None));
            }
            // The request id proves the script's reply only: a lost reply to `then` would
            // leave its place to a later request's, so the pipeline as a whole is proven.
            self.send_then_proven(link, command(whole), then).await
        };
        let (mut reply, mut after) = send(self.whole(script)).await?;
        if let Value::ServerError(error) = &reply
            && error.kind() == Some(ServerErrorKind::NoScript)
        {
            // Sending the script whole is safe only if this NOSCRIPT really was ours (the
            // request did not run); a reply out of step could belong to a request that did.
            match connection.in_step(link, route).await {
                Alignment::Proven => {}
                Alignment::Broken => return Err(out_of_step()),
                Alignment::Refused(refusal) => return Err(unattributable(&refusal)),
            }
            crate::telemetry::noscript_reload();
            (reply, after) = send(true).await?;
        }
        if let Value::ServerError(error) = reply {
            return match connection.in_step(link, route).await {
                Alignment::Proven => Err(map_error(&error.into(), Duration::ZERO)),
                Alignment::Broken => Err(out_of_step()),
                // A busy or loading server refuses the PING as it refused the call: the same
                // refusal twice is the server's state, not a reply out of step.
                Alignment::Refused(refusal) if refusal.code() == error.code() => {
                    Err(map_error(&error.into(), Duration::ZERO))
                }
                Alignment::Refused(refusal) => Err(unattributable(&refusal)),
            };
        }
        match script.reply_items(reply, Some(nonce)) {
            Ok(items) => Ok((items, after)),
            Err(_) => {
                connection.discard(link, "reply out of step");
                Err(out_of_step())
            }
        }
    }
}

impl Calls {
    /// Whether a call of `script` that goes alone carries its request id: always, except for
    /// a script whose id is optional on a connection that proves a lone request by its
    /// solitude (one server: see `connection::ledger`), where the id would only cost the
    /// server one more argument. Queued calls never need it (their pipeline's `PING` proves
    /// them: [`LockScript::proven_id`]).
    pub(crate) fn sends_request_id(&self, script: &LockScript) -> bool {
        !(script.id_is_optional() && self.connection.proves_by_solitude())
    }

    /// [`Self::exchange`] for a script sent without its request id: in a pipeline (with
    /// `then` after it, if any) proven by the link's solitude, or by a `PING` after it when
    /// the link is not alone ([`Proof::SolitudeOrEcho`]). Its replies, error replies
    /// included, are then known to be its own.
    ///
    /// The pipeline is sent from here, not through [`Self::send_then_proven`]: one layer fewer
    /// on the calls most made (every script whose id is optional, on one server).
    async fn exchange_proven(
        &self,
        link: &Link,
        script: &LockScript,
        keys: usize,
        fill: &impl Fn(&mut Cmd),
        then: Option<&Cmd>,
    ) -> Result<(Vec<Value>, Option<Value>)> {
        let mut whole = self.whole(script);
        let (reply, after) = loop {
            let (pipeline, count) = then_pipeline(script.command(whole, keys, fill, None), then);
            let sent = self
                .connection
                .send_proven(link, pipeline, Proof::SolitudeOrEcho)
                .await;
            let (reply, after) = self.proven_pair(link, sent, count)?;
            match &reply {
                Value::ServerError(error)
                    if !whole && error.kind() == Some(ServerErrorKind::NoScript) =>
                {
                    // Proven: this request did not run, so sending it whole runs it once.
                    crate::telemetry::noscript_reload();
                    whole = true;
                }
                _ => break (reply, after),
            }
        };
        if let Value::ServerError(error) = reply {
            return Err(map_error(&error.into(), Duration::ZERO));
        }
        match script.reply_items(reply, None) {
            Ok(items) => Ok((items, after)),
            Err(reply) => Err(Error::Protocol(
                format!("unexpected lock script reply: {reply:?}").into(),
            )),
        }
    }

    /// Sends `command`, then `then` if any, in one pipeline on `link`, proven as a whole by
    /// the link's solitude or a `PING` after it ([`Proof::SolitudeOrEcho`]): their replies,
    /// error replies included. A failure or a reply out of step discards the link.
    async fn send_then_proven(
        &self,
        link: &Link,
        command: Cmd,
        then: Option<&Cmd>,
    ) -> Result<(Value, Option<Value>)> {
        let (pipeline, count) = then_pipeline(command, then);
        let sent = self
            .connection
            .send_proven(link, pipeline, Proof::SolitudeOrEcho)
            .await;
        self.proven_pair(link, sent, count)
    }

    /// The replies of a pipeline of `count` commands (one, or two with a `then`) sent proven on
    /// `link`: the first, and the second if any. A failure or a reply out of step discards the
    /// link.
    fn proven_pair(
        &self,
        link: &Link,
        sent: redis::RedisResult<Option<Vec<Value>>>,
        count: usize,
    ) -> Result<(Value, Option<Value>)> {
        match sent {
            Ok(Some(replies)) if replies.len() == count => {
                let mut replies = replies.into_iter();
                Ok((replies.next().unwrap_or_default(), replies.next()))
            }
            Ok(_) => {
                self.connection.discard(link, "reply out of step");
                Err(out_of_step())
            }
            Err(error) => {
                self.connection.discard(link, "connection error");
                Err(map_error(&error, Duration::ZERO))
            }
        }
    }
}

/// `command`, then `then` if any, as one pipeline (room left for a `PING` after them), and how
/// many commands it has.
fn then_pipeline(command: Cmd, then: Option<&Cmd>) -> (Pipeline, usize) {
    let mut pipeline = Pipeline::with_capacity(3);
    pipeline.add_command(command);
    if let Some(then) = then {
        pipeline.add_command(then.clone());
    }
    let count = pipeline.len();
    (pipeline, count)
}

impl Calls {
    /// The pipeline of the commands of `calls` calls, with the proof it needs.
    fn pipeline(&self, commands: Vec<Cmd>, calls: usize, timeout: Duration) -> (Pipeline, Proof) {
        // Room for the replica wait and the `PING` that may follow the calls' commands.
        let mut pipeline = Pipeline::with_capacity(commands.len() + 2);
        for command in commands {
            pipeline.add_command(command);
        }
        // One acknowledgement for every write of the pipeline: `WAIT` counts the replicas that
        // have all of this connection's writes so far. Each call gets a copy of its answer.
        if let Some(replication) = &self.replication {
            pipeline.add_command(replication.command(timeout));
        }
        // One call may be proven by going alone; several share a pipeline because calls
        // overlap, and bring their `PING` (see `Proof`).
        let proof = if calls == 1 {
            Proof::SolitudeOrEcho
        } else {
            Proof::Echo
        };
        (pipeline, proof)
    }
}

impl Carrier for Calls {
    fn coalescer(&self) -> &Coalescer {
        &self.coalescer
    }

    /// The pipeline of several coalesced calls.
    async fn pipeline_of(
        &self,
        commands: Vec<Cmd>,
        counts: &[usize],
        timeout: Duration,
    ) -> Result<Vec<Vec<Value>>> {
        let (pipeline, proof) = self.pipeline(commands, counts.len(), timeout);
        let mut replies = self.send_pipeline(pipeline, proof, timeout).await?;
        let acknowledgement = match self.replication {
            Some(_) => replies.pop(),
            None => None,
        };
        let mut replies = replies.into_iter();
        Ok(counts
            .iter()
            .map(|&count| {
                let mut group: Vec<Value> = replies.by_ref().take(count).collect();
                group.extend(acknowledgement.clone());
                group
            })
            .collect())
    }
}

/// What `future` gives, or `None` once `expiry` has elapsed (the future is then dropped where it
/// stands, by its owner). Both are taken pinned where the caller made them:
/// `tokio::time::timeout_at` takes the future by value into a struct of its own, a copy of the
/// whole call's future (kilobytes, about 1,000 instructions per lock + release cycle) on every
/// call; and a plain function over a `poll_fn`, rather than an `async fn` around one, is one
/// state and one poll frame fewer on every call.
fn by_deadline<'a, F: Future>(
    expiry: Pin<&'a mut tokio::time::Sleep>,
    future: Pin<&'a mut F>,
) -> impl Future<Output = Option<F::Output>> + 'a {
    let (mut expiry, mut future) = (expiry, future);
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        expiry.as_mut().poll(cx).map(|()| None)
    })
}

/// The reply of a queued call of `script` (its last item), decoded after its request id (the
/// pipeline's proof showed it is this call's).
fn script_reply<T: FromRedisValue>(
    script: &LockScript,
    mut reply: Vec<Value>,
    timeout: Duration,
) -> Result<T> {
    match reply.pop() {
        Some(Value::ServerError(error)) => Err(map_error(&error.into(), timeout)),
        Some(reply) => match script.reply_items(reply, None) {
            Ok(items) => decode(items),
            Err(reply) => Err(Error::Protocol(
                format!("unexpected lock script reply: {reply:?}").into(),
            )),
        },
        None => Err(Error::Protocol("no lock script reply".into())),
    }
}

/// A lock script's reply items (after the request id) as `T`.
fn decode<T: FromRedisValue>(items: Vec<Value>) -> Result<T> {
    T::from_redis_value(Value::Array(items))
        .map_err(|error| Error::Protocol(format!("unexpected lock script reply: {error}").into()))
}

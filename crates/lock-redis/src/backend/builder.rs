//! Making a backend: [`RedisBackendBuilder`] checks the settings, connects, learns what the
//! server offers, and puts the layers together.

use std::time::Duration;

use lock_core::{Error, Result};

use crate::backend::options::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_POLL_INTERVAL, LockKind,
    NotificationMode, ShardedPubSub,
};
use crate::backend::redis_backend::RedisBackend;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
use crate::backend::target::RedisNode;
use crate::backend::target::{RedisTarget, Target};
use crate::call::{Calls, Scripting};
use crate::connection::pubsub::Notifications;
use crate::connection::source::Source;
use crate::connection::tls::{Tls, TlsSettings};
use crate::connection::{Connection, Manners, probe};
use crate::kind::fast::NativeDelete;
use crate::wire::announce::Announce;
use crate::wire::capabilities::{Capabilities, Capability, Support};
#[cfg(feature = "sentinel")]
use crate::wire::errors::map_error;
use crate::wire::replication::ReplicaAck;

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
///
/// # Your own connection settings
///
/// Besides URLs, [`RedisBackend::builder`] takes redis-rs's own description of a server, so
/// settings made in code stay as they are: a `redis::Client` or a `redis::ConnectionInfo`, for
/// one server, a cluster's seeds or a service's Sentinels (see [`RedisNode`]).
/// The address, database, username and password, protocol (RESP2 or RESP3), TCP settings and
/// TLS of the info are kept for every connection the backend makes to that server: commands and
/// release notifications (which always speak RESP3, to receive pushes). These types are
/// redis-rs's: use the version lock-redis re-exports, [`lock_redis::redis`](crate::redis).
///
/// # Reconnect contract: why not a `ConnectionManager`
///
/// The builder takes what to connect *to*, never a connection. The backend makes, checks and
/// replaces its connections itself: when a call times out or its reply cannot be proven its
/// own, the command connection is replaced, and the old one is first killed on the server
/// (`CLIENT KILL ID … ADDR …`) before the new one is used, so a request still queued on the
/// old connection (the cleanup of a timed-out acquire, say) can never run after newer requests
/// and undo them. A `redis::aio::ConnectionManager` (or a `MultiplexedConnection` handed over)
/// reconnects or fails behind the backend's back: requests would move to a new connection
/// without the old one fenced, and a retried script could apply twice. So none is accepted;
/// give the `Client` or `ConnectionInfo` you would have made it from. On a cluster, likewise,
/// the backend makes its own `ClusterClient` with redis-rs's retries off (see
/// [`RedisTarget::cluster`](crate::RedisTarget::cluster)). See `docs/deployments.md`, "Connections".
#[derive(Clone, Debug)]
pub struct RedisBackendBuilder {
    target: Target,
    command_timeout: Duration,
    connect_timeout: Duration,
    notifications: NotificationMode,
    kind: LockKind,
    sharded: ShardedPubSub,
    replication: Option<ReplicaAck>,
    tls: TlsSettings,
    keep_fencing_counters: bool,
}

/// Where waiters listen for releases, by deployment (made once per backend: its size does not
/// matter).
#[allow(clippy::large_enum_variant)]
enum Listen {
    /// The one server.
    Plain(redis::Client),
    /// A cluster, through its seeds.
    #[cfg(feature = "cluster")]
    Cluster(Vec<redis::Client>),
    /// The primary of a Sentinel service, wherever it is.
    #[cfg(feature = "sentinel")]
    Primary(Source),
}

/// Where the backend connects.
impl RedisBackendBuilder {
    /// A builder for `target` with the default settings.
    fn new(target: Target) -> Self {
        RedisBackendBuilder {
            target,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            notifications: NotificationMode::PubSub,
            kind: LockKind::Reentrant,
            sharded: ShardedPubSub::Auto,
            replication: None,
            tls: TlsSettings::default(),
            keep_fencing_counters: false,
        }
    }

    /// Keeps every fencing counter (`redisson_lock_token:{name}`) for good, as Redisson does,
    /// instead of letting it expire once the server's clock has passed its last token and one
    /// lease more (the default).
    ///
    /// The default is safe on its own: every token is at least the server's clock in
    /// microseconds, so a counter that expired (or was lost) still gives a larger token next.
    /// Keep the counters when Redisson's fenced locks (`RFencedLock`) share the names: their
    /// `INCR` would start again at 1 after the counter expired, and a resource that checks
    /// tokens would refuse their writes. See `docs/redis-layout.md`, "Fencing counters".
    ///
    /// # Example
    ///
    /// ```no_run
    /// use lock_redis::RedisBackend;
    ///
    /// # async fn demo() -> Result<(), lock_core::Error> {
    /// let backend = RedisBackend::builder("redis://127.0.0.1:6379/")
    ///     .keep_fencing_counters(true)
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn keep_fencing_counters(mut self, keep: bool) -> Self {
        self.keep_fencing_counters = keep;
        self
    }

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

    /// Whether release notifications on a cluster use sharded pub/sub (see [`ShardedPubSub`];
    /// one server always uses plain pub/sub).
    #[must_use]
    pub fn sharded_pubsub(mut self, mode: ShardedPubSub) -> Self {
        self.sharded = mode;
        self
    }

    /// Credentials for the data nodes of a Sentinel service (the Sentinels' own go in their
    /// URLs). Ignored for other deployments.
    #[cfg(feature = "sentinel")]
    #[must_use]
    pub fn sentinel_node_auth(
        mut self,
        username: Option<String>,
        password: impl Into<String>,
    ) -> Self {
        if let Target::Sentinel { node_auth, .. } = &mut self.target {
            *node_auth = Some((username, password.into()));
        }
        self
    }

    /// Make every grant, renewal and release wait until `ack` says enough replicas have it
    /// (`WAIT`, or `WAITAOF`), in the same pipeline as the lock's own command; see
    /// [`ReplicaAck`] for what happens when they fall short and what this does and does not
    /// guarantee. Off by default. Calls then no longer share pipelines with each other.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use lock_redis::{RedisBackend, ReplicaAck};
    ///
    /// # async fn demo() -> Result<(), lock_core::Error> {
    /// let backend = RedisBackend::builder("redis://127.0.0.1:6379/")
    ///     .replica_ack(ReplicaAck::replicas(1))
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn replica_ack(mut self, ack: ReplicaAck) -> Self {
        self.replication = Some(ack);
        self
    }

    /// Trusts the certificate authorities in `pem` (one or more PEM `CERTIFICATE` blocks) for
    /// `rediss://` connections, instead of the webpki roots (Mozilla's list). Applies to every
    /// connection of the backend: commands and notifications; on a cluster every node, on a
    /// Sentinel service the Sentinels and the data nodes. Needs the `tls-rustls` feature.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use lock_redis::RedisBackend;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let backend = RedisBackend::builder("rediss://127.0.0.1:6380/")
    ///     .tls_ca_pem(std::fs::read("ca.crt")?)
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// The bundle is checked by [`connect`](Self::connect): no certificate in it, a broken one,
    /// a `redis://` URL, or no `tls-rustls` feature is an [`Error::InvalidConfig`].
    #[must_use]
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.set_ca_pem(pem.into());
        self
    }

    /// Presents this client certificate (`cert_pem`: PEM, the client's certificate first, then
    /// any intermediates) with its private key (`key_pem`: PEM, PKCS#8, PKCS#1 or SEC1) when the
    /// server asks for one: mutual TLS, as with `tls-auth-clients yes`. Applies to every
    /// connection, as [`tls_ca_pem`](Self::tls_ca_pem) does. Needs the `tls-rustls` feature.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use lock_redis::RedisBackend;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let backend = RedisBackend::builder(lock_redis::RedisTarget::cluster(["rediss://127.0.0.1:7000/"]))
    ///     .tls_ca_pem(std::fs::read("ca.crt")?)
    ///     .tls_client_identity(std::fs::read("client.crt")?, std::fs::read("client.key")?)
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// Checked by [`connect`](Self::connect): no certificate, no private key, a key that is not
    /// the certificate's, a `redis://` URL, or no `tls-rustls` feature is an
    /// [`Error::InvalidConfig`].
    #[must_use]
    pub fn tls_client_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.set_identity(cert_pem.into(), key_pem.into());
        self
    }

    /// How waiters learn about releases.
    #[must_use]
    pub fn notifications(mut self, mode: NotificationMode) -> Self {
        self.notifications = mode;
        self
    }

    /// The settings checked before any I/O, and the TLS settings to open connections with.
    fn check(&self) -> Result<Tls> {
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
        if let Some(ack) = &self.replication {
            ack.check(self.command_timeout)?;
        }
        self.tls.check()
    }

    /// Checks the configuration and runs only the capability probe (see [`Capabilities`]):
    /// what the server, or the proxy in front of it, does with each command the library may
    /// use, for a look before connecting (`distlock doctor`). On a cluster the first seed is
    /// asked, behind Sentinels the primary they name.
    ///
    /// # Errors
    ///
    /// As [`Self::connect`], for the configuration and for reaching the server.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use lock_redis::RedisBackend;
    ///
    /// # async fn demo() -> Result<(), lock_core::Error> {
    /// let found = RedisBackend::builder("redis://127.0.0.1:6379/").probe().await?;
    /// println!("{found}");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn probe(self) -> Result<Capabilities> {
        let tls = self.check()?;
        let client = match &self.target {
            Target::Standalone(endpoint) => endpoint.open(&tls)?,
            #[cfg(feature = "sentinel")]
            Target::Sentinel {
                sentinels,
                service,
                node_auth,
            } => sentinel_source(sentinels, service, node_auth.as_ref(), &tls)?
                .client()
                .await
                .map_err(|error| map_error(&error, self.connect_timeout))?,
            #[cfg(feature = "cluster")]
            Target::Cluster(seeds) => {
                let (_, mut clients) = cluster_client(seeds, self.connect_timeout, &tls)?;
                clients.swap_remove(0)
            }
        };
        probe::probe(&client, self.connect_timeout).await
    }

    /// Checks the configuration, connects, and returns the backend.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a bad URL, timeout or TLS setting (before any I/O);
    /// [`Error::NotPermitted`] for bad credentials; [`Error::ConnectionLost`] or
    /// [`Error::Timeout`] when the server cannot be reached.
    pub async fn connect(self) -> Result<RedisBackend> {
        let tls = self.check()?;
        let capabilities;
        let (connection, listen, announce) = match &self.target {
            Target::Standalone(endpoint) => {
                let client = endpoint.open(&tls)?;
                let found = probe::probe(&client, self.connect_timeout).await?;
                let client = if found.names_connections() {
                    client
                } else {
                    probe::unnamed(&client)?
                };
                capabilities = found;
                let connection = Connection::standalone(
                    Source::Fixed(client.clone()),
                    &capabilities,
                    self.connect_timeout,
                    self.command_timeout,
                )
                .await?;
                (connection, Listen::Plain(client), Announce::Plain)
            }
            #[cfg(feature = "sentinel")]
            Target::Sentinel {
                sentinels,
                service,
                node_auth,
            } => {
                let source = sentinel_source(sentinels, service, node_auth.as_ref(), &tls)?;
                let primary = source
                    .client()
                    .await
                    .map_err(|error| map_error(&error, self.connect_timeout))?;
                capabilities = probe::probe(&primary, self.connect_timeout).await?;
                let connection = Connection::standalone(
                    source.clone(),
                    &capabilities,
                    self.connect_timeout,
                    self.command_timeout,
                )
                .await?;
                (connection, Listen::Primary(source), Announce::Plain)
            }
            #[cfg(feature = "cluster")]
            Target::Cluster(seeds) => {
                let (cluster, clients) = cluster_client(seeds, self.connect_timeout, &tls)?;
                capabilities = probe::probe(&clients[0], self.connect_timeout).await?;
                let connection =
                    Connection::cluster(cluster, self.connect_timeout, self.command_timeout)
                        .await?;
                let announce = match self.sharded {
                    ShardedPubSub::Off => Announce::Plain,
                    ShardedPubSub::Auto => {
                        match has_sharded_pubsub(&connection, self.connect_timeout).await {
                            Ok(true) => Announce::Both,
                            Ok(false) => Announce::Plain,
                            Err(error) => {
                                tracing::warn!(%error, "sharded pub/sub probe refused; releases announced with PUBLISH only");
                                Announce::Plain
                            }
                        }
                    }
                    ShardedPubSub::On => {
                        if !has_sharded_pubsub(&connection, self.connect_timeout).await? {
                            return Err(Error::InvalidConfig {
                                reason: "sharded pub/sub is on, but the cluster has no \
                                         SSUBSCRIBE/SPUBLISH (Redis or Valkey 7+ needed)"
                                    .into(),
                            });
                        }
                        Announce::Sharded
                    }
                };
                (connection, Listen::Cluster(clients), announce)
            }
        };
        let scripting = needs_scripts(&capabilities, self.kind, connection.coalesces())?;
        // An fsynced acknowledgement asks `WAITAOF` instead, checked below.
        if self
            .replication
            .as_ref()
            .is_some_and(|ack| !ack.is_fsynced())
        {
            needs_wait(&capabilities)?;
        }
        if !Manners::of(&capabilities).fence {
            tracing::warn!(
                client_info = %capabilities.get(Capability::ClientInfo),
                client_kill = %capabilities.get(Capability::ClientKill),
                "no fence for replaced command connections: requests still queued on a lost \
                 connection may run after newer ones (see docs/design.md, \"Fenced replacement\")"
            );
        }
        if let Some(ack) = self.replication.filter(ReplicaAck::is_fsynced) {
            check_fsync(&connection, &ack, self.connect_timeout).await?;
        }
        // On a cluster the fast lock releases with its script: the native delete goes in a
        // pipeline with the announcement, and a redirect (`ASK` during a slot move) covers only
        // the pipeline's first command, so it could run twice.
        let native_delete = match self.kind {
            LockKind::Fast if connection.coalesces() => NativeDelete::of(&capabilities),
            LockKind::Fast | LockKind::Reentrant => NativeDelete::None,
        };
        log_capabilities(&capabilities);
        let notifications = match (self.notifications, listen) {
            (NotificationMode::Polling(every), _) => Notifications::polling(every),
            (NotificationMode::PubSub, _) if !capabilities.supports(Capability::Subscribe) => {
                tracing::warn!(
                    subscribe = %capabilities.get(Capability::Subscribe),
                    every = ?DEFAULT_POLL_INTERVAL,
                    "the server does not let waiters subscribe to release messages: they poll"
                );
                Notifications::polling(DEFAULT_POLL_INTERVAL)
            }
            (NotificationMode::PubSub, Listen::Plain(client)) => {
                Notifications::pubsub(&client, self.command_timeout, DEFAULT_POLL_INTERVAL)
            }
            #[cfg(feature = "sentinel")]
            (NotificationMode::PubSub, Listen::Primary(source)) => {
                Notifications::primary(source, self.command_timeout, DEFAULT_POLL_INTERVAL)
            }
            // Waiters listen on the kinds releases are announced with.
            #[cfg(feature = "cluster")]
            (NotificationMode::PubSub, Listen::Cluster(clients)) => Notifications::cluster(
                (announce != Announce::Sharded).then(|| &clients[0]),
                (announce != Announce::Plain).then(|| {
                    clients
                        .iter()
                        .map(|client| client.get_connection_info().clone())
                        .collect()
                }),
                &tls,
                self.command_timeout,
                DEFAULT_POLL_INTERVAL,
            ),
        };
        Ok(RedisBackend::new(
            Calls::new(
                connection,
                self.command_timeout,
                announce,
                self.replication,
                self.keep_fencing_counters,
                scripting,
            ),
            notifications,
            self.kind,
            native_delete,
            capabilities,
        ))
    }
}

impl RedisBackend {
    /// A builder for a backend on `target`: one server (a URL, a `redis::Client`, a
    /// `ConnectionInfo`), a Redis Cluster ([`RedisTarget::cluster`]) or the primary of a
    /// Sentinel service ([`RedisTarget::sentinel`]). Nothing is checked or connected until
    /// [`connect`](RedisBackendBuilder::connect).
    ///
    /// # Example
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use lock_redis::RedisBackend;
    ///
    /// # async fn demo() -> Result<(), lock_core::Error> {
    /// let backend = RedisBackend::builder("redis://127.0.0.1:6379/")
    ///     .command_timeout(Duration::from_secs(1))
    ///     .connect()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn builder(target: impl Into<RedisTarget>) -> RedisBackendBuilder {
        RedisBackendBuilder::new(target.into().0)
    }

    /// Connects to `target` with the default settings (as [`builder`](Self::builder) then
    /// [`connect`](RedisBackendBuilder::connect)).
    ///
    /// # Errors
    ///
    /// As [`RedisBackendBuilder::connect`].
    pub async fn connect(target: impl Into<RedisTarget>) -> Result<RedisBackend> {
        Self::builder(target).connect().await
    }
}

/// Refuses a backend on a server that runs no Lua scripts, unless it is the fast lock on a
/// server whose native commands can keep it: `SET … IFEQ` (renewals), `DELIFEQ` or `DELEX`
/// (releases), `PING <id>` (proof of step) and one connection sharing pipelines (not a
/// cluster, where a redirect could split a release from its announcement). Then the answer
/// is why scripts do not run, for the calls to refuse each script before any I/O.
///
/// # Errors
///
/// [`Error::NotPermitted`] when the ACL refuses `EVAL`, [`Error::Unsupported`] when the
/// server (or a proxy) does not run scripts at all; either names what is missing, for the
/// fast lock too.
fn needs_scripts(
    capabilities: &Capabilities,
    kind: LockKind,
    coalesces: bool,
) -> Result<Scripting> {
    if capabilities.runs_scripts() {
        // `EVALSHA` refused while `EVAL` runs (an ACL, a proxy): every script goes whole.
        return Ok(if capabilities.supports(Capability::EvalSha) {
            Scripting::ByHash
        } else {
            Scripting::Whole
        });
    }
    let line = |capability: Capability| format!("{capability}: {}", capabilities.get(capability));
    let missing: Vec<String> = [Capability::Eval, Capability::EvalSha]
        .into_iter()
        .map(line)
        .collect();
    let natives = capabilities.keeps_fast_lock_natively();
    if kind == LockKind::Fast && natives.is_ok() && coalesces {
        tracing::warn!(
            eval = %capabilities.get(Capability::Eval),
            "the server runs no scripts: the fast lock runs on its native commands, without \
             fencing tokens; every other primitive is refused"
        );
        return Ok(Scripting::Never(missing));
    }
    let fast = match (kind, natives) {
        (LockKind::Fast, Err(natives)) => format!(
            "; without scripts the fast lock needs {}",
            natives.into_iter().map(line).collect::<Vec<_>>().join("; ")
        ),
        (LockKind::Fast, Ok(())) => {
            "; without scripts the fast lock needs one server or Sentinels, not a cluster".into()
        }
        (LockKind::Reentrant, _) => {
            "; without scripts only the fast lock (LockKind::Fast) can run, on a server with \
             SET IFEQ and DELIFEQ or DELEX"
                .into()
        }
    };
    if let Support::NotPermitted(_) = capabilities.get(Capability::Eval) {
        return Err(Error::NotPermitted(
            format!(
                "{} (every lock needs +eval, and +evalsha to send scripts by hash){fast}",
                missing.join("; ")
            )
            .into(),
        ));
    }
    Err(Error::Unsupported {
        needs: format!("the {kind:?} lock (Lua scripts{fast})"),
        missing,
    })
}

/// Refuses replica acknowledgement on a server that will not run `WAIT`: every grant would
/// be given back.
///
/// # Errors
///
/// [`Error::NotPermitted`] when the ACL refuses it, [`Error::Unsupported`] when the server (or
/// a proxy) does not know it or hangs up on it.
fn needs_wait(capabilities: &Capabilities) -> Result<()> {
    let wait = capabilities.get(Capability::Wait);
    match wait {
        Support::Yes | Support::NotProbed => Ok(()),
        Support::NotPermitted(refusal) => Err(Error::NotPermitted(
            format!("{refusal} (replica acknowledgement needs +wait)").into(),
        )),
        other => Err(Error::Unsupported {
            needs: "replica acknowledgement (ReplicaAck)".into(),
            missing: vec![format!("WAIT: {other}")],
        }),
    }
}

/// Logs what the probe found, once per backend: what is missing at `info`, the whole table at
/// `debug`.
fn log_capabilities(capabilities: &Capabilities) {
    let missing: Vec<String> = capabilities
        .missing()
        .into_iter()
        .map(|capability| format!("{capability}: {}", capabilities.get(capability)))
        .collect();
    let server = capabilities
        .server()
        .map(|server| format!("{} {} ({})", server.name, server.version, server.mode));
    tracing::info!(?server, ?missing, "server capabilities probed");
    tracing::debug!("server capabilities:\n{capabilities}");
}

/// Valkey, with `appendonly yes`), asked with a 1 ms `WAITAOF 1 0 1` as Redisson probes.
///
/// # Errors
///
/// [`Error::InvalidConfig`] with the server's refusal, [`Error::NotPermitted`] with the ACL's;
/// the error of the call when the server cannot be asked.
async fn check_fsync(connection: &Connection, ack: &ReplicaAck, timeout: Duration) -> Result<()> {
    let mut probe = redis::cmd("WAITAOF");
    probe.arg(1).arg(0).arg(1);
    let link = connection.current().await;
    match tokio::time::timeout(timeout, connection.ask(&link, &probe)).await {
        // The ACL's refusal says nothing of the server: the user lacks `+waitaof`.
        Ok(Ok(redis::Value::ServerError(refusal))) if refusal.code() == "NOPERM" => {
            Err(crate::wire::errors::map_error(&refusal.into(), timeout))
        }
        Ok(Err(error)) if error.code() == Some("NOPERM") => {
            Err(crate::wire::errors::map_error(&error, timeout))
        }
        Ok(Ok(redis::Value::ServerError(refusal))) => Err(Error::InvalidConfig {
            reason: format!(
                "replica acknowledgement waits for fsyncs ({ack:?}), but the server refuses \
                 WAITAOF (Redis 7.2+ or Valkey with appendonly yes needed): {refusal:?}"
            ),
        }),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) if error.code().is_some() => Err(Error::InvalidConfig {
            reason: format!(
                "replica acknowledgement waits for fsyncs, but the server refuses WAITAOF \
                 (Redis 7.2+ or Valkey with appendonly yes needed): {error}"
            ),
        }),
        Ok(Err(error)) => Err(crate::wire::errors::map_error(&error, timeout)),
        Err(_) => Err(Error::Timeout { after: timeout }),
    }
}

/// Whether the cluster has sharded pub/sub (`PUBSUB SHARDNUMSUB` is known), as Redisson's
/// `shardedSubscriptionMode` AUTO asks.
///
/// # Errors
///
/// [`Error::NotPermitted`] when the ACL refuses the probe (`+pubsub|shardnumsub`), which says
/// nothing of the server: "no sharded pub/sub" would be the wrong answer.
#[cfg(feature = "cluster")]
async fn has_sharded_pubsub(connection: &Connection, timeout: Duration) -> Result<bool> {
    let mut probe = redis::cmd("PUBSUB");
    probe.arg("SHARDNUMSUB");
    let link = connection.current().await;
    match tokio::time::timeout(timeout, connection.ask(&link, &probe)).await {
        Ok(Ok(redis::Value::Array(_))) => Ok(true),
        Ok(Ok(redis::Value::ServerError(refusal))) if refusal.code() == "NOPERM" => {
            Err(crate::wire::errors::map_error(&refusal.into(), timeout))
        }
        Ok(Err(error)) if error.code() == Some("NOPERM") => {
            Err(crate::wire::errors::map_error(&error, timeout))
        }
        _ => Ok(false),
    }
}

/// The cluster client for `seeds` (no retries of its own: see `connection::cluster`) and a
/// client of each seed (for notifications).
#[cfg(feature = "cluster")]
fn cluster_client(
    seeds: &[RedisNode],
    connect_timeout: Duration,
    tls: &Tls,
) -> Result<(redis::cluster::ClusterClient, Vec<redis::Client>)> {
    if seeds.is_empty() {
        return Err(Error::InvalidConfig {
            reason: "a cluster needs at least one seed URL".into(),
        });
    };
    let clients = seeds
        .iter()
        .map(|seed| {
            seed.check_shared_tls("the cluster seed")?;
            seed.open(tls)
        })
        .collect::<Result<Vec<_>>>()?;
    let cluster = tls
        .cluster(redis::cluster::ClusterClientBuilder::new(
            clients
                .iter()
                .map(|client| client.get_connection_info().clone()),
        ))
        .retries(0)
        .connection_timeout(connect_timeout)
        .build()
        .map_err(|error| Error::InvalidConfig {
            reason: format!("bad cluster settings: {error}"),
        })?;
    Ok((cluster, clients))
}

/// The source of a Sentinel service's primary.
#[cfg(feature = "sentinel")]
fn sentinel_source(
    sentinels: &[RedisNode],
    service: &str,
    node_auth: Option<&(Option<String>, String)>,
    tls: &Tls,
) -> Result<Source> {
    if sentinels.is_empty() {
        return Err(Error::InvalidConfig {
            reason: "a Sentinel service needs at least one Sentinel URL".into(),
        });
    }
    if service.is_empty() {
        return Err(Error::InvalidConfig {
            reason: "the Sentinel service name is empty".into(),
        });
    }
    let infos = sentinels
        .iter()
        .map(|sentinel| {
            sentinel.check_shared_tls("the Sentinel")?;
            sentinel
                .open(tls)
                .map(|client| client.get_connection_info().clone())
        })
        .collect::<Result<Vec<_>>>()?;
    // Over TLS the data nodes get the TLS settings too, which takes redis-rs's builder.
    if let Some(client) = tls.sentinel_client(&infos, service, node_auth)? {
        return Ok(sentinel_service(client, infos, service));
    }
    let mut node = redis::sentinel::SentinelNodeConnectionInfo::default();
    if let Some((username, password)) = node_auth {
        let mut settings = redis::RedisConnectionInfo::default().set_password(password);
        if let Some(username) = username {
            settings = settings.set_username(username);
        }
        node = node.set_redis_connection_info(settings);
    }
    // Owned: without redis-rs's TLS feature `build` takes a `String`, with it `impl AsRef<str>`.
    #[allow(clippy::unnecessary_to_owned)]
    let client = redis::sentinel::SentinelClient::build(
        infos.clone(),
        service.to_owned(),
        Some(node),
        redis::sentinel::SentinelServerType::Master,
    )
    .map_err(|error| Error::InvalidConfig {
        reason: format!("bad Sentinel settings: {error}"),
    })?;
    Ok(sentinel_service(client, infos, service))
}

/// The source of a Sentinel service's primary, from its client.
#[cfg(feature = "sentinel")]
fn sentinel_service(
    client: redis::sentinel::SentinelClient,
    sentinels: Vec<redis::ConnectionInfo>,
    service: &str,
) -> Source {
    Source::Sentinel(crate::connection::source::SentinelService {
        client: std::sync::Arc::new(tokio::sync::Mutex::new(client)),
        sentinels,
        service: service.to_owned(),
    })
}

//! What a server, or the proxy in front of it, does with each command distlock may use: the
//! probe's commands, how their answers read, and the [`Capabilities`] they make. Knows nothing
//! of connections (the probe that sends them is `connection::probe`).

use std::fmt;

use redis::{Cmd, RedisError, Value};

/// One command (or use of a command) distlock may send, as the capability probe asks about it.
///
/// # Example
///
/// ```
/// use lock_redis::Capability;
///
/// assert_eq!(Capability::ScriptLoad.command(), "SCRIPT LOAD");
/// assert!(Capability::ALL.contains(&Capability::Subscribe));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// `HELLO`: the server's name, version and mode, and the RESP3 handshake.
    Hello,
    /// `PING <id>`: the echo that proves a pipeline's replies are its own.
    PingEcho,
    /// `CLIENT INFO`: how the server names this connection, for the fence.
    ClientInfo,
    /// `CLIENT KILL ID`: the fence of a replaced command connection.
    ClientKill,
    /// `CLIENT SETINFO`: the library name redis-rs gives each connection.
    ClientSetInfo,
    /// `SCRIPT LOAD`: the scripts loaded once per connection, then sent by hash.
    ScriptLoad,
    /// `EVALSHA` with one key: a loaded script by its hash.
    EvalSha,
    /// `EVAL` with one key: a script sent whole.
    Eval,
    /// `EVAL` with no key (some proxies route by the first key and refuse it).
    EvalKeyless,
    /// `PUBLISH` called from inside a script: the releasing scripts announce that way.
    PublishInScript,
    /// `PUBLISH` from the client.
    Publish,
    /// `SUBSCRIBE`: waiters woken by release messages.
    Subscribe,
    /// `SSUBSCRIBE`: sharded pub/sub.
    SSubscribe,
    /// `WAIT`: replica acknowledgement.
    Wait,
    /// `WAITAOF`: replica acknowledgement of fsyncs.
    WaitAof,
    /// `SET … IFEQ`: compare-and-set (Valkey 8.1, Redis 8.4).
    SetIfEq,
    /// `DELIFEQ`: compare-and-delete (Valkey 9).
    DelIfEq,
    /// `DELEX … IFEQ`: compare-and-delete (Redis 8.4).
    DelEx,
    /// `CLUSTER SLOTS`: the slot map of a Redis Cluster.
    ClusterSlots,
}

impl Capability {
    /// Every capability, in the order the probe asks and reports them.
    pub const ALL: [Capability; 19] = [
        Capability::Hello,
        Capability::PingEcho,
        Capability::ClientInfo,
        Capability::ClientKill,
        Capability::ClientSetInfo,
        Capability::ScriptLoad,
        Capability::EvalSha,
        Capability::Eval,
        Capability::EvalKeyless,
        Capability::PublishInScript,
        Capability::Publish,
        Capability::Subscribe,
        Capability::SSubscribe,
        Capability::Wait,
        Capability::WaitAof,
        Capability::SetIfEq,
        Capability::DelIfEq,
        Capability::DelEx,
        Capability::ClusterSlots,
    ];

    /// The command as an operator would grant or look it up.
    #[must_use]
    pub fn command(self) -> &'static str {
        match self {
            Capability::Hello => "HELLO",
            Capability::PingEcho => "PING <id>",
            Capability::ClientInfo => "CLIENT INFO",
            Capability::ClientKill => "CLIENT KILL",
            Capability::ClientSetInfo => "CLIENT SETINFO",
            Capability::ScriptLoad => "SCRIPT LOAD",
            Capability::EvalSha => "EVALSHA",
            Capability::Eval => "EVAL",
            Capability::EvalKeyless => "EVAL without keys",
            Capability::PublishInScript => "PUBLISH in a script",
            Capability::Publish => "PUBLISH",
            Capability::Subscribe => "SUBSCRIBE",
            Capability::SSubscribe => "SSUBSCRIBE",
            Capability::Wait => "WAIT",
            Capability::WaitAof => "WAITAOF",
            Capability::SetIfEq => "SET IFEQ",
            Capability::DelIfEq => "DELIFEQ",
            Capability::DelEx => "DELEX",
            Capability::ClusterSlots => "CLUSTER SLOTS",
        }
    }

    /// What distlock uses it for.
    #[must_use]
    pub fn used_for(self) -> &'static str {
        match self {
            Capability::Hello => "server name and version; RESP3",
            Capability::PingEcho => "proving each pipeline's replies are its own",
            Capability::ClientInfo | Capability::ClientKill => {
                "fencing a replaced command connection"
            }
            Capability::ClientSetInfo => "naming the connection (redis-rs)",
            Capability::ScriptLoad => "loading the scripts once per connection",
            Capability::EvalSha => "running loaded scripts by hash",
            Capability::Eval => "running scripts sent whole",
            Capability::EvalKeyless => "nothing (known for proxies that refuse it)",
            Capability::PublishInScript => "announcing releases from the releasing scripts",
            Capability::Publish => "announcing releases from the client",
            Capability::Subscribe => "waking waiters at a release",
            Capability::SSubscribe => "sharded release channels on a cluster",
            Capability::Wait => "replica acknowledgement (ReplicaAck)",
            Capability::WaitAof => "fsync acknowledgement (ReplicaAck::fsynced)",
            Capability::SetIfEq => "renewing the fast lock without scripts",
            Capability::DelIfEq | Capability::DelEx => "releasing the fast lock natively",
            Capability::ClusterSlots => "the slot map of a cluster",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.command())
    }
}

/// How the server answered the probe of one [`Capability`].
///
/// # Example
///
/// ```
/// use lock_redis::Support;
///
/// assert!(Support::Yes.is_yes());
/// assert!(!Support::ClosesConnection.is_yes());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Support {
    /// It ran (or was refused only for the probe's key or channel, which says the command
    /// itself is allowed: the ACL decides per lock name).
    Yes,
    /// The ACL refuses the command (`NOPERM`), with the server's words.
    NotPermitted(String),
    /// The server does not know it (an unknown command or subcommand, a syntax it lacks).
    Unknown(String),
    /// The server (a proxy, typically) closed the connection instead of answering.
    ClosesConnection,
    /// No answer within the connect timeout.
    NoAnswer,
    /// Another error, with the server's words (not judged either way).
    Failed(String),
    /// Not asked: the probe of another capability decided it (no `SUBSCRIBE` probe through a
    /// connection that cannot be opened, say).
    NotProbed,
}

impl Support {
    /// Whether the command can be used.
    #[must_use]
    pub fn is_yes(&self) -> bool {
        matches!(self, Support::Yes)
    }
}

impl fmt::Display for Support {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Support::Yes => f.write_str("yes"),
            Support::NotPermitted(why) => write!(f, "not permitted ({why})"),
            Support::Unknown(why) => write!(f, "unknown to the server ({why})"),
            Support::ClosesConnection => f.write_str("closes the connection"),
            Support::NoAnswer => f.write_str("no answer"),
            Support::Failed(why) => write!(f, "failed ({why})"),
            Support::NotProbed => f.write_str("not probed"),
        }
    }
}

/// The server as `HELLO` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// `redis`, `valkey`, or what else the server calls itself.
    pub name: String,
    /// Its version, as it gives it.
    pub version: String,
    /// `standalone`, `cluster` or `sentinel`.
    pub mode: String,
}

/// What the server (or a proxy in front of it) does with each command distlock may use, found
/// out when the backend connected ([`crate::RedisBackend::capabilities`]).
///
/// The probe runs on a connection of its own, so a proxy that hangs up on a command it does not
/// know (twemproxy does) costs that connection, not the backend's: each command is first sent
/// in one pipeline; if the connection is cut, the rest are asked one at a time, a new
/// connection after each hang-up.
///
/// # Example
///
/// ```no_run
/// use lock_redis::{Capability, RedisBackend};
///
/// # async fn demo() -> Result<(), lock_core::Error> {
/// let backend = RedisBackend::connect("redis://127.0.0.1:6379/").await?;
/// if !backend.capabilities().supports(Capability::Subscribe) {
///     eprintln!("waiters poll: {}", backend.capabilities().get(Capability::Subscribe));
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    server: Option<ServerInfo>,
    answers: Vec<Support>,
}

impl Capabilities {
    /// Capabilities from the probe's answers, in the order of [`Capability::ALL`].
    pub(crate) fn new(server: Option<ServerInfo>, answers: Vec<Support>) -> Self {
        debug_assert_eq!(answers.len(), Capability::ALL.len());
        Capabilities { server, answers }
    }

    /// The server as `HELLO` describes it, when it answers `HELLO`.
    #[must_use]
    pub fn server(&self) -> Option<&ServerInfo> {
        self.server.as_ref()
    }

    /// How the server answered the probe of `capability`.
    #[must_use]
    pub fn get(&self, capability: Capability) -> &Support {
        let at = Capability::ALL
            .iter()
            .position(|known| *known == capability)
            .expect("every capability is in ALL");
        &self.answers[at]
    }

    /// Whether `capability` can be used: its probe answered, or it was not probed (a backend
    /// made without a probe assumes a full server).
    #[must_use]
    pub fn supports(&self, capability: Capability) -> bool {
        matches!(self.get(capability), Support::Yes | Support::NotProbed)
    }

    /// Every capability with its answer, in the order of [`Capability::ALL`].
    pub fn iter(&self) -> impl Iterator<Item = (Capability, &Support)> {
        Capability::ALL.iter().copied().zip(self.answers.iter())
    }

    /// Whether the backend's connections may name themselves with `CLIENT SETINFO` while
    /// connecting (redis-rs does by default): not where the server hangs up on it or keeps
    /// silent.
    pub(crate) fn names_connections(&self) -> bool {
        !matches!(
            self.get(Capability::ClientSetInfo),
            Support::ClosesConnection | Support::NoAnswer
        )
    }

    /// Whether the server runs scripts: `EVAL` (`EVALSHA` alone cannot run a script the
    /// server lacks after a restart).
    pub(crate) fn runs_scripts(&self) -> bool {
        self.supports(Capability::Eval)
    }

    /// Whether the fast lock can be kept without scripts, on the server's native commands:
    /// `SET … IFEQ` to renew, `DELIFEQ` or `DELEX` to release, `PING <id>` to prove replies in
    /// step. `Err` lists what is missing. A cluster needs scripts all the same
    /// ([`Self::runs_fast_lock_without_scripts`]).
    ///
    /// # Errors
    ///
    /// The capabilities that are missing, when one is.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_core::Error> {
    /// let backend = lock_redis::RedisBackend::connect("redis://127.0.0.1:6379/").await?;
    /// if let Err(missing) = backend.capabilities().keeps_fast_lock_natively() {
    ///     println!("without scripts the fast lock would need {missing:?}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn keeps_fast_lock_natively(&self) -> Result<(), Vec<Capability>> {
        let mut missing = Vec::new();
        if !self.get(Capability::SetIfEq).is_yes() {
            missing.push(Capability::SetIfEq);
        }
        if !self.get(Capability::DelIfEq).is_yes() && !self.get(Capability::DelEx).is_yes() {
            missing.extend([Capability::DelIfEq, Capability::DelEx]);
        }
        if !self.supports(Capability::PingEcho) {
            missing.push(Capability::PingEcho);
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing)
        }
    }

    /// Whether the fast lock runs here although scripts do not: the server keeps it natively
    /// ([`Self::keeps_fast_lock_natively`]) and is not a cluster node (on a cluster a redirect
    /// could split a release from its announcement).
    #[must_use]
    pub fn runs_fast_lock_without_scripts(&self) -> bool {
        let cluster = self
            .server
            .as_ref()
            .is_some_and(|server| server.mode == "cluster");
        !self.runs_scripts() && !cluster && self.keeps_fast_lock_natively().is_ok()
    }

    /// Which lock kinds, primitives, notification modes and guarantees work on the probed
    /// server, and which do not, with the reason (what `distlock doctor` prints).
    ///
    /// # Example
    ///
    /// ```no_run
    /// use lock_redis::{RedisBackend, Standing};
    ///
    /// # async fn demo() -> Result<(), lock_core::Error> {
    /// let found = RedisBackend::builder("redis://127.0.0.1:6379/").probe().await?;
    /// for feature in found.features() {
    ///     if feature.standing != Standing::Works {
    ///         println!("{}: {} ({})", feature.name, feature.standing, feature.reason);
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn features(&self) -> Vec<Feature> {
        let feature = |name, standing, reason: String| Feature {
            name,
            standing,
            reason,
        };
        let scripts = self.runs_scripts();
        let no_scripts = || format!("EVAL: {}", self.get(Capability::Eval));
        let mut features = Vec::new();
        let scripted = |name| {
            if scripts {
                feature(name, Standing::Works, "runs as Lua scripts".into())
            } else {
                feature(name, Standing::Unavailable, no_scripts())
            }
        };
        features.push(scripted(
            "the reentrant lock (LockKind::Reentrant, the default)",
        ));
        let native = [Capability::DelIfEq, Capability::DelEx]
            .into_iter()
            .find(|capability| self.get(*capability).is_yes());
        features.push(match (scripts, native) {
            (true, Some(delete)) => feature(
                "the fast lock (LockKind::Fast)",
                Standing::Works,
                format!("SET NX PX, released with {delete}"),
            ),
            (true, None) => feature(
                "the fast lock (LockKind::Fast)",
                Standing::Works,
                "SET NX PX, released with a script (no native compare-and-delete)".into(),
            ),
            (false, Some(delete)) if self.runs_fast_lock_without_scripts() => feature(
                "the fast lock (LockKind::Fast)",
                Standing::Degraded,
                format!(
                    "{}; without scripts: SET NX PX, renewed with SET IFEQ, released with {delete}, no fencing tokens (one server or Sentinels only)",
                    no_scripts()
                ),
            ),
            (false, _) => feature(
                "the fast lock (LockKind::Fast)",
                Standing::Unavailable,
                format!(
                    "{}; without scripts it needs SET IFEQ, DELIFEQ or DELEX, and PING <id>",
                    no_scripts()
                ),
            ),
        });
        features.push(scripted("fencing tokens (LockOptions::fenced)"));
        features.push(scripted(
            "the family: read-write and fair locks, semaphores, permits, latches, elections",
        ));
        let subscribe = self.get(Capability::Subscribe);
        features.push(if self.supports(Capability::Subscribe) {
            feature("waking waiters at a release", Standing::Works, "SUBSCRIBE".into())
        } else {
            feature(
                "waking waiters at a release",
                Standing::Degraded,
                format!("SUBSCRIBE: {subscribe}; waiters poll every 100 ms (NotificationMode::Polling sets it)"),
            )
        });
        let announce = self.get(Capability::PublishInScript);
        let native_fast = self.runs_fast_lock_without_scripts();
        features.push(if self.supports(Capability::PublishInScript) {
            feature("announcing releases", Standing::Works, "PUBLISH from the releasing scripts".into())
        } else if native_fast && self.supports(Capability::Publish) {
            feature("announcing releases", Standing::Works, "PUBLISH after the fast lock's native release".into())
        } else {
            feature(
                "announcing releases",
                Standing::Degraded,
                format!("PUBLISH in a script: {announce}; subscribed waiters of other clients wake when their poll or the lease they were told of ends"),
            )
        });
        features.push(if self.supports(Capability::ClientInfo) && self.supports(Capability::ClientKill) {
            feature("fencing a replaced connection", Standing::Works, "CLIENT INFO, CLIENT KILL".into())
        } else {
            feature(
                "fencing a replaced connection",
                Standing::Degraded,
                format!(
                    "CLIENT INFO: {}; CLIENT KILL: {}; requests still queued on a lost connection may run after newer ones",
                    self.get(Capability::ClientInfo),
                    self.get(Capability::ClientKill)
                ),
            )
        });
        // Without scripts, how they would be sent does not matter.
        if scripts {
            features.push(if self.supports(Capability::ScriptLoad) {
                feature(
                    "scripts loaded per connection",
                    Standing::Works,
                    "SCRIPT LOAD".into(),
                )
            } else {
                feature(
                    "scripts loaded per connection",
                    Standing::Degraded,
                    format!(
                        "SCRIPT LOAD: {}; each script is sent whole once per server (EVAL)",
                        self.get(Capability::ScriptLoad)
                    ),
                )
            });
        }
        if scripts && !self.supports(Capability::EvalSha) {
            features.push(feature(
                "scripts sent by hash",
                Standing::Degraded,
                format!(
                    "EVALSHA: {}; every script is sent whole every time (EVAL)",
                    self.get(Capability::EvalSha)
                ),
            ));
        }
        features.push(if self.supports(Capability::PingEcho) {
            feature(
                "proving replies in step",
                Standing::Works,
                "PING <id>".into(),
            )
        } else {
            feature(
                "proving replies in step",
                Standing::Degraded,
                format!(
                    "PING <id>: {}; the id is echoed by a one-line script instead",
                    self.get(Capability::PingEcho)
                ),
            )
        });
        let ack = |name, capability: Capability| {
            if self.supports(capability) {
                feature(name, Standing::Works, capability.command().into())
            } else {
                feature(
                    name,
                    Standing::Unavailable,
                    format!("{capability}: {}; connect refuses it", self.get(capability)),
                )
            }
        };
        features.push(ack(
            "replica acknowledgement (ReplicaAck)",
            Capability::Wait,
        ));
        features.push(ack(
            "fsync acknowledgement (ReplicaAck::fsynced)",
            Capability::WaitAof,
        ));
        features
    }

    /// Whether the default lock (the reentrant lock) works on the probed server.
    #[must_use]
    pub fn default_lock_works(&self) -> bool {
        self.runs_scripts()
    }

    /// The capabilities that are not [`Support::Yes`], for one log line.
    #[must_use]
    pub fn missing(&self) -> Vec<Capability> {
        self.iter()
            .filter(|(_, support)| !support.is_yes())
            .map(|(capability, _)| capability)
            .collect()
    }
}

impl fmt::Display for Capabilities {
    /// One line per capability: the command, the answer, what it is for.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(server) = &self.server {
            writeln!(
                f,
                "server: {} {} ({})",
                server.name, server.version, server.mode
            )?;
        }
        for (capability, support) in self.iter() {
            writeln!(
                f,
                "{:<20} {}  [{}]",
                capability.command(),
                support,
                capability.used_for()
            )?;
        }
        Ok(())
    }
}

/// Whether a feature works on the probed server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Standing {
    /// It works as documented.
    Works,
    /// It works in a documented degraded way (the reason says how).
    Degraded,
    /// It is refused when the backend is built, or its calls fail.
    Unavailable,
}

impl fmt::Display for Standing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Standing::Works => "works",
            Standing::Degraded => "degraded",
            Standing::Unavailable => "unavailable",
        })
    }
}

/// One feature of the library on the probed server ([`Capabilities::features`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feature {
    /// The feature, as the docs name it.
    pub name: &'static str,
    /// Whether it works.
    pub standing: Standing,
    /// Why, and what the library does instead.
    pub reason: String,
}

/// How a request id is echoed to prove a pipeline's replies are its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Echo {
    /// `PING <id>`: the server answers with the id (one round of no work).
    Ping,
    /// `EVAL "return ARGV[1]" 1 <key> <id>`, for a proxy that refuses `PING` with an argument
    /// (twemproxy hangs up on it) but passes scripts that name a key. The key is never touched.
    Script,
}

impl Echo {
    /// The echo the probe found usable: `PING <id>` where it answered, else the script.
    pub(crate) fn of(capabilities: &Capabilities) -> Echo {
        if capabilities.supports(Capability::PingEcho) {
            Echo::Ping
        } else {
            Echo::Script
        }
    }

    /// The command that echoes `id`.
    pub(crate) fn command(self, id: u64) -> Cmd {
        match self {
            Echo::Ping => {
                let mut ping = redis::cmd("PING");
                ping.arg(id);
                ping
            }
            Echo::Script => {
                let mut eval = redis::cmd("EVAL");
                eval.arg(ECHO_SCRIPT).arg(1).arg("distlock:echo").arg(id);
                eval
            }
        }
    }
}

/// The script the probe runs: echoes its argument, touching no key.
pub(crate) const ECHO_SCRIPT: &str = "return ARGV[1]";

/// The script that publishes from inside a script.
const PUBLISH_SCRIPT: &str = "return redis.call('publish', ARGV[1], ARGV[2])";

/// The probe's command for `capability`, with `key` as the key it names (a key of its own, so
/// a proxy routes it and nothing is written: the compare-and-set and -delete find it missing)
/// and `channel` as the channel it publishes on. `None` for the pub/sub capabilities, which
/// need a connection of their own.
pub(crate) fn probe_command(capability: Capability, key: &str, channel: &str) -> Option<Cmd> {
    let command = |name: &str| redis::cmd(name);
    Some(match capability {
        Capability::Hello => command("HELLO"),
        Capability::PingEcho => {
            let mut ping = command("PING");
            ping.arg("distlock-probe");
            ping
        }
        Capability::ClientInfo => {
            let mut info = command("CLIENT");
            info.arg("INFO");
            info
        }
        Capability::ClientKill => {
            // Ids count up from 1 and never get near the largest: the kill kills nobody
            // (id 0 is refused as an argument).
            let mut kill = command("CLIENT");
            kill.arg("KILL").arg("ID").arg(i64::MAX);
            kill
        }
        Capability::ClientSetInfo => {
            let mut setinfo = command("CLIENT");
            setinfo.arg("SETINFO").arg("LIB-NAME").arg("distlock");
            setinfo
        }
        Capability::ScriptLoad => {
            let mut load = command("SCRIPT");
            load.arg("LOAD").arg(ECHO_SCRIPT);
            load
        }
        Capability::EvalSha => {
            let mut evalsha = command("EVALSHA");
            evalsha
                .arg(redis::Script::new(ECHO_SCRIPT).get_hash())
                .arg(1)
                .arg(key)
                .arg("ok");
            evalsha
        }
        Capability::Eval => {
            let mut eval = command("EVAL");
            eval.arg(ECHO_SCRIPT).arg(1).arg(key).arg("ok");
            eval
        }
        Capability::EvalKeyless => {
            let mut eval = command("EVAL");
            eval.arg(ECHO_SCRIPT).arg(0).arg("ok");
            eval
        }
        Capability::PublishInScript => {
            let mut eval = command("EVAL");
            eval.arg(PUBLISH_SCRIPT)
                .arg(1)
                .arg(key)
                .arg(channel)
                .arg("probe");
            eval
        }
        Capability::Publish => {
            let mut publish = command("PUBLISH");
            publish.arg(channel).arg("probe");
            publish
        }
        Capability::Subscribe | Capability::SSubscribe => return None,
        Capability::Wait => {
            let mut wait = command("WAIT");
            wait.arg(0).arg(0);
            wait
        }
        Capability::WaitAof => {
            let mut wait = command("WAITAOF");
            wait.arg(0).arg(0).arg(0);
            wait
        }
        Capability::SetIfEq => {
            let mut set = command("SET");
            set.arg(key).arg("probe").arg("IFEQ").arg("probe");
            set
        }
        Capability::DelIfEq => {
            let mut delete = command("DELIFEQ");
            delete.arg(key).arg("probe");
            delete
        }
        Capability::DelEx => {
            let mut delete = command("DELEX");
            delete.arg(key).arg("IFEQ").arg("probe");
            delete
        }
        Capability::ClusterSlots => {
            let mut slots = command("CLUSTER");
            slots.arg("SLOTS");
            slots
        }
    })
}

/// How an answer to a probe reads: a reply the server sent (error replies included), or a
/// transport failure.
pub(crate) fn classify(capability: Capability, answer: &Result<Value, RedisError>) -> Support {
    match answer {
        Ok(Value::ServerError(error)) => {
            let error: RedisError = error.clone().into();
            classify_error(capability, &error)
        }
        Ok(_) => Support::Yes,
        Err(error) if error.is_timeout() => Support::NoAnswer,
        Err(error) if error.is_io_error() || error.is_connection_dropped() => {
            Support::ClosesConnection
        }
        Err(error) if error.code().is_some() => classify_error(capability, error),
        Err(error) => Support::Failed(error.to_string()),
    }
}

/// An error reply to a probe.
fn classify_error(capability: Capability, error: &RedisError) -> Support {
    let text = error.to_string();
    let lower = text.to_ascii_lowercase();
    // Refused for the probe's key or channel only: the command passed the ACL's command check
    // (an unknown command is refused before it), so it exists and may be run on the user's
    // own names. Except `SET … IFEQ`, whose syntax is checked after the ACL: unknown then.
    // Redis: "… access one of the keys / channels …"; Valkey: "No permissions to access a key
    // / a channel".
    let for_a_name = lower.contains("one of the keys")
        || lower.contains("one of the channels")
        || lower.contains("access a key")
        || lower.contains("access a channel")
        || lower.contains("publish to the channel")
        || lower.contains("access at least one of the");
    if for_a_name {
        return if capability == Capability::SetIfEq {
            Support::Failed(text)
        } else {
            Support::Yes
        };
    }
    // A cluster node that does not serve the probe's key sends it on: the command passed
    // every check before the slot's.
    if matches!(error.code(), Some("MOVED" | "ASK")) {
        return if capability == Capability::SetIfEq {
            Support::Failed(text)
        } else {
            Support::Yes
        };
    }
    // The server looked the script up: `EVALSHA` runs (the probe's script may not be loaded,
    // where `SCRIPT LOAD` is refused).
    if capability == Capability::EvalSha && error.code() == Some("NOSCRIPT") {
        return Support::Yes;
    }
    let refused = error.code() == Some("NOPERM")
        || lower.contains("can't run this command")
        || lower.contains("acl failure in script");
    if refused {
        return Support::NotPermitted(text);
    }
    let unknown = lower.contains("unknown command")
        || lower.contains("unknown subcommand")
        || lower.contains("unknown redis command")
        || lower.contains("unknown valkey command")
        || lower.contains("syntax error")
        || lower.contains("cluster support disabled")
        || lower.contains("not supported")
        || lower.contains("unsupported");
    if unknown {
        return Support::Unknown(text);
    }
    Support::Failed(text)
}

/// The server's name, version and mode from a `HELLO` reply (a map in RESP3, a flat array of
/// pairs in RESP2).
pub(crate) fn server_info(reply: &Value) -> Option<ServerInfo> {
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(items) => items
            .chunks_exact(2)
            .map(|pair| (&pair[0], &pair[1]))
            .collect(),
        _ => return None,
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        Value::Int(number) => Some(number.to_string()),
        _ => None,
    };
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(key, _)| text(key).as_deref() == Some(name))
            .and_then(|(_, value)| text(value))
    };
    Some(ServerInfo {
        name: field("server")?,
        version: field("version").unwrap_or_default(),
        mode: field("mode").unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error reply as the server sends it (`-CODE detail`).
    fn error_reply(text: &str) -> Result<Value, RedisError> {
        Ok(redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap())
    }

    #[test]
    fn answers_read_as_the_server_meant_them() {
        let hang_up = || {
            Err(RedisError::from(std::io::Error::from(
                std::io::ErrorKind::BrokenPipe,
            )))
        };
        let cases = [
            (
                Capability::Eval,
                error_reply("MOVED 7252 127.0.0.1:34273"),
                "yes",
            ),
            (
                Capability::Eval,
                error_reply("NOPERM No permissions to access a key"),
                "yes",
            ),
            (
                Capability::Subscribe,
                error_reply("NOPERM No permissions to access a channel"),
                "yes",
            ),
            (
                Capability::Wait,
                error_reply("NOPERM User t has no permissions to run the 'wait' command"),
                "not permitted",
            ),
            (
                Capability::Eval,
                Ok(Value::BulkString(b"ok".to_vec())),
                "yes",
            ),
            (Capability::Eval, hang_up(), "closes"),
            (
                Capability::Eval,
                error_reply(
                    "NOPERM this user has no permissions to access one of the keys used as arguments",
                ),
                "yes",
            ),
            (
                Capability::ClientInfo,
                error_reply("NOPERM this user has no permissions to run the 'client|info' command"),
                "not permitted",
            ),
            (
                Capability::PublishInScript,
                error_reply(
                    "ERR The user executing the script can't publish to the channel mentioned in the command",
                ),
                "yes",
            ),
            (
                Capability::PublishInScript,
                error_reply(
                    "ERR The user executing the script can't run this command or subcommand script: x",
                ),
                "not permitted",
            ),
            (
                Capability::PublishInScript,
                error_reply("ERR Unknown Redis command called from script script: x"),
                "unknown",
            ),
            (
                Capability::DelIfEq,
                error_reply("ERR unknown command 'DELIFEQ', with args beginning with: 'a'"),
                "unknown",
            ),
            (
                Capability::SetIfEq,
                error_reply("ERR syntax error"),
                "unknown",
            ),
            (
                Capability::SetIfEq,
                error_reply(
                    "NOPERM this user has no permissions to access one of the keys used as arguments",
                ),
                "failed",
            ),
            (
                Capability::ClusterSlots,
                error_reply("ERR This instance has cluster support disabled"),
                "unknown",
            ),
            (
                Capability::Wait,
                error_reply("LOADING Redis is loading the dataset in memory"),
                "failed",
            ),
            (
                Capability::EvalSha,
                error_reply("NOSCRIPT No matching script. Please use EVAL."),
                "yes",
            ),
            (
                Capability::Eval,
                error_reply("NOSCRIPT No matching script. Please use EVAL."),
                "failed",
            ),
        ];
        for (capability, answer, expected) in cases {
            let support = classify(capability, &answer);
            assert!(
                support.to_string().starts_with(expected),
                "{capability}: {support} for {answer:?}"
            );
        }
    }

    #[test]
    fn hello_names_the_server_in_either_protocol() {
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let resp2 = Value::Array(vec![
            bulk("server"),
            bulk("valkey"),
            bulk("version"),
            bulk("9.0.1"),
            bulk("proto"),
            Value::Int(2),
            bulk("mode"),
            bulk("standalone"),
        ]);
        let expected = ServerInfo {
            name: "valkey".into(),
            version: "9.0.1".into(),
            mode: "standalone".into(),
        };
        assert_eq!(server_info(&resp2), Some(expected.clone()));
        let resp3 = Value::Map(vec![
            (bulk("server"), bulk("valkey")),
            (bulk("version"), bulk("9.0.1")),
            (bulk("mode"), bulk("standalone")),
        ]);
        assert_eq!(server_info(&resp3), Some(expected));
        assert_eq!(server_info(&Value::Okay), None);
    }

    #[test]
    fn every_capability_has_a_probe_or_a_connection_of_its_own() {
        for capability in Capability::ALL {
            let command = probe_command(capability, "k", "c");
            let pubsub = matches!(capability, Capability::Subscribe | Capability::SSubscribe);
            assert_eq!(command.is_none(), pubsub, "{capability}");
        }
    }
}

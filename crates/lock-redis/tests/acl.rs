//! The least-privilege ACL user of `docs/deployments.md` ("ACL"), read from the document and
//! checked against real servers.
//!
//! Each test makes ACL users from the document's `ACL SETUSER` lines (as the server's default
//! user) and connects as them. With the lines a deployment needs, a tour of every lock
//! operation works: a lock, a re-entry, a contended attempt, a renewal, the state, a second
//! client waiting and woken by the release notification (its subscription seen on the server,
//! its hand-off far shorter than the lease its timer would wait for), the waiter's release and
//! unsubscription, the cleanup after an unknown outcome, a forced release. Then every rule of
//! those lines is taken away in turn, and the tour must fail with `Error::NotPermitted` at a
//! given step or degrade in the documented way (the waiter polls; the release is not announced;
//! the subscription stays): the table of each test says which, so no rule is there without a
//! reason. The same on a 3-primary cluster (with sharded pub/sub) and behind Sentinels, plus
//! fencing tokens, the fast lock, replica acknowledgement, the fence of a replaced connection,
//! the optional lines, and a wrong password.

use std::future::Future;
use std::time::Duration;

use lock_core::{
    AcquireRequest, Error, Fencing, LockBackend, LockOptions, Locker, Owner, ReleaseOutcome, Result,
};
use lock_redis::{Capability, LockKind, RedisBackend, ReplicaAck, ShardedPubSub, keys};
use lock_testkit::{RedisCluster, RedisServer, ReplicatedPair, SentinelGroup};
use tokio::time::{Instant, sleep, timeout};

/// The document the rule is read from.
const DOC: &str = include_str!("../../../docs/deployments.md");
/// The password of the documented user.
const PASSWORD: &str = "secret";

// The comments above the documented lines.
const EVERY_LOCK: &str = "every lock";
const REENTRANT: &str = "the reentrant lock (LockKind::Reentrant, the default)";
const FAST: &str = "the fast lock (LockKind::Fast)";
const FENCING_TOKENS: &str = "fencing tokens (LockOptions::fenced)";
const FENCE: &str = "fencing a replaced command connection (recommended)";
const PRELOAD: &str = "sending the scripts by hash, loaded when connecting (optional)";
const VALKEY_DELETE: &str = "the fast lock's own compare-and-delete on Valkey 9 (optional)";
const REPLICA_ACK: &str = "replica acknowledgement (ReplicaAck)";
const FSYNCED: &str = "replica acknowledgement of fsyncs (ReplicaAck::fsynced)";
const CLUSTER: &str = "a Redis Cluster";
const SHARDED: &str =
    "a Redis Cluster with sharded pub/sub (ShardedPubSub::Auto, the default, or On)";
const SENTINEL_NODES: &str = "a Sentinel service's data nodes";
const SENTINELS: &str = "on each Sentinel, a user of their own (in the Sentinels' URLs)";
const SELECT: &str = "a database other than 0 in the URL (redis://…/2)";
const OPERATORS: &str =
    "reading locks for operators: RedisBackend::describe and list_locks (distlock status, list)";

/// The `ACL SETUSER` lines of the document's ACL section: the comment above each, the user, the
/// rules.
fn documented() -> Vec<(String, String, Vec<String>)> {
    let section = DOC
        .split("\n## ACL")
        .nth(1)
        .expect("docs/deployments.md has an ACL section");
    let block = section
        .split("```text\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the ACL section starts with a text block of ACL SETUSER lines");
    let mut lines = Vec::new();
    let mut comment = None;
    for line in block.lines() {
        if let Some(text) = line.strip_prefix("# ") {
            comment = Some(text.to_owned());
            continue;
        }
        let mut words = line
            .strip_prefix("ACL SETUSER ")
            .unwrap_or_else(|| panic!("not an ACL SETUSER line: {line:?}"))
            .split_whitespace()
            .map(str::to_owned);
        let user = words.next().expect("a user name");
        let comment = comment
            .take()
            .unwrap_or_else(|| panic!("no comment above {line:?}"));
        lines.push((comment, user, words.collect()));
    }
    lines
}

/// The rules of the documented lines with these comments, in order.
fn rules(comments: &[&str]) -> Vec<String> {
    let documented = documented();
    comments
        .iter()
        .flat_map(|comment| {
            let found: Vec<_> = documented
                .iter()
                .filter(|(text, _, _)| text == comment)
                .collect();
            assert_eq!(found.len(), 1, "one documented ACL line for {comment:?}");
            found[0].2.clone()
        })
        .collect()
}

/// The user of the documented line with this comment.
fn user_of(comment: &str) -> String {
    documented()
        .into_iter()
        .find(|(text, _, _)| text == comment)
        .map(|(_, user, _)| user)
        .unwrap_or_else(|| panic!("no documented ACL line for {comment:?}"))
}

/// The rules of the lines with these comments that grant something (not `reset`, `on`, the
/// password), without repeats: what each tour takes away in turn.
fn grants(comments: &[&str]) -> Vec<String> {
    let mut grants: Vec<String> = Vec::new();
    for rule in rules(comments) {
        if !["reset", "on"].contains(&rule.as_str())
            && !rule.starts_with('>')
            && !grants.contains(&rule)
        {
            grants.push(rule);
        }
    }
    grants
}

/// `rules` without every copy of `rule`.
fn without(rules: &[String], rule: &str) -> Vec<String> {
    rules.iter().filter(|r| *r != rule).cloned().collect()
}

/// Runs one command on `server` as its default user (the test's administrator).
fn admin<T: redis::FromRedisValue>(server: &RedisServer, args: &[&str]) -> T {
    let mut connection = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("an administrator's connection");
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command
        .query(&mut connection)
        .unwrap_or_else(|error| panic!("{args:?}: {error}"))
}

/// Makes `user` on `server` with exactly `rules` (the first documented line starts with `reset`).
fn set_user(server: &RedisServer, user: &str, rules: &[String]) {
    let mut args = vec!["ACL", "SETUSER", user];
    args.extend(rules.iter().map(String::as_str));
    admin::<()>(server, &args);
}

/// `redis://user:secret@127.0.0.1:port/`.
fn url_as(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:{PASSWORD}@127.0.0.1:{}/", server.port())
}

/// `PUBSUB <which> channel` on `server`: how many connections subscribe to `channel`.
fn subscribers_on(server: &RedisServer, which: &str, channel: &str) -> u64 {
    let (_, count): (String, u64) = admin(server, &["PUBSUB", which, channel]);
    count
}

/// The objects (commands, keys, channels) `user` was refused since the last `ACL LOG RESET`.
fn refused_objects(server: &RedisServer, user: &str) -> Vec<String> {
    // All of them (the default is the last 10): each connect's capability probe adds a few.
    let entries: Vec<std::collections::HashMap<String, redis::Value>> =
        admin(server, &["ACL", "LOG", "1000"]);
    let text = |value: Option<&redis::Value>| match value {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        other => format!("{other:?}"),
    };
    entries
        .iter()
        .filter(|entry| text(entry.get("username")) == user)
        .map(|entry| text(entry.get("object")))
        .collect()
}

/// `calls=` of `command` in `INFO commandstats` on `server` (0 when it never ran).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info: String = admin(server, &["INFO", "commandstats"]);
    lock_testkit::commandstats::calls_in(&info, command)
}

/// Polls `check` every 20 ms until it holds or `within` has passed; whether it held.
async fn eventually(within: Duration, check: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(20)).await;
    }
}

/// Where the tour runs, and how its user connects there.
enum Place<'a> {
    /// One server.
    One(&'a RedisServer),
    /// A Redis Cluster, with this pub/sub mode.
    Cluster(&'a RedisCluster, ShardedPubSub),
    /// A Sentinel service, its Sentinels reached as this user (or as their default user).
    Sentinel(&'a SentinelGroup, Option<&'a str>),
    /// A primary and its replica, every write acknowledged by the replica.
    Replicated(&'a ReplicatedPair),
}

impl Place<'_> {
    /// The data nodes, where the user must exist.
    fn nodes(&self) -> Vec<&RedisServer> {
        match self {
            Place::One(server) => vec![server],
            Place::Cluster(cluster, _) => (0..cluster.len()).map(|i| cluster.node(i)).collect(),
            Place::Sentinel(group, _) => (0..group.len()).map(|i| group.node(i)).collect(),
            Place::Replicated(pair) => vec![pair.primary(), pair.replica()],
        }
    }

    /// Makes `user` with exactly `rules` on every data node.
    fn set_user(&self, user: &str, rules: &[String]) {
        for node in self.nodes() {
            set_user(node, user, rules);
        }
    }

    /// Removes `user` from every data node (and closes its connections).
    fn delete_user(&self, user: &str) {
        for node in self.nodes() {
            admin::<u64>(node, &["ACL", "DELUSER", user]);
        }
    }

    /// A backend of `kind` connected as `user`.
    async fn connect(&self, user: &str, kind: LockKind) -> Result<RedisBackend> {
        let builder = match self {
            Place::One(server) => RedisBackend::builder(url_as(server, user)),
            Place::Cluster(cluster, mode) => {
                RedisBackend::builder(lock_redis::RedisTarget::cluster(
                    (0..cluster.len()).map(|i| url_as(cluster.node(i), user)),
                ))
                .sharded_pubsub(*mode)
            }
            Place::Sentinel(group, watcher) => {
                let sentinels: Vec<String> = match watcher {
                    Some(watcher) => (0..3).map(|i| url_as(group.sentinel(i), watcher)).collect(),
                    None => group.sentinel_urls(),
                };
                RedisBackend::builder(lock_redis::RedisTarget::sentinel(
                    sentinels,
                    group.service(),
                ))
                .sentinel_node_auth(Some(user.to_owned()), PASSWORD)
            }
            Place::Replicated(pair) => RedisBackend::builder(url_as(pair.primary(), user))
                .replica_ack(ReplicaAck::replicas(1).timeout(Duration::from_millis(300))),
        };
        builder
            .lock_kind(kind)
            .connect_timeout(Duration::from_secs(3))
            .command_timeout(Duration::from_secs(1))
            .connect()
            .await
    }

    /// How many connections wait on `channel` where its releases are announced: plain
    /// subscribers on one server or the primary; on a cluster with `ShardedPubSub::On` sharded
    /// ones on the node serving the channel's slot, else plain ones on the first seed (where
    /// the plain notification connection goes).
    fn subscribers(&self, channel: &str) -> u64 {
        match self {
            Place::One(server) => subscribers_on(server, "NUMSUB", channel),
            Place::Replicated(pair) => subscribers_on(pair.primary(), "NUMSUB", channel),
            Place::Cluster(cluster, mode) if *mode != ShardedPubSub::On => {
                subscribers_on(cluster.node(0), "NUMSUB", channel)
            }
            Place::Cluster(cluster, _) => {
                let slot = cluster.slot_of(channel).expect("CLUSTER KEYSLOT");
                let primary = cluster.primary_of_slot(slot).expect("the slot's primary");
                subscribers_on(cluster.node(primary), "SHARDNUMSUB", channel)
            }
            Place::Sentinel(group, _) => {
                let primary = group.primary().expect("the Sentinels' primary");
                subscribers_on(group.node(primary), "NUMSUB", channel)
            }
        }
    }

    /// Whether a data node refused `user` one of `objects` (commands, keys or channels) since
    /// the last [`Place::clean`].
    fn refused(&self, user: &str, objects: &[&str]) -> bool {
        self.nodes().iter().any(|node| {
            refused_objects(node, user)
                .iter()
                .any(|object| objects.contains(&object.as_str()))
        })
    }

    /// Clears the ACL log of every data node.
    fn forget_refusals(&self) {
        for node in self.nodes() {
            admin::<()>(node, &["ACL", "LOG", "RESET"]);
        }
    }

    /// Empties every primary and its script cache (so the tour's first call of each script
    /// meets `NOSCRIPT`, as after a restart), and clears the ACL log.
    fn clean(&self) {
        for node in self.nodes() {
            let primary = match self {
                Place::Cluster(cluster, _) => {
                    let index = (0..cluster.len())
                        .find(|&i| std::ptr::eq(cluster.node(i), node))
                        .expect("a node of the cluster");
                    cluster.role(index).expect("ROLE")
                }
                Place::Sentinel(group, _) => {
                    std::ptr::eq(group.node(group.primary().expect("primary")), node)
                }
                Place::Replicated(pair) => std::ptr::eq(pair.primary(), node),
                Place::One(_) => true,
            };
            if primary {
                admin::<()>(node, &["FLUSHALL"]);
                admin::<()>(node, &["SCRIPT", "FLUSH"]);
            }
            admin::<()>(node, &["ACL", "LOG", "RESET"]);
        }
    }
}

/// What a tour saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// Every step worked, and the waiter was woken by the release notification.
    Works,
    /// This step failed with `Error::NotPermitted` (any other error fails the test).
    Refused(&'static str),
    /// Every step worked, but the waiter could not subscribe: it polled (woken within the poll
    /// interval, by its own attempts).
    Polls,
    /// Every step worked, but the release was not announced: the subscribed waiter woke when
    /// the lease it was told of ran out.
    Unannounced,
    /// Every step worked, but the waiter's subscription stayed on the server after its wait.
    Leaks,
}

/// The lease of the tour's holds: the subscribed waiter's timer, so a hand-off far shorter
/// than it was a notification's doing.
const TOUR_LEASE: Duration = Duration::from_millis(1500);
/// How long after the waiter subscribed its first attempt has surely been made, on a loaded
/// machine.
const ATTEMPT_MADE: Duration = Duration::from_millis(100);

/// A hand-off longer than this was not a notification (or a poll).
const PROMPT: Duration = Duration::from_millis(500);

/// The result of a step: its value, or the end of the tour at `step` when the server refused
/// (`NotPermitted`); any other error fails the test.
macro_rules! step {
    ($step:literal, $result:expr) => {
        match $result {
            Ok(value) => value,
            Err(Error::NotPermitted(_)) => return Seen::Refused($step),
            Err(other) => panic!("step {:?} failed with {other:?}, not NotPermitted", $step),
        }
    };
}

/// Every lock operation as `user`, on `name`, with `kind` (and fencing tokens when `fencing`).
async fn tour(place: &Place<'_>, user: &str, kind: LockKind, fencing: bool, name: &str) -> Seen {
    // Fencing is a type: one body, two instances.
    if fencing {
        tour_with(place, user, kind, LockOptions::new().fenced(), name).await
    } else {
        tour_with(place, user, kind, LockOptions::new(), name).await
    }
}

async fn tour_with<F: Fencing>(
    place: &Place<'_>,
    user: &str,
    kind: LockKind,
    base: LockOptions<F>,
    name: &str,
) -> Seen {
    place.clean();
    let holder = Locker::new(step!("connect", place.connect(user, kind).await));
    let other = step!("connect", place.connect(user, kind).await);
    // A user the probe found without `SUBSCRIBE` gets a backend whose waiters poll from the
    // start (nothing is refused then).
    let polls = !other.capabilities().supports(Capability::Subscribe);
    let other = Locker::new(other);
    // The capability probe of each connect asks for commands the user may lack (`SSUBSCRIBE`,
    // `WAIT`, ...): the tour reads the refusals of its own steps only.
    place.forget_refusals();
    let options = base.fixed_lease(TOUR_LEASE).no_wait();

    let held = step!("lock", holder.lock_with(name, &options).await);
    if kind == LockKind::Reentrant {
        let inner = step!("re-enter", holder.lock_with(name, &options).await);
        assert_eq!(inner.hold_count(), 2);
        if let (Some(inner), Some(outer)) = (F::token_of(inner.token()), F::token_of(held.token()))
        {
            assert!(inner > outer, "tokens go up");
        }
        assert_eq!(
            step!("release one hold", inner.release().await),
            ReleaseOutcome::StillHeld { hold_count: 1 }
        );
    }
    match other.lock_with(name, &options).await {
        Err(Error::NotAcquired { .. }) => {}
        Err(Error::NotPermitted(_)) => return Seen::Refused("held"),
        other => panic!("step \"held\": {other:?}, not NotAcquired (held by the holder)"),
    }
    // A little longer than the grant's lease: a renewal only lengthens, so with the same
    // lease and both steps within the grant's millisecond it would find nothing to do (and
    // need no `PEXPIRE`).
    step!(
        "renew",
        held.extend(TOUR_LEASE + Duration::from_millis(100)).await
    );
    let state = step!("state", holder.state(name).await);
    assert_eq!(state.holders.len(), 1, "{state:?}");

    // A second client waits; the release must wake it.
    let channel = keys::channel(name);
    let waiting = tokio::spawn({
        let name = name.to_owned();
        async move {
            let wait = LockOptions::new()
                .fixed_lease(TOUR_LEASE)
                .wait(Duration::from_secs(5));
            let guard = other.lock_with(&name, &wait).await;
            (guard, Instant::now(), other)
        }
    });
    // Subscribed, or refused (the ACL log says so): either way the waiter waits by then.
    let subscribing = ["subscribe", "ssubscribe", channel.as_str()];
    eventually(Duration::from_secs(5), || {
        polls || place.subscribers(&channel) >= 1 || place.refused(user, &subscribing)
    })
    .await;
    let subscribed = place.subscribers(&channel) >= 1;
    // The waiter subscribes before its first attempt: give that attempt time to be made (and
    // refused) first, or a waiter that tries only after the release gets the lock at once and a
    // release that could not announce would pass for one that did.
    tokio::time::sleep(ATTEMPT_MADE).await;
    let released_at = Instant::now();
    match held.release().await {
        Ok(outcome) => assert_eq!(outcome, ReleaseOutcome::Released),
        Err(Error::NotPermitted(_)) => {
            waiting.abort();
            return Seen::Refused("release");
        }
        Err(other) => panic!("step \"release\" failed with {other:?}"),
    }
    let (granted, acquired_at, other) = timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter gets the lock once it is free")
        .expect("the waiter's task");
    let guard = step!("wait", granted);
    let handoff = acquired_at.duration_since(released_at);
    assert_eq!(
        step!("release", guard.release().await),
        ReleaseOutcome::Released
    );
    let unsubscribing = ["unsubscribe", "sunsubscribe"];
    eventually(Duration::from_secs(5), || {
        place.subscribers(&channel) == 0 || place.refused(user, &unsubscribing)
    })
    .await;
    let unsubscribed = place.subscribers(&channel) == 0;
    eprintln!(
        "  {user}: hand-off {handoff:?}, subscribed {subscribed}, unsubscribed {unsubscribed}"
    );
    drop(other);

    // The cleanup after an attempt of unknown outcome, and a forced release.
    let backend = holder.backend();
    let owner = Owner::new().field(backend.client_id());
    let request = AcquireRequest {
        name,
        owner_field: &owner,
        lease: TOUR_LEASE,
        fencing: F::WANTED,
        known_holds: 0,
        waits: false,
    };
    step!("abandon", backend.try_acquire(request).await);
    step!("abandon", backend.abandon(name, &owner, 0).await);
    assert!(
        !step!("abandon", holder.is_locked(name).await),
        "given back"
    );
    step!("force release", backend.try_acquire(request).await);
    assert!(step!("force release", holder.force_unlock(name).await));

    if !subscribed {
        assert!(
            handoff < Duration::from_secs(1),
            "an unsubscribed waiter polls: {handoff:?}"
        );
        Seen::Polls
    } else if handoff > PROMPT {
        Seen::Unannounced
    } else if !unsubscribed {
        Seen::Leaks
    } else {
        Seen::Works
    }
}

/// The tour as a user with exactly `rules`, on a user of its own (removed afterwards).
async fn tour_as(
    place: &Place<'_>,
    user: &str,
    rules: &[String],
    kind: LockKind,
    fencing: bool,
) -> Seen {
    place.set_user(user, rules);
    let seen = tour(place, user, kind, fencing, "orders:42").await;
    place.delete_user(user);
    seen
}

/// Runs the tour as a user with the documented `lines` (it must work), then with each grant of
/// the lines `of` taken away in turn (it must do what `expected` says), and prints the table.
async fn every_grant_is_needed(
    place: &Place<'_>,
    what: &str,
    (lines, of): (&[&str], &[&str]),
    kind: LockKind,
    fencing: bool,
    expected: impl Fn(&str) -> Seen,
) {
    let full = rules(lines);
    let started = std::time::Instant::now();
    assert_eq!(
        tour_as(place, "locks", &full, kind, fencing).await,
        Seen::Works,
        "{what}: the documented user"
    );
    let mut failures = Vec::new();
    for (index, grant) in grants(of).iter().enumerate() {
        let user = format!("locks{index}");
        let seen = tour_as(place, &user, &without(&full, grant), kind, fencing).await;
        eprintln!("{what}: without {grant}: {seen:?}");
        if seen != expected(grant) {
            failures.push(format!(
                "without {grant}: saw {seen:?}, expected {:?}",
                expected(grant)
            ));
        }
    }
    eprintln!("{what}: {:?}", started.elapsed());
    assert!(failures.is_empty(), "{what}:\n{}", failures.join("\n"));
}

/// Runs `case` on a multi-threaded runtime (the tours query the servers with blocking calls).
fn run(case: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(async {
            timeout(Duration::from_secs(90), case)
                .await
                .expect("the test hangs");
        });
}

#[test]
fn the_reentrant_lock_needs_every_grant_of_its_lines() {
    run(async {
        let server = RedisServer::start().expect("start redis-server");
        every_grant_is_needed(
            &Place::One(&server),
            "reentrant",
            (&[EVERY_LOCK, REENTRANT], &[EVERY_LOCK, REENTRANT]),
            LockKind::Reentrant,
            false,
            |grant| match grant {
                // Every acquire reads the time left first (`PTTL`): a first hold needs it.
                "~orders:*" | "~redisson_lock_token:{orders:*" | "+pttl" | "+hset" | "+pexpire" => {
                    Seen::Refused("lock")
                }
                "+hexists" | "+hincrby" => Seen::Refused("re-enter"),
                // Only the cleanup looks whether the hash exists.
                "+exists" => Seen::Refused("abandon"),
                "+hget" => Seen::Refused("release one hold"),
                "+type" => Seen::Refused("renew"),
                "+hgetall" => Seen::Refused("state"),
                "+del" => Seen::Refused("release"),
                "+hdel" => Seen::Refused("abandon"),
                // The capability probe finds scripts refused: no lock kind works then.
                "+ping" | "+eval" => Seen::Refused("connect"),
                "&redisson_lock__channel:{orders:*" | "+subscribe" => Seen::Polls,
                "+publish" => Seen::Unannounced,
                "+unsubscribe" => Seen::Leaks,
                other => panic!("no expectation for {other}"),
            },
        )
        .await;
    });
}

#[test]
fn the_fast_lock_needs_every_grant_of_its_lines() {
    run(async {
        let server = RedisServer::start().expect("start redis-server");
        every_grant_is_needed(
            &Place::One(&server),
            "fast",
            (&[EVERY_LOCK, FAST], &[EVERY_LOCK, FAST]),
            LockKind::Fast,
            false,
            |grant| match grant {
                "~orders:*" | "+set" => Seen::Refused("lock"),
                "+pttl" => Seen::Refused("held"),
                "+pexpire" | "+type" | "+get" => Seen::Refused("renew"),
                "+del" => Seen::Refused("release"),
                "+ping" | "+eval" => Seen::Refused("connect"),
                "&redisson_lock__channel:{orders:*" | "+subscribe" => Seen::Polls,
                "+publish" => Seen::Unannounced,
                "+unsubscribe" => Seen::Leaks,
                other => panic!("no expectation for {other}"),
            },
        )
        .await;
    });
}

#[test]
fn fencing_tokens_need_their_line() {
    run(async {
        let server = RedisServer::start().expect("start redis-server");
        for (kind, line) in [(LockKind::Reentrant, REENTRANT), (LockKind::Fast, FAST)] {
            every_grant_is_needed(
                &Place::One(&server),
                &format!("fencing tokens, {kind:?}"),
                (&[EVERY_LOCK, line, FENCING_TOKENS], &[FENCING_TOKENS]),
                kind,
                true,
                |grant| match grant {
                    "~redisson_lock_token:{orders:*" | "+time" | "+get" | "+set" => {
                        Seen::Refused("lock")
                    }
                    // The fast lock's fenced acquire looks whether the key exists; the
                    // reentrant acquire reads its time left instead, and only its cleanup
                    // looks.
                    "+exists" if kind == LockKind::Fast => Seen::Refused("lock"),
                    "+exists" => Seen::Refused("abandon"),
                    other => panic!("no expectation for {other}"),
                },
            )
            .await;
        }
    });
}

/// Replica acknowledgement: `WAIT` after every write. Without it a grant is given back and
/// refused (`NotPermitted`), and nothing is left on the primary.
#[test]
fn replica_acknowledgement_needs_wait() {
    run(async {
        let pair = ReplicatedPair::start().expect("start a primary and a replica");
        let place = Place::Replicated(&pair);
        for (kind, line) in [(LockKind::Reentrant, REENTRANT), (LockKind::Fast, FAST)] {
            every_grant_is_needed(
                &place,
                &format!("replica acknowledgement, {kind:?}"),
                (&[EVERY_LOCK, line, REPLICA_ACK], &[REPLICA_ACK]),
                kind,
                false,
                |grant| match grant {
                    // The capability probe finds `WAIT` refused: no grant is ever made.
                    "+wait" => Seen::Refused("connect"),
                    other => panic!("no expectation for {other}"),
                },
            )
            .await;
            place.clean();
            place.set_user(
                "nowait",
                &without(&rules(&[EVERY_LOCK, line, REPLICA_ACK]), "+wait"),
            );
            let refused = place.connect("nowait", kind).await;
            assert!(
                matches!(&refused, Err(Error::NotPermitted(cause)) if cause.to_string().contains("+wait")),
                "{kind:?}: {refused:?}"
            );
            let left: u64 = admin(pair.primary(), &["DBSIZE"]);
            assert_eq!(left, 0, "{kind:?}: nothing written");
            place.delete_user("nowait");
        }
    });
}

/// A wrong password, or a user that does not exist, is refused when connecting.
#[test]
fn bad_credentials_are_refused_when_connecting() {
    run(async {
        let server = RedisServer::start().expect("start redis-server");
        set_user(&server, "locks", &rules(&[EVERY_LOCK, REENTRANT]));
        for url in [
            format!("redis://locks:wrong@127.0.0.1:{}/", server.port()),
            format!("redis://nobody:{PASSWORD}@127.0.0.1:{}/", server.port()),
        ] {
            let refused = RedisBackend::connect(url.as_str()).await;
            assert!(
                matches!(refused, Err(Error::NotPermitted(_))),
                "{url}: {refused:?}"
            );
        }
        RedisBackend::connect(url_as(&server, "locks"))
            .await
            .expect("the right password");
        // A database other than 0: redis-rs selects it when connecting.
        let database = format!("redis://locks:{PASSWORD}@127.0.0.1:{}/2", server.port());
        let refused = RedisBackend::connect(database.as_str()).await;
        assert!(
            matches!(refused, Err(Error::NotPermitted(_))),
            "{refused:?}"
        );
        set_user(&server, "locks", &rules(&[EVERY_LOCK, REENTRANT, SELECT]));
        let locker = Locker::new(RedisBackend::connect(database).await.expect("SELECT 2"));
        let guard = locker.lock("orders:1").await.expect("lock in database 2");
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    });
}

/// Names that start with a hash tag (`{orders:7}:cart`) take the documented patterns with the
/// brace: `~{orders:*`, and `{orders:*` after the derived names' prefixes (which add no brace
/// of their own to such a name).
#[test]
fn hash_tagged_names_take_the_prefix_with_its_brace() {
    run(async {
        let server = RedisServer::start().expect("start redis-server");
        let place = Place::One(&server);
        let tagged: Vec<String> = rules(&[EVERY_LOCK, REENTRANT, FENCING_TOKENS])
            .into_iter()
            .map(|rule| {
                if rule == "~orders:*" {
                    "~{orders:*".to_owned()
                } else {
                    rule
                }
            })
            .collect();
        place.set_user("locks", &tagged);
        let seen = tour(
            &place,
            "locks",
            LockKind::Reentrant,
            true,
            "{orders:7}:cart",
        )
        .await;
        assert_eq!(seen, Seen::Works);
        place.delete_user("locks");
    });
}

/// The fence of a replaced command connection (`CLIENT INFO` when connecting, `CLIENT KILL` of
/// the old connection before the new one is used): with the line it runs; without it (or
/// either half) the replacement goes ahead unfenced, the refusal in the ACL log.
#[test]
fn the_fence_of_a_replaced_connection_needs_its_line() {
    run(async {
        let server = RedisServer::start().expect("start redis-server");
        let place = Place::One(&server);
        let base = rules(&[EVERY_LOCK, REENTRANT]);
        let full = rules(&[EVERY_LOCK, REENTRANT, FENCE]);
        for (rules, fenced, refused) in [
            (full.clone(), true, None),
            (base, false, Some("client|info")),
            (without(&full, "+client|info"), false, Some("client|info")),
            (without(&full, "+client|kill"), false, Some("client|kill")),
        ] {
            place.clean();
            place.set_user("locks", &rules);
            let locker = Locker::new(place.connect("locks", LockKind::Reentrant).await.unwrap());
            let guard = locker.lock("orders:1").await.expect("lock");
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            // The command connection dies; the next call replaces it. Twice: the first
            // replacement is followed by the capability probe (its own `CLIENT KILL` of no
            // one would count), which then waits 10 s before it runs again, so the second
            // replacement's count is the fence's alone.
            for counted in [false, true] {
                server
                    .kill_normal_clients()
                    .expect("CLIENT KILL TYPE normal");
                if counted {
                    admin::<()>(&server, &["CONFIG", "RESETSTAT"]);
                }
                let deadline = Instant::now() + Duration::from_secs(3);
                let guard = loop {
                    match locker.lock("orders:1").await {
                        Ok(guard) => break guard,
                        Err(error) if error.is_retryable() && Instant::now() < deadline => {}
                        Err(error) => panic!("{refused:?}: {error:?}"),
                    }
                };
                assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
                if !counted {
                    // Time for the probe after the first replacement to end.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            let kills = calls(&server, "client|kill");
            let log = refused_objects(&server, "locks");
            eprintln!("fence, refused {refused:?}: CLIENT KILL ran {kills} times; ACL log {log:?}");
            assert_eq!(kills >= 1, fenced, "{refused:?}");
            let logged = |object: &str| log.iter().any(|o| o == object);
            match refused {
                None => assert!(!logged("client|info") && !logged("client|kill"), "{log:?}"),
                Some(object) => assert!(logged(object), "{object}: {log:?}"),
            }
            place.delete_user("locks");
        }
    });
}

/// `SCRIPT LOAD` when connecting is optional: with it the scripts go by hash from the first
/// call; without it (refused, in the ACL log) the first call of each script meets `NOSCRIPT`
/// and is sent whole, once.
#[test]
fn loading_the_scripts_is_optional() {
    run(async {
        let server = RedisServer::start().expect("start redis-server");
        let place = Place::One(&server);
        for (lines, loaded) in [
            (&[EVERY_LOCK, REENTRANT, PRELOAD][..], true),
            (&[EVERY_LOCK, REENTRANT][..], false),
        ] {
            place.clean();
            admin::<()>(&server, &["CONFIG", "RESETSTAT"]);
            place.set_user("locks", &rules(lines));
            let locker = Locker::new(place.connect("locks", LockKind::Reentrant).await.unwrap());
            // The capability probe's own `EVAL`s (the one without a key runs) are not the
            // lock's.
            let probed = calls(&server, "eval");
            let guard = locker.lock("orders:1").await.expect("lock");
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            let (loads, whole) = (
                calls(&server, "script|load"),
                calls(&server, "eval") - probed,
            );
            let log = refused_objects(&server, "locks");
            eprintln!("preload {loaded}: SCRIPT LOAD {loads}, EVAL {whole}, ACL log {log:?}");
            if loaded {
                assert!(loads >= 10, "every script loaded: {loads}");
                assert_eq!(whole, 0, "nothing sent whole");
                assert!(!log.iter().any(|o| o == "script|load"), "{log:?}");
            } else {
                assert_eq!(loads, 0);
                assert_eq!(whole, 2, "the acquire and release scripts sent whole once");
                assert!(log.iter().any(|o| o == "script|load"), "{log:?}");
            }
            place.delete_user("locks");
        }
    });
}

/// A 3-primary cluster: the tour with sharded pub/sub (`ShardedPubSub::On`) takes each grant of
/// the cluster lines away; the default `Auto` works with and without the sharded line (plain
/// pub/sub then); a lock whose slot is being moved needs `ASKING`.
#[test]
fn a_cluster_needs_its_lines() {
    run(async {
        let cluster = RedisCluster::start(3, 0).expect("start a 3-primary cluster");
        let lines = [EVERY_LOCK, REENTRANT, CLUSTER, SHARDED];
        let sharded = Place::Cluster(&cluster, ShardedPubSub::On);
        every_grant_is_needed(
            &sharded,
            "cluster, sharded pub/sub",
            (&lines, &[CLUSTER, SHARDED]),
            LockKind::Reentrant,
            false,
            |grant| match grant {
                "+cluster|slots" | "+asking" | "+pubsub|shardnumsub" => Seen::Refused("connect"),
                "+ssubscribe" => Seen::Polls,
                "+sunsubscribe" => Seen::Leaks,
                "+spublish" => Seen::Unannounced,
                other => panic!("no expectation for {other}"),
            },
        )
        .await;

        let auto = Place::Cluster(&cluster, ShardedPubSub::Auto);
        for (user, lines) in [
            ("locks", &lines[..]),
            ("plain", &[EVERY_LOCK, REENTRANT, CLUSTER][..]),
        ] {
            let seen = tour_as(&auto, user, &rules(lines), LockKind::Reentrant, false).await;
            assert_eq!(seen, Seen::Works, "Auto, {lines:?}");
        }

        // A lock whose key has moved to the new node while its slot moves is released there,
        // after `ASK`, with `ASKING` first (without `+asking` the user cannot connect: above).
        let name = "orders:moving";
        let slot = cluster.slot_of(name).expect("CLUSTER KEYSLOT");
        let from = cluster.primary_of_slot(slot).expect("the slot's primary");
        let to = (from + 1) % cluster.len();
        let slot = slot.to_string();
        let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
        let to_port = cluster.node(to).port().to_string();
        sharded.clean();
        sharded.set_user("locks", &rules(&lines));
        let locker = Locker::new(sharded.connect("locks", LockKind::Reentrant).await.unwrap());
        let guard = locker.lock(name).await.expect("lock");
        admin::<()>(
            cluster.node(to),
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", from_id],
        );
        admin::<()>(
            cluster.node(from),
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", to_id],
        );
        let migrate = [
            "MIGRATE",
            "127.0.0.1",
            &to_port,
            "",
            "0",
            "5000",
            "KEYS",
            name,
        ];
        admin::<()>(cluster.node(from), &migrate);
        let asked = calls(cluster.node(to), "asking");
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        assert!(
            calls(cluster.node(to), "asking") > asked,
            "released after ASKING"
        );
        for node in [from, to] {
            admin::<()>(cluster.node(node), &["CLUSTER", "SETSLOT", &slot, "STABLE"]);
        }
        sharded.delete_user("locks");
    });
}

/// Behind Sentinels: redis-rs asks a data node the Sentinels name for its `ROLE` before using
/// it. The Sentinels get a user of their own: looking the primary up takes `ROLE` and
/// `SENTINEL MASTERS`; following failovers a subscription to `+switch-master` (refused, the
/// backend still works, without following switches: nothing subscribes on the Sentinels, and
/// their ACL log has the refusal).
#[test]
fn behind_sentinels_each_side_needs_its_line() {
    run(async {
        let group = SentinelGroup::start(1).expect("start a Sentinel group");
        let lines = [EVERY_LOCK, REENTRANT, SENTINEL_NODES];
        every_grant_is_needed(
            &Place::Sentinel(&group, None),
            "Sentinel data nodes",
            (&lines, &[SENTINEL_NODES]),
            LockKind::Reentrant,
            false,
            |grant| match grant {
                "+role" => Seen::Refused("connect"),
                other => panic!("no expectation for {other}"),
            },
        )
        .await;

        let watcher = user_of(SENTINELS);
        let watching = rules(&[SENTINELS]);
        let sentinels: Vec<&RedisServer> = (0..3).map(|i| group.sentinel(i)).collect();
        // Whether a connection of the watcher subscribes on some Sentinel.
        let followed = || {
            sentinels.iter().any(|sentinel| {
                sentinel
                    .client_list()
                    .expect("CLIENT LIST")
                    .iter()
                    .any(|client| {
                        client.get("user") == Some(watcher.as_str()) && client.subscriptions() >= 1
                    })
            })
        };
        let mut cases = vec![(None, Seen::Works)];
        for grant in grants(&[SENTINELS]) {
            let seen = match grant.as_str() {
                "+role" | "+sentinel|masters" => Seen::Refused("connect"),
                // The tour works; the switches are not followed (checked below).
                "+subscribe" | "&+switch-master" => Seen::Works,
                other => panic!("no expectation for {other}"),
            };
            cases.push((Some(grant), seen));
        }
        let place = Place::Sentinel(&group, Some(&watcher));
        for (taken, expected) in cases {
            let granted = match &taken {
                Some(grant) => without(&watching, grant),
                None => watching.clone(),
            };
            for sentinel in &sentinels {
                set_user(sentinel, &watcher, &granted);
                admin::<()>(sentinel, &["ACL", "LOG", "RESET"]);
            }
            let seen = tour_as(&place, "locks", &rules(&lines), LockKind::Reentrant, false).await;
            eprintln!("Sentinels: without {taken:?}: {seen:?}");
            assert_eq!(seen, expected, "Sentinels without {taken:?}");
            if seen == Seen::Works {
                // A backend that lives long enough to subscribe, or to be refused.
                place.set_user("locks", &rules(&lines));
                let backend = place.connect("locks", LockKind::Reentrant).await.unwrap();
                let subscribed = eventually(Duration::from_secs(1), followed).await;
                assert_eq!(subscribed, taken.is_none(), "Sentinels without {taken:?}");
                if let Some(grant) = &taken {
                    // `subscribe`, or the channel `+switch-master`.
                    let object = &grant[1..];
                    let log: Vec<String> = sentinels
                        .iter()
                        .flat_map(|sentinel| refused_objects(sentinel, &watcher))
                        .collect();
                    assert!(log.iter().any(|o| o == object), "{object}: {log:?}");
                }
                drop(backend);
                place.delete_user("locks");
            }
            for sentinel in &sentinels {
                admin::<u64>(sentinel, &["ACL", "DELUSER", &watcher]);
            }
        }
    });
}

/// The watchdog renews a lease past its length as the documented user, for both kinds;
/// without `+type` (renewals are scripts that look at the key's type first) the lease is lost.
#[test]
fn the_watchdog_renews_as_the_documented_user() {
    run(async {
        let server = RedisServer::start().expect("start redis-server");
        let place = Place::One(&server);
        let lease = Duration::from_millis(300);
        for (kind, line) in [(LockKind::Reentrant, REENTRANT), (LockKind::Fast, FAST)] {
            for (user, granted, kept) in [
                ("locks", rules(&[EVERY_LOCK, line]), true),
                (
                    "notype",
                    without(&rules(&[EVERY_LOCK, line]), "+type"),
                    false,
                ),
            ] {
                place.clean();
                place.set_user(user, &granted);
                let locker = Locker::new(place.connect(user, kind).await.expect("connect"));
                let options = LockOptions::new().watchdog_lease(lease);
                let guard = locker.lock_with("orders:9", &options).await.unwrap();
                let first_deadline = guard.valid_until();
                sleep(lease * 3).await;
                eprintln!("watchdog, {kind:?}, {user}: lost {}", guard.is_lost());
                assert_eq!(!guard.is_lost(), kept, "{kind:?}, {user}");
                if kept {
                    assert!(guard.valid_until() > first_deadline + lease, "renewed");
                    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
                }
                place.delete_user(user);
            }
        }
    });
}

/// A script the ACL stops midway keeps the writes it made before (Redis does not roll a script
/// back): without `+pexpire`, the first hold's `HSET` stays, with no expiry. Why each line is
/// granted whole.
#[test]
fn a_script_stopped_midway_keeps_its_first_writes() {
    run(async {
        let server = RedisServer::start().expect("start redis-server");
        let place = Place::One(&server);
        place.clean();
        place.set_user(
            "locks",
            &without(&rules(&[EVERY_LOCK, REENTRANT]), "+pexpire"),
        );
        let locker = Locker::new(place.connect("locks", LockKind::Reentrant).await.unwrap());
        let refused = locker.try_lock("orders:5").await;
        assert!(
            matches!(refused, Err(Error::NotPermitted(_))),
            "{refused:?}"
        );
        let pttl: i64 = admin(&server, &["PTTL", "orders:5"]);
        assert_eq!(pttl, -1, "the hash was written and has no expiry");
        place.delete_user("locks");
    });
}

/// Whether `server` knows `command` (`COMMAND INFO`).
fn knows(server: &RedisServer, command: &str) -> bool {
    let info: Vec<redis::Value> = admin(server, &["COMMAND", "INFO", command]);
    !matches!(info.first(), None | Some(redis::Value::Nil))
}

/// The fast lock's own compare-and-delete (Valkey 9 `DELIFEQ`): used with its line; without
/// it the capability probe finds `DELIFEQ` refused and the script releases. Skipped on a
/// server without `DELIFEQ`.
#[test]
fn the_native_compare_and_delete_needs_its_grant() {
    run(async {
        let server = RedisServer::start().expect("start the server");
        if !knows(&server, "DELIFEQ") {
            eprintln!("skipped: {} has no DELIFEQ", server.version());
            return;
        }
        let place = Place::One(&server);
        let full = rules(&[EVERY_LOCK, FAST, VALKEY_DELETE]);
        // The capability probe asks `DELIFEQ` itself: without the grant the release script
        // goes instead.
        for (granted, expected, native) in [
            (full.clone(), Seen::Works, true),
            (without(&full, "+delifeq"), Seen::Works, false),
        ] {
            admin::<()>(&server, &["CONFIG", "RESETSTAT"]);
            let seen = tour_as(&place, "locks", &granted, LockKind::Fast, false).await;
            let deletes = calls(&server, "delifeq");
            eprintln!("native delete, {granted:?}: {seen:?}, DELIFEQ ran {deletes} times");
            assert_eq!(seen, expected, "{granted:?}");
            if seen == Seen::Works {
                assert_eq!(deletes >= 1, native, "{granted:?}");
            }
        }
    });
}

/// Replica acknowledgement of fsyncs: the `WAITAOF` probe when connecting needs `+waitaof`
/// (refused: `NotPermitted`, not the "server has no WAITAOF" of `InvalidConfig`). Skipped on
/// a server without `WAITAOF` (Redis before 7.2).
#[test]
fn fsynced_acknowledgement_needs_waitaof() {
    run(async {
        let server =
            RedisServer::start_with(lock_testkit::ServerOptions::new().aof_fsync_always(true))
                .expect("start the server");
        if !knows(&server, "WAITAOF") {
            eprintln!("skipped: {} has no WAITAOF", server.version());
            return;
        }
        let full = rules(&[EVERY_LOCK, REENTRANT, FSYNCED]);
        for (granted, permitted) in [(full.clone(), true), (without(&full, "+waitaof"), false)] {
            set_user(&server, "locks", &granted);
            let connected = RedisBackend::builder(url_as(&server, "locks"))
                .replica_ack(ReplicaAck::replicas(1).fsynced())
                .connect()
                .await;
            match connected {
                Ok(_) if permitted => {}
                Err(Error::NotPermitted(_)) if !permitted => {}
                other => panic!("permitted {permitted}: {other:?}"),
            }
        }
    });
}

/// Every documented line is one a test here makes its users from, except the Redis 8.4 one
/// (no such server on our machines): a line added to the document without a test fails here.
#[test]
fn every_documented_line_is_tested() {
    let tested = [
        EVERY_LOCK,
        REENTRANT,
        FAST,
        FENCING_TOKENS,
        FENCE,
        PRELOAD,
        VALKEY_DELETE,
        REPLICA_ACK,
        FSYNCED,
        CLUSTER,
        SHARDED,
        SELECT,
        SENTINEL_NODES,
        SENTINELS,
        OPERATORS,
    ];
    let untested = ["the fast lock's own compare-and-delete on Redis 8.4 (optional)"];
    let mut documented: Vec<String> = documented().into_iter().map(|(text, _, _)| text).collect();
    documented.sort();
    let mut known: Vec<String> = tested
        .iter()
        .chain(&untested)
        .map(|t| (*t).to_owned())
        .collect();
    known.sort();
    assert_eq!(documented, known);
}

/// The operators' line: with it (and the line every lock needs) `describe` and `list_locks`
/// read a held lock and its fencing counter; without any one of its grants, one of them is
/// refused with `NotPermitted`.
#[test]
fn operators_read_locks_with_exactly_their_line() {
    run(async {
        let server = RedisServer::start().expect("start redis-server");
        // A reentrant lock with a fencing counter, written as a holder would.
        admin::<()>(&server, &["HSET", "orders:1", "c0ffee:7", "2"]);
        admin::<()>(&server, &["PEXPIRE", "orders:1", "30000"]);
        admin::<()>(&server, &["SET", "redisson_lock_token:{orders:1}", "41"]);
        let read = |user: &'static str| {
            let url = url_as(&server, user);
            async move {
                let backend = RedisBackend::connect(url.as_str()).await?;
                let lock = backend.describe("orders:1").await?;
                let list = backend.list_locks("orders:*", 100).await?;
                Ok::<_, Error>((lock, list))
            }
        };
        set_user(&server, "reader", &rules(&[EVERY_LOCK, OPERATORS]));
        let (lock, list) = read("reader")
            .await
            .expect("read with the documented lines");
        assert_eq!(lock.holders, vec![("c0ffee:7".to_owned(), 2)]);
        assert_eq!(lock.fencing_counter, Some(41));
        assert_eq!(list.locks.len(), 1);
        for grant in grants(&[OPERATORS]) {
            set_user(
                &server,
                "lacking",
                &without(&rules(&[EVERY_LOCK, OPERATORS]), &grant),
            );
            let refused = read("lacking").await;
            assert!(
                matches!(refused, Err(Error::NotPermitted(_))),
                "without {grant}: {refused:?}"
            );
            admin::<()>(&server, &["ACL", "DELUSER", "lacking"]);
        }
    });
}

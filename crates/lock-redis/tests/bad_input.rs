//! Every input the API rejects, and every server error it maps, against real servers.
//!
//! - Rejected inputs (`docs/design.md`, "Inputs rejected before any I/O"): each call goes through a
//!   [`FaultProxy`], whose byte counter proves that **nothing** reached the server, and each
//!   returns a typed input error ([`Error::is_input_error`]) within a second.
//! - Server errors (`WRONGTYPE`, `READONLY`, `NOPERM`, `OOM`): each is its own [`Error`] kind,
//!   returned within a second, and leaves nothing of ours on the server.
//! - Property tests: random names (any Unicode, stray braces, lengths around the 4096-byte cap)
//!   and random durations (0 to `Duration::MAX`, every boundary) never panic; invalid ones are
//!   input errors with no byte sent, valid ones work against a real server.

use std::cell::Cell;
use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use lock_core::options::{MAX_DURATION, MAX_NAME_LEN, MIN_LEASE};
use lock_core::{Error, LockOptions, Locker, MemoryBackend, Owner, ReleaseOutcome};
use lock_redis::{NotificationMode, RedisBackend, keys};
use lock_testkit::{FaultProxy, RedisServer, ReplicatedPair, ServerOptions};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, sleep, timeout};

/// Every rejection and every server error must come back within this.
const PROMPT: Duration = Duration::from_secs(1);
const NANO: Duration = Duration::from_nanos(1);

async fn query<T: redis::FromRedisValue>(con: &mut MultiplexedConnection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(con).await.expect("raw command")
}

async fn all_keys(con: &mut MultiplexedConnection) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor = "0".to_owned();
    loop {
        let (next, batch): (String, Vec<String>) =
            query(con, &["SCAN", &cursor, "COUNT", "1000"]).await;
        keys.extend(batch);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys
}

/// A server, a proxy in front of it, and a locker that talks to the server only through the
/// proxy (so `proxy.bytes_to_server()` counts every byte the library sends).
struct Proxied {
    _server: RedisServer,
    proxy: FaultProxy,
    locker: Locker<RedisBackend>,
}

async fn proxied() -> Proxied {
    let server = RedisServer::start().expect("start redis-server");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let locker = Locker::new(RedisBackend::connect(proxy.url()).await.expect("connect"));
    Proxied {
        _server: server,
        proxy,
        locker,
    }
}

/// Runs one call that must be rejected before any I/O: returns its error after checking that it
/// came within [`PROMPT`], is an input error (not retryable, not ambiguous), and that not one
/// byte reached the server meanwhile and no connection was opened.
async fn rejected<T: Debug>(
    proxy: &FaultProxy,
    what: &str,
    call: impl Future<Output = lock_core::Result<T>>,
) -> Error {
    let bytes = proxy.bytes_to_server();
    let connections = proxy.connections();
    let started = Instant::now();
    let result = timeout(PROMPT, call)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {PROMPT:?}"));
    let took = started.elapsed();
    let error = match result {
        Ok(value) => panic!("{what}: accepted, got {value:?}"),
        Err(error) => error,
    };
    assert!(error.is_input_error(), "{what}: {error:?}");
    assert!(!error.is_retryable(), "{what}: {error:?}");
    assert!(!error.is_ambiguous(), "{what}: {error:?}");
    assert!(took < PROMPT, "{what}: took {took:?}");
    assert_eq!(
        proxy.bytes_to_server(),
        bytes,
        "{what}: bytes reached the server"
    );
    assert_eq!(
        proxy.connections(),
        connections,
        "{what}: a connection was opened"
    );
    error
}

fn is_invalid_name(error: &Error) -> bool {
    matches!(error, Error::InvalidName { .. })
}

fn is_invalid_options(error: &Error) -> bool {
    matches!(error, Error::InvalidOptions { .. })
}

fn is_invalid_config(error: &Error) -> bool {
    matches!(error, Error::InvalidConfig { .. })
}

/// Names that every entry point must refuse, with why.
fn bad_names() -> Vec<(String, &'static str)> {
    vec![
        (String::new(), "empty"),
        ("n".repeat(MAX_NAME_LEN + 1), "4097 ASCII bytes"),
        ("é".repeat(2049), "2049 chars but 4098 bytes"),
        (
            format!("{{tag}}{}", "x".repeat(MAX_NAME_LEN - 4)),
            "a tagged name of 4097 bytes",
        ),
        ("a{}b".into(), "empty hash tag"),
        ("{}".into(), "only an empty hash tag"),
        (
            "{}{tag}".into(),
            "empty first tag (Redis only reads the first `{`)",
        ),
        ("x{}{y}".into(), "empty first tag after a prefix"),
        ("a}b".into(), "a lone `}`"),
        ("}".into(), "only `}`"),
        ("a{b".into(), "an unclosed `{`"),
        ("{".into(), "only `{`"),
        ("}{".into(), "`}` before `{`"),
        ("}x{".into(), "`}` then an unclosed `{`"),
        ("x{\u{0}".into(), "an unclosed `{` before a NUL"),
        (
            "a:distlock_waiting:{a}".into(),
            "the waiting mark of the fast lock `a`, which a release of `a` deletes",
        ),
        (
            "{t}:a:distlock_waiting".into(),
            "the waiting mark of the fast lock `{t}:a`",
        ),
    ]
}

/// Options that `lock_with` must refuse, with why.
fn bad_options() -> Vec<(LockOptions, &'static str)> {
    let sub_minimum = MIN_LEASE - NANO;
    let over_a_year = MAX_DURATION + NANO;
    let mut table = Vec::new();
    for (lease, why) in [
        (Duration::ZERO, "zero"),
        (NANO, "1 ns"),
        (Duration::from_millis(1), "1 ms"),
        (sub_minimum, "10 ms - 1 ns"),
        (over_a_year, "one year + 1 ns"),
        (Duration::from_secs(u64::MAX), "u64::MAX s"),
        (Duration::MAX, "Duration::MAX"),
    ] {
        table.push((LockOptions::new().fixed_lease(lease), why));
        table.push((LockOptions::new().watchdog_lease(lease), why));
        table.push((LockOptions::new().no_wait().fixed_lease(lease), why));
        table.push((
            LockOptions::new()
                .watchdog_lease(lease)
                .max_hold(Duration::from_secs(1)),
            why,
        ));
    }
    for (max_hold, why) in [
        (Duration::ZERO, "max_hold zero"),
        (over_a_year, "max_hold one year + 1 ns"),
        (Duration::MAX, "max_hold Duration::MAX"),
    ] {
        table.push((LockOptions::new().max_hold(max_hold), why));
        table.push((
            LockOptions::new()
                .watchdog_lease(Duration::from_secs(1))
                .max_hold(max_hold),
            why,
        ));
    }
    for (wait, why) in [
        (Duration::ZERO, "wait zero"),
        (over_a_year, "wait one year + 1 ns"),
        (Duration::from_secs(u64::MAX), "wait u64::MAX s"),
        (Duration::MAX, "wait Duration::MAX"),
    ] {
        table.push((LockOptions::new().wait(wait), why));
        table.push((
            LockOptions::new()
                .fixed_lease(Duration::from_secs(1))
                .wait(wait),
            why,
        ));
    }
    table
}

#[tokio::test]
async fn every_rejected_input_is_typed_prompt_and_sends_nothing() {
    let Proxied {
        _server,
        proxy,
        locker,
    } = proxied().await;
    let locker = &locker;
    // A live guard for `extend`, and proof that the proxy carries the library's traffic. Fixed
    // lease: no watchdog traffic can run during the table.
    let before_guard = proxy.bytes_to_server();
    let fixed = locker
        .lock_with(
            "live:fixed",
            &LockOptions::new().fixed_lease(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    // A watchdog guard whose first renewal is months away (one-year lease, renewed every 1/3).
    let watched = locker
        .lock_with(
            "live:watched",
            &LockOptions::new().watchdog_lease(MAX_DURATION),
        )
        .await
        .unwrap();
    assert!(
        proxy.bytes_to_server() > before_guard,
        "the locker's traffic goes through the proxy"
    );
    sleep(Duration::from_millis(50)).await;
    let table_start = proxy.bytes_to_server();
    let mut checked = 0;

    // Names, through every call that takes one.
    let valid = LockOptions::new().fixed_lease(Duration::from_secs(5));
    for (name, why) in bad_names() {
        let name = name.as_str();
        let what = |call: &str| format!("{call}({why})");
        let errors = [
            rejected(&proxy, &what("try_lock"), locker.try_lock(name)).await,
            rejected(&proxy, &what("lock"), locker.lock(name)).await,
            rejected(&proxy, &what("lock_with"), locker.lock_with(name, &valid)).await,
            // Both the name and the options are bad: the name is reported.
            rejected(
                &proxy,
                &what("lock_with bad options"),
                locker.lock_with(name, &LockOptions::new().fixed_lease(Duration::ZERO)),
            )
            .await,
            rejected(&proxy, &what("state"), locker.state(name)).await,
            rejected(&proxy, &what("is_locked"), locker.is_locked(name)).await,
            rejected(&proxy, &what("force_unlock"), locker.force_unlock(name)).await,
            rejected(&proxy, &what("unlock"), locker.unlock(name, Owner::new())).await,
        ];
        for error in &errors {
            assert!(is_invalid_name(error), "{why}: {error:?}");
        }
        checked += errors.len();
    }

    // Options.
    for (options, why) in bad_options() {
        let what = format!("lock_with({why}, {options:?})");
        let error = rejected(&proxy, &what, locker.lock_with("fine", &options)).await;
        assert!(is_invalid_options(&error), "{what}: {error:?}");
        checked += 1;
    }

    // `extend` with a bad lease on live guards: refused, and the guard is untouched.
    for guard in [&fixed, &watched] {
        let valid_until = guard.valid_until();
        for lease in [
            Duration::ZERO,
            NANO,
            MIN_LEASE - NANO,
            MAX_DURATION + NANO,
            Duration::MAX,
        ] {
            let what = format!("extend({lease:?}) on {}", guard.name());
            let error = rejected(&proxy, &what, guard.extend(lease)).await;
            assert!(is_invalid_options(&error), "{what}: {error:?}");
            checked += 1;
        }
        assert_eq!(guard.valid_until(), valid_until, "{}", guard.name());
        assert!(!guard.is_lost(), "{}", guard.name());
    }

    // Backend configuration: refused before connecting at all.
    let url = proxy.url();
    for (builder, why) in [
        (
            RedisBackend::builder(&url).command_timeout(Duration::ZERO),
            "command timeout 0",
        ),
        (
            RedisBackend::builder(&url).command_timeout(Duration::from_micros(999)),
            "command timeout < 1 ms",
        ),
        (
            RedisBackend::builder(&url).command_timeout(Duration::from_secs(3601)),
            "command timeout > 1 h",
        ),
        (
            RedisBackend::builder(&url).connect_timeout(Duration::ZERO),
            "connect timeout 0",
        ),
        (
            RedisBackend::builder(&url).connect_timeout(Duration::MAX),
            "connect timeout Duration::MAX",
        ),
        (
            RedisBackend::builder(&url).notifications(NotificationMode::Polling(Duration::ZERO)),
            "poll interval 0",
        ),
        (
            RedisBackend::builder(&url)
                .notifications(NotificationMode::Polling(Duration::from_secs(7200))),
            "poll interval 2 h",
        ),
        (
            RedisBackend::builder("mongodb://127.0.0.1/"),
            "not a Redis URL",
        ),
        (RedisBackend::builder(""), "empty URL"),
    ] {
        let error = rejected(&proxy, why, builder.connect()).await;
        assert!(is_invalid_config(&error), "{why}: {error:?}");
        checked += 1;
    }

    // Nothing reached the server, even late (the proxy forwards asynchronously).
    sleep(Duration::from_millis(200)).await;
    assert_eq!(
        proxy.bytes_to_server(),
        table_start,
        "bytes reached the server during the table"
    );
    println!("{checked} rejected calls, 0 bytes sent");

    // The live guards still work (and this is traffic again).
    assert_eq!(fixed.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(watched.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(proxy.bytes_to_server() > table_start);
}

#[tokio::test]
async fn the_edges_of_the_input_rules_are_accepted() {
    let Proxied {
        _server,
        proxy: _proxy,
        locker,
    } = proxied().await;
    let longest = "n".repeat(MAX_NAME_LEN);
    let longest_multibyte = "é".repeat(MAX_NAME_LEN / 2);
    for name in [
        "x",
        longest.as_str(),
        longest_multibyte.as_str(),
        "{a}",
        "{user:7}:cart",
        "a{b}c{d}",
        "x}{y}",
        "a{b}}",
        "{{}",
        "ünï cøde",
        "\u{0}",
    ] {
        let guard = locker
            .lock_with(name, &LockOptions::new().fixed_lease(MIN_LEASE * 100))
            .await
            .unwrap_or_else(|error| panic!("{name:?}: {error}"));
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
    for options in [
        LockOptions::new().fixed_lease(MAX_DURATION),
        LockOptions::new().watchdog_lease(MAX_DURATION),
        LockOptions::new().fixed_lease(MIN_LEASE * 20).wait(NANO),
        LockOptions::new()
            .fixed_lease(MIN_LEASE * 20)
            .wait(MAX_DURATION),
        LockOptions::new().max_hold(NANO),
        LockOptions::new().max_hold(MAX_DURATION),
    ] {
        let guard = locker
            .lock_with("edges", &options)
            .await
            .unwrap_or_else(|error| panic!("{options:?}: {error}"));
        guard.extend(MIN_LEASE * 20).await.unwrap();
        guard.extend(MAX_DURATION).await.unwrap();
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

// ---------------------------------------------------------------------------------------------
// Server errors
// ---------------------------------------------------------------------------------------------

/// Runs one call that the server refuses; returns its error after checking it came within
/// [`PROMPT`].
async fn refused<T: Debug>(what: &str, call: impl Future<Output = lock_core::Result<T>>) -> Error {
    let started = Instant::now();
    let result = timeout(PROMPT, call)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {PROMPT:?}"));
    let took = started.elapsed();
    let error = match result {
        Ok(value) => panic!("{what}: accepted, got {value:?}"),
        Err(error) => error,
    };
    assert!(took < PROMPT, "{what}: took {took:?}");
    assert!(!error.is_input_error(), "{what}: {error:?}");
    error
}

/// Every way to acquire (once, waiting forever, waiting with a deadline, with a fencing token),
/// each refused by the server; `check` sees each error.
async fn every_acquire<F>(locker: &Locker<RedisBackend>, name: &str, mut check: F)
where
    F: FnMut(&str, Error),
{
    let once = refused("try_lock", locker.try_lock(name)).await;
    let retryable = once.is_retryable();
    check("try_lock", once);
    if retryable {
        // Waiting forever: a retryable refusal (a full server, a demoted primary) is ridden
        // through, retried for up to 30 s of errors in a row; it is still retrying here.
        assert!(
            timeout(PROMPT, locker.lock(name)).await.is_err(),
            "lock: a retryable refusal came back at once"
        );
    } else {
        // Waiting forever: a final refusal still comes back at once.
        check("lock", refused("lock", locker.lock(name)).await);
    }
    // A wait deadline: final errors come back at once, retryable ones when the deadline passes.
    let options = LockOptions::new().wait(Duration::from_millis(300));
    check(
        "lock_with(wait)",
        refused("lock_with(wait)", locker.lock_with(name, &options)).await,
    );
    let options = LockOptions::new()
        .no_wait()
        .fixed_lease(Duration::from_secs(5))
        .fenced();
    check(
        "lock_with(fencing)",
        refused("lock_with(fencing)", locker.lock_with(name, &options)).await,
    );
}

/// No local watch and no subscribed channel left by failed acquires.
async fn no_subscriptions(con: &mut MultiplexedConnection, locker: &Locker<RedisBackend>) {
    let channels: Vec<String> = query(con, &["PUBSUB", "CHANNELS", "*"]).await;
    assert!(channels.is_empty(), "channels left: {channels:?}");
    assert_eq!(locker.backend().watched_locks(), 0);
}

#[tokio::test]
async fn wrongtype_when_the_name_holds_a_string() {
    let server = RedisServer::start().expect("start redis-server");
    let mut raw = server.connection().await;
    let locker = Locker::new(RedisBackend::connect(server.url()).await.unwrap());
    let name = "holds:a-string";
    let _: () = query(&mut raw, &["SET", name, "user data"]).await;

    every_acquire(&locker, name, |what, error| {
        assert!(matches!(error, Error::WrongType(_)), "{what}: {error:?}");
        assert!(!error.is_retryable(), "{what}");
        assert!(!error.is_ambiguous(), "{what}");
    })
    .await;
    let error = refused("state", locker.state(name)).await;
    assert!(matches!(error, Error::WrongType(_)), "state: {error:?}");
    let error = refused("unlock", locker.unlock(name, Owner::new())).await;
    assert!(matches!(error, Error::WrongType(_)), "unlock: {error:?}");

    // Nothing of ours: the string is untouched, no fencing counter was made.
    assert_eq!(all_keys(&mut raw).await, vec![name.to_owned()]);
    let value: String = query(&mut raw, &["GET", name]).await;
    assert_eq!(value, "user data");
    no_subscriptions(&mut raw, &locker).await;
}

#[tokio::test]
async fn readonly_on_a_replica() {
    let pair = ReplicatedPair::start().expect("start a primary and a replica");
    let mut replica_raw = pair.replica().connection().await;
    let mut primary_raw = pair.primary().connection().await;
    let locker = Locker::new(RedisBackend::connect(pair.replica().url()).await.unwrap());
    let name = "on:replica";

    every_acquire(&locker, name, |what, error| {
        assert!(matches!(error, Error::ReadOnly(_)), "{what}: {error:?}");
        assert!(error.is_retryable(), "{what}: a failover may fix it");
        assert!(!error.is_ambiguous(), "{what}");
    })
    .await;
    let error = refused("force_unlock", locker.force_unlock(name)).await;
    assert!(
        matches!(error, Error::ReadOnly(_)),
        "force_unlock: {error:?}"
    );
    let error = refused("unlock", locker.unlock(name, Owner::new())).await;
    assert!(matches!(error, Error::ReadOnly(_)), "unlock: {error:?}");
    // Reads still work on a replica.
    assert!(!locker.is_locked(name).await.unwrap());

    pair.wait_replicated().unwrap();
    assert!(all_keys(&mut replica_raw).await.is_empty());
    assert!(all_keys(&mut primary_raw).await.is_empty());
    no_subscriptions(&mut replica_raw, &locker).await;
}

/// A user without scripts is refused when connecting (the capability probe finds `EVAL`
/// refused), with a typed error that names the missing grants, and nothing is written.
#[tokio::test]
async fn noperm_for_a_user_without_scripts() {
    let server = RedisServer::start().expect("start redis-server");
    let mut raw = server.connection().await;
    // May authenticate and ping, nothing else: no EVAL, no EVALSHA, no SCRIPT.
    let _: () = query(
        &mut raw,
        &[
            "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "-@all", "+ping", "+hello",
            "+auth",
        ],
    )
    .await;
    let url = format!("redis://limited:pw@127.0.0.1:{}/", server.port());
    for kind in [lock_redis::LockKind::Reentrant, lock_redis::LockKind::Fast] {
        let refused = RedisBackend::builder(url.as_str())
            .lock_kind(kind)
            .connect()
            .await;
        let error = refused.expect_err("no lock works without scripts");
        assert!(
            matches!(error, Error::NotPermitted(_)),
            "{kind:?}: {error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains("EVAL: not permitted")
                && text.contains("EVALSHA: not permitted")
                && text.contains("needs +eval"),
            "{kind:?}: names the grants: {text}"
        );
        assert!(!error.is_retryable(), "{kind:?}");
    }
    assert!(all_keys(&mut raw).await.is_empty());
}

#[tokio::test]
async fn oom_when_the_server_is_full() {
    const MAXMEMORY: u64 = 2 * 1024 * 1024;
    let server = RedisServer::start_with(ServerOptions::new().maxmemory(Some(MAXMEMORY)))
        .expect("start redis-server");
    let mut raw = server.connection().await;
    let locker = Locker::new(RedisBackend::connect(server.url()).await.unwrap());
    // Held before the server fills up: its release must still run (it frees memory).
    let held = locker
        .lock_with(
            "held:before",
            &LockOptions::new().fixed_lease(Duration::from_secs(30)),
        )
        .await
        .unwrap();

    // Fill the server until it refuses writes (maxmemory-policy noeviction): large values
    // first, then, after the server has had time to trim the large query buffer, small ones, so
    // that used memory ends above the limit even for a small command.
    fill(&mut raw, 32 * 1024).await;
    sleep(Duration::from_millis(300)).await;
    fill(&mut raw, 64).await;
    let before = all_keys(&mut raw).await;

    let name = "during:oom";
    every_acquire(&locker, name, |what, error| {
        assert!(matches!(error, Error::OutOfMemory(_)), "{what}: {error:?}");
        assert!(error.is_retryable(), "{what}: memory may be freed");
        assert!(!error.is_ambiguous(), "{what}");
    })
    .await;
    // Reads and releases still run.
    assert!(!locker.is_locked(name).await.unwrap());
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);

    // Nothing of ours was written: no lock key, no fencing counter.
    let mut expected = before;
    expected.retain(|key| key != "held:before");
    assert_eq!(all_keys(&mut raw).await, expected);
    assert!(
        expected.iter().all(|key| key.starts_with("filler:")),
        "{expected:?}"
    );
    no_subscriptions(&mut raw, &locker).await;

    // Once there is room again, the same name works. (Lifting the limit too: Valkey may report
    // memory above it for a while after FLUSHALL.)
    let _: () = query(&mut raw, &["FLUSHALL"]).await;
    let _: () = query(&mut raw, &["CONFIG", "SET", "maxmemory", "0"]).await;
    let guard = locker.try_lock(name).await.unwrap().expect("free");
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

/// `SET filler:<n>` with values of `size` bytes until the server answers `OOM`.
async fn fill(con: &mut MultiplexedConnection, size: usize) {
    let value = "v".repeat(size);
    for _ in 0..100_000 {
        let key = format!("filler:{}:{}", size, rand::random::<u64>());
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .query_async(con)
            .await;
        match set {
            Ok(()) => {}
            Err(error) if error.code() == Some("OOM") => return,
            Err(error) => panic!("filling: {error}"),
        }
    }
    panic!("the server never filled up");
}

// ---------------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------------

/// The name rules, written out independently of the library: not empty, at most 4096 bytes,
/// and braces only as a non-empty Redis Cluster hash tag (the first `{`, then the first `}`
/// after it, with at least one byte between).
fn name_is_valid(name: &str) -> bool {
    if name.is_empty() || name.len() > 4096 {
        return false;
    }
    if !name.contains(['{', '}']) {
        return true;
    }
    let Some(open) = name.find('{') else {
        return false;
    };
    matches!(name[open + 1..].find('}'), Some(len) if len > 0)
}

/// One year, written out independently of the library.
const ONE_YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

fn lease_is_valid(lease: Duration) -> bool {
    lease >= Duration::from_millis(10) && lease <= ONE_YEAR
}

fn bound_is_valid(value: Duration) -> bool {
    !value.is_zero() && value <= ONE_YEAR
}

fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => any::<String>(),
        2 => "[a-c{}:]{0,10}",
        1 => "\\PC{0,24}",
        1 => proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        2 => ("\\PC{0,6}", "[^}]{0,6}", "\\PC{0,6}").prop_map(|(a, b, c)| format!("{a}{{{b}}}{c}")),
        1 => (4090usize..=4100).prop_map(|n| "x".repeat(n)),
        1 => (2040usize..=2052, any::<bool>())
            .prop_map(|(n, tagged)| if tagged { format!("{{é}}{}", "é".repeat(n)) } else { "é".repeat(n) }),
        1 => Just(String::new()),
    ]
}

fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(NANO),
        Just(MIN_LEASE - NANO),
        Just(MIN_LEASE),
        Just(MAX_DURATION),
        Just(MAX_DURATION + NANO),
        Just(Duration::MAX),
        (0u64..=20_000_000).prop_map(Duration::from_nanos),
        (10u64..=5_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_secs),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(secs, nanos)| Duration::new(secs, nanos)),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        // Failures are reported with the shrunk input; nothing is written next to the sources.
        failure_persistence: None,
        max_shrink_iters: 512,
        ..Config::default()
    }
}

#[test]
fn random_names_never_panic_and_invalid_ones_send_nothing() {
    let runtime = runtime();
    let Proxied {
        _server,
        proxy,
        locker,
    } = runtime.block_on(proxied());
    let (valid, invalid) = (Cell::new(0), Cell::new(0));
    let mut runner = TestRunner::new(config(256));
    let result = runner.run(&names(), |name| {
        let expected = name_is_valid(&name);
        prop_assert_eq!(
            keys::check_name(&name).is_ok(),
            expected,
            "keys::check_name"
        );
        // The shared rule is the length part only.
        prop_assert_eq!(
            lock_core::options::check_name(&name).is_ok(),
            !name.is_empty() && name.len() <= MAX_NAME_LEN
        );
        let counter = if expected { &valid } else { &invalid };
        counter.set(counter.get() + 1);
        runtime.block_on(async {
            let options = LockOptions::new()
                .no_wait()
                .fixed_lease(Duration::from_secs(5));
            if !expected {
                let error = rejected(&proxy, "lock_with", locker.lock_with(&name, &options)).await;
                prop_assert!(is_invalid_name(&error), "{:?}", error);
                let error = rejected(&proxy, "state", locker.state(&name)).await;
                prop_assert!(is_invalid_name(&error), "{:?}", error);
                return Ok(());
            }
            let guard = locker.lock_with(&name, &options).await.map_err(|error| {
                TestCaseError::fail(format!("a free name was not granted: {error}"))
            })?;
            let state = locker.state(&name).await.unwrap();
            prop_assert_eq!(state.holders, vec![(guard.owner_field().to_owned(), 1)]);
            prop_assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            prop_assert!(!locker.is_locked(&name).await.unwrap());
            Ok(())
        })
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let (valid, invalid) = (valid.get(), invalid.get());
    println!("random names: {valid} valid (locked and released), {invalid} rejected");
    assert!(
        valid > 20 && invalid > 20,
        "{valid} valid, {invalid} invalid"
    );
}

/// How a random option set is built.
#[derive(Debug, Clone)]
struct RandomOptions {
    watchdog: bool,
    lease: Duration,
    max_hold: Option<Duration>,
    /// `None`: wait forever; `Some(None)`: no wait; `Some(Some(d))`: wait at most `d`.
    wait: Option<Option<Duration>>,
}

impl RandomOptions {
    fn build(&self) -> LockOptions {
        // Fencing is left out: it is a type, not a value, and no check depends on it.
        let options = LockOptions::new();
        let mut options = if self.watchdog {
            options.watchdog_lease(self.lease)
        } else {
            options.fixed_lease(self.lease)
        };
        if let Some(max_hold) = self.max_hold {
            options = options.max_hold(max_hold);
        }
        match self.wait {
            None => options,
            Some(None) => options.no_wait(),
            Some(Some(wait)) => options.wait(wait),
        }
    }

    /// The lease in force: `max_hold` after a fixed lease switches to watchdog mode with the
    /// default 30 s lease (documented on `LockOptions::max_hold`).
    fn effective_lease(&self) -> Duration {
        if !self.watchdog && self.max_hold.is_some() {
            Duration::from_secs(30)
        } else {
            self.lease
        }
    }

    fn is_valid(&self) -> bool {
        lease_is_valid(self.effective_lease())
            && self.max_hold.is_none_or(bound_is_valid)
            && !matches!(self.wait, Some(Some(wait)) if !bound_is_valid(wait))
    }
}

fn random_options() -> impl Strategy<Value = RandomOptions> {
    (
        any::<bool>(),
        durations(),
        proptest::option::of(durations()),
        proptest::option::of(proptest::option::of(durations())),
    )
        .prop_map(|(watchdog, lease, max_hold, wait)| RandomOptions {
            watchdog,
            lease,
            max_hold,
            wait,
        })
}

/// Leases this short may legitimately end in a timeout (an acquire's timeout is half its
/// lease) or be gone by the time of the release.
const SHORT: Duration = Duration::from_millis(100);

#[test]
fn random_durations_never_panic_and_invalid_ones_send_nothing() {
    let runtime = runtime();
    let Proxied {
        _server,
        proxy,
        locker,
    } = runtime.block_on(proxied());
    let memory = Locker::new(MemoryBackend::new());
    let (valid, invalid, case) = (Cell::new(0), Cell::new(0), Cell::new(0u32));
    let mut runner = TestRunner::new(config(256));
    let result = runner.run(&(random_options(), durations()), |(random, extend)| {
        case.set(case.get() + 1);
        let options = random.build();
        let expected = random.is_valid();
        prop_assert_eq!(options.validate().is_ok(), expected, "validate");
        let counter = if expected { &valid } else { &invalid };
        counter.set(counter.get() + 1);
        let name = format!("durations:{}", case.get());
        runtime.block_on(async {
            // The in-memory backend applies the same rules.
            match memory.lock_with(&name, &options).await {
                Ok(guard) if expected => drop(guard),
                Err(error) if !expected => prop_assert!(is_invalid_options(&error), "{:?}", error),
                other => prop_assert!(false, "memory backend: {:?}", other),
            }
            if !expected {
                let error = rejected(&proxy, "lock_with", locker.lock_with(&name, &options)).await;
                prop_assert!(is_invalid_options(&error), "{:?}", error);
                return Ok(());
            }
            let short = random.effective_lease() < SHORT
                || random.max_hold.is_some_and(|max_hold| max_hold < SHORT);
            let guard = match locker.lock_with(&name, &options).await {
                Ok(guard) => guard,
                Err(Error::Timeout { .. }) if short => return Ok(()),
                other => return Err(TestCaseError::fail(format!("{other:?}"))),
            };
            // `extend` with a random lease on the live guard: invalid ones send nothing.
            if lease_is_valid(extend) {
                let extended = guard.extend(extend).await;
                prop_assert!(
                    extended.is_ok() || short,
                    "extend({:?}): {:?}",
                    extend,
                    extended
                );
            } else {
                let error = rejected(&proxy, "extend", guard.extend(extend)).await;
                prop_assert!(is_invalid_options(&error), "{:?}", error);
            }
            let released = guard.release().await.unwrap();
            prop_assert!(
                released == ReleaseOutcome::Released || short,
                "release: {:?}",
                released
            );
            Ok(())
        })
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let (valid, invalid) = (valid.get(), invalid.get());
    println!("random options: {valid} valid (locked and released), {invalid} rejected");
    assert!(
        valid > 20 && invalid > 20,
        "{valid} valid, {invalid} invalid"
    );
}

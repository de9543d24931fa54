//! Redis-specific behaviour against real servers: the Redisson layout on the wire, error kinds,
//! script reloading, notifications, batching and faults.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use lock_core::{Error, LeaseLoss, LockBackend, LockOptions, Locker, Owner, ReleaseOutcome};
use lock_redis::{RedisBackend, keys};
use lock_testkit::{RedisServer, ServerOptions};
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, sleep, timeout};

fn start() -> RedisServer {
    RedisServer::start().expect("start redis-server")
}

async fn locker(server: &RedisServer) -> Locker<RedisBackend> {
    Locker::new(RedisBackend::connect(server.url()).await.expect("connect"))
}

async fn locker_with_timeout(
    server: &RedisServer,
    command_timeout: Duration,
) -> Locker<RedisBackend> {
    let backend = RedisBackend::builder(server.url())
        .command_timeout(command_timeout)
        .connect()
        .await
        .expect("connect");
    Locker::new(backend)
}

async fn query<T: redis::FromRedisValue>(con: &mut MultiplexedConnection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(con).await.expect("raw command")
}

async fn info_field(con: &mut MultiplexedConnection, section: &str, field: &str) -> u64 {
    let info: String = query(con, &["INFO", section]).await;
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|rest| rest.split([',', '\r']).next())
        .map(|value| value.trim_start_matches("calls=").parse().expect("number"))
        .unwrap_or(0)
}

#[tokio::test]
async fn raw_state_is_the_redisson_layout() {
    let server = start();
    let locker = locker(&server).await;
    let mut raw = server.connection().await;
    let name = "orders:42";

    let guard = locker
        .lock_with(name, &LockOptions::new().fenced())
        .await
        .unwrap();
    let kind: String = query(&mut raw, &["TYPE", name]).await;
    assert_eq!(kind, "hash");
    let hash: HashMap<String, String> = query(&mut raw, &["HGETALL", name]).await;
    let field = format!(
        "{}:{}",
        locker.backend().client_id(),
        guard.owner().holder_id()
    );
    assert_eq!(hash, HashMap::from([(field.clone(), "1".to_owned())]));
    let (client_id, holder) = field.rsplit_once(':').unwrap();
    assert_eq!(uuid_version(client_id), Some(4), "client id is a UUID v4");
    assert!(
        holder.parse::<u64>().is_ok(),
        "holder id is a decimal integer"
    );
    let pttl: i64 = query(&mut raw, &["PTTL", name]).await;
    assert!(
        pttl > 25_000 && pttl <= 30_000,
        "watchdog lease is 30 s, got {pttl}"
    );
    let token: u64 = query(&mut raw, &["GET", "redisson_lock_token:{orders:42}"]).await;
    assert_eq!(token, guard.fencing_token());

    // Re-entry counts up in the same field.
    let again = locker.lock(name).await.unwrap();
    let hash: HashMap<String, String> = query(&mut raw, &["HGETALL", name]).await;
    assert_eq!(hash.get(&field).map(String::as_str), Some("2"));

    // The release publishes "0" on Redisson's channel, once the count reaches zero.
    let mut pubsub = server.client().get_async_pubsub().await.unwrap();
    pubsub
        .subscribe("redisson_lock__channel:{orders:42}")
        .await
        .unwrap();
    let mut messages = pubsub.on_message();
    assert!(again.release().await.unwrap().was_held());
    assert!(
        timeout(Duration::from_millis(200), messages.next())
            .await
            .is_err(),
        "no publish at count 1"
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    let message = timeout(Duration::from_secs(2), messages.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        message.get_channel_name(),
        "redisson_lock__channel:{orders:42}"
    );
    assert_eq!(message.get_payload::<String>().unwrap(), "0");
    let exists: i64 = query(&mut raw, &["EXISTS", name]).await;
    assert_eq!(exists, 0, "the hash is deleted at zero");
}

fn uuid_version(text: &str) -> Option<u8> {
    let parts: Vec<&str> = text.split('-').collect();
    (parts.len() == 5 && parts[2].len() == 4).then(|| parts[2].as_bytes()[0] - b'0')
}

#[tokio::test]
async fn a_redisson_style_holder_is_respected_and_its_release_wakes_us() {
    let server = start();
    let locker = locker(&server).await;
    let mut raw = server.connection().await;
    let name = "shared:with-java";
    // What a Java RLock holder writes: hash field `<uuid>:<thread id>` = 1, with a lease.
    let java_field = "0b9c1e4e-54d7-4d83-9a55-2a4c3f9e8f10:77";
    let _: i64 = query(&mut raw, &["HSET", name, java_field, "1"]).await;
    let _: i64 = query(&mut raw, &["PEXPIRE", name, "20000"]).await;

    assert!(locker.try_lock(name).await.unwrap().is_none());
    let state = locker.state(name).await.unwrap();
    assert_eq!(state.holders, vec![(java_field.to_owned(), 1)]);

    let waiter = tokio::spawn({
        let locker = locker.clone();
        async move { locker.lock(name).await.map(|guard| (Instant::now(), guard)) }
    });
    sleep(Duration::from_millis(300)).await;
    // Redisson's unlock: delete the hash, publish 0 on the channel.
    let released_at = Instant::now();
    let _: i64 = query(&mut raw, &["DEL", name]).await;
    let _: i64 = query(
        &mut raw,
        &["PUBLISH", "redisson_lock__channel:{shared:with-java}", "0"],
    )
    .await;
    let (acquired_at, guard) = timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        acquired_at - released_at < Duration::from_secs(2),
        "woken by the publish, not the 20 s lease"
    );
    assert!(guard.release().await.unwrap().was_held());
}

#[tokio::test]
async fn server_errors_map_to_distinct_kinds() {
    let server = start();
    let locker = locker(&server).await;
    let mut raw = server.connection().await;

    // WRONGTYPE: the name holds a string.
    let _: () = query(&mut raw, &["SET", "not-a-lock", "x"]).await;
    let error = locker.try_lock("not-a-lock").await.unwrap_err();
    assert!(matches!(error, Error::WrongType(_)), "{error:?}");
    assert!(!error.is_retryable());
    // force_unlock does not delete what is not a lock either.
    let error = locker.force_unlock("not-a-lock").await.unwrap_err();
    assert!(matches!(error, Error::WrongType(_)), "{error:?}");
    let kept: String = query(&mut raw, &["GET", "not-a-lock"]).await;
    assert_eq!(kept, "x", "the user's value is untouched");

    // NOPERM: a user that may not run scripts.
    let _: () = query(
        &mut raw,
        &[
            "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
        ],
    )
    .await;
    // The capability probe finds the scripts refused: `connect` says so, before any lock call.
    let url = format!("redis://limited:pw@127.0.0.1:{}/", server.port());
    let error = RedisBackend::connect(url).await.unwrap_err();
    assert!(matches!(error, Error::NotPermitted(_)), "{error:?}");
    assert!(!error.is_retryable());

    // WRONGPASS: bad credentials fail at connect, not later.
    let url = format!("redis://limited:wrong@127.0.0.1:{}/", server.port());
    let error = RedisBackend::connect(url).await.unwrap_err();
    assert!(matches!(error, Error::NotPermitted(_)), "{error:?}");

    // OOM: an acquire is refused before it writes; a release still runs.
    let held = locker.lock("before-oom").await.unwrap();
    let _: () = query(&mut raw, &["CONFIG", "SET", "maxmemory", "1"]).await;
    let error = locker.try_lock("during-oom").await.unwrap_err();
    assert!(matches!(error, Error::OutOfMemory(_)), "{error:?}");
    assert!(error.is_retryable());
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let _: () = query(&mut raw, &["CONFIG", "SET", "maxmemory", "0"]).await;
    let exists: i64 = query(&mut raw, &["EXISTS", "during-oom"]).await;
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn a_replica_answers_read_only() {
    let primary = start();
    let replica = start();
    let mut raw = replica.connection().await;
    let port = primary.port().to_string();
    let _: () = query(&mut raw, &["REPLICAOF", "127.0.0.1", &port]).await;
    let locker = locker(&replica).await;
    let error = locker.try_lock("on-replica").await.unwrap_err();
    assert!(matches!(error, Error::ReadOnly(_)), "{error:?}");
    assert!(error.is_retryable());
}

#[tokio::test]
async fn bad_input_fails_before_any_io() {
    let mut server = start();
    let locker = locker_with_timeout(&server, Duration::from_secs(5)).await;
    // A paused server answers nothing: any I/O would hang for the 5 s timeout.
    server.pause().unwrap();
    let started = Instant::now();
    for name in ["", "a{}b", "a}b", "{open"] {
        assert!(
            matches!(locker.try_lock(name).await, Err(Error::InvalidName { .. })),
            "{name:?}"
        );
        assert!(matches!(
            locker.state(name).await,
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            locker.force_unlock(name).await,
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            locker.unlock(name, Owner::new()).await,
            Err(Error::InvalidName { .. })
        ));
    }
    let long = "n".repeat(4097);
    assert!(matches!(
        locker.lock(&long).await,
        Err(Error::InvalidName { .. })
    ));
    for options in [
        LockOptions::new().fixed_lease(Duration::from_millis(5)),
        LockOptions::new().wait(Duration::ZERO),
        LockOptions::new().wait(Duration::from_secs(u64::MAX)),
        LockOptions::new().max_hold(Duration::ZERO),
    ] {
        let error = locker.lock_with("fine", &options).await.unwrap_err();
        assert!(matches!(error, Error::InvalidOptions { .. }), "{error:?}");
    }
    let guardless = RedisBackend::builder(server.url())
        .command_timeout(Duration::ZERO)
        .connect()
        .await;
    assert!(matches!(guardless, Err(Error::InvalidConfig { .. })));
    let bad_url = RedisBackend::connect("mongodb://127.0.0.1/").await;
    assert!(
        matches!(bad_url, Err(Error::InvalidConfig { .. })),
        "{bad_url:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    server.resume().unwrap();
}

#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let server = start();
    let locker = locker(&server).await;
    let mut raw = server.connection().await;
    let guard = locker.lock("flush").await.unwrap();
    let _: () = query(&mut raw, &["SCRIPT", "FLUSH"]).await;
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    let _: () = query(&mut raw, &["SCRIPT", "FLUSH"]).await;
    let guard = locker.try_lock("flush").await.unwrap().expect("free");
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn derived_keys_land_in_the_lock_keys_cluster_slot() {
    let server = RedisServer::start_with(ServerOptions::new().cluster_enabled(true)).unwrap();
    let mut raw = server.connection().await;
    for name in [
        "orders:42",
        "{user:7}:cart",
        "a{b}c{d}",
        "x}{y}",
        "ünï cøde",
        "{tag}",
    ] {
        let lock_slot: u16 = query(&mut raw, &["CLUSTER", "KEYSLOT", name]).await;
        let token_slot: u16 =
            query(&mut raw, &["CLUSTER", "KEYSLOT", &keys::token_key(name)]).await;
        assert_eq!(lock_slot, token_slot, "{name}");
        assert_eq!(
            lock_slot,
            keys::slot(name),
            "our slot function agrees for {name}"
        );
    }
}

#[tokio::test]
async fn a_cancelled_waiter_unsubscribes() {
    let server = start();
    let (a, b) = (locker(&server).await, locker(&server).await);
    let mut raw = server.connection().await;
    let name = "cancel:unsubscribes";
    let held = a.lock(name).await.unwrap();
    assert!(
        timeout(Duration::from_millis(300), b.lock(name))
            .await
            .is_err()
    );
    assert_eq!(b.backend().watched_locks(), 0);
    let channel = keys::channel(name);
    let mut numsub = 1;
    for _ in 0..50 {
        let reply: (String, i64) = query(&mut raw, &["PUBSUB", "NUMSUB", &channel]).await;
        numsub = reply.1;
        if numsub == 0 {
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(numsub, 0, "no subscription left on the server");
    assert!(held.release().await.unwrap().was_held());
}

#[tokio::test]
async fn a_lost_notification_connection_wakes_waiters() {
    let server = start();
    let (a, b) = (locker(&server).await, locker(&server).await);
    let mut raw = server.connection().await;
    let name = "lost:pubsub";
    let held = a
        .lock_with(
            name,
            &LockOptions::new().fixed_lease(Duration::from_secs(20)),
        )
        .await
        .unwrap();
    let waiter =
        tokio::spawn(async move { b.lock(name).await.map(|guard| (Instant::now(), guard)) });
    sleep(Duration::from_millis(300)).await;
    // The lock vanishes without a publish, and the notification connection drops: only the
    // disconnect can tell the waiter to look again before the 20 s lease would.
    let _: i64 = query(&mut raw, &["DEL", name]).await;
    let killed_at = Instant::now();
    let _: i64 = query(&mut raw, &["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    let (acquired_at, guard) = timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(acquired_at - killed_at < Duration::from_secs(3));
    assert!(guard.release().await.unwrap().was_held());
    drop(held);
}

#[tokio::test]
async fn the_watchdog_batches_renewals() {
    let server = start();
    let locker = locker(&server).await;
    let mut raw = server.connection().await;
    let options = LockOptions::new().watchdog_lease(Duration::from_millis(900));
    let mut guards = Vec::new();
    for i in 0..300 {
        guards.push(
            locker
                .lock_with(&format!("batch:{i}"), &options)
                .await
                .unwrap(),
        );
    }
    let before = info_field(&mut raw, "commandstats", "cmdstat_evalsha").await;
    sleep(Duration::from_millis(2000)).await;
    let after = info_field(&mut raw, "commandstats", "cmdstat_evalsha").await;
    // 300 leases renewed every 300 ms for 2 s is ~2,000 renewals; batched it is a few dozen calls.
    let calls = after - before;
    assert!(calls < 120, "{calls} renewal calls for 300 locks");
    assert!(calls >= 3, "renewals happened ({calls})");
    for guard in guards {
        assert!(!guard.is_lost());
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
    let keys: Vec<String> = query(&mut raw, &["KEYS", "batch:*"]).await;
    assert!(keys.is_empty());
}

#[tokio::test]
async fn a_short_stall_is_ridden_out_and_a_long_one_loses_the_lease() {
    let mut server = start();
    let locker = locker_with_timeout(&server, Duration::from_millis(100)).await;
    let lease = Duration::from_millis(900);
    let guard = locker
        .lock_with("stall", &LockOptions::new().watchdog_lease(lease))
        .await
        .unwrap();

    // Shorter than the lease: renewals time out, are retried, and the lease survives.
    server.pause().unwrap();
    sleep(Duration::from_millis(350)).await;
    server.resume().unwrap();
    sleep(Duration::from_millis(900)).await;
    assert!(
        !guard.is_lost(),
        "a 350 ms stall is within the 900 ms lease"
    );

    // Longer than the lease: the local deadline passes without a confirmed renewal.
    server.pause().unwrap();
    let loss = timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost() fires");
    assert_eq!(loss, LeaseLoss::Expired);
    server.resume().unwrap();
}

#[tokio::test]
async fn an_acquire_of_unknown_outcome_is_undone() {
    let mut server = start();
    let locker = locker_with_timeout(&server, Duration::from_millis(150)).await;
    let mut raw = server.connection().await;
    server.pause().unwrap();
    // The acquire is queued on the stalled server, times out here, and would apply on resume.
    let options = LockOptions::new().fixed_lease(Duration::from_secs(20));
    let error = locker.lock_with("unknown", &options).await.unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error:?}");
    assert!(error.is_retryable() && error.is_ambiguous());
    server.resume().unwrap();
    sleep(Duration::from_millis(300)).await;
    let exists: i64 = query(&mut raw, &["EXISTS", "unknown"]).await;
    assert_eq!(exists, 0, "the abandon script undid the late grant");
    let guard = locker.try_lock("unknown").await.unwrap().expect("free");
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn a_dead_server_is_a_retryable_connection_error() {
    let mut server = start();
    let locker = locker_with_timeout(&server, Duration::from_millis(300)).await;
    server.kill().unwrap();
    let error = locker.try_lock("dead").await.unwrap_err();
    assert!(
        matches!(error, Error::ConnectionLost(_) | Error::Timeout { .. }),
        "{error:?}"
    );
    assert!(error.is_retryable());
    server.restart().unwrap();
    // The connection manager reconnects by itself.
    let mut guard = None;
    for _ in 0..50 {
        if let Ok(Some(got)) = locker.try_lock("dead").await {
            guard = Some(got);
            break;
        }
        sleep(Duration::from_millis(50)).await;
    }
    let guard = guard.expect("reconnected after restart");
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn waiters_cancelled_while_subscribing_leave_no_subscription() {
    let server = start();
    let (a, b) = (locker(&server).await, locker(&server).await);
    let mut raw = server.connection().await;
    let mut held = Vec::new();
    for i in 0..100 {
        held.push(a.lock(&format!("churn:{i}")).await.unwrap());
    }
    // Short waits and timeouts cancel waiters at every stage, subscribing included.
    let mut waiters = Vec::new();
    for i in 0..100 {
        let b = b.clone();
        waiters.push(tokio::spawn(async move {
            let name = format!("churn:{i}");
            let wait = Duration::from_millis(1 + (i % 7));
            let _ = b.lock_with(&name, &LockOptions::new().wait(wait)).await;
            let _ = timeout(Duration::from_micros(300 * (i % 5)), b.lock(&name)).await;
        }));
    }
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let mut channels = Vec::new();
    for _ in 0..100 {
        channels = query::<Vec<String>>(
            &mut raw,
            &["PUBSUB", "CHANNELS", "redisson_lock__channel:*"],
        )
        .await;
        if channels.is_empty() {
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    assert!(
        channels.is_empty(),
        "{} channels still subscribed",
        channels.len()
    );
    assert_eq!(b.backend().watched_locks(), 0);
    drop(held);
}

#[tokio::test]
async fn fencing_tokens_keep_rising_after_the_server_forgets_the_counter() {
    let mut server = start();
    let locker = locker(&server).await;
    let options = LockOptions::new()
        .fixed_lease(Duration::from_secs(5))
        .fenced();
    let first = locker.lock_with("fenced", &options).await.unwrap();
    let before = first.fencing_token();
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    // A restart without persistence loses the lock and the counter.
    server.kill().unwrap();
    server.restart().unwrap();
    let mut raw = server.connection().await;
    let exists: i64 = query(&mut raw, &["EXISTS", "redisson_lock_token:{fenced}"]).await;
    assert_eq!(exists, 0, "the counter is gone");
    let after = loop {
        match locker.lock_with("fenced", &options).await {
            Ok(guard) => break guard,
            Err(Error::NotAcquired { .. }) => panic!("free after the restart"),
            Err(error) => {
                assert!(error.is_retryable(), "{error}");
                sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let token = after.fencing_token();
    assert!(token > before, "{token} after {before}");
    assert_eq!(after.release().await.unwrap(), ReleaseOutcome::Released);
}

/// `describe` reads either kind's layout, the holders, the lease left, the fencing counter and
/// the waiters subscribed to the release channel, in one step; a key of another type is named
/// by its type; a bad name is refused before any I/O.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_reads_either_kind_and_its_waiters() {
    use lock_redis::{Layout, LockKind};
    let server = start();
    let locker = locker(&server).await;
    let backend = locker.backend().clone();
    let free = backend.describe("describe:a").await.expect("describe");
    assert_eq!(free.layout, Layout::Free);
    assert!(free.holders.is_empty() && free.ttl.is_none() && free.fencing_counter.is_none());

    let fenced = LockOptions::new().fenced();
    let outer = locker.lock_with("describe:a", &fenced).await.expect("lock");
    let inner = locker.lock("describe:a").await.expect("re-enter");
    let token = outer.fencing_token();
    // Another task waits for it.
    let other = Locker::new(backend.clone());
    let waiter = tokio::spawn(async move {
        let guard = other
            .lock_with(
                "describe:a",
                &LockOptions::new().wait(Duration::from_secs(10)),
            )
            .await;
        drop(guard);
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    let held = loop {
        let held = backend.describe("describe:a").await.expect("describe");
        if held.subscribers > 0 || Instant::now() > deadline {
            break held;
        }
        sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(held.layout, Layout::Reentrant);
    assert_eq!(held.holders, vec![(outer.owner_field().to_owned(), 2)]);
    assert!(held.ttl.is_some_and(|ttl| ttl > Duration::from_secs(20)));
    assert_eq!(held.fencing_counter, Some(token));
    assert_eq!(held.subscribers, 1, "the waiting client");
    assert_eq!(
        inner.release().await.expect("release"),
        ReleaseOutcome::StillHeld { hold_count: 1 }
    );
    assert_eq!(
        outer.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    waiter.await.expect("the waiter");

    let fast = Locker::new(
        RedisBackend::builder(server.url())
            .lock_kind(LockKind::Fast)
            .connect()
            .await
            .expect("connect"),
    );
    let guard = fast.lock("describe:fast").await.expect("lock");
    let described = backend.describe("describe:fast").await.expect("describe");
    assert_eq!(described.layout, Layout::Fast);
    assert_eq!(described.holders, vec![(guard.owner_field().to_owned(), 1)]);
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );

    let mut raw = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("raw");
    let _: i64 = query(&mut raw, &["RPUSH", "describe:list", "x"]).await;
    let other = backend.describe("describe:list").await.expect("describe");
    assert_eq!(other.layout, Layout::Other("list".into()));
    assert!(matches!(
        backend.describe("").await,
        Err(Error::InvalidName { .. })
    ));
}

/// `list_locks` walks the keys with `SCAN` and keeps the locks of either kind: not other keys,
/// hashes not shaped like a lock, or fencing counters; a limit reached says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_locks_finds_either_kind() {
    use lock_redis::LockKind;
    let server = start();
    let locker = locker(&server).await;
    let backend = locker.backend().clone();
    let fast = Locker::new(
        RedisBackend::builder(server.url())
            .lock_kind(LockKind::Fast)
            .connect()
            .await
            .expect("connect"),
    );
    let reentrant = locker
        .lock_with("list:a", &LockOptions::new().fenced())
        .await
        .expect("lock");
    let quick = fast.lock("list:b").await.expect("lock");
    let mut raw = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("raw");
    let _: i64 = query(&mut raw, &["RPUSH", "list:c", "x"]).await;
    let _: i64 = query(&mut raw, &["HSET", "list:d", "name", "1"]).await;
    let _: () = query(&mut raw, &["SET", "list:e", "hello"]).await;

    let list = backend.list_locks("*", 1000).await.expect("list");
    let names: Vec<&str> = list.locks.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["list:a", "list:b"]);
    assert!(list.complete);
    assert_eq!(list.locks[0].1.holders[0].0, reentrant.owner_field());
    assert_eq!(list.locks[1].1.holders[0].0, quick.owner_field());
    let some = backend.list_locks("list:*", 2).await.expect("list");
    assert!(!some.complete, "more keys than the limit");
    assert!(some.locks.len() <= 2, "{:?}", some.locks);
    // A walk that ends within the limit is complete, also when it found exactly `limit` keys.
    let exact = backend.list_locks("list:a", 1).await.expect("list");
    assert!(exact.complete, "the one matching key was looked at");
    assert_eq!(exact.locks.len(), 1);
    assert!(matches!(
        backend.list_locks("*", 0).await,
        Err(Error::InvalidOptions { .. })
    ));
    assert_eq!(
        reentrant.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(
        quick.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let none = backend.list_locks("list:*", 1000).await.expect("list");
    assert!(none.locks.is_empty());
}

/// `with_lock` against a real server: the section's value after a release; `NotAcquired` when
/// another client holds the lock for the whole wait (the section never runs); `LeaseLost` when
/// the key is deleted while the section runs (it is stopped within a renewal period).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_reports_not_acquired_and_lease_lost() {
    let server = start();
    let (a, b) = (locker(&server).await, locker(&server).await);
    let value = a
        .with_lock("with:a", &LockOptions::new(), async |guard| {
            guard.hold_count()
        })
        .await
        .expect("the section's value");
    assert_eq!(value, 1);
    assert!(!a.is_locked("with:a").await.unwrap());

    let held = b.lock("with:a").await.unwrap();
    let refused = a
        .with_lock(
            "with:a",
            &LockOptions::new().wait(Duration::from_millis(200)),
            async |_| panic!("the section must not run"),
        )
        .await;
    assert!(
        matches!(refused, Err(Error::NotAcquired { .. })),
        "{refused:?}"
    );
    assert!(refused.unwrap_err().is_retryable());
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);

    let mut raw = server.connection().await;
    let options = LockOptions::new().watchdog_lease(Duration::from_millis(600));
    let started = Instant::now();
    let (lost, ()) = tokio::join!(
        a.with_lock("with:a", &options, async |_| {
            sleep(Duration::from_secs(10)).await;
        }),
        async {
            sleep(Duration::from_millis(100)).await;
            let _: i64 = query(&mut raw, &["DEL", "with:a"]).await;
        },
    );
    assert!(matches!(lost, Err(Error::LeaseLost)), "{lost:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

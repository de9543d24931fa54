//! The fast (non-reentrant) lock against real servers: its layout on the wire, the native
//! compare-and-delete where the server has one, re-entry refused before any I/O, and how it
//! meets the reentrant lock on the same name.

use std::time::Duration;

use lock_core::{Error, LockOptions, Locker, ReleaseOutcome};
use lock_redis::{Capability, LockKind, RedisBackend, keys};
use lock_testkit::commandstats::command_calls;
use lock_testkit::{FaultProxy, RedisServer};
use redis::aio::MultiplexedConnection;

async fn fast(url: String) -> Locker<RedisBackend> {
    let backend = RedisBackend::builder(url)
        .lock_kind(LockKind::Fast)
        .connect()
        .await
        .expect("connect");
    assert_eq!(backend.lock_kind(), LockKind::Fast);
    Locker::new(backend)
}

#[tokio::test]
async fn a_fast_lock_is_a_string_key_holding_its_owner() {
    let server = RedisServer::start().unwrap();
    let mut raw = server.connection().await;
    let locker = fast(server.url()).await;
    let options = LockOptions::new().fixed_lease(Duration::from_secs(20));
    let guard = locker.lock_with("plain", &options).await.unwrap();
    let kind: String = redis::cmd("TYPE")
        .arg("plain")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kind, "string");
    let value: String = redis::cmd("GET")
        .arg("plain")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(value, guard.owner_field());
    let pttl: i64 = redis::cmd("PTTL")
        .arg("plain")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!((19_000..=20_000).contains(&pttl), "{pttl}");
    assert_eq!(guard.hold_count(), 1);

    let state = locker.state("plain").await.unwrap();
    assert_eq!(state.holders, vec![(guard.owner_field().to_owned(), 1)]);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    let exists: i64 = redis::cmd("EXISTS")
        .arg("plain")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn the_release_uses_the_native_compare_and_delete_when_the_server_has_one() {
    let server = RedisServer::start().unwrap();
    let mut raw = server.connection().await;
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("DELIFEQ")
        .arg("DELEX")
        .query_async(&mut raw)
        .await
        .unwrap();
    let has_delifeq = !matches!(info[0], redis::Value::Nil);
    let has_delex = !matches!(info[1], redis::Value::Nil);
    let locker = fast(server.url()).await;
    // Counted from here: connecting probes each command once.
    let evalsha_before = command_calls(&mut raw, "evalsha").await;
    let delifeq_before = command_calls(&mut raw, "delifeq").await;
    let delex_before = command_calls(&mut raw, "delex").await;
    for _ in 0..10 {
        let guard = locker.lock("native").await.unwrap();
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
    let evalsha = command_calls(&mut raw, "evalsha").await - evalsha_before;
    let set = command_calls(&mut raw, "set").await;
    assert!(set >= 10, "taken with SET NX PX ({set} SETs)");
    eprintln!("DELIFEQ: {has_delifeq}, DELEX: {has_delex}, EVALSHA calls: {evalsha}");
    if has_delifeq {
        assert_eq!(
            command_calls(&mut raw, "delifeq").await - delifeq_before,
            10
        );
        assert_eq!(evalsha, 0, "no script on the hot path");
    } else if has_delex {
        assert_eq!(command_calls(&mut raw, "delex").await - delex_before, 10);
        assert_eq!(evalsha, 0, "no script on the hot path");
    } else {
        assert_eq!(evalsha, 10, "released by the compare-and-delete script");
    }
}

/// One caller at a time on the connection (the usual loop: lock, work, release, again): each
/// `SET NX` is proven its own by the link's solitude, so after the first proof the server
/// sees no `PING` per lock; a caller that overlaps another brings its `PING` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_caller_sends_no_ping_per_lock() {
    let server = RedisServer::start().unwrap();
    let mut raw = server.connection().await;
    let locker = fast(server.url()).await;
    // The first call on a new connection proves it (what came before it is in doubt).
    let guard = locker.lock("lone").await.unwrap();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    let pings_before = command_calls(&mut raw, "ping").await;
    let sets_before = command_calls(&mut raw, "set").await;
    for _ in 0..50 {
        let guard = locker.lock("lone").await.unwrap();
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
    assert_eq!(command_calls(&mut raw, "set").await - sets_before, 50);
    assert_eq!(command_calls(&mut raw, "ping").await - pings_before, 0);

    // Many at once: pipelines overlap, and each brings its proof.
    let pings_before = command_calls(&mut raw, "ping").await;
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let locker = locker.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    let guard = locker.lock(&format!("many{task}")).await.unwrap();
                    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(command_calls(&mut raw, "ping").await > pings_before);
}

/// The scripts the server ran since the slow log was emptied (every command is logged once
/// `slowlog-log-slower-than` is 0), each as its arguments.
async fn scripts_run(raw: &mut MultiplexedConnection) -> Vec<Vec<String>> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(raw)
        .await
        .unwrap();
    entries
        .into_iter()
        .filter_map(|entry| match entry {
            redis::Value::Array(fields) => fields.into_iter().nth(3),
            _ => None,
        })
        .map(|args| redis::from_redis_value::<Vec<String>>(args).unwrap())
        .filter(|args| {
            args[0].eq_ignore_ascii_case("evalsha") || args[0].eq_ignore_ascii_case("eval")
        })
        .collect()
}

/// On one server a release's reply is proven by the link's solitude, or by the `PING` that
/// ends a shared pipeline, so the release script goes without the request id other scripts
/// echo, and without its announcement when it is plain `PUBLISH`: the lock, its waiting mark
/// and the owner, as rslock's release sends the lock and the owner (each argument costs the
/// server about 1,400 instructions). Alone and in shared pipelines alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_script_carries_only_the_lock_its_mark_and_the_owner() {
    let server = RedisServer::start().unwrap();
    let mut raw = server.connection().await;
    let locker = fast(server.url()).await;
    let capabilities = locker.backend().capabilities();
    if capabilities.supports(Capability::DelIfEq) || capabilities.supports(Capability::DelEx) {
        eprintln!("the server has its own compare-and-delete: no release script to look at");
        return;
    }
    // The first call proves the new connection.
    let warm = locker.lock("warm").await.unwrap();
    assert_eq!(warm.release().await.unwrap(), ReleaseOutcome::Released);
    for setting in [
        ("slowlog-max-len", "4096"),
        ("slowlog-log-slower-than", "0"),
    ] {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(setting.0)
            .arg(setting.1)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut raw)
        .await
        .unwrap();
    for _ in 0..5 {
        let guard = locker.lock("alone").await.unwrap();
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let locker = locker.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    let guard = locker.lock(&format!("shared{task}")).await.unwrap();
                    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let releases = scripts_run(&mut raw).await;
    assert_eq!(releases.len(), 5 + 8 * 10, "{releases:?}");
    for release in releases {
        let name = &release[3];
        assert_eq!(release.len(), 6, "{release:?}");
        assert_eq!(release[2], "2");
        assert_eq!(release[4], keys::waiting_key(name));
    }
}

#[tokio::test]
async fn a_re_entry_is_refused_before_anything_is_sent() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let locker = fast(proxy.url()).await;
    let guard = locker.lock("once").await.unwrap();
    let sent = proxy.bytes_to_server();
    let again = locker.try_lock("once").await;
    assert!(
        matches!(again, Err(Error::NotReentrant { .. })),
        "{again:?}"
    );
    assert!(again.unwrap_err().is_input_error());
    assert_eq!(proxy.bytes_to_server(), sent, "0 bytes sent");
    // Another owner (another task) just finds it held.
    let other = locker.clone();
    let taken = tokio::spawn(async move { other.try_lock("once").await.unwrap().is_some() });
    assert!(!taken.await.unwrap());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn fast_and_reentrant_locks_on_one_name_exclude_each_other() {
    let server = RedisServer::start().unwrap();
    let fast_locker = fast(server.url()).await;
    let reentrant = Locker::new(RedisBackend::connect(server.url()).await.unwrap());

    let hash = reentrant.lock("shared").await.unwrap();
    // SET NX finds the key taken, whatever its type: the fast lock waits like anyone else.
    assert!(fast_locker.try_lock("shared").await.unwrap().is_none());
    assert_eq!(hash.release().await.unwrap(), ReleaseOutcome::Released);

    let string = fast_locker.lock("shared").await.unwrap();
    // The hash scripts refuse a string key: a typed error, and the fast hold is untouched.
    let refused = reentrant.try_lock("shared").await;
    assert!(matches!(refused, Err(Error::WrongType(_))), "{refused:?}");
    assert_eq!(string.release().await.unwrap(), ReleaseOutcome::Released);
    let channel = keys::channel("shared");
    assert_eq!(
        channel, "redisson_lock__channel:{shared}",
        "the same release channel"
    );
}

#[tokio::test]
async fn fencing_tokens_on_the_fast_lock_increase() {
    let server = RedisServer::start().unwrap();
    let locker = fast(server.url()).await;
    let options = LockOptions::new().fenced();
    let mut last = 0;
    for _ in 0..5 {
        let guard = locker.lock_with("fenced", &options).await.unwrap();
        let token = guard.fencing_token();
        assert!(token > last, "{token} after {last}");
        last = token;
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }
}

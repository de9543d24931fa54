//! A renewal batch that meets a key of the other lock kind: one name whose key was replaced by a
//! key of another type (a lapsed name re-taken by the other lock kind) is reported as not ours,
//! and every other lease renewed in the same call is kept.
//!
//! Two watchdog locks `a` and `b` are held on one `Locker` with a 300 ms lease (renewed every
//! 100 ms, in one script call for both). Key `a` is then replaced behind the holder's back by a
//! key of the other type. Before the renew scripts checked the key's type, `HEXISTS`/`GET` on it
//! raised `WRONGTYPE`, the whole call failed, and `b` expired with `a`.

use std::time::Duration;

use lock_core::{LeaseLoss, LockGuard, LockOptions, Locker, ReleaseOutcome};
use lock_redis::{LockKind, RedisBackend};
use lock_testkit::RedisServer;
use redis::aio::MultiplexedConnection;
use tokio::time::{sleep, timeout};

const LEASE: Duration = Duration::from_millis(300);

async fn locker(server: &RedisServer, kind: LockKind) -> Locker<RedisBackend> {
    let backend = RedisBackend::builder(server.url())
        .lock_kind(kind)
        .connect()
        .await
        .expect("connect");
    Locker::new(backend)
}

async fn take(locker: &Locker<RedisBackend>, name: &str) -> LockGuard<RedisBackend> {
    let options = LockOptions::new().watchdog_lease(LEASE).no_wait();
    locker
        .lock_with(name, &options)
        .await
        .unwrap_or_else(|error| panic!("lock {name}: {error}"))
}

/// Replaces `name` with a key of the type the other lock kind uses.
async fn replace_with_other_type(raw: &mut MultiplexedConnection, name: &str, kind: LockKind) {
    let deleted: u32 = redis::cmd("DEL")
        .arg(name)
        .query_async(raw)
        .await
        .expect("DEL");
    assert_eq!(deleted, 1, "{name} was not on the server");
    match kind {
        LockKind::Reentrant => {
            let () = redis::cmd("SET")
                .arg(name)
                .arg("x")
                .query_async(raw)
                .await
                .expect("SET");
        }
        _ => {
            let _: u32 = redis::cmd("HSET")
                .arg(name)
                .arg("f")
                .arg(1)
                .query_async(raw)
                .await
                .expect("HSET");
        }
    }
}

/// Whether `guard`'s hold is still on the server, with a lease running.
async fn still_held(
    raw: &mut MultiplexedConnection,
    guard: &LockGuard<RedisBackend>,
    kind: LockKind,
) -> bool {
    let name = guard.name();
    let ours = match kind {
        LockKind::Reentrant => {
            let exists: u32 = redis::cmd("HEXISTS")
                .arg(name)
                .arg(guard.owner_field())
                .query_async(raw)
                .await
                .expect("HEXISTS");
            exists == 1
        }
        _ => {
            let value: Option<String> = redis::cmd("GET")
                .arg(name)
                .query_async(raw)
                .await
                .expect("GET");
            value.as_deref() == Some(guard.owner_field())
        }
    };
    let pttl: i64 = redis::cmd("PTTL")
        .arg(name)
        .query_async(raw)
        .await
        .expect("PTTL");
    ours && pttl > 0
}

async fn a_key_of_the_other_type_costs_only_its_own_lease(kind: LockKind) {
    let server = RedisServer::start().expect("start redis-server");
    let mut raw = server.connection().await;
    let holder = locker(&server, kind).await;
    let a = take(&holder, "a").await;
    let b = take(&holder, "b").await;
    // Let a renewal or two of both happen first.
    sleep(LEASE / 2).await;
    assert!(
        !a.is_lost() && !b.is_lost(),
        "{kind:?}: lost before the swap"
    );

    replace_with_other_type(&mut raw, "a", kind).await;
    sleep(Duration::from_secs(1)).await;

    assert!(
        !b.is_lost(),
        "{kind:?}: b was lost because a's key changed type"
    );
    assert!(
        still_held(&mut raw, &b, kind).await,
        "{kind:?}: b is no longer on the server"
    );
    assert!(a.is_lost(), "{kind:?}: a's guard did not notice");
    let loss = timeout(Duration::from_millis(100), a.lost())
        .await
        .expect("a.lost() resolves once is_lost() is true");
    assert_eq!(loss, LeaseLoss::NotOurs, "{kind:?}");
    // The other type's key is left alone.
    let kind_of_a: String = redis::cmd("TYPE")
        .arg("a")
        .query_async(&mut raw)
        .await
        .expect("TYPE");
    let expected = match kind {
        LockKind::Reentrant => "string",
        _ => "hash",
    };
    assert_eq!(kind_of_a, expected, "{kind:?}");

    drop(a);
    assert_eq!(
        b.release().await.expect("release b"),
        ReleaseOutcome::Released,
        "{kind:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_renewal_survives_a_string_key_in_the_batch() {
    a_key_of_the_other_type_costs_only_its_own_lease(LockKind::Reentrant).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_renewal_survives_a_hash_key_in_the_batch() {
    a_key_of_the_other_type_costs_only_its_own_lease(LockKind::Fast).await;
}

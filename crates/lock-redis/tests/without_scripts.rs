//! The fast lock on a server that runs no scripts (OCI Cache sharded; here a user without
//! `@scripting`) but has native compare-and-set and compare-and-delete (Valkey 9, Redis 8.4):
//! taken with `SET NX PX`, renewed with `SET IFEQ`, released with `DELIFEQ`/`DELEX`, read with
//! `GET` and `PTTL`; everything that needs a script refused before any I/O. On a server
//! without those commands (Redis 7) each test checks that `connect` refuses the fast lock
//! instead, naming them. The lock conformance suite under this user is in `restricted.rs`.

use std::time::Duration;

use lock_core::{Error, LockBackend, LockOptions, Locker, ReleaseOutcome};
use lock_redis::{Capability, LockKind, RedisBackend, Support};
use lock_testkit::restrictions::restricted_user;
use lock_testkit::{Fault, FaultProxy, RedisServer};
use redis::aio::MultiplexedConnection;

/// A server and the URL of a user without scripts on it, when the server keeps the fast lock
/// natively; `None` (after checking that `connect` refuses the fast lock, naming what is
/// missing) when it does not.
async fn scriptless() -> (RedisServer, Option<String>) {
    let server = RedisServer::start().expect("start the server");
    let url = restricted_user(&server, "noscripts", &["-@scripting"]).expect("make the user");
    let admin = RedisBackend::connect(server.url()).await.expect("connect");
    if admin.capabilities().keeps_fast_lock_natively().is_ok() {
        return (server, Some(url));
    }
    let refused = fast(&url).await;
    match refused {
        Err(Error::NotPermitted(cause)) => {
            let text = cause.to_string();
            assert!(
                text.contains("SET IFEQ") && text.contains("DELIFEQ") && text.contains("DELEX"),
                "{text}"
            );
        }
        other => panic!("the fast lock without scripts or natives: {other:?}"),
    }
    eprintln!("this server has no native compare-and-set: connect refuses the fast lock");
    (server, None)
}

async fn fast(url: &str) -> Result<RedisBackend, Error> {
    RedisBackend::builder(url)
        .lock_kind(LockKind::Fast)
        .connect()
        .await
}

/// The commands the ACL refused since the last reset (`ACL LOG`), as `reason:object`.
async fn refusals(admin: &mut MultiplexedConnection) -> Vec<String> {
    let entries: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(admin)
        .await
        .expect("ACL LOG");
    entries
        .iter()
        .map(|entry| {
            let fields: std::collections::HashMap<String, redis::Value> =
                redis::FromRedisValue::from_redis_value(entry.clone()).expect("an entry");
            let text = |field: &str| match fields.get(field) {
                Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            format!("{}:{}", text("reason"), text("object"))
        })
        .collect()
}

async fn forget_refusals(admin: &mut MultiplexedConnection) {
    redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .exec_async(admin)
        .await
        .expect("ACL LOG RESET");
}

/// Everything the fast lock does runs on plain commands: no script is ever sent (the ACL
/// logs nothing after `connect`), renewals keep the lease, a contended lock waits for the
/// release and is woken by it, `inspect` and `force_release` work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fast_lock_runs_on_native_commands_alone() {
    let (server, Some(url)) = scriptless().await else {
        return;
    };
    let mut admin = server.connection().await;
    let backend = fast(&url).await.expect("connect without scripts");
    assert!(matches!(
        backend.capabilities().get(Capability::Eval),
        Support::NotPermitted(_)
    ));
    let other = fast(&url).await.expect("a second client");
    forget_refusals(&mut admin).await;
    let (a, b) = (Locker::new(backend.clone()), Locker::new(other.clone()));

    // Held past its lease by the watchdog's `SET IFEQ` renewals.
    let options = LockOptions::new().watchdog_lease(Duration::from_millis(600));
    let guard = a.lock_with("native:renewed", &options).await.expect("lock");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let state = backend.inspect("native:renewed").await.expect("inspect");
    assert_eq!(state.holders, vec![(guard.owner_field().to_owned(), 1)]);
    assert!(state.ttl.is_some_and(|ttl| ttl > Duration::ZERO));
    assert!(b.try_lock("native:renewed").await.expect("try").is_none());

    // A waiter of the other client is woken by the release (`DELIFEQ` and `PUBLISH`).
    let waiter = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let guard = b.lock("native:renewed").await.expect("the waiter's lock");
        let waited = started.elapsed();
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        waited
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let waited = waiter.await.expect("the waiter");
    assert!(
        waited < Duration::from_secs(2),
        "woken by the release: {waited:?}"
    );

    // Force-release: `GET`, then the compare-and-delete of what it read.
    let held = a.lock("native:forced").await.expect("lock");
    assert!(other.force_release("native:forced").await.expect("force"));
    assert!(!other.force_release("native:forced").await.expect("again"));
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::NotHeld
    );

    // A cancelled wait leaves nothing behind.
    let blocker = a.lock("native:cancelled").await.expect("lock");
    let c = Locker::new(other.clone());
    let cancelled =
        tokio::time::timeout(Duration::from_millis(300), c.lock("native:cancelled")).await;
    assert!(cancelled.is_err(), "the wait was cancelled");
    assert_eq!(
        blocker.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(
        backend
            .inspect("native:cancelled")
            .await
            .expect("inspect")
            .holders
            .is_empty()
    );

    assert_eq!(
        refusals(&mut admin).await,
        Vec::<String>::new(),
        "no script was sent"
    );
}

/// What needs a script (a fencing token, `describe`, the family's other primitives, the
/// reentrant lock) is refused with `Unsupported` before anything is sent: the ACL logs no
/// refusal, and nothing is left on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_needs_a_script_is_refused_before_any_io() {
    let (server, Some(url)) = scriptless().await else {
        return;
    };
    let mut admin = server.connection().await;
    let backend = fast(&url).await.expect("connect without scripts");
    forget_refusals(&mut admin).await;
    let locker = Locker::new(backend.clone());
    let fenced = locker
        .lock_with("native:fenced", &LockOptions::new().fenced())
        .await;
    assert!(
        matches!(fenced, Err(Error::Unsupported { .. })),
        "{fenced:?}"
    );
    let described = backend.describe("native:fenced").await;
    assert!(
        matches!(described, Err(Error::Unsupported { .. })),
        "{described:?}"
    );
    let semaphore = locker.semaphore("native:permits").expect("a semaphore");
    let permits = semaphore.try_acquire(1).await;
    assert!(
        matches!(permits, Err(Error::Unsupported { .. })),
        "{permits:?}"
    );
    assert_eq!(
        refusals(&mut admin).await,
        Vec::<String>::new(),
        "nothing was sent"
    );
    let keys: u64 = redis::cmd("DBSIZE")
        .query_async(&mut admin)
        .await
        .expect("DBSIZE");
    assert_eq!(keys, 0, "nothing left behind");
    let reentrant = RedisBackend::builder(url.as_str()).connect().await;
    assert!(
        matches!(&reentrant, Err(Error::NotPermitted(cause)) if cause.to_string().contains("only the fast lock")),
        "{reentrant:?}"
    );
}

/// A release cut off by a timeout while the connection is replaced is kept for the next
/// connection and runs there first: with scripts and without (the native
/// compare-and-delete and the release message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cut_off_runs_first_on_the_next_connection() {
    let (server, scriptless_url) = scriptless().await;
    let mut admin = server.connection().await;
    let mut urls = vec![None];
    if let Some(url) = scriptless_url {
        urls.push(Some(url));
    }
    for (round, user) in urls.into_iter().enumerate() {
        let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
        let url = match &user {
            None => proxy.url(),
            Some(_) => format!("redis://noscripts:pw@{}/", proxy.addr()),
        };
        let backend = RedisBackend::builder(url.as_str())
            .lock_kind(LockKind::Fast)
            .command_timeout(Duration::from_millis(200))
            .connect()
            .await
            .expect("connect through the proxy");
        let (name, field) = (format!("native:cut:{round}"), "owner-1:1");
        redis::cmd("SET")
            .arg(&name)
            .arg(field)
            .arg("PX")
            .arg(600_000)
            .exec_async(&mut admin)
            .await
            .expect("SET");
        proxy.set_fault(Fault::Blackhole);
        let abandoned = backend.abandon(&name, field, 0).await;
        proxy.clear();
        let mut gone = false;
        for _ in 0..100 {
            let exists: bool = redis::cmd("EXISTS")
                .arg(&name)
                .query_async(&mut admin)
                .await
                .expect("EXISTS");
            if !exists {
                gone = true;
                break;
            }
            // A call of its own brings the connection back, the kept release first.
            let _ = backend.inspect("native:probe").await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            gone,
            "{user:?}: the kept release ran on the next connection (abandon said {abandoned:?})"
        );
    }
}

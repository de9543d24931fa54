//! Lost replies: requests that run on the server but whose replies never arrive (through a
//! fault proxy). The hold count on the server must never end up above the holds the client
//! knows of, an outer hold must never be released by it, and later requests on the same client
//! must get their own replies.

use std::time::Duration;

use lock_core::{LockOptions, Locker, Owner, ReleaseOutcome};
use lock_redis::{LockKind, RedisBackend};
use lock_testkit::{Fault, FaultProxy, RedisServer};

async fn hold_count(server: &RedisServer, name: &str, field: &str) -> Option<u32> {
    let mut connection = server.connection().await;
    redis::cmd("HGET")
        .arg(name)
        .arg(field)
        .query_async(&mut connection)
        .await
        .expect("HGET")
}

async fn setup() -> (RedisServer, FaultProxy, Locker<RedisBackend>) {
    setup_kind(LockKind::Reentrant).await
}

async fn setup_kind(kind: LockKind) -> (RedisServer, FaultProxy, Locker<RedisBackend>) {
    let server = RedisServer::start().expect("server");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let backend = RedisBackend::builder(proxy.url())
        .lock_kind(kind)
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");
    (server, proxy, Locker::new(backend))
}

fn fixed(owner: Owner) -> LockOptions {
    LockOptions::new()
        .no_wait()
        .fixed_lease(Duration::from_secs(10))
        .owner(owner)
}

/// Later requests on the same client get their own replies, and work normally.
async fn twenty_lock_cycles(locker: &Locker<RedisBackend>, options: &LockOptions) {
    for i in 0..20 {
        let name = format!("cycle{i}");
        let guard = locker
            .lock_with(&name, options)
            .await
            .unwrap_or_else(|e| panic!("lock {name}: {e}"));
        assert_eq!(guard.hold_count(), 1, "{name}");
        assert_eq!(
            guard.release().await.unwrap(),
            ReleaseOutcome::Released,
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_whose_reply_is_lost_never_leaves_an_extra_hold() {
    let (server, proxy, locker) = setup().await;
    let options = fixed(Owner::new());
    let outer = locker.lock_with("a", &options).await.unwrap();
    let field = outer.owner_field().to_owned();

    // The re-entry runs on the server (count 2) but its reply is lost; so is the reply of the
    // cleanup, and a new connection cannot even be set up while the fault lasts.
    proxy.set_fault(Fault::DropReplies);
    let inner = locker.lock_with("a", &options).await;
    assert!(inner.is_err(), "{inner:?}");
    proxy.clear();

    twenty_lock_cycles(&locker, &options).await;
    // The owner's next call on the lock first sets the count right: the outer release frees it.
    assert_eq!(outer.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(hold_count(&server, "a", &field).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inner_release_whose_reply_is_lost_keeps_the_outer_hold() {
    let (server, proxy, locker) = setup().await;
    let options = fixed(Owner::new());
    let outer = locker.lock_with("b", &options).await.unwrap();
    let inner = locker.lock_with("b", &options).await.unwrap();
    let field = outer.owner_field().to_owned();
    assert_eq!(hold_count(&server, "b", &field).await, Some(2));

    proxy.set_fault(Fault::DropReplies);
    let released = inner.release().await;
    assert!(released.is_err(), "{released:?}");
    proxy.clear();
    // Applied once, not retried: the outer hold is intact.
    assert_eq!(hold_count(&server, "b", &field).await, Some(1));

    twenty_lock_cycles(&locker, &options).await;
    assert_eq!(hold_count(&server, "b", &field).await, Some(1));
    assert_eq!(outer.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(hold_count(&server, "b", &field).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_is_lost_is_undone_once_replies_flow_again() {
    let (server, proxy, locker) = setup().await;
    let owner = Owner::new();
    let options = fixed(owner);
    proxy.set_fault(Fault::DropReplies);
    let first = locker.lock_with("c", &options).await;
    assert!(first.is_err(), "{first:?}");
    proxy.clear();
    // The next attempt of the same owner settles the earlier one first: a fresh first hold.
    let guard = locker.lock_with("c", &options).await.unwrap();
    assert_eq!(guard.hold_count(), 1);
    let field = guard.owner_field().to_owned();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(hold_count(&server, "c", &field).await, None);
}

/// A reply cut off in the middle (the connection ends inside it): the acquire ran on the
/// server, so the client cannot know whether it holds the lock. The error says so (ambiguous,
/// as a lost connection, not a reply the library does not understand), and the owner's next
/// attempt settles the earlier one first: a fresh first hold, and nothing left after its
/// release. Answered as a protocol error, the first grant stayed on the server unknown to the
/// owner, and its next attempt re-entered it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_whose_reply_is_cut_off_is_ambiguous_and_undone() {
    for kind in [LockKind::Reentrant, LockKind::Fast] {
        let (server, proxy, locker) = setup_kind(kind).await;
        let options = fixed(Owner::new());
        proxy.set_fault(Fault::CutReplies);
        let first = locker.lock_with("cut", &options).await;
        proxy.clear();
        let error = first.expect_err("the reply was cut off");
        assert!(error.is_ambiguous(), "{kind:?}: {error:?}");
        let guard = locker
            .lock_with("cut", &options)
            .await
            .unwrap_or_else(|error| panic!("{kind:?}: {error}"));
        assert_eq!(guard.hold_count(), 1, "{kind:?}");
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        let mut raw = server.connection().await;
        let left: bool = redis::cmd("EXISTS")
            .arg("cut")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(!left, "{kind:?}: the lock is left on the server");
    }
}

/// Many callers share the connection while replies go missing now and then (10 windows): a caller either
/// gets its own reply or an error, never another request's answer. Checked against the server:
/// every grant a caller sees is on the server under its own field, and every `Released` it sees
/// has removed that field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_never_read_each_others_replies() {
    callers_read_only_their_own_replies(LockKind::Reentrant, 24, Duration::ZERO).await;
}

/// The same with the fast lock, whose plain commands prove their replies with a pipelined
/// `ECHO` of the request id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_fast_lock_callers_never_read_each_others_replies() {
    callers_read_only_their_own_replies(LockKind::Fast, 24, Duration::ZERO).await;
}

/// The same with two fast lock callers, one of which pauses between attempts, so most `SET NX`
/// go alone on the connection and are proven by its solitude rather than a `PING`, and some
/// are overtaken: a lone request whose reply is lost would read the next one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_lock_callers_mostly_alone_never_read_each_others_replies() {
    callers_read_only_their_own_replies(LockKind::Fast, 2, Duration::from_millis(3)).await;
}

async fn callers_read_only_their_own_replies(kind: LockKind, callers: usize, pause: Duration) {
    let (server, proxy, locker) = setup_kind(kind).await;
    // Every other worker's lock is held by a client outside the proxy, so replies differ (a
    // grant here, a refusal there) and one read by the wrong caller shows.
    let foreign = Locker::new(
        RedisBackend::builder(server.url())
            .lock_kind(kind)
            .connect()
            .await
            .unwrap(),
    );
    let mut foreign_guards = Vec::new();
    for worker in (1..callers).step_by(2) {
        let options = LockOptions::new()
            .no_wait()
            .fixed_lease(Duration::from_secs(60));
        let guard = foreign.lock_with(&format!("own{worker}"), &options).await;
        foreign_guards.push(guard.unwrap());
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for worker in 0..callers {
        let (locker, stop) = (locker.clone(), stop.clone());
        let mut raw = server.connection().await;
        workers.push(tokio::spawn(async move {
            let options = fixed(Owner::new());
            let name = format!("own{worker}");
            let (mut granted, mut errors) = (0_u32, 0_u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match locker.lock_with(&name, &options).await {
                    Ok(guard) => {
                        granted += 1;
                        let field = guard.owner_field().to_owned();
                        let held = holds_field(&mut raw, kind, &name, &field).await;
                        assert!(held, "{name}: granted, but not on the server");
                        if let Ok(ReleaseOutcome::Released) = guard.release().await {
                            let held = holds_field(&mut raw, kind, &name, &field).await;
                            assert!(!held, "{name}: released, but still on the server");
                        }
                    }
                    // Nobody else uses this name: "held" can only be our own earlier acquire
                    // of unknown outcome (its cleanup still pending), which the lease ends.
                    Err(_) => errors += 1,
                }
                // Even callers (their names free) pause, so the odd ones (refused: another
                // client holds their names) mostly go alone; a grant read in place of one of
                // their refusals shows.
                if worker % 2 == 0 && !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
            (granted, errors)
        }));
    }
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        proxy.set_fault(Fault::DropReplies);
        tokio::time::sleep(Duration::from_millis(30)).await;
        proxy.clear();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut granted, mut failed) = (0, 0);
    for worker in workers {
        let (g, e) = worker
            .await
            .expect("no worker saw a reply that was not its own");
        granted += g;
        failed += e;
    }
    eprintln!("granted {granted}, failed or held {failed}");
    assert!(
        granted > 100,
        "the client recovered between faults ({granted} grants)"
    );
}

/// Whether `field` holds `name` on the server, for either lock kind.
async fn holds_field(
    raw: &mut redis::aio::MultiplexedConnection,
    kind: LockKind,
    name: &str,
    field: &str,
) -> bool {
    if kind == LockKind::Fast {
        let owner: Option<String> = redis::cmd("GET").arg(name).query_async(raw).await.unwrap();
        return owner.as_deref() == Some(field);
    }
    let count: Option<u32> = redis::cmd("HGET")
        .arg(name)
        .arg(field)
        .query_async(raw)
        .await
        .unwrap();
    count >= Some(1)
}

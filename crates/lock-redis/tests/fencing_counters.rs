//! Fencing counters do not grow forever: a name fenced once leaves no counter behind once the
//! server's clock has passed its last token and one lease more, and the tokens of later grants
//! still rise; with `keep_fencing_counters(true)` the counter stays, as Redisson keeps it.

use std::time::Duration;

use lock_core::{FairBackend, LockBackend, LockOptions, Locker, ReadWriteBackend, ReleaseOutcome};
use lock_redis::{LockKind, RedisBackend, keys};
use lock_testkit::RedisServer;
use redis::AsyncCommands;

const LEASE: Duration = Duration::from_millis(300);

/// Two fenced grants of one name with the counter's life between them: the counter's expiry
/// right after the first, its absence once the life has passed, and the tokens.
async fn fence_twice<B: LockBackend>(
    locker: &Locker<B>,
    server: &RedisServer,
    name: &str,
    kept: bool,
) -> (u64, u64) {
    let mut admin = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let counter = keys::token_key(name);
    let options = LockOptions::new().fixed_lease(LEASE).fenced().no_wait();
    let guard = locker.lock_with(name, &options).await.expect("first grant");
    let first = guard.fencing_token();
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let ttl: i64 = admin.pttl(&counter).await.unwrap();
    if kept {
        assert_eq!(ttl, -1, "{name}: a kept counter has no expiry");
    } else {
        assert!(
            ttl > 0 && ttl <= i64::try_from(LEASE.as_millis()).unwrap() + 2,
            "{name}: the counter lives a lease once the clock passed the token: {ttl} ms"
        );
        tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
        let exists: bool = admin.exists(&counter).await.unwrap();
        assert!(!exists, "{name}: the counter outlived its life");
    }
    let guard = locker
        .lock_with(name, &options)
        .await
        .expect("second grant");
    let second = guard.fencing_token();
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    (first, second)
}

async fn backend(server: &RedisServer, kind: LockKind, keep: bool) -> RedisBackend {
    RedisBackend::builder(server.url())
        .lock_kind(kind)
        .keep_fencing_counters(keep)
        .connect()
        .await
        .expect("connect")
}

#[tokio::test]
async fn a_fenced_name_leaves_no_counter_behind_and_tokens_still_rise() {
    let server = RedisServer::start().expect("start redis-server");
    for keep in [false, true] {
        let reentrant = backend(&server, LockKind::Reentrant, keep).await;
        let fast = backend(&server, LockKind::Fast, keep).await;
        let pairs = [
            (
                "reentrant",
                fence_twice(
                    &Locker::new(reentrant.clone()),
                    &server,
                    "fc:reentrant",
                    keep,
                )
                .await,
            ),
            (
                "fast",
                fence_twice(&Locker::new(fast), &server, "fc:fast", keep).await,
            ),
            (
                "fair",
                fence_twice(
                    &Locker::new(reentrant.fair_side()),
                    &server,
                    "fc:fair",
                    keep,
                )
                .await,
            ),
            (
                "write side",
                fence_twice(
                    &Locker::new(reentrant.write_side()),
                    &server,
                    "fc:write",
                    keep,
                )
                .await,
            ),
        ];
        for (what, (first, second)) in pairs {
            assert!(
                second > first,
                "{what} (keep {keep}): {second} after {first}"
            );
        }
        let mut admin = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut admin)
            .await
            .unwrap();
    }
}

/// A counter ahead of the clock (tokens handed out faster than the clock moves, or a clock
/// stepped back) lives until the clock has caught up with its token, and one lease more.
#[tokio::test]
async fn a_counter_ahead_of_the_clock_lives_until_the_clock_passes_it() {
    let server = RedisServer::start().expect("start redis-server");
    let locker = Locker::new(backend(&server, LockKind::Reentrant, false).await);
    let mut admin = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut admin).await.unwrap();
    let ahead = seconds * 1_000_000 + micros + 5_000_000;
    let counter = keys::token_key("fc:ahead");
    let _: () = admin.set(&counter, ahead).await.unwrap();
    let options = LockOptions::new().fixed_lease(LEASE).fenced().no_wait();
    let guard = locker.lock_with("fc:ahead", &options).await.expect("grant");
    assert_eq!(guard.fencing_token(), ahead + 1, "the counter + 1");
    let ttl: u64 = admin.pttl(&counter).await.unwrap();
    let lease = u64::try_from(LEASE.as_millis()).unwrap();
    assert!(
        (5_000 + lease - 100..=5_000 + lease + 2).contains(&ttl),
        "the counter ({ttl} ms left) lives 5 s until the clock reaches its token, and a lease"
    );
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let guard = locker.lock_with("fc:ahead", &options).await.expect("grant");
    assert_eq!(
        guard.fencing_token(),
        ahead + 2,
        "still counting from the counter"
    );
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

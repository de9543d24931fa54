//! Lost replies: a request that runs on the server but whose reply never arrives.

use std::time::Duration;

use lock_core::{LockOptions, Locker, Owner, ReleaseOutcome};
use lock_redis::RedisBackend;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "library bug being fixed: after a lost reply the multiplexed command connection stays \
            out of step (every later reply goes to an earlier, abandoned request)"]
async fn replies_after_a_lost_reply_still_answer_their_own_requests() {
    let server = RedisServer::start().expect("server");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let backend = RedisBackend::builder(proxy.url())
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");
    let locker = Locker::new(backend);
    let owner = Owner::new();
    let options = LockOptions::new()
        .no_wait()
        .lease(Duration::from_secs(10))
        .owner(owner);

    let outer = locker.lock_with("a", &options).await.unwrap().unwrap();
    proxy.set_fault(Fault::DropReplies);
    // A re-entry whose reply is lost: it runs on the server (count 2), the client times out and
    // undoes it with `abandon(keep = 1)` — whose reply is lost too.
    let inner = locker.lock_with("a", &options).await;
    assert!(inner.is_err(), "{inner:?}");
    proxy.clear();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let field = outer.owner_field().to_owned();
    eprintln!(
        "count after the lost re-entry: {:?}",
        hold_count(&server, "a", &field).await
    );

    // Later requests on the same client must get their own answers.
    for i in 0..20 {
        let name = format!("b{i}");
        let guard = locker
            .lock_with(&name, &options)
            .await
            .unwrap_or_else(|e| panic!("lock {name}: {e}"))
            .unwrap_or_else(|| panic!("{name} is free"));
        assert_eq!(guard.hold_count(), 1);
        assert_eq!(
            guard.release().await.unwrap(),
            ReleaseOutcome::Released,
            "{name}"
        );
    }
    assert_eq!(outer.release().await.unwrap(), ReleaseOutcome::Released);
}

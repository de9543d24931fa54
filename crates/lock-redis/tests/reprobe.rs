//! After the command connection is replaced, the backend asks the capability probe again: a
//! capability lost meanwhile (here an ACL edited while the backend runs, as a managed service
//! may after a failover or an upgrade) shows in `latest_capabilities`, while `capabilities`
//! keeps what `connect` found and chose by.

use std::time::Duration;

use lock_core::Locker;
use lock_redis::{Capability, RedisBackend, Support};
use lock_testkit::RedisServer;
use lock_testkit::restrictions::restricted_user;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_connection_is_probed_again() {
    let server = RedisServer::start().expect("start the server");
    let url = restricted_user(&server, "changing", &[]).expect("make the user");
    let backend = RedisBackend::connect(url.as_str()).await.expect("connect");
    assert!(backend.capabilities().get(Capability::EvalSha).is_yes());
    assert_eq!(&backend.latest_capabilities(), backend.capabilities());

    // The ACL changes while the backend runs, and its connections are cut.
    let mut admin = server.connection().await;
    redis::cmd("ACL")
        .arg(&["SETUSER", "changing", "-evalsha"])
        .exec_async(&mut admin)
        .await
        .expect("ACL SETUSER");
    redis::cmd("CLIENT")
        .arg(&["KILL", "USER", "changing"])
        .exec_async(&mut admin)
        .await
        .expect("CLIENT KILL");

    // The next calls find the connection lost and replace it; the probe runs after that.
    let locker = Locker::new(backend.clone());
    let mut latest = backend.latest_capabilities();
    for _ in 0..100 {
        if let Ok(Some(guard)) = locker.try_lock("reprobe").await {
            let _ = guard.release().await;
        }
        latest = backend.latest_capabilities();
        if !latest.get(Capability::EvalSha).is_yes() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        matches!(latest.get(Capability::EvalSha), Support::NotPermitted(_)),
        "the probe after the reconnect found EVALSHA refused:\n{latest}"
    );
    // What connect found, and chose by, stays.
    assert!(backend.capabilities().get(Capability::EvalSha).is_yes());
    assert!(latest.get(Capability::Eval).is_yes());
}

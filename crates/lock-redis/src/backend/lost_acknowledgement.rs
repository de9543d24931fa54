//! A write's acknowledgement reply lost on the way, against a real primary and replica
//! behind a fault proxy. It reaches into the call layer: the damage a foreign reply would do
//! is in the acknowledgement the call reports, which the public API turns into an error
//! either way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{Error, Locker};
use lock_testkit::{Fault, FaultProxy, ReplicatedPair};

use crate::wire::reply::millis;
use crate::wire::scripts::ACQUIRE;
use crate::{LockKind, RedisBackend, ReplicaAck};

/// The script's reply arrives and the `WAIT`'s (the replica's link is cut, so it answers
/// after its timeout) is dropped; a read sent meanwhile on the same connection answers
/// next. The write's pipeline must not take that answer for the `WAIT`'s: proven only by
/// the script's request id, it did, and reported the read's reply as a refused
/// acknowledgement (an integer reply would have been counted as replicas). It must come
/// back out of step, or with the replicas' own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acknowledgement_reply_is_never_taken_from_another_call() {
    let wait = Duration::from_millis(300);
    let mut pair = ReplicatedPair::start().expect("start a primary and a replica");
    pair.cut_link().expect("cut the replica's link");
    let proxy = FaultProxy::start(pair.primary().addr())
        .await
        .expect("proxy");
    let backend = RedisBackend::builder(proxy.url())
        .lock_kind(LockKind::Reentrant)
        .command_timeout(Duration::from_secs(2))
        .replica_ack(ReplicaAck::replicas(1).timeout(wait))
        .connect()
        .await
        .expect("connect through the proxy");
    let locker = Arc::new(Locker::new(backend));
    // The script loaded and the connection set up before the timed part.
    let warm = locker.try_lock("ack:warm").await;
    assert!(matches!(warm, Err(Error::NotReplicated { .. })), "{warm:?}");

    let before = proxy.bytes_to_client();
    let write = tokio::spawn({
        let locker = locker.clone();
        async move {
            let calls = locker.backend().calls();
            calls
                .run_write::<Vec<i64>>("ack:lost", &ACQUIRE, 2, Duration::from_secs(2), |command| {
                    command
                        .arg("ack:lost")
                        .arg(crate::keys::token_key("ack:lost"))
                        .arg(millis(Duration::from_secs(30)))
                        .arg("owner:1")
                        .arg("0");
                })
                .await
        }
    });
    // The script's reply passes at once; the `WAIT`'s comes `wait` later and is dropped.
    let sent = Instant::now();
    while proxy.bytes_to_client() == before {
        assert!(sent.elapsed() < Duration::from_secs(2), "no reply came");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    proxy.set_fault(Fault::DropReplies);
    tokio::time::sleep(wait + Duration::from_millis(150)).await;
    proxy.clear();

    // A read on the same connection while the write still waits for a reply.
    let read = locker.backend().calls().clone();
    let read =
        tokio::spawn(async move { crate::kind::reentrant::inspect(&read, "ack:other").await });
    let written = write.await.expect("write task");
    match &written {
        Err(Error::ConnectionLost(_) | Error::Timeout { .. }) => {}
        Ok((_, Some(Ok(0)))) => {}
        other => panic!("the write took another call's reply for its acknowledgement: {other:?}"),
    }
    if let Ok(state) = read.await.expect("read task") {
        assert!(
            !state.is_locked(),
            "the read got another call's answer: {state:?}"
        );
    }
}

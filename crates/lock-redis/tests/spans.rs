//! The spans a Redis lock reports: `distlock.acquire` and `distlock.release` carry the lock's
//! kind and the node that served the call, against a real server.
//!
//! The testkit's span recorder is the thread's default, and the runtime is single-threaded, so
//! it sees every span.

use lock_core::Locker;
use lock_redis::{LockKind, RedisBackend};
use lock_testkit::{RedisServer, SpanRecorder};

#[tokio::test(flavor = "current_thread")]
async fn acquire_and_release_spans_name_the_kind_and_the_node() {
    let server = RedisServer::start().expect("start redis-server");
    let node = format!("127.0.0.1:{}", server.port());
    for (kind, label) in [(LockKind::Reentrant, "reentrant"), (LockKind::Fast, "fast")] {
        let spans = SpanRecorder::default();
        let _default = tracing::subscriber::set_default(spans.clone());
        let backend = RedisBackend::builder(server.url())
            .lock_kind(kind)
            .connect()
            .await
            .expect("connect");
        let locker = Locker::new(backend);
        let guard = locker.lock("spans:orders").await.expect("lock");
        assert!(guard.release().await.expect("release").was_held());

        let acquires = spans.named("distlock.acquire");
        let [acquire] = acquires.as_slice() else {
            panic!("{label}: one acquire span, got {acquires:?}");
        };
        assert_eq!(acquire.get("kind").map(String::as_str), Some(label));
        assert_eq!(acquire.get("node"), Some(&node), "{label}: {acquire:?}");
        assert_eq!(acquire.get("outcome").map(String::as_str), Some("granted"));
        assert_eq!(
            acquire.get("name").map(String::as_str),
            Some("spans:orders")
        );

        let releases = spans.named("distlock.release");
        let [release] = releases.as_slice() else {
            panic!("{label}: one release span, got {releases:?}");
        };
        assert_eq!(release.get("kind").map(String::as_str), Some(label));
        assert_eq!(release.get("node"), Some(&node), "{label}: {release:?}");
        assert_eq!(release.get("outcome").map(String::as_str), Some("released"));
    }
}

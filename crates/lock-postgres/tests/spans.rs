//! The spans a PostgreSQL lock reports: `distlock.acquire` and `distlock.release` carry the
//! backend's kind and the server that served the call, as on Redis.
//!
//! The testkit's span recorder is the thread's default, and the runtime is single-threaded, so
//! it sees every span.

mod common;

use lock_core::Locker;
use lock_testkit::SpanRecorder;

#[tokio::test(flavor = "current_thread")]
async fn acquire_and_release_spans_name_the_kind_and_the_server() {
    let harness = common::Postgres::listening();
    let node = format!("127.0.0.1:{}", harness.server.port());
    let spans = SpanRecorder::default();
    let _default = tracing::subscriber::set_default(spans.clone());
    let locker = Locker::new(harness.backend().await);
    let guard = locker.lock("spans:orders").await.expect("lock");
    assert!(guard.release().await.expect("release").was_held());

    let acquires = spans.named("distlock.acquire");
    let [acquire] = acquires.as_slice() else {
        panic!("one acquire span, got {acquires:?}");
    };
    assert_eq!(acquire.get("kind").map(String::as_str), Some("postgres"));
    assert_eq!(acquire.get("node"), Some(&node), "{acquire:?}");
    assert_eq!(acquire.get("outcome").map(String::as_str), Some("granted"));
    assert_eq!(
        acquire.get("name").map(String::as_str),
        Some("spans:orders")
    );

    let releases = spans.named("distlock.release");
    let [release] = releases.as_slice() else {
        panic!("one release span, got {releases:?}");
    };
    assert_eq!(release.get("kind").map(String::as_str), Some("postgres"));
    assert_eq!(release.get("node"), Some(&node), "{release:?}");
    assert_eq!(release.get("outcome").map(String::as_str), Some("released"));
}

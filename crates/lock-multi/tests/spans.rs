//! A composite's spans: `distlock.acquire` / `distlock.release` say the kind (`redlock`) and
//! carry no single node; each node's part of the call is a `distlock.node` span that names the
//! server it was sent to.

use std::collections::BTreeSet;
use std::sync::Arc;

use lock_core::{DynLockBackend, Locker};
use lock_multi::RedLock;
use lock_redis::RedisBackend;
use lock_testkit::{RedisNodes, SpanRecorder};

/// A RedLock over a fresh client of every node.
async fn redlock(nodes: &RedisNodes) -> Locker<RedLock> {
    let mut backends: Vec<Arc<dyn DynLockBackend>> = Vec::new();
    for url in nodes.urls() {
        backends.push(Arc::new(RedisBackend::connect(url).await.expect("connect")));
    }
    Locker::new(RedLock::new(backends).expect("redlock"))
}

#[tokio::test(flavor = "current_thread")]
async fn each_node_of_a_redlock_names_its_server_in_its_own_span() {
    let nodes = RedisNodes::start(3).expect("start 3 servers");
    let spans = SpanRecorder::default();
    let _default = tracing::subscriber::set_default(spans.clone());
    let locker = redlock(&nodes).await;
    let guard = locker.lock("spans:redlock").await.expect("lock");
    assert!(guard.release().await.expect("release").was_held());

    let expected: BTreeSet<String> = nodes
        .urls()
        .iter()
        .map(|url| {
            url.trim_start_matches("redis://")
                .trim_end_matches('/')
                .to_owned()
        })
        .collect();
    for span in ["distlock.acquire", "distlock.release"] {
        let recorded = spans.named(span);
        let [fields] = recorded.as_slice() else {
            panic!("one {span} span, got {recorded:?}");
        };
        assert_eq!(fields.get("kind").map(String::as_str), Some("redlock"));
        assert_eq!(
            fields.get("node"),
            None,
            "{span} names no single node: {fields:?}"
        );
    }
    let per_node = spans.named("distlock.node");
    let named: BTreeSet<String> = per_node
        .iter()
        .filter_map(|fields| fields.get("node").cloned())
        .collect();
    assert_eq!(named, expected, "{per_node:?}");
    assert_eq!(
        per_node.len(),
        6,
        "3 nodes × (acquire, release): {per_node:?}"
    );
}

/// At `INFO` (a usual production filter) the per-node spans are recorded too, so no node
/// writes its server on the composite's own span.
#[tokio::test(flavor = "current_thread")]
async fn at_info_a_redlock_span_still_names_no_single_node() {
    let nodes = RedisNodes::start(3).expect("start 3 servers");
    let spans = SpanRecorder::up_to(tracing::Level::INFO);
    let _default = tracing::subscriber::set_default(spans.clone());
    let locker = redlock(&nodes).await;
    let guard = locker.lock("spans:redlock:info").await.expect("lock");
    assert!(guard.release().await.expect("release").was_held());
    for span in ["distlock.acquire", "distlock.release"] {
        let recorded = spans.named(span);
        let [fields] = recorded.as_slice() else {
            panic!("one {span} span, got {recorded:?}");
        };
        assert_eq!(
            fields.get("node"),
            None,
            "{span} names no single node: {fields:?}"
        );
    }
    assert_eq!(
        spans.named("distlock.node").len(),
        6,
        "3 nodes × (acquire, release)"
    );
}

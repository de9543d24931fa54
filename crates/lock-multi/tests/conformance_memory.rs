//! The conformance suite for MultiLock over in-memory nodes (fast; the Redis runs are in
//! `conformance_redis.rs`).

use std::sync::Arc;

use lock_core::{DynLockBackend, MemoryBackend};
use lock_multi::MultiLock;
use lock_testkit::conformance::Harness;

/// Three independent in-memory stores; each client is a new MultiLock over new clients of them.
struct MemoryNodes(Vec<MemoryBackend>);

impl Harness for MemoryNodes {
    type Backend = MultiLock;

    async fn client(&self) -> MultiLock {
        let nodes: Vec<Arc<dyn DynLockBackend>> = self
            .0
            .iter()
            .map(|store| Arc::new(store.new_client()) as _)
            .collect();
        MultiLock::new(nodes).expect("three nodes")
    }
}

lock_testkit::conformance_tests!(MemoryNodes(vec![
    MemoryBackend::new(),
    MemoryBackend::new(),
    MemoryBackend::new()
]));

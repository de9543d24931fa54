//! The conformance suite for both composites over in-memory nodes (fast; the runs over real
//! Redis nodes are in `conformance_redis.rs`).

use std::sync::Arc;

use lock_core::{DynLockBackend, MemoryBackend};
use lock_multi::{Composite, Quorum};
use lock_testkit::conformance::Harness;

/// Independent in-memory stores; each client is a new composite over new clients of them.
struct MemoryNodes(Vec<MemoryBackend>);

impl MemoryNodes {
    fn new(count: usize) -> Self {
        MemoryNodes((0..count).map(|_| MemoryBackend::new()).collect())
    }

    fn composite<P: Quorum + Default>(&self) -> Composite<P> {
        let nodes: Vec<Arc<dyn DynLockBackend>> = self
            .0
            .iter()
            .map(|store| Arc::new(store.new_client()) as _)
            .collect();
        Composite::new(nodes).expect("valid composite")
    }
}

mod multi_memory {
    use super::*;
    use lock_multi::MultiLock;

    struct Multi(MemoryNodes);
    impl Harness for Multi {
        type Backend = MultiLock;
        async fn client(&self) -> MultiLock {
            self.0.composite()
        }
    }
    lock_testkit::conformance_tests!(Multi(MemoryNodes::new(3)));
}

mod redlock_memory {
    use super::*;
    use lock_multi::RedLock;

    struct Red(MemoryNodes);
    impl Harness for Red {
        type Backend = RedLock;
        async fn client(&self) -> RedLock {
            self.0.composite()
        }
    }
    lock_testkit::conformance_tests!(Red(MemoryNodes::new(5)));
}

//! The conformance suite for both composites over in-memory nodes (fast; the runs over real
//! Redis nodes are in `conformance_redis.rs`).

use std::sync::Arc;
use std::time::Duration;

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
        Composite::builder(nodes)
            .node_timeout(NODE_TIMEOUT)
            .build()
            .expect("valid composite")
    }
}

/// Each node call's deadline. The default (5 % of the lease) is 15 ms for the suite's 300 ms
/// leases: on a loaded 2-core CI machine a node's answer sometimes comes later, and a release
/// then reports `PartlyReleased`, which is the timeout doing its job, not a contract failure. The
/// suite checks the contract, so its nodes get a deadline a loaded machine meets; the short
/// deadlines themselves are tested in `faults.rs` and the composite's unit tests.
const NODE_TIMEOUT: Duration = Duration::from_millis(250);

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

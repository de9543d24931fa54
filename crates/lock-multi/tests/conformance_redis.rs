//! The conformance suite for both composites over three real Redis nodes (the fast runs over
//! in-memory nodes are in `conformance_memory.rs`).

use std::sync::Arc;
use std::time::Duration;

use lock_core::DynLockBackend;
use lock_multi::{Composite, Quorum};
use lock_redis::RedisBackend;
use lock_testkit::RedisNodes;
use lock_testkit::conformance::Harness;

/// Three independent Redis servers; each client connects to every one of them anew.
struct RedisHarness {
    nodes: RedisNodes,
}

impl RedisHarness {
    fn start() -> Self {
        RedisHarness {
            nodes: RedisNodes::start(3).expect("start three redis-server nodes"),
        }
    }

    async fn composite<P: Quorum + Default>(&self) -> Composite<P> {
        let mut nodes: Vec<Arc<dyn DynLockBackend>> = Vec::new();
        for url in self.nodes.urls() {
            let node = RedisBackend::connect(&url).await.expect("connect");
            nodes.push(Arc::new(node));
        }
        Composite::builder(nodes)
            .node_timeout(NODE_TIMEOUT)
            .build()
            .expect("three nodes")
    }
}

/// Each node call's deadline: as in `conformance_memory.rs`, one a loaded CI machine meets (the
/// default, 5 % of the suite's 300 ms leases, is 15 ms); the suite checks the contract, and the
/// short deadlines are tested in `faults.rs`.
const NODE_TIMEOUT: Duration = Duration::from_millis(250);

mod multi_redis {
    use super::*;
    use lock_multi::MultiLock;

    struct Multi(RedisHarness);
    impl Harness for Multi {
        type Backend = MultiLock;
        async fn client(&self) -> MultiLock {
            self.0.composite().await
        }
    }
    lock_testkit::conformance_tests!(Multi(RedisHarness::start()));
}

mod redlock_redis {
    use super::*;
    use lock_multi::RedLock;

    struct Red(RedisHarness);
    impl Harness for Red {
        type Backend = RedLock;
        async fn client(&self) -> RedLock {
            self.0.composite().await
        }
    }
    lock_testkit::conformance_tests!(Red(RedisHarness::start()));
}

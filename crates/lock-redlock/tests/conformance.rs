//! The conformance suite for both composites over three real Redis nodes, and for RedLock over
//! in-memory nodes.

use std::sync::Arc;

use lock_core::{DynLockBackend, MemoryBackend};
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
        Composite::new(nodes).expect("three nodes")
    }
}

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
    use lock_redlock::RedLock;

    struct Red(RedisHarness);
    impl Harness for Red {
        type Backend = RedLock;
        async fn client(&self) -> RedLock {
            self.0.composite().await
        }
    }
    lock_testkit::conformance_tests!(Red(RedisHarness::start()));
}

mod redlock_memory {
    use super::*;
    use lock_redlock::RedLock;

    struct Memory(Vec<MemoryBackend>);
    impl Harness for Memory {
        type Backend = RedLock;
        async fn client(&self) -> RedLock {
            let nodes: Vec<Arc<dyn DynLockBackend>> = self
                .0
                .iter()
                .map(|store| Arc::new(store.new_client()) as _)
                .collect();
            RedLock::new(nodes).expect("five nodes")
        }
    }
    lock_testkit::conformance_tests!(Memory((0..5).map(|_| MemoryBackend::new()).collect()));
}

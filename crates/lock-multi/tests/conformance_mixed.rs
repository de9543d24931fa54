//! One composite over two kinds of store: the lock conformance suite on a MultiLock whose nodes
//! are a Redis backend and a PostgreSQL backend, and on a RedLock over Redis, PostgreSQL and a
//! second Redis. Nothing in the composites knows which store a node is: the contract is all
//! they use.

use std::sync::Arc;
use std::time::Duration;

use lock_core::DynLockBackend;
use lock_multi::{Composite, Quorum};
use lock_postgres::PostgresBackend;
use lock_redis::RedisBackend;
use lock_testkit::conformance::Harness;
use lock_testkit::{PostgresServer, RedisNodes, SharedFixture};
use tokio::sync::OnceCell;

/// One PostgreSQL for the whole binary (every case uses fresh names; `initdb` is the slow
/// part of a start).
static POSTGRES: SharedFixture<PostgresServer> = SharedFixture::new();

/// Real servers of both kinds; each client connects to every one of them anew.
struct Mixed {
    redis: RedisNodes,
    postgres: Arc<PostgresServer>,
    /// The schema, installed (idempotently) by the case's first client.
    schema: OnceCell<()>,
}

impl Mixed {
    /// `redis_nodes` Redis servers of the case's own, and the shared PostgreSQL.
    fn start(redis_nodes: usize) -> Self {
        Mixed {
            redis: RedisNodes::start(redis_nodes).expect("start redis-server nodes"),
            postgres: POSTGRES.get_or_start(|| PostgresServer::start().expect("start PostgreSQL")),
            schema: OnceCell::new(),
        }
    }

    /// The composite: the first Redis node, then PostgreSQL, then the other Redis nodes.
    async fn composite<P: Quorum + Default>(&self) -> Composite<P> {
        let url = self.postgres.url();
        self.schema
            .get_or_init(|| async {
                let config = url.parse().expect("the server's URL");
                lock_postgres::install_schema(&config)
                    .await
                    .expect("install the schema");
            })
            .await;
        let mut nodes: Vec<Arc<dyn DynLockBackend>> = Vec::new();
        for (index, url) in self.redis.urls().into_iter().enumerate() {
            nodes.push(Arc::new(
                RedisBackend::connect(&url).await.expect("connect"),
            ));
            if index == 0 {
                let postgres = PostgresBackend::connect(&self.postgres.url())
                    .await
                    .expect("connect to PostgreSQL");
                nodes.push(Arc::new(postgres));
            }
        }
        Composite::builder(nodes)
            .node_timeout(NODE_TIMEOUT)
            .build()
            .expect("the nodes")
    }
}

/// Each node call's deadline: one a loaded CI machine meets. Longer than the Redis-only suites'
/// 250 ms: a PostgreSQL node's call is a transaction on a server sharing the 2 cores with the
/// other test binaries, and it took longer than 250 ms in two CI runs (a release and a renewal
/// timed out on that node, which the suite, checking the contract, then reported as a quorum
/// error). The short deadlines themselves are tested in `faults.rs` and the composite's unit
/// tests.
const NODE_TIMEOUT: Duration = Duration::from_secs(1);

mod multi_redis_postgres {
    use super::*;
    use lock_multi::MultiLock;

    struct Multi(Mixed);
    impl Harness for Multi {
        type Backend = MultiLock;
        async fn client(&self) -> MultiLock {
            self.0.composite().await
        }
    }
    lock_testkit::conformance_tests!(Multi(Mixed::start(1)));
}

mod redlock_redis_postgres_redis {
    use super::*;
    use lock_multi::RedLock;

    struct Red(Mixed);
    impl Harness for Red {
        type Backend = RedLock;
        async fn client(&self) -> RedLock {
            self.0.composite().await
        }
    }
    lock_testkit::conformance_tests!(Red(Mixed::start(2)));
}

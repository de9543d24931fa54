//! The conformance suite against a real Redis (or Valkey) server, with pub/sub notifications and
//! with the polling fallback, for both lock kinds; and the semaphore suite.

use lock_redis::{LockKind, NotificationMode, RedisBackend};
use lock_testkit::RedisServer;
use lock_testkit::conformance::Harness;

struct Redis {
    server: RedisServer,
    notifications: NotificationMode,
    kind: LockKind,
}

impl Harness for Redis {
    type Backend = RedisBackend;

    async fn client(&self) -> RedisBackend {
        RedisBackend::builder(self.server.url())
            .notifications(self.notifications)
            .lock_kind(self.kind)
            .connect()
            .await
            .expect("connect to the test server")
    }
}

fn start(notifications: NotificationMode) -> Redis {
    start_kind(notifications, LockKind::Reentrant)
}

fn start_kind(notifications: NotificationMode, kind: LockKind) -> Redis {
    Redis {
        server: RedisServer::start().expect("start redis-server"),
        notifications,
        kind,
    }
}

mod pubsub {
    use super::*;
    lock_testkit::conformance_tests!(start(NotificationMode::PubSub));
}

mod polling {
    use super::*;
    lock_testkit::conformance_tests!(start(NotificationMode::Polling(
        std::time::Duration::from_millis(50)
    )));
}

mod fast_pubsub {
    use super::*;
    lock_testkit::conformance_tests!(start_kind(NotificationMode::PubSub, LockKind::Fast));
}

mod fast_polling {
    use super::*;
    lock_testkit::conformance_tests!(start_kind(
        NotificationMode::Polling(std::time::Duration::from_millis(50)),
        LockKind::Fast
    ));
}

mod semaphore_pubsub {
    use super::*;
    lock_testkit::semaphore_conformance_tests!(start(NotificationMode::PubSub));
}

mod semaphore_polling {
    use super::*;
    lock_testkit::semaphore_conformance_tests!(start(NotificationMode::Polling(
        std::time::Duration::from_millis(50)
    )));
}

/// The write side of the read-write locks: an exclusive lock, so the whole lock suite holds.
struct WriteSide(Redis);

impl Harness for WriteSide {
    type Backend = lock_redis::RedisWriteSide;

    async fn client(&self) -> lock_redis::RedisWriteSide {
        use lock_core::ReadWriteBackend;
        self.0.client().await.write_side()
    }
}

mod rw_write_side {
    use super::*;
    lock_testkit::conformance_tests!(WriteSide(start(NotificationMode::PubSub)));
}

mod latch_pubsub {
    use super::*;
    lock_testkit::latch_conformance_tests!(start(NotificationMode::PubSub));
}

mod permits_pubsub {
    use super::*;
    lock_testkit::permit_conformance_tests!(start(NotificationMode::PubSub));
}

mod rwlock_pubsub {
    use super::*;
    lock_testkit::rw_conformance_tests!(start(NotificationMode::PubSub));
}

mod fair_pubsub {
    use super::*;
    lock_testkit::fair_conformance_tests!(start(NotificationMode::PubSub));
}

mod fair_side {
    use super::*;
    use lock_testkit::fair_conformance::FairSide;
    lock_testkit::conformance_tests!(FairSide(start(NotificationMode::PubSub)));
}

mod election_pubsub {
    use super::*;
    lock_testkit::election_conformance_tests!(start(NotificationMode::PubSub));
}

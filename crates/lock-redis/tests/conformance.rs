//! Every conformance suite against a real Redis (or Valkey) server with pub/sub notifications;
//! the lock and semaphore suites again with the polling fallback, and the lock suite on the
//! fast lock with each.

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

/// Every suite with release notifications by pub/sub (the default).
mod pubsub {
    use super::*;
    lock_testkit::family_conformance_tests!(start(NotificationMode::PubSub));
}

/// The lock and the semaphore with polling waiters instead of notifications.
mod polling {
    use super::*;
    lock_testkit::conformance_tests!(start(NotificationMode::Polling(
        std::time::Duration::from_millis(50)
    )));
}

mod semaphore_polling {
    use super::*;
    lock_testkit::semaphore_conformance_tests!(start(NotificationMode::Polling(
        std::time::Duration::from_millis(50)
    )));
}

/// The fast lock (`SET NX`), with each kind of waiting.
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

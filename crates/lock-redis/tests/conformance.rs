//! The conformance suite against a real Redis (or Valkey) server, with pub/sub notifications and
//! with the polling fallback.

use lock_redis::{NotificationMode, RedisBackend};
use lock_testkit::RedisServer;
use lock_testkit::conformance::Harness;

struct Redis {
    server: RedisServer,
    notifications: NotificationMode,
}

impl Harness for Redis {
    type Backend = RedisBackend;

    async fn client(&self) -> RedisBackend {
        RedisBackend::builder(self.server.url())
            .notifications(self.notifications)
            .connect()
            .await
            .expect("connect to the test server")
    }
}

fn start(notifications: NotificationMode) -> Redis {
    Redis {
        server: RedisServer::start().expect("start redis-server"),
        notifications,
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

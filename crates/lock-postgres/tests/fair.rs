//! The fair lock against a real PostgreSQL server (one per test binary, shared by its cases):
//! the fair lock suite with `LISTEN`/`NOTIFY` wake-ups and with polling waiters, the whole lock
//! suite on the fair side, and the head's own wake-up channel computed alike by the client and
//! the SQL.

mod common;

use std::time::Duration;

use common::Postgres;
use lock_core::{FairBackend, LockOptions, Locker};
use lock_postgres::PostgresBackend;

mod listen {
    use super::*;
    lock_testkit::fair_conformance_tests!(Postgres::listening());
}

mod poll {
    use super::*;
    lock_testkit::fair_conformance_tests!(Postgres::polling());
}

/// The fair side is an exclusive reentrant lock: the whole lock suite holds for it.
mod fair_side {
    use super::*;
    lock_testkit::conformance_tests!(lock_testkit::fair_conformance::FairSide(
        Postgres::listening()
    ));
}

/// The head of the queue is woken on the channel the client listens on, whatever the name: far
/// sooner than its next attempt on its own (a third of the queue timeout) or its polling.
#[test]
fn the_head_is_woken_on_its_own_channel() {
    lock_testkit::conformance::run(async {
        let harness = Postgres::listening();
        let holder = Locker::new(harness.backend().await.fair_side());
        let waiter = Locker::new(
            PostgresBackend::builder(&harness.server.url())
                .expect("url")
                .poll_interval(Duration::from_secs(30))
                .connect()
                .await
                .expect("connect")
                .fair_side(),
        );
        for name in [
            "fair-channel-a".to_owned(),
            "fair-channel-".repeat(300),
            "fair-channel-nul\0inside".to_owned(),
            "fair-channel-ünïcödé".to_owned(),
        ] {
            let options = LockOptions::new().fixed_lease(Duration::from_secs(20));
            let guard = holder.lock_with(&name, &options).await.expect("lock");
            let waiting = tokio::spawn({
                let (waiter, name) = (waiter.clone(), name.clone());
                async move {
                    let guard = waiter.lock(&name).await.expect("lock");
                    assert!(guard.release().await.expect("release").was_held());
                }
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!waiting.is_finished(), "{name:?} is held");
            assert!(guard.release().await.expect("release").was_held());
            tokio::time::timeout(Duration::from_millis(1500), waiting)
                .await
                .expect("woken by the release")
                .expect("waiter");
        }
    });
}

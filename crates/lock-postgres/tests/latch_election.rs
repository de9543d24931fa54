//! The count-down latch and leader election conformance suites against a real PostgreSQL
//! server (one per test binary, shared by its cases: every case uses fresh names), with
//! `LISTEN`/`NOTIFY` wake-ups; then what is particular to PostgreSQL's tables.

mod common;

use std::time::Duration;

use lock_core::{ElectionBackend, LatchBackend, Locker};
use lock_testkit::conformance::{fresh_name, run};
use tokio::time::{Instant, timeout};

lock_testkit::latch_conformance_tests!(common::Postgres::listening());
lock_testkit::election_conformance_tests!(common::Postgres::listening());

/// Counts are `u64` beyond `bigint` (stored as `numeric`); a count of zero is a latch that
/// exists (set once) and is open.
#[test]
fn latch_counts_span_u64() {
    run(async {
        // The harness holds the server: it stops when the last holder goes.
        let harness = common::Postgres::listening();
        let backend = harness.backend().await;
        let name = fresh_name("latch-u64");
        assert!(backend.try_set_count(&name, u64::MAX).await.expect("set"));
        assert_eq!(backend.latch_count(&name).await.expect("count"), u64::MAX);
        assert_eq!(backend.count_down(&name).await.expect("down"), u64::MAX - 1);
        assert!(backend.delete_latch(&name).await.expect("delete"));
        assert!(backend.try_set_count(&name, 0).await.expect("set zero"));
        assert_eq!(backend.latch_count(&name).await.expect("count"), 0);
        assert!(!backend.try_set_count(&name, 3).await.expect("set once"));
        assert_eq!(backend.count_down(&name).await.expect("down"), 0);
        assert!(!backend.delete_latch(&name).await.expect("gone at zero"));
    });
}

/// A leader's value is kept byte for byte (NUL included); a plain lock of the election's name
/// is no leader; several observers and a candidate of one client all hear a resignation.
#[test]
fn election_values_and_local_watchers() {
    run(async {
        let harness = common::Postgres::listening();
        let name = fresh_name("election-pg");
        let leading = Locker::new(harness.backend().await);
        let leadership = leading
            .election(&name)
            .expect("name")
            .campaign("a\0b")
            .await
            .expect("campaign");
        let client = Locker::new(harness.backend().await);
        let election = client.election(&name).expect("name");
        let leader = election.leader().await.expect("leader").expect("leads");
        assert_eq!(leader.value, "a\0b");
        let mut observers = Vec::new();
        for _ in 0..3 {
            let mut observer = election.observe();
            assert!(observer.changed().await.expect("now").is_some());
            observers.push(tokio::spawn(async move {
                let change = observer.changed().await.expect("change");
                (Instant::now(), change)
            }));
        }
        let candidate = {
            let election = election.clone();
            tokio::spawn(async move {
                let leadership = election.campaign("b").await.expect("campaign");
                (Instant::now(), leadership)
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let resigned_at = Instant::now();
        assert!(leadership.resign().await.expect("resign"));
        let (won_at, next) = timeout(Duration::from_secs(5), candidate)
            .await
            .expect("the candidate leads")
            .expect("task");
        assert!(won_at.duration_since(resigned_at) < Duration::from_millis(700));
        for observer in observers {
            let (seen_at, _) = timeout(Duration::from_secs(5), observer)
                .await
                .expect("seen")
                .expect("task");
            assert!(seen_at.duration_since(resigned_at) < Duration::from_millis(700));
        }
        assert!(next.resign().await.expect("resign"));

        // A plain lock of the same name: held, but nobody leads.
        let guard = client.lock(&name).await.expect("lock");
        assert_eq!(client.backend().leader(&name).await.expect("leader"), None);
        assert_eq!(
            guard.release().await.expect("release"),
            lock_core::ReleaseOutcome::Released
        );
    });
}

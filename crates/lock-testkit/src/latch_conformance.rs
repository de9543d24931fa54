//! The countdown latch conformance suite: behaviour every [`LatchBackend`] must show, for any
//! [`Harness`] whose backend implements it, as one test per case with
//! [`latch_conformance_tests!`](crate::latch_conformance_tests):
//!
//! ```
//! use lock_core::MemoryBackend;
//! use lock_testkit::conformance::Harness;
//!
//! struct Memory(MemoryBackend);
//!
//! impl Harness for Memory {
//!     type Backend = MemoryBackend;
//!     async fn client(&self) -> MemoryBackend {
//!         self.0.new_client()
//!     }
//! }
//!
//! lock_testkit::latch_conformance_tests!(Memory(MemoryBackend::new()));
//! # fn main() {}
//! ```
//!
//! Openings are asserted to reach waiters well under their one-second re-check, so a case fails
//! when waiters are not woken by the announcements.

use std::time::Duration;

use lock_core::{CountDownLatch, Error, LatchBackend, Locker};
use tokio::time::{Instant, sleep, timeout};

use crate::conformance::{Harness, fresh_name};

/// How long a waiter may take to go on after the latch opens: well under the one-second
/// re-check that would find it open without any announcement.
const WAKE_UP: Duration = Duration::from_millis(700);

async fn latch_of<H: Harness>(harness: &H, name: &str) -> CountDownLatch<H::Backend>
where
    H::Backend: LatchBackend,
{
    Locker::new(harness.client().await)
        .latch(name)
        .expect("a valid name")
}

/// The count is set once and counted down by every client, to zero and no further.
pub async fn latch_counts_down<H: Harness>(harness: &H)
where
    H::Backend: LatchBackend,
{
    let name = fresh_name("latch-count");
    let a = latch_of(harness, &name).await;
    let b = latch_of(harness, &name).await;
    assert_eq!(a.count().await.expect("count"), 0, "never set: open");
    assert!(a.try_set_count(3).await.expect("set"));
    assert!(!b.try_set_count(5).await.expect("set again"), "set once");
    assert_eq!(b.count().await.expect("count"), 3);
    assert_eq!(b.count_down().await.expect("down"), 2);
    assert_eq!(a.count_down().await.expect("down"), 1);
    assert_eq!(b.count_down().await.expect("down"), 0);
    assert_eq!(a.count().await.expect("count"), 0);
    assert_eq!(a.count_down().await.expect("down an open latch"), 0);
    assert_eq!(b.count().await.expect("count"), 0);
    // Open, it can be set again (a new round).
    assert!(a.try_set_count(1).await.expect("set again once open"));
    assert!(b.delete().await.expect("delete"));
    assert!(!b.delete().await.expect("delete again"));
}

/// Every waiter, of every client, goes on at once when the count reaches zero.
pub async fn latch_opens_every_waiter<H: Harness>(harness: &H)
where
    H::Backend: LatchBackend,
{
    let name = fresh_name("latch-open");
    let setter = latch_of(harness, &name).await;
    assert!(setter.try_set_count(2).await.expect("set"));
    let mut waiters = Vec::new();
    for client in 0..2 {
        let latch = latch_of(harness, &name).await;
        for _ in 0..(2 + client) {
            let latch = latch.clone();
            waiters.push(tokio::spawn(async move {
                latch.wait().await.expect("wait");
                Instant::now()
            }));
        }
    }
    sleep(Duration::from_millis(300)).await;
    assert!(waiters.iter().all(|waiter| !waiter.is_finished()), "closed");
    setter.count_down().await.expect("down");
    // Open just after the waiters' own re-check (a second after their first look): found by
    // that re-check alone, the opening would take them most of a second more.
    sleep(Duration::from_millis(750)).await;
    assert!(
        waiters.iter().all(|waiter| !waiter.is_finished()),
        "one left"
    );
    let opened_at = Instant::now();
    assert_eq!(setter.count_down().await.expect("down"), 0);
    for waiter in waiters {
        let went_on_at = timeout(Duration::from_secs(5), waiter)
            .await
            .expect("every waiter goes on")
            .expect("task");
        let wake_up = went_on_at.duration_since(opened_at);
        assert!(wake_up < WAKE_UP, "a waiter took {wake_up:?}");
    }
}

/// A wait on an open latch returns at once; a bounded wait on a closed one says it timed out,
/// neither early nor late.
pub async fn latch_wait_timeout<H: Harness>(harness: &H)
where
    H::Backend: LatchBackend,
{
    let name = fresh_name("latch-timeout");
    let latch = latch_of(harness, &name).await;
    let started = Instant::now();
    latch.wait().await.expect("never set: open");
    assert!(
        latch
            .wait_timeout(Duration::from_secs(5))
            .await
            .expect("wait")
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "waited on an open latch"
    );
    assert!(latch.try_set_count(1).await.expect("set"));
    let wait = Duration::from_millis(400);
    let started = Instant::now();
    assert!(!latch.wait_timeout(wait).await.expect("wait"));
    let waited = started.elapsed();
    assert!(waited >= wait, "gave up early, after {waited:?}");
    assert!(
        waited < wait + Duration::from_secs(1),
        "overran: {waited:?}"
    );
    assert!(latch.delete().await.expect("clean up"));
}

/// Deleting a latch (an operator's reset) opens it for every waiter at once.
pub async fn latch_delete_opens_it<H: Harness>(harness: &H)
where
    H::Backend: LatchBackend,
{
    let name = fresh_name("latch-delete");
    let operator = latch_of(harness, &name).await;
    let waiting = latch_of(harness, &name).await;
    assert!(operator.try_set_count(5).await.expect("set"));
    let waiter = tokio::spawn(async move {
        waiting.wait().await.expect("wait");
        Instant::now()
    });
    sleep(Duration::from_millis(300)).await;
    let deleted_at = Instant::now();
    assert!(operator.delete().await.expect("delete"));
    let went_on_at = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter goes on")
        .expect("task");
    let wake_up = went_on_at.duration_since(deleted_at);
    assert!(wake_up < WAKE_UP, "took {wake_up:?}");
}

/// Bad input gets a typed error before any I/O.
pub async fn latch_bad_input_is_rejected<H: Harness>(harness: &H)
where
    H::Backend: LatchBackend,
{
    let locker = Locker::new(harness.client().await);
    let too_long = "x".repeat(lock_core::options::MAX_NAME_LEN + 1);
    for bad in ["", too_long.as_str()] {
        assert!(matches!(locker.latch(bad), Err(Error::InvalidName { .. })));
    }
    let latch = locker
        .latch(&fresh_name("latch-bad"))
        .expect("a valid name");
    for wait in [Duration::ZERO, Duration::MAX] {
        let result = latch.wait_timeout(wait).await;
        assert!(
            matches!(result, Err(Error::InvalidOptions { .. })),
            "{wait:?}: {result:?}"
        );
    }
}

/// Generates one `#[test]` per latch conformance case for a harness expression whose backend
/// implements [`LatchBackend`], as [`conformance_tests!`](crate::conformance_tests) does for
/// locks (`@sequence` included).
#[macro_export]
macro_rules! latch_conformance_tests {
    (@sequence $harness:expr) => {
        $crate::latch_conformance_tests! { @every run $harness }
    };
    ($harness:expr) => {
        $crate::latch_conformance_tests! { @every cases $harness }
    };
    (@every $mode:ident $harness:expr) => {
        $crate::latch_conformance_tests! { @$mode $harness;
            latch_counts_down,
            latch_opens_every_waiter,
            latch_wait_timeout,
            latch_delete_opens_it,
            latch_bad_input_is_rejected,
        }
    };
    (@run $harness:expr; $($case:ident),* $(,)?) => {
        async {
            let harness = $harness;
            $($crate::latch_conformance::$case(harness).await;)*
        }
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run(async {
                    let harness = $harness;
                    $crate::latch_conformance::$case(&harness).await;
                });
            }
        )*
    };
}

//! The semaphore conformance suite: behaviour every [`SemaphoreBackend`] must show, for any
//! [`Harness`] whose backend implements it, as one test per case with
//! [`semaphore_conformance_tests!`](crate::semaphore_conformance_tests):
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
//! lock_testkit::semaphore_conformance_tests!(Memory(MemoryBackend::new()));
//! # fn main() {}
//! ```
//!
//! Hand-offs are asserted to take well under the waiters' one-second backstop re-check, so a
//! case fails when waiters are not woken by the count announcements.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use lock_core::{Error, Locker, Semaphore, SemaphoreBackend, Wait};
use tokio::time::{Instant, sleep, timeout};

use crate::conformance::{Harness, fresh_name};

/// How long a woken waiter may take to get its permits: well under the one-second re-check
/// that would get them without any announcement.
const HAND_OFF: Duration = Duration::from_millis(700);

async fn semaphore_of<H: Harness>(harness: &H, name: &str) -> Semaphore<H::Backend>
where
    H::Backend: SemaphoreBackend,
{
    Locker::new(harness.client().await)
        .semaphore(name)
        .expect("a valid name")
}

/// Permits are counted exactly, by every client: set once, taken, given back, added, drained,
/// deleted.
pub async fn semaphore_counts_permits<H: Harness>(harness: &H)
where
    H::Backend: SemaphoreBackend,
{
    let name = fresh_name("semaphore-count");
    let a = semaphore_of(harness, &name).await;
    let b = semaphore_of(harness, &name).await;
    assert_eq!(a.state().await.expect("state").available, None);
    assert_eq!(a.available().await.expect("available"), 0);
    assert!(a.try_set_permits(3).await.expect("set"));
    assert!(!b.try_set_permits(5).await.expect("set again"), "set once");
    assert_eq!(b.available().await.expect("available"), 3);
    a.acquire(2).await.expect("acquire 2 of 3");
    assert!(!b.try_acquire(2).await.expect("try 2 of 1"));
    assert!(b.try_acquire(1).await.expect("try 1 of 1"));
    assert_eq!(a.available().await.expect("available"), 0);
    assert_eq!(b.release(3).await.expect("release"), 3);
    assert_eq!(a.drain().await.expect("drain"), 3);
    assert_eq!(a.available().await.expect("available"), 0);
    assert_eq!(a.add_permits(-2).await.expect("remove"), -2);
    assert!(!b.try_acquire(1).await.expect("try below zero"));
    assert_eq!(b.add_permits(3).await.expect("add"), 1);
    assert_eq!(a.reset(4).await.expect("reset"), Some(1));
    assert_eq!(b.available().await.expect("available"), 4);
    assert!(a.delete().await.expect("delete"));
    assert!(!a.delete().await.expect("delete again"));
    assert_eq!(b.state().await.expect("state").available, None);
    // Giving back permits of a semaphore that does not exist creates it (as Redisson does).
    assert_eq!(b.release(2).await.expect("release to nothing"), 2);
    assert!(a.delete().await.expect("clean up"));
}

/// A release wakes as many waiters as it gives back permits, at once, and no more.
pub async fn semaphore_release_wakes_waiters<H: Harness>(harness: &H)
where
    H::Backend: SemaphoreBackend,
{
    let name = fresh_name("semaphore-wake");
    let owner = semaphore_of(harness, &name).await;
    let waiting = semaphore_of(harness, &name).await;
    assert!(owner.try_set_permits(0).await.expect("set"));
    let taken = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let semaphore = waiting.clone();
        let taken = taken.clone();
        tasks.push(tokio::spawn(async move {
            semaphore.acquire(1).await.expect("acquire");
            taken.fetch_add(1, Ordering::SeqCst);
            Instant::now()
        }));
    }
    sleep(Duration::from_millis(300)).await;
    assert_eq!(taken.load(Ordering::SeqCst), 0, "nothing to take yet");
    let released_at = Instant::now();
    assert_eq!(owner.release(2).await.expect("release"), 2);
    sleep(HAND_OFF).await;
    assert_eq!(taken.load(Ordering::SeqCst), 2, "two permits, two waiters");
    assert_eq!(owner.release(1).await.expect("release"), 1);
    let mut hand_offs = Vec::new();
    for task in tasks {
        let at = timeout(Duration::from_secs(5), task)
            .await
            .expect("every waiter gets a permit")
            .expect("task");
        hand_offs.push(at.duration_since(released_at));
    }
    hand_offs.sort();
    assert!(
        hand_offs[1] < HAND_OFF,
        "the first release's waiters took {hand_offs:?}"
    );
    assert_eq!(owner.available().await.expect("available"), 0);
    assert!(owner.delete().await.expect("clean up"));
}

/// A waiter that needs more permits than a release gives back hands the wake-up on to one
/// that needs fewer, which gets them at once.
pub async fn semaphore_wake_up_passes_to_a_smaller_need<H: Harness>(harness: &H)
where
    H::Backend: SemaphoreBackend,
{
    let name = fresh_name("semaphore-pass-on");
    let owner = semaphore_of(harness, &name).await;
    let waiting = semaphore_of(harness, &name).await;
    assert!(owner.try_set_permits(0).await.expect("set"));
    let big = tokio::spawn({
        let semaphore = waiting.clone();
        async move { semaphore.acquire(3).await.expect("acquire 3") }
    });
    // The big waiter waits first, so the one wake-up of the release reaches it first.
    sleep(Duration::from_millis(200)).await;
    let small = tokio::spawn({
        let semaphore = waiting.clone();
        async move {
            semaphore.acquire(1).await.expect("acquire 1");
            Instant::now()
        }
    });
    // Release just after the small waiter's first attempt: its own re-check is a second away.
    sleep(Duration::from_millis(100)).await;
    let released_at = Instant::now();
    owner.release(1).await.expect("release");
    let taken_at = timeout(Duration::from_secs(5), small)
        .await
        .expect("the small waiter gets its permit")
        .expect("task");
    let hand_off = taken_at.duration_since(released_at);
    assert!(hand_off < HAND_OFF, "the small waiter took {hand_off:?}");
    assert!(!big.is_finished(), "no permits for the big waiter yet");
    owner.release(3).await.expect("release");
    timeout(Duration::from_secs(5), big)
        .await
        .expect("the big waiter gets its permits")
        .expect("task");
    assert_eq!(owner.available().await.expect("available"), 0);
    assert!(owner.delete().await.expect("clean up"));
}

/// A semaphore that does not exist is waited for (bounded waits end with `NotAcquired`), and
/// setting it wakes the waiters.
pub async fn semaphore_missing_is_waited_for<H: Harness>(harness: &H)
where
    H::Backend: SemaphoreBackend,
{
    let name = fresh_name("semaphore-missing");
    let setter = semaphore_of(harness, &name).await;
    let waiting = semaphore_of(harness, &name).await;
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let result = waiting.acquire_with(1, Wait::Upto(wait)).await;
    assert!(
        matches!(result, Err(Error::NotAcquired { .. })),
        "{result:?}"
    );
    let waited = started.elapsed();
    assert!(waited >= wait, "gave up early, after {waited:?}");
    assert!(
        waited < wait + Duration::from_secs(1),
        "overran: {waited:?}"
    );
    let waiter = tokio::spawn(async move {
        waiting.acquire(1).await.expect("acquire");
        Instant::now()
    });
    sleep(Duration::from_millis(200)).await;
    let set_at = Instant::now();
    assert!(setter.try_set_permits(1).await.expect("set"));
    let taken_at = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gets the permit")
        .expect("task");
    let hand_off = taken_at.duration_since(set_at);
    assert!(hand_off < HAND_OFF, "took {hand_off:?}");
    assert_eq!(setter.available().await.expect("available"), 0);
    assert!(setter.delete().await.expect("clean up"));
}

/// Never more holders than permits, with tasks of two clients taking and giving back at once.
pub async fn semaphore_never_overcommits<H: Harness>(harness: &H)
where
    H::Backend: SemaphoreBackend,
{
    const PERMITS: i64 = 3;
    let name = fresh_name("semaphore-bound");
    let clients = [
        semaphore_of(harness, &name).await,
        semaphore_of(harness, &name).await,
    ];
    assert!(clients[0].try_set_permits(3).await.expect("set"));
    let inside = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for task in 0..8 {
        let semaphore = clients[task % 2].clone();
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                semaphore.acquire(1).await.expect("acquire");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                semaphore.release(1).await.expect("release");
            }
        }));
    }
    for task in tasks {
        timeout(Duration::from_secs(30), task)
            .await
            .expect("no waiter is left behind")
            .expect("task");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= PERMITS, "{most} holders of {PERMITS} permits");
    assert!(most > 1, "the permits were used at once ({most})");
    assert_eq!(clients[1].available().await.expect("available"), PERMITS);
    assert!(clients[0].delete().await.expect("clean up"));
}

/// A wait dropped midway takes nothing, and the next release is left for others.
pub async fn semaphore_cancelled_wait_takes_nothing<H: Harness>(harness: &H)
where
    H::Backend: SemaphoreBackend,
{
    let name = fresh_name("semaphore-cancel");
    let owner = semaphore_of(harness, &name).await;
    let waiting = semaphore_of(harness, &name).await;
    assert!(owner.try_set_permits(0).await.expect("set"));
    let dropped = timeout(Duration::from_millis(300), waiting.acquire(1)).await;
    assert!(dropped.is_err(), "nothing to take: {dropped:?}");
    owner.release(1).await.expect("release");
    sleep(Duration::from_millis(100)).await;
    assert_eq!(owner.available().await.expect("available"), 1);
    assert!(waiting.try_acquire(1).await.expect("try"));
    assert!(owner.delete().await.expect("clean up"));
}

/// Bad input gets a typed error before any I/O, and creates nothing.
pub async fn semaphore_bad_input_is_rejected<H: Harness>(harness: &H)
where
    H::Backend: SemaphoreBackend,
{
    let locker = Locker::new(harness.client().await);
    let too_long = "x".repeat(lock_core::options::MAX_NAME_LEN + 1);
    for bad in ["", too_long.as_str()] {
        assert!(matches!(
            locker.semaphore(bad),
            Err(Error::InvalidName { .. })
        ));
    }
    let name = fresh_name("semaphore-bad-input");
    let semaphore = locker.semaphore(&name).expect("a valid name");
    for result in [
        semaphore.acquire(0).await,
        semaphore.acquire_with(1, Wait::Upto(Duration::ZERO)).await,
        semaphore.acquire_with(1, Wait::Upto(Duration::MAX)).await,
        semaphore.release(0).await.map(drop),
        semaphore.try_acquire(0).await.map(drop),
    ] {
        assert!(
            matches!(result, Err(Error::InvalidOptions { .. })),
            "{result:?}"
        );
    }
    assert_eq!(semaphore.state().await.expect("state").available, None);
}

/// Generates one `#[test]` per semaphore conformance case for a harness expression whose
/// backend implements [`SemaphoreBackend`], as
/// [`conformance_tests!`](crate::conformance_tests) does for locks (`@sequence` included).
#[macro_export]
macro_rules! semaphore_conformance_tests {
    (@sequence $harness:expr) => {
        $crate::semaphore_conformance_tests! { @every run $harness }
    };
    ($harness:expr) => {
        $crate::semaphore_conformance_tests! { @every cases $harness }
    };
    (@every $mode:ident $harness:expr) => {
        $crate::semaphore_conformance_tests! { @$mode $harness;
            semaphore_counts_permits,
            semaphore_release_wakes_waiters,
            semaphore_wake_up_passes_to_a_smaller_need,
            semaphore_missing_is_waited_for,
            semaphore_never_overcommits,
            semaphore_cancelled_wait_takes_nothing,
            semaphore_bad_input_is_rejected,
        }
    };
    (@run $harness:expr; $($case:ident),* $(,)?) => {
        async {
            let harness = $harness;
            $($crate::semaphore_conformance::$case(harness).await;)*
        }
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run(async {
                    let harness = $harness;
                    $crate::semaphore_conformance::$case(&harness).await;
                });
            }
        )*
    };
}

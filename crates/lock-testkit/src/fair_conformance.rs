//! The fair lock conformance suite: behaviour every [`FairBackend`] must show, for any
//! [`Harness`] whose backend implements it, as one test per case with
//! [`fair_conformance_tests!`](crate::fair_conformance_tests). The fair side is an exclusive
//! reentrant lock too: [`FairSide`] runs the lock suite on it.
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
//! lock_testkit::fair_conformance_tests!(Memory(MemoryBackend::new()));
//! # fn main() {}
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::fair_backend::QUEUE_TIMEOUT;
use lock_core::{AcquireRequest, Error, FairBackend, LockBackend, LockOptions, Locker, Owner};
use tokio::time::{Instant, sleep, timeout};

use crate::conformance::{Harness, fresh_name};

/// How long a waiter may take to get the lock once its turn came: well under the third of
/// [`QUEUE_TIMEOUT`] after which it would look again on its own.
const HAND_OFF: Duration = Duration::from_millis(700);

/// Holders that only a release should end get this lease.
const LONG_LEASE: Duration = Duration::from_secs(20);

/// A [`Harness`] whose clients are the fair sides of the inner harness's clients: the lock
/// conformance suite runs on it (`conformance_tests!(FairSide(...))`).
pub struct FairSide<H>(pub H);

impl<H: Harness> Harness for FairSide<H>
where
    H::Backend: FairBackend,
{
    type Backend = <H::Backend as FairBackend>::Fair;

    async fn client(&self) -> Self::Backend {
        self.0.client().await.fair_side()
    }
}

async fn fair_of<H: Harness>(harness: &H) -> (H::Backend, Locker<<H::Backend as FairBackend>::Fair>)
where
    H::Backend: FairBackend,
{
    let backend = harness.client().await;
    let fair = Locker::new(backend.fair_side());
    (backend, fair)
}

/// Waiters get the lock in the order they came, each as soon as the one before releases it.
pub async fn fair_grants_in_arrival_order<H: Harness>(harness: &H)
where
    H::Backend: FairBackend,
{
    let name = fresh_name("fair-order");
    let (_, holder) = fair_of(harness).await;
    let options = LockOptions::new().fixed_lease(LONG_LEASE);
    let held = holder.lock_with(&name, &options).await.expect("lock");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for arrival in 0..5 {
        let (_, locker) = fair_of(harness).await;
        let (name, order, options) = (name.clone(), order.clone(), options.clone());
        waiters.push(tokio::spawn(async move {
            let guard = locker.lock_with(&name, &options).await.expect("lock");
            order.lock().expect("order").push((arrival, Instant::now()));
            sleep(Duration::from_millis(30)).await;
            assert!(guard.release().await.expect("release").was_held());
        }));
        // One after the other: each is queued before the next comes.
        sleep(Duration::from_millis(150)).await;
    }
    // Someone who came last tries the lock every few milliseconds without queueing: while
    // others wait in the queue it must never get it, not even in the moment between one
    // holder's release and the next one's grant.
    // Once the last waiter has been granted (and has released), it may: so each of its grants
    // notes how many waiters had been granted by then (a waiter notes its grant before it
    // releases, so a grant seen with fewer than all of them came ahead of the queue).
    let (_, barger) = fair_of(harness).await;
    let barging = tokio::spawn({
        let (name, order) = (name.clone(), order.clone());
        async move {
            loop {
                if let Some(guard) = barger.try_lock(&name).await.expect("try") {
                    let granted_before = order.lock().expect("order").len();
                    assert!(guard.release().await.expect("release").was_held());
                    return granted_before;
                }
                sleep(Duration::from_millis(3)).await;
            }
        }
    });
    let released_at = Instant::now();
    assert!(held.release().await.expect("release").was_held());
    for waiter in waiters {
        timeout(Duration::from_secs(10), waiter)
            .await
            .expect("every waiter gets its turn")
            .expect("task");
    }
    if barging.is_finished() {
        let granted_before = barging.await.expect("barging task");
        assert_eq!(
            granted_before, 5,
            "a caller who never queued got the lock ahead of queued waiters"
        );
    } else {
        barging.abort();
    }
    let order = order.lock().expect("order").clone();
    let arrivals: Vec<usize> = order.iter().map(|(arrival, _)| *arrival).collect();
    assert_eq!(
        arrivals,
        vec![0, 1, 2, 3, 4],
        "granted out of arrival order"
    );
    let mut previous = released_at;
    for (arrival, at) in &order {
        let hand_off = at.duration_since(previous);
        assert!(
            hand_off < HAND_OFF + Duration::from_millis(30),
            "waiter {arrival} waited {hand_off:?} after its turn came"
        );
        previous = *at + Duration::from_millis(30);
    }
}

/// A waiter that gives up (its wait ends) leaves the queue at once: the next one is not held
/// up by it.
pub async fn fair_a_waiter_giving_up_leaves_the_queue<H: Harness>(harness: &H)
where
    H::Backend: FairBackend,
{
    let name = fresh_name("fair-give-up");
    let (store, holder) = fair_of(harness).await;
    let options = LockOptions::new().fixed_lease(LONG_LEASE);
    let held = holder.lock_with(&name, &options).await.expect("lock");
    let (_, quitter) = fair_of(harness).await;
    let result = quitter
        .lock_with(&name, &options.clone().wait(Duration::from_millis(300)))
        .await;
    assert!(
        matches!(result, Err(Error::NotAcquired { .. })),
        "{result:?}"
    );
    // Cancelled while waiting: leaves the queue too.
    let (_, cancelled) = fair_of(harness).await;
    let dropped = timeout(
        Duration::from_millis(300),
        cancelled.lock_with(&name, &options),
    )
    .await;
    assert!(dropped.is_err(), "still held");
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let queue = store.fair_state(&name).await.expect("state").queue;
        if queue.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind in the queue: {queue:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
    let (_, next) = fair_of(harness).await;
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let guard = next.lock_with(&name, &options).await.expect("lock");
            let at = Instant::now();
            assert!(guard.release().await.expect("release").was_held());
            at
        }
    });
    sleep(Duration::from_millis(200)).await;
    let released_at = Instant::now();
    assert!(held.release().await.expect("release").was_held());
    let at = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the next waiter gets it")
        .expect("task");
    let hand_off = at.duration_since(released_at);
    assert!(hand_off < HAND_OFF, "took {hand_off:?}");
}

/// A single attempt (`try_lock`) is not queued.
pub async fn fair_try_lock_is_not_queued<H: Harness>(harness: &H)
where
    H::Backend: FairBackend,
{
    let name = fresh_name("fair-try");
    let (store, holder) = fair_of(harness).await;
    let held = holder.lock(&name).await.expect("lock");
    let (_, other) = fair_of(harness).await;
    assert!(other.try_lock(&name).await.expect("try").is_none());
    assert!(
        store
            .fair_state(&name)
            .await
            .expect("state")
            .queue
            .is_empty()
    );
    assert!(held.release().await.expect("release").was_held());
}

/// A waiter that went away without leaving the queue (a crashed process) holds the free lock
/// up only until its place lapses ([`QUEUE_TIMEOUT`] after its last attempt).
pub async fn fair_a_crashed_waiter_is_dropped<H: Harness>(harness: &H)
where
    H::Backend: FairBackend,
{
    let name = fresh_name("fair-crash");
    let (store, holder) = fair_of(harness).await;
    let options = LockOptions::new().fixed_lease(LONG_LEASE);
    let held = holder.lock_with(&name, &options).await.expect("lock");
    // One attempt that queues, and nothing after it: a process that died while waiting.
    let crashed = store.fair_side();
    let field = Owner::new().field(crashed.client_id());
    let request = AcquireRequest {
        name: &name,
        owner_field: &field,
        lease: LONG_LEASE,
        fencing: false,
        known_holds: 0,
        waits: true,
    };
    let queued_at = Instant::now();
    let outcome = crashed.try_acquire(request).await.expect("attempt");
    assert!(
        !matches!(outcome, lock_core::AcquireOutcome::Acquired(_)),
        "{outcome:?}"
    );
    let (_, next) = fair_of(harness).await;
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let guard = next.lock_with(&name, &options).await.expect("lock");
            let at = Instant::now();
            assert!(guard.release().await.expect("release").was_held());
            at
        }
    });
    sleep(Duration::from_millis(200)).await;
    assert!(held.release().await.expect("release").was_held());
    let at = timeout(QUEUE_TIMEOUT + Duration::from_secs(10), waiter)
        .await
        .expect("the waiter behind the crashed one gets the lock")
        .expect("task");
    let after = at.duration_since(queued_at);
    assert!(
        after >= QUEUE_TIMEOUT - Duration::from_millis(100),
        "the crashed waiter's turn was skipped early: {after:?}"
    );
    assert!(
        after < QUEUE_TIMEOUT + Duration::from_secs(2),
        "held up too long: {after:?}"
    );
}

/// Generates one `#[test]` per fair lock conformance case for a harness expression whose
/// backend implements [`FairBackend`], as [`conformance_tests!`](crate::conformance_tests)
/// does for locks (`@sequence` included).
#[macro_export]
macro_rules! fair_conformance_tests {
    (@sequence $harness:expr) => {
        $crate::fair_conformance_tests! { @every run $harness }
    };
    ($harness:expr) => {
        $crate::fair_conformance_tests! { @every cases $harness }
    };
    (@every $mode:ident $harness:expr) => {
        $crate::fair_conformance_tests! { @$mode $harness;
            fair_grants_in_arrival_order,
            fair_a_waiter_giving_up_leaves_the_queue,
            fair_try_lock_is_not_queued,
            fair_a_crashed_waiter_is_dropped,
        }
    };
    (@run $harness:expr; $($case:ident),* $(,)?) => {
        async {
            let harness = $harness;
            $($crate::fair_conformance::$case(harness).await;)*
        }
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run(async {
                    let harness = $harness;
                    $crate::fair_conformance::$case(&harness).await;
                });
            }
        )*
    };
}

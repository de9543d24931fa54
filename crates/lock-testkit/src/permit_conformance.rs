//! The lease-bound permits conformance suite: behaviour every [`PermitBackend`] must
//! show, for any [`Harness`] whose backend implements it, as one test per case with
//! [`permit_conformance_tests!`](crate::permit_conformance_tests):
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
//! lock_testkit::permit_conformance_tests!(Memory(MemoryBackend::new()));
//! # fn main() {}
//! ```

use std::time::Duration;

use lock_core::{Error, LeaseLoss, LockOptions, Locker, PermitBackend, Permits};
use tokio::time::{Instant, sleep, timeout};

use crate::conformance::{Harness, LeaseWindow, fresh_name};

/// How long a waiter may take to get a permit given back: well under its one-second
/// re-check.
const HAND_OFF: Duration = Duration::from_millis(700);

/// The semaphore `name` as a new client sees it (its own connection and client id).
async fn permits_of<H: Harness>(harness: &H, name: &str) -> Permits<H::Backend>
where
    H::Backend: PermitBackend,
{
    Locker::new(harness.client().await)
        .permits(name)
        .expect("a valid name")
}

/// Never more permits out than set; a permit given back goes to a waiter at once; the state
/// shows who holds what.
pub async fn permits_bound_their_holders<H: Harness>(harness: &H)
where
    H::Backend: PermitBackend,
{
    let name = fresh_name("permits-bound");
    let a = permits_of(harness, &name).await;
    let b = permits_of(harness, &name).await;
    let c = permits_of(harness, &name).await;
    assert!(a.try_set_permits(2).await.expect("set"));
    assert!(!c.try_set_permits(9).await.expect("set again"));
    let first = a.acquire().await.expect("first");
    let second = b.acquire().await.expect("second");
    assert!(
        c.try_acquire().await.expect("try").is_none(),
        "two of two out"
    );
    let state = c.state().await.expect("state");
    assert_eq!(state.available, Some(0));
    assert_eq!(state.held(), 2);
    assert_eq!(state.holders.len(), 2);
    let waiter = tokio::spawn({
        async move {
            let permit = c.acquire().await.expect("acquire");
            (Instant::now(), permit.release().await.expect("release"))
        }
    });
    sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    assert!(first.release().await.expect("release").was_held());
    let (taken_at, released) = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gets the permit")
        .expect("task");
    assert!(released.was_held());
    let hand_off = taken_at.duration_since(released_at);
    assert!(hand_off < HAND_OFF, "hand-off took {hand_off:?}");
    assert!(second.release().await.expect("release").was_held());
    let state = a.state().await.expect("state");
    assert_eq!(state.available, Some(2));
    assert_eq!(state.held(), 0);
}

/// An explicit owner may hold several permits; its guards count them.
pub async fn an_owner_holds_several_permits<H: Harness>(harness: &H)
where
    H::Backend: PermitBackend,
{
    let name = fresh_name("permits-several");
    let permits = permits_of(harness, &name).await;
    assert!(permits.try_set_permits(3).await.expect("set"));
    let owned = LockOptions::new().owner(lock_core::Owner::new());
    let one = permits.acquire_with(&owned).await.expect("one");
    let two = permits.acquire_with(&owned).await.expect("two");
    assert_eq!(two.hold_count(), 2);
    let state = permits.state().await.expect("state");
    assert_eq!(state.holders, vec![(one.owner_field().to_owned(), 2)]);
    assert_eq!(state.available, Some(1));
    assert!(two.release().await.expect("release").was_held());
    assert!(one.release().await.expect("release").was_held());
    assert_eq!(permits.state().await.expect("state").available, Some(3));
}

/// Each permit is its own: a task holding two with different leases gives back exactly the one
/// it releases, and the other lasts its whole lease.
pub async fn each_guard_gives_back_its_own_permit<H: Harness>(harness: &H)
where
    H::Backend: PermitBackend,
{
    let name = fresh_name("permits-own");
    let permits = permits_of(harness, &name).await;
    let other = permits_of(harness, &name).await;
    assert!(permits.try_set_permits(2).await.expect("set"));
    let short = LockOptions::new().fixed_lease(Duration::from_millis(600));
    let long = LockOptions::new().fixed_lease(Duration::from_secs(20));
    let soon = permits.acquire_with(&short).await.expect("short");
    let lasting = permits.acquire_with(&long).await.expect("long");
    assert!(soon.release().await.expect("release").was_held());
    // Past the short lease: the long one's permit is still out, whatever was released.
    sleep(Duration::from_millis(1200)).await;
    let first = other
        .try_acquire()
        .await
        .expect("try")
        .expect("one permit free");
    assert!(
        other.try_acquire().await.expect("try").is_none(),
        "the long-leased permit was given back by the short one's release"
    );
    assert!(!lasting.is_lost());
    assert!(first.release().await.expect("release").was_held());
    assert!(lasting.release().await.expect("release").was_held());
    assert_eq!(permits.state().await.expect("state").available, Some(2));
}

/// A permit whose holder stops renewing (a crash) is given back when its lease ends, and a
/// waiter gets it then.
pub async fn a_crashed_holders_permit_comes_back<H: Harness>(harness: &H)
where
    H::Backend: PermitBackend,
{
    let name = fresh_name("permits-crash");
    let crashed = permits_of(harness, &name).await;
    let waiting = permits_of(harness, &name).await;
    assert!(crashed.try_set_permits(1).await.expect("set"));
    let lease = Duration::from_millis(600);
    let options = LockOptions::new().fixed_lease(lease);
    let (permit, window) = LeaseWindow::of(lease, crashed.acquire_with(&options)).await;
    // Neither released nor renewed: as if its process died.
    std::mem::forget(permit.expect("acquire"));
    let got = timeout(Duration::from_secs(5), waiting.acquire())
        .await
        .expect("the permit comes back")
        .expect("acquire");
    window.assert_taken_over(Instant::now(), Duration::from_millis(1500), "the permit");
    assert!(got.release().await.expect("release").was_held());
    assert_eq!(waiting.state().await.expect("state").available, Some(1));
}

/// The watchdog keeps a permit past its lease while the guard lives.
pub async fn the_watchdog_keeps_a_permit<H: Harness>(harness: &H)
where
    H::Backend: PermitBackend,
{
    let name = fresh_name("permits-watchdog");
    let holder = permits_of(harness, &name).await;
    let other = permits_of(harness, &name).await;
    assert!(holder.try_set_permits(1).await.expect("set"));
    let options = LockOptions::new().watchdog_lease(Duration::from_millis(600));
    let permit = holder.acquire_with(&options).await.expect("acquire");
    sleep(Duration::from_millis(2000)).await;
    assert!(!permit.is_lost());
    assert!(
        other.try_acquire().await.expect("try").is_none(),
        "still held"
    );
    assert!(permit.release().await.expect("release").was_held());
    let next = other.try_acquire().await.expect("try").expect("free now");
    assert!(next.release().await.expect("release").was_held());
}

/// Giving every permit back by force (an operator's repair) makes the holders' guards lost.
pub async fn forced_give_back_loses_the_permits<H: Harness>(harness: &H)
where
    H::Backend: PermitBackend,
{
    let name = fresh_name("permits-force");
    let holder = permits_of(harness, &name).await;
    let operator = permits_of(harness, &name).await;
    assert!(holder.try_set_permits(2).await.expect("set"));
    let options = LockOptions::new().watchdog_lease(Duration::from_millis(600));
    let permit = holder.acquire_with(&options).await.expect("acquire");
    assert!(operator.locker().force_unlock(&name).await.expect("force"));
    let loss = timeout(Duration::from_secs(3), permit.lost())
        .await
        .expect("lost at the next renewal");
    assert_eq!(loss, LeaseLoss::NotOurs);
    assert_eq!(operator.state().await.expect("state").available, Some(2));
    assert!(!permit.release().await.expect("release").was_held());
    assert_eq!(operator.state().await.expect("state").available, Some(2));
}

/// An acquire dropped while it waits takes nothing.
pub async fn a_cancelled_acquire_takes_nothing<H: Harness>(harness: &H)
where
    H::Backend: PermitBackend,
{
    let name = fresh_name("permits-cancel");
    let holder = permits_of(harness, &name).await;
    let waiting = permits_of(harness, &name).await;
    assert!(holder.try_set_permits(1).await.expect("set"));
    let permit = holder.acquire().await.expect("acquire");
    let dropped = timeout(Duration::from_millis(300), waiting.acquire()).await;
    assert!(dropped.is_err(), "nothing to take");
    assert!(permit.release().await.expect("release").was_held());
    sleep(Duration::from_millis(100)).await;
    let state = holder.state().await.expect("state");
    assert_eq!((state.available, state.held()), (Some(1), 0));
}

/// Bad input gets a typed error before any I/O.
pub async fn permits_bad_input_is_rejected<H: Harness>(harness: &H)
where
    H::Backend: PermitBackend,
{
    let locker = Locker::new(harness.client().await);
    let too_long = "x".repeat(lock_core::options::MAX_NAME_LEN + 1);
    for bad in ["", too_long.as_str()] {
        assert!(matches!(
            locker.permits(bad),
            Err(Error::InvalidName { .. })
        ));
    }
    let name = fresh_name("permits-bad");
    let permits = locker.permits(&name).expect("a valid name");
    let result = permits
        .acquire_with(&LockOptions::new().fixed_lease(Duration::ZERO))
        .await;
    assert!(
        matches!(result, Err(Error::InvalidOptions { .. })),
        "{result:?}"
    );
    assert_eq!(permits.state().await.expect("state").available, None);
}

/// Generates one `#[test]` per lease-bound permits conformance case for a harness expression
/// whose backend implements [`PermitBackend`], as
/// [`conformance_tests!`](crate::conformance_tests) does for locks (`@sequence` included).
#[macro_export]
macro_rules! permit_conformance_tests {
    (@sequence $harness:expr) => {
        $crate::permit_conformance_tests! { @every run $harness }
    };
    ($harness:expr) => {
        $crate::permit_conformance_tests! { @every cases $harness }
    };
    (@every $mode:ident $harness:expr) => {
        $crate::permit_conformance_tests! { @$mode $harness;
            permits_bound_their_holders,
            an_owner_holds_several_permits,
            each_guard_gives_back_its_own_permit,
            a_crashed_holders_permit_comes_back,
            the_watchdog_keeps_a_permit,
            forced_give_back_loses_the_permits,
            a_cancelled_acquire_takes_nothing,
            permits_bad_input_is_rejected,
        }
    };
    (@run $harness:expr; $($case:ident),* $(,)?) => {
        async {
            let harness = $harness;
            $($crate::permit_conformance::$case(harness).await;)*
        }
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run(async {
                    let harness = $harness;
                    $crate::permit_conformance::$case(&harness).await;
                });
            }
        )*
    };
}

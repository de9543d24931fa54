//! The conformance suite: behaviour every lock backend must show, runnable against any backend,
//! including your own.
//!
//! Implement [`Harness`] (how to make a new client of the store under test, as another process
//! would), then generate one test per case with [`conformance_tests!`](crate::conformance_tests):
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
//! lock_testkit::conformance_tests!(Memory(MemoryBackend::new()));
//! # fn main() {}
//! ```
//!
//! Every case uses fresh lock names, so the cases may share one store. Timings are generous (the
//! suite checks behaviour, not speed) but a case that should finish quickly fails if it waits for
//! a lease to run out instead.

use std::future::Future;
use std::time::Duration;

use lock_core::{
    Error, Fencing, LeaseLoss, LockBackend, LockGuard, LockOptions, Locker, Owner, ReleaseOutcome,
};
use tokio::time::{Instant, sleep, timeout};

use crate::hang_watch::HangWatch;

/// How a conformance test reaches the store under test.
pub trait Harness: Send + Sync + 'static {
    /// The backend under test.
    type Backend: LockBackend;

    /// A new client of the store: its own client id and, for networked stores, its own
    /// connections, like another process would have.
    fn client(&self) -> impl Future<Output = Self::Backend> + Send;

    /// Whether the store gives fencing tokens. A store that cannot (a Redis server without
    /// scripts) must refuse a fenced lock with [`Error::Unsupported`] and hold nothing, which
    /// [`fencing_tokens_increase`] checks instead.
    fn fences(&self) -> bool {
        true
    }
}

/// When a lease granted by one call can run out, as a test sees it: the store started the
/// lease after the call was `sent` and before it returned (`granted`). On a loaded machine the
/// two are tens of milliseconds apart, so "not taken over early" is measured from `sent` and
/// "not taken over late" from `granted`; either from the other would fail by load alone.
///
/// ```
/// use std::time::Duration;
/// use lock_core::{LockOptions, Locker, MemoryBackend};
/// use lock_testkit::conformance::{LeaseWindow, run};
/// use tokio::time::Instant;
///
/// run(async {
///     let store = MemoryBackend::new();
///     let crashed = Locker::new(store.new_client());
///     let next = Locker::new(store.new_client());
///     let lease = Duration::from_millis(100);
///     let options = LockOptions::new().fixed_lease(lease);
///     let (guard, window) = LeaseWindow::of(lease, crashed.lock_with("job", &options)).await;
///     std::mem::forget(guard.expect("lock")); // never released: as if its process died
///     let taken = next.lock("job").await.expect("lock");
///     window.assert_taken_over(Instant::now(), Duration::from_secs(1), "the crashed hold");
///     drop(taken);
/// });
/// ```
#[derive(Debug, Clone, Copy)]
pub struct LeaseWindow {
    sent: Instant,
    granted: Instant,
    lease: Duration,
}

impl LeaseWindow {
    /// Runs `call`, which takes a lease of `lease`, and notes when it was sent and when it
    /// returned.
    pub async fn of<T>(lease: Duration, call: impl Future<Output = T>) -> (T, Self) {
        let sent = Instant::now();
        let result = call.await;
        let granted = Instant::now();
        (
            result,
            Self {
                sent,
                granted,
                lease,
            },
        )
    }

    /// Asserts that a takeover seen at `at` came after the lease could have run out on the
    /// store (less a few milliseconds for its millisecond clock) and within `slack` of when it
    /// had surely run out.
    ///
    /// # Panics
    ///
    /// When the takeover came early or late; the message names `what` was taken over.
    pub fn assert_taken_over(&self, at: Instant, slack: Duration, what: &str) {
        let since_sent = at.duration_since(self.sent);
        assert!(
            since_sent + Duration::from_millis(5) >= self.lease,
            "{what} taken over early: {since_sent:?} after the call was sent, lease {:?}",
            self.lease
        );
        let since_granted = at.duration_since(self.granted);
        assert!(
            since_granted < self.lease + slack,
            "{what} taken over late: {since_granted:?} after the grant, lease {:?}",
            self.lease
        );
    }
}

/// A lock name no other case uses.
#[must_use]
pub fn fresh_name(case: &str) -> String {
    format!("conformance:{case}:{}", uuid_like())
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

async fn two_clients<H: Harness>(harness: &H) -> (Locker<H::Backend>, Locker<H::Backend>) {
    (
        Locker::new(harness.client().await),
        Locker::new(harness.client().await),
    )
}

const LONG_LEASE: Duration = Duration::from_secs(20);

/// Takes `name` on `locker` with `options` and returns the guard. The cases call it where the
/// lock is free, or with options that wait for it as long as it takes, so an error or no lock
/// here is a failure of the backend.
async fn hold<B: LockBackend, F: Fencing>(
    locker: &Locker<B>,
    name: &str,
    options: &LockOptions<F>,
) -> LockGuard<B, F> {
    locker.lock_with(name, options).await.expect("lock")
}

/// A bounded acquire's result with "not acquired" as `Ok(None)`: for tests that treat a wait
/// ending without the lock as an outcome to check, not a failure.
///
/// # Errors
///
/// Every error of `result` except [`Error::NotAcquired`].
///
/// # Example
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// use lock_core::{LockOptions, Locker, MemoryBackend, Owner};
/// use lock_testkit::granted;
///
/// let locker = Locker::new(MemoryBackend::new());
/// let _held = locker.lock("x").await?;
/// let other = LockOptions::new().no_wait().owner(Owner::new());
/// assert!(granted(locker.lock_with("x", &other).await)?.is_none());
/// # Ok(())
/// # }
/// ```
pub fn granted<T>(result: lock_core::Result<T>) -> lock_core::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(Error::NotAcquired { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Two clients never hold one lock at once, and neither do two owners of one client.
pub async fn exclusion_between_owners<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("exclusion");
    let held = a.lock(&name).await.expect("lock");
    assert!(b.try_lock(&name).await.expect("try_lock").is_none());
    let other_owner = LockOptions::new().no_wait().owner(Owner::new());
    assert!(matches!(
        a.lock_with(&name, &other_owner).await,
        Err(Error::NotAcquired { .. })
    ));
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let now_b = b
        .try_lock(&name)
        .await
        .expect("try_lock")
        .expect("free after release");
    assert_eq!(
        now_b.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// The same owner re-enters; each release gives back one hold. A backend that is not
/// reentrant ([`LockBackend::reentrant`]) must refuse the re-entry with
/// [`Error::NotReentrant`], before any I/O, and keep the first hold.
pub async fn reentrant_counts<H: Harness>(harness: &H) {
    let locker = Locker::new(harness.client().await);
    let name = fresh_name("reentrant");
    let first = locker.lock(&name).await.expect("lock");
    if !locker.backend().reentrant() {
        refuses_reentry(&locker, &name).await;
        assert_eq!(
            first.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        return;
    }
    let second = locker.lock(&name).await.expect("re-enter");
    let third = locker
        .try_lock(&name)
        .await
        .expect("try")
        .expect("re-enter");
    assert_eq!(
        (first.hold_count(), second.hold_count(), third.hold_count()),
        (1, 2, 3)
    );
    let state = locker.state(&name).await.expect("state");
    assert_eq!(state.hold_count(first.owner_field()), 3);
    assert_eq!(state.holders.len(), 1);
    assert_eq!(
        third.release().await.expect("release"),
        ReleaseOutcome::StillHeld { hold_count: 2 }
    );
    assert_eq!(
        second.release().await.expect("release"),
        ReleaseOutcome::StillHeld { hold_count: 1 }
    );
    assert!(locker.is_locked(&name).await.expect("state"));
    assert_eq!(
        first.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(!locker.is_locked(&name).await.expect("state"));
}

/// What a backend that is not reentrant does on a re-entry: a typed error at once, with the
/// first hold intact.
async fn refuses_reentry<B: LockBackend>(locker: &Locker<B>, name: &str) {
    for attempt in [
        locker.try_lock(name).await.map(|guard| guard.is_some()),
        locker
            .lock_with(name, &LockOptions::new().wait(Duration::from_secs(5)))
            .await
            .map(|_guard| true),
    ] {
        assert!(
            matches!(attempt, Err(Error::NotReentrant { .. })),
            "a re-entry must be refused: {attempt:?}"
        );
    }
    let state = locker.state(name).await.expect("state");
    assert_eq!(state.holders.len(), 1, "the first hold is intact");
}

/// A nested hold with a shorter lease never cuts short the outer hold's lease (not reentrant:
/// the nested attempt is refused, and the outer hold keeps its lease).
pub async fn nested_shorter_lease_keeps_outer_hold<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("nested-lease");
    let outer = hold(&a, &name, &LockOptions::new().fixed_lease(LONG_LEASE)).await;
    if !a.backend().reentrant() {
        refuses_reentry(&a, &name).await;
        assert!(b.try_lock(&name).await.expect("try").is_none());
        assert_eq!(
            outer.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        return;
    }
    let inner = a
        .lock_with(
            &name,
            &LockOptions::new().fixed_lease(Duration::from_millis(100)),
        )
        .await
        .expect("re-enter");
    assert_eq!(inner.hold_count(), 2);
    sleep(Duration::from_millis(300)).await;
    assert!(
        b.try_lock(&name).await.expect("try").is_none(),
        "outer lease still runs"
    );
    assert_eq!(
        inner.release().await.expect("release"),
        ReleaseOutcome::StillHeld { hold_count: 1 }
    );
    sleep(Duration::from_millis(300)).await;
    assert!(
        b.try_lock(&name).await.expect("try").is_none(),
        "outer lease still runs"
    );
    assert!(!outer.is_lost());
    assert_eq!(
        outer.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// A release by someone who does not hold the lock is refused and changes nothing.
pub async fn release_by_non_owner_is_refused<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("non-owner");
    let held = a.lock(&name).await.expect("lock");
    let before = a.state(&name).await.expect("state");
    assert_eq!(
        b.unlock(&name, held.owner()).await.expect("unlock"),
        ReleaseOutcome::NotHeld,
        "another client with the same holder id is another owner"
    );
    assert_eq!(
        a.unlock(&name, Owner::new()).await.expect("unlock"),
        ReleaseOutcome::NotHeld
    );
    let after = a.state(&name).await.expect("state");
    assert_eq!(before.holders, after.holders);
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// Double unlock and unlock after expiry report `NotHeld` and change nothing.
pub async fn double_unlock_and_unlock_after_expiry<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("double-unlock");
    let owner = Owner::new();
    let options = LockOptions::new()
        .owner(owner)
        .fixed_lease(Duration::from_millis(300));
    let held = hold(&a, &name, &options).await;
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(
        a.unlock(&name, owner).await.expect("unlock"),
        ReleaseOutcome::NotHeld
    );

    let held = hold(&a, &name, &options).await;
    sleep(Duration::from_millis(500)).await;
    let by_b = b
        .try_lock(&name)
        .await
        .expect("try")
        .expect("expired lease frees the lock");
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::NotHeld
    );
    let state = b.state(&name).await.expect("state");
    assert_eq!(
        state.hold_count(by_b.owner_field()),
        1,
        "b's hold is untouched"
    );
    assert_eq!(
        by_b.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// A fixed lease expires by itself and `lost()` reports it.
pub async fn explicit_lease_expires<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("lease-expiry");
    let lease = Duration::from_millis(300);
    let held = hold(&a, &name, &LockOptions::new().fixed_lease(lease)).await;
    assert!(!held.is_watchdog());
    assert!(held.remaining() <= lease);
    let loss = timeout(Duration::from_secs(3), held.lost())
        .await
        .expect("lost() fires when a fixed lease runs out");
    assert_eq!(loss, LeaseLoss::Expired);
    // The holder's clock counts the lease from when the grant was sent, the store's from when
    // it ran: the store frees the name a moment later (on a loaded machine, tens of
    // milliseconds). Without a holder renewing it, it is free within that moment.
    let taken = b
        .lock_with(&name, &LockOptions::new().wait(Duration::from_millis(500)))
        .await
        .expect("the lease ran out on the store too");
    drop(held);
    assert!(taken.release().await.expect("release").was_held());
}

/// `extend` sets a new lease on the store and on the guard, and a later release of a nested
/// hold resets the lease to the extended length, not the one the guard was taken with.
pub async fn extend_sets_a_new_lease<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("extend");
    let short = Duration::from_millis(300);
    let options = LockOptions::new().fixed_lease(short);
    let outer = hold(&a, &name, &options).await;
    outer.extend(LONG_LEASE).await.expect("extend");
    assert_eq!(outer.lease(), LONG_LEASE);
    assert!(outer.remaining() > short, "{:?}", outer.remaining());
    sleep(short + Duration::from_millis(200)).await;
    assert!(
        b.try_lock(&name).await.expect("try").is_none(),
        "the extended lease still runs"
    );
    assert!(!outer.is_lost());
    if a.backend().reentrant() {
        // Both holds shortened back to `short`, then the inner one extended and released: the
        // release resets the lease to the inner guard's extended length.
        outer.extend(short).await.expect("shorten");
        let inner = a.lock_with(&name, &options).await.expect("re-enter");
        inner.extend(LONG_LEASE).await.expect("extend inner");
        assert_eq!(
            inner.release().await.expect("release inner"),
            ReleaseOutcome::StillHeld { hold_count: 1 }
        );
        sleep(short + Duration::from_millis(200)).await;
        assert!(
            b.try_lock(&name).await.expect("try").is_none(),
            "the inner release set the extended lease"
        );
    }
    assert_eq!(
        outer.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let lost = hold(&a, &name, &options).await;
    a.force_unlock(&name).await.expect("force unlock");
    assert!(matches!(
        lost.extend(LONG_LEASE).await,
        Err(Error::LeaseLost)
    ));
    assert!(lost.is_lost());
}

/// The watchdog keeps a lock well past its lease.
pub async fn watchdog_keeps_lock_past_lease<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("watchdog");
    let lease = Duration::from_millis(300);
    let held = hold(&a, &name, &LockOptions::new().watchdog_lease(lease)).await;
    assert!(held.is_watchdog());
    let first_deadline = held.valid_until();
    sleep(lease * 4).await;
    assert!(
        b.try_lock(&name).await.expect("try").is_none(),
        "still held"
    );
    assert!(!held.is_lost());
    assert!(
        held.valid_until() > first_deadline,
        "renewals move the deadline"
    );
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    sleep(lease * 2).await;
    assert!(
        !b.is_locked(&name).await.expect("state"),
        "no renewal after release"
    );
}

/// `lost()` fires when the lock is deleted behind the holder's back.
pub async fn lost_fires_when_key_is_deleted<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("lost");
    let held = hold(
        &a,
        &name,
        &LockOptions::new().watchdog_lease(Duration::from_millis(300)),
    )
    .await;
    assert!(b.force_unlock(&name).await.expect("force"));
    let loss = timeout(Duration::from_secs(3), held.lost())
        .await
        .expect("lost() fires after the key is deleted");
    assert_eq!(loss, LeaseLoss::NotOurs);
    assert!(held.is_lost());
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::NotHeld
    );
}

/// A waiter wakes on the release, not when the holder's (long) lease would have run out.
pub async fn waiter_is_woken_by_release<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("wake");
    let held = hold(&a, &name, &LockOptions::new().fixed_lease(LONG_LEASE)).await;
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let got = b.lock(&name).await.expect("lock");
            (Instant::now(), got.release().await.expect("release"))
        }
    });
    sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let (acquired_at, released) = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken long before the 20 s lease ends")
        .expect("task");
    assert_eq!(released, ReleaseOutcome::Released);
    let handoff = acquired_at.duration_since(released_at);
    assert!(
        handoff < Duration::from_secs(2),
        "hand-off took {handoff:?}"
    );
}

/// Several waiters all get the lock in turn, each woken by the previous release.
pub async fn waiters_take_turns<H: Harness>(harness: &H) {
    let name = fresh_name("turns");
    let first = Locker::new(harness.client().await);
    let held = hold(&first, &name, &LockOptions::new().fixed_lease(LONG_LEASE)).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let locker = Locker::new(harness.client().await);
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            let options = LockOptions::new().fixed_lease(LONG_LEASE);
            let guard = hold(&locker, &name, &options).await;
            sleep(Duration::from_millis(20)).await;
            guard.release().await.expect("release")
        }));
    }
    sleep(Duration::from_millis(200)).await;
    assert!(held.release().await.expect("release").was_held());
    for task in tasks {
        let released = timeout(Duration::from_secs(8), task)
            .await
            .expect("every waiter gets its turn long before the 20 s lease ends")
            .expect("task");
        assert_eq!(released, ReleaseOutcome::Released);
    }
}

/// `try_lock` never waits.
pub async fn try_lock_does_not_wait<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("try");
    let held = hold(&a, &name, &LockOptions::new().fixed_lease(LONG_LEASE)).await;
    let started = Instant::now();
    assert!(b.try_lock(&name).await.expect("try").is_none());
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(held.release().await.expect("release").was_held());
}

/// A wait deadline is kept: neither given up early nor overrun.
pub async fn wait_deadline_is_respected<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("deadline");
    let held = hold(&a, &name, &LockOptions::new().fixed_lease(LONG_LEASE)).await;
    let wait = Duration::from_millis(400);
    let started = Instant::now();
    let got = b.lock_with(&name, &LockOptions::new().wait(wait)).await;
    let waited = started.elapsed();
    assert!(matches!(got, Err(Error::NotAcquired { .. })), "{got:?}");
    assert!(waited >= wait, "gave up early, after {waited:?}");
    assert!(
        waited < wait + Duration::from_secs(1),
        "overran: {waited:?}"
    );
    assert!(held.release().await.expect("release").was_held());
}

/// A `lock()` future dropped while waiting leaves no hold, and the lock stays usable.
pub async fn cancelled_lock_leaves_nothing<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("cancel");
    let held = hold(&a, &name, &LockOptions::new().fixed_lease(LONG_LEASE)).await;
    let cancelled = timeout(Duration::from_millis(300), b.lock(&name)).await;
    assert!(
        cancelled.is_err(),
        "the lock was held: lock() was still waiting"
    );
    assert!(held.release().await.expect("release").was_held());
    sleep(Duration::from_millis(100)).await;
    assert!(
        !a.is_locked(&name).await.expect("state"),
        "nothing left behind"
    );
    // The lock and its notifications still work for the cancelled client.
    let again = timeout(Duration::from_secs(2), b.lock(&name))
        .await
        .expect("free lock is taken at once")
        .expect("lock");
    assert!(again.release().await.expect("release").was_held());
}

/// A dropped guard releases the lock in the background.
pub async fn dropped_guard_releases<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("drop");
    let held = a.lock(&name).await.expect("lock");
    drop(held);
    let got = timeout(
        Duration::from_secs(3),
        b.lock_with(&name, &LockOptions::new().wait(Duration::from_secs(3))),
    )
    .await
    .expect("no hang")
    .expect("freed by the dropped guard, not by the 30 s lease");
    assert!(got.release().await.expect("release").was_held());
}

/// A guard released from another task releases the right hold.
pub async fn guard_released_from_another_task<H: Harness>(harness: &H) {
    let locker = Locker::new(harness.client().await);
    let name = fresh_name("cross-task");
    let held = locker.lock(&name).await.expect("lock");
    let outcome = tokio::spawn(async move { held.release().await })
        .await
        .expect("task")
        .expect("release");
    assert_eq!(outcome, ReleaseOutcome::Released);
    assert!(!locker.is_locked(&name).await.expect("state"));
}

/// Fencing tokens strictly increase with every grant of a name; a store without them
/// ([`Harness::fences`]) refuses a fenced lock and holds nothing.
pub async fn fencing_tokens_increase<H: Harness>(harness: &H) {
    let (a, b) = two_clients(harness).await;
    let name = fresh_name("fencing");
    let options = LockOptions::new().fenced().fixed_lease(LONG_LEASE);
    if !harness.fences() {
        let refused = a.lock_with(&name, &options).await;
        assert!(
            matches!(refused, Err(Error::Unsupported { .. })),
            "a fenced lock where the store has no tokens: {refused:?}"
        );
        // Nothing was taken: another client gets the name at once.
        let plain = b.try_lock(&name).await.expect("try_lock").expect("free");
        assert!(plain.release().await.expect("release").was_held());
        return;
    }
    let mut last = 0;
    for locker in [&a, &b, &a, &b] {
        let guard = hold(locker, &name, &options).await;
        let token = guard.fencing_token();
        assert!(token > last, "token {token} after {last}");
        last = token;
        assert!(guard.release().await.expect("release").was_held());
    }
    // A plain lock of the same name is untouched by the fencing counter.
    let plain = a.lock(&name).await.expect("lock");
    assert!(plain.release().await.expect("release").was_held());
}

/// Bad input gets a typed error, and nothing is held afterwards.
pub async fn bad_input_is_rejected<H: Harness>(harness: &H) {
    let locker = Locker::new(harness.client().await);
    let name = fresh_name("bad-input");
    let too_long = "x".repeat(lock_core::options::MAX_NAME_LEN + 1);
    for bad in ["", too_long.as_str()] {
        assert!(matches!(
            locker.lock(bad).await,
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            locker.try_lock(bad).await,
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            locker.force_unlock(bad).await,
            Err(Error::InvalidName { .. })
        ));
    }
    for options in [
        LockOptions::new().fixed_lease(Duration::ZERO),
        LockOptions::new().fixed_lease(Duration::from_millis(1)),
        LockOptions::new().watchdog_lease(Duration::from_secs(400 * 24 * 3600)),
        LockOptions::new().wait(Duration::ZERO),
        LockOptions::new().wait(Duration::MAX),
    ] {
        let result = locker.lock_with(&name, &options).await;
        assert!(
            matches!(result, Err(Error::InvalidOptions { .. })),
            "{options:?} gave {result:?}"
        );
    }
    assert!(!locker.is_locked(&name).await.expect("state"));
}

/// Generates one `#[test]` per conformance case for a harness expression.
///
/// The expression is evaluated once per test, inside that test's runtime. Tests run on a
/// two-worker multi-thread tokio runtime.
///
/// `conformance_tests!(@sequence harness)` is instead a future running every case one after
/// the other on `harness` (a reference to a [`Harness`]), for a
/// store too costly to share between parallel tests (such as a cluster in containers):
///
/// ```
/// # use lock_core::MemoryBackend;
/// # use lock_testkit::conformance::Harness;
/// # struct Memory(MemoryBackend);
/// # impl Harness for Memory {
/// #     type Backend = MemoryBackend;
/// #     async fn client(&self) -> MemoryBackend { self.0.new_client() }
/// # }
/// let harness = Memory(MemoryBackend::new());
/// lock_testkit::conformance::run(lock_testkit::conformance_tests!(@sequence &harness));
/// ```
#[macro_export]
macro_rules! conformance_tests {
    (@sequence $harness:expr) => {
        $crate::conformance_tests! { @every run $harness }
    };
    ($harness:expr) => {
        $crate::conformance_tests! { @every cases $harness }
    };
    // The one list of cases, for both forms (braces: an item or an expression alike).
    (@every $mode:ident $harness:expr) => {
        $crate::conformance_tests! { @$mode $harness;
            exclusion_between_owners,
            reentrant_counts,
            nested_shorter_lease_keeps_outer_hold,
            release_by_non_owner_is_refused,
            double_unlock_and_unlock_after_expiry,
            explicit_lease_expires,
            extend_sets_a_new_lease,
            watchdog_keeps_lock_past_lease,
            lost_fires_when_key_is_deleted,
            waiter_is_woken_by_release,
            waiters_take_turns,
            try_lock_does_not_wait,
            wait_deadline_is_respected,
            cancelled_lock_leaves_nothing,
            dropped_guard_releases,
            guard_released_from_another_task,
            fencing_tokens_increase,
            bad_input_is_rejected,
        }
    };
    (@run $harness:expr; $($case:ident),* $(,)?) => {
        async {
            let harness = $harness;
            $($crate::conformance::$case(harness).await;)*
        }
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run(async {
                    let harness = $harness;
                    $crate::conformance::$case(&harness).await;
                });
            }
        )*
    };
}

/// How long one conformance case may run.
const CASE_LIMIT: Duration = Duration::from_secs(60);
/// How long a case's runtime may take to stop once the case is over (its blocking tasks).
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// Runs one case on a fresh two-worker runtime, with an overall time limit of 60 s.
///
/// A case that hangs where that limit cannot fire (a blocked thread, a fixture's synchronous
/// start, a runtime that cannot stop) is caught by a [`HangWatch`] 30 s later: it aborts the
/// test binary, naming the case and printing every thread's stack.
///
/// # Panics
///
/// When the case panics or exceeds the limit.
pub fn run<F: Future<Output = ()>>(case: F) {
    let name = std::thread::current()
        .name()
        .unwrap_or("a conformance case")
        .to_owned();
    let _watch = HangWatch::arm(name, CASE_LIMIT + STOP_LIMIT + Duration::from_secs(20));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    // A panic (a failed assertion) is caught here so that the runtime stops the same way,
    // then raised again.
    let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async { timeout(CASE_LIMIT, case).await })
    }));
    // Not the runtime's drop, which waits for its blocking tasks without end.
    runtime.shutdown_timeout(STOP_LIMIT);
    match finished {
        Ok(finished) => finished.expect("conformance case took over 60 s: something hangs"),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    /// A failed assertion in a case fails the test with its own message, after the case's
    /// runtime has stopped.
    #[test]
    #[should_panic(expected = "the case's own assertion")]
    fn a_panicking_case_fails_with_its_own_message() {
        super::run(async { panic!("the case's own assertion") });
    }
}

//! A wait that began while the store's notifications were down polls only until they are back:
//! it registers again at its next look, and the release after that wakes it at once. (A wait
//! that kept polling for good lost every race for a contended lock to waiters that are woken
//! the moment it is free: the PostgreSQL usage battery saw a waiter go 10 s without the lock.)
//! On a backend whose hub says when the notifications are back
//! ([`ReleaseHub::notifications_back`]), it registers again at once, not at its next poll: a
//! fair lock's head polling every second held up its whole queue for a second after each
//! PostgreSQL restart in the usage battery.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::backend::{
    AcquireOutcome, AcquireRequest, LockBackend, ReleaseHub, ReleaseWatch, RenewOutcome, Renewal,
};
use lock_core::{LockOptions, LockState, Locker, MemoryBackend, ReleaseOutcome, Result};
use tokio::time::Instant;

/// How often a wait polls while the notifications are off: long, so a wait that kept polling
/// would be seen.
const POLL: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_uses_the_notifications_once_they_are_back() {
    let store = WithHub::new();
    // One client for both: the holder's release is announced on the waiter's hub.
    let holder = Locker::new(store.clone());
    let waiter = Locker::new(store.clone());
    let long = LockOptions::new().fixed_lease(Duration::from_secs(30));
    let held = holder.lock_with("back", &long).await.expect("the holder");

    // The wait starts while the notifications are down: it polls (every 1.5 s).
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock_with("back", &LockOptions::new().wait(Duration::from_secs(10)))
            .await
            .expect("the waiter gets the lock");
        let got_at = Instant::now();
        assert!(guard.release().await.expect("release").was_held());
        got_at
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Back, without the hub being told: the wait finds out at its next look.
    store.notifications.store(true, Ordering::SeqCst);
    // Past the waiter's first look (where it registers again), and well before its next one
    // would be if it still polled.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let released_at = Instant::now();
    assert!(held.release().await.expect("release").was_held());
    let got_at = waiting.await.expect("the waiter's task");
    let after = got_at.duration_since(released_at);
    assert!(
        after < Duration::from_millis(500),
        "the waiter got the lock {after:?} after the release: it was still polling"
    );
}

/// The in-memory store announcing its releases through a hub of its own, as a networked
/// backend does: while its notifications are off, watches are the hub's polling-for-now ones;
/// [`WithHub::notifications_on`] turns them on and tells the hub they are back.
#[derive(Clone)]
struct WithHub {
    inner: MemoryBackend,
    hub: ReleaseHub,
    notifications: Arc<AtomicBool>,
}

impl WithHub {
    /// A store whose notifications are off.
    fn new() -> Self {
        WithHub {
            inner: MemoryBackend::new(),
            hub: ReleaseHub::new(),
            notifications: Arc::new(AtomicBool::new(false)),
        }
    }

    fn notifications_on(&self) {
        self.notifications.store(true, Ordering::SeqCst);
        self.hub.notifications_back();
    }
}

impl LockBackend for WithHub {
    fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        self.inner.try_acquire(request).await
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let released = self.inner.release(name, owner_field, lease).await;
        if matches!(released, Ok(ReleaseOutcome::Released))
            && self.notifications.load(Ordering::SeqCst)
        {
            self.hub.notify_released(name);
        }
        released
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        self.inner.renew(renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        self.inner.abandon(name, owner_field, keep).await
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.inner.force_release(name).await
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        self.inner.inspect(name).await
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        if self.notifications.load(Ordering::SeqCst) {
            Ok(self.hub.watch(name))
        } else {
            Ok(self.hub.polling_for_now(POLL))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_wait_registers_again_as_soon_as_the_notifications_are_back() {
    let store = WithHub::new();
    // One client for both: the holder's release is announced on the waiter's hub.
    let holder = Locker::new(store.clone());
    let waiter = Locker::new(store.clone());
    let long = LockOptions::new().fixed_lease(Duration::from_secs(30));
    let held = holder.lock_with("back", &long).await.expect("the holder");

    // The wait starts while the notifications are down: it polls (every 1.5 s).
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock_with("back", &LockOptions::new().wait(Duration::from_secs(10)))
            .await
            .expect("the waiter gets the lock");
        let got_at = Instant::now();
        assert!(guard.release().await.expect("release").was_held());
        got_at
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    store.notifications_on();
    // Well before the waiter's next poll (1.1 s at the earliest): only a wait that registered
    // again when told the notifications are back hears this release.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released_at = Instant::now();
    assert!(held.release().await.expect("release").was_held());
    let got_at = waiting.await.expect("the waiter's task");
    let after = got_at.duration_since(released_at);
    assert!(
        after < Duration::from_millis(300),
        "the waiter got the lock {after:?} after the release: it polled until its next look"
    );
}

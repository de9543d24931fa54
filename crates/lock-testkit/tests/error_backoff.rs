//! A wait that is backing off after errors in a row still hears the lock's release: it tries
//! at once instead of sleeping out its delay (up to 1 s) while the lock stays free. (A fair
//! lock's head backing off holds up every waiter behind it: the PostgreSQL usage battery saw
//! its lock free for 3 s after a burst of faults.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::backend::{
    AcquireOutcome, AcquireRequest, LockBackend, ReleaseWatch, RenewOutcome, Renewal,
};
use lock_core::{Error, LockOptions, LockState, Locker, MemoryBackend, ReleaseOutcome, Result};
use tokio::time::Instant;

/// The in-memory store, whose attempts this client can have refused (a definite, retryable
/// error, as a server still starting answers), counting them.
#[derive(Clone)]
struct Refusing {
    inner: MemoryBackend,
    refuse: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
}

impl LockBackend for Refusing {
    fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        if self.refuse.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(Error::Unavailable("starting up (injected)".into()));
        }
        self.inner.try_acquire(request).await
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        self.inner.release(name, owner_field, lease).await
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
        self.inner.watch_releases(name).await
    }
}

/// Waits until `count` reaches `at_least`.
async fn until(count: &AtomicUsize, at_least: usize) {
    while count.load(Ordering::SeqCst) < at_least {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_backing_off_after_errors_takes_a_released_lock_at_once() {
    let store = MemoryBackend::new();
    let holder = Locker::new(store.new_client());
    let (refuse, refused) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let waiter = Locker::new(Refusing {
        inner: store.new_client(),
        refuse: refuse.clone(),
        refused: refused.clone(),
    });
    let long = LockOptions::new().fixed_lease(Duration::from_secs(30));
    let held = holder
        .lock_with("backoff", &long)
        .await
        .expect("the holder");

    // The waiter finds the lock held and waits for its release.
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock_with("backoff", &LockOptions::new().wait(Duration::from_secs(20)))
            .await
            .expect("the waiter gets the lock");
        let got_at = Instant::now();
        assert!(guard.release().await.expect("release").was_held());
        got_at
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Its store starts refusing; a release and an at-once relock by the holder wake it into an
    // error, and it backs off: 50, 100, 200, 400 ms, then 800 ms (each ±25 %).
    refuse.store(true, Ordering::SeqCst);
    assert!(held.release().await.expect("release").was_held());
    let held = holder.lock_with("backoff", &long).await.expect("relock");
    until(&refused, 5).await;
    // Right after its fifth refusal: the next attempt is 600 ms to 1 s away. The store is back
    // and the lock is released now.
    refuse.store(false, Ordering::SeqCst);
    let released_at = Instant::now();
    assert!(held.release().await.expect("release").was_held());
    let got_at = waiting.await.expect("the waiter's task");
    let after = got_at.duration_since(released_at);
    assert!(
        after < Duration::from_millis(300),
        "the waiter got the lock {after:?} after the release: it slept out its back-off"
    );
}

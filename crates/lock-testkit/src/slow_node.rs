//! A backend wrapper for composite tests: a node whose acquires answer late and whose releases
//! can be made to fail, around any real backend.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Error, LockBackend, LockState, ReleaseOutcome, ReleaseWatch,
    RenewOutcome, Renewal, Result,
};

/// Wraps a backend: every acquire waits `acquire_delay` before it reaches the inner backend (a
/// request not sent yet when a composite decides), and releases fail with
/// [`Error::ConnectionLost`] while [`SlowNode::fail_releases`] is on (a node lost after the
/// grant). Everything else goes straight through.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use lock_core::MemoryBackend;
/// use lock_testkit::SlowNode;
///
/// let node = SlowNode::new(MemoryBackend::new(), Duration::from_millis(200));
/// node.fail_releases(true);
/// ```
#[derive(Debug)]
pub struct SlowNode<B> {
    inner: B,
    acquire_delay: Duration,
    fail_releases: AtomicBool,
}

impl<B: LockBackend> SlowNode<B> {
    /// `inner` with acquires delayed by `acquire_delay`.
    pub fn new(inner: B, acquire_delay: Duration) -> Self {
        SlowNode {
            inner,
            acquire_delay,
            fail_releases: AtomicBool::new(false),
        }
    }

    /// Makes later releases fail (`true`) or go through again (`false`).
    pub fn fail_releases(&self, fail: bool) {
        self.fail_releases.store(fail, Ordering::SeqCst);
    }
}

impl<B: LockBackend> LockBackend for SlowNode<B> {
    fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    fn check_name(&self, name: &str) -> Result<()> {
        self.inner.check_name(name)
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn clock_drift(&self, lease: Duration) -> Duration {
        self.inner.clock_drift(lease)
    }

    fn reentrant(&self) -> bool {
        self.inner.reentrant()
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        tokio::time::sleep(self.acquire_delay).await;
        self.inner.try_acquire(request).await
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        if self.fail_releases.load(Ordering::SeqCst) {
            return Err(Error::ConnectionLost("node lost (SlowNode)".into()));
        }
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

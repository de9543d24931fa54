//! In-model faults for a store that has no network of its own (the in-memory backend): a
//! wrapper that, while a fault is on, answers calls the way a store behind a failing link
//! would — slowly, not at all for a while (a paused server), with the answer lost after the
//! call was applied (ambiguous), or refused before it was applied (definite).
//!
//! [`FlakyBackend`] wraps any [`LockBackend`]; clones share one [`FaultSwitch`], and
//! [`FaultSwitch::faults`] turns it into a fault sequence for [`crate::FaultLoop`], like
//! [`crate::faults::single_node`] does for a real server.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Error, LockBackend, LockState, ReleaseOutcome, ReleaseWatch,
    RenewOutcome, Renewal, Result,
};
use rand::Rng;
use tokio::time::Instant;

use crate::fault_loop::FaultFuture;

/// What a [`FlakyBackend`] does to calls while its switch is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlakyFault {
    /// Each call waits this long before it is applied, as behind a slow link.
    Slow(Duration),
    /// Every call waits until the fault ends, then runs (a paused server).
    Paused,
    /// One call in three is applied and its answer lost: an ambiguous error
    /// ([`Error::ConnectionLost`]).
    LoseAnswers,
    /// One call in three is refused before it is applied: a definite error
    /// ([`Error::Unavailable`], as a server still loading its data answers).
    Refuse,
}

/// The fault on now, shared by every clone of a [`FlakyBackend`] made from it.
#[derive(Clone, Debug, Default)]
pub struct FaultSwitch {
    on: Arc<Mutex<Option<(FlakyFault, Instant)>>>,
}

impl FaultSwitch {
    /// No fault on.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns `fault` on until `until`.
    pub fn set(&self, fault: FlakyFault, until: Instant) {
        *self.on.lock().unwrap_or_else(PoisonError::into_inner) = Some((fault, until));
    }

    /// Turns the fault off.
    pub fn clear(&self) {
        *self.on.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn current(&self) -> Option<(FlakyFault, Instant)> {
        let on = *self.on.lock().unwrap_or_else(PoisonError::into_inner);
        on.filter(|(_, until)| Instant::now() < *until)
    }

    /// The faults in turn — slow (10–40 ms a call), paused, answers lost, refused — each for
    /// 100–300 ms, for [`crate::FaultLoop::start`].
    pub fn faults(&self) -> impl FnMut(usize) -> FaultFuture + Send + 'static {
        let switch = self.clone();
        move |n| {
            let switch = switch.clone();
            let (length, slow) = {
                let mut rng = rand::rng();
                (
                    Duration::from_millis(rng.random_range(100..=300)),
                    Duration::from_millis(rng.random_range(10..=40)),
                )
            };
            let fault = match n % 4 {
                0 => FlakyFault::Slow(slow),
                1 => FlakyFault::Paused,
                2 => FlakyFault::LoseAnswers,
                _ => FlakyFault::Refuse,
            };
            Box::pin(async move {
                switch.set(fault, Instant::now() + length);
                tokio::time::sleep(length).await;
                switch.clear();
                format!("{fault:?} for {length:?}")
            })
        }
    }
}

/// A backend whose calls suffer the fault its [`FaultSwitch`] has on (see the module).
#[derive(Clone, Debug)]
pub struct FlakyBackend<B> {
    inner: B,
    switch: FaultSwitch,
}

impl<B: LockBackend> FlakyBackend<B> {
    /// `inner`, with the faults of `switch`.
    pub fn new(inner: B, switch: FaultSwitch) -> Self {
        FlakyBackend { inner, switch }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Runs one call under the fault on now.
    async fn call<T>(&self, call: impl Future<Output = Result<T>>) -> Result<T> {
        let Some((fault, until)) = self.switch.current() else {
            return call.await;
        };
        match fault {
            FlakyFault::Slow(delay) => {
                tokio::time::sleep(delay).await;
                call.await
            }
            FlakyFault::Paused => {
                tokio::time::sleep_until(until).await;
                call.await
            }
            FlakyFault::LoseAnswers => {
                let answer = call.await;
                if rand::rng().random_ratio(1, 3) {
                    return Err(Error::ConnectionLost(
                        "the answer was lost (injected)".into(),
                    ));
                }
                answer
            }
            FlakyFault::Refuse => {
                if rand::rng().random_ratio(1, 3) {
                    return Err(Error::Unavailable(
                        "LOADING the store is loading its data (injected)".into(),
                    ));
                }
                call.await
            }
        }
    }
}

impl<B: LockBackend> LockBackend for FlakyBackend<B> {
    fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    fn check_name(&self, name: &str) -> Result<()> {
        self.inner.check_name(name)
    }

    fn clock_drift(&self, lease: Duration) -> Duration {
        self.inner.clock_drift(lease)
    }

    fn reentrant(&self) -> bool {
        self.inner.reentrant()
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        self.call(self.inner.try_acquire(request)).await
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        self.call(self.inner.release(name, owner_field, lease))
            .await
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        self.call(self.inner.renew(renewals)).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        self.call(self.inner.abandon(name, owner_field, keep)).await
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

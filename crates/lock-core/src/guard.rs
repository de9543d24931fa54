//! The guard of a held lock: what the caller holds, extends and gives back.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tracing::Instrument;

use crate::backend::{LockBackend, ReleaseOutcome, RenewOutcome};
use crate::error::{Error, Result};
use crate::fencing::{Fenced, Fencing, Unfenced};
use crate::hold::{Hold, LeaseLoss};
use crate::holds::Busy;
use crate::options::check_lease;
use crate::owner::Owner;
use crate::shared::LockerShared;
use crate::telemetry;

/// A held lock. Give it back with [`LockGuard::release`]; dropping it releases too, in the
/// background.
///
/// The guard carries its owner, so it can be moved to and released from any task or thread.
/// In watchdog mode the lease is renewed while the guard lives; [`LockGuard::lost`] resolves if
/// the lease is lost anyway (the key was deleted, or renewals failed until the lease ran out).
///
/// # Drop
///
/// Dropping the guard stops its watchdog at once and spawns a best-effort release on the current
/// tokio runtime; it never blocks. Outside a runtime, or if that release fails, the lease is the
/// safety net: the lock expires when its lease runs out.
///
/// # Fencing
///
/// `F` says whether the acquire asked for a fencing token: [`Unfenced`] (the default) or
/// [`Fenced`] (from [`crate::LockOptions::fenced`]), whose guards have
/// [`LockGuard::fencing_token`].
///
/// # Example
///
/// ```
/// use lock_core::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::Error> {
/// let locker = Locker::new(MemoryBackend::new());
/// let guard = locker.lock("report:2026-11").await?;
/// assert_eq!(guard.hold_count(), 1);
/// // ... the critical section; `guard.lost()` can be raced against it with `select!` ...
/// assert!(guard.release().await?.was_held());
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct LockGuard<B: LockBackend, F: Fencing = Unfenced> {
    locker: Arc<LockerShared<B>>,
    /// Name, owner, lease and lease status, shared with the watchdog and the hold book.
    hold: Arc<Hold>,
    hold_count: u32,
    fencing_token: F::Token,
    watchdog_id: Option<u64>,
    finished: bool,
}

impl<B: LockBackend, F: Fencing> std::fmt::Debug for LockGuard<B, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.hold.name())
            .field("owner", &self.hold.field())
            .field("hold_count", &self.hold_count)
            .field("fencing_token", &F::token_of(self.fencing_token))
            .field("watchdog", &self.watchdog_id.is_some())
            .finish_non_exhaustive()
    }
}

impl<B: LockBackend> LockGuard<B, Fenced> {
    /// The fencing token of this grant: it strictly increases with every grant of this lock
    /// name. Pass it to the resource you protect so it can refuse writes from an older holder.
    ///
    /// # Example
    ///
    /// ```
    /// use lock_core::{LockOptions, Locker, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::Error> {
    /// let locker = Locker::new(MemoryBackend::new());
    /// let first = locker.lock_with("ledger", &LockOptions::new().fenced()).await?;
    /// let token = first.fencing_token();
    /// first.release().await?;
    /// let second = locker.lock_with("ledger", &LockOptions::new().fenced()).await?;
    /// assert!(second.fencing_token() > token);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }
}

impl<B: LockBackend, F: Fencing> LockGuard<B, F> {
    /// The guard of a granted `hold`, already counted in the hold book (and registered with the
    /// watchdog as `watchdog_id` in watchdog mode).
    pub(crate) fn new(
        locker: Arc<LockerShared<B>>,
        hold: Arc<Hold>,
        hold_count: u32,
        fencing_token: F::Token,
        watchdog_id: Option<u64>,
    ) -> Self {
        LockGuard {
            locker,
            hold,
            hold_count,
            fencing_token,
            watchdog_id,
            finished: false,
        }
    }

    /// The lock name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.hold.name()
    }

    /// The owner this guard holds the lock as.
    #[must_use]
    pub fn owner(&self) -> Owner {
        self.hold.owner()
    }

    /// The owner field on the server, `<client id>:<holder id>`.
    #[must_use]
    pub fn owner_field(&self) -> &str {
        self.hold.field()
    }

    /// The owner's hold count right after this guard's acquire (2 for a first re-entry, ...).
    #[must_use]
    pub fn hold_count(&self) -> u32 {
        self.hold_count
    }

    /// The guard's token as its fencing kind carries it: `()` for [`Unfenced`], the token for
    /// [`Fenced`]. For code generic over both (`F::token_of(guard.token())` is an
    /// `Option<u64>`); with a known kind, [`LockGuard::fencing_token`] reads better.
    #[must_use]
    pub fn token(&self) -> F::Token {
        self.fencing_token
    }

    /// The lease length set on each acquire and renewal.
    #[must_use]
    pub fn lease(&self) -> Duration {
        self.hold.lease()
    }

    /// Whether the watchdog renews this lease.
    #[must_use]
    pub fn is_watchdog(&self) -> bool {
        self.watchdog_id.is_some()
    }

    /// The instant until which the lease is known to be ours: the send time of the last
    /// successful acquire or renewal plus the lease, minus the backend's clock-drift allowance
    /// (zero for a single store; see [`LockBackend::clock_drift`]) on the monotonic clock.
    #[must_use]
    pub fn valid_until(&self) -> Instant {
        self.hold.status().borrow().valid_until
    }

    /// How long the lease is still known to be ours (zero once past).
    #[must_use]
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Whether the lease is known to be lost (or past its validity deadline).
    #[must_use]
    pub fn is_lost(&self) -> bool {
        let status = *self.hold.status().borrow();
        status.lost.is_some() || Instant::now() >= status.valid_until
    }

    /// Resolves when the lease is lost: the store said the lock is not ours any more, or the
    /// validity deadline passed without a confirmed renewal. Never resolves while the lease is
    /// kept, so it is meant for `tokio::select!` against the critical section.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes the lease; dropping it changes nothing.
    pub async fn lost(&self) -> LeaseLoss {
        let mut status = self.hold.status().subscribe();
        loop {
            let now = *status.borrow_and_update();
            if let Some(loss) = now.lost {
                return loss;
            }
            tokio::select! {
                changed = status.changed() => {
                    if changed.is_err() {
                        // Unreachable while `self` lives (we hold the sender); wait forever.
                        std::future::pending::<()>().await;
                    }
                }
                () = tokio::time::sleep_until(now.valid_until) => {
                    if status.borrow().valid_until <= now.valid_until {
                        self.hold.mark_lost(LeaseLoss::Expired);
                    }
                }
            }
        }
    }

    /// Renews the lease now with a new length (and, in watchdog mode, uses that length for later
    /// renewals too).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] for a bad lease (nothing sent); [`Error::LeaseLost`] when the lock
    /// is no longer ours (the guard is then marked lost); [`Error::Unavailable`] when a composite
    /// could not decide (too few nodes answered); backend errors as they come.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the renewal may or may not have been applied; the guard's validity is
    /// updated only by a completed call.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        check_lease(lease)?;
        let renewal = [self.hold.renewal(lease)];
        let sent_at = Instant::now();
        let outcomes = self.locker.backend.renew(&renewal).await?;
        match outcomes.first() {
            Some(RenewOutcome::Renewed) => {
                let drift = self.locker.backend.clock_drift(lease);
                let valid_until = sent_at + lease.saturating_sub(drift);
                self.hold
                    .status()
                    .send_modify(|s| s.valid_until = valid_until);
                self.hold.set_lease(lease);
                if let Some(id) = self.watchdog_id {
                    self.locker.watchdog.extended(id, valid_until, sent_at);
                }
                Ok(())
            }
            Some(RenewOutcome::NotHeld) => {
                self.hold.mark_lost(LeaseLoss::NotOurs);
                Err(Error::LeaseLost)
            }
            _ => Err(Error::Unavailable(
                "the renewal was neither confirmed nor refused by enough of the store; the lease \
                 is unchanged"
                    .into(),
            )),
        }
    }

    /// Gives the hold back and waits for the store's answer.
    ///
    /// Returns [`ReleaseOutcome::Released`] when the lock became free,
    /// [`ReleaseOutcome::StillHeld`] when a reentrant hold of the same owner remains, and
    /// [`ReleaseOutcome::NotHeld`] when the lock was no longer ours (it expired or was deleted):
    /// the critical section may then have overlapped with another holder.
    ///
    /// # Errors
    ///
    /// Backend errors. The watchdog is stopped first in any case, so on error the lock expires
    /// within its lease.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the release may or may not have reached the store; the watchdog is already
    /// stopped, so the lock is gone by the end of its lease at the latest.
    pub async fn release(mut self) -> Result<ReleaseOutcome> {
        let (keep, _busy) = self.finish();
        let span = tracing::info_span!(
            "distlock.release",
            name = self.hold.name(),
            kind = self.locker.backend.kind(),
            owner = self.hold.field(),
            node = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let released = self
            .locker
            .release_keeping(&self.hold, keep)
            .instrument(span.clone())
            .await;
        let outcome = match &released {
            Ok(ReleaseOutcome::Released) => "released",
            Ok(ReleaseOutcome::StillHeld { .. }) => "still_held",
            Ok(ReleaseOutcome::NotHeld) => "not_held",
            Ok(_) => "other",
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        telemetry::hold_ended(outcome, self.hold.held_for());
        released
    }

    /// Stops the watchdog and the local bookkeeping; the server-side release is the caller's.
    /// Returns the holds of this owner on this name still known afterwards, and the release
    /// counted as under way from before the hold is forgotten here until the returned value is
    /// dropped (after the release): a background cleanup must not take the holds known in
    /// between for the store's.
    fn finish(&mut self) -> (u32, Busy) {
        let busy = self.locker.holds.begin(self.hold.name(), self.hold.field());
        if self.finished {
            let known = self
                .locker
                .holds
                .known_holds(self.hold.name(), self.hold.field());
            return (known, busy);
        }
        self.finished = true;
        if let Some(id) = self.watchdog_id {
            self.locker.watchdog.unregister(id);
        }
        (self.locker.holds.forget_hold(&self.hold), busy)
    }
}

impl<B: LockBackend, F: Fencing> Drop for LockGuard<B, F> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let (_, busy) = self.finish();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(name = %self.hold.name(), "guard dropped outside a runtime; the lease will expire");
            return;
        };
        telemetry::hold_ended("dropped", self.hold.held_for());
        let locker = self.locker.clone();
        let hold = self.hold.clone();
        runtime.spawn(async move {
            if let Err(error) = locker.release_hold(&hold).await {
                tracing::warn!(%error, name = %hold.name(), "background release failed; the lease will expire");
            }
            drop(busy);
        });
    }
}

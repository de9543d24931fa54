//! The guard of a held lock: what the caller holds, extends and gives back.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tracing::Instrument;

use crate::contract::{LockBackend, ReleaseOutcome, RenewOutcome};
use crate::error::{Error, Result};
use crate::fencing::{Fenced, Fencing, Unfenced};
use crate::hold::{Hold, LeaseLoss};
use crate::options::check_lease;
use crate::owner::Owner;
use crate::shared::{LockerShared, Release};
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
/// Dropping the guard stops its watchdog at once and puts its release in the owner's line on
/// this name before `drop` returns; the release itself runs on the current tokio runtime, in the
/// background, so dropping never blocks. The owner's next call on the name (a `lock()` on the
/// next line, say) waits for that release and so gets a fresh hold (`hold_count() == 1`), not a
/// re-entry of the dropped one. If the release fails, the owner's count is set right before its
/// next call on the name; outside a runtime that is all that happens, and otherwise the lease is
/// the safety net. The release runs on the runtime current at the drop, and the owner's next call
/// on the name waits for it: drop guards on a runtime that keeps running (a current-thread
/// runtime that is not driven again holds that call up until it is, or until it is dropped).
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
    /// Name, owner, lease and lease status, shared with the watchdog and the order book.
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
    /// The guard of a granted `hold`, already counted in the order book (and registered with the
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
        self.hold.status().valid_until
    }

    /// How long the lease is still known to be ours (zero once past).
    #[must_use]
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Whether the lease is known to be lost (or past its validity deadline).
    #[must_use]
    pub fn is_lost(&self) -> bool {
        let status = self.hold.status();
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
        loop {
            // Made before the status is read, so a change in between still wakes it.
            let changed = self.hold.changed();
            let now = self.hold.status();
            if let Some(loss) = now.lost {
                return loss;
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(now.valid_until) => {
                    if self.hold.status().valid_until <= now.valid_until {
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
                self.hold.set_valid_until(valid_until, true);
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
    /// Backend errors. The watchdog is stopped first in any case, and the owner's count on the
    /// store is set back to the holds it still has (at once, or before its next call on the
    /// name); failing that, the lock expires within its lease.
    ///
    /// # Cancel safety
    ///
    /// Cancelling it does not cancel the release: it goes on in the background, like a dropped
    /// guard's, and the owner's next call on the name still comes after it.
    pub async fn release(mut self) -> Result<ReleaseOutcome> {
        let release = self.finish();
        let span = tracing::info_span!(
            "distlock.release",
            name = self.hold.name(),
            kind = self.locker.backend.kind(),
            owner = self.hold.field(),
            node = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        // Awaited in place when no subscriber records the span: wrapping moves the whole
        // future once more and enters the span at every poll, for nothing. Made in each branch
        // rather than once before them: a future made before the branch is copied whole
        // (kilobytes) into the place it is awaited from.
        let released = if span.is_disabled() {
            release.run().await
        } else {
            release.run().instrument(span.clone()).await
        };
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

    /// Stops the watchdog and puts the release in the owner's line on this name, at once: the
    /// owner's next call there comes after it. The server-side release is the caller's to run
    /// (or to drop, which runs it in the background).
    fn finish(&mut self) -> Release<B> {
        debug_assert!(!self.finished, "a guard is finished once");
        self.finished = true;
        if let Some(id) = self.watchdog_id {
            self.locker.watchdog.unregister(id);
        }
        self.locker.issue_release(self.hold.clone())
    }
}

impl<B: LockBackend, F: Fencing> Drop for LockGuard<B, F> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        telemetry::hold_ended("dropped", self.hold.held_for());
        // Dropped, the release goes on in the background (or, outside a runtime, is left to
        // the owner's next call on the name and to the lease).
        drop(self.finish());
    }
}

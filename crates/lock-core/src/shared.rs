//! What a locker's clones and its guards share (backend, watchdog, hold book), and the two store
//! calls that keep the hold book true: an acquire attempt and a release, each cleaned up after an
//! outcome the store may or may not have applied.

use std::sync::Arc;

use crate::backend::{AcquireOutcome, AcquireRequest, LockBackend, ReleaseOutcome};
use crate::error::Result;
use crate::hold::Hold;
use crate::holds::HoldBook;
use crate::watchdog::Watchdog;

/// The state behind a [`crate::Locker`] and every guard it handed out.
pub(crate) struct LockerShared<B: LockBackend> {
    pub backend: Arc<B>,
    pub watchdog: Watchdog<B>,
    pub holds: HoldBook,
}

impl<B: LockBackend> LockerShared<B> {
    pub fn new(backend: Arc<B>) -> Self {
        LockerShared {
            watchdog: Watchdog::new(backend.clone()),
            backend,
            holds: HoldBook::new(),
        }
    }

    /// One acquire; after an outcome the store may or may not have applied, it tells the store to
    /// keep exactly the holds this process knows of, so an unseen grant does not linger.
    ///
    /// The known holds are read afresh for every attempt: another task of the same owner may
    /// have taken or given back a hold while this one waited.
    ///
    /// # Errors
    ///
    /// The backend's error; an earlier cleanup's error when it fails again (nothing sent then).
    ///
    /// # Cancel safety
    ///
    /// Dropped while the acquire is out, the store may grant it with nobody to know: the
    /// owner's count is then set back to the holds known here in the background (recorded as
    /// a debt first, so the owner's next call waits for it; see [`Unanswered`]).
    pub async fn attempt(
        self: &Arc<Self>,
        mut request: AcquireRequest<'_>,
    ) -> Result<AcquireOutcome> {
        let busy = self.holds.begin(request.name, request.owner_field);
        request.known_holds = self.holds.known_holds(request.name, request.owner_field);
        self.holds
            .settle_debt(
                &*self.backend,
                request.name,
                request.owner_field,
                request.known_holds,
            )
            .await?;
        let mut unanswered = Unanswered {
            busy: Some(busy),
            shared: self,
            name: request.name,
            field: request.owner_field,
            lease: request.lease,
            armed: true,
        };
        let outcome = self.backend.try_acquire(request).await;
        let outcome = match outcome {
            Err(error) if error.is_ambiguous() => {
                // Still armed: dropped during this cleanup, the debt is noted and settled in
                // the background instead.
                let keep = request.known_holds;
                if let Err(cleanup) = self
                    .backend
                    .abandon(request.name, request.owner_field, keep)
                    .await
                {
                    tracing::warn!(%cleanup, name = request.name, "could not undo an acquire of unknown outcome; retried before the next attempt or release");
                    self.holds
                        .note_debt(request.name, request.owner_field, request.lease);
                }
                Err(error)
            }
            other => other,
        };
        unanswered.armed = false;
        outcome
    }

    /// Gives back one hold the caller has already forgotten locally (`forget_hold`). After an
    /// outcome the store may or may not have applied, the owner's count is set to the holds
    /// this process still knows of (or that is left as a debt for the next call), so an unseen
    /// release can neither leave an extra hold nor be applied twice.
    ///
    /// # Errors
    ///
    /// As [`Self::release_keeping`].
    pub async fn release_hold(&self, hold: &Hold) -> Result<ReleaseOutcome> {
        let keep = self.holds.known_holds(hold.name(), hold.field());
        self.release_keeping(hold, keep).await
    }

    /// As [`Self::release_hold`], with the holds still known already read (`keep`).
    ///
    /// # Errors
    ///
    /// The backend's error; an earlier cleanup's error when it fails again (nothing sent then).
    pub async fn release_keeping(&self, hold: &Hold, keep: u32) -> Result<ReleaseOutcome> {
        let (name, field, lease) = (hold.name(), hold.field(), hold.lease());
        let _busy = self.holds.begin(name, field);
        // On failure the hold is already forgotten locally, so the debt, when settled, lowers
        // the count to what is still known: this release happens then (or when the lease ends).
        self.holds
            .settle_debt(&*self.backend, name, field, keep + 1)
            .await?;
        let released = self.backend.release(name, field, lease).await;
        // Ambiguous or not, a failed release may leave the hold on the store, forgotten here:
        // left to its lease, the owner's next acquire would re-enter it (a count one above what
        // it knows, kept alive by each re-entry, and ahead of any queue), so it is given back
        // now, or before the owner's next call on the name.
        if released.is_err()
            && let Err(cleanup) = self.backend.abandon(name, field, keep).await
        {
            tracing::warn!(%cleanup, name, "could not settle a release of unknown outcome; retried before the next attempt or release");
            self.holds.note_debt(name, field, lease);
        }
        released
    }
}

/// An acquire sent and not yet answered. Dropped armed (its caller went away mid-call), it
/// records a debt for the owner (the store may have granted the acquire) and settles it in the
/// background: the owner's count on the store is set back to the holds known here, unless
/// another acquire or release of that owner on that name is under way (then the holds known
/// here are not the store's yet, and the debt waits for the owner's next call, or the lease).
/// A call of the owner starting after the cleanup settles any open debt first, with the same
/// idempotent abandon, so the cleanup never lands after a newer grant; and the store gets the
/// abandon after the acquire it undoes (on Redis it is written behind every pipeline under
/// way).
struct Unanswered<'a, B: LockBackend> {
    /// This acquire counted as under way; ended before the cleanup looks.
    busy: Option<crate::holds::Busy>,
    shared: &'a Arc<LockerShared<B>>,
    name: &'a str,
    field: &'a str,
    lease: std::time::Duration,
    armed: bool,
}

impl<B: LockBackend> Drop for Unanswered<'_, B> {
    fn drop(&mut self) {
        drop(self.busy.take());
        if !self.armed {
            return;
        }
        self.shared
            .holds
            .note_debt(self.name, self.field, self.lease);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // the debt stays for the next call; the lease bounds it
        };
        let shared = self.shared.clone();
        let (name, field) = (self.name.to_owned(), self.field.to_owned());
        runtime.spawn(async move {
            // Another acquire or release of this owner on this name is under way: the holds
            // known here are not the store's yet (a release forgotten but not applied, an
            // acquire applied but not counted), so setting the count to them could take a
            // live hold. The debt is left to the owner's next call (or the lease).
            if shared.holds.is_busy(&name, &field) {
                return;
            }
            let keep = shared.holds.known_holds(&name, &field);
            // On failure the debt stays for the owner's next call; the lease bounds it.
            let _ = shared
                .holds
                .settle_debt(&*shared.backend, &name, &field, keep)
                .await;
        });
    }
}

//! What a locker's clones and its guards share (backend, watchdog, order book), and the store
//! calls that change an owner's count: an acquire attempt, a release, the cleanup after an
//! outcome the store may or may not have applied.
//!
//! Each runs in its turn in the line of its (name, owner field) (see `crate::order`), so the
//! tally read in a turn is the store's count, and the one cleanup rule is: set the owner's count
//! on the store to the tally ([`LockBackend::abandon`] with `keep = stored`), now, or — when that
//! fails — as a debt that the next call in line settles first. A call whose future is dropped in
//! its turn hands its place to a background task that applies the same rule, so the owner's next
//! call on the name comes after it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::contract::{AcquireOutcome, AcquireRequest, Grant, LockBackend, ReleaseOutcome};
use crate::error::Result;
use crate::families::Families;
use crate::hold::Hold;
use crate::local_line::LocalLines;
use crate::order::{OrderBook, Place, Side};
use crate::watchdog::Watchdog;

/// The state behind a [`crate::Locker`] and every guard it handed out.
pub(crate) struct LockerShared<B: LockBackend> {
    pub backend: Arc<B>,
    pub watchdog: Watchdog<B>,
    /// The lines and tallies per (name, owner field); shared with the other side of a
    /// read-write lock.
    pub order: Arc<OrderBook>,
    /// Which tally of each lane this locker keeps.
    pub side: Side,
    /// The lockers of the other primitives made from this locker (see `crate::families`).
    pub families: Families,
    /// Who of this locker's own tasks waits for which name (see `crate::local_line`).
    pub local: LocalLines,
}

impl<B: LockBackend> LockerShared<B> {
    pub fn new(backend: Arc<B>) -> Self {
        Self::on_side(backend, OrderBook::new(), Side::FIRST)
    }

    /// A locker whose calls share the lines of `order`, keeping the `side` tallies.
    pub fn on_side(backend: Arc<B>, order: Arc<OrderBook>, side: Side) -> Self {
        LockerShared {
            watchdog: Watchdog::new(backend.clone()),
            backend,
            order,
            side,
            families: Families::default(),
            local: LocalLines::default(),
        }
    }

    /// The guards of `field` on `name` alive in this process, on this locker's side.
    pub fn live_holds(&self, name: &str, field: &str) -> u32 {
        self.order.live(name, field, self.side)
    }

    /// Waits until every call in the line of (`name`, `field`) issued before this one has
    /// ended, on either side (see [`crate::Locker::flush`]).
    pub async fn settled(&self, name: &str, field: &str) {
        self.order.enter(name, field, self.side).turn().await;
    }

    /// Settles the owner's debt on `name` on this locker's side, if it has one, in its turn:
    /// for a call on the other side of a read-write lock, whose answer depends on this side's
    /// count on the store (a write is refused while the owner reads).
    ///
    /// # Errors
    ///
    /// The cleanup's error when it fails again.
    pub async fn settle_owed(&self, name: &str, field: &str) -> Result<()> {
        if !self.order.owes(name, field, self.side) {
            return Ok(());
        }
        let place = self.order.enter(name, field, self.side);
        place.turn().await;
        let (stored, owes) = place.tally(|tally| (tally.stored, tally.open_debt().is_some()));
        if owes {
            self.settle_debt(&place, stored, stored).await?;
        }
        Ok(())
    }

    /// One acquire, in its turn. The store is first told of an earlier unsettled call (a debt);
    /// after an outcome it may or may not have applied, it is set back to the holds counted.
    /// A grant comes back as a [`PendingGrant`], counted when its guard is made.
    ///
    /// # Errors
    ///
    /// The backend's error; an earlier cleanup's error when it fails again (nothing sent then).
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting for its turn, nothing was sent. Dropped later, the store may have
    /// granted the acquire with nobody to know: a debt is noted and a background task, taking
    /// this call's place in line, sets the owner's count back to the holds counted.
    pub async fn attempt(self: &Arc<Self>, request: AcquireRequest<'_>) -> Result<Attempted<B>> {
        self.attempt_in_line(request, None).await
    }

    /// As [`Self::attempt`], for the first attempt of a call that may wait until `deadline`:
    /// once its turn came (so after a release of the same owner put in line before it, such
    /// as a dropped guard's), it lets a waiter of this locker that a release just woke try
    /// first (see `crate::local_line`).
    ///
    /// # Errors
    ///
    /// As [`Self::attempt`].
    ///
    /// # Cancel safety
    ///
    /// As [`Self::attempt`]; dropped while holding back, nothing was sent.
    pub async fn first_attempt(
        self: &Arc<Self>,
        request: AcquireRequest<'_>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Attempted<B>> {
        self.attempt_in_line(request, Some(deadline)).await
    }

    /// [`Self::attempt`], held back after its turn as [`Self::first_attempt`] says when
    /// `hold_back` has the call's deadline.
    async fn attempt_in_line(
        self: &Arc<Self>,
        mut request: AcquireRequest<'_>,
        hold_back: Option<Option<tokio::time::Instant>>,
    ) -> Result<Attempted<B>> {
        let place = self
            .order
            .enter(request.name, request.owner_field, self.side);
        place.turn().await;
        if let Some(deadline) = hold_back {
            self.local.behind_handoff(request.name, deadline).await;
        }
        let call = Unsettled::new(self.clone(), place, request.lease);
        let owes = call.place().tally(|tally| {
            request.known_holds = tally.stored;
            tally.open_debt().is_some()
        });
        let stored = request.known_holds;
        if owes && let Err(error) = self.settle_debt(call.place(), stored, stored).await {
            call.done();
            return Err(error);
        }
        match self.backend.try_acquire(request).await {
            Ok(AcquireOutcome::Acquired(grant)) => {
                Ok(Attempted::Won(PendingGrant { grant, claim: call }))
            }
            Ok(AcquireOutcome::Held { ttl }) => {
                call.done();
                Ok(Attempted::Held { ttl })
            }
            Ok(AcquireOutcome::Contended { retry_after }) => {
                call.done();
                Ok(Attempted::Contended { retry_after })
            }
            Err(error) => {
                if error.is_ambiguous() {
                    self.set_count_to_tally(call.place(), request.lease).await;
                }
                call.done();
                Err(error)
            }
        }
    }

    /// Puts the release of `hold` in line at once, and forgets its guard in the same step (so
    /// nothing sees the guard gone before its release is in line). The owner's next call on the
    /// name comes after it, whether the returned release is awaited, spawned or dropped.
    pub fn issue_release(self: &Arc<Self>, hold: Arc<Hold>) -> Release<B> {
        let place = self
            .order
            .enter_with(hold.name(), hold.field(), self.side, |tally| {
                tally.live = tally.live.saturating_sub(1);
            });
        Release {
            shared: self.clone(),
            hold,
            place: Some(place),
            respawned: false,
        }
    }

    /// Takes the owner out of the lock's queue (a fair lock, a writer-preferring writer) when
    /// its wait ends without the lock: in line at once, sent in its turn by the returned
    /// future, so it never lands after the owner's next attempt on the name. A failure is only
    /// logged: the queue drops the entry on its own after its timeout.
    pub fn issue_leave(
        self: &Arc<Self>,
        name: &str,
        field: &str,
    ) -> impl Future<Output = ()> + Send + 'static {
        let place = self.order.enter(name, field, self.side);
        let shared = self.clone();
        async move {
            place.turn().await;
            if let Err(error) = shared
                .backend
                .leave_queue(place.name(), place.field())
                .await
            {
                tracing::debug!(%error, name = place.name(), "could not leave the queue; it drops the entry on its own");
            }
        }
    }

    /// Gives back one hold of `field` on `name` that no guard here stands for
    /// ([`crate::Locker::unlock`]), in its turn, and brings the tally down to what the answer
    /// says is left. When this process counts holds of the owner on the name, an outcome of
    /// unknown effect (an error, a composite's partial release, a dropped call) is followed by
    /// the cleanup rule, as a guard's release is; when it counts none, nothing here knows what
    /// the store should keep, and the caller has the answer.
    ///
    /// # Errors
    ///
    /// The backend's error; an earlier cleanup's error when it fails again (nothing sent then).
    pub async fn release_unguarded(
        self: &Arc<Self>,
        name: &str,
        field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let place = self.order.enter(name, field, self.side);
        place.turn().await;
        let (stored, owes) = place.tally(|tally| (tally.stored, tally.open_debt().is_some()));
        if owes {
            self.settle_debt(&place, stored, stored).await?;
        }
        if stored == 0 {
            let released = self.backend.release(name, field, lease).await;
            // Before the owner's next call may go (`place` dropped): it is held back too.
            self.released(name, &released);
            return released;
        }
        let call = Unsettled::new(self.clone(), place, lease);
        let released = self.backend.release(name, field, lease).await;
        self.released(name, &released);
        match released {
            Ok(ReleaseOutcome::Released | ReleaseOutcome::NotHeld) => {
                call.done_with(|tally| tally.lower_to(0, lease));
            }
            Ok(ReleaseOutcome::StillHeld { hold_count }) => {
                call.done_with(|tally| tally.lower_to(hold_count, lease));
            }
            _ => {
                self.set_count_to_tally(call.place(), lease).await;
                call.done();
            }
        }
        released
    }

    /// The release of a guard's hold, in its turn (see [`Release::run`]).
    async fn release_in_turn(
        self: &Arc<Self>,
        hold: &Hold,
        place: Place,
    ) -> Result<ReleaseOutcome> {
        let (name, field, lease) = (hold.name(), hold.field(), hold.lease());
        // From here on the hold counts as given back: the store ends with one hold fewer, by
        // this release, by the cleanup after it, or by a debt the next call settles.
        let (keep, owes) =
            place.tally(|tally| (tally.give_back(lease), tally.open_debt().is_some()));
        let call = Unsettled::new(self.clone(), place, lease);
        // An earlier debt is settled with this hold still on the store; it goes next.
        if owes && let Err(error) = self.settle_debt(call.place(), keep + 1, keep).await {
            call.done();
            return Err(error);
        }
        let released = self.backend.release(name, field, lease).await;
        // A failed release may leave the hold on the store (definite errors too: nothing was
        // applied), and a composite's partial one leaves it on the nodes that failed: left to
        // its lease, the owner's next acquire would re-enter it (a count above what it knows,
        // kept alive by each re-entry, and ahead of any queue). So the count is set now.
        if matches!(released, Err(_) | Ok(ReleaseOutcome::PartlyReleased { .. })) {
            self.set_count_to_tally(call.place(), lease).await;
        }
        // Before the owner's next call may go (`call.done()`): it is held back too.
        self.released(name, &released);
        call.done();
        released
    }

    /// A release of `name` answered `released`: when it freed the lock, the locker's own
    /// waiters on it get the first try (see `crate::local_line`). Called by every release, a
    /// guard's or [`Self::release_unguarded`], before its place in line ends, so that the
    /// owner's next call is held back as well.
    fn released(&self, name: &str, released: &Result<ReleaseOutcome>) {
        if matches!(released, Ok(ReleaseOutcome::Released)) {
            self.local.released(name);
        }
    }

    /// Settles an open debt (an earlier call whose cleanup failed): sets the owner's count to
    /// `keep`. The caller has seen the debt open in its turn (`Tally::open_debt`).
    ///
    /// # Errors
    ///
    /// The cleanup's error when it fails again: the debt stays for the next call (its lease
    /// bounds it in any case), and the caller must not go on, since an acquire or release on
    /// top of an unknown count would leave (or report) the wrong count.
    ///
    /// `stored` is the tally's count `keep` was worked out from: a debt is cleared only while
    /// the count is still that, since a guard dropped outside a runtime gives its hold back
    /// (and notes a debt for it) out of turn, and that debt is not settled by this cleanup.
    async fn settle_debt(&self, place: &Place, keep: u32, stored: u32) -> Result<()> {
        match self
            .backend
            .abandon(place.name(), place.field(), keep)
            .await
        {
            Ok(()) => {
                place.tally(|tally| {
                    if tally.stored == stored {
                        tally.debt = None;
                    }
                });
                Ok(())
            }
            Err(error) => {
                tracing::warn!(%error, name = place.name(), "could not yet undo an earlier call of unknown outcome");
                place.tally(crate::order::Tally::rearm_debt);
                Err(error)
            }
        }
    }

    /// After a call of unknown outcome: sets the owner's count on the store to the holds
    /// counted, or notes a debt (for at most `lease`) when that fails too.
    async fn set_count_to_tally(&self, place: &Place, lease: Duration) {
        let keep = place.tally(|tally| tally.stored);
        if let Err(cleanup) = self
            .backend
            .abandon(place.name(), place.field(), keep)
            .await
        {
            tracing::warn!(%cleanup, name = place.name(), "could not undo a call of unknown outcome; retried before the owner's next call on the name");
            place.tally(|tally| tally.note_debt(lease));
        }
    }
}

/// What one acquire attempt came to.
pub(crate) enum Attempted<B: LockBackend> {
    /// Won: to be counted by making its guard.
    Won(PendingGrant<B>),
    /// Held by another owner ([`AcquireOutcome::Held`]); nothing to undo.
    Held { ttl: Option<Duration> },
    /// No single holder ([`AcquireOutcome::Contended`]); nothing to undo.
    Contended { retry_after: Duration },
}

/// A grant whose place in line is still held: nothing else of the owner on the name runs until
/// it is counted ([`PendingGrant::count`]). Dropped uncounted, it is taken back as an acquire
/// of unknown outcome would be.
pub(crate) struct PendingGrant<B: LockBackend> {
    pub grant: Grant,
    claim: Unsettled<B>,
}

impl<B: LockBackend> PendingGrant<B> {
    /// Counts the grant as a hold on the store and a live guard, and gives the place up.
    pub fn count(self) -> Grant {
        self.claim.done_with(|tally| {
            tally.stored += 1;
            tally.live += 1;
        });
        self.grant
    }
}

/// A call in its turn whose effect on the store is not settled yet. Dropped before
/// [`Unsettled::done`] — its future went away mid-call, or a grant was never counted — it notes a
/// debt (the store may hold more than the tally) and moves its place into a background task
/// that sets the owner's count to the tally: the owner's next call on the name comes after it.
struct Unsettled<B: LockBackend> {
    shared: Arc<LockerShared<B>>,
    place: Option<Place>,
    /// The lease an unseen grant could have set: how long the debt lasts at most.
    lease: Duration,
}

impl<B: LockBackend> Unsettled<B> {
    fn new(shared: Arc<LockerShared<B>>, place: Place, lease: Duration) -> Self {
        Unsettled {
            shared,
            place: Some(place),
            lease,
        }
    }

    fn place(&self) -> &Place {
        self.place.as_ref().expect("held until done or dropped")
    }

    /// The call ended with its effect known (or its cleanup done or owed): the place goes to
    /// the next call.
    fn done(mut self) {
        drop(self.place.take());
    }

    /// As [`Self::done`], changing the tally in the same step.
    fn done_with(mut self, change: impl FnOnce(&mut crate::order::Tally)) {
        if let Some(place) = self.place.take() {
            place.leave_with(change);
        }
    }
}

impl<B: LockBackend> Drop for Unsettled<B> {
    fn drop(&mut self) {
        let Some(place) = self.place.take() else {
            return;
        };
        place.tally(|tally| tally.note_debt(self.lease));
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // the debt stays for the owner's next call; the lease bounds it
        };
        let shared = self.shared.clone();
        runtime.spawn(async move {
            let keep = place.tally(|tally| tally.stored);
            // Just noted, so open. On failure it stays for the owner's next call; the lease
            // bounds it.
            let _ = shared.settle_debt(&place, keep, keep).await;
        });
    }
}

/// The release of a guard's hold, already in line ([`LockerShared::issue_release`]).
///
/// Dropped before its turn (its caller went away, or the task running it was dropped), it
/// goes on in a background task; dropped in its turn, its cleanup does. Without a runtime to
/// go on in, the hold is left as a debt: the owner's next call on the name takes it back first,
/// and its lease ends it otherwise.
pub(crate) struct Release<B: LockBackend> {
    shared: Arc<LockerShared<B>>,
    hold: Arc<Hold>,
    place: Option<Place>,
    /// Already handed to a background task once: not again (a runtime shutting down drops the
    /// tasks it is given).
    respawned: bool,
}

impl<B: LockBackend> Release<B> {
    /// Waits for the turn, then releases (see the module's rule for what follows a failure).
    ///
    /// # Errors
    ///
    /// The backend's error; an earlier cleanup's error when it fails again (the release was
    /// not sent then, and its hold is left to the debt).
    ///
    /// # Cancel safety
    ///
    /// Dropped at any point, the release still happens (see [`Release`]).
    pub async fn run(mut self) -> Result<ReleaseOutcome> {
        self.place
            .as_ref()
            .expect("taken only here or in Drop")
            .turn()
            .await;
        let place = self.place.take().expect("taken only here or in Drop");
        let (shared, hold) = (self.shared.clone(), self.hold.clone());
        shared.release_in_turn(&hold, place).await
    }
}

impl<B: LockBackend> Drop for Release<B> {
    fn drop(&mut self) {
        let Some(place) = self.place.take() else {
            return;
        };
        if !self.respawned
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let release = Release {
                shared: self.shared.clone(),
                hold: self.hold.clone(),
                place: Some(place),
                respawned: true,
            };
            runtime.spawn(async move {
                if let Err(error) = release.run().await {
                    tracing::warn!(%error, "background release failed; retried before the owner's next call on the name, else the lease ends it");
                }
            });
            return;
        }
        // Nothing can send it: the hold is owed to the store, and the next call in line (which
        // waits for this place) takes it back first.
        let lease = self.hold.lease();
        place.tally(|tally| {
            tally.give_back(lease);
            tally.note_debt(lease);
        });
    }
}

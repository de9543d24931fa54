//! The user API: `lock`, `try_lock`, `lock_with`, and the waiter behind them.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, LockState, ReleaseOutcome,
};
use crate::error::Result;
use crate::guard::{GuardParts, LockGuard};
use crate::notify::ReleaseWatch;
use crate::options::{Lease, LockOptions, Wait};
use crate::owner::Owner;
use crate::watchdog::{LeaseStatus, Watchdog, WatchedLease};

/// How long a waiter sleeps at most when the holder's lock has no TTL (a key without expiry):
/// a release notification still wakes it earlier.
const RECHECK_WITHOUT_TTL: Duration = Duration::from_secs(1);

pub(crate) struct LockerInner<B: LockBackend> {
    pub backend: Arc<B>,
    pub watchdog: Watchdog<B>,
    /// Live guards per (name, owner field) in this process: what we know we hold. After an acquire
    /// whose outcome is unknown, the store is told to keep exactly this many holds.
    /// Keyed by name, then owner field, so lookups need no allocation.
    holds: Mutex<HashMap<String, HashMap<String, u32>>>,
    /// (name, owner field) pairs whose count on the store may be higher than the holds above:
    /// an acquire of unknown outcome could not be undone (the cleanup failed too). The next
    /// attempt or release of that pair first sets the count right with `abandon`.
    /// Each debt carries the end of the lease its unseen grant could have set: past it, with no
    /// hold of that owner left here, the store has expired the grant by itself and the debt is
    /// dropped (so a debt that nobody settles does not keep the hot path on the slow branch).
    /// While holds of that owner live, their renewals keep the unseen count alive too, so the
    /// end is pushed to one lease after the last of them ends (see `forget_hold`).
    debts: Mutex<HashMap<String, HashMap<String, Debt>>>,
    /// Whether `debts` may be non-empty, so the hot path skips its lock.
    any_debt: std::sync::atomic::AtomicBool,
}

/// An unsettled cleanup of one (name, owner field).
#[derive(Clone, Copy, Debug)]
struct Debt {
    /// When the store has surely expired the unseen grant, if no hold of the owner outlives it.
    lapses: Instant,
    /// The lease the unseen grant (or a later hold's last renewal) may have set.
    lease: Duration,
}

impl<B: LockBackend> LockerInner<B> {
    fn note_hold(&self, name: &str, field: &str) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        let owners = match holds.get_mut(name) {
            Some(owners) => owners,
            None => holds.entry(name.to_owned()).or_default(),
        };
        match owners.get_mut(field) {
            Some(count) => *count += 1,
            None => {
                owners.insert(field.to_owned(), 1);
            }
        }
    }

    /// Forgets one hold of lease `lease`; returns the holds of that owner on that name still
    /// known.
    ///
    /// When that was the owner's last hold and a debt is open for it, the debt's lapse is pushed
    /// to one lease from now: the hold's renewals kept the unseen count alive on the store until
    /// now, so it only expires a lease after this (or goes when the release settles the debt).
    /// The debts are locked before the holds, as `prune_lapsed_debts` does, so no prune sees the
    /// hold gone before the lapse is pushed.
    pub(crate) fn forget_hold(&self, name: &str, field: &str, lease: Duration) -> u32 {
        if !self.any_debt.load(std::sync::atomic::Ordering::Acquire) {
            return self.forget_known_hold(name, field);
        }
        let mut debts = self.debts.lock().unwrap_or_else(|e| e.into_inner());
        let left = self.forget_known_hold(name, field);
        if left == 0
            && let Some(debt) = debts.get_mut(name).and_then(|owners| owners.get_mut(field))
        {
            let lease = debt.lease.max(lease);
            debt.lease = lease;
            debt.lapses = debt.lapses.max(Instant::now() + lease);
        }
        left
    }

    fn forget_known_hold(&self, name: &str, field: &str) -> u32 {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        let Some(owners) = holds.get_mut(name) else {
            return 0;
        };
        let mut left = 0;
        if let Some(count) = owners.get_mut(field) {
            *count -= 1;
            left = *count;
            if left == 0 {
                owners.remove(field);
            }
        }
        if owners.is_empty() {
            holds.remove(name);
        }
        left
    }

    fn note_debt(&self, name: &str, field: &str, lease: Duration) {
        let mut debts = self.debts.lock().unwrap_or_else(|e| e.into_inner());
        let lapses = Instant::now() + lease;
        let debt = debts
            .entry(name.to_owned())
            .or_default()
            .entry(field.to_owned())
            .or_insert(Debt { lapses, lease });
        debt.lapses = debt.lapses.max(lapses);
        debt.lease = debt.lease.max(lease);
        self.any_debt
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn has_debt(&self, name: &str, field: &str) -> bool {
        if !self.any_debt.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let mut debts = self.debts.lock().unwrap_or_else(|e| e.into_inner());
        self.prune_lapsed_debts(&mut debts);
        debts
            .get(name)
            .is_some_and(|owners| owners.contains_key(field))
    }

    /// Drops the debts whose grant has expired on the store by now: past the lease, and no hold
    /// of that owner on that name left in this process (a live hold is renewed by the watchdog,
    /// which keeps an extra count alive with it; its end pushes the lapse, see `forget_hold`).
    fn prune_lapsed_debts(&self, debts: &mut HashMap<String, HashMap<String, Debt>>) {
        let now = Instant::now();
        debts.retain(|name, owners| {
            owners.retain(|field, debt| debt.lapses > now || self.known_holds(name, field) > 0);
            !owners.is_empty()
        });
        if debts.is_empty() {
            self.any_debt
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }

    fn clear_debt(&self, name: &str, field: &str) {
        let mut debts = self.debts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(owners) = debts.get_mut(name) {
            owners.remove(field);
            if owners.is_empty() {
                debts.remove(name);
            }
        }
        if debts.is_empty() {
            self.any_debt
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }

    /// Sets the owner's count on the store to `keep` if an earlier cleanup failed.
    ///
    /// # Errors
    ///
    /// The cleanup's error when it fails again: the debt stays for the next call (the lease
    /// bounds it in any case), and the caller must not go on, since an acquire or release on
    /// top of an unknown count would leave (or report) the wrong count.
    pub(crate) async fn settle_debt(&self, name: &str, field: &str, keep: u32) -> Result<()> {
        if !self.has_debt(name, field) {
            return Ok(());
        }
        match self.backend.abandon(name, field, keep).await {
            Ok(()) => {
                self.clear_debt(name, field);
                Ok(())
            }
            Err(error) => {
                tracing::warn!(%error, name, "could not yet undo an earlier call of unknown outcome");
                Err(error)
            }
        }
    }

    /// Gives back one hold the caller has already forgotten locally (`forget_hold`). After an
    /// outcome the store may or may not have applied, the owner's count is set to the holds
    /// this process still knows of (or that is left as a debt for the next call), so an unseen
    /// release can neither leave an extra hold nor be applied twice.
    pub(crate) async fn release_hold(
        &self,
        name: &str,
        field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let keep = self.known_holds(name, field);
        self.release_keeping(name, field, lease, keep).await
    }

    /// As [`Self::release_hold`], with the holds still known already read (`keep`).
    pub(crate) async fn release_keeping(
        &self,
        name: &str,
        field: &str,
        lease: Duration,
        keep: u32,
    ) -> Result<ReleaseOutcome> {
        // On failure the hold is already forgotten locally, so the debt, when settled, lowers
        // the count to what is still known: this release happens then (or when the lease ends).
        self.settle_debt(name, field, keep + 1).await?;
        let released = self.backend.release(name, field, lease).await;
        if let Err(error) = &released
            && error.is_ambiguous()
            && let Err(cleanup) = self.backend.abandon(name, field, keep).await
        {
            tracing::warn!(%cleanup, name, "could not settle a release of unknown outcome; retried before the next attempt or release");
            self.note_debt(name, field, lease);
        }
        released
    }

    pub(crate) fn known_holds(&self, name: &str, field: &str) -> u32 {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds
            .get(name)
            .and_then(|owners| owners.get(field))
            .copied()
            .unwrap_or(0)
    }
}

/// Takes locks from one backend: the entry point of the API.
///
/// Cheap to clone (all clones share one watchdog and one set of notification subscriptions).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use lock_core::{LockOptions, Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::Error> {
/// let locker = Locker::new(MemoryBackend::new());
///
/// // Wait as long as it takes; the watchdog keeps the lock while the guard lives.
/// let guard = locker.lock("invoice:7").await?;
///
/// // Another owner does not wait at all...
/// let other = lock_core::Owner::new();
/// let busy = locker.lock_with("invoice:7", &LockOptions::new().no_wait().owner(other)).await?;
/// assert!(busy.is_none());
/// drop(guard);
///
/// // ...or waits at most 2 s for a lock that expires on its own after 10 s.
/// let options = LockOptions::new().wait(Duration::from_secs(2)).lease(Duration::from_secs(10));
/// let guard = locker.lock_with("invoice:7", &options.owner(other)).await?;
/// assert!(guard.is_some());
/// # Ok(())
/// # }
/// ```
pub struct Locker<B: LockBackend> {
    inner: Arc<LockerInner<B>>,
}

impl<B: LockBackend> Clone for Locker<B> {
    fn clone(&self) -> Self {
        Locker {
            inner: self.inner.clone(),
        }
    }
}

impl<B: LockBackend> std::fmt::Debug for Locker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("client_id", &self.inner.backend.client_id())
            .finish_non_exhaustive()
    }
}

/// Hands a consumed release notification to the next local waiter when a woken waiter goes away
/// (cancelled or failed) before using it.
struct Waiting {
    watch: ReleaseWatch,
    woken: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.woken {
            self.watch.pass_on();
        }
    }
}

impl<B: LockBackend> Locker<B> {
    /// A locker over `backend`.
    #[must_use]
    pub fn new(backend: B) -> Self {
        Self::from_arc(Arc::new(backend))
    }

    /// A locker over a shared backend.
    #[must_use]
    pub fn from_arc(backend: Arc<B>) -> Self {
        Locker {
            inner: Arc::new(LockerInner {
                watchdog: Watchdog::new(backend.clone()),
                backend,
                holds: Mutex::new(HashMap::new()),
                debts: Mutex::new(HashMap::new()),
                any_debt: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// The backend.
    #[must_use]
    pub fn backend(&self) -> &B {
        &self.inner.backend
    }

    /// Takes the lock, waiting as long as it takes, in watchdog mode (30 s lease renewed every
    /// 10 s), owned by the current task: locking it again from the same task re-enters.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; backend errors, returned at once (there is
    /// no deadline to retry them within). Waiting is never an error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits leaves nothing behind (its notification registration is
    /// dropped, a release it consumed is passed to the next waiter). Dropping it while an acquire
    /// is in flight may leave a hold that the store applied; no watchdog renews it, so it expires
    /// within its lease.
    pub async fn lock(&self, name: &str) -> Result<LockGuard<B>> {
        let guard = self.lock_with(name, &LockOptions::new()).await?;
        Ok(guard.expect("waiting forever only ends with the lock or an error"))
    }

    /// One attempt, no waiting: `Ok(None)` when someone else holds the lock.
    ///
    /// # Errors
    ///
    /// As [`Locker::lock`].
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`] while the attempt is in flight.
    pub async fn try_lock(&self, name: &str) -> Result<Option<LockGuard<B>>> {
        self.lock_with(name, &LockOptions::new().no_wait()).await
    }

    /// Takes the lock with explicit options: wait deadline, fixed lease or watchdog, owner,
    /// fencing token. Returns `Ok(None)` when the wait ends without the lock.
    ///
    /// Waiting follows one rule: register for release notifications, then try, then wait for a
    /// notification, a timer capped by the holder's remaining lease, or the deadline, whichever
    /// comes first; repeat. The first attempt is made before registering, so an uncontended lock
    /// costs one round trip. A backend that reports [`AcquireOutcome::Contended`] (a composite
    /// whose nodes split) is retried after the delay it asks for.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] and [`crate::Error::InvalidOptions`] before any I/O, and
    /// [`crate::Error::NotReentrant`] when the backend is not reentrant and this owner already
    /// holds the lock; backend errors. With a wait deadline, a retryable error ([`crate::Error::is_retryable`]) is
    /// retried after about 50 ms until the deadline, and the last one is returned when it passes;
    /// without one (`no_wait`, `wait_forever`), errors are returned at once.
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn lock_with(
        &self,
        name: &str,
        options: &LockOptions,
    ) -> Result<Option<LockGuard<B>>> {
        self.inner.backend.check_name(name)?;
        options.validate()?;
        let owner = options
            .explicit_owner()
            .copied()
            .unwrap_or_else(Owner::current);
        let field = owner.field(self.inner.backend.client_id());
        if !self.inner.backend.reentrant() && self.inner.known_holds(name, &field) > 0 {
            return Err(crate::Error::NotReentrant {
                name: name.to_owned(),
            });
        }
        let deadline = match options.wait_policy() {
            Wait::Upto(wait) => Some(Instant::now() + wait),
            Wait::No | Wait::Forever => None,
        };
        let no_wait = options.wait_policy() == Wait::No;
        let lease = options.lease_mode();
        let request = AcquireRequest {
            name,
            owner: &field,
            lease: lease.duration(),
            fencing: options.wants_fencing(),
            known_holds: 0, // read by `attempt`
        };

        // Fast path: an uncontended lock costs one round trip and no registration.
        let sent_at = Instant::now();
        let first = self.attempt(request).await;
        let (mut sleep_until, first_error) =
            match next_step(first, Instant::now(), deadline, no_wait)? {
                Step::Take(grant) => {
                    return Ok(Some(
                        self.make_guard(name, owner, field, lease, grant, sent_at),
                    ));
                }
                Step::GiveUp => return Ok(None),
                // The lock may be free again by now: register, then try again at once.
                Step::OnRelease { .. } => (None, None),
                Step::RetryAt { at, error } => (Some(at), error),
            };
        let register = self.inner.backend.watch_releases(name);
        let watch = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, register).await {
                Ok(watch) => watch?,
                // Out of time while registering: the first attempt's answer stands.
                Err(_) => return first_error.map_or(Ok(None), Err),
            },
            None => register.await?,
        };
        let mut waiting = Waiting {
            watch,
            woken: false,
        };
        loop {
            if let Some(at) = sleep_until.take() {
                tokio::time::sleep_until(at).await;
            }
            // Arm the notification before the attempt, so a release between the attempt and the
            // wait still wakes the wait.
            let mut notified = pin!(waiting.watch.notified());
            if let Some(notified) = notified.as_mut().as_pin_mut() {
                notified.enable();
            }
            let sent_at = Instant::now();
            let outcome = self.attempt(request).await;
            waiting.woken = false;
            let now = Instant::now();
            let ttl = match next_step(outcome, now, deadline, false)? {
                Step::Take(grant) => {
                    return Ok(Some(
                        self.make_guard(name, owner, field, lease, grant, sent_at),
                    ));
                }
                Step::GiveUp => return Ok(None),
                Step::RetryAt { at, .. } => {
                    sleep_until = Some(at);
                    continue;
                }
                Step::OnRelease { ttl } => ttl,
            };
            // A foreign holder may have set any PTTL; keep the instant arithmetic in range.
            let mut sleep_for = ttl
                .unwrap_or(RECHECK_WITHOUT_TTL)
                .min(crate::options::MAX_DURATION);
            if let Some(every) = waiting.watch.poll_interval() {
                sleep_for = sleep_for.min(jittered(every));
            }
            let mut wake_at = now + sleep_for.max(Duration::from_millis(1));
            if let Some(deadline) = deadline {
                wake_at = wake_at.min(deadline);
            }
            match notified.as_pin_mut() {
                Some(notified) => {
                    tokio::select! {
                        () = notified => waiting.woken = true,
                        () = tokio::time::sleep_until(wake_at) => {}
                    }
                }
                None => tokio::time::sleep_until(wake_at).await,
            }
        }
    }

    /// One acquire; after an outcome the store may or may not have applied, it tells the store to
    /// keep exactly the holds this process knows of, so an unseen grant does not linger.
    ///
    /// The known holds are read afresh for every attempt: another task of the same owner may
    /// have taken or given back a hold while this one waited.
    async fn attempt(&self, mut request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        request.known_holds = self.inner.known_holds(request.name, request.owner);
        let inner = &self.inner;
        inner
            .settle_debt(request.name, request.owner, request.known_holds)
            .await?;
        match inner.backend.try_acquire(request).await {
            Err(error) if error.is_ambiguous() => {
                let keep = request.known_holds;
                if let Err(cleanup) = inner
                    .backend
                    .abandon(request.name, request.owner, keep)
                    .await
                {
                    tracing::warn!(%cleanup, name = request.name, "could not undo an acquire of unknown outcome; retried before the next attempt or release");
                    inner.note_debt(request.name, request.owner, request.lease);
                }
                Err(error)
            }
            other => other,
        }
    }

    fn make_guard(
        &self,
        name: &str,
        owner: Owner,
        field: String,
        lease: Lease,
        grant: Grant,
        sent_at: Instant,
    ) -> LockGuard<B> {
        let valid_until = sent_at
            + lease
                .duration()
                .saturating_sub(self.inner.backend.clock_drift(lease.duration()));
        let (status, _) = watch::channel(LeaseStatus {
            valid_until,
            lost: None,
        });
        let watchdog_id = match lease {
            Lease::Watchdog { lease, max_hold } => Some(self.inner.watchdog.register(
                WatchedLease {
                    name: Arc::from(name),
                    owner: Arc::from(field.as_str()),
                    lease,
                    valid_until,
                    stop_at: max_hold.map(|max_hold| sent_at + max_hold),
                    status: status.clone(),
                },
                sent_at,
            )),
            Lease::Fixed(_) => None,
        };
        self.inner.note_hold(name, &field);
        LockGuard::new(GuardParts {
            locker: self.inner.clone(),
            name: name.to_owned(),
            owner,
            field,
            lease: lease.duration(),
            hold_count: grant.hold_count,
            fencing_token: grant.fencing_token,
            status,
            watchdog_id,
        })
    }

    /// Gives back one hold of `owner` without a guard (for example for a hold taken by a process
    /// that knew the owner's holder id). Returns [`ReleaseOutcome::NotHeld`] and changes nothing
    /// when `owner` does not hold the lock. When holds remain, the lease is reset to the default
    /// 30 s (as Redisson's `unlock` does), since the original lease is not known here; prefer
    /// [`LockGuard::release`], which keeps the guard's lease.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; backend errors.
    pub async fn unlock(&self, name: &str, owner: Owner) -> Result<ReleaseOutcome> {
        self.inner.backend.check_name(name)?;
        let field = owner.field(self.inner.backend.client_id());
        self.inner
            .backend
            .release(name, &field, crate::options::DEFAULT_WATCHDOG_LEASE)
            .await
    }

    /// Deletes the lock whoever holds it and wakes its waiters. Returns whether it was held.
    /// Holders find out through [`LockGuard::lost`] at their next renewal.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; backend errors.
    pub async fn force_unlock(&self, name: &str) -> Result<bool> {
        self.inner.backend.check_name(name)?;
        self.inner.backend.force_release(name).await
    }

    /// Reads who holds the lock, how many times, and for how long still.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; backend errors.
    pub async fn state(&self, name: &str) -> Result<LockState> {
        self.inner.backend.check_name(name)?;
        self.inner.backend.inspect(name).await
    }

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    ///
    /// As [`Locker::state`].
    pub async fn is_locked(&self, name: &str) -> Result<bool> {
        Ok(self.state(name).await?.is_locked())
    }
}

/// What the waiter does after one attempt.
enum Step {
    /// The lock is ours.
    Take(Grant),
    /// The wait is over without the lock.
    GiveUp,
    /// Held by someone: wait for a release notification, at most this long (the holder's TTL).
    OnRelease { ttl: Option<Duration> },
    /// Try again at this instant, not before (no clear holder, or the transient error kept
    /// here, which is the answer if the wait ends first).
    RetryAt {
        at: Instant,
        error: Option<crate::Error>,
    },
}

/// Base delay before retrying after a retryable error, while a wait deadline allows.
const ERROR_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Decides the next step after an attempt made at `now`.
///
/// Errors end the wait, except retryable ones while a wait deadline is still ahead: those are
/// retried after a jittered delay (a composite whose node blipped, a reconnecting server), and
/// the last one is returned if the deadline passes. Without a deadline (`lock()`), an error is
/// returned at once, so a dead store cannot hang the caller.
fn next_step(
    outcome: Result<AcquireOutcome>,
    now: Instant,
    deadline: Option<Instant>,
    no_wait: bool,
) -> Result<Step> {
    let out_of_time = no_wait || deadline.is_some_and(|deadline| now >= deadline);
    let retry_at = |after: Duration, error: Option<crate::Error>| {
        let at = now + after.min(crate::options::MAX_DURATION);
        Step::RetryAt {
            at: deadline.map_or(at, |deadline| at.min(deadline)),
            error,
        }
    };
    match outcome {
        Ok(AcquireOutcome::Acquired(grant)) => Ok(Step::Take(grant)),
        Ok(_) if out_of_time => Ok(Step::GiveUp),
        Ok(AcquireOutcome::Held { ttl }) => Ok(Step::OnRelease { ttl }),
        Ok(AcquireOutcome::Contended { retry_after }) => Ok(retry_at(retry_after, None)),
        Err(error) if error.is_retryable() && deadline.is_some() && !out_of_time => {
            tracing::debug!(%error, "acquire failed; retrying within the wait deadline");
            Ok(retry_at(jittered(ERROR_RETRY_DELAY), Some(error)))
        }
        Err(error) => Err(error),
    }
}

/// `every` plus or minus up to a quarter, so pollers of one lock spread out.
fn jittered(every: Duration) -> Duration {
    let quarter = every / 4;
    let offset = rand::rng().random_range(Duration::ZERO..=quarter * 2);
    every - quarter + offset
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LeaseLoss, MemoryBackend};
    use std::sync::atomic::Ordering;

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_forgets_released_and_dropped_guards() {
        let locker = Locker::new(MemoryBackend::new());
        let guard = locker.lock("a").await.unwrap();
        let fixed = locker
            .lock_with("b", &LockOptions::new().lease(Duration::from_secs(5)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            locker.inner.watchdog.registered(),
            1,
            "fixed leases are not watched"
        );
        assert!(guard.release().await.unwrap().was_held());
        assert_eq!(locker.inner.watchdog.registered(), 0);
        let dropped = locker.lock("c").await.unwrap();
        drop(dropped);
        assert_eq!(locker.inner.watchdog.registered(), 0);
        drop(fixed);
        tokio::task::yield_now().await;
        assert!(locker.inner.holds.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn max_hold_caps_the_total_hold_time() {
        let locker = Locker::new(MemoryBackend::new());
        let options = LockOptions::new()
            .watchdog_lease(Duration::from_millis(300))
            .max_hold(Duration::from_secs(1));
        let started = Instant::now();
        let guard = locker.lock_with("capped", &options).await.unwrap().unwrap();
        assert_eq!(guard.lost().await, LeaseLoss::Expired);
        let held_for = started.elapsed();
        assert!(
            held_for >= Duration::from_millis(990) && held_for <= Duration::from_millis(1100),
            "held for {held_for:?}"
        );
        assert!(!locker.is_locked("capped").await.unwrap());
        // The watchdog drops the entry at its next wake-up, within one renewal period.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(locker.inner.watchdog.registered(), 0);
    }

    #[test]
    fn the_watchdog_restarts_after_its_runtime_shut_down() {
        let locker = Locker::new(MemoryBackend::new());
        let first = tokio::runtime::Runtime::new().unwrap();
        first.block_on(async {
            let guard = locker.lock("first").await.unwrap();
            std::mem::forget(guard); // keep the entry, and so the renewal task, alive
        });
        drop(first); // drops the renewal task mid-flight
        let second = tokio::runtime::Runtime::new().unwrap();
        second.block_on(async {
            let options = LockOptions::new().watchdog_lease(Duration::from_millis(300));
            let guard = locker.lock_with("second", &options).await.unwrap().unwrap();
            tokio::time::sleep(Duration::from_millis(900)).await;
            assert!(!guard.is_lost(), "renewed by a new renewal task");
        });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn short_watchdog_holds_do_not_wake_the_renewal_task_each_time() {
        let locker = Locker::new(MemoryBackend::new());
        for _ in 0..200 {
            let guard = locker.lock("short").await.unwrap();
            assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
            // Time for the task to run between holds, as a network round trip gives it.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let plans = locker.inner.watchdog.plans();
        assert!(
            plans <= 2,
            "the renewal task looked {plans} times for 200 short holds"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_keep_a_watchdog_lease_for_long() {
        let locker = Locker::new(MemoryBackend::new());
        let options = LockOptions::new().watchdog_lease(Duration::from_millis(300));
        let guard = locker.lock_with("long", &options).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!guard.is_lost());
        assert!(guard.remaining() > Duration::from_millis(150));
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    }

    /// A memory backend whose next acquire answers come from a script, and which sets aside a
    /// fixed drift: enough to drive the waiter through every kind of outcome.
    struct Scripted {
        inner: MemoryBackend,
        script: Mutex<std::collections::VecDeque<Result<AcquireOutcome>>>,
        drift: Duration,
        /// The next acquire is applied, then reported as a lost connection.
        apply_then_lose: std::sync::atomic::AtomicBool,
        /// This many cleanups fail (as timeouts) before they work again.
        failing_abandons: std::sync::atomic::AtomicUsize,
        /// Every renewal fails at once (as a lost connection).
        failing_renewals: std::sync::atomic::AtomicBool,
        /// How many renewal calls were made.
        renew_calls: std::sync::atomic::AtomicUsize,
    }

    impl Scripted {
        fn new(script: Vec<Result<AcquireOutcome>>) -> Self {
            Scripted {
                inner: MemoryBackend::new(),
                script: Mutex::new(script.into()),
                drift: Duration::ZERO,
                apply_then_lose: std::sync::atomic::AtomicBool::new(false),
                failing_abandons: std::sync::atomic::AtomicUsize::new(0),
                failing_renewals: std::sync::atomic::AtomicBool::new(false),
                renew_calls: std::sync::atomic::AtomicUsize::new(0),
            }
        }

        fn left(&self) -> usize {
            self.script.lock().unwrap().len()
        }
    }

    impl LockBackend for Scripted {
        fn client_id(&self) -> &str {
            self.inner.client_id()
        }
        fn clock_drift(&self, _lease: Duration) -> Duration {
            self.drift
        }
        async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
            if self.apply_then_lose.swap(false, Ordering::SeqCst) {
                self.inner.try_acquire(request).await?;
                return lost_connection();
            }
            let scripted = self.script.lock().unwrap().pop_front();
            match scripted {
                Some(outcome) => outcome,
                None => self.inner.try_acquire(request).await,
            }
        }
        async fn release(
            &self,
            name: &str,
            owner: &str,
            lease: Duration,
        ) -> Result<ReleaseOutcome> {
            self.inner.release(name, owner, lease).await
        }
        async fn renew(&self, renewals: &[crate::Renewal<'_>]) -> Result<Vec<crate::RenewOutcome>> {
            self.renew_calls.fetch_add(1, Ordering::SeqCst);
            if self.failing_renewals.load(Ordering::SeqCst) {
                return Err(crate::Error::ConnectionLost("reset".into()));
            }
            self.inner.renew(renewals).await
        }
        async fn abandon(&self, name: &str, owner: &str, keep: u32) -> Result<()> {
            let fail = self
                .failing_abandons
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                })
                .is_ok();
            if fail {
                return Err(crate::Error::Timeout {
                    after: Duration::from_millis(1),
                });
            }
            self.inner.abandon(name, owner, keep).await
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

    fn lost_connection() -> Result<AcquireOutcome> {
        Err(crate::Error::ConnectionLost("reset".into()))
    }

    async fn holders(locker: &Locker<Scripted>, name: &str) -> Vec<(String, u32)> {
        locker.state(name).await.unwrap().holders
    }

    #[tokio::test]
    async fn an_unsettled_debt_stops_the_next_attempt_instead_of_stacking_a_hold() {
        let locker = Locker::new(Scripted::new(vec![]));
        let backend = locker.backend();
        backend.apply_then_lose.store(true, Ordering::SeqCst);
        backend.failing_abandons.store(2, Ordering::SeqCst);
        assert!(
            locker.try_lock("d").await.is_err(),
            "acquire of unknown outcome"
        );
        assert_eq!(
            holders(&locker, "d").await.len(),
            1,
            "the unseen grant is there"
        );
        // The cleanup fails again: the attempt must not add a hold on top of the unseen one.
        let error = locker.try_lock("d").await.unwrap_err();
        assert!(matches!(error, crate::Error::Timeout { .. }), "{error:?}");
        assert_eq!(holders(&locker, "d").await[0].1, 1);
        // Now the cleanup works: the attempt settles the debt first, then takes a fresh hold.
        let guard = locker
            .try_lock("d")
            .await
            .unwrap()
            .expect("free after the cleanup");
        assert_eq!(guard.hold_count(), 1);
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        assert!(holders(&locker, "d").await.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_debt_lapses_with_the_lease_of_its_unseen_grant() {
        let locker = Locker::new(Scripted::new(vec![]));
        let backend = locker.backend();
        backend.apply_then_lose.store(true, Ordering::SeqCst);
        backend.failing_abandons.store(1, Ordering::SeqCst);
        let options = LockOptions::new()
            .no_wait()
            .lease(Duration::from_millis(100));
        assert!(locker.lock_with("lapse", &options).await.is_err());
        assert!(locker.inner.any_debt.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(150)).await;
        // Any later call looks at the debts and drops the lapsed one.
        let other = locker.try_lock("other").await.unwrap().unwrap();
        assert!(
            !locker.inner.any_debt.load(Ordering::SeqCst),
            "the grant has expired on the store: nothing left to settle"
        );
        assert_eq!(other.release().await.unwrap(), ReleaseOutcome::Released);
    }

    /// Takes an outer watchdog hold on `name`, then a re-entry of unknown outcome that the store
    /// applied and whose cleanup fails: a debt of one unseen hold. Returns the outer guard.
    async fn outer_hold_with_a_debt(locker: &Locker<Scripted>, name: &str) -> LockGuard<Scripted> {
        let options = LockOptions::new().watchdog_lease(Duration::from_millis(300));
        let outer = locker.lock_with(name, &options).await.unwrap().unwrap();
        let backend = locker.backend();
        backend.apply_then_lose.store(true, Ordering::SeqCst);
        backend.failing_abandons.store(1, Ordering::SeqCst);
        assert!(
            locker.lock_with(name, &options.no_wait()).await.is_err(),
            "re-entry of unknown outcome"
        );
        assert_eq!(holders(locker, name).await[0].1, 2, "the unseen re-entry");
        // Well past the debt's lease: the watchdog renews the outer hold, and with it the
        // unseen count.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!outer.is_lost());
        assert_eq!(holders(locker, name).await[0].1, 2, "still there");
        outer
    }

    #[tokio::test(start_paused = true)]
    async fn a_debt_does_not_lapse_while_an_outer_hold_keeps_its_grant_alive() {
        let locker = Locker::new(Scripted::new(vec![]));
        let outer = outer_hold_with_a_debt(&locker, "kept").await;
        assert_eq!(outer.release().await.unwrap(), ReleaseOutcome::Released);
        assert!(holders(&locker, "kept").await.is_empty());
        assert!(!locker.inner.any_debt.load(Ordering::SeqCst), "settled");
    }

    #[tokio::test(start_paused = true)]
    async fn a_debt_does_not_lapse_between_a_release_forgetting_its_hold_and_settling() {
        let locker = Locker::new(Scripted::new(vec![]));
        let outer = outer_hold_with_a_debt(&locker, "kept").await;
        // The background release of a dropped guard runs later; another call looks at the
        // debts in between.
        drop(outer);
        let other = locker.try_lock("other").await.unwrap().unwrap();
        assert_eq!(other.release().await.unwrap(), ReleaseOutcome::Released);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(holders(&locker, "kept").await.is_empty());
        assert!(!locker.inner.any_debt.load(Ordering::SeqCst), "settled");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_renewals_are_retried_after_the_retry_delay_not_at_once() {
        let locker = Locker::new(Scripted::new(vec![]));
        locker
            .backend()
            .failing_renewals
            .store(true, Ordering::SeqCst);
        let options = LockOptions::new().watchdog_lease(Duration::from_millis(300));
        let guard = locker.lock_with("r", &options).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(guard.lost().await, LeaseLoss::Expired);
        let calls = locker.backend().renew_calls.load(Ordering::SeqCst);
        // About one a retry delay (25 ms) between the first renewal and the end of the lease.
        assert!(
            (1..50).contains(&calls),
            "{calls} renewal calls in one lease"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn contended_attempts_are_retried_after_the_delay_the_backend_asks_for() {
        let contended = || {
            Ok(AcquireOutcome::Contended {
                retry_after: Duration::from_millis(100),
            })
        };
        let locker = Locker::new(Scripted::new(vec![contended(), contended()]));
        let started = Instant::now();
        let options = LockOptions::new().wait(Duration::from_secs(1));
        let guard = locker.lock_with("c", &options).await.unwrap();
        assert!(guard.is_some());
        assert_eq!(started.elapsed(), Duration::from_millis(200));
        // Without a wait, a contended attempt is simply not granted.
        let locker = Locker::new(Scripted::new(vec![contended()]));
        assert!(locker.try_lock("c").await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn retryable_errors_are_retried_only_within_a_wait_deadline() {
        let locker = Locker::new(Scripted::new(vec![lost_connection(), lost_connection()]));
        let options = LockOptions::new().wait(Duration::from_secs(1));
        let guard = locker.lock_with("e", &options).await.unwrap();
        assert!(guard.is_some(), "two transient errors, then granted");
        assert_eq!(locker.backend().left(), 0);

        let locker = Locker::new(Scripted::new(vec![lost_connection()]));
        assert!(
            locker.lock("e").await.is_err(),
            "no deadline: returned at once"
        );
        let locker = Locker::new(Scripted::new(vec![lost_connection()]));
        assert!(locker.try_lock("e").await.is_err());

        let wrong_type = || Err(crate::Error::WrongType("a string".into()));
        let locker = Locker::new(Scripted::new(vec![wrong_type()]));
        let started = Instant::now();
        let error = locker.lock_with("e", &options).await.unwrap_err();
        assert!(matches!(error, crate::Error::WrongType(_)));
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "final errors are not retried"
        );

        let locker = Locker::new(Scripted::new((0..100).map(|_| lost_connection()).collect()));
        let started = Instant::now();
        let error = locker.lock_with("e", &options).await.unwrap_err();
        assert!(matches!(error, crate::Error::ConnectionLost(_)));
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "the last error at the deadline"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_validity_deadline_sets_aside_the_backends_clock_drift() {
        let mut backend = Scripted::new(Vec::new());
        backend.drift = Duration::from_millis(300);
        let locker = Locker::new(backend);
        let sent_at = Instant::now();
        let options = LockOptions::new().lease(Duration::from_secs(10));
        let guard = locker.lock_with("d", &options).await.unwrap().unwrap();
        assert_eq!(guard.valid_until(), sent_at + Duration::from_millis(9700));
        let watched = LockOptions::new().watchdog_lease(Duration::from_secs(3));
        let guard = locker.lock_with("w", &watched).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!guard.is_lost());
        assert!(guard.remaining() <= Duration::from_millis(2700));
    }
}

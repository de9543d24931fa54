//! The user API: `Locker` with `lock`, `try_lock`, `lock_with`, and the calls that need no
//! guard (`unlock`, `force_unlock`, `state`). The entry points to the other primitives
//! (`locker.fair(name)`, `locker.semaphore(name)`, ...) are written beside each primitive's
//! handle, in its own file.

use std::sync::Arc;

use tracing::Instrument;

use crate::contract::{LockBackend, LockState, ReleaseOutcome};
use crate::error::{Error, Result};
use crate::fencing::Fencing;
use crate::guard::LockGuard;
use crate::hold::{Hold, HoldKey};
use crate::options::{Lease, LockOptions};
use crate::owner::Owner;
use crate::shared::LockerShared;
use crate::telemetry;
use crate::waiter::{LockAttempts, Waiter, Won};

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
/// let busy = locker.lock_with("invoice:7", &LockOptions::new().no_wait().owner(other)).await;
/// assert!(matches!(busy, Err(lock_core::Error::NotAcquired { .. })));
/// drop(guard);
///
/// // ...or waits at most 2 s for a lock that expires on its own after 10 s.
/// let options = LockOptions::new()
///     .wait(Duration::from_secs(2))
///     .fixed_lease(Duration::from_secs(10));
/// let guard = locker.lock_with("invoice:7", &options.owner(other)).await?;
/// assert!(!guard.is_watchdog());
/// # Ok(())
/// # }
/// ```
pub struct Locker<B: LockBackend> {
    shared: Arc<LockerShared<B>>,
}

impl<B: LockBackend> Clone for Locker<B> {
    fn clone(&self) -> Self {
        Locker {
            shared: self.shared.clone(),
        }
    }
}

impl<B: LockBackend> std::fmt::Debug for Locker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locker")
            .field("client_id", &self.shared.backend.client_id())
            .finish_non_exhaustive()
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
            shared: Arc::new(LockerShared::new(backend)),
        }
    }

    /// The backend.
    #[must_use]
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// Takes the lock, waiting as long as it takes, in watchdog mode (30 s lease renewed every
    /// 10 s), owned by the current task: locking it again from the same task re-enters.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; backend errors: a retryable one (a lost
    /// connection, a timeout: a reconnect or a failover under way) is retried with a delay
    /// doubling from 50 ms to 1 s, for up to 30 s of errors in a row, and returned after that;
    /// others at once. Waiting is never an error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits leaves nothing behind (its notification registration is
    /// dropped, a release it consumed is passed to the next waiter). Dropping it while an acquire
    /// is in flight may leave a hold that the store applied; no watchdog renews it, so it expires
    /// within its lease.
    pub async fn lock(&self, name: &str) -> Result<LockGuard<B>> {
        self.lock_with(name, &LockOptions::new()).await
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
        self.acquire(name, &LockOptions::new().no_wait()).await
    }

    /// Takes the lock with explicit options: wait deadline, fixed lease or watchdog, owner,
    /// fencing token ([`LockOptions::fenced`] gives a guard whose
    /// [`LockGuard::fencing_token`] is the token itself).
    ///
    /// Waiting follows one rule: register for release notifications, then try, then wait for a
    /// notification, a timer capped by the holder's remaining lease, or the deadline, whichever
    /// comes first; repeat. The first attempt is made before registering, so an uncontended lock
    /// costs one round trip. A backend that reports [`AcquireOutcome::Contended`](crate::contract::AcquireOutcome::Contended) (a composite
    /// whose nodes split) is retried after the delay it asks for.
    ///
    /// # Errors
    ///
    /// [`Error::NotAcquired`] when the wait of `options` ended (or its single attempt, with
    /// [`LockOptions::no_wait`], found the lock held) without the lock: retryable, and the only
    /// error that means "held by someone else". With the default wait (forever) it is never
    /// returned.
    ///
    /// [`crate::Error::InvalidName`] and [`crate::Error::InvalidOptions`] before any I/O, and
    /// [`crate::Error::NotReentrant`] when the backend is not reentrant and this owner already
    /// holds the lock; backend errors. A retryable error ([`crate::Error::is_retryable`]) is
    /// retried with a delay doubling from 50 ms to 1 s: with a wait deadline until the
    /// deadline, and the last one is returned when it passes; with `wait_forever` for up to
    /// 30 s of errors in a row (see [`Locker::lock`]); with `no_wait`, errors are returned at
    /// once.
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`].
    pub async fn lock_with<F: Fencing>(
        &self,
        name: &str,
        options: &LockOptions<F>,
    ) -> Result<LockGuard<B, F>> {
        match self.acquire(name, options).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::NotAcquired {
                name: name.to_owned(),
            }),
        }
    }

    /// Checks the input, then acquires as `options` say: `Ok(None)` when the wait ended without
    /// the lock.
    async fn acquire<F: Fencing>(
        &self,
        name: &str,
        options: &LockOptions<F>,
    ) -> Result<Option<LockGuard<B, F>>> {
        self.shared.backend.check_name(name)?;
        options.validate()?;
        let owner = options
            .explicit_owner()
            .copied()
            .unwrap_or_else(Owner::current);
        let key = HoldKey::new(name, owner, self.shared.backend.client_id());
        if !self.shared.backend.reentrant() && self.shared.live_holds(key.name(), key.field()) > 0 {
            return Err(Error::NotReentrant {
                name: name.to_owned(),
            });
        }
        let lease = options.lease_mode();
        let span = tracing::info_span!(
            "distlock.acquire",
            name,
            kind = self.shared.backend.kind(),
            owner = key.field(),
            node = tracing::field::Empty,
            wait = ?options.wait_policy(),
            outcome = tracing::field::Empty,
            hold_count = tracing::field::Empty,
            fencing_token = tracing::field::Empty,
        );
        let started = tokio::time::Instant::now();
        let _in_flight = telemetry::InFlight::start();
        let waiter = || {
            let waits = options.wait_policy() != crate::options::Wait::No;
            let request = key.acquire_request(lease.duration(), options.wants_fencing(), waits);
            let attempts = LockAttempts {
                locker: &self.shared,
                request,
            };
            Waiter::new(attempts, options.wait_policy())
        };
        // Awaited in place when no subscriber records the span, and made in each branch (see
        // `LockGuard::release`).
        let acquired = if span.is_disabled() {
            waiter().acquire().await
        } else {
            waiter().acquire().instrument(span.clone()).await
        };
        // A fenced grant must carry its token; one without is the backend's fault: recorded and
        // returned as an error, the grant given back.
        // Counted at once (no await between the winning attempt and here): the grant's place
        // in line is given up only then.
        let acquired = acquired.map(|won| {
            won.map(|Won { grant, sent_at }| Won {
                grant: grant.count(),
                sent_at,
            })
        });
        let acquired = match acquired {
            Ok(Some(granted)) => match F::from_grant(granted.grant.fencing_token) {
                Ok(token) => Ok(Some((granted, token))),
                Err(error) => Err((error, Some(granted))),
            },
            Ok(None) => Ok(None),
            Err(error) => Err((error, None)),
        };
        let outcome = match &acquired {
            Ok(Some((granted, _))) => {
                span.record("hold_count", granted.grant.hold_count);
                if let Some(token) = granted.grant.fencing_token {
                    span.record("fencing_token", token);
                }
                "granted"
            }
            Ok(None) => "held",
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        telemetry::acquired(outcome, started.elapsed());
        match acquired {
            Ok(Some((granted, token))) => Ok(Some(self.make_guard(key, lease, granted, token))),
            Ok(None) => Ok(None),
            Err((error, unusable)) => {
                if let Some(granted) = unusable {
                    // Dropping its guard releases it in the background, as for any guard.
                    let guard: LockGuard<B> = self.make_guard(key, lease, granted, ());
                    drop(guard);
                }
                Err(error)
            }
        }
    }

    /// Holds the lock `name` while `critical` runs, and returns what it returns: acquires with
    /// `options` (waiting as they say), runs `critical` with the guard (for its fencing token,
    /// say), races it against [`LockGuard::lost`], and releases.
    ///
    /// The closure cannot forget to release, and it does not run on after its lease is lost: it
    /// is stopped (its future dropped) at the loss.
    ///
    /// # Errors
    ///
    /// [`Error::NotAcquired`] when the lock stayed held by someone else for the whole wait (so
    /// `critical` never ran); [`Error::LeaseLost`] when the lease was lost while `critical`
    /// ran (it was stopped there), or when the release found the lock no longer ours (it ran
    /// to its end, but may have overlapped another holder: its value is dropped). Acquire
    /// errors as [`Locker::lock_with`]. A release that fails for another reason (a connection
    /// lost) is logged, not returned: `critical` ended within its lease, and the lease ends the
    /// lock.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future stops `critical` where it is and drops the guard, which
    /// releases in the background (the lease is the safety net).
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_core::{LockOptions, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let options = LockOptions::new().fenced();
    /// let token = locker
    ///     .with_lock("reports:daily", &options, async |guard| {
    ///         // ... the critical section, writing with `guard.fencing_token()` ...
    ///         guard.fencing_token()
    ///     })
    ///     .await?;
    /// assert!(token > 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<T, F: Fencing>(
        &self,
        name: &str,
        options: &LockOptions<F>,
        critical: impl AsyncFnOnce(&LockGuard<B, F>) -> T,
    ) -> Result<T> {
        let guard = self.lock_with(name, options).await?;
        let finished = {
            let section = critical(&guard);
            tokio::select! {
                value = section => Some(value),
                _loss = guard.lost() => None,
            }
        };
        let Some(value) = finished else {
            // Stopped at the loss; the release tells the store nothing it needs, but frees a
            // reentrant count of ours if the loss was only local (an expired deadline).
            let _ = guard.release().await;
            return Err(Error::LeaseLost);
        };
        match guard.release().await {
            Ok(ReleaseOutcome::NotHeld) => Err(Error::LeaseLost),
            Ok(_) => Ok(value),
            Err(error) => {
                tracing::warn!(%error, name, "could not release after the critical section; the lease will end the lock");
                Ok(value)
            }
        }
    }

    /// Builds the guard of a granted hold (already counted in its lane): its record and its
    /// watchdog registration (in watchdog mode).
    fn make_guard<F: Fencing>(
        &self,
        key: HoldKey,
        lease: Lease,
        granted: Won<crate::contract::Grant>,
        token: F::Token,
    ) -> LockGuard<B, F> {
        let Won { grant, sent_at } = granted;
        let valid_until = sent_at
            + lease
                .duration()
                .saturating_sub(self.shared.backend.clock_drift(lease.duration()));
        let hold = Hold::new(key, lease.duration(), valid_until, sent_at);
        let watchdog_id = match lease {
            Lease::Watchdog { max_hold, .. } => Some(self.shared.watchdog.register(
                hold.clone(),
                valid_until,
                max_hold.map(|max_hold| sent_at + max_hold),
                sent_at,
            )),
            Lease::Fixed(_) => None,
        };
        LockGuard::new(
            self.shared.clone(),
            hold,
            grant.hold_count,
            token,
            watchdog_id,
        )
    }

    /// Gives back one hold of `owner` without a guard (for example for a hold taken by a process
    /// that knew the owner's holder id). Returns [`ReleaseOutcome::NotHeld`] and changes nothing
    /// when `owner` does not hold the lock. When holds remain, the lease is lengthened to at least
    /// the default 30 s (never shortened: a lease runs at least as long as any hold of the owner
    /// counts on), since the holds' own lease is not known here; prefer [`LockGuard::release`],
    /// which uses the guard's lease. It runs in the owner's line on the name, after any call of
    /// that owner issued here before it.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; backend errors.
    pub async fn unlock(&self, name: &str, owner: Owner) -> Result<ReleaseOutcome> {
        self.shared.backend.check_name(name)?;
        let field = owner.field(self.shared.backend.client_id());
        self.shared
            .release_unguarded(name, &field, crate::options::DEFAULT_WATCHDOG_LEASE)
            .await
    }

    /// Waits until every store call this process issued for `owner` on `name` before this one
    /// has ended: the releases of dropped guards and the cleanups of cancelled lock calls,
    /// which run in tasks of the current runtime, included. A runtime that shuts down drops
    /// such tasks, leaving their hold on the store until its lease ends; a program that
    /// cancels a lock call or drops a guard just before it exits awaits this first.
    ///
    /// Calls issued after this one are not waited for. It sends nothing itself.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::{LockOptions, Locker, MemoryBackend, Owner};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let owner = Owner::new();
    /// let options = LockOptions::new().owner(owner);
    /// // Shutting down: stop waiting for the lock...
    /// let _ = tokio::time::timeout(Duration::from_millis(10), locker.lock_with("jobs", &options)).await;
    /// // ...and let whatever that call left on the store be given back before exiting.
    /// locker.flush("jobs", owner).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before waiting.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits, and dropping it changes nothing.
    pub async fn flush(&self, name: &str, owner: Owner) -> Result<()> {
        self.shared.backend.check_name(name)?;
        let field = owner.field(self.shared.backend.client_id());
        self.shared.settled(name, &field).await;
        Ok(())
    }

    /// Deletes the lock whoever holds it and wakes its waiters. Returns whether it was held.
    /// Holders find out through [`LockGuard::lost`] at their next renewal.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; backend errors.
    pub async fn force_unlock(&self, name: &str) -> Result<bool> {
        self.shared.backend.check_name(name)?;
        self.shared.backend.force_release(name).await
    }

    /// Reads who holds the lock, how many times, and for how long still.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; backend errors.
    pub async fn state(&self, name: &str) -> Result<LockState> {
        self.shared.backend.check_name(name)?;
        self.shared.backend.inspect(name).await
    }

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    ///
    /// As [`Locker::state`].
    pub async fn is_locked(&self, name: &str) -> Result<bool> {
        Ok(self.state(name).await?.is_locked())
    }

    /// How many guards of `owner` on `name` are alive in this process (through this locker).
    pub(crate) fn live_holds(&self, name: &str, owner: Owner) -> u32 {
        let field = owner.field(self.shared.backend.client_id());
        self.shared.live_holds(name, &field)
    }

    /// Settles `owner`'s debt on `name` through this locker, if it has one (see
    /// `LockerShared::settle_owed`).
    pub(crate) async fn settle_owed(&self, name: &str, owner: Owner) -> Result<()> {
        let field = owner.field(self.shared.backend.client_id());
        self.shared.settle_owed(name, &field).await
    }

    /// The backend, shared: for the handles on the other primitives, which call it directly.
    pub(crate) fn shared_backend(&self) -> &Arc<B> {
        &self.shared.backend
    }

    /// This locker's family of type `F` (the locker of another primitive's side, say), made by
    /// `make` on first use and shared by every clone (see `crate::families`).
    pub(crate) fn family<F: Clone + Send + Sync + 'static>(&self, make: impl FnOnce() -> F) -> F {
        self.shared.families.get_or_make(make)
    }

    /// A locker over `backend` whose calls share the lines of `other` (the other side of a
    /// read-write lock: one owner's calls on one name are ordered across both sides), keeping
    /// the tallies of `side`.
    pub(crate) fn sharing_order_with<O: LockBackend>(
        backend: B,
        other: &Locker<O>,
        side: crate::order::Side,
    ) -> Self {
        Locker {
            shared: Arc::new(LockerShared::on_side(
                Arc::new(backend),
                other.shared.order.clone(),
                side,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{AcquireOutcome, AcquireRequest};
    use crate::hold::LeaseLoss;
    use crate::memory::MemoryBackend;
    use crate::notify::ReleaseWatch;
    use std::sync::Mutex;
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    use tokio::task::JoinHandle;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn the_watchdog_forgets_released_and_dropped_guards() {
        let locker = Locker::new(MemoryBackend::new());
        let guard = locker.lock("a").await.unwrap();
        let fixed = locker
            .lock_with("b", &LockOptions::new().fixed_lease(Duration::from_secs(5)))
            .await
            .unwrap();
        assert_eq!(
            locker.shared.watchdog.registered(),
            1,
            "fixed leases are not watched"
        );
        assert!(guard.release().await.unwrap().was_held());
        assert_eq!(locker.shared.watchdog.registered(), 0);
        let dropped = locker.lock("c").await.unwrap();
        drop(dropped);
        assert_eq!(locker.shared.watchdog.registered(), 0);
        drop(fixed);
        tokio::task::yield_now().await;
        assert!(locker.shared.order.is_idle());
    }

    /// `lost()` follows a lease changed while it waits, later (its timer re-reads the deadline)
    /// or sooner (the extension wakes it to re-arm), and wakes at once when the store says the
    /// lock is gone.
    #[tokio::test(start_paused = true)]
    async fn lost_follows_an_extension_and_a_loss_while_it_waits() {
        let locker = Locker::new(MemoryBackend::new());
        for (first, then, deadline) in [(200, 600, 700), (600, 100, 200)] {
            let options = LockOptions::new().fixed_lease(Duration::from_millis(first));
            let guard = locker.lock_with("moved", &options).await.unwrap();
            let started = Instant::now();
            let lost = async {
                let loss = guard.lost().await;
                (loss, started.elapsed())
            };
            let extend = async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                guard.extend(Duration::from_millis(then)).await.unwrap();
            };
            let ((loss, after), ()) = tokio::join!(lost, extend);
            assert_eq!(loss, LeaseLoss::Expired);
            assert!(
                after >= Duration::from_millis(deadline - 10)
                    && after <= Duration::from_millis(deadline + 20),
                "{first} ms, then {then} ms: lost after {after:?}, not at {deadline} ms"
            );
            drop(guard);
        }

        let options = LockOptions::new().fixed_lease(Duration::from_millis(200));
        let guard = locker.lock_with("taken", &options).await.unwrap();
        let lost = guard.lost();
        let gone = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(locker.force_unlock("taken").await.unwrap());
            // The next renewal finds the lock gone and marks the guard.
            assert!(guard.extend(Duration::from_millis(200)).await.is_err());
            Instant::now()
        };
        let started = Instant::now();
        let (loss, marked) = tokio::join!(lost, gone);
        assert_eq!(loss, LeaseLoss::NotOurs);
        assert!(marked.duration_since(started) < Duration::from_millis(100));
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "woken at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn max_hold_caps_the_total_hold_time() {
        let locker = Locker::new(MemoryBackend::new());
        let options = LockOptions::new()
            .watchdog_lease(Duration::from_millis(300))
            .max_hold(Duration::from_secs(1));
        let started = Instant::now();
        let guard = locker.lock_with("capped", &options).await.unwrap();
        assert_eq!(guard.lost().await, LeaseLoss::Expired);
        let held_for = started.elapsed();
        assert!(
            held_for >= Duration::from_millis(990) && held_for <= Duration::from_millis(1100),
            "held for {held_for:?}"
        );
        assert!(!locker.is_locked("capped").await.unwrap());
        // The watchdog drops the entry at its next wake-up, within one renewal period.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(locker.shared.watchdog.registered(), 0);
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
            let guard = locker.lock_with("second", &options).await.unwrap();
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
        let plans = locker.shared.watchdog.plans();
        assert!(
            plans <= 2,
            "the renewal task looked {plans} times for 200 short holds"
        );
    }

    /// 400 locks taken one after another over two renewal periods, renewed by a backend whose
    /// calls take a millisecond, settle into a batch or two per period rather than a stream of
    /// tiny batches (the renewals that entered the batching window while the previous batch was
    /// out: 1,000 batches in the 10 periods when a batch starts as soon as one is within the
    /// window).
    #[tokio::test(start_paused = true)]
    async fn locks_taken_over_a_stretch_renew_in_few_batches() {
        let backend = MemoryBackend::new();
        backend.set_renew_delay(Duration::from_millis(1));
        let locker = Locker::new(backend.clone());
        // Renewed every 100 ms, with 50 ms of batching slack.
        let options = LockOptions::new().watchdog_lease(Duration::from_millis(300));
        let mut guards = Vec::new();
        for n in 0..400 {
            let name = format!("stretch:{n}");
            guards.push(locker.lock_with(&name, &options).await.unwrap());
            if n % 2 == 1 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let before = backend.renew_calls();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let batches = backend.renew_calls() - before;
        assert!(batches <= 20, "{batches} renewal batches in 10 periods");
        assert!(guards.iter().all(|guard| !guard.is_lost()));
    }

    /// `with_lock` runs the section under the lock and releases; held elsewhere for the whole
    /// wait, it never runs the section (`NotAcquired`); a lease lost while it runs stops it
    /// (`LeaseLost`).
    #[tokio::test(start_paused = true)]
    async fn with_lock_runs_releases_and_stops_at_a_loss() {
        let locker = Locker::new(MemoryBackend::new());
        let value = locker
            .with_lock("section", &LockOptions::new(), async |guard| {
                guard.hold_count() * 10
            })
            .await
            .unwrap();
        assert_eq!(value, 10);
        assert!(!locker.is_locked("section").await.unwrap());

        let other = Locker::new(locker.backend().new_client());
        let held = other.lock("section").await.unwrap();
        let ran = std::sync::atomic::AtomicBool::new(false);
        let refused = locker
            .with_lock(
                "section",
                &LockOptions::new().wait(Duration::from_millis(100)),
                async |_| ran.store(true, std::sync::atomic::Ordering::Relaxed),
            )
            .await;
        assert!(
            matches!(refused, Err(Error::NotAcquired { .. })),
            "{refused:?}"
        );
        assert!(!ran.load(std::sync::atomic::Ordering::Relaxed));
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);

        let finished = std::sync::atomic::AtomicBool::new(false);
        let breaker = other.clone();
        let short = LockOptions::new().watchdog_lease(Duration::from_millis(300));
        let lost = locker.with_lock("section", &short, async |_| {
            tokio::time::sleep(Duration::from_secs(10)).await;
            finished.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let broken = async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            assert!(breaker.force_unlock("section").await.unwrap());
        };
        let started = tokio::time::Instant::now();
        let (lost, ()) = tokio::join!(lost, broken);
        assert!(matches!(lost, Err(Error::LeaseLost)), "{lost:?}");
        assert!(
            !finished.load(std::sync::atomic::Ordering::Relaxed),
            "stopped at the loss"
        );
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "{:?}",
            started.elapsed()
        );
    }

    /// A re-entry whose answer its caller did not wait for (applied by the store) is taken off
    /// again, but not together with a hold still live: here the owner's release of another
    /// hold is under way when the cleanup would run.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_reentry_takes_no_live_hold_with_it() {
        let mut backend = Scripted::new(Vec::new());
        backend.answer_delay = Duration::from_millis(50);
        let locker = Locker::new(backend);
        let outer = locker.lock("a").await.unwrap();
        let inner = locker.lock("a").await.unwrap();
        let dropped = tokio::time::timeout(Duration::from_millis(10), locker.lock("a")).await;
        assert!(dropped.is_err(), "dropped before its answer");
        drop(inner);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            holders(&locker, "a").await,
            vec![(outer.owner_field().to_owned(), 1)]
        );
        let other = Locker::new(locker.backend().inner.new_client());
        assert!(
            other.try_lock("a").await.unwrap().is_none(),
            "the outer hold stands"
        );
        assert_eq!(outer.release().await.unwrap(), ReleaseOutcome::Released);
        assert!(holders(&locker, "a").await.is_empty());
    }

    /// Two acquires of one explicit owner at once, the first dropped before its answer: the
    /// cleanup of the first does not take the second's grant.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_acquire_takes_no_grant_of_the_same_owner_under_way() {
        let mut backend = Scripted::new(Vec::new());
        backend.answer_delay = Duration::from_millis(50);
        let locker = Locker::new(backend);
        let options = LockOptions::new().owner(Owner::new());
        let (dropped, granted) = tokio::join!(
            tokio::time::timeout(Duration::from_millis(10), locker.lock_with("b", &options)),
            locker.lock_with("b", &options),
        );
        assert!(dropped.is_err(), "dropped before its answer");
        let guard = granted.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let other = Locker::new(locker.backend().inner.new_client());
        assert!(
            other.try_lock("b").await.unwrap().is_none(),
            "the grant stands"
        );
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        assert!(
            holders(&locker, "b").await.is_empty(),
            "the dropped one's count too"
        );
    }

    /// A first acquire dropped before its answer (applied by the store) is taken off in the
    /// background: the lock is free again at once, not at the end of its lease.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_first_acquire_is_taken_off() {
        let mut backend = Scripted::new(Vec::new());
        backend.answer_delay = Duration::from_millis(50);
        let locker = Locker::new(backend);
        let dropped = tokio::time::timeout(Duration::from_millis(10), locker.lock("c")).await;
        assert!(dropped.is_err(), "dropped before its answer");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(holders(&locker, "c").await.is_empty());
    }

    /// The order in which two tasks got "jobs" (see the hand-off tests below).
    type Order = Arc<Mutex<Vec<&'static str>>>;

    /// A task of `locker` that waits for "jobs", notes "waiter" in `order` once it holds it,
    /// and gives it back a moment later; given time to start waiting.
    async fn waiting_task(locker: &Locker<MemoryBackend>, order: &Order) -> JoinHandle<()> {
        let waiter = tokio::spawn({
            let (locker, order) = (locker.clone(), order.clone());
            async move {
                let guard = locker.lock("jobs").await.unwrap();
                order.lock().unwrap().push("waiter");
                tokio::time::sleep(Duration::from_millis(1)).await;
                drop(guard);
            }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        waiter
    }

    /// `locker` takes "jobs" again at once, noted in `order` as `who`; then the order in which
    /// the waiter and this call got it.
    async fn lock_again(
        locker: &Locker<MemoryBackend>,
        order: &Order,
        waiter: JoinHandle<()>,
        who: &'static str,
    ) -> Vec<&'static str> {
        let again = locker.lock("jobs").await.unwrap();
        order.lock().unwrap().push(who);
        drop(again);
        waiter.await.unwrap();
        order.lock().unwrap().clone()
    }

    /// A task that releases and locks again at once does not overtake a task of the same
    /// locker that waits for the lock: the release wakes the waiter, which takes the lock
    /// first (see `crate::local_line`).
    #[tokio::test(start_paused = true)]
    async fn a_release_hands_the_lock_to_a_waiting_task_before_the_releaser_locks_again() {
        let locker = Locker::new(MemoryBackend::new());
        let order = Order::default();
        let guard = locker.lock("jobs").await.unwrap();
        let waiter = waiting_task(&locker, &order).await;
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        let order = lock_again(&locker, &order, waiter, "releaser").await;
        assert_eq!(order, ["waiter", "releaser"]);
    }

    /// `unlock` of a hold this locker counts nothing of (taken through another locker) hands
    /// the lock to this locker's waiting task first, as a guard's release does.
    #[tokio::test(start_paused = true)]
    async fn an_unlock_hands_the_lock_to_a_waiting_task_before_the_unlocker_locks_again() {
        let backend = MemoryBackend::new();
        let (first, second) = (Locker::new(backend.clone()), Locker::new(backend));
        let order = Order::default();
        let owner = Owner::new();
        let guard = first
            .lock_with("jobs", &LockOptions::new().owner(owner))
            .await
            .unwrap();
        let waiter = waiting_task(&second, &order).await;
        assert_eq!(
            second.unlock("jobs", owner).await.unwrap(),
            ReleaseOutcome::Released
        );
        let order = lock_again(&second, &order, waiter, "unlocker").await;
        assert_eq!(order, ["waiter", "unlocker"]);
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotHeld);
    }

    /// The same for `unlock` of a hold this locker counts (its guard still live).
    #[tokio::test(start_paused = true)]
    async fn an_unlock_of_a_counted_hold_hands_the_lock_to_a_waiting_task_first() {
        let locker = Locker::new(MemoryBackend::new());
        let order = Order::default();
        let owner = Owner::new();
        let guard = locker
            .lock_with("jobs", &LockOptions::new().owner(owner))
            .await
            .unwrap();
        let waiter = waiting_task(&locker, &order).await;
        assert_eq!(
            locker.unlock("jobs", owner).await.unwrap(),
            ReleaseOutcome::Released
        );
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotHeld);
        let order = lock_again(&locker, &order, waiter, "unlocker").await;
        assert_eq!(order, ["waiter", "unlocker"]);
    }

    /// The loop every worker writes: lock, work, let the guard drop at the end of the block,
    /// lock again. Each lock is a fresh hold, not a re-entry of the one just dropped (whose
    /// release runs in the background), and another owner waiting gets its turn.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_lock_right_after_a_dropped_guard_is_a_fresh_hold() {
        let locker = Locker::new(MemoryBackend::new());
        let other = locker.clone();
        let waiter = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let asked = Instant::now();
            let guard = other.lock("jobs").await.unwrap();
            let waited = asked.elapsed();
            drop(guard);
            waited
        });
        for _ in 0..100 {
            let guard = locker.lock("jobs").await.unwrap();
            assert_eq!(guard.hold_count(), 1, "a fresh hold, not a re-entry");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let waited = waiter.await.unwrap();
        assert!(
            waited < Duration::from_millis(100),
            "the other owner got in within one job or two, not after the loop: {waited:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(holders(&locker, "jobs").await.is_empty());
        assert!(locker.shared.order.is_idle());
    }

    /// A dropped guard's release that fails while the owner already locks again: its cleanup
    /// (set the owner's count to the holds it still has) must not take the new hold with it.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_failed_release_of_a_dropped_guard_spares_the_next_hold() {
        let mut backend = Scripted::new(Vec::new());
        backend.release_delay = Duration::from_millis(10);
        let locker = Locker::new(backend);
        let other = Locker::new(locker.backend().inner.new_client());
        let first = locker.lock("r").await.unwrap();
        locker.backend().failing_releases.store(1, Ordering::SeqCst);
        drop(first);
        // Anything that awaits in between lets the background release start.
        tokio::task::yield_now().await;
        let second = locker.lock("r").await.unwrap();
        assert_eq!(second.hold_count(), 1, "a fresh hold");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            other.try_lock("r").await.unwrap().is_none(),
            "the second hold stands: nobody else gets in"
        );
        assert_eq!(
            holders(&locker, "r").await,
            vec![(second.owner_field().to_owned(), 1)]
        );
        assert_eq!(second.release().await.unwrap(), ReleaseOutcome::Released);
    }

    /// A release whose caller stops waiting for it (a timeout around `release()`) still ends
    /// with the hold given back, before the owner's next call on the name.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_cancelled_release_still_comes_before_the_next_lock() {
        let mut backend = Scripted::new(Vec::new());
        backend.release_delay = Duration::from_millis(20);
        let locker = Locker::new(backend);
        let guard = locker.lock("c").await.unwrap();
        let cancelled = tokio::time::timeout(Duration::from_millis(5), guard.release()).await;
        assert!(cancelled.is_err(), "stopped waiting mid-release");
        let next = locker.lock("c").await.unwrap();
        assert_eq!(next.hold_count(), 1, "a fresh hold");
        assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
        assert!(holders(&locker, "c").await.is_empty());
    }

    /// A lock call cancelled while its grant is on its way leaves a cleanup in a task of the
    /// runtime; `flush` waits for it, so a runtime shut down right after leaves nothing.
    #[test]
    fn flush_lets_the_cleanup_of_a_cancelled_lock_run_before_a_shutdown() {
        for flushed in [false, true] {
            let mut backend = Scripted::new(Vec::new());
            backend.answer_delay = Duration::from_millis(20);
            let store = backend.inner.new_client();
            let locker = Locker::new(backend);
            let owner = Owner::new();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let options = LockOptions::new().owner(owner);
                let cancelled =
                    tokio::time::timeout(Duration::from_millis(5), locker.lock_with("f", &options))
                        .await;
                assert!(cancelled.is_err(), "cancelled mid-call");
                if flushed {
                    locker.flush("f", owner).await.unwrap();
                }
            });
            drop(runtime);
            let left = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(LockBackend::inspect(&store, "f"))
                .unwrap()
                .holders;
            assert_eq!(
                left.is_empty(),
                flushed,
                "flushed: {flushed}, left: {left:?}"
            );
        }
    }

    /// `unlock` of an owner whose guard is live brings the count down with the store's answer:
    /// the guard's release then finds nothing, and nothing is left counted or owed.
    #[tokio::test]
    async fn an_unlock_of_a_guarded_hold_leaves_the_tally_true() {
        let locker = Locker::new(MemoryBackend::new());
        let owner = Owner::new();
        let options = LockOptions::new().owner(owner);
        let guard = locker.lock_with("u", &options).await.unwrap();
        assert_eq!(
            locker.unlock("u", owner).await.unwrap(),
            ReleaseOutcome::Released
        );
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotHeld);
        assert!(locker.shared.order.is_idle());
        let again = locker.lock_with("u", &options).await.unwrap();
        assert_eq!(again.hold_count(), 1);
        assert_eq!(again.release().await.unwrap(), ReleaseOutcome::Released);
    }

    /// A woken waiter whose attempt fails, ending its wait, hands the wake-up on: the other
    /// waiter gets the free lock at once, not when its timer (the old holder's lease) runs out.
    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_fails_after_its_wake_up_passes_it_on() {
        let locker = Locker::new(Scripted::new(Vec::new()));
        let holder = Locker::new(locker.backend().inner.new_client());
        let held = holder
            .lock_with(
                "w",
                &LockOptions::new().fixed_lease(Duration::from_secs(20)),
            )
            .await
            .unwrap();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let locker = locker.clone();
                tokio::spawn(async move {
                    let options = LockOptions::new().owner(Owner::new());
                    let result = locker.lock_with("w", &options).await;
                    (Instant::now(), result.map(drop))
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        locker
            .backend()
            .script
            .lock()
            .unwrap()
            .push_back(Err(Error::WrongType("scripted".into())));
        let released_at = Instant::now();
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
        let mut failed = 0;
        for waiter in waiters {
            let (at, result) = waiter.await.unwrap();
            match result {
                Err(_) => failed += 1,
                Ok(()) => assert!(
                    at - released_at < Duration::from_millis(100),
                    "the other waiter was handed the wake-up: {:?}",
                    at - released_at
                ),
            }
        }
        assert_eq!(failed, 1, "one waiter's attempt failed");
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_keep_a_watchdog_lease_for_long() {
        let locker = Locker::new(MemoryBackend::new());
        let options = LockOptions::new().watchdog_lease(Duration::from_millis(300));
        let guard = locker.lock_with("long", &options).await.unwrap();
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
        /// How long an acquire applied by the store takes to answer.
        answer_delay: Duration,
        /// Grants applied by the store come back without their fencing token.
        drop_tokens: std::sync::atomic::AtomicBool,
        /// This many releases fail before they reach the store (a definite error: an
        /// unavailable server) before they work again.
        failing_releases: std::sync::atomic::AtomicUsize,
        /// How long a release takes to answer (applied or failed at the end of it).
        release_delay: Duration,
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
                answer_delay: Duration::ZERO,
                drop_tokens: std::sync::atomic::AtomicBool::new(false),
                failing_releases: std::sync::atomic::AtomicUsize::new(0),
                release_delay: Duration::ZERO,
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
                None => {
                    let mut applied = self.inner.try_acquire(request).await;
                    tokio::time::sleep(self.answer_delay).await;
                    if self.drop_tokens.load(Ordering::SeqCst)
                        && let Ok(AcquireOutcome::Acquired(grant)) = &mut applied
                    {
                        grant.fencing_token = None;
                    }
                    applied
                }
            }
        }
        async fn release(
            &self,
            name: &str,
            owner_field: &str,
            lease: Duration,
        ) -> Result<ReleaseOutcome> {
            if !self.release_delay.is_zero() {
                tokio::time::sleep(self.release_delay).await;
            }
            let fail = self
                .failing_releases
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                })
                .is_ok();
            if fail {
                return Err(Error::Unavailable("loading".into()));
            }
            self.inner.release(name, owner_field, lease).await
        }
        async fn renew(
            &self,
            renewals: &[crate::contract::Renewal<'_>],
        ) -> Result<Vec<crate::contract::RenewOutcome>> {
            self.renew_calls.fetch_add(1, Ordering::SeqCst);
            if self.failing_renewals.load(Ordering::SeqCst) {
                return Err(Error::ConnectionLost("reset".into()));
            }
            self.inner.renew(renewals).await
        }
        async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
            let fail = self
                .failing_abandons
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                })
                .is_ok();
            if fail {
                return Err(Error::Timeout {
                    after: Duration::from_millis(1),
                });
            }
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

    fn lost_connection() -> Result<AcquireOutcome> {
        Err(Error::ConnectionLost("reset".into()))
    }

    async fn holders<B: LockBackend>(locker: &Locker<B>, name: &str) -> Vec<(String, u32)> {
        locker.state(name).await.unwrap().holders
    }

    #[tokio::test]
    async fn a_release_that_surely_failed_leaves_no_hold_for_the_owner_to_re_enter() {
        let backend = Scripted::new(Vec::new());
        backend.failing_releases.store(1, Ordering::SeqCst);
        let locker = Locker::new(backend);
        let guard = locker.lock("r").await.unwrap();
        let field = guard.owner_field().to_owned();
        assert!(!guard.release().await.unwrap_err().is_ambiguous());
        // Given back at once: the owner's next lock is a fresh single hold, not a re-entry of
        // a hold it no longer knows of (count 2, still held after its release).
        assert!(holders(&locker, "r").await.is_empty());
        let guard = locker.lock("r").await.unwrap();
        assert_eq!(holders(&locker, "r").await, vec![(field, 1)]);
        assert!(guard.release().await.unwrap().was_held());
        assert!(holders(&locker, "r").await.is_empty());
    }

    #[tokio::test]
    async fn a_release_that_surely_failed_with_its_cleanup_is_settled_before_the_next_lock() {
        let backend = Scripted::new(Vec::new());
        backend.failing_releases.store(1, Ordering::SeqCst);
        backend.failing_abandons.store(1, Ordering::SeqCst);
        let locker = Locker::new(backend);
        let guard = locker.lock("s").await.unwrap();
        let field = guard.owner_field().to_owned();
        assert!(guard.release().await.is_err());
        assert_eq!(
            holders(&locker, "s").await,
            vec![(field.clone(), 1)],
            "a debt"
        );
        let guard = locker.lock("s").await.unwrap();
        assert_eq!(holders(&locker, "s").await, vec![(field, 1)]);
        assert!(guard.release().await.unwrap().was_held());
        assert!(holders(&locker, "s").await.is_empty());
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
        assert!(matches!(error, Error::Timeout { .. }), "{error:?}");
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
            .fixed_lease(Duration::from_millis(100));
        assert!(locker.lock_with("lapse", &options).await.is_err());
        assert!(locker.shared.order.has_debts());
        tokio::time::sleep(Duration::from_millis(150)).await;
        // The next call on the name drops the lapsed debt without a cleanup (one would fail).
        backend.failing_abandons.store(1, Ordering::SeqCst);
        let again = locker.lock_with("lapse", &options).await.unwrap();
        assert!(
            !locker.shared.order.has_debts(),
            "the grant has expired on the store: nothing left to settle"
        );
        assert_eq!(again.hold_count(), 1);
        assert_eq!(again.release().await.unwrap(), ReleaseOutcome::Released);
    }

    /// Takes an outer watchdog hold on `name`, then a re-entry of unknown outcome that the store
    /// applied and whose cleanup fails: a debt of one unseen hold. Returns the outer guard.
    async fn outer_hold_with_a_debt(locker: &Locker<Scripted>, name: &str) -> LockGuard<Scripted> {
        let options = LockOptions::new().watchdog_lease(Duration::from_millis(300));
        let outer = locker.lock_with(name, &options).await.unwrap();
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
        assert!(!locker.shared.order.has_debts(), "settled");
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
        assert!(!locker.shared.order.has_debts(), "settled");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_renewals_are_retried_after_the_retry_delay_not_at_once() {
        let locker = Locker::new(Scripted::new(vec![]));
        locker
            .backend()
            .failing_renewals
            .store(true, Ordering::SeqCst);
        let options = LockOptions::new().watchdog_lease(Duration::from_millis(300));
        let guard = locker.lock_with("r", &options).await.unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(guard.lost().await, LeaseLoss::Expired);
        let calls = locker.backend().renew_calls.load(Ordering::SeqCst);
        // About one a retry delay (25 ms) between the first renewal and the end of the lease.
        assert!(
            (1..50).contains(&calls),
            "{calls} renewal calls in one lease"
        );
    }

    #[tokio::test]
    async fn a_fenced_grant_without_a_token_is_an_error_and_is_given_back() {
        let backend = Scripted::new(Vec::new());
        backend.drop_tokens.store(true, Ordering::SeqCst);
        let locker = Locker::new(backend);
        let refused = locker
            .lock_with("no-token", &LockOptions::new().fenced().no_wait())
            .await;
        assert!(matches!(refused, Err(Error::Protocol(_))), "{refused:?}");
        // The grant the store made is released in the background.
        for _ in 0..100 {
            if !locker.is_locked("no-token").await.unwrap() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            !locker.is_locked("no-token").await.unwrap(),
            "the grant was given back"
        );
        // Unfenced options do not need a token.
        let plain = locker
            .lock_with("no-token", &LockOptions::new().no_wait())
            .await;
        assert!(plain.is_ok(), "{plain:?}");
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
        let _guard = locker.lock_with("c", &options).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_millis(200));
        // Without a wait, a contended attempt is simply not granted.
        let locker = Locker::new(Scripted::new(vec![contended()]));
        assert!(locker.try_lock("c").await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn retryable_errors_are_retried_within_the_wait() {
        let locker = Locker::new(Scripted::new(vec![lost_connection(), lost_connection()]));
        let options = LockOptions::new().wait(Duration::from_secs(1));
        let granted = locker.lock_with("e", &options).await;
        assert!(granted.is_ok(), "two transient errors, then granted");
        assert_eq!(locker.backend().left(), 0);

        // Without a deadline (`lock()`) they are ridden through, after 50, 100, 200 ms (each
        // ± 25 %)…
        let locker = Locker::new(Scripted::new(vec![
            lost_connection(),
            lost_connection(),
            lost_connection(),
        ]));
        let started = Instant::now();
        let guard = locker.lock("e").await.expect("granted after three errors");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(262) && took <= Duration::from_millis(438),
            "{took:?}"
        );
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        // … but not forever: after 30 s of errors in a row the last one is returned.
        let locker = Locker::new(Scripted::new((0..200).map(|_| lost_connection()).collect()));
        let started = Instant::now();
        let error = locker.lock("e").await.unwrap_err();
        assert!(matches!(error, Error::ConnectionLost(_)), "{error:?}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(30) && took <= Duration::from_millis(31_300),
            "{took:?}"
        );
        let locker = Locker::new(Scripted::new(vec![lost_connection()]));
        assert!(locker.try_lock("e").await.is_err());

        let wrong_type = || Err(Error::WrongType("a string".into()));
        let locker = Locker::new(Scripted::new(vec![wrong_type()]));
        let started = Instant::now();
        let error = locker.lock_with("e", &options).await.unwrap_err();
        assert!(matches!(error, Error::WrongType(_)));
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "final errors are not retried"
        );

        let locker = Locker::new(Scripted::new((0..100).map(|_| lost_connection()).collect()));
        let started = Instant::now();
        let error = locker.lock_with("e", &options).await.unwrap_err();
        assert!(matches!(error, Error::ConnectionLost(_)));
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
        let options = LockOptions::new().fixed_lease(Duration::from_secs(10));
        let guard = locker.lock_with("d", &options).await.unwrap();
        assert_eq!(guard.valid_until(), sent_at + Duration::from_millis(9700));
        let watched = LockOptions::new().watchdog_lease(Duration::from_secs(3));
        let guard = locker.lock_with("w", &watched).await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!guard.is_lost());
        assert!(guard.remaining() <= Duration::from_millis(2700));
    }
}

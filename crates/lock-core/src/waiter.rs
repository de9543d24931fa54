//! The waiter: tries to acquire, and while the lock (or the permits, or whatever the attempts
//! are for) is held elsewhere waits for a release notification, a timer capped by the holder's
//! TTL, or the deadline, then tries again. The loop is the same for every primitive; what one
//! attempt is and where its notifications come from is an [`Attempts`] implementation (the
//! lock's is [`LockAttempts`]).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::contract::{AcquireRequest, LockBackend};
use crate::error::{Error, Result};
use crate::notify::ReleaseWatch;
use crate::options::Wait;
use crate::shared::{Attempted, LockerShared, PendingGrant};

/// What one attempt found.
pub(crate) enum Tried<T> {
    /// Won: the wait is over.
    Won(T),
    /// Held by someone else: wait for a notification, at most `recheck` (the holder's remaining
    /// lease; `None`: unknown, look again within a second). With `pass_on`, another waiter may
    /// win where this one lost (a semaphore with too few permits for this waiter, but some):
    /// a waiter woken for nothing hands the wake-up on, once per announcement.
    Busy {
        recheck: Option<Duration>,
        pass_on: bool,
    },
    /// No single holder to wait for: try again after `retry_after`, not on a notification.
    Contended { retry_after: Duration },
}

impl<B: LockBackend> From<Attempted<B>> for Tried<PendingGrant<B>> {
    fn from(attempted: Attempted<B>) -> Self {
        match attempted {
            Attempted::Won(grant) => Tried::Won(grant),
            Attempted::Held { ttl } => Tried::Busy {
                recheck: ttl,
                pass_on: false,
            },
            Attempted::Contended { retry_after } => Tried::Contended { retry_after },
        }
    }
}

/// One primitive's attempts and notifications, for the [`Waiter`].
pub(crate) trait Attempts: Sync {
    /// What a won attempt hands out.
    type Won: Send;

    /// Whether an attempt that failed with an ambiguous error (it may have applied) is tried
    /// again within the wait. Yes for the lock, whose attempt cleans up after itself; no for a
    /// counter nobody owns (a semaphore), where a second attempt could take twice.
    const RETRIES_AMBIGUOUS: bool = true;

    /// One attempt, never waiting.
    fn attempt(&self) -> impl Future<Output = Result<Tried<Self::Won>>> + Send;

    /// Registers for the notifications that make another attempt worth it.
    fn register(&self) -> impl Future<Output = Result<ReleaseWatch>> + Send;

    /// The wait ended without a win after attempts that may have left something behind while
    /// waiting (a fair lock's queue entry): the wait's deadline passed, an error ended it, or
    /// its future was dropped. Runs inside `Drop`: must not block (spawn).
    fn gave_up(&self) {}

    /// As [`gave_up`](Self::gave_up), for a wait that ended by itself (its deadline, an error):
    /// done before the call returns, so the caller's next wait cannot be overtaken by it.
    fn leave(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// A wait after a first attempt that did not win ended with `outcome` (`granted`, `held`,
    /// `error`) after `waited`.
    fn waited(&self, outcome: &'static str, waited: Duration) {
        let _ = (outcome, waited);
    }

    /// The first attempt of a call that may wait until `deadline`: as
    /// [`attempt`](Self::attempt), where a lock lets a waiter of the same locker that a
    /// release just woke try first (see `crate::local_line`).
    fn first_attempt(
        &self,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Tried<Self::Won>>> + Send {
        let _ = deadline;
        self.attempt()
    }

    /// The wait is registered for notifications and counts as waiting, until
    /// [`stops_waiting`](Self::stops_waiting).
    fn starts_waiting(&self) {}

    /// See [`starts_waiting`](Self::starts_waiting); also when the wait's future is dropped.
    fn stops_waiting(&self) {}

    /// An attempt made while waiting came back.
    fn tried_while_waiting(&self) {}
}

/// Keeps a wait counted as waiting ([`Attempts::starts_waiting`]) until dropped.
struct Counted<'a, A: Attempts>(&'a A);

impl<A: Attempts> Drop for Counted<'_, A> {
    fn drop(&mut self) {
        self.0.stops_waiting();
    }
}

/// The lock's attempts: [`LockerShared::attempt`] (which cleans up after outcomes of unknown
/// effect) and the backend's release notifications.
pub(crate) struct LockAttempts<'a, B: LockBackend> {
    pub locker: &'a Arc<LockerShared<B>>,
    pub request: AcquireRequest<'a>,
}

impl<B: LockBackend> Attempts for LockAttempts<'_, B> {
    type Won = PendingGrant<B>;

    async fn attempt(&self) -> Result<Tried<PendingGrant<B>>> {
        self.locker.attempt(self.request).await.map(Tried::from)
    }

    async fn register(&self) -> Result<ReleaseWatch> {
        self.locker
            .backend
            .watch_releases_of(self.request.name, self.request.owner_field)
            .await
    }

    fn gave_up(&self) {
        if !self.locker.backend.queues() {
            return;
        }
        // In line now, sent in the background: the owner's next attempt comes after it.
        let leave = self
            .locker
            .issue_leave(self.request.name, self.request.owner_field);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(leave);
        } // else the queue drops the entry on its own after its timeout
    }

    async fn leave(&self) {
        if !self.locker.backend.queues() {
            return;
        }
        self.locker
            .issue_leave(self.request.name, self.request.owner_field)
            .await;
    }

    fn waited(&self, outcome: &'static str, waited: Duration) {
        crate::telemetry::waited(outcome, waited);
    }

    async fn first_attempt(&self, deadline: Option<Instant>) -> Result<Tried<PendingGrant<B>>> {
        // A fair lock's queue on the store decides its order.
        if !self.request.waits || self.locker.backend.queues() {
            return self.attempt().await;
        }
        self.locker
            .first_attempt(self.request, deadline)
            .await
            .map(Tried::from)
    }

    fn starts_waiting(&self) {
        self.locker.local.enter(self.request.name);
    }

    fn stops_waiting(&self) {
        self.locker.local.leave(self.request.name);
    }

    fn tried_while_waiting(&self) {
        self.locker.local.tried(self.request.name);
    }
}

/// A wait under way: dropped before it was settled (won, or given up and left), that is with
/// its future dropped or an early error, it tells the attempts ([`Attempts::gave_up`]).
struct Unwon<'a, A: Attempts> {
    attempts: &'a A,
    settled: bool,
}

impl<A: Attempts> Drop for Unwon<'_, A> {
    fn drop(&mut self) {
        if !self.settled {
            self.attempts.gave_up();
        }
    }
}

/// How long a waiter sleeps at most when the holder's lock has no TTL (a key without expiry):
/// a release notification still wakes it earlier.
const RECHECK_WITHOUT_TTL: Duration = Duration::from_secs(1);

/// Delay before retrying after a retryable error; it doubles with each error in a row, up to
/// [`ERROR_RETRY_MAX`].
const ERROR_RETRY_DELAY: Duration = Duration::from_millis(50);
/// How often a waiter polls when it could not register for release notifications.
const POLL_WITHOUT_NOTIFICATIONS: Duration = Duration::from_millis(250);
/// The longest delay between retries after errors.
const ERROR_RETRY_MAX: Duration = Duration::from_secs(1);
/// Without a wait deadline (`lock()`), how long retryable errors in a row are ridden through
/// (a reconnect, a failover) before the last one is returned: a store down for longer is not
/// waited for forever.
pub(crate) const ERRORS_RIDDEN_THROUGH: Duration = Duration::from_secs(30);

/// The retryable errors in a row of one wait: since when, and how many.
#[derive(Default)]
struct ErrorStreak {
    since: Option<Instant>,
    count: u32,
}

impl ErrorStreak {
    /// Counts an error at `now`; the delay before the next attempt (doubling, jittered).
    fn add(&mut self, now: Instant) -> Duration {
        self.since.get_or_insert(now);
        self.count = self.count.saturating_add(1);
        let doubled = ERROR_RETRY_DELAY.saturating_mul(1 << self.count.saturating_sub(1).min(8));
        jittered(doubled.min(ERROR_RETRY_MAX))
    }
}

/// A won attempt: what it won ([`Attempts::Won`]: the lock's pending grant, the permits left)
/// and when it was sent. "Won" is the waiter's one word for it, from [`Tried::Won`] through
/// [`Step::Won`] to this.
pub(crate) struct Won<T> {
    pub grant: T,
    /// When the winning attempt was sent: a lease runs from there.
    pub sent_at: Instant,
}

/// One call's wait.
pub(crate) struct Waiter<A: Attempts> {
    attempts: A,
    deadline: Option<Instant>,
    no_wait: bool,
}

/// Where the first attempt leaves the call.
enum FirstAttempt<T> {
    /// Done: won, or not won and not to wait.
    Done(Option<Won<T>>),
    /// Wait for the lock, after registering for release notifications.
    Wait {
        /// Try again at this instant, not before (`None`: at once, after registering).
        retry_at: Option<Instant>,
        /// The transient error of the first attempt: the answer if the wait ends while
        /// registering.
        error: Option<Error>,
        /// The errors in a row so far (the first attempt's, if it failed).
        errors: ErrorStreak,
    },
}

/// Hands a consumed release notification to the next local waiter when a woken waiter goes away
/// (cancelled or failed) before using it.
struct Waiting {
    watch: ReleaseWatch,
    woken: bool,
    /// The watch's announcement count when this waiter last handed a wake-up on: it hands on
    /// at most one per announcement, so two waiters that both need more than is there do not
    /// wake each other for ever.
    passed_on_at: std::cell::Cell<Option<u64>>,
}

impl Waiting {
    /// Hands the wake-up this waiter used for nothing to the next local waiter (the oldest one:
    /// this waiter's own wait was armed last), unless it already did since the last
    /// announcement.
    fn pass_on_once(&self) {
        let announced = self.watch.announcements();
        if self.passed_on_at.replace(Some(announced)) != Some(announced) {
            self.watch.pass_on();
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.woken {
            self.watch.pass_on();
        }
    }
}

impl<A: Attempts> Waiter<A> {
    /// A wait made of `attempts` under `wait`, starting now.
    pub fn new(attempts: A, wait: Wait) -> Self {
        let deadline = match wait {
            Wait::Upto(wait) => Some(Instant::now() + wait),
            Wait::No | Wait::Forever => None,
        };
        Waiter {
            attempts,
            deadline,
            no_wait: wait == Wait::No,
        }
    }

    /// Takes the lock, or gives up when the wait policy says so: register for release
    /// notifications, then try, then wait for a notification, a timer capped by the holder's
    /// remaining lease, or the deadline, whichever comes first; repeat. The first attempt is
    /// made before registering, so an uncontended lock costs one round trip.
    ///
    /// # Errors
    ///
    /// As [`crate::Locker::lock_with`].
    ///
    /// # Cancel safety
    ///
    /// As [`crate::Locker::lock`].
    pub async fn acquire(&self) -> Result<Option<Won<A::Won>>> {
        let mut unwon = Unwon {
            attempts: &self.attempts,
            settled: false,
        };
        let first = self.first_attempt().await;
        // A single attempt (`no_wait`) leaves nothing behind to undo.
        if self.no_wait || matches!(first, Ok(FirstAttempt::Done(Some(_)))) {
            unwon.settled = true;
        }
        let (retry_at, first_error, errors) = match first? {
            FirstAttempt::Done(granted) => return Ok(granted),
            FirstAttempt::Wait {
                retry_at,
                error,
                errors,
            } => (retry_at, error, errors),
        };
        // After an error the first delay ends early on a notification (see `wait_and_retry`).
        let first_delay = retry_at.map(|at| (at, first_error.is_some()));
        let waiting_since = Instant::now();
        tracing::debug!("not granted at the first attempt: waiting");
        let waited = async {
            let Some(waiting) = self.register_for_releases(first_error).await? else {
                return Ok(None);
            };
            self.attempts.starts_waiting();
            let _counted = Counted(&self.attempts);
            self.wait_and_retry(waiting, first_delay, errors).await
        }
        .await;
        if !matches!(waited, Ok(Some(_))) {
            // Ended by itself: leave now, before the caller can start its next wait (a leave
            // spawned in the background could land after that wait has queued again).
            self.attempts.leave().await;
        }
        unwon.settled = true;
        let outcome = match &waited {
            Ok(Some(_)) => "granted",
            Ok(None) => "held",
            Err(_) => "error",
        };
        self.attempts.waited(outcome, waiting_since.elapsed());
        waited
    }

    /// The fast path: an uncontended lock costs one round trip and no registration.
    async fn first_attempt(&self) -> Result<FirstAttempt<A::Won>> {
        let sent_at = Instant::now();
        // A single attempt goes straight to `attempt` (so does a lock's, in `first_attempt`):
        // routing it through `first_attempt` too was measured to make the futures that hold a
        // waiter (a spawned read-write `read()`) deeper than rustc's default layout recursion
        // limit, so application code spawning them would not compile.
        let first = if self.no_wait {
            self.attempts.attempt().await
        } else {
            self.attempts.first_attempt(self.deadline).await
        };
        let mut errors = ErrorStreak::default();
        Ok(
            match next_step::<A>(
                first,
                Instant::now(),
                self.deadline,
                self.no_wait,
                &mut errors,
            )? {
                Step::Won(grant) => FirstAttempt::Done(Some(Won { grant, sent_at })),
                Step::GiveUp => FirstAttempt::Done(None),
                // The lock may be free again by now: register, then try again at once.
                Step::OnRelease { .. } => FirstAttempt::Wait {
                    retry_at: None,
                    error: None,
                    errors,
                },
                Step::RetryAt { at, error } => FirstAttempt::Wait {
                    retry_at: Some(at),
                    error,
                    errors,
                },
            },
        )
    }

    /// Subscribes to release notifications of the lock; `None` when the deadline passed while
    /// registering and the first attempt found no error to report.
    ///
    /// # Errors
    ///
    /// The registration's error; `first_error` when the deadline passed while registering.
    async fn register_for_releases(&self, first_error: Option<Error>) -> Result<Option<Waiting>> {
        let register = self.attempts.register();
        let registered = match self.deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, register).await {
                Ok(registered) => registered,
                // Out of time while registering: the first attempt's answer stands.
                Err(_) => return first_error.map_or(Ok(None), Err),
            },
            None => register.await,
        };
        let watch = match registered {
            Ok(watch) => watch,
            // The notifications are down with the store (a reconnect, a failover): wait by
            // polling instead, and register again at each look; the attempts themselves decide
            // when the wait ends.
            Err(error) if error.is_retryable() => {
                tracing::debug!(%error, "no release notifications; polling for now");
                ReleaseWatch::polling_for_now(POLL_WITHOUT_NOTIFICATIONS)
            }
            Err(error) => return Err(error),
        };
        Ok(Some(Waiting {
            watch,
            woken: false,
            passed_on_at: std::cell::Cell::new(None),
        }))
    }

    /// Registers again for a wait that polls only while the notifications are down
    /// ([`ReleaseWatch::polling_for_now`]), and keeps the new watch: once the notifications
    /// are back the wait is woken by releases again, instead of losing every race for a
    /// contended lock to waiters that are. A registration that fails (or outlasts the
    /// deadline) leaves the wait polling.
    async fn register_again(&self, waiting: &mut Waiting) {
        let register = self.attempts.register();
        let registered = match self.deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, register)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Timeout {
                        after: Duration::ZERO,
                    })
                }),
            None => register.await,
        };
        if let Ok(watch) = registered {
            // The old watch is dropped without a wake-up to hand on: it was a polling one.
            waiting.watch = watch;
            waiting.woken = false;
            waiting.passed_on_at.set(None);
        }
    }

    /// The wait loop: (sleep until `retry_at` if set), try, and if the lock is held, wait for a
    /// release notification, the holder's TTL or the deadline; repeat.
    ///
    /// A retry after errors in a row (their delay doubling up to 1 s) also ends early on a
    /// notification: the lock was released, or the store's notifications came back after an
    /// outage (the backend wakes every waiter then). A waiter sleeping out its delay would
    /// leave a released lock free that long, and a fair lock's head would hold up every
    /// waiter behind it. Back-off still bounds the attempts: a wake-up this waiter used for
    /// nothing is handed on once per announcement, so at most one early attempt follows each.
    /// A contended lock's delay ([`Tried::Contended`]: no single holder, as a composite split
    /// between owners) is slept out whole: it is there to set competing owners apart, and
    /// waking them all at each release would have them split the nodes again.
    async fn wait_and_retry(
        &self,
        mut waiting: Waiting,
        mut sleep_until: Option<(Instant, bool)>,
        mut errors: ErrorStreak,
    ) -> Result<Option<Won<A::Won>>> {
        let deadline = self.deadline;
        loop {
            // A delay slept out whole, or, after an error, until a notification (see above).
            if let Some((at, wakes_early)) = sleep_until.take() {
                match waiting.watch.notified().filter(|_| wakes_early) {
                    Some(notified) => tokio::select! {
                        () = notified => waiting.woken = true,
                        () = tokio::time::sleep_until(at) => {}
                    },
                    None => tokio::time::sleep_until(at).await,
                }
            }
            if waiting.watch.is_for_now() {
                self.register_again(&mut waiting).await;
            }
            // Arm the notification before the attempt, so a release between the attempt and the
            // wait still wakes the wait.
            let mut notified = pin!(waiting.watch.notified());
            if let Some(notified) = notified.as_mut().as_pin_mut() {
                notified.enable();
            }
            let sent_at = Instant::now();
            let outcome = self.attempts.attempt().await;
            self.attempts.tried_while_waiting();
            let now = Instant::now();
            // A wake-up is used by a win, or by finding the lock taken again (another waiter
            // used it). Any other end of this attempt hands it to the next local waiter: an
            // error or a given-up wait returning here leave `woken` set, and `Waiting`'s drop
            // hands it on; a retry after a delay hands it on at once.
            let wake_at = match next_step::<A>(outcome, now, deadline, false, &mut errors)? {
                Step::Won(grant) => {
                    waiting.woken = false;
                    return Ok(Some(Won { grant, sent_at }));
                }
                Step::GiveUp => return Ok(None),
                Step::RetryAt { at, error } => {
                    if std::mem::take(&mut waiting.woken) {
                        waiting.pass_on_once();
                    }
                    // After an error: by `at`, or at a notification (armed before the
                    // attempt). Contended: `at`, slept out whole (see above).
                    if error.is_none() {
                        sleep_until = Some((at, false));
                        continue;
                    }
                    at
                }
                Step::OnRelease { ttl, pass_on } => {
                    if std::mem::take(&mut waiting.woken) && pass_on {
                        waiting.pass_on_once();
                    }
                    recheck_at(now, ttl, &waiting.watch, deadline)
                }
            };
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
}

/// When a waiter that found the lock held looks again without a notification: at the end of
/// the holder's `ttl`, sooner on a polling watch, by the deadline at the latest.
fn recheck_at(
    now: Instant,
    ttl: Option<Duration>,
    watch: &ReleaseWatch,
    deadline: Option<Instant>,
) -> Instant {
    // A foreign holder may have set any PTTL; keep the instant arithmetic in range.
    let mut sleep_for = ttl
        .unwrap_or(RECHECK_WITHOUT_TTL)
        .min(crate::options::MAX_DURATION);
    if let Some(every) = watch.poll_interval() {
        sleep_for = sleep_for.min(jittered(every));
    }
    let wake_at = now + sleep_for.max(Duration::from_millis(1));
    deadline.map_or(wake_at, |deadline| wake_at.min(deadline))
}

/// What the waiter does after one attempt.
enum Step<T> {
    /// The attempt won.
    Won(T),
    /// The wait is over without the lock.
    GiveUp,
    /// Held by someone: wait for a release notification, at most this long (the holder's TTL).
    OnRelease {
        ttl: Option<Duration>,
        pass_on: bool,
    },
    /// Try again at this instant, not before (no clear holder, or the transient error kept
    /// here, which is the answer if the wait ends first).
    RetryAt { at: Instant, error: Option<Error> },
}

/// Decides the next step after an attempt made at `now`.
///
/// Errors end the wait, except retryable ones (ambiguous ones only where `A` retries them) (a composite whose node blipped, a reconnecting
/// server, a failover) while the wait allows: those are retried after a delay that doubles from
/// 50 ms to 1 s (jittered), and the last one is returned when the wait ends. With a deadline the
/// wait allows until the deadline; without one (`lock()`) for [`ERRORS_RIDDEN_THROUGH`] of
/// errors in a row, so a store down for longer does not hang the caller; with `no_wait`
/// (`try_lock()`) not at all.
fn next_step<A: Attempts>(
    outcome: Result<Tried<A::Won>>,
    now: Instant,
    deadline: Option<Instant>,
    no_wait: bool,
    errors: &mut ErrorStreak,
) -> Result<Step<A::Won>> {
    let out_of_time = no_wait || deadline.is_some_and(|deadline| now >= deadline);
    let retry_at = |after: Duration, error: Option<Error>| {
        let at = now + after.min(crate::options::MAX_DURATION);
        Step::RetryAt {
            at: deadline.map_or(at, |deadline| at.min(deadline)),
            error,
        }
    };
    if outcome.is_ok() {
        *errors = ErrorStreak::default();
    }
    // Without a deadline, errors are ridden through for a while, not forever.
    let may_retry = !out_of_time
        && match deadline {
            Some(_) => true,
            None => errors
                .since
                .is_none_or(|since| now.saturating_duration_since(since) < ERRORS_RIDDEN_THROUGH),
        };
    match outcome {
        Ok(Tried::Won(won)) => Ok(Step::Won(won)),
        Ok(_) if out_of_time => Ok(Step::GiveUp),
        Ok(Tried::Busy { recheck, pass_on }) => Ok(Step::OnRelease {
            ttl: recheck,
            pass_on,
        }),
        Ok(Tried::Contended { retry_after }) => Ok(retry_at(retry_after, None)),
        Err(error)
            if error.is_retryable()
                && may_retry
                && (A::RETRIES_AMBIGUOUS || !error.is_ambiguous()) =>
        {
            let delay = errors.add(now);
            tracing::debug!(%error, ?delay, "acquire failed; retrying within the wait");
            Ok(retry_at(delay, Some(error)))
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

//! The contract every backend implements.
//!
//! A backend knows how to run *one* step against its store: one acquire attempt that never waits,
//! one release, one batch of renewals, and so on. Waiting, watchdogs, guards and reentrancy
//! bookkeeping live in [`crate::Locker`], shared by all backends.
//!
//! [`LockBackend`] uses native `async fn` in traits and is what backends implement; its
//! documentation is the contract, method by method. [`DynLockBackend`] is its object-safe twin
//! (boxed futures), implemented for every `LockBackend` by a blanket impl, so composites can hold
//! `Vec<Arc<dyn DynLockBackend>>` of mixed kinds. `Arc<dyn DynLockBackend>` implements
//! `LockBackend` again, so a boxed backend plugs into [`crate::Locker`] like any other.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::notify::ReleaseWatch;

/// One attempt to take a lock; see [`LockBackend::try_acquire`].
#[derive(Clone, Copy, Debug)]
pub struct AcquireRequest<'a> {
    /// The lock name (already checked with [`LockBackend::check_name`]).
    pub name: &'a str,
    /// The owner field to grant the hold to: the string `<client id>:<holder id>` written on the
    /// store for the holder (a [`crate::Owner`] of this backend's [`LockBackend::client_id`]).
    /// Opaque to the backend: compare it byte for byte.
    pub owner_field: &'a str,
    /// The lease to set on success.
    pub lease: Duration,
    /// Whether to hand out a fencing token.
    pub fencing: bool,
    /// How many holds of `owner_field` on this lock the caller knows it has (its live
    /// guards), read afresh for every attempt. After an attempt of unknown outcome the
    /// [`crate::Locker`] lowers the count back to this with [`LockBackend::abandon`]; a backend
    /// that must undo an attempt on its own (a composite whose nodes answered differently) does
    /// the same. Other backends can ignore it.
    pub known_holds: u32,
    /// Whether the caller waits for the lock when this attempt does not get it (`false` for a
    /// single attempt, `try_lock`). A backend that [`queues`](LockBackend::queues) its waiters
    /// queues only a caller that waits. Other backends can ignore it.
    pub waits: bool,
}

/// What one acquire attempt found; see [`LockBackend::try_acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireOutcome {
    /// The lock is ours (first hold or re-entry).
    Acquired(Grant),
    /// Someone else holds it; nothing changed.
    Held {
        /// How long the current hold can still last at most, when the store knows; waiters cap
        /// their sleep by it. `None`: unknown, or the hold has no expiry.
        ttl: Option<Duration>,
    },
    /// The attempt failed without one clear holder to wait for (composites: the nodes split
    /// between owners, or did not all answer) and everything it took was given back. Retry after
    /// `retry_after`, not earlier and not on a release notification: the random delay keeps
    /// competing clients from colliding again.
    Contended {
        /// How long to wait before the next attempt.
        retry_after: Duration,
    },
}

/// The details of a granted acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The owner field's hold count after this grant (1 for a first hold).
    pub hold_count: u32,
    /// The fencing token, exactly when one was asked for. Per name it is greater than every
    /// token handed out before (see [`LockBackend::try_acquire`] for the rule and where a
    /// backend cannot ensure it).
    pub fencing_token: Option<u64>,
}

/// What a release did; see [`LockBackend::release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a release may report that the lock was no longer held"]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The hold count reached zero: the lock is free and waiters were notified.
    Released,
    /// The owner field still holds the lock this many times (a reentrant hold was given back);
    /// the lease runs at least the release's `lease` from now.
    StillHeld {
        /// The remaining hold count.
        hold_count: u32,
    },
    /// The owner field did not hold the lock (never taken, released twice, expired or
    /// force-released). No hold was given back and no other holder's hold was touched.
    NotHeld,
    /// Composites only: enough nodes gave the hold back (for the lock to be free, or, for a
    /// reentrant release, for the remaining count to stand), but some nodes could not be
    /// reached (errors or timeouts). A guard's release is then followed by
    /// [`LockBackend::abandon`] down to the holds the owner still counts, which gives back
    /// what is left on those nodes once they answer (or leaves a debt for the owner's next
    /// call on the name); what is left otherwise expires with its lease.
    /// (Nodes that answered "not held" never had the hold, or had lost it: nothing is left
    /// there, and the outcome is [`ReleaseOutcome::Released`].)
    PartlyReleased {
        /// The nodes that released the lock.
        released: u32,
        /// The number of nodes.
        nodes: u32,
    },
}

impl ReleaseOutcome {
    /// Whether the release gave back a hold that the owner really had.
    #[must_use]
    pub fn was_held(&self) -> bool {
        !matches!(self, ReleaseOutcome::NotHeld)
    }
}

/// What one renewal in a batch found; see [`LockBackend::renew`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewOutcome {
    /// The lock was still held by the owner field; its lease now runs at least `lease` from the
    /// time the renewal was sent.
    Renewed,
    /// The lock is surely no longer held by the owner field (deleted, expired or taken over):
    /// the lease is lost. Nothing was created.
    NotHeld,
    /// Not decided this time (composites: too few nodes answered either way). The watchdog
    /// retries until the lease's validity deadline.
    Unknown,
}

impl RenewOutcome {
    /// The outcome for a plain yes/no answer.
    #[must_use]
    pub fn from_held(still_ours: bool) -> Self {
        if still_ours {
            RenewOutcome::Renewed
        } else {
            RenewOutcome::NotHeld
        }
    }
}

/// One lease to renew in a batch; see [`LockBackend::renew`].
#[derive(Clone, Copy, Debug)]
pub struct Renewal<'a> {
    /// The lock name.
    pub name: &'a str,
    /// The owner field whose hold is renewed (`<client id>:<holder id>`, as in
    /// [`AcquireRequest::owner_field`]).
    pub owner_field: &'a str,
    /// The new lease.
    pub lease: Duration,
}

/// A snapshot of one lock as the store sees it; see [`LockBackend::inspect`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// Every owner field with its hold count. Empty when the lock is free.
    pub holders: Vec<(String, u32)>,
    /// The remaining lease, when the lock is held and has one.
    pub ttl: Option<Duration>,
}

impl LockState {
    /// A state with these holders and this remaining lease.
    #[must_use]
    pub fn new(holders: Vec<(String, u32)>, ttl: Option<Duration>) -> Self {
        LockState { holders, ttl }
    }

    /// Whether anyone holds the lock.
    #[must_use]
    pub fn is_locked(&self) -> bool {
        !self.holders.is_empty()
    }

    /// The hold count of one owner field (0 when it does not hold the lock).
    #[must_use]
    pub fn hold_count(&self, owner_field: &str) -> u32 {
        self.holders
            .iter()
            .find(|(field, _)| field == owner_field)
            .map_or(0, |(_, count)| *count)
    }
}

/// The contract a lock store implements: one step against the store per method.
///
/// The [`crate::Locker`] builds everything else on these steps (waiting, guards, the watchdog,
/// reentrancy bookkeeping, the cleanup after outcomes it could not see), and its correctness
/// rests on every backend keeping these rules:
///
/// 1. **Each step is indivisible.** [`try_acquire`](Self::try_acquire),
///    [`release`](Self::release), [`abandon`](Self::abandon),
///    [`force_release`](Self::force_release) and each entry of [`renew`](Self::renew) read,
///    decide and write as one step, atomic with respect to each other and to every other client
///    of the store (on Redis: one Lua script or one native command); [`inspect`](Self::inspect)
///    reads one consistent snapshot. No method waits for the lock.
/// 2. **One owner field at a time.** A grant goes only to a free lock or to the owner field that
///    already holds it (a counted re-entry).
/// 3. **Leases expire in the store.** Every hold has a lease that the store enforces (or that is
///    judged by the store's clock), so a hold nobody gives back (a crashed holder, a grant whose
///    answer was lost) ends by itself. A step that sets a lease only lengthens it: the expiry
///    becomes at least `now + lease`, never earlier than it was, so a short nested hold cannot
///    cut short the lease the outer holds count on.
/// 4. **Answers are exact.** `Ok` means the step was applied once, with the outcome reported:
///    `Held` means nothing was granted, `NotHeld` that the owner field had nothing to give back
///    and no other holder's hold was touched.
/// 5. **An error says whether the step may have applied.** An *ambiguous* error
///    ([`Error::Timeout`](crate::Error::Timeout) or
///    [`Error::ConnectionLost`](crate::Error::ConnectionLost), see
///    [`Error::is_ambiguous`](crate::Error::is_ambiguous)) exactly when the step may have been
///    applied (sent, and no answer came back); any other error only when it surely was not. The
///    Locker undoes an ambiguous acquire or release with [`abandon`](Self::abandon), and
///    trusts a definite error: it undoes nothing. (An ambiguous error for a step that did not
///    apply costs one needless cleanup; a definite error for an acquire that did apply leaves
///    a hold nobody knows of, which keeps everyone else out until its lease ends.)
/// 6. **Fencing tokens only grow**, per name, across every grant of every client, re-entries
///    included, and across restarts of the store where the backend can ensure it (see
///    [`try_acquire`](Self::try_acquire)).
/// 7. **No release goes unnoticed** by a waiter registered with
///    [`watch_releases`](Self::watch_releases).
/// 8. **Any future may be dropped** at any `.await` (a cancelled `lock()`, the watchdog's
///    deadline on a renewal); the step it carried may then have applied or not, and the store
///    and the backend must stay usable either way. The Locker notes a debt for a dropped
///    acquire, release or cleanup and sets the owner's count with [`abandon`](Self::abandon)
///    in the background; what is left if that fails ends with its lease (rule 3).
/// 9. **A finished step is finished.** The Locker sends one owner field's steps on one name one
///    at a time, in the order its program made them: the next only once the previous future has
///    completed (see `docs/design.md`, "One order per name and owner"). So when a future
///    completes, nothing of its step may still be on its way to the store, where it could land
///    after the next one: a composite never drops a node's step still running, and a backend
///    that keeps a step to send later answers an error, not `Ok`.
///
/// Names reaching these methods have passed [`check_name`](Self::check_name); leases are
/// between [`MIN_LEASE`](crate::options::MIN_LEASE) and
/// [`MAX_DURATION`](crate::options::MAX_DURATION). Owner fields (the `owner_field` parameters,
/// [`AcquireRequest::owner_field`], [`Renewal::owner_field`]) are the strings `<client id>:<holder id>` that
/// the Locker builds from [`client_id`](Self::client_id) and a [`crate::Owner`]; the backend
/// stores and compares them as they are.
///
/// # Example
///
/// A backend over a store client that has no timeouts of its own puts one on every step, and
/// reports it as [`Error::Timeout`](crate::Error::Timeout): ambiguous, since the step may have
/// been applied without its answer arriving. Here it wraps another backend:
///
/// ```
/// use std::future::Future;
/// use std::time::Duration;
///
/// use lock_core::{
///     AcquireOutcome, AcquireRequest, Error, LockBackend, LockState, Locker, MemoryBackend,
///     ReleaseOutcome, ReleaseWatch, RenewOutcome, Renewal, Result,
/// };
///
/// struct Bounded<B> {
///     inner: B,
///     limit: Duration,
/// }
///
/// impl<B: LockBackend> Bounded<B> {
///     /// The step, or `Error::Timeout` when it does not answer in time (and may have applied).
///     async fn bounded<T>(&self, step: impl Future<Output = Result<T>>) -> Result<T> {
///         tokio::time::timeout(self.limit, step)
///             .await
///             .unwrap_or(Err(Error::Timeout { after: self.limit }))
///     }
/// }
///
/// impl<B: LockBackend> LockBackend for Bounded<B> {
///     fn client_id(&self) -> &str {
///         self.inner.client_id()
///     }
///     // The inner store's name rules, drift and reentrancy still apply.
///     fn check_name(&self, name: &str) -> Result<()> {
///         self.inner.check_name(name)
///     }
///     fn clock_drift(&self, lease: Duration) -> Duration {
///         self.inner.clock_drift(lease)
///     }
///     fn reentrant(&self) -> bool {
///         self.inner.reentrant()
///     }
///     fn kind(&self) -> &'static str {
///         self.inner.kind()
///     }
///     async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
///         self.bounded(self.inner.try_acquire(request)).await
///     }
///     async fn release(
///         &self,
///         name: &str,
///         owner_field: &str,
///         lease: Duration,
///     ) -> Result<ReleaseOutcome> {
///         self.bounded(self.inner.release(name, owner_field, lease)).await
///     }
///     async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
///         self.bounded(self.inner.renew(renewals)).await
///     }
///     async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
///         self.bounded(self.inner.abandon(name, owner_field, keep)).await
///     }
///     async fn force_release(&self, name: &str) -> Result<bool> {
///         self.bounded(self.inner.force_release(name)).await
///     }
///     async fn inspect(&self, name: &str) -> Result<LockState> {
///         self.bounded(self.inner.inspect(name)).await
///     }
///     async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
///         self.bounded(self.inner.watch_releases(name)).await
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<()> {
/// let backend = Bounded { inner: MemoryBackend::new(), limit: Duration::from_millis(500) };
/// let locker = Locker::new(backend);
/// let guard = locker.lock("orders:42").await?;
/// assert_eq!(guard.release().await?, ReleaseOutcome::Released);
/// # Ok(())
/// # }
/// ```
///
/// `examples/src/custom_backend.rs` in the repository is a complete backend over a
/// `Mutex<HashMap>`, and `docs/writing-a-backend.md` is the guide to writing one and running the
/// conformance suite on it; [`crate::MemoryBackend`] is another implementation to read.
pub trait LockBackend: Send + Sync + 'static {
    /// The client id written before the holder id in owner fields.
    ///
    /// Unique per backend instance among every client of the store, in every process (the
    /// Redis backend and [`crate::MemoryBackend`] use a UUID v4, see [`crate::new_client_id`]),
    /// and the same for the instance's whole life; clones of one instance share it.
    fn client_id(&self) -> &str;

    /// Checks a lock name before any I/O. The default applies [`crate::options::check_name`]
    /// (not empty, at most [`MAX_NAME_LEN`](crate::options::MAX_NAME_LEN) bytes); backends with
    /// extra rules (Redis hash tags) call it first, then add theirs. Never loosen it.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] when the name cannot be used.
    fn check_name(&self, name: &str) -> Result<()> {
        crate::options::check_name(name)
    }

    /// How much of a lease of this length the holder must not count on: guards treat a lease as
    /// valid until `send time + lease - clock_drift(lease)`. Zero (the default) for a single
    /// store; composites over independent clocks return a drift allowance (RedLock:
    /// `lease × 1 % + 2 ms`).
    fn clock_drift(&self, lease: Duration) -> Duration {
        let _ = lease;
        Duration::ZERO
    }

    /// Whether an owner may take a lock it already holds (a re-entry, counted). `true` by
    /// default. A backend that answers `false` (a store that keeps at most one hold per owner
    /// field) never sees a re-entry from a [`crate::Locker`]: it refuses one with
    /// [`crate::Error::NotReentrant`] before any I/O, since the store would otherwise make the
    /// owner wait for itself.
    fn reentrant(&self) -> bool {
        true
    }

    /// A short name of the lock this backend keeps, recorded as the `kind` field of the
    /// `distlock.acquire`, `distlock.release` and `distlock.renew` spans: `"reentrant"` and
    /// `"fast"` (Redis), `"redlock"` and `"multi"` (composites), `"memory"`. `"custom"` by
    /// default.
    ///
    /// ```
    /// use lock_core::{LockBackend, MemoryBackend};
    ///
    /// assert_eq!(MemoryBackend::new().kind(), "memory");
    /// ```
    fn kind(&self) -> &'static str {
        "custom"
    }

    /// One attempt to take the lock for the owner field `request.owner_field`, without waiting.
    ///
    /// # Atomicity
    ///
    /// One indivisible step: if the lock is free (absent or expired) or `request.owner_field` already
    /// holds it, add one to that owner field's hold count, make the lock's expiry at least
    /// `now + request.lease` (a first hold sets it, a re-entry only lengthens it) and, when
    /// `request.fencing`, take the name's next fencing token. Otherwise change nothing.
    ///
    /// # Outcomes
    ///
    /// - [`AcquireOutcome::Acquired`]: the hold is taken. [`Grant::hold_count`] is the owner
    ///   field's count after it (1 for a first hold); [`Grant::fencing_token`] is `Some` exactly
    ///   when `request.fencing`. The guard counts the lease as valid until the send time plus
    ///   the lease, minus [`clock_drift`](Self::clock_drift).
    /// - [`AcquireOutcome::Held`]: another owner field holds the lock; nothing changed. `ttl`
    ///   is how long that hold can still last at most: waiters never sleep past it, and
    ///   `Some(Duration::ZERO)` makes them look again at once. With `None` (unknown, or no
    ///   expiry) they look again every second, or at a release notification.
    /// - [`AcquireOutcome::Contended`]: composites only: no single holder to wait for, and
    ///   everything the attempt took has been given back. The Locker tries again after
    ///   `retry_after`, not on a release notification (or gives up, without a wait).
    ///
    /// "Held by someone else" is always an answer, never an error.
    ///
    /// # Fencing tokens
    ///
    /// Per name, each token is greater than every token handed out before for that name, to
    /// any owner field of any client, re-entries included; a grant without `fencing` gets none
    /// and need not move the counter. So the counter lives apart from the lock: no release,
    /// [`abandon`](Self::abandon) or [`force_release`](Self::force_release) deletes it, and it
    /// never expires. A store that can lose it (a restart without persistence, a failover to a
    /// replica that missed it) must still hand out growing tokens where the backend can ensure
    /// it: the Redis backend never hands out less than the server's clock in microseconds.
    /// Where it cannot, the backend says so in its documentation ([`crate::MemoryBackend`]: a
    /// new store starts again at 1; RedLock: the maximum over a majority of nodes, see
    /// `docs/multi-node.md`).
    ///
    /// # Errors
    ///
    /// - Ambiguous ([`crate::Error::Timeout`], [`crate::Error::ConnectionLost`]) when the grant
    ///   may have been applied. The Locker then calls [`abandon`](Self::abandon) with
    ///   `keep = request.known_holds`, which takes back the unseen grant if there was one. If
    ///   that fails too, it keeps a *debt* for the name and owner field: the next attempt or
    ///   release of that pair calls `abandon` again first (and fails with its error while it
    ///   fails); the debt is dropped once the unseen grant's lease has surely ended.
    /// - Any other error only when nothing was applied: the Locker undoes nothing. A composite
    ///   answers [`crate::Error::Quorum`] (not ambiguous) only after undoing, on every node,
    ///   what the attempt may have taken.
    ///
    /// Then, within a wait deadline, the Locker tries again after about 50 ms if the error is
    /// retryable ([`crate::Error::is_retryable`]: the ambiguous ones, a read-only replica, an
    /// out-of-memory or unavailable server, and a quorum error whose node failures all are);
    /// otherwise it returns the error.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped attempt may have taken the lock. The Locker notes a debt for
    /// it and, in the background and before the owner's next call on the name, sets the
    /// owner's count back with [`abandon`](Self::abandon); if that fails, the hold it may have
    /// left, which no watchdog renews, ends with its lease (a re-entry left so lives on while
    /// the owner's other holds are renewed, and ends one lease after the last of them).
    fn try_acquire(
        &self,
        request: AcquireRequest<'_>,
    ) -> impl Future<Output = Result<AcquireOutcome>> + Send;

    /// Gives back one hold of `owner_field` on `name`.
    ///
    /// # Atomicity
    ///
    /// One indivisible step: if `owner_field` holds the lock, lower its count by one. At zero
    /// the lock is free: delete it and notify release watchers (see
    /// [`watch_releases`](Self::watch_releases)). Above zero make the lock's expiry at least
    /// `now + lease` (never shorten it). If `owner_field` does not hold the lock, change
    /// nothing.
    ///
    /// # Outcomes
    ///
    /// - [`ReleaseOutcome::Released`]: the lock is free and its waiters were notified.
    /// - [`ReleaseOutcome::StillHeld`]: holds of `owner_field` remain (reentrancy).
    /// - [`ReleaseOutcome::NotHeld`]: `owner_field` held nothing (never took it, gave it back
    ///   already, its lease ran out, or it was force-released); no other holder's hold was
    ///   touched. (A composite answers it when too few nodes still had the hold and every node
    ///   answered, after giving back what was left of it on the others; with a node failed it
    ///   answers [`crate::Error::Quorum`] instead.) A spurious release notification is allowed:
    ///   waiters only look again. For the caller it means its critical section may have
    ///   overlapped another holder's.
    /// - [`ReleaseOutcome::PartlyReleased`]: composites only, see there; the Locker reports it
    ///   as it comes and follows it with the cleanup of a failed release (below).
    ///
    /// # Errors
    ///
    /// - Ambiguous ([`crate::Error::Timeout`], [`crate::Error::ConnectionLost`]) when the release
    ///   may have been applied. A guard's release then calls [`abandon`](Self::abandon) with
    ///   `keep` = the holds of `owner_field` the process still counts (the released one no
    ///   longer), so the count ends right whether the release ran or not; if that fails too,
    ///   it keeps a debt, as after an acquire (see [`try_acquire`](Self::try_acquire)).
    /// - Any other error only when nothing was applied. The hold is then still on the store,
    ///   and the guard has forgotten it: it gets the same [`abandon`](Self::abandon) (and the
    ///   same debt if that fails), so that the owner's next acquire cannot re-enter a hold it
    ///   does not know of (which would leave the lock held after its release, and, on a fair
    ///   lock, jump the queue).
    ///
    /// [`crate::Locker::unlock`] calls `release` directly and returns its answer, without any
    /// cleanup.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped release may or may not have been applied. The Locker notes a
    /// debt and sets the owner's count with [`abandon`](Self::abandon) in the background,
    /// before the owner's next call on the name; what is left if that fails ends with its
    /// lease.
    fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<ReleaseOutcome>> + Send;

    /// Renews many leases in one call. Returns, in order, exactly one outcome per renewal.
    ///
    /// # Atomicity
    ///
    /// Each entry is one indivisible step: if `renewal.owner_field` (an owner field) still holds
    /// `renewal.name`, make its expiry at least `now + renewal.lease` (never shorten it: another
    /// hold of the same owner field may count on a longer lease); otherwise change nothing and
    /// create nothing. The batch as a whole need not be atomic, and may be split into several
    /// requests (a batch can hold thousands of entries; the Redis backend sends chunks of 256
    /// at once).
    ///
    /// # Outcomes
    ///
    /// - [`RenewOutcome::Renewed`]: the lease runs at least `lease` from the send time; the
    ///   guard's validity deadline moves to `send time + lease - clock_drift(lease)`.
    /// - [`RenewOutcome::NotHeld`]: the owner field surely no longer holds the lock. The guard
    ///   is marked lost ([`crate::LeaseLoss::NotOurs`]) and no longer renewed;
    ///   [`crate::LockGuard::extend`] returns [`crate::Error::LeaseLost`]. Answer it only when
    ///   sure: a failure to find out is an error or `Unknown`.
    /// - [`RenewOutcome::Unknown`]: not decided (composites: too few nodes answered either
    ///   way). The watchdog retries it like a failed call; `extend` returns
    ///   [`crate::Error::Unavailable`].
    ///
    /// # Errors
    ///
    /// A renewal is idempotent and only lengthens a lease the owner field holds, so the Locker
    /// handles ambiguous and definite errors alike (still report the precise kind). The
    /// watchdog retries every entry of the failed batch after a short delay (a twelfth of the
    /// lease, within 2 ms ..= 1 s) until each lease's validity deadline, then reports it lost
    /// ([`crate::LeaseLoss::Expired`]); `extend` returns the error. A reply with the wrong number
    /// of outcomes counts as a failed call.
    ///
    /// # Cancel safety
    ///
    /// A dropped call may have renewed any of its entries, which is harmless. The watchdog
    /// itself drops a call still unanswered at the earliest validity deadline of its batch, and
    /// treats it as failed.
    fn renew(
        &self,
        renewals: &[Renewal<'_>],
    ) -> impl Future<Output = Result<Vec<RenewOutcome>>> + Send;

    /// Lowers `owner_field`'s hold count on `name` to at most `keep`: the cleanup after a step
    /// whose outcome is unknown.
    ///
    /// # Atomicity
    ///
    /// One indivisible step: if `owner_field` holds the lock more than `keep` times, set its
    /// count to `keep`; at zero remove its hold, and if nobody holds the lock any more delete it
    /// and notify release watchers. Otherwise (`keep` or fewer holds, or none) change nothing.
    /// It never raises a count, and leaves the lease, other owner fields' holds and the fencing
    /// counter as they are. Running it twice has the effect of running it once, unlike retrying
    /// an acquire or a release, so it can be repeated until it succeeds. A store that never
    /// fails mid-call must implement it all the same: composites call it on their nodes.
    ///
    /// The Locker calls it with `keep` set to the holds of `owner_field` it knows of:
    ///
    /// - after [`try_acquire`](Self::try_acquire) answered an ambiguous error;
    /// - after a guard's [`release`](Self::release) answered an ambiguous error;
    /// - before the next attempt or release of a name and owner field whose cleanup failed (a
    ///   debt), counting the hold being released as still known.
    ///
    /// Composites also call it on every node to undo an attempt that did not succeed as a whole.
    ///
    /// # Errors
    ///
    /// Any error, ambiguous or not, leaves a debt: the next attempt or release of this name by
    /// this owner field calls `abandon` again first, and fails with its error while it fails;
    /// the debt is dropped once `abandon` succeeds, or once the unseen step's lease has surely
    /// ended with no hold of this owner field left in the process. So answer `Ok` only when the
    /// step has been applied on the store (rule 9): the Redis backend, which keeps a cleanup to
    /// replay on its next connection while the connection is replaced, answers once the replay
    /// has run, and an error if that takes longer than the call's timeout.
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have been applied; since it is idempotent, running it again
    /// is safe. The Locker notes no debt when its own future is dropped during a cleanup: what
    /// the cleanup was to undo then ends with its lease.
    fn abandon(
        &self,
        name: &str,
        owner_field: &str,
        keep: u32,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Deletes the lock whoever holds it, and notifies release watchers if it existed. Returns
    /// whether it existed.
    ///
    /// # Atomicity
    ///
    /// One indivisible step. The fencing counter stays. Holders find out at their next renewal
    /// ([`RenewOutcome::NotHeld`]).
    ///
    /// # Errors
    ///
    /// Ambiguous when the deletion may have been applied, as for every step. The Locker
    /// ([`crate::Locker::force_unlock`]) returns errors as they are, without any cleanup.
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have deleted the lock.
    fn force_release(&self, name: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Reads the state of a lock: every owner field with its hold count, and the remaining
    /// lease; [`LockState::default`] when the lock is free.
    ///
    /// # Atomicity
    ///
    /// One consistent snapshot; read only (a store with lazy expiry may collect an expired
    /// entry, which changes nothing anyone can see).
    ///
    /// # Errors
    ///
    /// Returned by the Locker ([`crate::Locker::state`]) as they are.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it changes nothing.
    fn inspect(&self, name: &str) -> impl Future<Output = Result<LockState>> + Send;

    /// Registers for release notifications of `name`.
    ///
    /// Once the returned future completes, every later release of `name` by any client of the
    /// store (a release or `abandon` that frees it, a `force_release`) must reach the watch, or
    /// the backend must wake the watch's waiters when it may have missed one (a notification
    /// connection that dropped: [`crate::ReleaseHub::wake_all`]). So subscribe on the store
    /// *before* returning: the waiter registers, then tries, then waits, and relies on this
    /// order not to miss a release. Registrations for one name are shared and
    /// reference-counted by the backend (see [`crate::ReleaseHub`]). A store without
    /// notifications returns [`ReleaseWatch::polling`]: waiters then look again about every
    /// interval, and never later than the holder's remaining lease.
    ///
    /// # Errors
    ///
    /// The Locker ends the wait with the error (with a wait deadline that passes while
    /// registering, with the first attempt's answer instead). A backend that can still let
    /// waiters poll should return a polling watch rather than fail, as the Redis and
    /// PostgreSQL backends and the composites do: [`ReleaseWatch::polling_for_now`] while its
    /// notifications are down (the waiter registers again at each look, and is woken by
    /// releases again once they are back), [`ReleaseWatch::polling`] when it has none at all.
    ///
    /// # Cancel safety
    ///
    /// A dropped registration must not leave a subscription behind for good.
    /// [`crate::ReleaseHub`] takes care of it: once the last watch of a name is gone, it calls
    /// the idle hook if a subscription was requested, even one that was cancelled or failed.
    fn watch_releases(&self, name: &str) -> impl Future<Output = Result<ReleaseWatch>> + Send;

    /// Registers `owner_field` for the notifications that concern its wait for `name`. By
    /// default the name's release notifications ([`watch_releases`](Self::watch_releases)); a
    /// fair lock, which wakes only the waiter whose turn it is, on a channel of that waiter's
    /// own, overrides it. The contract is [`watch_releases`](Self::watch_releases)'s.
    ///
    /// # Errors
    ///
    /// As [`watch_releases`](Self::watch_releases).
    ///
    /// # Cancel safety
    ///
    /// As [`watch_releases`](Self::watch_releases).
    fn watch_releases_of(
        &self,
        name: &str,
        owner_field: &str,
    ) -> impl Future<Output = Result<ReleaseWatch>> + Send {
        let _ = owner_field;
        self.watch_releases(name)
    }

    /// Whether an attempt that finds the lock held leaves `owner_field` in a queue of waiters
    /// (a fair lock), which [`leave_queue`](Self::leave_queue) takes it out of. `false` by
    /// default.
    fn queues(&self) -> bool {
        false
    }

    /// Takes `owner_field` out of the queue of waiters of `name`, if it is in it; changes no
    /// hold. The [`crate::Locker`] calls it, for a backend that [`queues`](Self::queues), when
    /// a wait ends without the lock (its deadline passed, an error, or its future was
    /// dropped: then in the background), so a waiter that gives up does not hold up the ones
    /// behind it. Nothing by default.
    ///
    /// # Errors
    ///
    /// The store's errors: the entry then stays until the queue drops it on its own (the
    /// backend's queue timeout).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have taken the entry out.
    fn leave_queue(
        &self,
        name: &str,
        owner_field: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (name, owner_field);
        std::future::ready(Ok(()))
    }
}

/// A boxed, sendable future, as returned by [`DynLockBackend`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe twin of [`LockBackend`], implemented for every `LockBackend`.
///
/// Use it to hold backends of different types in one collection (`Arc<dyn DynLockBackend>`);
/// `Arc<dyn DynLockBackend>` implements [`LockBackend`] in turn. Each method has the contract of
/// the [`LockBackend`] method of the same name (atomicity, outcomes, errors, cancel safety) and
/// returns its future boxed. Implement [`LockBackend`], never this trait directly.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use lock_core::{DynLockBackend, Locker, MemoryBackend};
///
/// let nodes: Vec<Arc<dyn DynLockBackend>> =
///     vec![Arc::new(MemoryBackend::new()), Arc::new(MemoryBackend::new())];
/// let _locker = Locker::new(nodes[0].clone());
/// ```
pub trait DynLockBackend: Send + Sync + 'static {
    /// See [`LockBackend::client_id`].
    fn client_id(&self) -> &str;
    /// See [`LockBackend::check_name`].
    ///
    /// # Errors
    ///
    /// As [`LockBackend::check_name`].
    fn check_name(&self, name: &str) -> Result<()>;
    /// See [`LockBackend::clock_drift`].
    fn clock_drift(&self, lease: Duration) -> Duration;
    /// See [`LockBackend::reentrant`].
    fn reentrant(&self) -> bool;
    /// See [`LockBackend::kind`].
    fn kind(&self) -> &'static str;
    /// See [`LockBackend::try_acquire`] (errors and cancel safety included).
    fn try_acquire<'a>(
        &'a self,
        request: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<AcquireOutcome>>;
    /// See [`LockBackend::release`] (errors and cancel safety included).
    fn release<'a>(
        &'a self,
        name: &'a str,
        owner_field: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<ReleaseOutcome>>;
    /// See [`LockBackend::renew`] (errors and cancel safety included).
    fn renew<'a>(&'a self, renewals: &'a [Renewal<'a>])
    -> BoxFuture<'a, Result<Vec<RenewOutcome>>>;
    /// See [`LockBackend::abandon`] (errors and cancel safety included).
    fn abandon<'a>(
        &'a self,
        name: &'a str,
        owner_field: &'a str,
        keep: u32,
    ) -> BoxFuture<'a, Result<()>>;
    /// See [`LockBackend::force_release`] (errors and cancel safety included).
    fn force_release<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>>;
    /// See [`LockBackend::inspect`] (errors and cancel safety included).
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<LockState>>;
    /// See [`LockBackend::watch_releases`] (errors and cancel safety included).
    fn watch_releases<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<ReleaseWatch>>;
    /// See [`LockBackend::watch_releases_of`] (errors and cancel safety included).
    fn watch_releases_of<'a>(
        &'a self,
        name: &'a str,
        owner_field: &'a str,
    ) -> BoxFuture<'a, Result<ReleaseWatch>>;
    /// See [`LockBackend::queues`].
    fn queues(&self) -> bool;
    /// See [`LockBackend::leave_queue`] (errors and cancel safety included).
    fn leave_queue<'a>(&'a self, name: &'a str, owner_field: &'a str) -> BoxFuture<'a, Result<()>>;
}

impl<T: LockBackend> DynLockBackend for T {
    fn client_id(&self) -> &str {
        LockBackend::client_id(self)
    }
    fn check_name(&self, name: &str) -> Result<()> {
        LockBackend::check_name(self, name)
    }
    fn clock_drift(&self, lease: Duration) -> Duration {
        LockBackend::clock_drift(self, lease)
    }
    fn reentrant(&self) -> bool {
        LockBackend::reentrant(self)
    }
    fn kind(&self) -> &'static str {
        LockBackend::kind(self)
    }
    fn try_acquire<'a>(
        &'a self,
        request: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<AcquireOutcome>> {
        Box::pin(LockBackend::try_acquire(self, request))
    }
    fn release<'a>(
        &'a self,
        name: &'a str,
        owner_field: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<ReleaseOutcome>> {
        Box::pin(LockBackend::release(self, name, owner_field, lease))
    }
    fn renew<'a>(
        &'a self,
        renewals: &'a [Renewal<'a>],
    ) -> BoxFuture<'a, Result<Vec<RenewOutcome>>> {
        Box::pin(LockBackend::renew(self, renewals))
    }
    fn abandon<'a>(
        &'a self,
        name: &'a str,
        owner_field: &'a str,
        keep: u32,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(LockBackend::abandon(self, name, owner_field, keep))
    }
    fn force_release<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(LockBackend::force_release(self, name))
    }
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<LockState>> {
        Box::pin(LockBackend::inspect(self, name))
    }
    fn watch_releases<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<ReleaseWatch>> {
        Box::pin(LockBackend::watch_releases(self, name))
    }
    fn watch_releases_of<'a>(
        &'a self,
        name: &'a str,
        owner_field: &'a str,
    ) -> BoxFuture<'a, Result<ReleaseWatch>> {
        Box::pin(LockBackend::watch_releases_of(self, name, owner_field))
    }
    fn queues(&self) -> bool {
        LockBackend::queues(self)
    }
    fn leave_queue<'a>(&'a self, name: &'a str, owner_field: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(LockBackend::leave_queue(self, name, owner_field))
    }
}

impl LockBackend for Arc<dyn DynLockBackend> {
    fn client_id(&self) -> &str {
        (**self).client_id()
    }
    fn check_name(&self, name: &str) -> Result<()> {
        (**self).check_name(name)
    }
    fn clock_drift(&self, lease: Duration) -> Duration {
        (**self).clock_drift(lease)
    }
    fn reentrant(&self) -> bool {
        (**self).reentrant()
    }
    fn kind(&self) -> &'static str {
        (**self).kind()
    }
    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        (**self).try_acquire(request).await
    }
    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        (**self).release(name, owner_field, lease).await
    }
    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        (**self).renew(renewals).await
    }
    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        (**self).abandon(name, owner_field, keep).await
    }
    async fn force_release(&self, name: &str) -> Result<bool> {
        (**self).force_release(name).await
    }
    async fn inspect(&self, name: &str) -> Result<LockState> {
        (**self).inspect(name).await
    }
    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        (**self).watch_releases(name).await
    }
    async fn watch_releases_of(&self, name: &str, owner_field: &str) -> Result<ReleaseWatch> {
        (**self).watch_releases_of(name, owner_field).await
    }
    fn queues(&self) -> bool {
        (**self).queues()
    }
    async fn leave_queue(&self, name: &str, owner_field: &str) -> Result<()> {
        (**self).leave_queue(name, owner_field).await
    }
}

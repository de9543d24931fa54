//! The contract every backend implements.
//!
//! A backend knows how to run *one* step against its store: one acquire attempt that never waits,
//! one release, one batch of renewals, and so on. Waiting, watchdogs, guards and reentrancy
//! bookkeeping live in [`crate::Locker`], shared by all backends.
//!
//! [`LockBackend`] uses native `async fn` in traits and is what backends implement;
//! [`DynLockBackend`] is its object-safe twin (boxed futures), implemented for every
//! `LockBackend` by a blanket impl, so composites can hold `Vec<Arc<dyn DynLockBackend>>` of
//! mixed kinds. `Arc<dyn DynLockBackend>` implements `LockBackend` again, so a boxed backend
//! plugs into [`crate::Locker`] like any other.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::notify::ReleaseWatch;

/// One attempt to take a lock.
#[derive(Clone, Copy, Debug)]
pub struct AcquireRequest<'a> {
    /// The lock name (already checked).
    pub name: &'a str,
    /// The owner field, `<client id>:<holder id>`.
    pub owner: &'a str,
    /// The lease to set on success.
    pub lease: Duration,
    /// Whether to hand out a fencing token.
    pub fencing: bool,
    /// How many holds of `owner` on this lock the caller knows it has (its live guards). A
    /// backend that must undo an attempt of unknown outcome on its own (a composite whose nodes
    /// answered differently) lowers the owner's count back to this with
    /// [`LockBackend::abandon`].
    pub known_holds: u32,
}

/// What one acquire attempt found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireOutcome {
    /// The lock is ours (first hold or re-entry).
    Acquired(Grant),
    /// Someone else holds it.
    Held {
        /// How long the current hold still has to live, when the store knows; waiters cap their
        /// sleep by it.
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
    /// The owner's hold count after this grant (1 for a first hold).
    pub hold_count: u32,
    /// The fencing token, when one was asked for.
    pub fencing_token: Option<u64>,
}

/// What a release did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a release may report that the lock was no longer held"]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The hold count reached zero: the lock is free and waiters were notified.
    Released,
    /// The owner still holds the lock this many times (a reentrant hold was given back).
    StillHeld {
        /// The remaining hold count.
        hold_count: u32,
    },
    /// The owner did not hold the lock (never taken, released twice, or expired). Nothing changed.
    NotHeld,
    /// Composites only: enough nodes gave the hold back for the lock to be free, but some nodes
    /// could not be reached (errors or timeouts). What is left there expires with its lease.
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

/// What one renewal in a batch found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewOutcome {
    /// The lock was still ours; its lease now runs from the time the renewal was sent.
    Renewed,
    /// The lock is no longer ours (deleted, expired or taken over): the lease is lost.
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

/// One lease to renew in a batch.
#[derive(Clone, Copy, Debug)]
pub struct Renewal<'a> {
    /// The lock name.
    pub name: &'a str,
    /// The owner field.
    pub owner: &'a str,
    /// The new lease.
    pub lease: Duration,
}

/// A snapshot of one lock as the store sees it.
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
    pub fn hold_count(&self, owner: &str) -> u32 {
        self.holders
            .iter()
            .find(|(field, _)| field == owner)
            .map_or(0, |(_, count)| *count)
    }
}

/// The contract a lock store implements.
///
/// Every method is one step against the store; none of them waits for the lock. Implementations
/// must make `try_acquire`, `release`, `renew` and `abandon` atomic with respect to each other
/// (on Redis: one Lua script each).
///
/// Names reaching these methods have passed [`LockBackend::check_name`]; owners are
/// `<client id>:<holder id>` strings built from [`LockBackend::client_id`].
///
/// # Example
///
/// See `examples/src/custom_backend.rs` in the repository for a complete backend written
/// against this trait alone; the in-memory backend, [`crate::MemoryBackend`], is another.
///
/// ```
/// use lock_core::{LockBackend, Locker, MemoryBackend};
///
/// fn takes_any_backend<B: LockBackend>(backend: B) -> Locker<B> {
///     Locker::new(backend)
/// }
/// let _locker = takes_any_backend(MemoryBackend::new());
/// ```
pub trait LockBackend: Send + Sync + 'static {
    /// The client id written before the holder id in owner fields; unique per backend instance.
    fn client_id(&self) -> &str;

    /// Checks a lock name before any I/O. The default applies [`crate::options::check_name`];
    /// backends with extra rules (Redis hash tags) extend it.
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
    /// default. A backend that answers `false` never sees a re-entry: the [`crate::Locker`]
    /// refuses it with [`crate::Error::NotReentrant`] before any I/O, since the store would
    /// otherwise make the owner wait for itself.
    fn reentrant(&self) -> bool {
        true
    }

    /// One attempt to take the lock: take it if free or already ours (re-entry), set the lease;
    /// otherwise report who-knows-how-long it stays held.
    fn try_acquire(
        &self,
        request: AcquireRequest<'_>,
    ) -> impl Future<Output = Result<AcquireOutcome>> + Send;

    /// Gives back one hold. At zero the lock is deleted and waiters are notified; above zero the
    /// lease is reset to `lease`.
    fn release(
        &self,
        name: &str,
        owner: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<ReleaseOutcome>> + Send;

    /// Renews many leases in one call. Returns, in order, what each renewal found.
    fn renew(
        &self,
        renewals: &[Renewal<'_>],
    ) -> impl Future<Output = Result<Vec<RenewOutcome>>> + Send;

    /// Lowers `owner`'s hold count to at most `keep` (0 removes the hold, freeing the lock and
    /// notifying waiters if nobody else holds it). Used after an acquire whose outcome is unknown
    /// (timeout, reset): it is idempotent, unlike a retry of the acquire.
    fn abandon(
        &self,
        name: &str,
        owner: &str,
        keep: u32,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Deletes the lock whoever holds it and notifies waiters. Returns whether it existed.
    fn force_release(&self, name: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Reads the state of a lock.
    fn inspect(&self, name: &str) -> impl Future<Output = Result<LockState>> + Send;

    /// Registers for release notifications of `name`. When the returned future completes, every
    /// release after that point is delivered to the watch. Registrations for one name are shared
    /// and reference-counted by the backend (see [`crate::ReleaseHub`]).
    fn watch_releases(&self, name: &str) -> impl Future<Output = Result<ReleaseWatch>> + Send;
}

/// A boxed, sendable future, as returned by [`DynLockBackend`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe twin of [`LockBackend`], implemented for every `LockBackend`.
///
/// Use it to hold backends of different types in one collection (`Arc<dyn DynLockBackend>`);
/// `Arc<dyn DynLockBackend>` implements [`LockBackend`] in turn.
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
#[allow(missing_docs)] // each method mirrors the LockBackend method of the same name
pub trait DynLockBackend: Send + Sync + 'static {
    fn client_id(&self) -> &str;
    fn check_name(&self, name: &str) -> Result<()>;
    fn clock_drift(&self, lease: Duration) -> Duration;
    fn reentrant(&self) -> bool;
    fn try_acquire<'a>(
        &'a self,
        request: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<AcquireOutcome>>;
    fn release<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<ReleaseOutcome>>;
    fn renew<'a>(&'a self, renewals: &'a [Renewal<'a>])
    -> BoxFuture<'a, Result<Vec<RenewOutcome>>>;
    fn abandon<'a>(&'a self, name: &'a str, owner: &'a str, keep: u32)
    -> BoxFuture<'a, Result<()>>;
    fn force_release<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool>>;
    fn inspect<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<LockState>>;
    fn watch_releases<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<ReleaseWatch>>;
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
    fn try_acquire<'a>(
        &'a self,
        request: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<AcquireOutcome>> {
        Box::pin(LockBackend::try_acquire(self, request))
    }
    fn release<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<ReleaseOutcome>> {
        Box::pin(LockBackend::release(self, name, owner, lease))
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
        owner: &'a str,
        keep: u32,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(LockBackend::abandon(self, name, owner, keep))
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
    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        (**self).try_acquire(request).await
    }
    async fn release(&self, name: &str, owner: &str, lease: Duration) -> Result<ReleaseOutcome> {
        (**self).release(name, owner, lease).await
    }
    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        (**self).renew(renewals).await
    }
    async fn abandon(&self, name: &str, owner: &str, keep: u32) -> Result<()> {
        (**self).abandon(name, owner, keep).await
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
}

//! The core of distlock: the contract every lock backend implements, and the machinery they all
//! share.
//!
//! Its names come in two tiers, each listed once:
//!
//! - [`api`]: what an application uses — [`Locker`] and the handles it gives out on each
//!   primitive, guards, options, errors, [`MemoryBackend`]. The `distlock` facade's root is
//!   this list (plus its backends).
//! - [`backend`]: what a backend author implements or calls — the contracts
//!   ([`LockBackend`], [`FairBackend`], ...), requests and outcomes, the notification hub, the
//!   in-memory backend's sides.
//!
//! Both are also re-exported at this crate's root, for the backend crates built on it.
//!
//! - [`LockBackend`] (and its object-safe twin [`DynLockBackend`]): one step against a store —
//!   acquire attempt, release, batched renewal, force-release, inspect, release notifications.
//! - [`Locker`]: the user API — [`Locker::lock`], [`Locker::try_lock`], [`Locker::lock_with`],
//!   [`Locker::with_lock`], and one way into every other primitive: [`Locker::fair`],
//!   [`Locker::read_write`], [`Locker::semaphore`], [`Locker::permits`], [`Locker::latch`],
//!   [`Locker::election`], each a handle with its name bound.
//! - [`LockGuard`]: a held lock, with its validity deadline, [`LockGuard::lost`] signal,
//!   [`LockGuard::extend`] and [`LockGuard::release`].
//! - the watchdog (renews watchdog-mode leases every lease/3, batched per backend) and the waiter
//!   (register for release notifications, try, then wait for a notification, a timer capped by
//!   the holder's TTL, or the deadline).
//! - [`LockOptions`] and [`Fenced`] / [`Unfenced`]: whether a fencing token is asked for is
//!   part of the options' and the guard's types.
//! - [`Error`]: one error type, with [`Error::is_retryable`]; backend failures keep their cause
//!   ([`error::Cause`], reached through `source()`).
//! - [`MemoryBackend`]: an in-memory store with real expiry, for tests.
//! - [`SemaphoreBackend`] and [`Semaphore`] ([`Locker::semaphore`]): a counting semaphore
//!   (Redisson's `RSemaphore`), waited for with the lock's wait loop.
//! - [`ReadWriteBackend`] and [`ReadWriteLock`] ([`Locker::read_write`]): read-write locks,
//!   one lock backend per side.
//! - [`FairBackend`] and [`FairLock`] ([`Locker::fair`]): a lock granted in arrival order.
//! - [`ElectionBackend`] and [`Election`] ([`Locker::election`]): leader election on the lock
//!   (campaign, resign, leader, observe), each leadership with a growing term.
//! - [`PermitBackend`] and [`Permits`] ([`Locker::permits`]): semaphore permits held
//!   like locks, given back by the store when their lease ends (Redisson's
//!   `RPermitExpirableSemaphore`).
//! - [`LatchBackend`] and [`CountDownLatch`] ([`Locker::latch`]): a countdown latch (Redisson's
//!   `RCountDownLatch`) whose waiters also look again every second.
//!
//! # Layout
//!
//! Each module imports only the ones listed below it:
//!
//! - `election`, `read_write_lock`, `permits`, `fair_lock`, `semaphore`, `latch`: the handle
//!   on each primitive ([`Election`], [`ReadWriteLock`], [`Permits`], [`FairLock`],
//!   [`Semaphore`], [`CountDownLatch`]) and its entry point on [`Locker`] (`locker.election(…)`
//!   and so on), each over a [`Locker`] of its side where it has one.
//! - `families`: the lockers of a locker's other primitives, made on first use and shared by
//!   its clones.
//! - `locker`: [`Locker`], the entry point; builds a guard from what the waiter won.
//! - `waiter`: the first attempt, the registration for release notifications, the wait loop,
//!   for any primitive's attempts.
//! - `guard`: [`LockGuard`]: extend, release, drop, the lease-loss signal.
//! - `shared`: what a locker and its guards share (backend, watchdog, order book), and the
//!   acquire, release and cleanup calls, each in its turn, with the one cleanup rule after
//!   outcomes of unknown effect (set the owner's count to the tally, or owe it).
//! - `watchdog`: batched renewals of watchdog-mode leases.
//! - `hold`: the record of one hold (name, owner, lease, lease status), shared by its guard and
//!   the watchdog.
//! - `order`: one line per (name, owner field) that every store call of that pair waits in, in
//!   the order the calls were issued, with the pair's tally (holds on the store, guards alive)
//!   and debt.
//! - `memory`, `election_backend`, `read_write_backend`, `fair_backend`, `permit_backend`, `semaphore_backend`,
//!   `latch_backend`, `contract`, `notify`, `options`, `fencing`, `owner`, `error`: the in-memory
//!   backend, the election's, the read-write lock's, the fair lock's, the lease-bound permits', the
//!   semaphore's, the latch's and the lock's backend contracts, release notifications, options and checks, the fencing choice
//!   carried in the types, owners, errors.
//!
//! # Example
//!
//! ```
//! use lock_core::{Locker, MemoryBackend};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::Error> {
//! let locker = Locker::new(MemoryBackend::new());
//! let guard = locker.lock("orders:42").await?;
//! // Re-locking from the same task re-enters.
//! let again = locker.lock("orders:42").await?;
//! assert_eq!(again.hold_count(), 2);
//! again.release().await?;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

// On docs.rs (`--cfg docsrs`, nightly) every item that needs a cargo feature gets a badge naming
// it; `doc_cfg` adds them from the `#[cfg]`s alone (here the `metrics` items). Other builds never
// see the nightly feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod error;
pub mod options;
pub mod telemetry;

mod contract;
mod election;
mod election_backend;
// Public only under its former path, which the workspace's Redis backend still names; the
// contract's items are in [`backend`].
#[doc(hidden)]
pub mod fair_backend;
mod fair_lock;
mod families;
mod fencing;
mod guard;
mod hold;
mod latch;
mod latch_backend;
mod local_line;
mod locker;
mod memory;
mod notify;
mod order;
mod owner;
mod permit_backend;
mod permits;
mod read_write_backend;
mod read_write_lock;
mod semaphore;
mod semaphore_backend;
mod shared;
mod waiter;
mod watchdog;

/// The application's tier: the names a service taking locks uses (the `distlock` facade's
/// root re-exports exactly these, plus its backends).
///
/// [`Locker`] is the one way in: `locker.lock(name)` for the reentrant lock, and a method per
/// other primitive returning a handle with its name bound.
pub mod api {
    pub use crate::contract::{LockState, ReleaseOutcome};
    pub use crate::election::{Election, LeaderObserver, Leadership};
    pub use crate::election_backend::Leader;
    pub use crate::error::{Error, Result};
    pub use crate::fair_backend::FairState;
    pub use crate::fair_lock::FairLock;
    pub use crate::fencing::{Fenced, Fencing, Unfenced};
    pub use crate::guard::LockGuard;
    pub use crate::hold::LeaseLoss;
    pub use crate::latch::CountDownLatch;
    pub use crate::locker::Locker;
    pub use crate::memory::MemoryBackend;
    pub use crate::options::{Lease, LockOptions, Wait};
    pub use crate::owner::Owner;
    pub use crate::permit_backend::PermitState;
    pub use crate::permits::Permits;
    pub use crate::read_write_backend::{ReadWriteMode, ReadWriteState};
    pub use crate::read_write_lock::ReadWriteLock;
    pub use crate::semaphore::Semaphore;
    pub use crate::semaphore_backend::SemaphoreState;
}

/// The backend author's tier: the contracts a store implements (one per primitive), the
/// requests and outcomes they exchange with the [`Locker`], the notification
/// hub, and the in-memory backend's sides. An application does not need these.
pub mod backend {
    pub use crate::contract::{
        AcquireOutcome, AcquireRequest, BoxFuture, DynLockBackend, Grant, LockBackend,
        RenewOutcome, Renewal,
    };
    pub use crate::election_backend::{CampaignBackend, ElectionBackend};
    pub use crate::fair_backend::{FairBackend, QUEUE_TIMEOUT};
    pub use crate::latch_backend::LatchBackend;
    pub use crate::memory::{
        MemoryCampaignSide, MemoryFairSide, MemoryPermitSide, MemoryReadSide, MemoryWriteSide,
    };
    pub use crate::notify::{ReleaseHub, ReleaseWatch};
    pub use crate::owner::new_client_id;
    pub use crate::permit_backend::PermitBackend;
    pub use crate::read_write_backend::ReadWriteBackend;
    pub use crate::semaphore_backend::{PermitsTaken, SemaphoreBackend};
}

pub use api::*;
pub use backend::*;

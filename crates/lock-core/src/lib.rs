//! The core of distlock: the contract every lock backend implements, and the machinery they all
//! share.
//!
//! - [`LockBackend`] (and its object-safe twin [`DynLockBackend`]): one step against a store —
//!   acquire attempt, release, batched renewal, force-release, inspect, release notifications.
//! - [`Locker`]: the user API — [`Locker::lock`], [`Locker::try_lock`], [`Locker::lock_with`],
//!   [`Locker::with_lock`].
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
//! - [`ReadWriteBackend`] and [`RwLocker`]: read-write locks, one lock backend per side.
//! - [`FairBackend`]: a fair lock side granting in arrival order, for a [`Locker`].
//! - [`ElectionBackend`] and [`Election`]: leader election on the lock (campaign, resign,
//!   leader, observe), each leadership with a growing term.
//! - [`LeasedSemaphoreBackend`] and [`PermitLocker`]: semaphore permits held like locks, given
//!   back by the store when their lease ends (Redisson's `RPermitExpirableSemaphore`).
//! - [`LatchBackend`] and [`CountDownLatch`] ([`Locker::latch`]): a countdown latch (Redisson's
//!   `RCountDownLatch`) whose waiters also look again every second.
//!
//! # Layout
//!
//! Each module imports only the ones listed below it:
//!
//! - `election`: [`Election`], leader election over a [`Locker`] of the campaign side.
//! - `rw_locker`, `permit_locker`: [`RwLocker`] and [`PermitLocker`], a [`Locker`] per side of
//!   a read-write lock, and over lease-bound permits.
//! - `locker`: [`Locker`], the entry point; builds a guard from what the waiter won.
//! - `semaphore`, `latch`: [`Semaphore`] and [`CountDownLatch`], the handles.
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
//! - `memory`, `election_backend`, `rw_backend`, `fair_backend`, `leased_backend`, `semaphore_backend`,
//!   `latch_backend`, `backend`, `notify`, `options`, `fencing`, `owner`, `error`: the in-memory
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

pub mod backend;
mod election;
pub mod election_backend;
pub mod error;
pub mod fair_backend;
mod fencing;
mod guard;
mod hold;
mod latch;
pub mod latch_backend;
pub mod leased_backend;
mod locker;
mod memory;
pub mod notify;
pub mod options;
mod order;
mod owner;
mod permit_locker;
pub mod rw_backend;
mod rw_locker;
mod semaphore;
pub mod semaphore_backend;
mod shared;
pub mod telemetry;
mod waiter;
mod watchdog;

pub use backend::{
    AcquireOutcome, AcquireRequest, BoxFuture, DynLockBackend, Grant, LockBackend, LockState,
    ReleaseOutcome, RenewOutcome, Renewal,
};
pub use election::{Election, LeaderObserver, Leadership};
pub use election_backend::{CampaignBackend, ElectionBackend, Leader};
pub use error::{Error, Result};
pub use fair_backend::{FairBackend, FairState};
pub use fencing::{Fenced, Fencing, Unfenced};
pub use guard::LockGuard;
pub use hold::LeaseLoss;
pub use latch::CountDownLatch;
pub use latch_backend::LatchBackend;
pub use leased_backend::{LeasedSemaphoreBackend, LeasedState};
pub use locker::Locker;
pub use memory::{
    MemoryBackend, MemoryCampaignSide, MemoryFairSide, MemoryPermitSide, MemoryReadSide,
    MemoryWriteSide,
};
pub use notify::{ReleaseHub, ReleaseWatch};
pub use options::{Lease, LockOptions, Wait};
pub use owner::{Owner, new_client_id};
pub use permit_locker::PermitLocker;
pub use rw_backend::{ReadWriteBackend, RwMode, RwState};
pub use rw_locker::RwLocker;
pub use semaphore::Semaphore;
pub use semaphore_backend::{PermitsTaken, SemaphoreBackend, SemaphoreState};

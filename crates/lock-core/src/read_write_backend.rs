//! The contract of a read-write lock store: two [`LockBackend`]s over one set of names, one
//! per side, plus a snapshot of both sides at once.
//!
//! Each side is an ordinary lock backend, so everything built on [`LockBackend`] works on it
//! unchanged: the [`crate::Locker`] (waiting, guards, the watchdog, the cleanup after outcomes
//! of unknown effect), and composites over many stores (a MultiLock or RedLock of read locks).
//! [`crate::ReadWriteLock`] pairs the two sides' lockers for users.

use std::future::Future;
use std::time::Duration;

use crate::contract::LockBackend;
use crate::error::Result;

/// Which side holds a read-write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadWriteMode {
    /// Held by readers (possibly many owner fields).
    Read,
    /// Held by one writer (which may also hold read holds: a downgrade).
    Write,
}

/// A snapshot of one read-write lock; see [`ReadWriteBackend::read_write_state`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadWriteState {
    /// Which side holds the lock; `None` when it is free.
    pub mode: Option<ReadWriteMode>,
    /// Every owner field with read holds, with its read hold count, sorted.
    pub readers: Vec<(String, u32)>,
    /// The owner field holding the write side, with its write hold count.
    pub writer: Option<(String, u32)>,
    /// The remaining lease of the lock, when it is held and has one.
    pub ttl: Option<Duration>,
}

impl ReadWriteState {
    /// A state from its parts.
    #[must_use]
    pub fn new(
        mode: Option<ReadWriteMode>,
        readers: Vec<(String, u32)>,
        writer: Option<(String, u32)>,
        ttl: Option<Duration>,
    ) -> Self {
        ReadWriteState {
            mode,
            readers,
            writer,
            ttl,
        }
    }

    /// Whether anyone holds the lock.
    #[must_use]
    pub fn is_locked(&self) -> bool {
        self.mode.is_some()
    }
}

/// A store of read-write locks: many readers or one writer per name.
///
/// [`read_side`](Self::read_side) and [`write_side`](Self::write_side) are lock backends over
/// the same names; each keeps the whole [`LockBackend`] contract, with these rules for what a
/// grant means (owner fields as in [`LockBackend`]; the two sides of one client have the same
/// [`LockBackend::client_id`], so one [`crate::Owner`] is the same holder on both):
///
/// - **Read side.** `try_acquire` grants when the lock is free, when it is held in read mode
///   (by any owner fields), or when it is held in write mode by this same owner field (a
///   writer may also read: a *downgrade*, which keeps the lock in write mode while the write
///   hold lasts). Otherwise it answers `Held`. Hold counts count each owner field's read holds.
///   Each read hold has a lease of its own. `release` gives back the owner field's read hold
///   whose lease ends first (never one a longer-leased guard counts on), and in read mode the
///   lock then lasts as long as the longest read hold left (its `lease` argument is not used;
///   in write mode the write hold's lease stands);
///   [`ReleaseOutcome::Released`](crate::ReleaseOutcome) means this owner field holds no read
///   hold any more (other readers may still hold the lock). A reader that stops renewing (a
///   crashed holder) does not keep the lock: alone, its hold ends with its lease; among other
///   readers, the lock is free once they have all given theirs back. A read hold whose lease
///   ran out is not counted again: before granting, `try_acquire` forgets the owner field's
///   read holds whose leases have ended, so the hold count it answers counts live holds only
///   (a hold nobody saw granted, e.g. an acquire whose answer was lost, would otherwise stay
///   counted under its owner for as long as other readers keep the lock alive).
/// - **Write side.** `try_acquire` grants when the lock is free, or when this owner field
///   already holds the write side (a re-entry). It fails with
///   [`Error::UpgradeRefused`](crate::Error::UpgradeRefused), at once and changing nothing,
///   when this owner field holds read holds and no write hold: waiting would wait for itself.
///   Otherwise `Held`. `release` of the last write hold frees the lock, or, when the same owner
///   field still holds read holds, leaves it in read mode for as long as they last (and wakes
///   waiting readers).
/// - **Notifications.** Both sides' `watch_releases` hear every change that may let a waiter
///   of either side in: a writer leaving wakes every waiter (readers can all enter), the last
///   reader leaving wakes one.
/// - **Fencing tokens**, when asked for, come from one counter per name shared by both sides.
/// - **Force-release** on a side deletes the lock only when it is held in that side's mode.
///
/// # Example
///
/// ```
/// use lock_core::{LockOptions, Locker, MemoryBackend, Owner};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// // Users reach the contract through `Locker::read_write`.
/// let catalog = Locker::new(MemoryBackend::new()).read_write("catalog")?;
/// let reading = catalog.read().await?;
/// let also_reading = catalog.read_with(&LockOptions::new().owner(Owner::new())).await?;
/// assert!(catalog.try_write().await.is_err()); // this task reads: no upgrade
/// drop((reading, also_reading));
/// # Ok(())
/// # }
/// ```
pub trait ReadWriteBackend: Send + Sync + 'static {
    /// The read side.
    type Read: LockBackend;
    /// The write side.
    type Write: LockBackend;

    /// The read side, sharing this backend's store, connections and client id.
    fn read_side(&self) -> Self::Read;

    /// The write side, sharing this backend's store, connections and client id.
    fn write_side(&self) -> Self::Write;

    /// The write side with **writers preferred**: a writer that waits ([`LockBackend::queues`]
    /// is `true` for it) records itself as waiting, with a deadline of
    /// [`QUEUE_TIMEOUT`](crate::fair_backend::QUEUE_TIMEOUT) from each attempt by the store's
    /// clock, and while any writer waits, the read side grants no read hold to an owner field
    /// that holds none (re-entries and a writer's own downgrade still go through); the last
    /// reader leaving then wakes every waiter, so the writer is among them. A writer that gives
    /// up leaves ([`LockBackend::leave_queue`]); one that went away is forgotten when its
    /// deadline passes. Under a steady stream of readers, a writer of this side gets the lock
    /// once the readers in at its arrival have left.
    fn preferring_write_side(&self) -> Self::Write;

    /// Both sides of the lock `name` in one consistent snapshot (read only).
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it changes nothing.
    fn read_write_state(&self, name: &str) -> impl Future<Output = Result<ReadWriteState>> + Send;
}

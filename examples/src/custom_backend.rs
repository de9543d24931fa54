//! A lock backend written against `lock-core` alone: the teaching example for "writing a backend".
//!
//! The store is a `std::sync::Mutex<HashMap>` shared by every client made from it: think of it as
//! a tiny lock server that all "processes" (clients) talk to. A real backend would send each step
//! to its store (a Lua script, a SQL transaction, an etcd txn...); the shape stays the same.
//!
//! What a backend has to provide, and what it gets for free:
//!
//! - **It provides** one *atomic* step per [`LockBackend`] method (acquire attempt, release,
//!   batched renewal, abandon, force-release, inspect), leases that really expire, and release
//!   notifications ([`ReleaseHub`] here).
//! - **It gets** from [`lock_core::Locker`]: waiting (with deadlines), the watchdog that renews
//!   leases, guards, `lost()`, reentrancy bookkeeping per task, and cancel safety.
//!
//! A lock is held by one *owner field* at a time, the string `<client id>:<holder id>` that the
//! locker passes in; the same owner may hold it several times (re-entry), counted in `holds`.
//!
//! `examples/tests/custom_backend_conformance.rs` runs `lock-testkit`'s conformance suite on this
//! backend: do the same for yours.
//!
//! # Example
//!
//! ```
//! use distlock::Locker;
//! use distlock_examples::custom_backend::MapBackend;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> distlock::Result<()> {
//! let store = MapBackend::new();
//! let process_a = Locker::new(store.clone());
//! let process_b = Locker::new(store.new_client());
//! let guard = process_a.lock("job:1").await?;
//! assert!(process_b.try_lock("job:1").await?.is_none());
//! assert!(guard.release().await?.was_held());
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, LockState, ReleaseHub, ReleaseOutcome,
    ReleaseWatch, RenewOutcome, Renewal, Result,
};
// tokio's clock rather than std's, so tests with paused time (`tokio::time::pause`) work.
use tokio::time::Instant;

/// One held lock.
struct Entry {
    /// `<client id>:<holder id>` of the holder.
    owner: String,
    /// How many times the owner holds it (re-entries count up, releases count down).
    holds: u32,
    /// When the lease runs out. Acquire, renew and a partial release move it.
    expires_at: Instant,
}

/// The contents of the store.
#[derive(Default)]
struct Tables {
    locks: HashMap<String, Entry>,
    /// Fencing counters. They outlive the locks: a token must never repeat for a name.
    tokens: HashMap<String, u64>,
}

impl Tables {
    /// The entry of `name` if its lease has not run out. Expiry is lazy: an expired entry is
    /// removed when it is next looked at. No release notification is sent for it (Redis sends
    /// none either): waiters never sleep past the holder's remaining lease anyway.
    fn live(&mut self, name: &str) -> Option<&mut Entry> {
        if self
            .locks
            .get(name)
            .is_some_and(|entry| entry.expires_at <= Instant::now())
        {
            self.locks.remove(name);
        }
        self.locks.get_mut(name)
    }
}

/// What all clients of one store share.
struct Store {
    tables: Mutex<Tables>,
    /// Hands release notifications to this process's waiters, one waiter per release.
    releases: ReleaseHub,
}

/// A lock store in a `Mutex<HashMap>`, with expiry, reentrancy, fencing tokens and release
/// notifications: a complete [`LockBackend`] in about a hundred lines.
///
/// Each value is one client of the store; [`MapBackend::new_client`] makes another client of the
/// same store, as another process would be.
#[derive(Clone)]
pub struct MapBackend {
    /// Written before the holder id in owner fields; must differ between clients.
    client_id: String,
    store: Arc<Store>,
}

impl std::fmt::Debug for MapBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapBackend")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl Default for MapBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MapBackend {
    /// A new, empty store, and a first client of it.
    #[must_use]
    pub fn new() -> Self {
        MapBackend {
            client_id: lock_core::new_client_id(),
            store: Arc::new(Store {
                tables: Mutex::new(Tables::default()),
                releases: ReleaseHub::new(),
            }),
        }
    }

    /// Another client of the same store, with its own client id.
    #[must_use]
    pub fn new_client(&self) -> Self {
        MapBackend {
            client_id: lock_core::new_client_id(),
            store: self.store.clone(),
        }
    }

    /// Locks the tables. Every method takes this lock once and does its whole step under it:
    /// that is what makes each step atomic. It is never held across an `.await` (there is none),
    /// which also keeps the returned futures `Send`.
    fn tables(&self) -> MutexGuard<'_, Tables> {
        // A panic while holding the lock cannot leave the tables half-updated in a way that
        // matters here, so a poisoned lock is simply taken over.
        self.store.tables.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LockBackend for MapBackend {
    fn client_id(&self) -> &str {
        &self.client_id
    }

    // `check_name` keeps its default (non-empty, at most 4096 bytes). Override it if your store
    // has rules of its own for keys, and call `lock_core::options::check_name` first.

    /// Free or already ours: take it (or re-enter) and set the lease. Otherwise say how long the
    /// holder's lease still runs, so waiters do not sleep past it.
    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let mut tables = self.tables();
        let now = Instant::now();
        let expires_at = now + request.lease;
        let hold_count = match tables.live(request.name) {
            Some(entry) if entry.owner != request.owner_field => {
                let ttl = entry.expires_at.saturating_duration_since(now);
                return Ok(AcquireOutcome::Held { ttl: Some(ttl) });
            }
            Some(entry) => {
                entry.holds += 1;
                // Re-entry: only ever lengthen, so a nested short lease cannot cut the outer one.
                entry.expires_at = entry.expires_at.max(expires_at);
                entry.holds
            }
            None => {
                let entry = Entry {
                    owner: request.owner_field.to_owned(),
                    holds: 1,
                    expires_at,
                };
                tables.locks.insert(request.name.to_owned(), entry);
                1
            }
        };
        // A fencing token only when asked for; every grant (re-entries too) gets a new one.
        let fencing_token = request.fencing.then(|| {
            let token = tables.tokens.entry(request.name.to_owned()).or_insert(0);
            *token += 1;
            *token
        });
        Ok(AcquireOutcome::Acquired(Grant {
            hold_count,
            fencing_token,
        }))
    }

    /// One hold back. Not ours (or expired): `NotHeld`, change nothing. Holds left: reset the
    /// lease. Last hold: delete the lock and wake a waiter.
    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let mut tables = self.tables();
        let Some(entry) = tables.live(name).filter(|entry| entry.owner == owner_field) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        entry.holds -= 1;
        if entry.holds > 0 {
            entry.expires_at = entry.expires_at.max(Instant::now() + lease);
            return Ok(ReleaseOutcome::StillHeld {
                hold_count: entry.holds,
            });
        }
        tables.locks.remove(name);
        drop(tables); // notify outside the store's lock
        self.store.releases.notify_released(name);
        Ok(ReleaseOutcome::Released)
    }

    /// The watchdog's batched renewal: extend each lease that is still ours, report which were.
    /// `NotHeld` tells the guard its lock is lost (`LeaseLoss::NotOurs`).
    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        let mut tables = self.tables();
        let now = Instant::now();
        Ok(renewals
            .iter()
            .map(|renewal| match tables.live(renewal.name) {
                Some(entry) if entry.owner == renewal.owner_field => {
                    entry.expires_at = entry.expires_at.max(now + renewal.lease);
                    RenewOutcome::Renewed
                }
                _ => RenewOutcome::NotHeld,
            })
            .collect())
    }

    /// Called after a step whose outcome could not be seen (a timeout, a broken connection): by
    /// the locker after an ambiguous acquire or release, and by a composite (MultiLock, RedLock)
    /// to undo a failed attempt on each of its nodes. Lowers the owner's holds to at most
    /// `keep`, freeing the lock at zero; idempotent, unlike retrying the acquire. This store
    /// never fails mid-call, so on its own it is only called as a composite's node.
    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        let mut tables = self.tables();
        let Some(entry) = tables.live(name).filter(|entry| entry.owner == owner_field) else {
            return Ok(());
        };
        if entry.holds <= keep {
            return Ok(());
        }
        if keep > 0 {
            entry.holds = keep;
            return Ok(());
        }
        tables.locks.remove(name);
        drop(tables);
        self.store.releases.notify_released(name);
        Ok(())
    }

    /// Delete the lock whoever holds it. Its holder finds out at its next renewal.
    async fn force_release(&self, name: &str) -> Result<bool> {
        let mut tables = self.tables();
        let existed = tables.live(name).is_some();
        tables.locks.remove(name);
        drop(tables);
        if existed {
            self.store.releases.notify_released(name);
        }
        Ok(existed)
    }

    /// Who holds it, how many times, and for how long still.
    async fn inspect(&self, name: &str) -> Result<LockState> {
        let mut tables = self.tables();
        let now = Instant::now();
        Ok(match tables.live(name) {
            Some(entry) => LockState::new(
                vec![(entry.owner.clone(), entry.holds)],
                Some(entry.expires_at.saturating_duration_since(now)),
            ),
            None => LockState::default(),
        })
    }

    /// A waiter registers here before it waits. The hub shares one topic per name among this
    /// process's waiters and wakes one of them per `notify_released`.
    ///
    /// A networked store would also subscribe on the server, once per name:
    /// `watch.ensure_subscribed(|topic_id| async { /* SUBSCRIBE */ Ok(()) }).await?`, and unsubscribe from
    /// the hook given to `ReleaseHub::with_idle_hook`. A store without notifications returns
    /// `ReleaseWatch::polling(interval)` instead: waiters then re-check on a timer.
    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.store.releases.watch(name))
    }
}

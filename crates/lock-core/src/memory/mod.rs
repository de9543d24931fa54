//! An in-memory backend with real expiry, for unit tests of code that takes locks: the locks
//! here (their fair side in [`fair`], elections on them in [`election`]), the semaphores in [`semaphore`] (their lease-bound
//! permits in [`permits`]), the read-write locks in [`rwlock`], the countdown latches in
//! [`latch`].

mod election;
mod fair;
mod latch;
mod permits;
mod rwlock;
mod semaphore;

pub use election::MemoryCampaignSide;
pub use fair::MemoryFairSide;
pub use permits::MemoryPermitSide;
pub use rwlock::{MemoryReadSide, MemoryWriteSide};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::contract::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, LockState, ReleaseOutcome, RenewOutcome,
    Renewal,
};
use crate::error::Result;
use crate::notify::{ReleaseHub, ReleaseWatch};

#[derive(Default)]
pub(super) struct Held {
    /// Owner field (`<client id>:<holder id>`) → hold count.
    holders: HashMap<String, u32>,
    expires_at: Option<Instant>,
}

#[derive(Default)]
pub(super) struct Tables {
    locks: HashMap<String, Held>,
    /// The last fencing token per name; kept when the lock goes, for the life of the store.
    fencing: HashMap<String, u64>,
    /// Semaphores: name → available permits.
    semaphores: HashMap<String, i64>,
    /// Read-write locks.
    rwlocks: HashMap<String, rwlock::RwHeld>,
    /// Writers of writer-preferring sides waiting for a read-write lock, with their deadlines.
    rw_writers_waiting: HashMap<String, Vec<(String, Instant)>>,
    /// Elections: name → the leader's owner field and value (the leadership is the lock in
    /// `locks`).
    leaders: HashMap<String, (String, String)>,
    /// Fair locks' queues of waiters (the locks themselves are in `locks`).
    fair_queues: HashMap<String, fair::Queue>,
    /// Lease-bound permits out, per semaphore name (the count is in `semaphores`).
    permits: HashMap<String, Vec<permits::Permit>>,
    /// Countdown latches: name → count (absent once open).
    latches: HashMap<String, u64>,
}

struct Store {
    tables: Mutex<Tables>,
    hub: ReleaseHub,
    /// Tests of the watchdog: how long a renewal call takes, and how many were made.
    #[cfg(test)]
    renewing: RenewProbe,
}

#[cfg(test)]
#[derive(Default)]
struct RenewProbe {
    delay: Mutex<std::time::Duration>,
    calls: std::sync::atomic::AtomicUsize,
}

/// A lock store in process memory with the same semantics as the Redis backend: reentrant hold
/// counts, leases that really expire (on tokio's clock, so paused-time tests work), fencing
/// counters and release notifications; and semaphores ([`crate::SemaphoreBackend`]). Every step is one critical section under the store's
/// mutex, so it is atomic and never fails; it meets the whole [`LockBackend`] contract, except
/// that fencing tokens only grow for the life of the store (a new store starts again at 1).
///
/// [`MemoryBackend::new_client`] gives another client (its own client id) of the same store, to
/// play several processes in one test.
///
/// # Example
///
/// ```
/// use lock_core::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::Error> {
/// let store = MemoryBackend::new();
/// let process_a = Locker::new(store.clone());
/// let process_b = Locker::new(store.new_client());
/// let held = process_a.lock("job").await?;
/// assert!(process_b.try_lock("job").await?.is_none());
/// drop(held);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    client_id: String,
    store: Arc<Store>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// A new, empty store with one client.
    #[must_use]
    pub fn new() -> Self {
        MemoryBackend {
            client_id: crate::owner::new_client_id(),
            store: Arc::new(Store {
                tables: Mutex::new(Tables::default()),
                hub: ReleaseHub::new(),
                #[cfg(test)]
                renewing: RenewProbe::default(),
            }),
        }
    }

    /// Another client of the same store, with its own client id.
    #[must_use]
    pub fn new_client(&self) -> Self {
        MemoryBackend {
            client_id: crate::owner::new_client_id(),
            store: self.store.clone(),
        }
    }

    /// Whether `name` is held: a lock exists for it and its lease has not run out.
    #[must_use]
    pub fn has_lock(&self, name: &str) -> bool {
        let mut tables = self.tables();
        live(&mut tables.locks, name).is_some()
    }

    /// Makes every renewal call take `delay` (on tokio's clock), as a round trip would.
    #[cfg(test)]
    pub(crate) fn set_renew_delay(&self, delay: std::time::Duration) {
        *self
            .store
            .renewing
            .delay
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = delay;
    }

    /// How many renewal calls (batches) were made.
    #[cfg(test)]
    pub(crate) fn renew_calls(&self) -> usize {
        self.store
            .renewing
            .calls
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.store.tables.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The entry for `name` if it exists and has not expired; an expired one is removed.
pub(super) fn live<'a>(locks: &'a mut HashMap<String, Held>, name: &str) -> Option<&'a mut Held> {
    let expired = locks
        .get(name)
        .is_some_and(|held| held.expires_at.is_some_and(|at| at <= Instant::now()));
    if expired {
        locks.remove(name);
    }
    locks.get_mut(name)
}

/// Moves the expiry later, never earlier: one hold's shorter lease must not cut short another
/// hold of the same lock (as on Redis, where the scripts only ever lengthen the PEXPIRE).
pub(super) fn extend_to(held: &mut Held, until: Instant) {
    if held.expires_at.is_none_or(|at| at < until) {
        held.expires_at = Some(until);
    }
}

impl LockBackend for MemoryBackend {
    fn client_id(&self) -> &str {
        &self.client_id
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let mut tables = self.tables();
        let now = Instant::now();
        if let Some(held) = live(&mut tables.locks, request.name)
            && !held.holders.contains_key(request.owner_field)
        {
            let ttl = held.expires_at.map(|at| at.saturating_duration_since(now));
            return Ok(AcquireOutcome::Held { ttl });
        }
        let held = tables.locks.entry(request.name.to_owned()).or_default();
        let count = held
            .holders
            .entry(request.owner_field.to_owned())
            .or_insert(0);
        *count += 1;
        let hold_count = *count;
        extend_to(held, now + request.lease);
        let fencing_token = request.fencing.then(|| {
            let token = tables.fencing.entry(request.name.to_owned()).or_insert(0);
            *token += 1;
            *token
        });
        Ok(AcquireOutcome::Acquired(Grant {
            hold_count,
            fencing_token,
        }))
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let mut tables = self.tables();
        let Some(held) = live(&mut tables.locks, name) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let Some(count) = held.holders.get_mut(owner_field) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        *count -= 1;
        if *count > 0 {
            let hold_count = *count;
            extend_to(held, Instant::now() + lease);
            return Ok(ReleaseOutcome::StillHeld { hold_count });
        }
        tables.locks.remove(name);
        drop(tables);
        self.store.hub.notify_released(name);
        Ok(ReleaseOutcome::Released)
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        #[cfg(test)]
        {
            let probe = &self.store.renewing;
            probe
                .calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let delay = *probe.delay.lock().unwrap_or_else(|e| e.into_inner());
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
        let mut tables = self.tables();
        let now = Instant::now();
        Ok(renewals
            .iter()
            .map(|renewal| match live(&mut tables.locks, renewal.name) {
                Some(held) if held.holders.contains_key(renewal.owner_field) => {
                    extend_to(held, now + renewal.lease);
                    RenewOutcome::Renewed
                }
                _ => RenewOutcome::NotHeld,
            })
            .collect())
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        let mut tables = self.tables();
        let Some(held) = live(&mut tables.locks, name) else {
            return Ok(());
        };
        match held.holders.get_mut(owner_field) {
            Some(count) if *count > keep => {
                if keep > 0 {
                    *count = keep;
                    return Ok(());
                }
                held.holders.remove(owner_field);
            }
            _ => return Ok(()),
        }
        if held.holders.is_empty() {
            tables.locks.remove(name);
            drop(tables);
            self.store.hub.notify_released(name);
        }
        Ok(())
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let mut tables = self.tables();
        let existed = live(&mut tables.locks, name).is_some();
        tables.locks.remove(name);
        drop(tables);
        if existed {
            self.store.hub.notify_released(name);
        }
        Ok(existed)
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        let mut tables = self.tables();
        let now = Instant::now();
        Ok(match live(&mut tables.locks, name) {
            Some(held) => {
                let mut holders: Vec<(String, u32)> = held
                    .holders
                    .iter()
                    .map(|(field, count)| (field.clone(), *count))
                    .collect();
                holders.sort();
                LockState::new(
                    holders,
                    held.expires_at.map(|at| at.saturating_duration_since(now)),
                )
            }
            None => LockState::default(),
        })
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.store.hub.watch(name))
    }
}

//! The hold book: which holds this process knows it has, per (name, owner field), and the debts
//! left by calls of unknown outcome whose cleanup failed.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::LockBackend;
use crate::error::Result;
use crate::hold::Hold;

/// What this process holds, and what the store may hold beyond that.
pub(crate) struct HoldBook {
    /// Live guards per (name, owner field) in this process: what we know we hold. After an acquire
    /// whose outcome is unknown, the store is told to keep exactly this many holds.
    /// Keyed by the first live hold's record, and searched with borrowed strings, so neither
    /// noting a hold nor a lookup allocates.
    holds: Mutex<HashMap<KnownHold, u32>>,
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
    any_debt: AtomicBool,
    /// Acquires and releases under way, per (name, owner field), keyed by a hash of the pair
    /// (no allocation per call; a collision only makes a background cleanup leave its debt to
    /// the owner's next call). A cleanup settles a debt only when none is under way: while one
    /// is, the holds known here are not yet the store's (a release forgotten here but not yet
    /// applied, an acquire applied but not yet counted).
    busy: Arc<Mutex<HashMap<u64, u32>>>,
}

/// An acquire or release under way, counted in the hold book until dropped (it may be moved
/// into the task that finishes the call).
pub(crate) struct Busy {
    map: Arc<Mutex<HashMap<u64, u32>>>,
    key: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut busy = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = busy.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                busy.remove(&self.key);
            }
        }
    }
}

fn busy_key(name: &str, field: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut hasher);
    field.hash(&mut hasher);
    hasher.finish()
}

/// An unsettled cleanup of one (name, owner field).
#[derive(Clone, Copy, Debug)]
struct Debt {
    /// When the store has surely expired the unseen grant, if no hold of the owner outlives it.
    lapses: Instant,
    /// The lease the unseen grant (or a later hold's last renewal) may have set.
    lease: Duration,
}

/// A (lock name, owner field) pair however it is stored, so the map of holds, keyed by hold
/// records, can be searched with two borrowed strings.
trait NameAndField {
    fn name(&self) -> &str;
    fn field(&self) -> &str;
}

impl NameAndField for (&str, &str) {
    fn name(&self) -> &str {
        self.0
    }
    fn field(&self) -> &str {
        self.1
    }
}

impl Hash for dyn NameAndField + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state);
        self.field().hash(state);
    }
}

impl PartialEq for dyn NameAndField + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.field() == other.field()
    }
}

impl Eq for dyn NameAndField + '_ {}

/// A key of the map of holds: the record of the first live hold of its (name, owner field),
/// compared and hashed by those two strings only.
struct KnownHold(Arc<Hold>);

impl NameAndField for KnownHold {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn field(&self) -> &str {
        self.0.field()
    }
}

// Hashing and equality go through `dyn NameAndField`, so they agree with the borrowed form, as
// `Borrow` requires.
impl Hash for KnownHold {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn NameAndField).hash(state);
    }
}

impl PartialEq for KnownHold {
    fn eq(&self, other: &Self) -> bool {
        (self as &dyn NameAndField) == (other as &dyn NameAndField)
    }
}

impl Eq for KnownHold {}

impl<'a> Borrow<dyn NameAndField + 'a> for KnownHold {
    fn borrow(&self) -> &(dyn NameAndField + 'a) {
        self
    }
}

impl HoldBook {
    pub fn new() -> Self {
        HoldBook {
            holds: Mutex::new(HashMap::new()),
            debts: Mutex::new(HashMap::new()),
            any_debt: AtomicBool::new(false),
            busy: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Counts an acquire or release of (`name`, `field`) as under way until the result is
    /// dropped.
    pub fn begin(&self, name: &str, field: &str) -> Busy {
        let key = busy_key(name, field);
        *self
            .busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_insert(0) += 1;
        Busy {
            map: self.busy.clone(),
            key,
        }
    }

    /// Whether an acquire or release of (`name`, `field`) is under way.
    pub fn is_busy(&self, name: &str, field: &str) -> bool {
        self.busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&busy_key(name, field))
    }

    /// Counts one more hold of its (name, owner field).
    pub fn note_hold(&self, hold: &Arc<Hold>) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        let key = (hold.name(), hold.field());
        match holds.get_mut(&key as &dyn NameAndField) {
            Some(count) => *count += 1,
            None => {
                holds.insert(KnownHold(hold.clone()), 1);
            }
        }
    }

    /// Forgets one hold; returns the holds of that owner on that name still known.
    ///
    /// When that was the owner's last hold and a debt is open for it, the debt's lapse is pushed
    /// to one lease (the hold's current one) from now: the hold's renewals kept the unseen count
    /// alive on the store until now, so it only expires a lease after this (or goes when the
    /// release settles the debt). The debts are locked before the holds, as
    /// `prune_lapsed_debts` does, so no prune sees the hold gone before the lapse is pushed.
    pub fn forget_hold(&self, hold: &Hold) -> u32 {
        let (name, field) = (hold.name(), hold.field());
        if !self.any_debt.load(Ordering::Acquire) {
            return self.forget_known_hold(name, field);
        }
        let mut debts = self.debts.lock().unwrap_or_else(|e| e.into_inner());
        let left = self.forget_known_hold(name, field);
        if left == 0
            && let Some(debt) = debts.get_mut(name).and_then(|owners| owners.get_mut(field))
        {
            let lease = debt.lease.max(hold.lease());
            debt.lease = lease;
            debt.lapses = debt.lapses.max(Instant::now() + lease);
        }
        left
    }

    fn forget_known_hold(&self, name: &str, field: &str) -> u32 {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        let key = (name, field);
        let Some(count) = holds.get_mut(&key as &dyn NameAndField) else {
            return 0;
        };
        *count -= 1;
        let left = *count;
        if left == 0 {
            holds.remove(&key as &dyn NameAndField);
        }
        left
    }

    /// The holds of `field` on `name` this process knows of.
    pub fn known_holds(&self, name: &str, field: &str) -> u32 {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds
            .get(&(name, field) as &dyn NameAndField)
            .copied()
            .unwrap_or(0)
    }

    /// Records that the store may hold `field` on `name` more often than known here, for at
    /// most `lease` from now unless a hold of that owner keeps it alive.
    pub fn note_debt(&self, name: &str, field: &str, lease: Duration) {
        let mut debts = self.debts.lock().unwrap_or_else(|e| e.into_inner());
        let lapses = Instant::now() + lease;
        let debt = debts
            .entry(name.to_owned())
            .or_default()
            .entry(field.to_owned())
            .or_insert(Debt { lapses, lease });
        debt.lapses = debt.lapses.max(lapses);
        debt.lease = debt.lease.max(lease);
        self.any_debt.store(true, Ordering::Release);
    }

    fn has_debt(&self, name: &str, field: &str) -> bool {
        if !self.any_debt.load(Ordering::Acquire) {
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
            self.any_debt.store(false, Ordering::Release);
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
            self.any_debt.store(false, Ordering::Release);
        }
    }

    /// Sets the owner's count on the store to `keep` if an earlier cleanup failed.
    ///
    /// # Errors
    ///
    /// The cleanup's error when it fails again: the debt stays for the next call (the lease
    /// bounds it in any case), and the caller must not go on, since an acquire or release on
    /// top of an unknown count would leave (or report) the wrong count.
    pub async fn settle_debt<B: LockBackend>(
        &self,
        backend: &B,
        name: &str,
        field: &str,
        keep: u32,
    ) -> Result<()> {
        if !self.has_debt(name, field) {
            return Ok(());
        }
        match backend.abandon(name, field, keep).await {
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

    /// Whether no hold is known.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.holds.lock().unwrap().is_empty()
    }

    /// Whether a debt may be open (the flag the hot path reads).
    #[cfg(test)]
    pub fn may_have_debts(&self) -> bool {
        self.any_debt.load(Ordering::SeqCst)
    }
}

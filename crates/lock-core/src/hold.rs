//! The record of one hold (lock name, owner, lease, lease status), shared by its guard and the
//! watchdog.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::contract::{AcquireRequest, Renewal};
use crate::owner::{MAX_HOLDER_SUFFIX_LEN, Owner};

/// Why a lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseLoss {
    /// The store said the lock is no longer ours (deleted, expired or taken over).
    NotOurs,
    /// The validity deadline passed without a confirmed renewal.
    Expired,
}

/// What a guard knows about its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseStatus {
    /// The lease is ours until at least this instant (measured from the send time of the last
    /// successful acquire or renewal).
    pub valid_until: Instant,
    /// Set once the lease is known to be lost.
    pub lost: Option<LeaseLoss>,
}

/// Who holds what: the lock name and the owner, with its owner field on the store.
///
/// Name and field share one buffer, so naming a hold costs one allocation. Made before the first
/// acquire attempt (the requests borrow from it) and moved into the [`Hold`] once granted.
pub(crate) struct HoldKey {
    /// The lock name followed by the owner field.
    text: String,
    name_len: usize,
    owner: Owner,
}

impl HoldKey {
    pub fn new(name: &str, owner: Owner, client_id: &str) -> Self {
        let mut text = String::with_capacity(name.len() + client_id.len() + MAX_HOLDER_SUFFIX_LEN);
        text.push_str(name);
        owner.write_field(client_id, &mut text);
        HoldKey {
            text,
            name_len: name.len(),
            owner,
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.text[..self.name_len]
    }

    /// The owner field, `<client id>:<holder id>`.
    pub fn field(&self) -> &str {
        &self.text[self.name_len..]
    }

    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// An acquire attempt for this name and owner; `known_holds` is filled in by the attempt.
    pub fn acquire_request(
        &self,
        lease: Duration,
        fencing: bool,
        waits: bool,
    ) -> AcquireRequest<'_> {
        AcquireRequest {
            name: self.name(),
            owner_field: self.field(),
            lease,
            fencing,
            known_holds: 0,
            waits,
        }
    }
}

/// One granted hold: what its guard and the watchdog (in watchdog mode) share through an
/// `Arc`, so the lease lives in one place whoever changes or reads it.
pub(crate) struct Hold {
    key: HoldKey,
    /// The lease length in nanoseconds; [`crate::LockGuard::extend`] changes it through `&self`,
    /// and the later renewals and the release (its lease reset, the lapse of a failed cleanup)
    /// must use the new one.
    lease_nanos: AtomicU64,
    /// The lease status the guard reports; the watchdog keeps it up to date. A mutex and a
    /// [`Notify`] rather than a `watch` channel: a channel's shared state is an allocation of
    /// its own whose drop wakes eight lists of receivers, paid by every hold, while only
    /// [`crate::LockGuard::lost`] ever waits for a change.
    status: Mutex<LeaseStatus>,
    /// Woken when the status changes in a way [`crate::LockGuard::lost`] must see.
    changed: Notify,
    /// When the grant was asked for (the hold's start, for its hold time).
    acquired_at: Instant,
}

impl Hold {
    pub fn new(
        key: HoldKey,
        lease: Duration,
        valid_until: Instant,
        acquired_at: Instant,
    ) -> Arc<Self> {
        Arc::new(Hold {
            key,
            lease_nanos: AtomicU64::new(nanos(lease)),
            status: Mutex::new(LeaseStatus {
                valid_until,
                lost: None,
            }),
            changed: Notify::new(),
            acquired_at,
        })
    }

    /// How long ago the grant was asked for.
    pub fn held_for(&self) -> Duration {
        self.acquired_at.elapsed()
    }

    /// Marks the lease lost for `reason`, unless it already was; the first time, says so (a
    /// `warn` event and the leases-lost count).
    pub fn mark_lost(&self, reason: LeaseLoss) {
        let first = {
            let mut status = self.lock_status();
            let first = status.lost.is_none();
            if first {
                status.lost = Some(reason);
            }
            first
        };
        if first {
            self.changed.notify_waiters();
            let why = match reason {
                LeaseLoss::Expired => "expired",
                LeaseLoss::NotOurs => "not_ours",
            };
            crate::telemetry::lease_lost(self.name(), self.field(), why);
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.key.name()
    }

    /// The owner field, `<client id>:<holder id>`.
    pub fn field(&self) -> &str {
        self.key.field()
    }

    pub fn owner(&self) -> Owner {
        self.key.owner()
    }

    /// The lease length set on each acquire and renewal.
    pub fn lease(&self) -> Duration {
        Duration::from_nanos(self.lease_nanos.load(Ordering::Relaxed))
    }

    pub fn set_lease(&self, lease: Duration) {
        self.lease_nanos.store(nanos(lease), Ordering::Relaxed);
    }

    /// The lease status now.
    pub fn status(&self) -> LeaseStatus {
        *self.lock_status()
    }

    /// Moves the validity deadline to `valid_until`; `wake` wakes the guard's
    /// [`lost`](crate::LockGuard::lost) to re-arm its timer (the watchdog does not: `lost`
    /// re-reads the deadline when its timer fires, and one wake-up per renewal adds up with
    /// thousands of held locks).
    pub fn set_valid_until(&self, valid_until: Instant, wake: bool) {
        self.lock_status().valid_until = valid_until;
        if wake {
            self.changed.notify_waiters();
        }
    }

    /// A future that resolves at the next status change that wakes (see
    /// [`Self::set_valid_until`] and [`Self::mark_lost`]); it counts changes from the moment it
    /// is made, before its first poll, so a status read after making it misses none.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// The status behind its lock; nothing panics while holding it, but a poisoned lock is
    /// still a valid status.
    fn lock_status(&self) -> MutexGuard<'_, LeaseStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A renewal of this hold to `lease`.
    pub fn renewal(&self, lease: Duration) -> Renewal<'_> {
        Renewal {
            name: self.name(),
            owner_field: self.field(),
            lease,
        }
    }
}

/// A lease in nanoseconds; leases are checked against `MAX_DURATION`, far below `u64::MAX` ns.
fn nanos(lease: Duration) -> u64 {
    u64::try_from(lease.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_splits_into_the_name_and_the_owner_field() {
        let owner = Owner::from_holder_id(u64::MAX);
        let key = HoldKey::new("orders:7", owner, "c0ffee");
        assert_eq!(key.name(), "orders:7");
        assert_eq!(key.field(), owner.field("c0ffee"));
        assert_eq!(key.field(), "c0ffee:18446744073709551615");
    }
}

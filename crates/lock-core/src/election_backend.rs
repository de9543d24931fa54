//! The contract of a leader election store: a lock backend whose grants make a leader and
//! record its value, and a way to read and watch the current leader.

use std::future::Future;
use std::time::Duration;

use crate::contract::LockBackend;
use crate::error::Result;
use crate::notify::ReleaseWatch;

/// The leader of an election; see [`ElectionBackend::leader`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The value it campaigned with (an address, a name: whatever the candidates publish).
    pub value: String,
    /// Its owner field on the store (`<client id>:<holder id>`).
    pub owner_field: String,
    /// How long its lease still runs, when known.
    pub ttl: Option<Duration>,
}

impl Leader {
    /// A leader from its parts.
    #[must_use]
    pub fn new(value: String, owner_field: String, ttl: Option<Duration>) -> Self {
        Leader {
            value,
            owner_field,
            ttl,
        }
    }
}

/// The lock side of an election: an exclusive lock whose grant also records, atomically with
/// it, the value its owner field campaigns with ([`nominate`](Self::nominate)), and whose
/// release, abandon, expiry or force-release removes it. The value lives exactly as long as
/// the leadership: it expires with the lease, and renewals lengthen both.
pub trait CampaignBackend: LockBackend {
    /// Records `value` as what `owner_field` campaigns with; its grants write it as the
    /// leader's value. Local to this client (no I/O); call it before the first attempt.
    fn nominate(&self, owner_field: &str, value: &str);

    /// Forgets what `owner_field` campaigned with (its campaign is over). Local, no I/O. A
    /// release that frees the lock forgets it too (a leadership dropped without `resign`).
    fn withdraw(&self, owner_field: &str);
}

/// A store of leader elections: one per name.
///
/// [`campaign_side`](Self::campaign_side) is a [`CampaignBackend`]: a lock backend keeping the
/// whole [`LockBackend`] contract (one leader per name at a time, leases the store enforces,
/// growing fencing tokens: the leadership's *term*), whose grants also record the leader's
/// value. In addition:
///
/// - [`leader`](Self::leader) reads the current leader and its value in one snapshot: `None`
///   when nobody leads (the lock is free or its lease ran out).
/// - [`watch_leader`](Self::watch_leader) hears every change of leader (a grant, a release, an
///   abandon, a force-release), with the contract of [`LockBackend::watch_releases`]; a lease
///   that simply runs out is not announced (watchers read the leader again on a timer).
///
/// # Example
///
/// ```
/// use lock_core::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// // Users reach the contract through `Locker::election`.
/// let election = Locker::new(MemoryBackend::new()).election("scheduler")?;
/// let leadership = election.campaign("host-a:8080").await?;
/// assert_eq!(election.leader().await?.map(|leader| leader.value), Some("host-a:8080".into()));
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
pub trait ElectionBackend: Send + Sync + 'static {
    /// The campaign side.
    type Campaign: CampaignBackend;

    /// The campaign side, sharing this backend's store, connections and client id.
    fn campaign_side(&self) -> Self::Campaign;

    /// The current leader of `name`, with its value, in one consistent snapshot (read only).
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it changes nothing.
    fn leader(&self, name: &str) -> impl Future<Output = Result<Option<Leader>>> + Send;

    /// Registers for the announcements of leader changes of `name`.
    ///
    /// # Errors
    ///
    /// As [`LockBackend::watch_releases`]: prefer a polling watch to an error.
    ///
    /// # Cancel safety
    ///
    /// A dropped registration leaves no subscription behind for good.
    fn watch_leader(&self, name: &str) -> impl Future<Output = Result<ReleaseWatch>> + Send;
}

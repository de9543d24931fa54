//! [`Election`]: a handle on one leader election built on the lock, from
//! [`Locker::election`], with [`Leadership`] guards and [`LeaderObserver`]s, over any
//! [`ElectionBackend`].

use std::sync::Arc;
use std::time::Duration;

use crate::contract::{LockBackend, ReleaseOutcome};
use crate::election_backend::{CampaignBackend, ElectionBackend, Leader};
use crate::error::Result;
use crate::fencing::Fenced;
use crate::guard::LockGuard;
use crate::hold::LeaseLoss;
use crate::locker::Locker;
use crate::notify::ReleaseWatch;
use crate::options::LockOptions;
use crate::owner::Owner;

/// How often an observer reads the leader again without an announcement: a leader whose lease
/// simply ran out (a crashed leader) is not announced.
const OBSERVE_EVERY: Duration = Duration::from_secs(1);

/// Leader election: at most one leader of this election at a time among every client of the
/// store, each campaigning with a value (its address, say) that others read with
/// [`leader`](Self::leader) or follow with [`observe`](Self::observe). Made by
/// [`Locker::election`]; its name is bound when it is made.
///
/// Leadership is a watchdog-renewed lease, like a lock's: [`Leadership::lost`] resolves when it
/// is lost (the store said another leads, or renewals failed until the lease ran out), and a
/// leader that dies is replaced one lease later. Each leadership has a *term*, a fencing token
/// that grows with every new leader: pass it to what the leader writes so a deposed leader's
/// late writes can be refused. Semantics as etcd's election (campaign, resign, leader,
/// observe) and Curator's `LeaderLatch`; see `docs/election.md` for where they differ.
///
/// Cheap to clone; every handle from one locker (and its clones) shares one watchdog.
///
/// # Example
///
/// ```
/// use lock_core::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let locker = Locker::new(MemoryBackend::new());
/// let scheduler = locker.election("billing-scheduler")?;
/// let leadership = scheduler.campaign("10.0.0.7:9000").await?;
/// tokio::select! {
///     () = async { /* ... lead, writing with `leadership.term()` ... */ } => {}
///     loss = leadership.lost() => eprintln!("no longer the leader: {loss:?}"),
/// }
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
pub struct Election<B: ElectionBackend> {
    backend: Arc<B>,
    campaigns: Campaigns<B>,
    name: Arc<str>,
}

/// The campaign side and its locker: one per locker (see `crate::families`), shared by every
/// election handle it makes.
struct Campaigns<B: ElectionBackend> {
    side: B::Campaign,
    locker: Locker<B::Campaign>,
}

impl<B: ElectionBackend> Clone for Campaigns<B>
where
    B::Campaign: Clone,
{
    fn clone(&self) -> Self {
        Campaigns {
            side: self.side.clone(),
            locker: self.locker.clone(),
        }
    }
}

impl<B: ElectionBackend> Clone for Election<B>
where
    B::Campaign: Clone,
{
    fn clone(&self) -> Self {
        Election {
            backend: self.backend.clone(),
            campaigns: self.campaigns.clone(),
            name: self.name.clone(),
        }
    }
}

impl<B: ElectionBackend> std::fmt::Debug for Election<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<B: ElectionBackend + LockBackend> Locker<B>
where
    B::Campaign: Clone,
{
    /// A handle on the election `name` (see [`Election`]). Nothing is sent until the handle is
    /// used.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] for a name the backend refuses, before any I/O.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let locker = lock_core::Locker::new(lock_core::MemoryBackend::new());
    /// let leadership = locker.election("compactor")?.campaign("node-1").await?;
    /// assert_eq!(leadership.value(), "node-1");
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: &str) -> Result<Election<B>> {
        self.backend().check_name(name)?;
        let backend = self.shared_backend().clone();
        let campaigns = self.family(|| {
            let side = backend.campaign_side();
            Campaigns {
                locker: Locker::new(side.clone()),
                side,
            }
        });
        Ok(Election {
            backend: self.shared_backend().clone(),
            campaigns,
            name: name.into(),
        })
    }
}

impl<B: ElectionBackend> Election<B>
where
    B::Campaign: Clone,
{
    /// The election's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns for leadership with `value`, waiting as long as it takes; the leadership
    /// lasts while the returned guard lives (renewed by the watchdog).
    ///
    /// # Errors
    ///
    /// As [`Locker::lock`]: backend errors (retryable ones are ridden through for up to 30 s
    /// in a row).
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`]: a campaign dropped while its attempt is in flight may have won; the
    /// leadership is then given back in the background (or ends with its lease).
    pub async fn campaign(&self, value: &str) -> Result<Leadership<B>> {
        self.campaign_with(value, &LockOptions::new()).await
    }

    /// Campaigns with explicit options: a bounded wait
    /// ([`Error::NotAcquired`](crate::Error::NotAcquired) when someone else led throughout
    /// it), or a lease other than the default 30 s watchdog lease. The owner of `options` is
    /// ignored: each campaign is its own owner. Fencing is always on (the term).
    ///
    /// # Errors
    ///
    /// As [`Locker::lock_with`].
    ///
    /// # Cancel safety
    ///
    /// As [`Election::campaign`].
    pub async fn campaign_with(&self, value: &str, options: &LockOptions) -> Result<Leadership<B>> {
        let campaign = &self.campaigns.side;
        let owner = Owner::new();
        let field = owner.field(campaign.client_id());
        let options = options.clone().owner(owner).fenced();
        campaign.nominate(&field, value);
        let withdrawn = Withdraw {
            campaign,
            field: &field,
        };
        let guard = self
            .campaigns
            .locker
            .lock_with(&self.name, &options)
            .await?;
        std::mem::forget(withdrawn);
        Ok(Leadership {
            guard,
            campaign: campaign.clone(),
            value: value.to_owned(),
        })
    }

    /// The current leader (`None`: nobody leads).
    ///
    /// # Errors
    ///
    /// The store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        self.backend.leader(&self.name).await
    }

    /// Deposes the leader, whoever it is (an operator's repair): its leadership ends now, it
    /// finds out through [`Leadership::lost`] at its next renewal, and observers and candidates
    /// are told. Returns whether someone led.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn depose(&self) -> Result<bool> {
        self.campaigns.locker.force_unlock(&self.name).await
    }

    /// Follows the leadership: [`LeaderObserver::changed`] returns each new leader (or `None`
    /// when nobody leads) as it changes. Nothing is sent until it is used.
    #[must_use]
    pub fn observe(&self) -> LeaderObserver<B> {
        LeaderObserver {
            backend: self.backend.clone(),
            name: self.name.to_string(),
            watch: None,
            last: None,
            started: false,
        }
    }
}

/// Forgets a campaign's value if the campaign ends without winning (its future dropped, or an
/// error).
struct Withdraw<'a, C: CampaignBackend> {
    campaign: &'a C,
    field: &'a str,
}

impl<C: CampaignBackend> Drop for Withdraw<'_, C> {
    fn drop(&mut self) {
        self.campaign.withdraw(self.field);
    }
}

/// A leadership won by [`Election::campaign`]: held while this lives, renewed by the watchdog;
/// dropping it resigns in the background (the campaign side forgets the value once the
/// release is through).
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership<B: ElectionBackend> {
    guard: LockGuard<B::Campaign, Fenced>,
    campaign: B::Campaign,
    value: String,
}

impl<B: ElectionBackend> std::fmt::Debug for Leadership<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.guard.name())
            .field("value", &self.value)
            .field("term", &self.guard.fencing_token())
            .finish_non_exhaustive()
    }
}

impl<B: ElectionBackend> Leadership<B> {
    /// The election's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The value this leader campaigned with.
    #[must_use]
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The term: a fencing token greater than every earlier leader's of this election.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Whether the leadership is known to be lost.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves when the leadership is lost: another may lead from then on. Meant for
    /// `tokio::select!` against the leader's work.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    pub async fn lost(&self) -> LeaseLoss {
        self.guard.lost().await
    }

    /// The lock guard underneath, for what [`LockGuard`] offers (its remaining validity,
    /// [`LockGuard::extend`]).
    pub fn guard(&self) -> &LockGuard<B::Campaign, Fenced> {
        &self.guard
    }

    /// Resigns: gives the leadership back at once, so another candidate can take it.
    /// Returns whether it was still held.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`].
    pub async fn resign(self) -> Result<bool> {
        let field = self.guard.owner_field().to_owned();
        let released = self.guard.release().await;
        self.campaign.withdraw(&field);
        Ok(released? != ReleaseOutcome::NotHeld)
    }
}

/// Follows the leadership of one election; made by [`Election::observe`].
pub struct LeaderObserver<B: ElectionBackend> {
    backend: Arc<B>,
    name: String,
    watch: Option<ReleaseWatch>,
    last: Option<Option<Leader>>,
    started: bool,
}

impl<B: ElectionBackend> std::fmt::Debug for LeaderObserver<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderObserver")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Who leads, as an observer compares it: the same leader renewing its lease is no change.
fn same_leader(a: &Option<Leader>, b: &Option<Leader>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.owner_field == b.owner_field && a.value == b.value,
        _ => false,
    }
}

impl<B: ElectionBackend> LeaderObserver<B> {
    /// The leadership now, at the first call; after that, waits for it to change and returns
    /// the new leader (`None`: nobody leads). Changes are announced by the store, and read
    /// again every second besides (a leader whose lease ran out is not announced).
    ///
    /// # Errors
    ///
    /// The store's errors (the observer stays usable: call again).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a change that happens while nobody waits is returned by the next call.
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        if self.watch.is_none() {
            // Registered before the first read, so no change after it is missed.
            self.watch = Some(match self.backend.watch_leader(&self.name).await {
                Ok(watch) => watch,
                Err(error) if error.is_retryable() => ReleaseWatch::polling(OBSERVE_EVERY),
                Err(error) => return Err(error),
            });
        }
        loop {
            let watch = self.watch.as_ref().expect("registered above");
            // Armed before the read, so a change between the read and the wait wakes the wait.
            let mut notified = std::pin::pin!(watch.notified());
            if let Some(notified) = notified.as_mut().as_pin_mut() {
                notified.enable();
            }
            let now = self.backend.leader(&self.name).await?;
            let changed = match &self.last {
                Some(last) => !same_leader(last, &now),
                None => true,
            };
            if changed || !self.started {
                self.started = true;
                self.last = Some(now.clone());
                return Ok(now);
            }
            match notified.as_pin_mut() {
                Some(notified) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep(OBSERVE_EVERY) => {}
                    }
                }
                None => tokio::time::sleep(OBSERVE_EVERY).await,
            }
        }
    }
}

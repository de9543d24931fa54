//! [`Election`]: leader election on top of the lock, with [`Leadership`] guards and
//! [`LeaderObserver`]s, over any [`ElectionBackend`].

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{LockBackend, ReleaseOutcome};
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

/// Leader election: at most one leader per name at a time among every client of the store,
/// each campaigning with a value (its address, say) that others read with
/// [`leader`](Self::leader) or follow with [`observe`](Self::observe).
///
/// Leadership is a watchdog-renewed lease, like a lock's: [`Leadership::lost`] resolves when it
/// is lost (the store said another leads, or renewals failed until the lease ran out), and a
/// leader that dies is replaced one lease later. Each leadership has a *term*, a fencing token
/// that grows with every new leader: pass it to what the leader writes so a deposed leader's
/// late writes can be refused. Semantics as etcd's election (campaign, resign, leader,
/// observe) and Curator's `LeaderLatch`; see `docs/lock-family.md` for where they differ.
///
/// Cheap to clone.
///
/// # Example
///
/// ```
/// use lock_core::{Election, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let election = Election::new(MemoryBackend::new());
/// let leadership = election.campaign("billing-scheduler", "10.0.0.7:9000").await?;
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
    campaign: B::Campaign,
    locker: Locker<B::Campaign>,
}

impl<B: ElectionBackend> Clone for Election<B>
where
    B::Campaign: Clone,
{
    fn clone(&self) -> Self {
        Election {
            backend: self.backend.clone(),
            campaign: self.campaign.clone(),
            locker: self.locker.clone(),
        }
    }
}

impl<B: ElectionBackend> std::fmt::Debug for Election<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("locker", &self.locker)
            .finish_non_exhaustive()
    }
}

impl<B: ElectionBackend> Election<B>
where
    B::Campaign: Clone,
{
    /// Elections over `backend`.
    #[must_use]
    pub fn new(backend: B) -> Self {
        let campaign = backend.campaign_side();
        Election {
            locker: Locker::new(campaign.clone()),
            campaign,
            backend: Arc::new(backend),
        }
    }

    /// Campaigns for leadership of `name` with `value`, waiting as long as it takes; the
    /// leadership lasts while the returned guard lives (renewed by the watchdog).
    ///
    /// # Errors
    ///
    /// As [`Locker::lock`]: [`crate::Error::InvalidName`] before any I/O; backend errors
    /// (retryable ones are ridden through for up to 30 s in a row).
    ///
    /// # Cancel safety
    ///
    /// As [`Locker::lock`]: a campaign dropped while its attempt is in flight may have won; the
    /// leadership is then given back in the background (or ends with its lease).
    pub async fn campaign(&self, name: &str, value: &str) -> Result<Leadership<B>> {
        self.campaign_with(name, value, &LockOptions::new()).await
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
    pub async fn campaign_with(
        &self,
        name: &str,
        value: &str,
        options: &LockOptions,
    ) -> Result<Leadership<B>> {
        let owner = Owner::new();
        let field = owner.field(self.campaign.client_id());
        let options = options.clone().owner(owner).fenced();
        self.campaign.nominate(&field, value);
        let withdrawn = Withdraw {
            campaign: &self.campaign,
            field: &field,
        };
        let guard = self.locker.lock_with(name, &options).await?;
        std::mem::forget(withdrawn);
        Ok(Leadership {
            guard,
            campaign: self.campaign.clone(),
            value: value.to_owned(),
        })
    }

    /// The current leader of `name` (`None`: nobody leads).
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; the store's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>> {
        self.campaign.check_name(name)?;
        self.backend.leader(name).await
    }

    /// Deposes the leader of `name`, whoever it is (an operator's repair): its leadership ends
    /// now, it finds out through [`Leadership::lost`] at its next renewal, and observers and
    /// candidates are told. Returns whether someone led.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O; the store's errors.
    pub async fn depose(&self, name: &str) -> Result<bool> {
        self.locker.force_unlock(name).await
    }

    /// Follows the leadership of `name`: [`LeaderObserver::changed`] returns each new leader
    /// (or `None` when nobody leads) as it changes.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] before any I/O.
    pub fn observe(&self, name: &str) -> Result<LeaderObserver<B>> {
        self.campaign.check_name(name)?;
        Ok(LeaderObserver {
            backend: self.backend.clone(),
            name: name.to_owned(),
            watch: None,
            last: None,
            started: false,
        })
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

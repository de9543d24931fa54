//! `ElectionBackend` for [`RedisBackend`]: leader election on the reentrant lock's hash plus
//! the leader values, its campaign side ([`RedisCampaignSide`]) on the backend's own connection
//! and notifications.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, CampaignBackend, ElectionBackend, Leader, LockBackend,
    LockState, ReleaseOutcome, ReleaseWatch, Result,
};

use crate::backend::redis_backend::RedisBackend;
use crate::kind::election::{self, Campaign};
use crate::kind::family::family_lock_methods;
use crate::kind::{family, reentrant};
use crate::wire::keys;

/// The campaign side of a [`RedisBackend`]'s elections (see [`ElectionBackend`]). Made by
/// [`ElectionBackend::campaign_side`]; shares the backend's connections and client id; each
/// campaign side keeps the values of its own campaigns.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::Locker;
/// use lock_redis::RedisBackend;
///
/// // Applications reach the side through `Locker::election`.
/// let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
/// let leadership = locker.election("scheduler")?.campaign("10.0.0.7:9000").await?;
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisCampaignSide {
    backend: RedisBackend,
    /// Owner field → the value it campaigns with.
    nominations: Arc<Mutex<HashMap<String, String>>>,
}

impl ElectionBackend for RedisBackend {
    type Campaign = RedisCampaignSide;

    fn campaign_side(&self) -> RedisCampaignSide {
        RedisCampaignSide {
            backend: self.clone(),
            nominations: Arc::default(),
        }
    }

    async fn leader(&self, name: &str) -> Result<Option<Leader>> {
        election::leader(self.calls(), name).await
    }

    async fn watch_leader(&self, name: &str) -> Result<ReleaseWatch> {
        self.notifications()
            .watch(&keys::election_channel(name))
            .await
    }
}

impl RedisCampaignSide {
    fn nominations(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.nominations.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl CampaignBackend for RedisCampaignSide {
    fn nominate(&self, owner_field: &str, value: &str) {
        self.nominations()
            .insert(owner_field.to_owned(), value.to_owned());
    }

    fn withdraw(&self, owner_field: &str) {
        self.nominations().remove(owner_field);
    }
}

impl LockBackend for RedisCampaignSide {
    family_lock_methods!(shared, self, self.backend, Campaign::ANY);

    fn kind(&self) -> &'static str {
        "election"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let value = self
            .nominations()
            .get(request.owner_field)
            .cloned()
            .unwrap_or_default();
        let campaign = Campaign { value: &value };
        family::try_acquire(self.backend.calls(), campaign, request).await
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let calls = self.backend.calls();
        let released = family::release(calls, Campaign::ANY, name, owner_field, lease).await?;
        // The leadership is over (or was): its value is not needed any more.
        if !matches!(released, ReleaseOutcome::StillHeld { .. }) {
            self.withdraw(owner_field);
        }
        Ok(released)
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        family::abandon(self.backend.calls(), Campaign::ANY, name, owner_field, keep).await?;
        if keep == 0 {
            self.withdraw(owner_field);
        }
        Ok(())
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        reentrant::inspect(self.backend.calls(), name).await
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        self.backend
            .notifications()
            .watch(&keys::channel(name))
            .await
    }
}

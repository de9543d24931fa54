//! [`ElectionBackend`] for [`PostgresBackend`]: the leader is the holder of the lock of the
//! election's name, its value a row of `distlock.leaders` written by the grant that made it
//! leader (`sql/70-election.sql`) and deleted with the lock's row; its campaign side
//! ([`PostgresCampaignSide`]) is the backend's lock with that one different acquire.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::backend::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, ReleaseWatch, RenewOutcome, Renewal,
};
use lock_core::{
    CampaignBackend, ElectionBackend, Error, Leader, LockState, ReleaseOutcome, Result,
};

use crate::backend::{PostgresBackend, count, millis, release_outcome, ttl_of};
use crate::key::LockKey;

const CAMPAIGN: &str = "SELECT holds, token, ttl_ms FROM distlock.campaign($1, $2, $3, $4, $5, $6)";
const RELEASE: &str = "SELECT distlock.campaign_release($1, $2, $3)";
const ABANDON: &str = "SELECT distlock.campaign_abandon($1, $2, $3)";
const FORCE_RELEASE: &str = "SELECT distlock.campaign_force_release($1)";
const LEADER: &str = "SELECT owner, value, ttl_ms FROM distlock.leader($1)";

/// The campaign side of a [`PostgresBackend`]'s elections (see [`ElectionBackend`]), made by
/// [`ElectionBackend::campaign_side`]: the backend's own lock (same table, connections, client
/// id and notifications), whose grants also record the value each owner campaigns with. Each
/// campaign side keeps the values of its own campaigns.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::Locker;
/// use lock_postgres::PostgresBackend;
///
/// // Applications reach the side through `Locker::election`.
/// let locker = Locker::new(PostgresBackend::connect("postgres://app@127.0.0.1/app").await?);
/// let election = locker.election("scheduler")?;
/// let leadership = election.campaign("10.0.0.7:9000").await?;
/// assert_eq!(
///     election.leader().await?.map(|leader| leader.value),
///     Some("10.0.0.7:9000".to_owned())
/// );
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresCampaignSide {
    backend: PostgresBackend,
    /// Owner field → the value it campaigns with.
    nominations: Arc<Mutex<HashMap<String, String>>>,
}

impl PostgresCampaignSide {
    fn nominations(&self) -> MutexGuard<'_, HashMap<String, String>> {
        // The map is only read and written whole under the lock: a panic cannot leave it torn.
        self.nominations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ElectionBackend for PostgresBackend {
    type Campaign = PostgresCampaignSide;

    fn campaign_side(&self) -> PostgresCampaignSide {
        PostgresCampaignSide {
            backend: self.clone(),
            nominations: Arc::default(),
        }
    }

    async fn leader(&self, name: &str) -> Result<Option<Leader>> {
        let key = LockKey::of(name);
        let row = self.family_row(&key, LEADER, &[&key.as_bytes()]).await?;
        let owner: Option<String> = row.get(0);
        let Some(owner) = owner else {
            return Ok(None);
        };
        let value: Vec<u8> = row.get(1);
        let value = String::from_utf8(value)
            .map_err(|_| Error::Protocol("a leader value that is not UTF-8".into()))?;
        Ok(Some(Leader::new(value, owner, Some(ttl_of(row.get(2))))))
    }

    async fn watch_leader(&self, name: &str) -> Result<ReleaseWatch> {
        // Grants (in `distlock.campaign`) and the lock's releases, abandons and force-releases
        // are all announced on the name's one channel.
        Ok(self.watch_key(&LockKey::of(name)).await)
    }
}

impl CampaignBackend for PostgresCampaignSide {
    fn nominate(&self, owner_field: &str, value: &str) {
        self.nominations()
            .insert(owner_field.to_owned(), value.to_owned());
    }

    fn withdraw(&self, owner_field: &str) {
        self.nominations().remove(owner_field);
    }
}

impl LockBackend for PostgresCampaignSide {
    fn client_id(&self) -> &str {
        self.backend.client_id()
    }

    fn check_name(&self, name: &str) -> Result<()> {
        self.backend.check_name(name)
    }

    fn kind(&self) -> &'static str {
        "election"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let value = self
            .nominations()
            .get(request.owner_field)
            .cloned()
            .unwrap_or_default();
        let key = LockKey::of(request.name);
        let row = self
            .backend
            .family_row(
                &key,
                CAMPAIGN,
                &[
                    &key.as_bytes(),
                    &request.name.as_bytes(),
                    &request.owner_field,
                    &millis(request.lease),
                    &request.fencing,
                    &value.as_bytes(),
                ],
            )
            .await?;
        let holds: i32 = row.get(0);
        if holds <= 0 {
            return Ok(AcquireOutcome::Held {
                ttl: Some(ttl_of(row.get(2))),
            });
        }
        let token: Option<i64> = row.get(1);
        let fencing_token = match (request.fencing, token) {
            (false, _) => None,
            (true, Some(token)) => Some(u64::try_from(token).map_err(|_| {
                Error::Protocol(format!("a negative fencing token: {token}").into())
            })?),
            (true, None) => return Err(Error::Protocol("a fenced grant without a token".into())),
        };
        Ok(AcquireOutcome::Acquired(Grant {
            hold_count: count(holds)?,
            fencing_token,
        }))
    }

    // The lock's own steps, which also announce the end of a leadership to every observer
    // (deleting the lock's row deletes the leader's value with it: a cascade).

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let key = LockKey::of(name);
        let row = self
            .backend
            .family_row(
                &key,
                RELEASE,
                &[&key.as_bytes(), &owner_field, &millis(lease)],
            )
            .await?;
        let released = release_outcome(row.get(0))?;
        // The leadership is over (or was): its value is not needed any more.
        if !matches!(released, ReleaseOutcome::StillHeld { .. }) {
            self.withdraw(owner_field);
        }
        Ok(released)
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        // The value has no lease of its own: renewing the lock renews the leadership.
        self.backend.renew(renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        let key = LockKey::of(name);
        let keep_holds = i32::try_from(keep).unwrap_or(i32::MAX);
        self.backend
            .family_row(&key, ABANDON, &[&key.as_bytes(), &owner_field, &keep_holds])
            .await?;
        if keep == 0 {
            self.withdraw(owner_field);
        }
        Ok(())
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let key = LockKey::of(name);
        let row = self
            .backend
            .family_row(&key, FORCE_RELEASE, &[&key.as_bytes()])
            .await?;
        Ok(row.get(0))
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        self.backend.inspect(name).await
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        self.backend.watch_releases(name).await
    }
}

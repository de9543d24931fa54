//! [`PermitBackend`] for [`PostgresBackend`]: the semaphore's count (`distlock.semaphores`)
//! and one row of `distlock.permits_out` per permit out, with its holder and the end of its
//! lease on the server's clock (`sql/50-permits.sql`); each step one statement.

use std::time::Duration;

use lock_core::backend::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, RenewOutcome, Renewal,
};
use lock_core::{
    Error, LockState, PermitBackend, PermitState, ReleaseOutcome, ReleaseWatch, Result,
};

use crate::backend::{PostgresBackend, count, millis, release_outcome, ttl_of};
use crate::key::LockKey;

const ACQUIRE: &str =
    "SELECT holds, token, ttl_ms FROM distlock.permit_acquire($1, $2, $3, $4, $5)";
const RELEASE: &str = "SELECT distlock.permit_release($1, $2, $3, $4)";
const ABANDON: &str = "SELECT distlock.permit_abandon($1, $2, $3, $4)";
const FORCE_RELEASE: &str = "SELECT distlock.permit_force_release($1, $2)";
const RENEW: &str = "SELECT distlock.permit_renew($1, $2, $3)";
const STATE: &str =
    "SELECT available, owners, counts, expired, longest_ms FROM distlock.permit_state($1)";

/// The permit side of a [`PostgresBackend`]'s semaphores (see [`PermitBackend`]): each grant
/// is one lease-bound permit, a row of its own with the end of its lease on the server's clock.
/// Made by [`PermitBackend::permit_side`]; shares the backend's connections, notifications and
/// client id.
///
/// A permit whose holder stopped renewing it goes back to the count at the next acquire of the
/// name, which announces it.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::Locker;
/// use lock_postgres::PostgresBackend;
///
/// // Applications reach the side through `Locker::permits`.
/// let locker = Locker::new(PostgresBackend::connect("postgres://app@127.0.0.1/app").await?);
/// let gpus = locker.permits("gpu")?;
/// gpus.try_set_permits(2).await?;
/// let gpu = gpus.acquire().await?;
/// gpu.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresPermitSide(PostgresBackend);

/// What `distlock.permit_state` read.
struct Snapshot {
    state: PermitState,
    longest: Option<Duration>,
}

impl PostgresBackend {
    async fn permit_snapshot(&self, name: &str) -> Result<Snapshot> {
        let key = LockKey::of(name);
        let row = self.family_row(&key, STATE, &[&key.as_bytes()]).await?;
        let owners: Vec<String> = row.get(1);
        let counts: Vec<i32> = row.get(2);
        if owners.len() != counts.len() {
            return Err(Error::Protocol(
                format!(
                    "{} permit holders with {} counts",
                    owners.len(),
                    counts.len()
                )
                .into(),
            ));
        }
        let mut holders = owners
            .into_iter()
            .zip(counts)
            .map(|(owner, held)| Ok((owner, count(held)?)))
            .collect::<Result<Vec<_>>>()?;
        // Sorted here, by bytes, as the contract has it: the server would sort by its collation.
        holders.sort();
        let longest: Option<i64> = row.get(4);
        Ok(Snapshot {
            state: PermitState::new(row.get(0), holders, count(row.get(3))?),
            longest: longest.map(|ms| ttl_of(Some(ms))),
        })
    }
}

impl PermitBackend for PostgresBackend {
    type Permits = PostgresPermitSide;

    fn permit_side(&self) -> PostgresPermitSide {
        PostgresPermitSide(self.clone())
    }

    async fn permit_state(&self, name: &str) -> Result<PermitState> {
        Ok(self.permit_snapshot(name).await?.state)
    }
}

impl LockBackend for PostgresPermitSide {
    fn client_id(&self) -> &str {
        self.0.client_id()
    }

    fn kind(&self) -> &'static str {
        "permit"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let key = LockKey::of(request.name);
        let row = self
            .0
            .family_row(
                &key,
                ACQUIRE,
                &[
                    &key.as_bytes(),
                    &request.name.as_bytes(),
                    &request.owner_field,
                    &millis(request.lease),
                    &request.fencing,
                ],
            )
            .await?;
        let holds: i32 = row.get(0);
        if holds == 0 {
            let ttl_ms: Option<i64> = row.get(2);
            return Ok(AcquireOutcome::Held {
                ttl: ttl_ms.map(|ms| ttl_of(Some(ms))),
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

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let key = LockKey::of(name);
        let row = self
            .0
            .family_row(
                &key,
                RELEASE,
                &[
                    &key.as_bytes(),
                    &name.as_bytes(),
                    &owner_field,
                    &millis(lease),
                ],
            )
            .await?;
        release_outcome(row.get(0))
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        self.0.renew_batch(RENEW, renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        let key = LockKey::of(name);
        let keep = i32::try_from(keep).unwrap_or(i32::MAX);
        self.0
            .family_row(
                &key,
                ABANDON,
                &[&key.as_bytes(), &name.as_bytes(), &owner_field, &keep],
            )
            .await
            .map(drop)
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let key = LockKey::of(name);
        let row = self
            .0
            .family_row(&key, FORCE_RELEASE, &[&key.as_bytes(), &name.as_bytes()])
            .await?;
        Ok(row.get(0))
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        let snapshot = self.0.permit_snapshot(name).await?;
        Ok(LockState::new(snapshot.state.holders, snapshot.longest))
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.0.watch_key(&LockKey::of(name)).await)
    }
}

//! The fair lock: [`FairBackend`] for [`PostgresBackend`], its fair side
//! ([`PostgresFairSide`]) over the lock's own rows plus the queue `distlock.fair_queue`
//! (`sql/20-fair.sql`), one statement per step.

use std::fmt::Write as _;
use std::time::Duration;

use lock_core::backend::{
    AcquireOutcome, AcquireRequest, FairBackend, Grant, LockBackend, QUEUE_TIMEOUT, ReleaseWatch,
    RenewOutcome, Renewal,
};
use lock_core::{Error, FairState, LockState, ReleaseOutcome, Result};
use sha2::{Digest, Sha256};

use crate::backend::{PostgresBackend, count, millis, release_outcome, ttl_of};
use crate::key::LockKey;

const ACQUIRE: &str =
    "SELECT holds, token, again_ms FROM distlock.fair_acquire($1, $2, $3, $4, $5, $6, $7)";
const RELEASE: &str = "SELECT distlock.fair_release($1, $2, $3)";
const ABANDON: &str = "SELECT distlock.fair_abandon($1, $2, $3)";
const FORCE_RELEASE: &str = "SELECT distlock.fair_force_release($1)";
const LEAVE: &str = "SELECT distlock.fair_leave($1, $2)";
const STATE: &str =
    "SELECT owner, holds, ttl_ms, waiters, waiters_left_ms FROM distlock.fair_state($1)";

/// The fair side of a [`PostgresBackend`]'s locks (see [`FairBackend`]): grants in arrival
/// order, over the same rows (the same holders) as the lock, with the queue of waiters in a
/// table of its own. A freed lock is announced only to the waiter at the head of the queue, on
/// that waiter's own channel. Made by [`FairBackend::fair_side`]; shares the backend's
/// connections, notifications and client id.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// use lock_core::Locker;
/// use lock_postgres::PostgresBackend;
///
/// // Applications reach the side through `Locker::fair`.
/// let locker = Locker::new(PostgresBackend::connect("postgres://app@127.0.0.1/app").await?);
/// let turn = locker.fair("printer")?.lock().await?; // waiters are served in the order they came
/// turn.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresFairSide(PostgresBackend);

/// The channel on which the waiter `owner_field` of `key` is told its turn came: `distlock_f_`
/// and the first 26 bytes (hex) of sha256(key ‖ owner field), 63 bytes in all. The schema's
/// `distlock.fair_waiter_channel` computes the same.
fn waiter_channel(key: &LockKey, owner_field: &str) -> String {
    let digest = Sha256::new()
        .chain_update(key.as_bytes())
        .chain_update(owner_field.as_bytes())
        .finalize();
    let mut channel = String::with_capacity(63);
    channel.push_str("distlock_f_");
    for byte in &digest[..26] {
        write!(channel, "{byte:02x}").expect("writing to a String cannot fail");
    }
    channel
}

/// A fencing token the server returned, where one was asked for.
fn fencing_token(fencing: bool, token: Option<i64>) -> Result<Option<u64>> {
    match (fencing, token) {
        (false, _) => Ok(None),
        (true, Some(token)) => u64::try_from(token)
            .map(Some)
            .map_err(|_| Error::Protocol(format!("a negative fencing token: {token}").into())),
        (true, None) => Err(Error::Protocol("a fenced grant without a token".into())),
    }
}

impl PostgresBackend {
    /// A watch on `channel` (a waiter's own), or a polling one without notifications.
    async fn watch_channel(&self, channel: &str) -> ReleaseWatch {
        match &self.inner.listener {
            Some(listener) => listener.watch(channel).await,
            None => ReleaseWatch::polling(self.inner.poll_interval),
        }
    }
}

impl FairBackend for PostgresBackend {
    type Fair = PostgresFairSide;

    fn fair_side(&self) -> PostgresFairSide {
        PostgresFairSide(self.clone())
    }

    async fn fair_state(&self, name: &str) -> Result<FairState> {
        self.check_name(name)?;
        let key = LockKey::of(name);
        let row = self.family_row(&key, STATE, &[&key.as_bytes()]).await?;
        let owner: Option<String> = row.get(0);
        let (holders, ttl) = match owner {
            Some(owner) => (vec![(owner, count(row.get(1))?)], Some(ttl_of(row.get(2)))),
            None => (Vec::new(), None),
        };
        let waiters: Vec<String> = row.get(3);
        let left: Vec<i64> = row.get(4);
        if waiters.len() != left.len() {
            return Err(Error::Protocol(
                format!("{} waiters with {} deadlines", waiters.len(), left.len()).into(),
            ));
        }
        let queue = waiters
            .into_iter()
            .zip(left)
            .map(|(field, ms)| (field, Some(ttl_of(Some(ms)))))
            .collect();
        Ok(FairState::new(holders, ttl, queue))
    }
}

impl LockBackend for PostgresFairSide {
    fn client_id(&self) -> &str {
        self.0.client_id()
    }

    fn kind(&self) -> &'static str {
        "fair"
    }

    fn queues(&self) -> bool {
        true
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
                    &request.waits,
                    &millis(QUEUE_TIMEOUT),
                ],
            )
            .await?;
        let holds: i32 = row.get(0);
        if holds > 0 {
            return Ok(AcquireOutcome::Acquired(Grant {
                hold_count: count(holds)?,
                fencing_token: fencing_token(request.fencing, row.get(1))?,
            }));
        }
        // Not this owner's turn: it tries again by then at the latest (its place, the holder's
        // lease or a lapsing head), or when told its turn came.
        Ok(AcquireOutcome::Held {
            ttl: Some(ttl_of(row.get(2))),
        })
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
                &[&key.as_bytes(), &owner_field, &millis(lease)],
            )
            .await?;
        release_outcome(row.get(0))
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        // The same rows as the lock's: renewed alike.
        self.0.renew(renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        let key = LockKey::of(name);
        let keep = i32::try_from(keep).unwrap_or(i32::MAX);
        self.0
            .family_row(&key, ABANDON, &[&key.as_bytes(), &owner_field, &keep])
            .await
            .map(drop)
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let key = LockKey::of(name);
        let row = self
            .0
            .family_row(&key, FORCE_RELEASE, &[&key.as_bytes()])
            .await?;
        Ok(row.get(0))
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        self.0.inspect(name).await
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        self.0.watch_releases(name).await
    }

    async fn watch_releases_of(&self, name: &str, owner_field: &str) -> Result<ReleaseWatch> {
        // Only the head of the queue is told, on its own channel: the others would only look
        // again and find it is not their turn.
        Ok(self
            .0
            .watch_channel(&waiter_channel(&LockKey::of(name), owner_field))
            .await)
    }

    async fn leave_queue(&self, name: &str, owner_field: &str) -> Result<()> {
        let key = LockKey::of(name);
        self.0
            .family_row(&key, LEAVE, &[&key.as_bytes(), &owner_field])
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_channel_is_63_bytes_apart_from_the_release_channel() {
        let key = LockKey::of("printer");
        let channel = waiter_channel(&key, "client:1");
        assert_eq!(channel.len(), 63);
        assert!(channel.starts_with("distlock_f_"));
        assert!(channel[11..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(channel, waiter_channel(&key, "client:2"));
        assert_ne!(
            channel,
            waiter_channel(&LockKey::of("printer2"), "client:1")
        );
        assert_ne!(channel, key.channel());
    }
}

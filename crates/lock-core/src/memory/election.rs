//! The in-memory elections: the store's plain locks (a leader holds the lock of the election's
//! name) plus each leader's value, recorded with its grant and gone with its hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::contract::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, LockState, ReleaseOutcome, RenewOutcome,
    Renewal,
};
use crate::election_backend::{CampaignBackend, ElectionBackend, Leader};
use crate::error::Result;
use crate::memory::{Held, MemoryBackend, Tables, extend_to, live};
use crate::notify::ReleaseWatch;

/// The hub topic of leader changes of the election `name`.
fn topic(name: &str) -> String {
    format!("leader:{name}")
}

/// The campaign side of [`MemoryBackend`]'s elections (see [`ElectionBackend`]).
#[derive(Clone, Debug)]
pub struct MemoryCampaignSide {
    store: MemoryBackend,
    /// Owner field → the value it campaigns with.
    nominations: Arc<Mutex<HashMap<String, String>>>,
}

impl ElectionBackend for MemoryBackend {
    type Campaign = MemoryCampaignSide;

    fn campaign_side(&self) -> MemoryCampaignSide {
        MemoryCampaignSide {
            store: self.clone(),
            nominations: Arc::default(),
        }
    }

    async fn leader(&self, name: &str) -> Result<Option<Leader>> {
        let mut tables = self.tables();
        let now = Instant::now();
        let Some(held) = live(&mut tables.locks, name) else {
            return Ok(None);
        };
        let ttl = held.expires_at.map(|at| at.saturating_duration_since(now));
        let Some(holder) = held.holders.keys().next().cloned() else {
            return Ok(None);
        };
        Ok(tables
            .leaders
            .get(name)
            .filter(|(field, _)| *field == holder)
            .map(|(field, value)| Leader::new(value.clone(), field.clone(), ttl)))
    }

    async fn watch_leader(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.store.hub.watch(&topic(name)))
    }
}

impl MemoryCampaignSide {
    /// After `owner_field` may have stopped leading `name`: forgets its value when it no longer
    /// holds the lock, and tells the observers.
    fn after_release(&self, name: &str, owner_field: &str) {
        let mut tables = self.store.tables();
        let still = live(&mut tables.locks, name)
            .is_some_and(|held| held.holders.contains_key(owner_field));
        if still {
            return;
        }
        let was_leader = tables
            .leaders
            .get(name)
            .is_some_and(|(field, _)| field == owner_field);
        if was_leader {
            tables.leaders.remove(name);
        }
        drop(tables);
        self.withdraw(owner_field);
        if was_leader {
            self.store.store.hub.wake_watchers(&topic(name));
        }
    }
}

impl CampaignBackend for MemoryCampaignSide {
    fn nominate(&self, owner_field: &str, value: &str) {
        self.nominations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(owner_field.to_owned(), value.to_owned());
    }

    fn withdraw(&self, owner_field: &str) {
        self.nominations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(owner_field);
    }
}

impl LockBackend for MemoryCampaignSide {
    fn client_id(&self) -> &str {
        self.store.client_id()
    }

    fn kind(&self) -> &'static str {
        "election"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let value = self
            .nominations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(request.owner_field)
            .cloned()
            .unwrap_or_default();
        let mut tables = self.store.tables();
        let now = Instant::now();
        if let Some(held) = live(&mut tables.locks, request.name)
            && !held.holders.contains_key(request.owner_field)
        {
            let ttl = held.expires_at.map(|at| at.saturating_duration_since(now));
            return Ok(AcquireOutcome::Held { ttl });
        }
        let held: &mut Held = tables.locks.entry(request.name.to_owned()).or_default();
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
        let elected = hold_count == 1;
        if elected {
            record_leader(&mut tables, request.name, request.owner_field, value);
        }
        drop(tables);
        if elected {
            self.store.store.hub.wake_watchers(&topic(request.name));
        }
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
        let outcome = LockBackend::release(&self.store, name, owner_field, lease).await?;
        self.after_release(name, owner_field);
        Ok(outcome)
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        LockBackend::renew(&self.store, renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        LockBackend::abandon(&self.store, name, owner_field, keep).await?;
        self.after_release(name, owner_field);
        Ok(())
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let existed = LockBackend::force_release(&self.store, name).await?;
        let removed = self.store.tables().leaders.remove(name).is_some();
        if removed {
            self.store.store.hub.wake_watchers(&topic(name));
        }
        Ok(existed)
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        LockBackend::inspect(&self.store, name).await
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        LockBackend::watch_releases(&self.store, name).await
    }
}

fn record_leader(tables: &mut Tables, name: &str, owner_field: &str, value: String) {
    tables
        .leaders
        .insert(name.to_owned(), (owner_field.to_owned(), value));
}

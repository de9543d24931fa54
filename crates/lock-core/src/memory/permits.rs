//! The in-memory lease-bound permits: the semaphore's count (shared with the plain semaphore,
//! as on Redis) and, per name, each permit out with its holder and the end of its lease.

use std::time::Duration;

use tokio::time::Instant;

use crate::contract::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, LockState, ReleaseOutcome, RenewOutcome,
    Renewal,
};
use crate::error::Result;
use crate::memory::{MemoryBackend, Tables, semaphore};
use crate::notify::ReleaseWatch;
use crate::permit_backend::{PermitBackend, PermitState};

/// One permit out: its holder's owner field and the end of its lease.
pub(super) struct Permit {
    field: String,
    until: Instant,
}

/// The permit side of [`MemoryBackend`]'s semaphores (see [`PermitBackend`]).
#[derive(Clone, Debug)]
pub struct MemoryPermitSide(MemoryBackend);

impl PermitBackend for MemoryBackend {
    type Permits = MemoryPermitSide;

    fn permit_side(&self) -> MemoryPermitSide {
        MemoryPermitSide(self.clone())
    }

    async fn permit_state(&self, name: &str) -> Result<PermitState> {
        let tables = self.tables();
        let now = Instant::now();
        let mut holders: Vec<(String, u32)> = Vec::new();
        let mut expired = 0;
        for permit in tables.permits.get(name).into_iter().flatten() {
            if permit.until <= now {
                expired += 1;
            } else if let Some((_, count)) =
                holders.iter_mut().find(|(field, _)| *field == permit.field)
            {
                *count += 1;
            } else {
                holders.push((permit.field.clone(), 1));
            }
        }
        holders.sort();
        Ok(PermitState::new(
            tables.semaphores.get(name).copied(),
            holders,
            expired,
        ))
    }
}

/// Gives back to the count every permit of `name` whose lease has ended; the new count when
/// any was.
fn reclaim(tables: &mut Tables, name: &str) -> Option<i64> {
    let now = Instant::now();
    let permits = tables.permits.get_mut(name)?;
    let before = permits.len();
    permits.retain(|permit| permit.until > now);
    let given_back = i64::try_from(before - permits.len()).unwrap_or(i64::MAX);
    if given_back == 0 {
        return None;
    }
    let count = tables.semaphores.entry(name.to_owned()).or_insert(0);
    *count = count.saturating_add(given_back);
    Some(*count)
}

/// Gives back the live permits of `owner_field` on `name` above `keep`, those whose leases end
/// first (never one a longer-leased guard counts on); how many were given back and the new
/// count. Expired permits are left to the next acquire, which takes them back.
fn give_back_above(tables: &mut Tables, name: &str, owner_field: &str, keep: u32) -> (u32, i64) {
    let now = Instant::now();
    let mut given_back = 0;
    if let Some(permits) = tables.permits.get_mut(name) {
        let mut ends: Vec<Instant> = permits
            .iter()
            .filter(|permit| permit.field == owner_field && permit.until > now)
            .map(|permit| permit.until)
            .collect();
        ends.sort();
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        let mut to_give = ends.len().saturating_sub(keep);
        // The earliest ends go first; among equal ends, any one.
        let mut giving: Vec<Instant> = ends.into_iter().take(to_give).collect();
        permits.retain(|permit| {
            if to_give == 0 || permit.field != owner_field || permit.until <= now {
                return true;
            }
            if let Some(at) = giving.iter().position(|until| *until == permit.until) {
                giving.swap_remove(at);
                to_give -= 1;
                given_back += 1;
                return false;
            }
            true
        });
    }
    let count = tables.semaphores.entry(name.to_owned()).or_insert(0);
    *count = count.saturating_add(i64::from(given_back));
    (given_back, *count)
}

fn held_by(tables: &Tables, name: &str, owner_field: &str) -> u32 {
    let now = Instant::now();
    let held = tables
        .permits
        .get(name)
        .into_iter()
        .flatten()
        .filter(|permit| permit.field == owner_field && permit.until > now)
        .count();
    u32::try_from(held).unwrap_or(u32::MAX)
}

impl LockBackend for MemoryPermitSide {
    fn client_id(&self) -> &str {
        self.0.client_id()
    }

    fn kind(&self) -> &'static str {
        "permit"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let mut tables = self.0.tables();
        let reclaimed = reclaim(&mut tables, request.name);
        let now = Instant::now();
        let granted = match tables.semaphores.get_mut(request.name) {
            Some(count) if *count >= 1 => {
                *count -= 1;
                true
            }
            _ => false,
        };
        let outcome = if granted {
            tables
                .permits
                .entry(request.name.to_owned())
                .or_default()
                .push(Permit {
                    field: request.owner_field.to_owned(),
                    until: now + request.lease,
                });
            let fencing_token = request.fencing.then(|| {
                let token = tables.fencing.entry(request.name.to_owned()).or_insert(0);
                *token += 1;
                *token
            });
            AcquireOutcome::Acquired(Grant {
                hold_count: held_by(&tables, request.name, request.owner_field),
                fencing_token,
            })
        } else {
            let nearest = tables
                .permits
                .get(request.name)
                .into_iter()
                .flatten()
                .map(|permit| permit.until)
                .min();
            AcquireOutcome::Held {
                ttl: nearest.map(|at| at.saturating_duration_since(now)),
            }
        };
        drop(tables);
        if let Some(count) = reclaimed {
            self.0.announce_permits(request.name, count);
        }
        Ok(outcome)
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let mut tables = self.0.tables();
        let held = held_by(&tables, name, owner_field);
        if held == 0 {
            return Ok(ReleaseOutcome::NotHeld);
        }
        let (_, count) = give_back_above(&mut tables, name, owner_field, held - 1);
        if held > 1 {
            let until = Instant::now() + lease;
            for permit in tables.permits.get_mut(name).into_iter().flatten() {
                if permit.field == owner_field && permit.until < until {
                    permit.until = until;
                }
            }
        }
        drop(tables);
        self.0.announce_permits(name, count);
        Ok(if held > 1 {
            ReleaseOutcome::StillHeld {
                hold_count: held - 1,
            }
        } else {
            ReleaseOutcome::Released
        })
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        let mut tables = self.0.tables();
        let now = Instant::now();
        Ok(renewals
            .iter()
            .map(|renewal| {
                let until = now + renewal.lease;
                let mut renewed = false;
                for permit in tables.permits.get_mut(renewal.name).into_iter().flatten() {
                    if permit.field == renewal.owner_field && permit.until > now {
                        permit.until = permit.until.max(until);
                        renewed = true;
                    }
                }
                RenewOutcome::from_held(renewed)
            })
            .collect())
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        let mut tables = self.0.tables();
        let (given_back, count) = give_back_above(&mut tables, name, owner_field, keep);
        drop(tables);
        if given_back > 0 {
            self.0.announce_permits(name, count);
        }
        Ok(())
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let mut tables = self.0.tables();
        let out = tables.permits.remove(name).unwrap_or_default().len();
        if out == 0 {
            return Ok(false);
        }
        let count = tables.semaphores.entry(name.to_owned()).or_insert(0);
        *count = count.saturating_add(i64::try_from(out).unwrap_or(i64::MAX));
        let count = *count;
        drop(tables);
        self.0.announce_permits(name, count);
        Ok(true)
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        let state = self.0.permit_state(name).await?;
        let now = Instant::now();
        let longest = self
            .0
            .tables()
            .permits
            .get(name)
            .into_iter()
            .flatten()
            .map(|permit| permit.until)
            .filter(|until| *until > now)
            .max();
        Ok(LockState::new(
            state.holders,
            longest.map(|at| at.saturating_duration_since(now)),
        ))
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.0.store.hub.watch(&semaphore::topic(name)))
    }
}

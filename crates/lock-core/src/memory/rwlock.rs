//! The in-memory read-write locks: the read and write sides of [`MemoryBackend`], laid out as
//! on Redis (one entry per name with its mode, each reader's holds with their own leases, the
//! writer's count, one expiry for the whole lock) so they behave the same, crashed readers
//! included.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::contract::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, LockState, ReleaseOutcome, RenewOutcome,
    Renewal,
};
use crate::error::{Error, Result};
use crate::fair_backend::QUEUE_TIMEOUT;
use crate::memory::{MemoryBackend, Tables};
use crate::notify::ReleaseWatch;
use crate::read_write_backend::{ReadWriteBackend, ReadWriteMode, ReadWriteState};

/// One held read-write lock.
pub(super) struct RwHeld {
    mode: ReadWriteMode,
    /// Owner field → the expiry of each of its read holds (one per hold, as Redisson's timeout
    /// keys `…:rwlock_timeout:<k>`).
    readers: HashMap<String, Vec<Instant>>,
    /// The owner field holding the write side, and its count.
    writer: Option<(String, u32)>,
    expires_at: Instant,
}

/// Who a change wakes.
enum Wake {
    Nobody,
    /// One waiter (the last reader left).
    One,
    /// Every waiter (a writer left).
    All,
}

/// The entry for `name` if it exists and has not expired; an expired one is removed.
fn live<'a>(tables: &'a mut Tables, name: &str) -> Option<&'a mut RwHeld> {
    if tables
        .rwlocks
        .get(name)
        .is_some_and(|held| held.expires_at <= Instant::now())
    {
        tables.rwlocks.remove(name);
    }
    tables.rwlocks.get_mut(name)
}

/// Whether a writer of a writer-preferring side waits for `name` (lapsed ones forgotten): how
/// long until the first of their places lapses.
fn writer_waits(tables: &mut Tables, name: &str, now: Instant) -> Option<Duration> {
    let waiting = tables.rw_writers_waiting.get_mut(name)?;
    waiting.retain(|(_, deadline)| *deadline > now);
    let first = waiting.iter().map(|(_, deadline)| *deadline).min();
    if waiting.is_empty() {
        tables.rw_writers_waiting.remove(name);
    }
    first.map(|deadline| deadline.saturating_duration_since(now))
}

/// Forgets the read holds of `owner_field` whose leases ran out. A hold ends with its lease
/// (the contract): without this, a hold nobody released (an acquire whose answer was lost, a
/// crashed process's) would stay counted under its owner for as long as other readers keep the
/// lock alive, and the owner's next read hold would count it. Run before an owner's read
/// acquire, as the Redis side's `drop_lapsed_read_holds.lua`.
fn drop_lapsed_read_holds(held: &mut RwHeld, owner_field: &str, now: Instant) {
    if let Some(holds) = held.readers.get_mut(owner_field) {
        holds.retain(|until| *until > now);
        if holds.is_empty() {
            held.readers.remove(owner_field);
        }
    }
}

/// Forgets that `owner_field` waits to write `name`.
fn stop_waiting(tables: &mut Tables, name: &str, owner_field: &str) {
    if let Some(waiting) = tables.rw_writers_waiting.get_mut(name) {
        waiting.retain(|(field, _)| field != owner_field);
        if waiting.is_empty() {
            tables.rw_writers_waiting.remove(name);
        }
    }
}

/// The hub topic of the read-write lock `name`, shared by both sides.
fn topic(name: &str) -> String {
    format!("rwlock:{name}")
}

fn later(at: &mut Instant, until: Instant) {
    if *at < until {
        *at = until;
    }
}

fn next_token(tables: &mut Tables, name: &str, fencing: bool) -> Option<u64> {
    fencing.then(|| {
        let token = tables.fencing.entry(name.to_owned()).or_insert(0);
        *token += 1;
        *token
    })
}

/// After an owner field's last read hold went: the lock stays with the other holders (its
/// expiry the longest remaining read hold's), or goes when none is left alive.
fn after_last_read_hold(tables: &mut Tables, name: &str) -> Wake {
    let Some(held) = tables.rwlocks.get_mut(name) else {
        return Wake::Nobody;
    };
    let now = Instant::now();
    let longest = held
        .readers
        .values()
        .flatten()
        .copied()
        .filter(|at| *at > now)
        .max();
    if let Some(longest) = longest {
        held.expires_at = longest;
        return Wake::Nobody;
    }
    if held.writer.is_some() {
        return Wake::Nobody;
    }
    tables.rwlocks.remove(name);
    // With writers waiting, the one woken must be able to take it: wake them all (held-back
    // readers look and wait again).
    if writer_waits(tables, name, now).is_some() {
        Wake::All
    } else {
        Wake::One
    }
}

/// After the writer's last write hold went: free, or back to read mode when the same owner
/// field still reads (its readers, and everyone else's, may now come in).
fn after_last_write_hold(tables: &mut Tables, name: &str) -> Wake {
    let Some(held) = tables.rwlocks.get_mut(name) else {
        return Wake::Nobody;
    };
    held.writer = None;
    held.mode = ReadWriteMode::Read;
    // The read holds left (a downgrade) keep the lock for their own leases, no longer for the
    // write lease: a downgraded reader that crashes holds it no longer than its lease.
    after_last_read_hold(tables, name);
    Wake::All
}

impl MemoryBackend {
    fn wake_rw(&self, name: &str, wake: Wake) {
        match wake {
            Wake::Nobody => {}
            Wake::One => self.store.hub.notify_released(&topic(name)),
            Wake::All => self.store.hub.wake_watchers(&topic(name)),
        }
    }

    fn rw_force_release(&self, name: &str, mode: ReadWriteMode) -> bool {
        let mut tables = self.tables();
        if live(&mut tables, name).is_none_or(|held| held.mode != mode) {
            return false;
        }
        tables.rwlocks.remove(name);
        drop(tables);
        let wake = match mode {
            ReadWriteMode::Read => Wake::One,
            ReadWriteMode::Write => Wake::All,
        };
        self.wake_rw(name, wake);
        true
    }
}

/// The read side of [`MemoryBackend`]'s read-write locks.
#[derive(Clone, Debug)]
pub struct MemoryReadSide(MemoryBackend);

/// The write side of [`MemoryBackend`]'s read-write locks (writers preferred when `1` is true:
/// see [`ReadWriteBackend::preferring_write_side`]).
#[derive(Clone, Debug)]
pub struct MemoryWriteSide(MemoryBackend, bool);

impl ReadWriteBackend for MemoryBackend {
    type Read = MemoryReadSide;
    type Write = MemoryWriteSide;

    fn read_side(&self) -> MemoryReadSide {
        MemoryReadSide(self.clone())
    }

    fn write_side(&self) -> MemoryWriteSide {
        MemoryWriteSide(self.clone(), false)
    }

    fn preferring_write_side(&self) -> MemoryWriteSide {
        MemoryWriteSide(self.clone(), true)
    }

    async fn read_write_state(&self, name: &str) -> Result<ReadWriteState> {
        let mut tables = self.tables();
        let now = Instant::now();
        Ok(match live(&mut tables, name) {
            Some(held) => {
                let mut readers: Vec<(String, u32)> = held
                    .readers
                    .iter()
                    .map(|(field, holds)| (field.clone(), count(holds)))
                    .collect();
                readers.sort();
                ReadWriteState::new(
                    Some(held.mode),
                    readers,
                    held.writer.clone(),
                    Some(held.expires_at.saturating_duration_since(now)),
                )
            }
            None => ReadWriteState::default(),
        })
    }
}

fn count(holds: &[Instant]) -> u32 {
    u32::try_from(holds.len()).unwrap_or(u32::MAX)
}

impl LockBackend for MemoryReadSide {
    fn client_id(&self) -> &str {
        self.0.client_id()
    }

    fn kind(&self) -> &'static str {
        "read"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let mut tables = self.0.tables();
        let now = Instant::now();
        let until = now + request.lease;
        if let Some(held) = live(&mut tables, request.name) {
            drop_lapsed_read_holds(held, request.owner_field, now);
        }
        // A writer of a writer-preferring side waits: no read hold for an owner field that
        // holds none (its re-entries and a writer's downgrade still go through).
        if let Some(wait) = writer_waits(&mut tables, request.name, now) {
            let holds = live(&mut tables, request.name).is_some_and(|held| {
                held.readers.contains_key(request.owner_field)
                    || held
                        .writer
                        .as_ref()
                        .is_some_and(|(field, _)| field == request.owner_field)
            });
            if !holds {
                let ttl = live(&mut tables, request.name).map_or(wait, |held| {
                    held.expires_at.saturating_duration_since(now).min(wait)
                });
                return Ok(AcquireOutcome::Held { ttl: Some(ttl) });
            }
        }
        match live(&mut tables, request.name) {
            None => {
                tables.rwlocks.insert(
                    request.name.to_owned(),
                    RwHeld {
                        mode: ReadWriteMode::Read,
                        readers: HashMap::from([(request.owner_field.to_owned(), vec![until])]),
                        writer: None,
                        expires_at: until,
                    },
                );
            }
            Some(held)
                if held.mode == ReadWriteMode::Read
                    || held
                        .writer
                        .as_ref()
                        .is_some_and(|(field, _)| field == request.owner_field) =>
            {
                held.readers
                    .entry(request.owner_field.to_owned())
                    .or_default()
                    .push(until);
                later(&mut held.expires_at, until);
            }
            Some(held) => {
                let ttl = held.expires_at.saturating_duration_since(now);
                return Ok(AcquireOutcome::Held { ttl: Some(ttl) });
            }
        }
        let hold_count = tables
            .rwlocks
            .get(request.name)
            .and_then(|held| held.readers.get(request.owner_field))
            .map_or(0, |holds| count(holds));
        let fencing_token = next_token(&mut tables, request.name, request.fencing);
        Ok(AcquireOutcome::Acquired(Grant {
            hold_count,
            fencing_token,
        }))
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        _lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let mut tables = self.0.tables();
        let Some(holds) =
            live(&mut tables, name).and_then(|held| held.readers.get_mut(owner_field))
        else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        // The hold ending first goes: guards are released in any order, and the holds left
        // must last as long as the leases their guards count on.
        if let Some(first) = (0..holds.len()).min_by_key(|&at| holds[at]) {
            holds.remove(first);
        }
        if !holds.is_empty() {
            return Ok(ReleaseOutcome::StillHeld {
                hold_count: count(holds),
            });
        }
        if let Some(held) = tables.rwlocks.get_mut(name) {
            held.readers.remove(owner_field);
        }
        let wake = after_last_read_hold(&mut tables, name);
        drop(tables);
        self.0.wake_rw(name, wake);
        Ok(ReleaseOutcome::Released)
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        let mut tables = self.0.tables();
        let now = Instant::now();
        Ok(renewals
            .iter()
            .map(|renewal| {
                let until = now + renewal.lease;
                let Some(held) = live(&mut tables, renewal.name) else {
                    return RenewOutcome::NotHeld;
                };
                let Some(holds) = held.readers.get_mut(renewal.owner_field) else {
                    return RenewOutcome::NotHeld;
                };
                for at in holds.iter_mut() {
                    later(at, until);
                }
                later(&mut held.expires_at, until);
                RenewOutcome::Renewed
            })
            .collect())
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        let mut tables = self.0.tables();
        let Some(holds) =
            live(&mut tables, name).and_then(|held| held.readers.get_mut(owner_field))
        else {
            return Ok(());
        };
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        if holds.len() <= keep {
            return Ok(());
        }
        holds.truncate(keep);
        if keep > 0 {
            return Ok(());
        }
        if let Some(held) = tables.rwlocks.get_mut(name) {
            held.readers.remove(owner_field);
        }
        let wake = after_last_read_hold(&mut tables, name);
        drop(tables);
        self.0.wake_rw(name, wake);
        Ok(())
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        Ok(self.0.rw_force_release(name, ReadWriteMode::Read))
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        let state = self.0.read_write_state(name).await?;
        let ttl = state.ttl.filter(|_| !state.readers.is_empty());
        Ok(LockState::new(state.readers, ttl))
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.0.store.hub.watch(&topic(name)))
    }
}

impl LockBackend for MemoryWriteSide {
    fn client_id(&self) -> &str {
        self.0.client_id()
    }

    fn kind(&self) -> &'static str {
        "write"
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let mut tables = self.0.tables();
        let now = Instant::now();
        let until = now + request.lease;
        let hold_count = match live(&mut tables, request.name) {
            None => {
                tables.rwlocks.insert(
                    request.name.to_owned(),
                    RwHeld {
                        mode: ReadWriteMode::Write,
                        readers: HashMap::new(),
                        writer: Some((request.owner_field.to_owned(), 1)),
                        expires_at: until,
                    },
                );
                1
            }
            Some(held) => match &mut held.writer {
                Some((field, count)) if field == request.owner_field => {
                    *count += 1;
                    let count = *count;
                    later(&mut held.expires_at, until);
                    count
                }
                None if held.readers.contains_key(request.owner_field) => {
                    return Err(Error::UpgradeRefused {
                        name: request.name.to_owned(),
                    });
                }
                _ => {
                    let mut ttl = held.expires_at.saturating_duration_since(now);
                    if self.1 && request.waits {
                        let deadline = now + QUEUE_TIMEOUT;
                        let waiting = tables
                            .rw_writers_waiting
                            .entry(request.name.to_owned())
                            .or_default();
                        waiting.retain(|(field, _)| field != request.owner_field);
                        waiting.push((request.owner_field.to_owned(), deadline));
                        ttl = ttl.min(QUEUE_TIMEOUT / 3);
                    }
                    return Ok(AcquireOutcome::Held { ttl: Some(ttl) });
                }
            },
        };
        stop_waiting(&mut tables, request.name, request.owner_field);
        let fencing_token = next_token(&mut tables, request.name, request.fencing);
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
        self.lower_to(name, owner_field, None, lease)
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        let mut tables = self.0.tables();
        let now = Instant::now();
        Ok(renewals
            .iter()
            .map(|renewal| match live(&mut tables, renewal.name) {
                Some(held)
                    if held
                        .writer
                        .as_ref()
                        .is_some_and(|(field, _)| field == renewal.owner_field) =>
                {
                    later(&mut held.expires_at, now + renewal.lease);
                    RenewOutcome::Renewed
                }
                _ => RenewOutcome::NotHeld,
            })
            .collect())
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        self.lower_to(name, owner_field, Some(keep), Duration::ZERO)
            .map(drop)
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        Ok(self.0.rw_force_release(name, ReadWriteMode::Write))
    }

    fn queues(&self) -> bool {
        self.1
    }

    async fn leave_queue(&self, name: &str, owner_field: &str) -> Result<()> {
        let mut tables = self.0.tables();
        stop_waiting(&mut tables, name, owner_field);
        let readers_may_come = writer_waits(&mut tables, name, Instant::now()).is_none();
        drop(tables);
        if readers_may_come {
            // Readers held back by this writer may come in now.
            self.0.wake_rw(name, Wake::All);
        }
        Ok(())
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        let state = self.0.read_write_state(name).await?;
        let ttl = state.ttl.filter(|_| state.writer.is_some());
        Ok(LockState::new(state.writer.into_iter().collect(), ttl))
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        Ok(self.0.store.hub.watch(&topic(name)))
    }
}

impl MemoryWriteSide {
    /// Gives back one write hold of `owner_field` (`keep: None`, lengthening what remains to
    /// `lease`), or lowers its count to at most `keep` (an abandon).
    fn lower_to(
        &self,
        name: &str,
        owner_field: &str,
        keep: Option<u32>,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let mut tables = self.0.tables();
        let Some(held) = live(&mut tables, name) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let Some((field, count)) = &mut held.writer else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        if field != owner_field {
            return Ok(ReleaseOutcome::NotHeld);
        }
        let left = match keep {
            Some(keep) if *count <= keep => {
                return Ok(ReleaseOutcome::StillHeld { hold_count: *count });
            }
            Some(keep) => keep,
            None => *count - 1,
        };
        if left > 0 {
            *count = left;
            if keep.is_none() {
                later(&mut held.expires_at, Instant::now() + lease);
            }
            return Ok(ReleaseOutcome::StillHeld { hold_count: left });
        }
        let wake = after_last_write_hold(&mut tables, name);
        drop(tables);
        self.0.wake_rw(name, wake);
        Ok(ReleaseOutcome::Released)
    }
}

//! The in-memory fair locks: the store's plain locks (the same holders) plus, per name, a FIFO
//! queue of waiting owner fields with their deadlines; a freed lock wakes only the head.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::contract::{
    AcquireOutcome, AcquireRequest, Grant, LockBackend, LockState, ReleaseOutcome, RenewOutcome,
    Renewal,
};
use crate::error::Result;
use crate::fair_backend::{FairBackend, FairState, QUEUE_TIMEOUT};
use crate::memory::{Held, MemoryBackend, Tables, extend_to, live};
use crate::notify::ReleaseWatch;

/// The waiters of one fair lock, in order, each with the deadline of its place.
pub(super) type Queue = VecDeque<(String, Instant)>;

/// The hub topic of one waiter of the fair lock `name`.
fn waiter_topic(name: &str, owner_field: &str) -> String {
    format!("fair:{name}:{owner_field}")
}

/// Drops the waiters at the head of `name`'s queue whose place lapsed, but not `caller`'s own
/// entry: it is trying now, and keeps its place.
fn drop_lapsed(tables: &mut Tables, name: &str, caller: &str) {
    let now = Instant::now();
    if let Some(queue) = tables.fair_queues.get_mut(name) {
        while queue
            .front()
            .is_some_and(|(field, deadline)| *deadline <= now && field != caller)
        {
            queue.pop_front();
        }
    }
}

fn head(tables: &Tables, name: &str) -> Option<String> {
    tables
        .fair_queues
        .get(name)
        .and_then(|queue| queue.front())
        .map(|(field, _)| field.clone())
}

/// The fair side of [`MemoryBackend`]'s locks (see [`FairBackend`]).
#[derive(Clone, Debug)]
pub struct MemoryFairSide(MemoryBackend);

impl FairBackend for MemoryBackend {
    type Fair = MemoryFairSide;

    fn fair_side(&self) -> MemoryFairSide {
        MemoryFairSide(self.clone())
    }

    async fn fair_state(&self, name: &str) -> Result<FairState> {
        self.check_name(name)?;
        let lock = LockBackend::inspect(self, name).await?;
        let now = Instant::now();
        let queue = self
            .tables()
            .fair_queues
            .get(name)
            .into_iter()
            .flatten()
            .map(|(field, deadline)| (field.clone(), Some(deadline.saturating_duration_since(now))))
            .collect();
        Ok(FairState::new(lock.holders, lock.ttl, queue))
    }
}

impl MemoryFairSide {
    /// Wakes the waiter at the head of `name`'s queue (the lock was freed).
    fn wake_head(&self, name: Option<(String, String)>) {
        if let Some((name, head)) = name {
            self.0
                .store
                .hub
                .notify_released(&waiter_topic(&name, &head));
        }
    }
}

/// The head of `name`'s queue to wake, when the lock is free.
fn head_to_wake(tables: &mut Tables, name: &str) -> Option<(String, String)> {
    if live(&mut tables.locks, name).is_some() {
        return None;
    }
    head(tables, name).map(|head| (name.to_owned(), head))
}

impl LockBackend for MemoryFairSide {
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
        let mut tables = self.0.tables();
        let now = Instant::now();
        drop_lapsed(&mut tables, request.name, request.owner_field);
        let first = head(&tables, request.name);
        let free = live(&mut tables.locks, request.name).is_none();
        let mine = first
            .as_deref()
            .is_none_or(|head| head == request.owner_field);
        let holds = live(&mut tables.locks, request.name)
            .is_some_and(|held| held.holders.contains_key(request.owner_field));
        if (free && mine) || holds {
            if free
                && first.is_some()
                && let Some(queue) = tables.fair_queues.get_mut(request.name)
            {
                queue.pop_front();
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
            return Ok(AcquireOutcome::Acquired(Grant {
                hold_count,
                fencing_token,
            }));
        }
        if request.waits {
            let queue = tables
                .fair_queues
                .entry(request.name.to_owned())
                .or_default();
            let deadline = now + QUEUE_TIMEOUT;
            match queue
                .iter_mut()
                .find(|(field, _)| field == request.owner_field)
            {
                Some((_, place)) => *place = deadline,
                None => queue.push_back((request.owner_field.to_owned(), deadline)),
            }
        }
        // Try again before the place lapses, when the lease ends, or when the head's place
        // lapses (a head that went away holds the free lock up until then).
        let mut again = QUEUE_TIMEOUT / 3;
        if let Some(held) = live(&mut tables.locks, request.name) {
            if let Some(at) = held.expires_at {
                again = again.min(at.saturating_duration_since(now));
            }
        } else if let Some(queue) = tables.fair_queues.get(request.name)
            && let Some((field, deadline)) = queue.front()
            && field != request.owner_field
        {
            again = again.min(deadline.saturating_duration_since(now));
        }
        Ok(AcquireOutcome::Held { ttl: Some(again) })
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let mut tables = self.0.tables();
        let Some(held) = live(&mut tables.locks, name) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let Some(count) = held.holders.get_mut(owner_field) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        *count -= 1;
        if *count > 0 {
            let hold_count = *count;
            extend_to(held, Instant::now() + lease);
            return Ok(ReleaseOutcome::StillHeld { hold_count });
        }
        tables.locks.remove(name);
        let wake = head_to_wake(&mut tables, name);
        drop(tables);
        self.wake_head(wake);
        Ok(ReleaseOutcome::Released)
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        LockBackend::renew(&self.0, renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        let mut tables = self.0.tables();
        let Some(held) = live(&mut tables.locks, name) else {
            return Ok(());
        };
        match held.holders.get_mut(owner_field) {
            Some(count) if *count > keep => {
                if keep > 0 {
                    *count = keep;
                    return Ok(());
                }
                held.holders.remove(owner_field);
            }
            _ => return Ok(()),
        }
        if held.holders.is_empty() {
            tables.locks.remove(name);
            let wake = head_to_wake(&mut tables, name);
            drop(tables);
            self.wake_head(wake);
        }
        Ok(())
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let mut tables = self.0.tables();
        let existed = live(&mut tables.locks, name).is_some();
        tables.locks.remove(name);
        let wake = existed.then(|| head_to_wake(&mut tables, name)).flatten();
        drop(tables);
        self.wake_head(wake);
        Ok(existed)
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        LockBackend::inspect(&self.0, name).await
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        LockBackend::watch_releases(&self.0, name).await
    }

    async fn watch_releases_of(&self, name: &str, owner_field: &str) -> Result<ReleaseWatch> {
        Ok(self.0.store.hub.watch(&waiter_topic(name, owner_field)))
    }

    async fn leave_queue(&self, name: &str, owner_field: &str) -> Result<()> {
        let mut tables = self.0.tables();
        let was_head = head(&tables, name).as_deref() == Some(owner_field);
        if let Some(queue) = tables.fair_queues.get_mut(name) {
            queue.retain(|(field, _)| field != owner_field);
            if queue.is_empty() {
                tables.fair_queues.remove(name);
            }
        }
        let wake = if was_head {
            head_to_wake(&mut tables, name)
        } else {
            None
        };
        drop(tables);
        self.wake_head(wake);
        Ok(())
    }
}

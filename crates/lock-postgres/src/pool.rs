//! The backend's connections: one per slot, every lock name on the slot of its key.
//!
//! # Order and fences
//!
//! The server runs a connection's statements in the order they were sent, so all steps on one
//! name go through one connection (the slot its key falls on): a step whose future was dropped
//! still runs before the next step of that name, as on the Redis backend's one connection, and
//! the Locker's rule "one step of an owner on a name at a time" holds on the server too.
//!
//! A statement whose connection broke or did not answer in time may still commit later (a
//! statement waiting for a row lock goes on after its client is gone). So such a connection is
//! *retired*: the slot's next connection first ends the retired one's server process
//! (`pg_terminate_backend(pid, timeout)`, which waits until it is gone) and only then sends
//! anything. Until that fence holds, steps on the slot fail.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lock_core::{Error, Result};
use tokio::sync::Mutex;
use tokio::time::{Instant, timeout_at};
use tokio_postgres::Config;

use crate::error::{classify, is_definite, is_read_only};
use crate::key::LockKey;
use crate::session::{Session, SessionSettings};

/// A retired connection's server process, named by pid and start time (a pid alone may have
/// been reused).
#[derive(Clone, Copy, Debug)]
struct Retired {
    pid: i32,
    backend_start: SystemTime,
}

/// One slot: its live connection for the common case, behind a plain lock held for a clone of
/// an `Arc`, and the state that connecting and fencing change, behind an async lock held across
/// those round trips.
#[derive(Default)]
struct Slot {
    /// The connection steps use; `None` while the slot is connecting or fencing.
    live: std::sync::Mutex<Option<Arc<Session>>>,
    state: Mutex<SlotState>,
}

impl Slot {
    /// The live connection, if it is still open.
    fn live(&self) -> Option<Arc<Session>> {
        // Only a clone or a replacement happens under the lock: a panic cannot leave it torn.
        let live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        live.as_ref()
            .filter(|session| !session.client.is_closed())
            .cloned()
    }

    fn set_live(&self, session: Option<Arc<Session>>) {
        *self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = session;
    }
}

#[derive(Default)]
struct SlotState {
    session: Option<Arc<Session>>,
    /// Set from the retirement of a connection until its fence held.
    retired: Option<Retired>,
}

pub(crate) struct Pool {
    config: Config,
    settings: SessionSettings,
    slots: Vec<Slot>,
    call_timeout: Duration,
}

impl Pool {
    /// A pool of `size` slots, connected lazily (the first one by [`Pool::warm_up`]).
    pub(crate) fn new(
        config: Config,
        settings: SessionSettings,
        size: usize,
        call_timeout: Duration,
    ) -> Self {
        Pool {
            config,
            settings,
            slots: (0..size.max(1)).map(|_| Slot::default()).collect(),
            call_timeout,
        }
    }

    /// Connects the first slot, so that a wrong address, credentials or schema show at once.
    pub(crate) async fn warm_up(&self) -> Result<()> {
        self.session(0, Instant::now() + self.call_timeout)
            .await
            .map(drop)
    }

    /// The slot of `key`.
    pub(crate) fn slot_of(&self, key: &LockKey) -> usize {
        let bytes = key.as_bytes();
        usize::from(u16::from_be_bytes([bytes[0], bytes[1]])) % self.slots.len()
    }

    /// Runs one statement on `slot`'s connection within the call timeout.
    ///
    /// # Errors
    ///
    /// The statement's error, classified (`error`); [`Error::Timeout`] when no answer came in
    /// time. An error that leaves the statement's fate unknown retires the connection.
    pub(crate) async fn call<T, F, Fut>(&self, slot: usize, step: F) -> Result<T>
    where
        F: FnOnce(Arc<Session>) -> Fut,
        Fut: Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    {
        let deadline = Instant::now() + self.call_timeout;
        let session = self.session(slot, deadline).await?;
        match timeout_at(deadline, step(Arc::clone(&session))).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                // A definite error on a connection that closed (the server ended it), or on a
                // server that cannot take writes, needs no fence but a new connection all the
                // same.
                if !is_definite(&error) || session.client.is_closed() || is_read_only(&error) {
                    self.retire(slot, &session).await;
                }
                Err(classify(error))
            }
            Err(_) => {
                self.retire(slot, &session).await;
                Err(Error::Timeout {
                    after: self.call_timeout,
                })
            }
        }
    }

    /// `slot`'s connection: the live one, or a new one once the retired one is fenced.
    async fn session(&self, slot: usize, deadline: Instant) -> Result<Arc<Session>> {
        let timed_out = || Error::Timeout {
            after: self.call_timeout,
        };
        // The common case: the slot's connection is up.
        if let Some(session) = self.slots[slot].live() {
            return Ok(session);
        }
        let mut state = timeout_at(deadline, self.slots[slot].state.lock())
            .await
            .map_err(|_| timed_out())?;
        if let Some(session) = &state.session {
            if !session.client.is_closed() {
                return Ok(Arc::clone(session));
            }
            let session = state.session.take().expect("checked above");
            state.retired = Some(Retired {
                pid: session.pid,
                backend_start: session.backend_start,
            });
        }
        let session = timeout_at(deadline, Session::connect(&self.config, &self.settings))
            .await
            .map_err(|_| timed_out())??;
        if let Some(retired) = state.retired {
            let left = deadline.saturating_duration_since(Instant::now());
            timeout_at(deadline, fence(&session, retired, left))
                .await
                .map_err(|_| timed_out())??;
            state.retired = None;
        }
        let session = Arc::new(session);
        state.session = Some(Arc::clone(&session));
        self.slots[slot].set_live(Some(Arc::clone(&session)));
        Ok(session)
    }

    /// Takes `session` out of `slot` (if it is still there) and leaves its fence to the slot's
    /// next connection.
    async fn retire(&self, slot: usize, session: &Arc<Session>) {
        let mut state = self.slots[slot].state.lock().await;
        if state
            .session
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, session))
        {
            state.session = None;
            self.slots[slot].set_live(None);
            state.retired = Some(Retired {
                pid: session.pid,
                backend_start: session.backend_start,
            });
            crate::telemetry::connection_retired(session.pid, slot);
        }
    }
}

/// Ends `retired`'s server process and waits until it is gone (at most `within`), so that
/// nothing it was running can commit after this returns `Ok`.
async fn fence(session: &Session, retired: Retired, within: Duration) -> Result<()> {
    let wait_ms = i64::try_from(within.as_millis()).unwrap_or(i64::MAX).max(1);
    let row = session
        .client
        .query_one(
            "SELECT coalesce(bool_and(pg_terminate_backend(pid, $3)), true) \
               FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2",
            &[&retired.pid, &retired.backend_start, &wait_ms],
        )
        .await
        .map_err(classify)?;
    if row.get::<_, bool>(0) {
        tracing::debug!(pid = retired.pid, "fenced a retired PostgreSQL connection");
        Ok(())
    } else {
        Err(Error::Unavailable(
            format!(
                "the server process {} of a retired connection did not end in time",
                retired.pid
            )
            .into(),
        ))
    }
}

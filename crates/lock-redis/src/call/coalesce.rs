//! Coalescing: lock and unlock calls made at the same moment share one pipeline.
//!
//! With many tasks locking at once, most of a call's cost is the client's per-request work
//! (encoding, a channel hop to the connection task, a timer, waking the caller), not the
//! server's. So at most [`MAX_IN_FLIGHT`] pipelines are in flight per backend: a call that finds
//! a free slot sends its commands at once (a lone caller pays nothing extra), and calls arriving
//! while the slots are busy queue up and go out together, in arrival order, as soon as a slot
//! frees. Every pipeline ends with a `PING <request id>` whose answer proves all the replies before
//! it belong to it (see `crate::connection`).
//!
//! A queued call is bounded by the pipeline ahead of it and its own, each within its timeout. A
//! caller that gives up while queued (its future dropped) is skipped when the batch is made:
//! nothing of it is sent. Once sent, the commands run whatever happens to the caller, as for a
//! call sent alone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{Error, Result};
use redis::{Cmd, Value};
use tokio::sync::oneshot;

/// Pipelines in flight at once per backend: two, so the server works on one while the client
/// reads the replies of the other and fills the next.
const MAX_IN_FLIGHT: usize = 2;
/// At most this many commands go into one pipeline.
const MAX_BATCH_COMMANDS: usize = 512;

/// One queued call: its commands, its timeout, and where its replies go.
struct Pending {
    commands: Vec<Cmd>,
    timeout: Duration,
    reply: oneshot::Sender<Result<Vec<Value>>>,
}

#[derive(Default)]
struct State {
    queue: Vec<Pending>,
    in_flight: usize,
}

/// The queue of one backend.
pub(crate) struct Coalescer {
    state: Mutex<State>,
    /// Pipelines in flight before calls queue up: [`MAX_IN_FLIGHT`], or no limit when calls
    /// must not share pipelines (every call then goes alone).
    in_flight_limit: usize,
}

impl Default for Coalescer {
    fn default() -> Self {
        Coalescer {
            state: Mutex::default(),
            in_flight_limit: MAX_IN_FLIGHT,
        }
    }
}

impl Coalescer {
    /// A queue that lets one pipeline be in flight at a time (writes waiting for replicas: a
    /// `WAIT` holds the connection on the server until it answers).
    pub(crate) fn one_at_a_time() -> Self {
        Coalescer {
            state: Mutex::default(),
            in_flight_limit: 1,
        }
    }

    /// A queue that never holds a call: each goes out alone at once (a cluster, where one
    /// pipeline reaches one node).
    pub(crate) fn never() -> Self {
        Coalescer {
            state: Mutex::default(),
            in_flight_limit: usize::MAX,
        }
    }
}

/// What owns a [`Coalescer`] and sends its pipelines (the calls layer). Slots and drain tasks
/// keep it alive; generic rather than boxed, so taking a turn costs what it did.
pub(crate) trait Carrier: Send + Sync + 'static {
    /// The queue.
    fn coalescer(&self) -> &Coalescer;

    /// Sends `commands` as one pipeline and returns the replies cut into groups of `counts`
    /// (error replies included as `Value::ServerError`).
    fn pipeline_of(
        &self,
        commands: Vec<Cmd>,
        counts: &[usize],
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<Vec<Value>>>> + Send;
}

fn lock(coalescer: &Coalescer) -> std::sync::MutexGuard<'_, State> {
    coalescer
        .state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A pipeline slot held by whoever sends; freed (or handed to a task that sends the queue) when
/// dropped, also if the sender's future is dropped mid-call.
pub(crate) struct Slot<C: Carrier> {
    carrier: Arc<C>,
}

impl<C: Carrier> Drop for Slot<C> {
    fn drop(&mut self) {
        let coalescer = self.carrier.coalescer();
        let mut state = lock(coalescer);
        if state.queue.is_empty() {
            state.in_flight -= 1;
            return;
        }
        drop(state);
        // Calls are waiting: the slot passes to a task that sends them, so this caller returns
        // at once. The guard is made here and moved into the task, so the slot is given back
        // even if the task is dropped unpolled (its runtime shutting down).
        let drainer = Drainer {
            carrier: self.carrier.clone(),
            done: false,
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(drainer));
        }
        // Without a runtime the drainer is dropped here, failing the queued calls.
    }
}

/// The slot held by a drain task. Dropped before the queue is empty (the task dropped with
/// its runtime), it gives the slot back and fails the calls still queued, none of which was
/// sent; calls in the batch being sent see their reply channel closed (ambiguous).
struct Drainer<C: Carrier> {
    carrier: Arc<C>,
    /// Set once the task gave the slot back itself (queue empty, under the lock).
    done: bool,
}

impl<C: Carrier> Drop for Drainer<C> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = lock(self.carrier.coalescer());
        state.in_flight -= 1;
        for pending in state.queue.drain(..) {
            let _ = pending.reply.send(Err(Error::Unavailable(
                "the runtime carrying the pipeline shut down; the call was not sent".into(),
            )));
        }
    }
}

/// What a call gets from the coalescer: a free pipeline slot (send alone, now) or a place in
/// the queue (its replies arrive on the receiver).
pub(crate) enum Turn<C: Carrier> {
    Alone(Slot<C>),
    Queued(oneshot::Receiver<Result<Vec<Value>>>),
}

/// Takes a free pipeline slot, or queues the commands `make` builds. One step under one lock,
/// so a call never queues just after the last pipeline in flight looked at the queue.
pub(crate) fn take_turn<C: Carrier>(
    carrier: &Arc<C>,
    timeout: Duration,
    make: impl FnOnce() -> Vec<Cmd>,
) -> Turn<C> {
    turn_below(carrier, carrier.coalescer().in_flight_limit, timeout, make)
}

/// As [`take_turn`], but alone only when nothing at all is in flight: otherwise queued, so it
/// is written after every pipeline already sent or being put together (a batch is built under
/// the lock, then written; a call that went alone meanwhile could be written first). For the
/// cleanups that undo a call whose caller went away: they must reach the server after it.
pub(crate) fn take_turn_behind<C: Carrier>(
    carrier: &Arc<C>,
    timeout: Duration,
    make: impl FnOnce() -> Vec<Cmd>,
) -> Turn<C> {
    turn_below(carrier, 1, timeout, make)
}

/// A slot when fewer than `limit` pipelines are in flight and nothing is queued, else a place
/// in the queue. Never past a queued call: a cleanup queued behind the pipelines in flight must
/// not be overtaken by a later call (say, the same owner's next acquire, which it would undo).
fn turn_below<C: Carrier>(
    carrier: &Arc<C>,
    limit: usize,
    timeout: Duration,
    make: impl FnOnce() -> Vec<Cmd>,
) -> Turn<C> {
    let mut state = lock(carrier.coalescer());
    if state.in_flight < limit && state.queue.is_empty() {
        state.in_flight += 1;
        drop(state);
        return Turn::Alone(Slot {
            carrier: carrier.clone(),
        });
    }
    let (reply, answer) = oneshot::channel();
    state.queue.push(Pending {
        commands: make(),
        timeout,
        reply,
    });
    Turn::Queued(answer)
}

/// Waits for a queued call's replies: at most the pipeline ahead of it and its own, each
/// within `timeout`. Past that the call gives up; if it was still queued nothing of it is sent
/// (the batch skips closed calls), but it may already be on its way, so the error is a timeout
/// (ambiguous).
pub(crate) async fn queued_reply(
    answer: oneshot::Receiver<Result<Vec<Value>>>,
    timeout: Duration,
) -> Result<Vec<Value>> {
    match tokio::time::timeout(timeout * 2, answer).await {
        Ok(Ok(replies)) => replies,
        Ok(Err(_)) => Err(Error::ConnectionLost(
            "the pipeline carrying the call was dropped".into(),
        )),
        Err(_) => Err(Error::Timeout { after: timeout * 2 }),
    }
}

/// Sends the queue, batch after batch, while calls wait; then frees the slot (the drainer's
/// drop, with the queue empty).
async fn drain<C: Carrier>(mut drainer: Drainer<C>) {
    let carrier = drainer.carrier.clone();
    loop {
        let batch = {
            let mut state = lock(carrier.coalescer());
            let mut batch = Vec::new();
            let mut commands = 0;
            let mut rest = Vec::new();
            for pending in state.queue.drain(..) {
                if pending.reply.is_closed() {
                    continue; // the caller gave up before anything was sent
                }
                if commands > 0 && commands + pending.commands.len() > MAX_BATCH_COMMANDS {
                    rest.push(pending);
                    continue;
                }
                commands += pending.commands.len();
                batch.push(pending);
            }
            state.queue = rest;
            if batch.is_empty() {
                // Under the lock, with the queue empty: a call arriving later finds a free slot.
                state.in_flight -= 1;
                drainer.done = true;
                return;
            }
            batch
        };
        let timeout = batch
            .iter()
            .map(|pending| pending.timeout)
            .min()
            .unwrap_or(Duration::from_secs(1));
        let counts: Vec<usize> = batch.iter().map(|pending| pending.commands.len()).collect();
        let mut commands = Vec::with_capacity(counts.iter().sum());
        let mut replies_to = Vec::with_capacity(batch.len());
        for pending in batch {
            commands.extend(pending.commands);
            replies_to.push(pending.reply);
        }
        match carrier.pipeline_of(commands, &counts, timeout).await {
            Ok(groups) => {
                for (reply, group) in replies_to.into_iter().zip(groups) {
                    let _ = reply.send(Ok(group));
                }
            }
            Err(error) => {
                for reply in replies_to {
                    let _ = reply.send(Err(same_error(&error)));
                }
            }
        }
    }
}

/// The pipeline's failure, for each call it carried: only the kinds a pipeline as a whole
/// can fail with keep their kind; anything else is reported as a lost connection (ambiguous,
/// the safe reading).
fn same_error(error: &Error) -> Error {
    match error {
        Error::Timeout { after } => Error::Timeout { after: *after },
        Error::ConnectionLost(text) => Error::ConnectionLost(text.clone()),
        Error::Protocol(text) => Error::Protocol(text.clone()),
        other => Error::ConnectionLost(other.to_string().into()),
    }
}

//! Coalescing: lock and unlock calls made at the same moment share one pipeline.
//!
//! With many tasks locking at once, most of a call's cost is the client's per-request work
//! (encoding, a channel hop to the connection task, a timer, waking the caller), not the
//! server's. So at most [`MAX_IN_FLIGHT`] pipelines are in flight per backend: a call that finds
//! a free slot sends its commands at once (a lone caller pays nothing extra), and calls arriving
//! while the slots are busy queue up and go out together, in arrival order, as soon as a slot
//! frees, or as soon as they make a full pipeline ([`FULL_PIPELINE`] commands, with up to
//! [`MAX_FULL_IN_FLIGHT`] pipelines in flight). Every pipeline ends with a `PING <request id>`
//! whose answer proves all the replies before it belong to it, unless it goes alone on the
//! connection and is proven by that (see `crate::connection::ledger`).
//!
//! Why a full queue does not wait for a slot: the replies of one pipeline wake all its callers
//! at once, and each soon makes its next call. Were those calls to wait for a slot, they would
//! all go out together in one pipeline when the other one comes back: the calls then travel in
//! one large pipeline and one small one, and the server, done with the small one, waits while
//! the client works through the large one's callers, which in turn wait while the server works
//! through their pipeline. Sent once they fill a pipeline, they reach the server while the
//! client still works, and both stay busy. Measured with 64 tasks locking and releasing
//! distinct names (`lockbench distinct-names`, docs/performance.md): 1.3 to 1.4 times the
//! throughput of waiting for a slot on a 2-thread runtime, 1.2 to 1.4 times on one thread.
//!
//! A queued call is bounded by the pipeline ahead of it and its own, each within its timeout. A
//! caller that gives up while queued (its future dropped) is skipped when the batch is made:
//! nothing of it is sent. Once sent, the commands run whatever happens to the caller, as for a
//! call sent alone.
//!
//! A cleanup (the undo of a call whose outcome is unknown, see [`take_turn_behind`]) is a
//! barrier: from the moment it holds a slot (alone, or in a batch a drain task took) until its
//! pipeline came back, nothing else is handed to the connection. Holding a slot is not being
//! written: the slot's holder may still wait for a connection being replaced, and every call
//! waiting for it is woken at once, in no particular order, when the new one is published.

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
/// Queued commands that make a pipeline worth sending without waiting for a slot: enough that
/// its `PING` is a small part of it (measured: 8 to 16 did about as well; 24 and more lost
/// part of the gain, see the module documentation).
const FULL_PIPELINE: usize = 16;
/// Pipelines in flight at most, counting those a full queue started.
const MAX_FULL_IN_FLIGHT: usize = 8;

/// One queued call: its commands, its timeout, and where its replies go.
struct Pending {
    commands: Vec<Cmd>,
    timeout: Duration,
    reply: oneshot::Sender<Result<Vec<Value>>>,
    /// A cleanup, queued by [`take_turn_behind`]: its batch holds the barrier.
    behind: bool,
}

#[derive(Default)]
struct State {
    queue: Vec<Pending>,
    in_flight: usize,
    /// A cleanup holds a slot and its pipeline has not come back: no call goes alone and no
    /// other drain task takes a batch (see the module documentation). Set and cleared under
    /// this lock, by the holder of that slot only.
    cleanup_unsent: bool,
    /// Commands in the queue (those of closed calls included, until a batch skips them).
    queued_commands: usize,
    /// A drain task started for a full queue has not taken its batch yet: another full queue
    /// before it does would be its batch too, so no second task is started for it.
    full_drain_starting: bool,
}

/// The queue of one backend.
pub(crate) struct Coalescer {
    state: Mutex<State>,
    /// Pipelines in flight before calls queue up: [`MAX_IN_FLIGHT`], or no limit when calls
    /// must not share pipelines (every call then goes alone).
    in_flight_limit: usize,
    /// Pipelines in flight before a full queue waits for a slot too: [`MAX_FULL_IN_FLIGHT`],
    /// or `in_flight_limit` where no more may be in flight.
    full_in_flight_limit: usize,
}

impl Default for Coalescer {
    fn default() -> Self {
        Coalescer {
            state: Mutex::default(),
            in_flight_limit: MAX_IN_FLIGHT,
            full_in_flight_limit: MAX_FULL_IN_FLIGHT,
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
            full_in_flight_limit: 1,
        }
    }

    /// A queue that never holds a call: each goes out alone at once (a cluster, where one
    /// pipeline reaches one node).
    pub(crate) fn never() -> Self {
        Coalescer {
            state: Mutex::default(),
            in_flight_limit: usize::MAX,
            full_in_flight_limit: usize::MAX,
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
    /// Taken by a cleanup: it holds the barrier until dropped.
    barrier: bool,
}

impl<C: Carrier> Drop for Slot<C> {
    fn drop(&mut self) {
        let coalescer = self.carrier.coalescer();
        let mut state = lock(coalescer);
        if self.barrier {
            state.cleanup_unsent = false;
        }
        if state.queue.is_empty() {
            state.in_flight -= 1;
            return;
        }
        drop(state);
        // Calls are waiting: the slot passes to a task that sends them, so this caller returns
        // at once.
        start_drain(&self.carrier, false);
    }
}

/// Starts a task that sends the queue, with a slot already counted in flight. The guard is
/// made here and moved into the task, so the slot is given back even if the task is dropped
/// unpolled (its runtime shutting down); without a runtime it is dropped here, failing the
/// queued calls. `full`: started for a full queue (`State::full_drain_starting` is set).
fn start_drain<C: Carrier>(carrier: &Arc<C>, full: bool) {
    let drainer = Drainer {
        carrier: carrier.clone(),
        done: false,
        barrier: false,
        full,
    };
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(drain(drainer));
    }
}

/// The slot held by a drain task. Dropped before the queue is empty (the task dropped with
/// its runtime), it gives the slot back and fails the calls still queued, none of which was
/// sent; calls in the batch being sent see their reply channel closed (ambiguous).
struct Drainer<C: Carrier> {
    carrier: Arc<C>,
    /// Set once the task gave the slot back itself (under the lock).
    done: bool,
    /// The batch being sent carries a cleanup: this task holds the barrier.
    barrier: bool,
    /// Started for a full queue and not yet past taking its first batch.
    full: bool,
}

impl<C: Carrier> Drop for Drainer<C> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = lock(self.carrier.coalescer());
        if self.barrier {
            state.cleanup_unsent = false;
        }
        if self.full {
            state.full_drain_starting = false;
        }
        state.in_flight -= 1;
        state.queued_commands = 0;
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
    turn_below(
        carrier,
        carrier.coalescer().in_flight_limit,
        false,
        timeout,
        make,
    )
}

/// As [`take_turn`], but alone only when nothing at all is in flight: otherwise queued, so it
/// is written after every pipeline already sent or being put together (a batch is built under
/// the lock, then written; a call that went alone meanwhile could be written first). For the
/// cleanups that undo a call whose caller went away: they must reach the server after it.
/// Once it holds a slot, alone or in a batch, it is the barrier: every later call queues
/// until its pipeline came back (the slot dropped, the batch answered).
pub(crate) fn take_turn_behind<C: Carrier>(
    carrier: &Arc<C>,
    timeout: Duration,
    make: impl FnOnce() -> Vec<Cmd>,
) -> Turn<C> {
    turn_below(carrier, 1, true, timeout, make)
}

/// A slot when fewer than `limit` pipelines are in flight, nothing is queued and no cleanup is
/// unsent, else a place in the queue. Never past a queued call nor a cleanup on its way: a
/// cleanup must not be overtaken by a later call (say, the same owner's next acquire, which it
/// would undo). `behind`: the call is such a cleanup.
fn turn_below<C: Carrier>(
    carrier: &Arc<C>,
    limit: usize,
    behind: bool,
    timeout: Duration,
    make: impl FnOnce() -> Vec<Cmd>,
) -> Turn<C> {
    let mut state = lock(carrier.coalescer());
    if state.in_flight < limit && state.queue.is_empty() && !state.cleanup_unsent {
        state.in_flight += 1;
        state.cleanup_unsent = behind;
        drop(state);
        return Turn::Alone(Slot {
            carrier: carrier.clone(),
            barrier: behind,
        });
    }
    let (reply, answer) = oneshot::channel();
    let commands = make();
    state.queued_commands += commands.len();
    state.queue.push(Pending {
        commands,
        timeout,
        reply,
        behind,
    });
    // A full pipeline goes now (see the module documentation), unless a cleanup is on its way
    // or queued: the barrier's rules then decide when the queue goes.
    let full = state.queued_commands >= FULL_PIPELINE
        && state.in_flight < carrier.coalescer().full_in_flight_limit
        && !state.full_drain_starting
        && !state.cleanup_unsent
        && !state.queue.iter().any(|pending| pending.behind);
    if full {
        state.in_flight += 1;
        state.full_drain_starting = true;
        drop(state);
        start_drain(carrier, true);
    }
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
            if drainer.full {
                state.full_drain_starting = false;
                drainer.full = false;
            }
            if drainer.barrier {
                // The cleanup's pipeline came back (answered, failed or timed out: on a
                // connection since discarded, whose client the replacement kills first).
                state.cleanup_unsent = false;
                drainer.barrier = false;
            } else if state.cleanup_unsent {
                // Another holder's cleanup is on its way: that holder sends the queue once it
                // is done (its drain task goes on; a cleanup's own slot starts one).
                state.in_flight -= 1;
                drainer.done = true;
                return;
            }
            // A cleanup goes only in a batch of the one slot in flight: another slot's
            // pipeline may be taken and not yet written (waiting for a connection being
            // replaced, as this task may), and whichever is written first when the new one
            // is published, the cleanup must come after the call it undoes. It then waits for
            // that slot to come back, whose holder sends the queue. The queue keeps its order:
            // once a call stays behind, so do all after it.
            let cleanups_may_go = state.in_flight == 1;
            let mut batch = Vec::new();
            let mut commands = 0;
            let mut rest = Vec::new();
            for pending in state.queue.drain(..) {
                if pending.reply.is_closed() {
                    continue; // the caller gave up before anything was sent
                }
                let stays = !rest.is_empty()
                    || (pending.behind && !cleanups_may_go)
                    || (commands > 0 && commands + pending.commands.len() > MAX_BATCH_COMMANDS);
                if stays {
                    rest.push(pending);
                    continue;
                }
                commands += pending.commands.len();
                batch.push(pending);
            }
            state.queued_commands = rest.iter().map(|pending| pending.commands.len()).sum();
            state.queue = rest;
            if batch.iter().any(|pending| pending.behind) {
                state.cleanup_unsent = true;
                drainer.barrier = true;
            }
            if batch.is_empty() {
                // Under the lock, with the queue empty (a call arriving later finds a free
                // slot) or a cleanup waiting for the other slot, whose holder sends the queue.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A carrier whose pipelines are written only once the gate opens (a connection being
    /// replaced): it records each pipeline as it is handed over, by command name.
    struct Gated {
        coalescer: Coalescer,
        open: tokio::sync::watch::Sender<bool>,
        handed: Mutex<Vec<Vec<String>>>,
        handed_one: tokio::sync::Notify,
    }

    impl Gated {
        fn new() -> Arc<Self> {
            Self::with(Coalescer::default())
        }

        fn with(coalescer: Coalescer) -> Arc<Self> {
            Arc::new(Gated {
                coalescer,
                open: tokio::sync::watch::channel(false).0,
                handed: Mutex::default(),
                handed_one: tokio::sync::Notify::new(),
            })
        }

        fn handed(&self) -> Vec<Vec<String>> {
            self.handed.lock().unwrap().clone()
        }

        /// Waits until `count` pipelines were handed over.
        async fn until_handed(&self, count: usize) {
            loop {
                let notified = self.handed_one.notified();
                if self.handed.lock().unwrap().len() >= count {
                    return;
                }
                notified.await;
            }
        }

        fn in_flight(&self) -> usize {
            lock(&self.coalescer).in_flight
        }
    }

    impl Carrier for Gated {
        fn coalescer(&self) -> &Coalescer {
            &self.coalescer
        }

        async fn pipeline_of(
            &self,
            commands: Vec<Cmd>,
            counts: &[usize],
            _timeout: Duration,
        ) -> Result<Vec<Vec<Value>>> {
            let names = commands.iter().map(name).collect();
            self.handed.lock().unwrap().push(names);
            self.handed_one.notify_waiters();
            let mut open = self.open.subscribe();
            let _ = open.wait_for(|open| *open).await;
            Ok(counts
                .iter()
                .map(|&count| vec![Value::Okay; count])
                .collect())
        }
    }

    fn name(command: &Cmd) -> String {
        match command.args_iter().next() {
            Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).into_owned(),
            _ => String::new(),
        }
    }

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// A call as the calls layer makes it: alone, its pipeline handed over at once; queued,
    /// its replies awaited.
    fn call(carrier: &Arc<Gated>, command: &'static str) -> tokio::task::JoinHandle<Result<()>> {
        let turn = take_turn(carrier, TIMEOUT, || vec![redis::cmd(command)]);
        let carrier = carrier.clone();
        tokio::spawn(async move {
            match turn {
                Turn::Alone(slot) => {
                    carrier
                        .pipeline_of(vec![redis::cmd(command)], &[1], TIMEOUT)
                        .await?;
                    drop(slot);
                }
                Turn::Queued(answer) => {
                    queued_reply(answer, TIMEOUT).await?;
                }
            }
            Ok(())
        })
    }

    fn queued_cleanup(carrier: &Arc<Gated>) -> oneshot::Receiver<Result<Vec<Value>>> {
        match take_turn_behind(carrier, TIMEOUT, || vec![redis::cmd("CLEANUP")]) {
            Turn::Queued(answer) => answer,
            Turn::Alone(_) => panic!("a cleanup went alone past a pipeline in flight"),
        }
    }

    fn alone(carrier: &Arc<Gated>) -> Slot<Gated> {
        match take_turn(carrier, TIMEOUT, || vec![redis::cmd("EARLIER")]) {
            Turn::Alone(slot) => slot,
            Turn::Queued(_) => panic!("a free slot was not taken"),
        }
    }

    /// A cleanup queued while another slot's pipeline is taken but not yet handed over (its
    /// caller waits for a connection being replaced) must not be taken into a batch by a drain
    /// task started meanwhile: both would wait for the same new connection, and the cleanup
    /// could be written first, then the call it undoes.
    #[tokio::test]
    async fn a_cleanup_is_never_taken_past_a_pipeline_not_yet_written() {
        let carrier = Gated::new();
        let unwritten = alone(&carrier);
        let other = alone(&carrier);
        let cleanup = queued_cleanup(&carrier);
        // The other slot frees: the queue (the cleanup) passes to a drain task.
        drop(other);
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            carrier.handed().is_empty(),
            "the cleanup was handed over before an earlier pipeline: {:?}",
            carrier.handed()
        );
        // The earlier pipeline is done: now the cleanup goes.
        drop(unwritten);
        carrier.until_handed(1).await;
        assert_eq!(carrier.handed(), vec![vec!["CLEANUP".to_owned()]]);
        carrier.open.send_replace(true);
        assert!(queued_reply(cleanup, TIMEOUT).await.is_ok());
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert_eq!(carrier.in_flight(), 0);
    }

    /// A cleanup taken into a batch that waits for a connection: a call made meanwhile finds
    /// the queue empty and a slot free, yet must not be handed over before the cleanup's
    /// pipeline came back.
    #[tokio::test]
    async fn a_call_never_goes_alone_past_a_cleanup_in_a_batch_not_yet_written() {
        let carrier = Gated::new();
        let earlier = alone(&carrier);
        let cleanup = queued_cleanup(&carrier);
        // The earlier call is done: its slot passes to a task that takes the cleanup.
        drop(earlier);
        carrier.until_handed(1).await;

        let later = call(&carrier, "LATER");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            carrier.handed(),
            [vec!["CLEANUP".to_owned()]],
            "a later call was handed over while the cleanup was not written"
        );

        carrier.open.send_replace(true);
        queued_reply(cleanup, TIMEOUT).await.unwrap();
        later.await.unwrap().unwrap();
        assert_eq!(
            carrier.handed(),
            [vec!["CLEANUP".to_owned()], vec!["LATER".to_owned()]]
        );
        assert_eq!(carrier.in_flight(), 0);
    }

    /// With both slots taken, a cleanup waits for both to come back (either's pipeline may be
    /// unwritten), and a call queued after it never goes out before it: not in the drain task
    /// of the first slot to free, nor alone.
    #[tokio::test]
    async fn a_later_call_never_goes_out_before_a_cleanup_waiting_for_both_slots() {
        let carrier = Gated::new();
        let first = alone(&carrier);
        let second = alone(&carrier);
        let cleanup = queued_cleanup(&carrier);
        drop(first);
        let later = call(&carrier, "LATER");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            carrier.handed().is_empty(),
            "sent while a slot was in flight: {:?}",
            carrier.handed()
        );

        // The second slot frees: the cleanup goes, the later call in the same pipeline after it.
        drop(second);
        carrier.until_handed(1).await;
        assert_eq!(
            carrier.handed(),
            [vec!["CLEANUP".to_owned(), "LATER".to_owned()]]
        );
        carrier.open.send_replace(true);
        queued_reply(cleanup, TIMEOUT).await.unwrap();
        later.await.unwrap().unwrap();
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert_eq!(carrier.in_flight(), 0);
    }

    /// A cleanup that went alone holds the way until it is done: a call made meanwhile queues
    /// and goes out after it.
    #[tokio::test]
    async fn a_call_queues_behind_a_cleanup_sent_alone() {
        let carrier = Gated::new();
        let Turn::Alone(cleanup) = take_turn_behind(&carrier, TIMEOUT, Vec::new) else {
            panic!("nothing in flight, yet the cleanup was queued");
        };
        let later = call(&carrier, "LATER");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            carrier.handed().is_empty(),
            "a later call was handed over while the cleanup sent alone was not done"
        );
        carrier.open.send_replace(true);
        drop(cleanup);
        later.await.unwrap().unwrap();
        assert_eq!(carrier.handed(), [vec!["LATER".to_owned()]]);
        assert_eq!(carrier.in_flight(), 0);
    }

    /// Calls queued behind two pipelines in flight go out as soon as they fill a pipeline,
    /// without waiting for either to come back; fewer wait for a slot.
    #[tokio::test]
    async fn a_full_queue_goes_out_without_waiting_for_a_slot() {
        let carrier = Gated::new();
        let first = alone(&carrier);
        let second = alone(&carrier);
        let mut calls: Vec<_> = (1..FULL_PIPELINE)
            .map(|_| call(&carrier, "QUEUED"))
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            carrier.handed().is_empty(),
            "a queue short of a pipeline went out while both slots were taken"
        );
        calls.push(call(&carrier, "QUEUED"));
        tokio::time::timeout(Duration::from_secs(5), carrier.until_handed(1))
            .await
            .expect("a full queue waited for a slot");
        assert_eq!(carrier.handed(), [vec!["QUEUED".to_owned(); FULL_PIPELINE]]);
        assert_eq!(carrier.in_flight(), 3);

        carrier.open.send_replace(true);
        for call in calls {
            call.await.unwrap().unwrap();
        }
        drop((first, second));
        assert_eq!(carrier.in_flight(), 0);
    }

    /// A full queue holding a cleanup keeps to the barrier's rules: nothing goes out while
    /// either earlier pipeline may be unwritten.
    #[tokio::test]
    async fn a_full_queue_with_a_cleanup_waits_for_the_slots() {
        let carrier = Gated::new();
        let first = alone(&carrier);
        let second = alone(&carrier);
        let cleanup = queued_cleanup(&carrier);
        let calls: Vec<_> = (0..FULL_PIPELINE)
            .map(|_| call(&carrier, "LATER"))
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            carrier.handed().is_empty(),
            "a full queue went out past a cleanup: {:?}",
            carrier.handed()
        );
        drop((first, second));
        carrier.until_handed(1).await;
        let mut expected = vec!["CLEANUP".to_owned()];
        expected.extend(vec!["LATER".to_owned(); FULL_PIPELINE]);
        assert_eq!(carrier.handed(), [expected]);
        carrier.open.send_replace(true);
        queued_reply(cleanup, TIMEOUT).await.unwrap();
        for call in calls {
            call.await.unwrap().unwrap();
        }
    }

    /// Where one pipeline at a time may be in flight (a replica wait holds the connection), a
    /// full queue waits for it like any other.
    #[tokio::test]
    async fn one_at_a_time_keeps_a_full_queue_waiting() {
        let carrier = Gated::with(Coalescer::one_at_a_time());
        let only = alone(&carrier);
        let calls: Vec<_> = (0..FULL_PIPELINE * 2)
            .map(|_| call(&carrier, "QUEUED"))
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(carrier.handed().is_empty(), "a second pipeline went out");
        assert_eq!(carrier.in_flight(), 1);
        drop(only);
        carrier.open.send_replace(true);
        for call in calls {
            call.await.unwrap().unwrap();
        }
        assert_eq!(carrier.handed().len(), 1);
    }
}

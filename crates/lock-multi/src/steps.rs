//! One composite step's calls to its nodes, polled by the step itself.
//!
//! Every node call runs inside the step that issued it: no task of its own and no
//! registration, so a step costs what polling the node backends costs (a task per node call
//! cost RedLock cross-thread wake-ups on every call). A call must still never be dropped
//! before it ends (see [`crate::straggler`]), so one the step stops polling while it runs —
//! the step has its quorum, the call's deadline passed, or the step itself was dropped — is
//! registered with the composite's [`NodeCalls`] at that moment and handed to a task that
//! drives it to its end.
//!
//! Registering it then, not when it was issued, is enough: the calls that have to wait for it
//! are the same owner's later calls on the same lock and node, and those are issued only after
//! this step stopped polling it. The Locker sends one owner's steps on a name one at a time,
//! each once the previous one completed or was dropped, and a step's own later calls (the undo
//! of a failed attempt) come after it stopped waiting. A renewal is not ordered so, but it only
//! lengthens a lease the owner field holds and changes no count.
//!
//! A call that has to wait for earlier calls still running on its node ([`behind`]) is polled
//! here too: it waits, then sends. Its answer is waited for until the step's deadline, or half
//! a per-node timeout after it was sent when that is later, so the wait does not eat the
//! time its node has to answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::Stream;
use futures_util::future::{BoxFuture, join_all};
use futures_util::stream::FuturesUnordered;
use lock_core::{Error, Result};
use tokio::time::{Instant, Sleep};

use crate::straggler::{LateRequests, NodeCalls};

/// The node calls of one step of one owner on one lock; answers come back as they arrive.
pub(crate) struct NodeSteps<T: Send + 'static> {
    registry: Arc<NodeCalls>,
    name: Arc<str>,
    owner: Arc<str>,
    timeout: Duration,
    deadline: Instant,
    calls: FuturesUnordered<Call<T>>,
    /// Armed at the first wait, so a step whose answers are all in costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The nodes whose call was still running at its deadline, to be answered a timeout.
    timed_out: Vec<usize>,
}

/// When a call that waited for earlier calls was sent (see [`behind`]).
pub(crate) type SentAt = Arc<OnceLock<Instant>>;

/// One node's call.
struct Call<T> {
    node: usize,
    /// Set for a call behind earlier ones, once it is sent.
    sent: Option<SentAt>,
    future: BoxFuture<'static, Result<T>>,
}

impl<T> Future for Call<T> {
    type Output = (usize, Result<T>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = ready!(self.future.as_mut().poll(cx));
        Poll::Ready((self.node, answer))
    }
}

/// `call`, sent once the `earlier` calls on its node have ended; not sent at all (a timeout
/// error, as if it had been sent and not answered) when they are still running at
/// `wait_until`. Marks `sent` when it goes out.
pub(crate) fn behind<T: Send + 'static>(
    earlier: LateRequests,
    wait_until: Instant,
    sent: SentAt,
    call: BoxFuture<'static, Result<T>>,
) -> BoxFuture<'static, Result<T>> {
    let issued = Instant::now();
    Box::pin(async move {
        if !earlier.finished(wait_until).await {
            tracing::debug!(
                "not sent: an earlier call of this owner on this lock is still running on the node"
            );
            return Err(Error::Timeout {
                after: wait_until.saturating_duration_since(issued),
            });
        }
        let _ = sent.set(Instant::now());
        call.await
    })
}

impl<T: Send + 'static> NodeSteps<T> {
    /// The calls of a step issued now, each answered within `timeout` (a timeout error after).
    pub(crate) fn new(
        registry: Arc<NodeCalls>,
        name: Arc<str>,
        owner: Arc<str>,
        timeout: Duration,
    ) -> Self {
        Self {
            registry,
            name,
            owner,
            timeout,
            deadline: Instant::now() + timeout,
            calls: FuturesUnordered::new(),
            sleep: None,
            timed_out: Vec::new(),
        }
    }

    /// The lock this step is on.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The owner field this step is for.
    pub(crate) fn owner(&self) -> &Arc<str> {
        &self.owner
    }

    /// When this step's answers are due (a call sent late gets longer, see [`behind`]).
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Adds the call to `node`; `sent` when it is a call [`behind`] earlier ones.
    pub(crate) fn push(
        &mut self,
        node: usize,
        sent: Option<SentAt>,
        future: BoxFuture<'static, Result<T>>,
    ) {
        self.calls.push(Call { node, sent, future });
    }

    /// The next node's answer, [`Error::Timeout`] for a call still running at its deadline
    /// (which goes on in the background); `None` once every node has answered.
    pub(crate) async fn next(&mut self) -> Option<(usize, Result<T>)> {
        std::future::poll_fn(|cx| self.poll_answer(cx)).await
    }

    /// Every node's answer, in node order (`nodes` calls were pushed, one per node).
    pub(crate) async fn all(mut self, nodes: usize) -> Vec<Result<T>> {
        let mut answers: Vec<Option<Result<T>>> = (0..nodes).map(|_| None).collect();
        while let Some((node, answer)) = self.next().await {
            answers[node] = Some(answer);
        }
        let timeout = self.timeout;
        answers
            .into_iter()
            .map(|answer| answer.unwrap_or(Err(Error::Timeout { after: timeout })))
            .collect()
    }

    /// Ends the calls whose answers are already in, without waiting; the rest go on in the
    /// background when this is dropped. Saves registering and a task for a node that answered
    /// while the step was deciding.
    pub(crate) fn finish_ready(&mut self) {
        while let Some(Some(_)) = self.next().now_or_never() {}
    }

    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<Option<(usize, Result<T>)>> {
        loop {
            if let Some(node) = self.timed_out.pop() {
                let after = self.timeout;
                return Poll::Ready(Some((node, Err(Error::Timeout { after }))));
            }
            if let Poll::Ready(answer) = Pin::new(&mut self.calls).poll_next(cx) {
                return Poll::Ready(answer);
            }
            let deadline = self.deadline;
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            ready!(sleep.as_mut().poll(cx));
            // A deadline passed: the calls past their own are handed on and answered a
            // timeout; the timer is set again for the others (sent late, see `behind`).
            let now = Instant::now();
            let next = self
                .calls
                .iter()
                .map(|call| self.due(call))
                .filter(|due| *due > now)
                .min();
            self.timed_out = self.hand_over(|steps, call| steps.due(call) <= now);
            if let (Some(next), Some(sleep)) = (next, self.sleep.as_mut()) {
                sleep.as_mut().reset(next);
            }
        }
    }

    /// When the answer of `call` is due: the step's deadline, or half a timeout after a late
    /// send.
    fn due(&self, call: &Call<T>) -> Instant {
        match call.sent.as_ref().and_then(|sent| sent.get()) {
            Some(sent) => self.deadline.max(*sent + self.timeout / 2),
            None => self.deadline,
        }
    }

    /// Registers the calls still running that `which` picks and moves them to a task that
    /// drives them to their end; returns their nodes.
    fn hand_over(&mut self, which: impl Fn(&Self, &Call<T>) -> bool) -> Vec<usize> {
        if self.calls.is_empty() {
            return Vec::new();
        }
        let mut running = Vec::new();
        for call in std::mem::take(&mut self.calls) {
            if which(self, &call) {
                running.push(call);
            } else {
                self.calls.push(call);
            }
        }
        if running.is_empty() {
            return Vec::new();
        }
        let nodes = running.iter().map(|call| call.node).collect();
        let calls: Vec<_> = running
            .into_iter()
            .map(|call| {
                let entry = self.registry.register(&self.name, &self.owner, call.node);
                async move {
                    let _ = call.future.await;
                    // Ended: the calls after it may go.
                    drop(entry);
                }
            })
            .collect();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(join_all(calls));
            }
            // No runtime left to drive them (dropped outside one): they end here, and their
            // entries with them, so nothing waits for calls that cannot run.
            Err(_) => tracing::debug!(
                name = &*self.name,
                "node calls dropped outside a runtime; whatever they sent ends with its lease"
            ),
        }
        nodes
    }
}

impl<T: Send + 'static> Drop for NodeSteps<T> {
    fn drop(&mut self) {
        self.hand_over(|_, _| true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A step of owner `o` on lock `n`, its calls answered within `timeout`.
    fn step(registry: &Arc<NodeCalls>, timeout: Duration) -> NodeSteps<u32> {
        NodeSteps::new(
            Arc::clone(registry),
            Arc::from("n"),
            Arc::from("o"),
            timeout,
        )
    }

    /// The calls of `o` on `n` still running on `node`.
    fn late(registry: &NodeCalls, node: usize) -> Option<LateRequests> {
        registry.late([("n", "o")], node)
    }

    /// Adds `call` to node 0 of `steps`, behind the call of `o` on `n` still running there.
    fn push_behind(
        registry: &NodeCalls,
        steps: &mut NodeSteps<u32>,
        call: BoxFuture<'static, Result<u32>>,
    ) {
        let earlier = late(registry, 0).expect("the first call runs");
        let sent = SentAt::default();
        let call = behind(earlier, steps.deadline(), Arc::clone(&sent), call);
        steps.push(0, Some(sent), call);
    }

    /// A call that ends when `go` fires, then notes that it ran to its end.
    fn held_call(
        go: tokio::sync::oneshot::Receiver<()>,
        ended: &Arc<AtomicBool>,
    ) -> BoxFuture<'static, Result<u32>> {
        let ended = Arc::clone(ended);
        Box::pin(async move {
            let _ = go.await;
            ended.store(true, Ordering::SeqCst);
            Ok(7)
        })
    }

    #[tokio::test]
    async fn a_call_answered_in_the_step_is_never_registered() {
        let registry = Arc::new(NodeCalls::default());
        let mut steps = step(&registry, Duration::from_secs(1));
        steps.push(0, None, Box::pin(async { Ok(1) }));
        steps.push(1, None, Box::pin(async { Ok(2) }));
        let answers = steps.all(2).await;
        assert_eq!(
            answers.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            [1, 2]
        );
        assert!(!registry.any());
    }

    #[tokio::test]
    async fn a_step_dropped_while_a_call_runs_hands_it_on_and_later_calls_wait_for_it() {
        let registry = Arc::new(NodeCalls::default());
        let (go, wait) = tokio::sync::oneshot::channel();
        let ended = Arc::new(AtomicBool::new(false));
        let mut steps = step(&registry, Duration::from_secs(1));
        steps.push(0, None, Box::pin(async { Ok(1) }));
        steps.push(1, None, held_call(wait, &ended));
        assert_eq!(steps.next().await.map(|(node, _)| node), Some(0));
        drop(steps);
        // Registered from the hand-over on, for this owner, name and node only.
        assert!(late(&registry, 1).is_some());
        assert!(late(&registry, 0).is_none());
        assert!(registry.late([("n", "other")], 1).is_none());
        go.send(()).unwrap();
        let late = late(&registry, 1).unwrap();
        assert!(late.finished(Instant::now() + Duration::from_secs(1)).await);
        assert!(ended.load(Ordering::SeqCst), "the call ran to its end");
        tokio::task::yield_now().await;
        assert!(!registry.any(), "forgotten once it ended");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_the_deadline_answers_a_timeout_and_goes_on() {
        let registry = Arc::new(NodeCalls::default());
        let (go, wait) = tokio::sync::oneshot::channel();
        let ended = Arc::new(AtomicBool::new(false));
        let mut steps = step(&registry, Duration::from_millis(50));
        steps.push(0, None, held_call(wait, &ended));
        let (node, answer) = steps.next().await.unwrap();
        assert_eq!(node, 0);
        assert!(matches!(answer, Err(Error::Timeout { .. })), "{answer:?}");
        assert!(steps.next().await.is_none());
        assert!(late(&registry, 0).is_some(), "still running");
        go.send(()).unwrap();
        let late = late(&registry, 0).unwrap();
        assert!(late.finished(Instant::now() + Duration::from_secs(1)).await);
        assert!(ended.load(Ordering::SeqCst));
    }

    /// A step whose call on node 0 is still running, handed on: the registry then holds it.
    async fn handed_on_call(
        registry: &Arc<NodeCalls>,
        ended: &Arc<AtomicBool>,
    ) -> tokio::sync::oneshot::Sender<()> {
        let (go, wait) = tokio::sync::oneshot::channel();
        let mut first = step(registry, Duration::from_secs(10));
        first.push(0, None, held_call(wait, ended));
        drop(first);
        go
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_sent_late_behind_an_earlier_one_gets_half_a_timeout_from_its_send() {
        let registry = Arc::new(NodeCalls::default());
        let ended = Arc::new(AtomicBool::new(false));
        let go = handed_on_call(&registry, &ended).await;
        let timeout = Duration::from_millis(100);
        let mut steps = step(&registry, timeout);
        let call = Box::pin(async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok(9)
        });
        push_behind(&registry, &mut steps, call);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(90)).await;
            go.send(()).unwrap();
        });
        // Sent at 90 ms, answered at 120 ms: past the step's deadline (100 ms), within half a
        // timeout of its send (140 ms).
        let (node, answer) = steps.next().await.unwrap();
        assert_eq!((node, answer.unwrap()), (0, 9));
        assert!(ended.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_whose_earlier_one_outlives_its_wait_is_not_sent() {
        let registry = Arc::new(NodeCalls::default());
        let ended = Arc::new(AtomicBool::new(false));
        let _go = handed_on_call(&registry, &ended).await;
        let mut steps = step(&registry, Duration::from_millis(100));
        let sent_flag = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&sent_flag);
        let call = Box::pin(async move {
            flag.store(true, Ordering::SeqCst);
            Ok(9)
        });
        push_behind(&registry, &mut steps, call);
        let (_, answer) = steps.next().await.unwrap();
        assert!(matches!(answer, Err(Error::Timeout { .. })), "{answer:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!sent_flag.load(Ordering::SeqCst), "never sent");
        assert!(!ended.load(Ordering::SeqCst), "the earlier call still runs");
    }
}

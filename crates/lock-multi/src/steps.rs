//! One composite step's calls to its nodes, polled by the step itself.
//!
//! A node call with nothing to wait for runs inside the step that issued it: no task of its
//! own and no registration, so a step costs what polling the node backends costs (a task per
//! node call cost RedLock a cross-thread wake-up per node and call). A call must still never be
//! dropped before it ends (see [`crate::straggler`]), so one the step stops polling while it
//! runs — the step has its quorum, the per-node timeout passed, or the step itself was dropped
//! — is registered with the composite's [`NodeCalls`] at that moment and handed to a task that
//! drives it to its end.
//!
//! Registering it then, not when it was issued, is enough: the calls that have to wait for it
//! are the same owner's later calls on the same lock and node, and those are issued only after
//! this step stopped polling it. The Locker sends one owner's steps on a name one at a time,
//! each once the previous one completed or was dropped, and a step's own later calls (the undo
//! of a failed attempt) come after it stopped waiting. A renewal is not ordered so, but it only
//! lengthens a lease the owner field holds and changes no count.
//!
//! A call that has to wait for earlier calls on its node is issued in a task of its own,
//! registered at once ([`Composite::on_node`](crate::composite)); the step only polls it for
//! its answer, and dropping that leaves it running.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::Stream;
use futures_util::future::{BoxFuture, join_all};
use futures_util::stream::FuturesUnordered;
use lock_core::{Error, Result};
use tokio::time::{Instant, Sleep};

use crate::straggler::NodeCalls;

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
    /// The nodes whose call was still running at the deadline, to be answered a timeout.
    timed_out: Vec<usize>,
}

/// One node's call, and whether this step is what drives it.
struct Call<T> {
    node: usize,
    /// Polled only here (else: running in a task of its own, and this is its answer).
    inline: bool,
    future: BoxFuture<'static, Result<T>>,
}

impl<T> Future for Call<T> {
    type Output = (usize, Result<T>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = ready!(self.future.as_mut().poll(cx));
        Poll::Ready((self.node, answer))
    }
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

    /// The per-node timeout of this step.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Adds a call to `node` that this step drives: it must have no earlier call to wait for.
    pub(crate) fn push_inline(&mut self, node: usize, future: BoxFuture<'static, Result<T>>) {
        self.calls.push(Call {
            node,
            inline: true,
            future,
        });
    }

    /// Adds the answer of a call running in a task of its own, which keeps its own deadline.
    pub(crate) fn push_detached(&mut self, node: usize, answer: BoxFuture<'static, Result<T>>) {
        self.calls.push(Call {
            node,
            inline: false,
            future: answer,
        });
    }

    /// The next node's answer, [`Error::Timeout`] for a call of this step still running at the
    /// deadline (which goes on in the background); `None` once every node has answered.
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
            if !self.calls.iter().any(|call| call.inline) {
                // Only calls with their own deadlines are left.
                return Poll::Pending;
            }
            let deadline = self.deadline;
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            ready!(sleep.as_mut().poll(cx));
            self.timed_out = self.hand_over();
        }
    }

    /// Registers the calls this step drives that are still running and moves them to a task
    /// that drives them to their end; returns their nodes.
    fn hand_over(&mut self) -> Vec<usize> {
        if !self.calls.iter().any(|call| call.inline) {
            return Vec::new();
        }
        let mut running = Vec::new();
        for call in std::mem::take(&mut self.calls) {
            if call.inline {
                running.push(call);
            } else {
                self.calls.push(call);
            }
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
        self.hand_over();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

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
        let mut steps = NodeSteps::new(
            Arc::clone(&registry),
            Arc::from("n"),
            Arc::from("o"),
            Duration::from_secs(1),
        );
        steps.push_inline(0, Box::pin(async { Ok(1) }));
        steps.push_inline(1, Box::pin(async { Ok(2) }));
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
        let mut steps = NodeSteps::new(
            Arc::clone(&registry),
            Arc::from("n"),
            Arc::from("o"),
            Duration::from_secs(1),
        );
        steps.push_inline(0, Box::pin(async { Ok(1) }));
        steps.push_inline(1, held_call(wait, &ended));
        assert_eq!(steps.next().await.map(|(node, _)| node), Some(0));
        drop(steps);
        // Registered from the hand-over on, for this owner, name and node only.
        assert!(registry.earlier("n", "o", 1).is_some());
        assert!(registry.earlier("n", "o", 0).is_none());
        assert!(registry.earlier("n", "other", 1).is_none());
        go.send(()).unwrap();
        let late = registry.earlier("n", "o", 1).unwrap();
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
        let mut steps = NodeSteps::new(
            Arc::clone(&registry),
            Arc::from("n"),
            Arc::from("o"),
            Duration::from_millis(50),
        );
        steps.push_inline(0, held_call(wait, &ended));
        let (node, answer) = steps.next().await.unwrap();
        assert_eq!(node, 0);
        assert!(matches!(answer, Err(Error::Timeout { .. })), "{answer:?}");
        assert!(steps.next().await.is_none());
        assert!(registry.earlier("n", "o", 0).is_some(), "still running");
        go.send(()).unwrap();
        let late = registry.earlier("n", "o", 0).unwrap();
        assert!(late.finished(Instant::now() + Duration::from_secs(1)).await);
        assert!(ended.load(Ordering::SeqCst));
    }
}

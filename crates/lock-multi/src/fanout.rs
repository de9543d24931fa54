//! Sending one call to every node at once, each with its own timeout.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use lock_core::{DynLockBackend, Error, Result, error::NodeFailure};

/// Runs `call` on every node concurrently; each call gets `timeout` on its own, so a slow or
/// dead node costs one timeout, never the sum. Results come back in node order.
pub(crate) async fn on_all<'a, T, F, Fut>(
    nodes: &'a [Arc<dyn DynLockBackend>],
    timeout: Duration,
    call: F,
) -> Vec<Result<T>>
where
    F: Fn(&'a dyn DynLockBackend) -> Fut,
    Fut: Future<Output = Result<T>> + 'a,
{
    join_all(nodes.iter().map(|node| {
        let call = call(node.as_ref());
        async move {
            tokio::time::timeout(timeout, call)
                .await
                .unwrap_or(Err(Error::Timeout { after: timeout }))
        }
    }))
    .await
}

/// Splits results into the successes (with their node index) and the failures.
pub(crate) fn partition<T>(results: Vec<Result<T>>) -> (Vec<(usize, T)>, Vec<NodeFailure>) {
    let mut answers = Vec::with_capacity(results.len());
    let mut failures = Vec::new();
    for (node, result) in results.into_iter().enumerate() {
        match result {
            Ok(answer) => answers.push((node, answer)),
            Err(error) => failures.push(NodeFailure::new(node, error)),
        }
    }
    (answers, failures)
}

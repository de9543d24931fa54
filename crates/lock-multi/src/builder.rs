//! The builder: [`CompositeBuilder`] gathers a composite's settings (its nodes, quorum policy,
//! per-node timeout and retry delay), and [`CompositeBuilder::build`] checks them before
//! anything is sent to a node. [`Composite::new`], [`Composite::builder`] and
//! [`Composite::builder_with`] are the ways in.
//!
//! Apart from the engine ([`crate::composite`]) because it runs once, before any I/O, and none
//! of it is used while locks are taken: the engine receives settings already checked.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{DynLockBackend, Error, Result};

use crate::composite::{Composite, NodeTimeouts};
use crate::quorum::Quorum;

/// The default per-node timeout, as a fraction of the lease (redsync uses the same 5 %).
pub const DEFAULT_NODE_TIMEOUT_RATIO: f64 = 0.05;
/// The default bounds of the random delay before retrying a split or failed attempt.
pub const DEFAULT_RETRY_DELAY: (Duration, Duration) =
    (Duration::from_millis(5), Duration::from_millis(25));

/// Configures a [`Composite`] before it is built.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use lock_core::{DynLockBackend, MemoryBackend};
/// use lock_multi::MultiLock;
///
/// let nodes: Vec<Arc<dyn DynLockBackend>> =
///     (0..3).map(|_| Arc::new(MemoryBackend::new()) as _).collect();
/// let multi = MultiLock::builder(nodes)
///     .node_timeout_ratio(0.02)
///     .retry_delay(Duration::from_millis(1), Duration::from_millis(10))
///     .build()?;
/// assert_eq!(multi.required(), 3);
/// # Ok::<(), lock_core::Error>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct CompositeBuilder<P: Quorum> {
    nodes: Vec<Arc<dyn DynLockBackend>>,
    policy: P,
    timeouts: NodeTimeouts,
    retry_delay: (Duration, Duration),
}

impl<P: Quorum> std::fmt::Debug for CompositeBuilder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositeBuilder")
            .field("policy", &self.policy.name())
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl<P: Quorum> CompositeBuilder<P> {
    /// Each node call may take at most this fraction of the lease (default 0.05, i.e. 1.5 s of a
    /// 30 s lease; never under 2 ms). Must be in `(0, 1]`.
    pub fn node_timeout_ratio(mut self, ratio: f64) -> Self {
        self.timeouts.ratio = ratio;
        self
    }

    /// Each node call may take at most this long, whatever the lease (overrides the ratio).
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.fixed = Some(timeout);
        self
    }

    /// After a split or failed attempt, wait a random delay between `min` and `max` before the
    /// next one (default 5–25 ms), so competing clients do not collide again in lockstep.
    pub fn retry_delay(mut self, min: Duration, max: Duration) -> Self {
        self.retry_delay = (min, max);
        self
    }

    /// Checks the configuration and builds the composite. Nothing is sent to the nodes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an empty node list, the same backend listed twice, a timeout
    /// ratio outside `(0, 1]`, a zero node timeout, or a retry delay range with `min > max`, a
    /// zero `max`, or `max` over one minute.
    pub fn build(self) -> Result<Composite<P>> {
        let invalid = |reason: String| Err(Error::InvalidConfig { reason });
        if self.nodes.is_empty() {
            return invalid(format!(
                "a {} lock needs at least one node",
                self.policy.name()
            ));
        }
        for (i, a) in self.nodes.iter().enumerate() {
            if let Some(j) = self.nodes[i + 1..].iter().position(|b| Arc::ptr_eq(a, b)) {
                return invalid(format!(
                    "nodes {i} and {} are the same backend; every node must be independent",
                    i + 1 + j
                ));
            }
        }
        let ratio = self.timeouts.ratio;
        if !(ratio > 0.0 && ratio <= 1.0) {
            return invalid(format!("node timeout ratio {ratio} is not in (0, 1]"));
        }
        if self.timeouts.fixed == Some(Duration::ZERO) {
            return invalid("the node timeout is zero".to_owned());
        }
        let (min, max) = self.retry_delay;
        if min > max || max.is_zero() || max > Duration::from_secs(60) {
            return invalid(format!(
                "retry delay range {min:?}..={max:?} must have min <= max, 0 < max <= 60 s"
            ));
        }
        let required = self.policy.required(self.nodes.len());
        assert!(
            (1..=self.nodes.len()).contains(&required),
            "quorum policy {} asked for {required} of {} nodes",
            self.policy.name(),
            self.nodes.len()
        );
        Ok(Composite::from_checked(
            self.nodes,
            self.policy,
            self.timeouts,
            self.retry_delay,
        ))
    }
}

impl<P: Quorum + Default> Composite<P> {
    /// A composite over `nodes` with the default settings.
    ///
    /// # Errors
    ///
    /// As [`CompositeBuilder::build`].
    pub fn new(nodes: Vec<Arc<dyn DynLockBackend>>) -> Result<Self> {
        Self::builder(nodes).build()
    }

    /// A builder for a composite over `nodes`.
    pub fn builder(nodes: Vec<Arc<dyn DynLockBackend>>) -> CompositeBuilder<P> {
        Self::builder_with(nodes, P::default())
    }
}

impl<P: Quorum> Composite<P> {
    /// A builder with an explicit policy value.
    pub fn builder_with(nodes: Vec<Arc<dyn DynLockBackend>>, policy: P) -> CompositeBuilder<P> {
        CompositeBuilder {
            nodes,
            policy,
            timeouts: NodeTimeouts {
                ratio: DEFAULT_NODE_TIMEOUT_RATIO,
                fixed: None,
            },
            retry_delay: DEFAULT_RETRY_DELAY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MultiLock;
    use crate::composite::tests::memory_nodes;
    use lock_core::MemoryBackend;

    #[test]
    fn bad_configurations_are_refused() {
        let invalid =
            |result: Result<MultiLock>| matches!(result, Err(Error::InvalidConfig { .. }));
        assert!(invalid(MultiLock::new(Vec::new())));
        let node: Arc<dyn DynLockBackend> = Arc::new(MemoryBackend::new());
        assert!(invalid(MultiLock::new(vec![node.clone(), node])));
        let (_, nodes) = memory_nodes(2);
        for ratio in [0.0, -1.0, 1.5, f64::NAN] {
            let built = MultiLock::builder(nodes.clone())
                .node_timeout_ratio(ratio)
                .build();
            assert!(invalid(built), "ratio {ratio}");
        }
        let built = MultiLock::builder(nodes.clone())
            .node_timeout(Duration::ZERO)
            .build();
        assert!(invalid(built));
        let built = MultiLock::builder(nodes)
            .retry_delay(Duration::from_millis(5), Duration::from_millis(1))
            .build();
        assert!(invalid(built));
    }
}

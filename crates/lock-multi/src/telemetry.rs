//! The composites' own metric (with the `metrics` feature), beside lock-core's
//! ([`lock_core::telemetry`]); names and labels in `docs/observability.md`. A leaf.

/// Each node's answer to each acquire attempt of a composite; labels `node` (its position in
/// the composite, `0`…) and `vote` (`granted`, `held`, `failed`).
pub const QUORUM_VOTES_TOTAL: &str = "distlock_quorum_votes_total";

/// Node `node` answered an acquire attempt with `vote`.
pub(crate) fn vote(node: usize, vote: &'static str) {
    let _ = (node, vote);
    #[cfg(feature = "metrics")]
    metrics::counter!(QUORUM_VOTES_TOTAL, "node" => node.to_string(), "vote" => vote).increment(1);
}

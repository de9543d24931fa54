//! How many nodes a composite needs, and how much clock drift it allows for.

use std::time::Duration;

/// The agreement rule of a composite lock.
///
/// A policy says how many of `n` nodes must grant, renew or release for the composite to count
/// the step as done, and how much of each lease it sets aside for clock drift between the
/// nodes. [`AllNodes`] is MultiLock's policy; [`Majority`](crate::Majority) is RedLock's (a
/// majority, with drift).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use lock_multi::{AllNodes, Quorum};
///
/// assert_eq!(AllNodes.required(3), 3);
/// assert_eq!(AllNodes.clock_drift(Duration::from_secs(30)), Duration::ZERO);
/// ```
pub trait Quorum: Send + Sync + 'static {
    /// A short name for logs and errors (`"multi"`, `"redlock"`).
    fn name(&self) -> &'static str;

    /// How many of `nodes` nodes must agree (at least 1, at most `nodes`).
    fn required(&self, nodes: usize) -> usize;

    /// The part of a lease of this length the holder must not count on.
    fn clock_drift(&self, lease: Duration) -> Duration;
}

/// MultiLock's policy: every node must agree; no drift allowance (the lease starts on every node
/// no earlier than the attempt was sent, as with a single node).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllNodes;

impl Quorum for AllNodes {
    fn name(&self) -> &'static str {
        "multi"
    }

    fn required(&self, nodes: usize) -> usize {
        nodes
    }

    fn clock_drift(&self, _lease: Duration) -> Duration {
        Duration::ZERO
    }
}

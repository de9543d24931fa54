//! MultiLock and RedLock for distlock: one lock over N independent nodes, held only when
//! **every** node grants it ([`MultiLock`], policy [`AllNodes`]) or while a **majority** grants
//! it within the validity time ([`RedLock`], policy [`Majority`]; see the [`redlock`] module for
//! the algorithm), and the quorum engine both share.
//!
//! A [`Composite`] is itself a [`lock_core::LockBackend`], built over any mix of backends
//! (`Arc<dyn DynLockBackend>`: Redis nodes, in-memory stores, your own), so the guard, the
//! watchdog, the waiter, [`lock_core::LockGuard::lost`] and the conformance suite work on it
//! unchanged. Every step fans out to all nodes at once, each call with its own timeout (5 % of
//! the lease by default), so a slow or dead node costs one per-node timeout, never the sum.
//!
//! The timeout bounds the decision, not the call: a call to a node is never cancelled once
//! issued (not by the timeout, not when the caller drops the step), since it may reach the node
//! all the same. It runs on in a task of its own, and the owner's next call on that lock to
//! that node comes after it: an acquire or a release waits for it up to one per-node timeout
//! and is not sent there otherwise (that node counts as timed out), and a cleanup is sent once
//! it ends. So one owner's calls reach each node in the order they were issued.
//!
//! - **acquire**: granted when the policy's number of nodes grant *and* the attempt took less
//!   than the lease (minus the policy's clock-drift allowance). Otherwise every node, the
//!   refusing and failing ones included, is told to drop what this attempt may have taken, and
//!   the waiter retries after a random delay (a split) or on a release notification (a clear
//!   holder elsewhere). When only node failures stood in the way, the error says which nodes
//!   failed and why ([`lock_core::Error::Quorum`]); waits with a deadline retry it until then.
//!   When that undo has not ended on a node that granted the attempt (still on its way, or
//!   failed), the attempt fails with an ambiguous [`lock_core::Error::ConnectionLost`] instead,
//!   so the [`lock_core::Locker`] sets the owner's count on every node again (behind that
//!   undo) or owes it before the owner's next call on the lock.
//! - **renew** (watchdog): a lease counts as renewed when enough nodes renew it; it is lost
//!   when too many say it is not ours, or when the validity deadline passes without enough
//!   renewals.
//! - **release**: sent to every node. When some nodes could not be reached (or did not take
//!   the call in time), the outcome is never one the owner's count takes as final:
//!   [`lock_core::ReleaseOutcome::PartlyReleased`] when enough nodes gave the hold back (the
//!   lock is free, or, for a reentrant hold, still held by the owner's other holds), otherwise
//!   a [`lock_core::Error::Quorum`] error. After either, the Locker sets the owner's count on
//!   every node again with `abandon`, which reaches each failed node after the release still
//!   running there, and fails (leaving a debt) while a node cannot confirm it.
//! - **waiting**: one subscription per name per node; a release on any node wakes a local waiter,
//!   which retries the whole attempt, its sleep capped by the nodes' TTLs.
//!
//! See `docs/multi-node.md` in the repository for the guarantees and when to use which lock.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use lock_core::{DynLockBackend, Locker, MemoryBackend};
//! use lock_multi::MultiLock;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::Error> {
//! let nodes: Vec<Arc<dyn DynLockBackend>> =
//!     (0..3).map(|_| Arc::new(MemoryBackend::new()) as _).collect();
//! let locker = Locker::new(MultiLock::new(nodes)?);
//! let guard = locker.lock("payouts").await?;
//! assert_eq!(guard.hold_count(), 1);
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

// On docs.rs (`--cfg docsrs`, nightly) every item that needs a cargo feature gets a badge naming
// it; `doc_cfg` adds them from the `#[cfg]`s alone (here the `metrics` items). Other builds never
// see the nightly feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod composite;
mod fanout;
mod quorum;
pub mod redlock;
mod steps;
mod straggler;
pub mod telemetry;
mod watch;

pub use builder::{CompositeBuilder, DEFAULT_NODE_TIMEOUT_RATIO, DEFAULT_RETRY_DELAY};
pub use composite::{Composite, MIN_NODE_TIMEOUT};
pub use quorum::{AllNodes, Quorum};
pub use redlock::{Majority, RedLock};

/// A lock held only when every node grants it.
pub type MultiLock = Composite<AllNodes>;

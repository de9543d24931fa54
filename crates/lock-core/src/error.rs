//! The one error type shared by every backend and by the lock API.

use std::time::Duration;

/// A convenient alias for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// "The lock is held by someone else" is **not** an error: [`crate::Locker::try_lock`] returns
/// `Ok(None)` for it, and waiting calls keep waiting. Errors are reserved for bad input, a lost lease
/// and failures of the backend; a wait that ends without the lock is `Ok(None)` from
/// [`crate::Locker::lock_with`].
///
/// Use [`Error::is_retryable`] to decide whether trying the same call again can help.
///
/// # Example
///
/// ```
/// use lock_core::Error;
///
/// let err = Error::Timeout { after: std::time::Duration::from_millis(50) };
/// assert!(err.is_retryable());
/// let err = Error::InvalidName { reason: "the lock name is empty" };
/// assert!(!err.is_retryable());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name was rejected before anything was sent.
    #[error("invalid lock name: {reason}")]
    InvalidName {
        /// Why the name was rejected.
        reason: &'static str,
    },
    /// A lease, wait time or other option was rejected before anything was sent.
    #[error("invalid lock options: {reason}")]
    InvalidOptions {
        /// Why the options were rejected.
        reason: String,
    },
    /// The backend configuration (URL, credentials, TLS...) is unusable. Never retryable.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// Why the configuration was rejected.
        reason: String,
    },
    /// The owner already holds this lock and the backend's locks are not reentrant
    /// ([`crate::LockBackend::reentrant`]); raised before anything was sent, instead of waiting
    /// for its own release.
    #[error("the lock {name:?} is not reentrant and this owner already holds it")]
    NotReentrant {
        /// The lock name.
        name: String,
    },
    /// The lease is no longer ours: it expired or the key was removed behind our back.
    #[error("the lease on the lock is lost")]
    LeaseLost,
    /// [`crate::Locker::with_lock`]: the lock was held by someone else for the whole wait of
    /// its options. Retryable.
    #[error("the lock {name:?} was not acquired within the wait")]
    NotAcquired {
        /// The lock's name.
        name: String,
    },
    /// One call to the backend did not answer within its command timeout. The call may or may
    /// not have taken effect on the server.
    #[error("backend call timed out after {after:?}")]
    Timeout {
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The connection to the backend broke or could not be made.
    #[error("connection to the backend lost: {0}")]
    ConnectionLost(String),
    /// The key exists with a type that is not a lock (Redis `WRONGTYPE`).
    #[error("the key holds a value that is not a lock: {0}")]
    WrongType(String),
    /// The node is a read-only replica (Redis `READONLY`). Retryable: a failover may fix it.
    #[error("the node is read-only: {0}")]
    ReadOnly(String),
    /// Authentication or authorization failed (Redis `NOPERM`, `WRONGPASS`, `NOAUTH`).
    #[error("not permitted: {0}")]
    NotPermitted(String),
    /// The server is out of memory and refuses writes (Redis `OOM`).
    #[error("the server is out of memory: {0}")]
    OutOfMemory(String),
    /// The server is loading, busy running a script, or otherwise temporarily unable to answer.
    #[error("the server is temporarily unavailable: {0}")]
    Unavailable(String),
    /// Too few replicas acknowledged a grant in time (a backend asked to wait for replicas,
    /// e.g. `lock_redis::ReplicaAck`, and to fail when they fall short). The grant was given
    /// back before this error was returned. Retryable: replicas catch up or reconnect.
    #[error("only {acknowledged} of the {required} replicas asked for acknowledged the write")]
    NotReplicated {
        /// How many replicas acknowledged the write within the wait.
        acknowledged: u32,
        /// How many were asked for.
        required: u32,
    },
    /// The server answered something this library does not understand.
    #[error("unexpected reply from the backend: {0}")]
    Protocol(String),
    /// Any other backend failure.
    #[error("backend error: {0}")]
    Backend(String),
    /// A composite backend (MultiLock, RedLock) did not get enough nodes to agree; says which
    /// nodes failed and why.
    #[error("{0}")]
    Quorum(QuorumError),
}

/// Why a composite call did not reach the number of nodes it needs.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use lock_core::error::{Error, NodeFailure, QuorumError};
///
/// let failures = vec![
///     NodeFailure::new(1, Error::Timeout { after: Duration::from_millis(50) }),
///     NodeFailure::new(2, Error::ConnectionLost("refused".into())),
/// ];
/// let error = Error::Quorum(QuorumError::new("acquire", 1, 2, 3, failures));
/// assert!(error.is_retryable());
/// assert!(error.to_string().contains("1 of 3 nodes"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct QuorumError {
    /// The call that failed: `acquire`, `release`, `renew`, `abandon`, `force_release`,
    /// `inspect`, `watch_releases`.
    pub operation: &'static str,
    /// How many nodes answered as needed (granted the lock, released it, ...).
    pub granted: usize,
    /// How many nodes had to.
    pub required: usize,
    /// How many nodes there are.
    pub nodes: usize,
    /// The nodes that failed (by index in the node list) and their errors.
    pub failures: Vec<NodeFailure>,
}

impl std::fmt::Display for QuorumError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} of {} nodes succeeded, {} required",
            self.operation, self.granted, self.nodes, self.required
        )?;
        for failure in &self.failures {
            write!(f, "; node {}: {}", failure.node, failure.error)?;
        }
        Ok(())
    }
}

/// One node's failure inside a [`QuorumError`].
#[derive(Debug)]
#[non_exhaustive]
pub struct NodeFailure {
    /// The node's index in the composite's node list.
    pub node: usize,
    /// What went wrong there.
    pub error: Error,
}

impl QuorumError {
    /// A quorum error for `operation`.
    #[must_use]
    pub fn new(
        operation: &'static str,
        granted: usize,
        required: usize,
        nodes: usize,
        failures: Vec<NodeFailure>,
    ) -> Self {
        QuorumError {
            operation,
            granted,
            required,
            nodes,
            failures,
        }
    }
}

impl NodeFailure {
    /// The failure of node `node`.
    #[must_use]
    pub fn new(node: usize, error: Error) -> Self {
        NodeFailure { node, error }
    }
}

impl Error {
    /// Whether repeating the same call later may succeed.
    ///
    /// Bad input, bad configuration, permissions, wrong key types and a lost lease are final;
    /// timeouts, broken connections, read-only replicas, out-of-memory and busy servers may pass.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Timeout { .. }
            | Error::ConnectionLost(_)
            | Error::ReadOnly(_)
            | Error::OutOfMemory(_)
            | Error::Unavailable(_)
            | Error::NotAcquired { .. }
            | Error::NotReplicated { .. } => true,
            // Retrying can help only if every failed node may recover.
            Error::Quorum(quorum) => quorum
                .failures
                .iter()
                .all(|failure| failure.error.is_retryable()),
            _ => false,
        }
    }

    /// Whether the error was raised before anything was sent to the backend.
    #[must_use]
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            Error::InvalidName { .. }
                | Error::InvalidOptions { .. }
                | Error::InvalidConfig { .. }
                | Error::NotReentrant { .. }
        )
    }

    /// Whether the outcome of the call on the server is unknown (it may have been applied).
    ///
    /// A [`Error::Quorum`] is not: the composite has already undone what it may have applied.
    #[must_use]
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, Error::Timeout { .. } | Error::ConnectionLost(_))
    }

    pub(crate) fn invalid_options(reason: impl Into<String>) -> Self {
        Error::InvalidOptions {
            reason: reason.into(),
        }
    }
}

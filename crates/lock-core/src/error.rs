//! The one error type shared by every backend and by the lock API.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

/// A convenient alias for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// "The lock is held by someone else" is `Ok(None)` from [`crate::Locker::try_lock`], more
/// waiting from [`crate::Locker::lock`], and [`Error::NotAcquired`] (the only error that means
/// it) when the wait of [`crate::Locker::lock_with`] or [`crate::Locker::with_lock`] ends
/// without the lock. Other errors are bad input, a lost lease and failures of the backend.
///
/// Use [`Error::is_retryable`] to decide whether trying the same call again can help.
///
/// Backend failures carry a [`Cause`]: the backend's own words, and the backend's error itself
/// (a `redis::RedisError`, say, and its I/O error below it) as [`std::error::Error::source`],
/// so an error reporter can walk the whole chain and a caller can downcast it. The message
/// keeps the backend's words too, so a plain `{}` (a log line) says everything; a reporter that
/// prints the whole chain shows them once more for the source.
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
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The lock name was rejected before anything was sent.
    InvalidName {
        /// Why the name was rejected.
        reason: &'static str,
    },
    /// A lease, wait time or other option was rejected before anything was sent.
    InvalidOptions {
        /// Why the options were rejected.
        reason: String,
    },
    /// The backend configuration (URL, credentials, TLS...) is unusable. Never retryable.
    InvalidConfig {
        /// Why the configuration was rejected.
        reason: String,
    },
    /// The owner already holds this lock and the backend's locks are not reentrant
    /// ([`crate::LockBackend::reentrant`]); raised before anything was sent, instead of waiting
    /// for its own release.
    NotReentrant {
        /// The lock name.
        name: String,
    },
    /// A write lock was asked for by an owner that holds the read lock of the same name (see
    /// [`crate::ReadWriteBackend`]): it would wait for its own read lock, so the store refuses
    /// it at once. Release the read lock first. Not retryable.
    UpgradeRefused {
        /// The lock name.
        name: String,
    },
    /// The lease is no longer ours: it expired or the key was removed behind our back.
    LeaseLost,
    /// [`crate::Locker::lock_with`] / [`crate::Locker::with_lock`]: the wait of the options (or
    /// their single attempt, with `no_wait`) ended with the lock held by someone else.
    /// Retryable.
    NotAcquired {
        /// The lock's name.
        name: String,
    },
    /// One call to the backend did not answer within its command timeout. The call may or may
    /// not have taken effect on the server.
    Timeout {
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The connection to the backend broke or could not be made.
    ConnectionLost(Cause),
    /// The key exists with a type that is not a lock (Redis `WRONGTYPE`).
    WrongType(Cause),
    /// The node is a read-only replica (Redis `READONLY`). Retryable: a failover may fix it.
    ReadOnly(Cause),
    /// Authentication or authorization failed (Redis `NOPERM`, `WRONGPASS`, `NOAUTH`).
    NotPermitted(Cause),
    /// The server is out of memory and refuses writes (Redis `OOM`).
    OutOfMemory(Cause),
    /// The server is loading, busy running a script, or otherwise temporarily unable to answer.
    Unavailable(Cause),
    /// Too few replicas acknowledged a grant in time (a backend asked to wait for replicas,
    /// e.g. `lock_redis::ReplicaAck`, and to fail when they fall short). The grant was given
    /// back before this error was returned. Retryable: replicas catch up or reconnect.
    NotReplicated {
        /// How many replicas acknowledged the write within the wait.
        acknowledged: u32,
        /// How many were asked for.
        required: u32,
    },
    /// The server (or a proxy in front of it) lacks commands a setting or lock kind needs,
    /// found when the backend connected, before any lock call. Never retryable: the same
    /// server answers the same way (grant the commands, or choose what it can do).
    Unsupported {
        /// What was asked for, e.g. `replica acknowledgement (ReplicaAck)`.
        needs: String,
        /// The missing commands, each with the server's answer.
        missing: Vec<String>,
    },
    /// The server answered something this library does not understand.
    Protocol(Cause),
    /// Any other backend failure.
    Backend(Cause),
    /// A composite backend (MultiLock, RedLock) did not get enough nodes to agree; says which
    /// nodes failed and why.
    Quorum(QuorumError),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::InvalidName { reason } => write!(f, "invalid lock name: {reason}"),
            Error::InvalidOptions { reason } => write!(f, "invalid lock options: {reason}"),
            Error::InvalidConfig { reason } => write!(f, "invalid configuration: {reason}"),
            Error::NotReentrant { name } => write!(
                f,
                "the lock {name:?} is not reentrant and this owner already holds it"
            ),
            Error::UpgradeRefused { name } => write!(
                f,
                "this owner holds the read lock {name:?}: its write lock would wait for itself \
                 (release the read lock first)"
            ),
            Error::LeaseLost => f.write_str("the lease on the lock is lost"),
            Error::NotAcquired { name } => {
                write!(f, "the lock {name:?} was not acquired within the wait")
            }
            Error::Timeout { after } => write!(f, "backend call timed out after {after:?}"),
            Error::ConnectionLost(cause) => write!(f, "connection to the backend lost: {cause}"),
            Error::WrongType(cause) => {
                write!(f, "the key holds a value that is not a lock: {cause}")
            }
            Error::ReadOnly(cause) => write!(f, "the node is read-only: {cause}"),
            Error::NotPermitted(cause) => write!(f, "not permitted: {cause}"),
            Error::OutOfMemory(cause) => write!(f, "the server is out of memory: {cause}"),
            Error::Unavailable(cause) => {
                write!(f, "the server is temporarily unavailable: {cause}")
            }
            Error::NotReplicated {
                acknowledged,
                required,
            } => write!(
                f,
                "only {acknowledged} of the {required} replicas asked for acknowledged the write"
            ),
            Error::Unsupported { needs, missing } => {
                write!(f, "the server cannot do {needs}: {}", missing.join("; "))
            }
            Error::Protocol(cause) => write!(f, "unexpected reply from the backend: {cause}"),
            Error::Backend(cause) => write!(f, "backend error: {cause}"),
            Error::Quorum(quorum) => write!(f, "{quorum}"),
        }
    }
}

/// The message says what went wrong in the backend's words; `source()` is the backend's own
/// error when it gave one (for a composite, the first node's failure).
impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::ConnectionLost(cause)
            | Error::WrongType(cause)
            | Error::ReadOnly(cause)
            | Error::NotPermitted(cause)
            | Error::OutOfMemory(cause)
            | Error::Unavailable(cause)
            | Error::Protocol(cause)
            | Error::Backend(cause) => cause.source(),
            // The quorum error's own message is this one's: go on to its first node.
            Error::Quorum(quorum) => quorum.source(),
            _ => None,
        }
    }
}

/// What a backend failure says and, when the backend gave one, its own error.
///
/// Made from a message alone (`"refused".into()`, [`Cause::new`]) or with the error behind it
/// ([`Cause::with_source`]); the latter is returned by [`Error`]'s
/// [`source`](std::error::Error::source). Cheap to clone (the source is shared).
///
/// # Example
///
/// ```
/// use std::error::Error as _;
/// use lock_core::error::{Cause, Error};
///
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
/// let error = Error::ConnectionLost(Cause::with_source("reset by peer", io));
/// assert_eq!(error.to_string(), "connection to the backend lost: reset by peer");
/// let source = error.source().expect("the I/O error");
/// assert!(source.downcast_ref::<std::io::Error>().is_some());
///
/// let plain = Error::Backend("no such script".into());
/// assert!(plain.source().is_none());
/// ```
#[derive(Clone, Debug)]
pub struct Cause {
    message: String,
    source: Option<Arc<dyn StdError + Send + Sync + 'static>>,
}

impl Cause {
    /// A cause that is only a message.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Cause {
            message: message.into(),
            source: None,
        }
    }

    /// A cause with the backend's own error behind it.
    #[must_use]
    pub fn with_source(
        message: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        Cause {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The backend's own error, if it gave one.
    #[must_use]
    pub fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn StdError + 'static))
    }

    /// Whether the message contains `pattern`.
    #[must_use]
    pub fn contains(&self, pattern: &str) -> bool {
        self.message.contains(pattern)
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<String> for Cause {
    fn from(message: String) -> Self {
        Cause::new(message)
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Self {
        Cause::new(message)
    }
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

/// The first node's failure is the source; the message names them all.
impl StdError for QuorumError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.failures
            .first()
            .map(|failure| failure as &(dyn StdError + 'static))
    }
}

impl std::fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node {}: {}", self.node, self.error)
    }
}

/// The node's error is the source.
impl StdError for NodeFailure {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.error)
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
    /// A [`Error::Quorum`] is not: the composite has already undone what it may have applied,
    /// or is still undoing it on nodes that did not grant it (their undo is ordered behind
    /// the owner's earlier calls there, and its next call on the name waits for it). A
    /// composite whose undo on a node that granted has not ended answers `ConnectionLost`.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_the_source_and_quorums_chain_to_their_first_node() {
        let io = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe");
        let lost = Error::ConnectionLost(Cause::with_source("broken pipe", io));
        assert_eq!(
            lost.to_string(),
            "connection to the backend lost: broken pipe"
        );
        assert!(lost.is_retryable() && lost.is_ambiguous());
        let source = lost.source().expect("the I/O error");
        assert_eq!(
            source
                .downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            Some(std::io::ErrorKind::BrokenPipe)
        );
        assert!(Error::Backend("plain".into()).source().is_none());
        assert!(Error::LeaseLost.source().is_none());

        let quorum = Error::Quorum(QuorumError::new(
            "acquire",
            1,
            2,
            3,
            vec![
                NodeFailure::new(1, lost),
                NodeFailure::new(
                    2,
                    Error::Timeout {
                        after: Duration::from_millis(5),
                    },
                ),
            ],
        ));
        let mut chain = Vec::new();
        let mut next: Option<&(dyn StdError + 'static)> = Some(&quorum);
        while let Some(error) = next {
            chain.push(error.to_string());
            next = error.source();
        }
        assert_eq!(
            chain,
            [
                "acquire: 1 of 3 nodes succeeded, 2 required; node 1: connection to the backend \
                 lost: broken pipe; node 2: backend call timed out after 5ms",
                "node 1: connection to the backend lost: broken pipe",
                "connection to the backend lost: broken pipe",
                "broken pipe",
            ]
        );
    }
}

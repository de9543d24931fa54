//! PostgreSQL's errors in distlock's terms, sorted by "may the step have applied?".
//!
//! Every step is one statement in its own transaction. An error the server *answered* (a
//! SQLSTATE) means that transaction rolled back: the step surely did not apply, so the error
//! is definite. Anything else (the connection closed, an I/O error, no answer in time) leaves
//! the statement's fate unknown: it may have committed, or may still commit, so the error is
//! ambiguous ([`Error::ConnectionLost`], [`Error::Timeout`]) and the connection is retired and
//! fenced before any later step (see `pool`).

use lock_core::Error;
use lock_core::error::Cause;
use tokio_postgres::error::SqlState;

/// The message of an error that means the schema is missing or of another version.
pub(crate) const NO_SCHEMA: &str = "the distlock schema is not installed in this database \
    (PostgresBackend::install_schema, or lock-postgres's sql/*.sql run by hand, printed by `distlock-cli postgres schema`)";

/// Whether the server answered this error (the statement's transaction rolled back).
pub(crate) fn is_definite(error: &tokio_postgres::Error) -> bool {
    error.as_db_error().is_some()
}

/// Whether `error` says the connection reached a server that cannot take writes (a standby, or
/// a primary demoted after a failover): its connection is replaced, so the next step connects
/// again and, with several hosts and `target_session_attrs=read-write`, finds the new primary.
pub(crate) fn is_read_only(error: &tokio_postgres::Error) -> bool {
    error
        .as_db_error()
        .is_some_and(|db| *db.code() == SqlState::READ_ONLY_SQL_TRANSACTION)
}

/// The distlock error for a failed statement.
pub(crate) fn classify(error: tokio_postgres::Error) -> Error {
    let Some(db) = error.as_db_error() else {
        let message = error.to_string();
        return Error::ConnectionLost(Cause::with_source(message, error));
    };
    let code = db.code().clone();
    let message = format!("{} (SQLSTATE {})", db.message(), code.code());
    let cause = |message: String| Cause::with_source(message, error);
    if code == SqlState::READ_ONLY_SQL_TRANSACTION {
        // A standby, or a primary demoted after a failover: a retry may reach the new primary.
        Error::ReadOnly(cause(message))
    } else if code == SqlState::INSUFFICIENT_PRIVILEGE
        || code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        || code == SqlState::INVALID_PASSWORD
    {
        Error::NotPermitted(cause(message))
    } else if code == SqlState::OUT_OF_MEMORY || code == SqlState::DISK_FULL {
        Error::OutOfMemory(cause(message))
    } else if code == SqlState::QUERY_CANCELED // statement_timeout
        || code == SqlState::LOCK_NOT_AVAILABLE // lock_timeout
        || code == SqlState::T_R_SERIALIZATION_FAILURE
        || code == SqlState::T_R_DEADLOCK_DETECTED
        || code == SqlState::TOO_MANY_CONNECTIONS
        || code == SqlState::ADMIN_SHUTDOWN
        || code == SqlState::CRASH_SHUTDOWN
        || code == SqlState::CANNOT_CONNECT_NOW
    {
        Error::Unavailable(cause(message))
    } else if code == SqlState::UNDEFINED_FUNCTION
        || code == SqlState::UNDEFINED_TABLE
        || code == SqlState::INVALID_SCHEMA_NAME
    {
        Error::Backend(cause(format!("{NO_SCHEMA}: {message}")))
    } else {
        Error::Backend(cause(message))
    }
}

//! Redis errors mapped onto the one distlock [`Error`].

use std::time::Duration;

use lock_core::Error;
use redis::{ErrorKind, RedisError};

/// Maps a redis-rs error to a distinct [`Error`] kind. `timeout` is the call timeout, reported
/// when the call timed out.
pub(crate) fn map_error(error: &RedisError, timeout: Duration) -> Error {
    let text = error.to_string();
    if error.is_timeout() {
        return Error::Timeout { after: timeout };
    }
    match error.code() {
        Some("WRONGTYPE") => return Error::WrongType(text),
        Some("READONLY") => return Error::ReadOnly(text),
        Some("NOPERM" | "WRONGPASS" | "NOAUTH") => return Error::NotPermitted(text),
        Some("OOM") => return Error::OutOfMemory(text),
        Some("LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN") => {
            return Error::Unavailable(text);
        }
        _ => {}
    }
    match error.kind() {
        ErrorKind::AuthenticationFailed => Error::NotPermitted(text),
        ErrorKind::InvalidClientConfig => Error::InvalidConfig { reason: text },
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Error::Protocol(text),
        _ if error.is_io_error() || error.is_connection_dropped() => Error::ConnectionLost(text),
        _ if error.is_unrecoverable_error() => Error::ConnectionLost(text),
        _ => Error::Backend(text),
    }
}

//! What a `PING` with a fresh request id says about a link.

use crate::wire::reply::is_decimal_of;

/// What a `PING` with a fresh id says about a link.
pub(crate) enum Alignment {
    /// The id came back: every reply before it was in step.
    Proven,
    /// Another reply came back, or none: the link is discarded.
    Broken,
    /// The `PING` itself got this error reply (a busy or loading server refuses everything):
    /// nothing can be told, and the link is kept.
    Refused(redis::ServerError),
}

impl Alignment {
    /// What `reply` (`None`: a transport error or no answer) to `PING <nonce>` says.
    pub(crate) fn of_ping(reply: Option<redis::Value>, nonce: u64) -> Alignment {
        match reply {
            Some(redis::Value::BulkString(bytes)) if is_decimal_of(&bytes, nonce) => {
                Alignment::Proven
            }
            Some(redis::Value::SimpleString(text)) if is_decimal_of(text.as_bytes(), nonce) => {
                Alignment::Proven
            }
            Some(redis::Value::ServerError(error)) => Alignment::Refused(error),
            _ => Alignment::Broken,
        }
    }
}

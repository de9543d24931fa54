//! Requests that wait for the next connection: opaque to this layer, built by the one above.

use redis::{Cmd, Pipeline, Value};

use crate::wire::reply::echoes;

/// A cleanup that could not be sent (say, lower an owner's hold count on a lock), handed to
/// `Connection::defer` by the layer that knows what it means.
///
/// After a timeout the connection is replaced, and the cleanup of the timed-out call can find
/// no connection to go out on. It is kept and runs as the first request on the new
/// connection, once the fence has stopped the old one: nothing of this backend can run on the
/// server between the fence and the cleanup, so the state it sets is still the right one, and
/// the hold it undoes is gone at once instead of when its lease ends.
///
/// The connection only asks it for its command; it must be idempotent (one cut short by a
/// timeout, or refused for now by a server still loading its data, is sent again on the next
/// connection, and its caller may send its own copy meanwhile).
pub(crate) trait Deferred: Send + Sync {
    /// The key the request is about: where it must be sent, and what the logs name.
    fn route(&self) -> &str;

    /// The request: a pipeline of one script sent whole (it may meet an empty script cache)
    /// with `request_id` as its last argument, whose reply is an array that begins with the id
    /// ([`one`]); or plain commands followed by `PING <request_id>`, whose echo proves the
    /// replies before it are this request's ([`plain`]). Either way its answer is its first
    /// command's reply ([`answer`]).
    fn request(&self, request_id: u64) -> Pipeline;
}

/// A deferred request of one script call, whose reply begins with its request id.
pub(crate) fn one(command: Cmd) -> Pipeline {
    let mut pipeline = redis::pipe();
    pipeline.add_command(command);
    pipeline
}

/// A deferred request of plain commands, then `PING <request_id>`. Not a transaction: each
/// command is atomic on its own (a native compare-and-delete, then the release message), and
/// `MULTI` is one more command for an ACL or a proxy to refuse.
pub(crate) fn plain(request_id: u64, commands: impl IntoIterator<Item = Cmd>) -> Pipeline {
    let mut pipeline = redis::pipe();
    for command in commands {
        pipeline.add_command(command);
    }
    pipeline.cmd("PING").arg(request_id);
    pipeline
}

/// The answer to a deferred `request` (its first command's reply, an error reply included)
/// among `replies`, once they are shown to be its own: `None` when they are out of step.
pub(crate) fn answer(
    request: &Pipeline,
    mut replies: Vec<Value>,
    request_id: u64,
) -> Option<Value> {
    if replies.len() != request.len() {
        return None;
    }
    if request.len() == 1 {
        return match replies.pop() {
            Some(Value::Array(items)) if echoes(items.first(), request_id) => {
                Some(Value::Array(items))
            }
            // The bare request id: a script's usual outcome (`LockScript::bare`).
            Some(bare @ Value::BulkString(_)) if echoes(Some(&bare), request_id) => Some(bare),
            // An error reply carries no id: trusted as the scripts' error replies are here.
            Some(error @ Value::ServerError(_)) => Some(error),
            _ => None,
        };
    }
    if !echoes(replies.last(), request_id) {
        return None;
    }
    Some(replies.swap_remove(0))
}

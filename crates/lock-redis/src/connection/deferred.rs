//! Requests that wait for the next connection: opaque to this layer, built by the one above.

use redis::Cmd;

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

    /// The request, sent whole (it may meet an empty script cache), with `request_id` as the
    /// last argument: its reply must be an array whose first item echoes that id.
    fn command(&self, request_id: u64) -> Cmd;
}

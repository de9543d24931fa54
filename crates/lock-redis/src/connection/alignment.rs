//! What a `PING` with a fresh request id says about a link.

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

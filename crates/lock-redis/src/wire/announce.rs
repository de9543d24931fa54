//! How a release is announced on the lock's channel: `PUBLISH`, `SPUBLISH` (a cluster's
//! sharded channels), or both, so waiters of either kind wake (see `docs/deployments.md`).

use redis::Cmd;

use crate::wire::keys;

/// How a release is announced on the lock's channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Announce {
    /// `PUBLISH`: plain pub/sub (one server; a cluster passes it to every node).
    Plain,
    /// `SPUBLISH`: sharded pub/sub, heard only on the node serving the channel's slot.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Sharded,
    /// Both, for a cluster where waiters of either kind may listen.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    Both,
}

impl Announce {
    /// The script argument that says it (`release.lua` and the other releasing scripts).
    pub(crate) fn arg(self) -> &'static str {
        match self {
            Announce::Plain => "p",
            Announce::Sharded => "s",
            Announce::Both => "b",
        }
    }

    /// The commands that announce a release of `name` outside a script.
    pub(crate) fn commands(self, name: &str) -> Vec<Cmd> {
        let channel = keys::channel(name);
        let publish = |command: &str| {
            let mut publish = redis::cmd(command);
            publish.arg(&channel).arg(keys::UNLOCK_MESSAGE);
            publish
        };
        match self {
            Announce::Plain => vec![publish("PUBLISH")],
            Announce::Sharded => vec![publish("SPUBLISH")],
            Announce::Both => vec![publish("PUBLISH"), publish("SPUBLISH")],
        }
    }
}

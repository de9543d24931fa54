//! What a connection may send besides the calls, as the capability probe found the server.

use crate::wire::capabilities::{Capabilities, Capability, Echo};

/// What a connection may send besides the calls, as the capability probe found the server
/// ([`crate::wire::capabilities::Capabilities`]): each link's setup and proof of step follow it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Manners {
    /// Learn the server's name for each link (`CLIENT INFO`), to fence it when it is replaced.
    pub(crate) fence: bool,
    /// Load every lock script on each new link (`SCRIPT LOAD`).
    pub(crate) preload: bool,
    /// How request ids are echoed.
    pub(crate) echo: Echo,
}

impl Manners {
    /// What `capabilities` allow.
    pub(crate) fn of(capabilities: &Capabilities) -> Manners {
        Manners {
            fence: capabilities.supports(Capability::ClientInfo)
                && capabilities.supports(Capability::ClientKill),
            preload: capabilities.supports(Capability::ScriptLoad),
            echo: Echo::of(capabilities),
        }
    }
}

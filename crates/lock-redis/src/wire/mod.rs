//! Layer 1, the wire: what is sent to the server and how its replies read. Names on the server
//! ([`keys`]), the lock scripts and the commands built from them, the replica acknowledgement
//! asked after a write, reply decoding, and error mapping. Knows nothing of connections.

pub(crate) mod announce;
pub(crate) mod capabilities;
pub(crate) mod description;
pub(crate) mod errors;
pub mod keys;
pub(crate) mod lock_script;
pub(crate) mod replication;
pub(crate) mod reply;
pub(crate) mod scripts;

//! How a lock name is found in the tables and on the notification channels.

use sha2::{Digest, Sha256};

/// A lock name's row key: the SHA-256 digest of its bytes.
///
/// Names are keyed by digest because a name may be 4 KiB long (more than a btree index row
/// holds) and may contain NUL (which `text` refuses); the name itself is stored beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LockKey([u8; 32]);

impl LockKey {
    /// The key of `name`.
    pub(crate) fn of(name: &str) -> Self {
        LockKey(Sha256::digest(name.as_bytes()).into())
    }

    /// The digest's bytes, as bound to a `bytea` parameter.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The channel releases of this key are announced on: `distlock_` and the first 27 bytes
    /// of the digest in hex, 63 bytes in all (PostgreSQL's longest identifier). The schema's
    /// `distlock.channel` function computes the same (a test holds the two together).
    pub(crate) fn channel(&self) -> String {
        use std::fmt::Write;
        let mut channel = String::with_capacity(63);
        channel.push_str("distlock_");
        for byte in &self.0[..27] {
            write!(channel, "{byte:02x}").expect("writing to a String cannot fail");
        }
        channel
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_channel_is_63_bytes_of_the_digest() {
        let key = LockKey::of("orders:42");
        let channel = key.channel();
        assert_eq!(channel.len(), 63);
        assert!(channel.starts_with("distlock_"));
        // sha256("orders:42") in hex, cut to 54 digits.
        let hex: String = key.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(&channel[9..], &hex[..54]);
        assert_ne!(LockKey::of("orders:43").channel(), channel);
    }
}

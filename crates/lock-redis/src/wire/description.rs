//! What the server holds for one lock name, as `describe.lua` reads it: for operators (the
//! `distlock status` command), whichever lock kind, if any, uses the name.

use std::time::Duration;

use lock_core::{Error, Result};

use crate::wire::reply::ttl_from_pttl;

/// How the server stores a lock name's key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// No key: the lock is free.
    Free,
    /// A hash of owner fields and hold counts: the reentrant lock ([`crate::LockKind::Reentrant`],
    /// Redisson's `RLock`).
    Reentrant,
    /// A string holding its owner: the fast lock ([`crate::LockKind::Fast`]).
    Fast,
    /// A key of another type (its `TYPE`), or a hash or string whose content does not have the
    /// shape of a lock (owner fields `<client id>:<holder number>`, positive hold counts): not
    /// a lock of either kind.
    Other(String),
}

/// The locks whose names match a pattern, as [`RedisBackend::list_locks`](crate::RedisBackend::list_locks)
/// found them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockList {
    /// Each lock's name and what the server holds for it, sorted by name.
    pub locks: Vec<(String, LockDescription)>,
    /// Whether every key matching the pattern was looked at (`false`: the limit was reached).
    pub complete: bool,
}

/// One lock name as the server holds it, read in one step by
/// [`RedisBackend::describe`](crate::RedisBackend::describe).
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// let backend = lock_redis::RedisBackend::connect("redis://127.0.0.1:6379/").await?;
/// let lock = backend.describe("orders:42").await?;
/// for (owner, holds) in &lock.holders {
///     println!("{owner} holds it {holds} time(s), {:?} left", lock.ttl);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockDescription {
    /// How the key is stored.
    pub layout: Layout,
    /// The owner fields (`<client id>:<holder>`) and their hold counts, sorted; a fast lock has
    /// one holder with one hold. Empty when free or not a lock.
    pub holders: Vec<(String, u32)>,
    /// The time the lease has left, when the key has one.
    pub ttl: Option<Duration>,
    /// The last fencing token handed out for the name (its counter), if any.
    pub fencing_counter: Option<u64>,
    /// Clients subscribed to the name's release channel with `SUBSCRIBE`, as the node serving
    /// the name counts them (on a cluster, subscribers connected to other nodes are not seen).
    pub subscribers: u64,
    /// Clients subscribed to the release channel with `SSUBSCRIBE` (sharded pub/sub), on the
    /// node serving the name.
    pub sharded_subscribers: u64,
}

/// The reply of `describe.lua` after its request id: type, content, pttl, counter, plain and
/// sharded subscribers.
pub(crate) type DescribeReply = (String, Vec<String>, i64, String, u64, u64);

/// Reads the reply of `describe.lua`.
///
/// # Errors
///
/// [`Error::Protocol`] for a fencing counter that is not a number.
pub(crate) fn describe_reply(reply: DescribeReply) -> Result<LockDescription> {
    let (kind, content, pttl, counter, subscribers, sharded_subscribers) = reply;
    let (layout, mut holders) = match kind.as_str() {
        "none" => (Layout::Free, Vec::new()),
        "hash" => match hold_counts(&content) {
            Some(holders) => (Layout::Reentrant, holders),
            None => (Layout::Other(kind), Vec::new()),
        },
        "string" if content.iter().all(|owner| is_owner_field(owner)) => (
            Layout::Fast,
            content.into_iter().map(|owner| (owner, 1)).collect(),
        ),
        _ => (Layout::Other(kind), Vec::new()),
    };
    holders.sort();
    let fencing_counter = if counter.is_empty() {
        None
    } else {
        Some(counter.parse().map_err(|_| {
            Error::Protocol(format!("fencing counter {counter:?} is not a number").into())
        })?)
    };
    Ok(LockDescription {
        ttl: if layout == Layout::Free {
            None
        } else {
            ttl_from_pttl(pttl)
        },
        layout,
        holders,
        fencing_counter,
        subscribers,
        sharded_subscribers,
    })
}

/// The holders of a lock hash `[field, count, …]`, if every field is an owner field and every
/// count a positive number.
fn hold_counts(content: &[String]) -> Option<Vec<(String, u32)>> {
    content
        .chunks_exact(2)
        .map(|pair| {
            let holds: u32 = pair[1].parse().ok().filter(|&holds| holds > 0)?;
            is_owner_field(&pair[0]).then(|| (pair[0].clone(), holds))
        })
        .collect()
}

/// Whether `field` has the shape of an owner field: `<client id>:<holder number>` (distlock's
/// and Redisson's).
fn is_owner_field(field: &str) -> bool {
    field.rsplit_once(':').is_some_and(|(client, holder)| {
        !client.is_empty() && !holder.is_empty() && holder.bytes().all(|b| b.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(kind: &str, content: &[&str], pttl: i64, counter: &str) -> DescribeReply {
        let content = content.iter().map(|s| (*s).to_owned()).collect();
        (kind.into(), content, pttl, counter.into(), 2, 1)
    }

    #[test]
    fn reads_each_layout() {
        let free = describe_reply(reply("none", &[], -2, "")).unwrap();
        assert_eq!(
            (free.layout, free.ttl, free.fencing_counter),
            (Layout::Free, None, None)
        );
        let held = describe_reply(reply("hash", &["b:1", "2", "a:1", "1"], 1500, "7")).unwrap();
        assert_eq!(held.layout, Layout::Reentrant);
        assert_eq!(held.holders, vec![("a:1".into(), 1), ("b:1".into(), 2)]);
        assert_eq!(held.ttl, Some(Duration::from_millis(1500)));
        assert_eq!(held.fencing_counter, Some(7));
        assert_eq!((held.subscribers, held.sharded_subscribers), (2, 1));
        let fast = describe_reply(reply("string", &["c:9"], 800, "")).unwrap();
        assert_eq!(fast.layout, Layout::Fast);
        assert_eq!(fast.holders, vec![("c:9".into(), 1)]);
        let other = describe_reply(reply("list", &[], -1, "")).unwrap();
        assert_eq!(other.layout, Layout::Other("list".into()));
        assert_eq!(other.ttl, None);
    }

    #[test]
    fn keys_not_shaped_like_locks_are_other() {
        for (kind, content) in [
            ("hash", &["a:1", "x"][..]),
            ("hash", &["a:1", "0"]),
            ("hash", &["name", "1"]),
            ("string", &["hello"]),
            ("string", &["a:b"]),
        ] {
            let other = describe_reply(reply(kind, content, 10, "")).unwrap();
            assert_eq!(
                other.layout,
                Layout::Other(kind.into()),
                "{kind} {content:?}"
            );
            assert!(other.holders.is_empty());
        }
        assert!(describe_reply(reply("hash", &[], 10, "seven")).is_err());
    }
}

//! What the server holds for one name, as `describe.lua` reads it: for operators (the
//! `distlock status` command), whichever kind of the family, if any, uses the name.

use std::time::Duration;

use lock_core::{Error, ReadWriteMode, Result};

use crate::wire::keys::{
    ELECTION_VALUES_PREFIX, FAIR_QUEUE_PREFIX, FAIR_TIMEOUT_PREFIX, TOKEN_PREFIX,
    WRITE_FIELD_SUFFIX, is_waiting_key,
};
use crate::wire::reply::ttl_from_pttl;

/// How the server stores a name: which kind of the family uses it, told apart by the shape of
/// the name's key and of the other keys derived from it ([`crate::keys`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// No key: the lock is free (and no other kind uses the name).
    Free,
    /// A hash of owner fields and hold counts: the reentrant lock ([`crate::LockKind::Reentrant`],
    /// Redisson's `RLock`). A fair lock with nobody queued and an election's lock whose leader
    /// value is gone look the same.
    Reentrant,
    /// A string holding its owner: the fast lock ([`crate::LockKind::Fast`]).
    Fast,
    /// A hash with a `mode` field (`read` or `write`), reader fields and `<owner field>:write`:
    /// a read-write lock (Redisson's `RReadWriteLock`); see [`LockDescription::mode`],
    /// [`readers`](LockDescription::readers) and [`writer`](LockDescription::writer).
    ReadWrite,
    /// A lock hash (or none) with waiters in its queue `redisson_lock_queue:{name}`: a fair lock
    /// (Redisson's `RFairLock`); see [`LockDescription::queue`]. With nobody queued a fair lock
    /// is stored as a plain [`Layout::Reentrant`] lock.
    Fair,
    /// A lock hash whose holder has a value in `distlock_leader:{name}`: an election; see
    /// [`LockDescription::leader_value`].
    Election,
    /// A string count with permits out in the sorted set `{name}:timeout`: a semaphore of
    /// lease-bound permits (Redisson's `RPermitExpirableSemaphore`); see
    /// [`LockDescription::available`], [`permits`](LockDescription::permits) and
    /// [`expired_permits`](LockDescription::expired_permits). With no permit out it is stored
    /// as a plain count, one of the three kinds below.
    Permits,
    /// A string integer with subscribers on the semaphore's channel (and none on the latch's):
    /// a semaphore's available permits (Redisson's `RSemaphore`).
    Semaphore,
    /// A string integer with subscribers on the latch's channel (and none on the semaphore's):
    /// a countdown latch's count (Redisson's `RCountDownLatch`).
    Latch,
    /// A string integer nobody waits on (or both kinds' waiters do): a semaphore's permits or
    /// a latch's count. Both store the same data, so the server alone cannot tell which.
    Counter,
    /// A key of another type (its `TYPE`), or a hash or string whose content does not have the
    /// shape of any kind above: not one of the family.
    Other(String),
}

/// The locks whose names match a pattern, as [`RedisBackend::list_locks`](crate::RedisBackend::list_locks)
/// found them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockList {
    /// Each name and what the server holds for it, sorted by name.
    pub locks: Vec<(String, LockDescription)>,
    /// Whether every key matching the pattern was looked at (`false`: the limit was reached).
    pub complete: bool,
}

/// Clients subscribed to the channels of the family's other kinds for one name, with
/// `SUBSCRIBE` or `SSUBSCRIBE` together, as the node serving the name counts them.
///
/// # Example
///
/// ```no_run
/// # async fn demo() -> lock_core::Result<()> {
/// let backend = lock_redis::RedisBackend::connect("redis://127.0.0.1:6379/").await?;
/// let pool = backend.describe("pool").await?;
/// println!("{} waiting for permits", pool.channels.semaphore);
/// match pool.channels.latch {
///     Some(waiters) => println!("{waiters} waiting for the latch"),
///     None => println!("the latch's channel is in another slot"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelSubscribers {
    /// On the read-write lock's channel `redisson_rwlock:{name}` (its waiters).
    pub read_write: u64,
    /// On the semaphore's channel `redisson_sc:{name}` (waiters for permits, lease-bound or
    /// not).
    pub semaphore: u64,
    /// On the latch's channel `redisson_countdownlatch__channel__{name}` (its waiters); `None`
    /// when the channel hashes to another slot than the name (a name with its own hash tag),
    /// where the one read cannot look.
    pub latch: Option<u64>,
    /// On the election's channel `distlock_leader_channel:{name}` (its observers).
    pub election: u64,
}

/// One name as the server holds it, read in one step by
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
    /// How the name is stored.
    pub layout: Layout,
    /// The owner fields (`<client id>:<holder>`) holding it and their hold counts, sorted: a
    /// fast lock has one holder with one hold; a read-write lock each owner field with its
    /// read and write holds together; lease-bound permits each owner field with its live
    /// permits. Empty when free or not of the family.
    pub holders: Vec<(String, u32)>,
    /// The time the lease has left, when the name's key has one.
    pub ttl: Option<Duration>,
    /// The last fencing token handed out for the name (its counter), if any.
    pub fencing_counter: Option<u64>,
    /// Clients subscribed to the name's release channel with `SUBSCRIBE`, as the node serving
    /// the name counts them (on a cluster, subscribers connected to other nodes are not seen).
    pub subscribers: u64,
    /// Clients subscribed to the release channel with `SSUBSCRIBE` (sharded pub/sub), on the
    /// node serving the name.
    pub sharded_subscribers: u64,
    /// Subscribers to the other kinds' channels of the name.
    pub channels: ChannelSubscribers,
    /// A read-write lock's mode.
    pub mode: Option<ReadWriteMode>,
    /// A read-write lock's owner fields with read holds, and their read hold counts, sorted.
    pub readers: Vec<(String, u32)>,
    /// A read-write lock's writer (its owner field) and write hold count.
    pub writer: Option<(String, u32)>,
    /// A fair lock's waiters in the order they will be granted it, each with the time its
    /// place lasts without it trying again (`None`: no deadline recorded; zero: lapsed).
    pub queue: Vec<(String, Option<Duration>)>,
    /// An election's leader value (the holder's, in `distlock_leader:{name}`).
    pub leader_value: Option<String>,
    /// The count of a semaphore (with lease-bound permits or not) or a latch: the permits
    /// available, or the count left. `None` for the other kinds, and for permits whose count
    /// is gone.
    pub available: Option<i64>,
    /// Lease-bound permits out whose lease has not ended: each permit's id
    /// (`<owner field>:<k>`) and the time its lease has left, sorted by id.
    pub permits: Vec<(String, Duration)>,
    /// Lease-bound permits whose lease has ended, given back to the count at the next attempt.
    pub expired_permits: u32,
}

/// The reply of `describe.lua` after its request id: type, content, pttl, counter,
/// subscribers (release channel plain and sharded, read-write, semaphore, latch or -1,
/// election), queue, permits out, leader values.
pub(crate) type DescribeReply = (
    String,
    Vec<String>,
    i64,
    String,
    Vec<i64>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
);

/// What the family's other keys held, read with the name's key.
struct Derived {
    queue: Vec<(String, Option<Duration>)>,
    permits: Vec<(String, Duration)>,
    expired_permits: u32,
    permit_holders: Vec<(String, u32)>,
    leader: Vec<(String, String)>,
}

/// Reads the reply of `describe.lua`.
///
/// # Errors
///
/// [`Error::Protocol`] for a fencing counter, a deadline or a subscriber count that is not a
/// number.
pub(crate) fn describe_reply(reply: DescribeReply) -> Result<LockDescription> {
    let (kind, content, pttl, counter, subscribed, queue, permits, leader) = reply;
    let [
        subscribers,
        sharded_subscribers,
        read_write,
        semaphore,
        latch,
        election,
    ] = <[i64; 6]>::try_from(subscribed).map_err(|counts| {
        Error::Protocol(format!("describe read {} subscriber counts", counts.len()).into())
    })?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let channels = ChannelSubscribers {
        read_write: count(read_write),
        semaphore: count(semaphore),
        latch: u64::try_from(latch).ok(),
        election: count(election),
    };
    let derived = derived(&queue, &permits, &leader)?;
    let mut lock = LockDescription {
        layout: Layout::Free,
        holders: Vec::new(),
        ttl: None,
        fencing_counter: fencing_counter(&counter)?,
        subscribers: count(subscribers),
        sharded_subscribers: count(sharded_subscribers),
        channels,
        mode: None,
        readers: Vec::new(),
        writer: None,
        queue: Vec::new(),
        leader_value: None,
        available: None,
        permits: Vec::new(),
        expired_permits: 0,
    };
    lock.layout = match kind.as_str() {
        "none" if !derived.permits.is_empty() || derived.expired_permits > 0 => {
            with_permits(&mut lock, derived, None)
        }
        "none" if !derived.queue.is_empty() => {
            lock.queue = derived.queue;
            Layout::Fair
        }
        "none" => Layout::Free,
        "hash" if content.chunks_exact(2).any(|pair| pair[0] == "mode") => {
            match rw_holds(&content) {
                Some((mode, readers, writer)) => {
                    lock.holders = merged(&readers, writer.as_ref());
                    lock.mode = Some(mode);
                    lock.readers = readers;
                    lock.writer = writer;
                    Layout::ReadWrite
                }
                None => Layout::Other(kind),
            }
        }
        "hash" => match hold_counts(&content) {
            Some(holders) => {
                let value = holders.first().and_then(|(holder, _)| {
                    derived
                        .leader
                        .iter()
                        .find(|(field, _)| field == holder)
                        .map(|(_, value)| value.clone())
                });
                lock.holders = holders;
                if value.is_some() {
                    lock.leader_value = value;
                    Layout::Election
                } else if !derived.queue.is_empty() {
                    lock.queue = derived.queue;
                    Layout::Fair
                } else {
                    Layout::Reentrant
                }
            }
            None => Layout::Other(kind),
        },
        "string" if content.iter().all(|owner| is_owner_field(owner)) => {
            lock.holders = content.into_iter().map(|owner| (owner, 1)).collect();
            Layout::Fast
        }
        "string" => match content.first().and_then(|value| value.parse::<i64>().ok()) {
            Some(available) if !derived.permits.is_empty() || derived.expired_permits > 0 => {
                with_permits(&mut lock, derived, Some(available))
            }
            Some(available) => {
                lock.available = Some(available);
                let latch_waits = channels.latch.is_some_and(|latch| latch > 0);
                match (channels.semaphore > 0, latch_waits) {
                    (true, false) => Layout::Semaphore,
                    (false, true) => Layout::Latch,
                    _ => Layout::Counter,
                }
            }
            None => Layout::Other(kind),
        },
        _ => Layout::Other(kind),
    };
    lock.holders.sort();
    if !matches!(lock.layout, Layout::Free | Layout::Permits) {
        lock.ttl = ttl_from_pttl(pttl);
    }
    Ok(lock)
}

/// Whether `key` has the shape of a key the family derives from a name, rather than a name:
/// a fencing counter, a fair queue or its deadlines, an election's leader values (all by their
/// prefixes), a read-write lock's read hold key (`…:<owner field>:rwlock_timeout:<k>`), or the
/// permits out of a name without a hash tag (`{name}:timeout`), a fast lock's waiting mark
/// (`name:distlock_waiting:{name}`, or `name:distlock_waiting` for a name with a hash tag: no
/// name may contain `:distlock_waiting`). The permits out of a name with a hash tag
/// (`name:timeout`) cannot be told from a name by shape; as a sorted set, `describe` finds it
/// is none of the family.
pub(crate) fn is_derived_key(key: &str) -> bool {
    let prefixed = [
        TOKEN_PREFIX,
        FAIR_QUEUE_PREFIX,
        FAIR_TIMEOUT_PREFIX,
        ELECTION_VALUES_PREFIX,
    ]
    .iter()
    .any(|prefix| {
        key.strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(':'))
    });
    let read_hold = key
        .rsplit_once(":rwlock_timeout:")
        .is_some_and(|(_, k)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()));
    let permits = key
        .strip_suffix(":timeout")
        .and_then(|base| base.strip_prefix('{'))
        .and_then(|base| base.strip_suffix('}'))
        .is_some_and(|name| !name.is_empty() && !name.contains(['{', '}']));
    // A fast lock's waiting mark (no lock name has its shape).
    let waiting = is_waiting_key(key);
    prefixed || read_hold || permits || waiting
}

/// Fills in lease-bound permits: `available` is the count (`None` when it is gone).
fn with_permits(lock: &mut LockDescription, derived: Derived, available: Option<i64>) -> Layout {
    lock.available = available;
    lock.holders = derived.permit_holders;
    lock.permits = derived.permits;
    lock.expired_permits = derived.expired_permits;
    Layout::Permits
}

/// The fencing counter, if any.
fn fencing_counter(counter: &str) -> Result<Option<u64>> {
    if counter.is_empty() {
        return Ok(None);
    }
    counter
        .parse()
        .map(Some)
        .map_err(|_| Error::Protocol(format!("fencing counter {counter:?} is not a number").into()))
}

/// A number of ms the script computed.
fn millis(text: &str, what: &str) -> Result<i64> {
    text.parse()
        .map_err(|_| Error::Protocol(format!("{what} {text:?} is not a number").into()))
}

/// A time left in ms, lapsed (zero) when not positive.
fn left(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Reads the family's other keys: the fair queue `[field, ms left or '', …]`, the permits out
/// `[member, ms left, …]` and the leader values `[field, value, …]`.
fn derived(queue: &[String], permits: &[String], leader: &[String]) -> Result<Derived> {
    let queue = queue
        .chunks_exact(2)
        .map(|pair| {
            let deadline = if pair[1].is_empty() {
                None
            } else {
                Some(left(millis(&pair[1], "queue deadline")?))
            };
            Ok((pair[0].clone(), deadline))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut live = Vec::new();
    let mut expired_permits = 0;
    let mut permit_holders: Vec<(String, u32)> = Vec::new();
    for pair in permits.chunks_exact(2) {
        let ms = millis(&pair[1], "permit lease")?;
        if ms <= 0 {
            expired_permits += 1;
            continue;
        }
        live.push((pair[0].clone(), left(ms)));
        // `<owner field>:<k>`; a member of another shape (a Redisson client's permit id) is
        // its own holder.
        let holder = match pair[0].rsplit_once(':') {
            Some((owner, k)) if k.parse::<u32>().is_ok() => owner,
            _ => pair[0].as_str(),
        };
        match permit_holders.iter_mut().find(|(field, _)| field == holder) {
            Some((_, count)) => *count += 1,
            None => permit_holders.push((holder.to_owned(), 1)),
        }
    }
    live.sort();
    let leader = leader
        .chunks_exact(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect();
    Ok(Derived {
        queue,
        permits: live,
        expired_permits,
        permit_holders,
        leader,
    })
}

/// The mode, readers and writer of a read-write lock hash `[field, value, …]`: a `mode` of
/// `read` or `write`, reader fields (owner fields) and `<owner field>:write`, each with a
/// positive count; `None` for a hash of another shape.
#[allow(clippy::type_complexity)]
fn rw_holds(
    content: &[String],
) -> Option<(ReadWriteMode, Vec<(String, u32)>, Option<(String, u32)>)> {
    let mut mode = None;
    let mut readers = Vec::new();
    let mut writer = None;
    for pair in content.chunks_exact(2) {
        let (field, value) = (&pair[0], &pair[1]);
        if field == "mode" {
            mode = Some(match value.as_str() {
                "read" => ReadWriteMode::Read,
                "write" => ReadWriteMode::Write,
                _ => return None,
            });
            continue;
        }
        let holds: u32 = value.parse().ok().filter(|&holds| holds > 0)?;
        match field.strip_suffix(WRITE_FIELD_SUFFIX) {
            Some(owner) if is_owner_field(owner) && writer.is_none() => {
                writer = Some((owner.to_owned(), holds));
            }
            _ if is_owner_field(field) => readers.push((field.clone(), holds)),
            _ => return None,
        }
    }
    readers.sort();
    Some((mode?, readers, writer))
}

/// Each owner field of a read-write lock with its read and write holds together, sorted.
fn merged(readers: &[(String, u32)], writer: Option<&(String, u32)>) -> Vec<(String, u32)> {
    let mut holders = readers.to_vec();
    if let Some((owner, holds)) = writer {
        match holders.iter_mut().find(|(field, _)| field == owner) {
            Some((_, count)) => *count += holds,
            None => holders.push((owner.clone(), *holds)),
        }
    }
    holders.sort();
    holders
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

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn reply(kind: &str, content: &[&str], pttl: i64, counter: &str) -> DescribeReply {
        family(
            kind,
            content,
            pttl,
            counter,
            [2, 1, 0, 0, 0, 0],
            &[],
            &[],
            &[],
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn family(
        kind: &str,
        content: &[&str],
        pttl: i64,
        counter: &str,
        subscribers: [i64; 6],
        queue: &[&str],
        permits: &[&str],
        leader: &[&str],
    ) -> DescribeReply {
        (
            kind.into(),
            strings(content),
            pttl,
            counter.into(),
            subscribers.to_vec(),
            strings(queue),
            strings(permits),
            strings(leader),
        )
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
            ("hash", &["mode", "read", "a:1", "x"]),
            ("hash", &["mode", "sideways", "a:1", "1"]),
            ("hash", &["mode", "write", "name", "1"]),
            ("hash", &["mode", "write", "a:1:write", "0"]),
            ("string", &["hello"]),
            ("string", &["a:b"]),
            ("string", &["1.5"]),
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
        let mut short = reply("none", &[], -2, "");
        short.4.pop();
        assert!(describe_reply(short).is_err());
    }

    #[test]
    fn reads_a_read_write_lock() {
        let read = describe_reply(reply(
            "hash",
            &["mode", "read", "b:1", "1", "a:2", "3"],
            900,
            "",
        ))
        .unwrap();
        assert_eq!(read.layout, Layout::ReadWrite);
        assert_eq!(read.mode, Some(ReadWriteMode::Read));
        assert_eq!(read.readers, vec![("a:2".into(), 3), ("b:1".into(), 1)]);
        assert_eq!(read.writer, None);
        assert_eq!(read.holders, read.readers);
        assert_eq!(read.ttl, Some(Duration::from_millis(900)));
        // A writer that downgraded: write and read holds of one owner field.
        let write = describe_reply(reply(
            "hash",
            &["mode", "write", "w:1:write", "2", "w:1", "1"],
            500,
            "",
        ))
        .unwrap();
        assert_eq!(write.layout, Layout::ReadWrite);
        assert_eq!(write.mode, Some(ReadWriteMode::Write));
        assert_eq!(write.writer, Some(("w:1".into(), 2)));
        assert_eq!(write.readers, vec![("w:1".into(), 1)]);
        assert_eq!(write.holders, vec![("w:1".into(), 3)]);
    }

    #[test]
    fn reads_a_fair_lock_and_its_queue() {
        let fair = describe_reply(family(
            "hash",
            &["h:1", "1"],
            2000,
            "",
            [1, 0, 0, 0, 0, 0],
            &["q:1", "9500", "q:2", "-20", "q:3", ""],
            &[],
            &[],
        ))
        .unwrap();
        assert_eq!(fair.layout, Layout::Fair);
        assert_eq!(fair.holders, vec![("h:1".into(), 1)]);
        assert_eq!(
            fair.queue,
            vec![
                ("q:1".into(), Some(Duration::from_millis(9500))),
                ("q:2".into(), Some(Duration::ZERO)),
                ("q:3".into(), None),
            ]
        );
        // Released by force, the head not yet in: free, with its queue.
        let queued = describe_reply(family(
            "none",
            &[],
            -2,
            "",
            [0; 6],
            &["q:1", "100"],
            &[],
            &[],
        ))
        .unwrap();
        assert_eq!(queued.layout, Layout::Fair);
        assert!(queued.holders.is_empty() && queued.ttl.is_none());
        let bad = family(
            "hash",
            &["h:1", "1"],
            1,
            "",
            [0; 6],
            &["q:1", "soon"],
            &[],
            &[],
        );
        assert!(describe_reply(bad).is_err());
    }

    #[test]
    fn reads_an_election() {
        let elected = describe_reply(family(
            "hash",
            &["l:1", "1"],
            3000,
            "4",
            [0, 0, 0, 0, 0, 2],
            &[],
            &[],
            &["l:1", "node-a"],
        ))
        .unwrap();
        assert_eq!(elected.layout, Layout::Election);
        assert_eq!(elected.leader_value.as_deref(), Some("node-a"));
        assert_eq!(elected.holders, vec![("l:1".into(), 1)]);
        assert_eq!(elected.channels.election, 2);
        assert_eq!(elected.fencing_counter, Some(4));
        // A value of someone who no longer holds the lock is not the leader's.
        let stale = describe_reply(family(
            "hash",
            &["l:2", "1"],
            3000,
            "",
            [0; 6],
            &[],
            &[],
            &["l:1", "node-a"],
        ))
        .unwrap();
        assert_eq!(stale.layout, Layout::Reentrant);
        assert_eq!(stale.leader_value, None);
    }

    #[test]
    fn reads_lease_bound_permits() {
        let permits = describe_reply(family(
            "string",
            &["1"],
            -1,
            "",
            [0, 0, 0, 1, 0, 0],
            &[],
            &[
                "b:1:1", "5000", "a:1:2", "7000", "a:1:1", "6000", "c:1:1", "-5",
            ],
            &[],
        ))
        .unwrap();
        assert_eq!(permits.layout, Layout::Permits);
        assert_eq!(permits.available, Some(1));
        assert_eq!(permits.holders, vec![("a:1".into(), 2), ("b:1".into(), 1)]);
        assert_eq!(
            permits.permits,
            vec![
                ("a:1:1".into(), Duration::from_millis(6000)),
                ("a:1:2".into(), Duration::from_millis(7000)),
                ("b:1:1".into(), Duration::from_millis(5000)),
            ]
        );
        assert_eq!(permits.expired_permits, 1);
        assert_eq!(permits.ttl, None);
        // Only expired ones out, the count deleted.
        let gone = describe_reply(family(
            "none",
            &[],
            -2,
            "",
            [0; 6],
            &[],
            &["x:1:1", "0"],
            &[],
        ))
        .unwrap();
        assert_eq!(gone.layout, Layout::Permits);
        assert_eq!((gone.available, gone.expired_permits), (None, 1));
    }

    #[test]
    fn derived_keys_are_not_names() {
        for key in [
            "redisson_lock_token:{a}",
            "redisson_lock_queue:{a}",
            "redisson_lock_timeout:{t}:a",
            "distlock_leader:{a}",
            "a:distlock_waiting:{a}",
            "orders:42:distlock_waiting:{orders:42}",
            "{t}:a:distlock_waiting",
            "{a}:u-1:7:rwlock_timeout:2",
            "{t}:a:u-1:7:rwlock_timeout:1",
            "{gpu}:timeout",
        ] {
            assert!(is_derived_key(key), "{key}");
        }
        for name in [
            "orders:42",
            "redisson_lock_token",
            "distlock_leaderboard",
            "jobs:timeout",
            "{t}:gpu:timeout",
            "{}:timeout",
            "a:rwlock_timeout:x",
        ] {
            assert!(!is_derived_key(name), "{name}");
        }
    }

    #[test]
    fn tells_a_counter_by_its_waiters() {
        let counter = |subscribers: [i64; 6]| {
            describe_reply(family("string", &["3"], -1, "", subscribers, &[], &[], &[])).unwrap()
        };
        let semaphore = counter([0, 0, 0, 2, 0, 0]);
        assert_eq!(semaphore.layout, Layout::Semaphore);
        assert_eq!(semaphore.available, Some(3));
        assert_eq!(semaphore.channels.semaphore, 2);
        assert_eq!(counter([0, 0, 0, 0, 1, 0]).layout, Layout::Latch);
        assert_eq!(counter([0; 6]).layout, Layout::Counter);
        assert_eq!(counter([0, 0, 0, 1, 1, 0]).layout, Layout::Counter);
        // The latch's channel not read (it hashes elsewhere): its waiters are unknown.
        let unread = counter([0, 0, 0, 0, -1, 0]);
        assert_eq!(unread.layout, Layout::Counter);
        assert_eq!(unread.channels.latch, None);
        assert_eq!(counter([0, 0, 0, 1, -1, 0]).layout, Layout::Semaphore);
        let negative = describe_reply(family("string", &["-2"], -1, "", [0; 6], &[], &[], &[]));
        assert_eq!(negative.unwrap().available, Some(-2));
    }
}

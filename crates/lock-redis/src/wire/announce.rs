//! How a release is announced on the lock's channel: `PUBLISH`, `SPUBLISH` (a cluster's
//! sharded channels), or both, so waiters of either kind wake (see `docs/deployments.md`); and
//! whom a message heard on a channel wakes.

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

    /// As [`arg`](Self::arg), in capitals: `fast_release.lua` then announces the release
    /// whether the lock was marked as waited for or not.
    pub(crate) fn arg_always(self) -> &'static str {
        match self {
            Announce::Plain => "P",
            Announce::Sharded => "S",
            Announce::Both => "B",
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

/// Whom a message heard on a watched channel wakes among the local waiters of that channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// One waiter: a lock was released, and one waiter can take it.
    One,
    /// Up to this many waiters: a semaphore's new permit count (none for zero or less).
    UpTo(i64),
    /// Every waiter: they all look again.
    All,
}

/// Whom `message` on `channel` wakes: a semaphore's channel carries its new permit count (as
/// Redisson's semaphore waiters read it); a lock's channel a release, which wakes one waiter,
/// except a writer leaving a read-write lock (`1`), which wakes them all (as Redisson's
/// `LockPubSub` reads it); a latch's channel wakes every waiter.
pub(crate) fn wake_for(channel: &str, message: &[u8]) -> Wake {
    let on = |prefix: &str| {
        channel
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(':'))
    };
    if on(keys::RWLOCK_CHANNEL_PREFIX) && message == keys::WRITER_LEFT_MESSAGE.as_bytes() {
        return Wake::All;
    }
    // A latch's waiters all read its count again, whatever the message (0: open; 1: a new
    // count, which costs them one look); an election's observers all read the leader again.
    if channel.starts_with(keys::LATCH_CHANNEL_PREFIX) || on(keys::ELECTION_CHANNEL_PREFIX) {
        return Wake::All;
    }
    if !on(keys::SEMAPHORE_CHANNEL_PREFIX) {
        return Wake::One;
    }
    // A count that does not read as one (not sent by distlock or Redisson): let every
    // waiter look.
    std::str::from_utf8(message)
        .ok()
        .and_then(|count| count.trim().parse().ok())
        .map_or(Wake::All, Wake::UpTo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_semaphore_count_wakes_that_many() {
        let channel = keys::semaphore_channel("pool");
        assert_eq!(wake_for(&channel, b"3"), Wake::UpTo(3));
        assert_eq!(wake_for(&channel, b"-2"), Wake::UpTo(-2));
        assert_eq!(wake_for(&channel, b"three"), Wake::All);
        assert_eq!(wake_for(&keys::channel("pool"), b"0"), Wake::One);
        // A lock whose name starts like the semaphore prefix is still a lock.
        assert_eq!(wake_for(&keys::channel("redisson_sc:x"), b"0"), Wake::One);
    }

    #[test]
    fn a_writer_leaving_wakes_everyone() {
        let channel = keys::rw_channel("doc");
        assert_eq!(wake_for(&channel, b"1"), Wake::All);
        assert_eq!(wake_for(&channel, b"0"), Wake::One);
        assert_eq!(wake_for(&keys::latch_channel("doc"), b"0"), Wake::All);
        assert_eq!(wake_for(&keys::election_channel("doc"), b"1"), Wake::All);
        // On a plain lock's channel, a 1 is only a release.
        assert_eq!(wake_for(&keys::channel("doc"), b"1"), Wake::One);
    }
}

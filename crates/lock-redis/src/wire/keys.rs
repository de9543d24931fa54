//! Names on the server, laid out exactly as Redisson's `RLock` lays them out.

use lock_core::{Error, Result};

/// Prefix of the per-lock release channel (Redisson's `RedissonLock#getChannelName`).
pub const CHANNEL_PREFIX: &str = "redisson_lock__channel";
/// Prefix of the per-lock fencing counter (Redisson's `RedissonFencedLock` token key).
pub const TOKEN_PREFIX: &str = "redisson_lock_token";
/// The message published on the release channel when a lock becomes free (Redisson's
/// `UNLOCK_MESSAGE`).
pub const UNLOCK_MESSAGE: &str = "0";
/// What follows the lock name in a fast lock's waiting mark (distlock's own: Redisson has no
/// fast lock). The mark's presence tells the release that someone waits, and so that it must
/// announce itself.
pub const WAITING_SUFFIX: &str = ":distlock_waiting";
/// Prefix of an election's leader values (distlock's own: Redisson has no election).
pub const ELECTION_VALUES_PREFIX: &str = "distlock_leader";
/// Prefix of an election's channel, on which leader changes are announced.
pub const ELECTION_CHANNEL_PREFIX: &str = "distlock_leader_channel";
/// Prefix of a fair lock's queue of waiting owner fields (Redisson's `RedissonFairLock`
/// `threadsQueueName`).
pub const FAIR_QUEUE_PREFIX: &str = "redisson_lock_queue";
/// Prefix of a fair lock's sorted set of queue deadlines (Redisson's `timeoutSetName`).
pub const FAIR_TIMEOUT_PREFIX: &str = "redisson_lock_timeout";
/// Prefix of a read-write lock's channel, shared by both sides (Redisson's
/// `RedissonReadLock#getChannelName` and `RedissonWriteLock#getChannelName`).
pub const RWLOCK_CHANNEL_PREFIX: &str = "redisson_rwlock";
/// The message a writer leaving a read-write lock announces: every waiter may come in (Redisson's
/// `READ_UNLOCK_MESSAGE`). The last reader leaving announces [`UNLOCK_MESSAGE`].
pub const WRITER_LEFT_MESSAGE: &str = "1";
/// What follows the owner field in a read-write lock's writer field (Redisson's
/// `RedissonWriteLock#getLockName`).
pub const WRITE_FIELD_SUFFIX: &str = ":write";
/// Prefix of a countdown latch's channel, written before `{<name>}` with no colon (Redisson's
/// `RedissonCountDownLatch#getChannelName`).
pub const LATCH_CHANNEL_PREFIX: &str = "redisson_countdownlatch__channel__";
/// Prefix of a semaphore's channel, on which each new permit count is announced (Redisson's
/// `RedissonSemaphore#getChannelName`).
pub const SEMAPHORE_CHANNEL_PREFIX: &str = "redisson_sc";

/// Derives a name from a lock name as Redisson does: `prefix:{name}`, or `prefix:name` when the
/// name carries its own `{hash tag}`, so the derived key hashes to the lock's cluster slot.
///
/// Built by appending rather than with `format!`: the release channel is derived on every
/// release, and the formatting machinery cost about a thousand instructions a call there.
fn derived(prefix: &str, name: &str) -> String {
    let tagged = name.contains('{');
    let mut derived = String::with_capacity(prefix.len() + name.len() + 3);
    derived.push_str(prefix);
    derived.push(':');
    if tagged {
        derived.push_str(name);
    } else {
        derived.push('{');
        derived.push_str(name);
        derived.push('}');
    }
    derived
}

/// The release channel of a lock: `redisson_lock__channel:{name}`.
#[must_use]
pub fn channel(name: &str) -> String {
    derived(CHANNEL_PREFIX, name)
}

/// The channel of a semaphore: `redisson_sc:{name}` (the semaphore's key is the bare name).
#[must_use]
pub fn semaphore_channel(name: &str) -> String {
    derived(SEMAPHORE_CHANNEL_PREFIX, name)
}

/// The leader values of the election `name`: `distlock_leader:{name}`, a hash
/// `{owner field → value}` holding the current leader's value, living and renewed with the
/// election's lock (the reentrant lock's hash `name`). The scripts derive it the same way.
#[must_use]
pub fn election_values(name: &str) -> String {
    derived(ELECTION_VALUES_PREFIX, name)
}

/// The channel of the election `name`: `distlock_leader_channel:{name}` (`1`: a new leader,
/// `0`: nobody leads).
#[must_use]
pub fn election_channel(name: &str) -> String {
    derived(ELECTION_CHANNEL_PREFIX, name)
}

/// The queue of a fair lock: `redisson_lock_queue:{name}`.
#[must_use]
pub fn fair_queue(name: &str) -> String {
    derived(FAIR_QUEUE_PREFIX, name)
}

/// The queue deadlines of a fair lock: `redisson_lock_timeout:{name}`.
#[must_use]
pub fn fair_timeouts(name: &str) -> String {
    derived(FAIR_TIMEOUT_PREFIX, name)
}

/// The channel on which a fair lock tells the waiter `owner_field` that its turn came:
/// `redisson_lock__channel:{name}:<owner field>` (Redisson's per-thread channel).
#[must_use]
pub fn fair_waiter_channel(name: &str, owner_field: &str) -> String {
    format!("{}:{owner_field}", channel(name))
}

/// The channel of a read-write lock: `redisson_rwlock:{name}`.
#[must_use]
pub fn rw_channel(name: &str) -> String {
    derived(RWLOCK_CHANNEL_PREFIX, name)
}

/// The key carrying the lease of read hold number `k` (from 1) of `owner_field` on the
/// read-write lock `name`: `{name}:<owner field>:rwlock_timeout:<k>` (Redisson's suffixName;
/// `name:<owner field>:…` when the name has its own hash tag). The scripts derive it the same
/// way.
#[must_use]
pub fn rw_timeout_key(name: &str, owner_field: &str, k: u32) -> String {
    let base = if name.contains('{') {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    };
    format!("{base}:{owner_field}:rwlock_timeout:{k}")
}

/// The sorted set of the lease-bound permits out of the semaphore `name`, each scored by the
/// end of its lease: `{name}:timeout` (Redisson's `RPermitExpirableSemaphore` timeout name,
/// `name:timeout` when the name has its own hash tag). The scripts derive it the same way.
#[must_use]
pub fn permits_key(name: &str) -> String {
    if name.contains('{') {
        format!("{name}:timeout")
    } else {
        format!("{{{name}}}:timeout")
    }
}

/// The writers waiting for the read-write lock `name` that hold new readers back (the
/// writer-preferring ones), scored by the deadline of their place: `{name}:rwlock_writers`
/// (`name:rwlock_writers` when the name has its own hash tag). distlock's own key: Redisson's
/// readers do not read it.
#[must_use]
pub fn rw_writers_waiting(name: &str) -> String {
    if name.contains('{') {
        format!("{name}:rwlock_writers")
    } else {
        format!("{{{name}}}:rwlock_writers")
    }
}

/// The channel of a countdown latch: `redisson_countdownlatch__channel__{name}`, braces
/// included whatever the name (Redisson writes it so). For a name with its own hash tag the
/// channel hashes elsewhere than the latch: on a cluster with sharded pub/sub, its
/// announcements then do not reach waiters, who find the latch open on their next look.
#[must_use]
pub fn latch_channel(name: &str) -> String {
    format!("{LATCH_CHANNEL_PREFIX}{{{name}}}")
}

/// The waiting mark of a fast lock: `name:distlock_waiting:{name}` (`name:distlock_waiting`
/// when the name has its own hash tag), a string set (with a TTL) by an attempt made while a
/// waiter of this process watches the lock's releases; the release that deletes the lock
/// deletes it too, and announces itself only when it was there.
///
/// It starts with the name, unlike the derived keys Redisson lays out, so an ACL user allowed
/// the names (`~orders:*`) is allowed the marks without another grant; the tag puts it in the
/// lock's cluster slot.
#[must_use]
pub fn waiting_key(name: &str) -> String {
    let mut key = String::with_capacity(2 * name.len() + WAITING_SUFFIX.len() + 3);
    key.push_str(name);
    key.push_str(WAITING_SUFFIX);
    if !name.contains('{') {
        key.push_str(":{");
        key.push_str(name);
        key.push('}');
    }
    key
}

/// The fencing counter key of a lock: `redisson_lock_token:{name}`.
#[must_use]
pub fn token_key(name: &str) -> String {
    derived(TOKEN_PREFIX, name)
}

/// The part of a key that Redis Cluster hashes: the content of the first `{…}` when it is not
/// empty, else the whole key.
#[must_use]
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The Redis Cluster slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
#[must_use]
pub fn slot(key: &str) -> u16 {
    let mut crc: u16 = 0;
    for &byte in hash_tag(key).as_bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Checks a lock name: the shared rules, plus braces, plus the fast lock's waiting marks. A
/// name may carry a Redis hash tag, but only a well-formed one (`{` … non-empty … `}`), since
/// otherwise the derived fencing key could not be placed in the lock key's cluster slot the way
/// Redisson places it. A name may not contain [`WAITING_SUFFIX`] (`:distlock_waiting`): the
/// waiting mark of the fast lock `a` is `a:distlock_waiting:{a}`, which a release of `a`
/// deletes, so no lock may be named like one.
///
/// # Errors
///
/// [`Error::InvalidName`] for an empty or over-long name, braces that are not a hash tag, or a
/// name containing `:distlock_waiting`.
pub fn check_name(name: &str) -> Result<()> {
    lock_core::options::check_name(name)?;
    if (name.contains('{') || name.contains('}')) && hash_tag(name).len() == name.len() {
        return Err(Error::InvalidName {
            reason: "braces in a lock name must form a non-empty hash tag like `{user:7}:orders`",
        });
    }
    if is_waiting_key(name) {
        return Err(Error::InvalidName {
            reason: "`:distlock_waiting` is kept for the fast lock's waiting marks",
        });
    }
    Ok(())
}

/// Whether `key` is shaped like a fast lock's waiting mark ([`waiting_key`]): it contains
/// [`WAITING_SUFFIX`], which no lock name may ([`check_name`]).
#[must_use]
pub fn is_waiting_key(key: &str) -> bool {
    key.contains(WAITING_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_redisson() {
        assert_eq!(channel("orders:42"), "redisson_lock__channel:{orders:42}");
        assert_eq!(token_key("orders:42"), "redisson_lock_token:{orders:42}");
        assert_eq!(semaphore_channel("pool"), "redisson_sc:{pool}");
        assert_eq!(rw_channel("doc"), "redisson_rwlock:{doc}");
        assert_eq!(permits_key("gpu"), "{gpu}:timeout");
        assert_eq!(fair_queue("q"), "redisson_lock_queue:{q}");
        assert_eq!(election_values("e"), "distlock_leader:{e}");
        assert_eq!(election_values("{t}:e"), "distlock_leader:{t}:e");
        assert_eq!(election_channel("e"), "distlock_leader_channel:{e}");
        assert_eq!(fair_timeouts("q"), "redisson_lock_timeout:{q}");
        assert_eq!(
            fair_waiter_channel("q", "u:1"),
            "redisson_lock__channel:{q}:u:1"
        );
        assert_eq!(permits_key("{t}:gpu"), "{t}:gpu:timeout");
        assert_eq!(
            waiting_key("orders:42"),
            "orders:42:distlock_waiting:{orders:42}"
        );
        assert_eq!(waiting_key("{t}:job"), "{t}:job:distlock_waiting");
        assert_eq!(
            latch_channel("ready"),
            "redisson_countdownlatch__channel__{ready}"
        );
        assert_eq!(
            rw_timeout_key("doc", "u:1", 2),
            "{doc}:u:1:rwlock_timeout:2"
        );
        assert_eq!(
            rw_timeout_key("{t}:doc", "u:1", 1),
            "{t}:doc:u:1:rwlock_timeout:1"
        );
        assert_eq!(semaphore_channel("{t}:pool"), "redisson_sc:{t}:pool");
        assert_eq!(
            channel("{user:7}:cart"),
            "redisson_lock__channel:{user:7}:cart"
        );
    }

    #[test]
    fn derived_keys_share_the_lock_slot() {
        for name in [
            "orders:42",
            "{user:7}:cart",
            "a{b}c{d}",
            "x{tag}",
            "ünïcode",
        ] {
            check_name(name).unwrap();
            assert_eq!(slot(name), slot(&token_key(name)), "{name}");
            assert_eq!(slot(name), slot(&waiting_key(name)), "{name}");
            assert_eq!(slot(name), slot(&channel(name)), "{name}");
            assert_eq!(slot(name), slot(&semaphore_channel(name)), "{name}");
            assert_eq!(slot(name), slot(&rw_channel(name)), "{name}");
            assert_eq!(slot(name), slot(&permits_key(name)), "{name}");
            assert_eq!(slot(name), slot(&rw_writers_waiting(name)), "{name}");
            assert_eq!(slot(name), slot(&fair_queue(name)), "{name}");
            assert_eq!(slot(name), slot(&election_values(name)), "{name}");
            assert_eq!(slot(name), slot(&election_channel(name)), "{name}");
            assert_eq!(slot(name), slot(&fair_timeouts(name)), "{name}");
            assert_eq!(
                slot(name),
                slot(&fair_waiter_channel(name, "u:1")),
                "{name}"
            );
            if !name.contains('{') {
                assert_eq!(slot(name), slot(&latch_channel(name)), "{name}");
            }
            assert_eq!(slot(name), slot(&rw_timeout_key(name, "u:1", 1)), "{name}");
        }
    }

    #[test]
    fn known_slots() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot("123456789"), 12739);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{foo}bar"), 12182);
        assert_eq!(slot("{}foo"), slot("{}foo"));
    }

    #[test]
    fn rejects_braces_that_are_not_a_tag() {
        for name in ["a{}b", "a}b", "a{b", "}{"] {
            assert!(
                matches!(check_name(name), Err(Error::InvalidName { .. })),
                "{name}"
            );
        }
    }

    #[test]
    fn rejects_names_shaped_like_a_waiting_mark() {
        for name in [
            "a:distlock_waiting:{a}",
            "{t}:a:distlock_waiting",
            "jobs:distlock_waiting",
            &waiting_key("orders:42"),
        ] {
            assert!(
                matches!(check_name(name), Err(Error::InvalidName { .. })),
                "{name}"
            );
            assert!(is_waiting_key(name), "{name}");
        }
        for name in [
            "orders:42",
            "{t}:a",
            "distlock_waiting",
            "a:distlock_waitingroom:b",
        ] {
            // The last one contains the suffix: refused too, as the rule says.
            assert_eq!(
                check_name(name).is_ok(),
                !name.contains(WAITING_SUFFIX),
                "{name}"
            );
        }
    }
}

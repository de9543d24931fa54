//! The lock scripts of both lock kinds, the semaphore's scripts, the list loaded on each new connection, and the
//! commands sent whole to clean up after a call of unknown outcome. The Lua sources stay in
//! `src/scripts/`; [`lua`] hands the assembled text of the lock's two scripts to tools that run
//! the protocol raw.

use std::sync::LazyLock;

use redis::Cmd;

use crate::wire::announce::Announce;
use crate::wire::keys;
use crate::wire::lock_script::LockScript;

// The reentrant lock (Redisson's `RLock`: a hash `{owner → hold count}`).

/// Answers its usual outcome, a first hold without a token (granted, 1 hold, token 0), with the
/// bare request id.
pub(crate) static ACQUIRE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/acquire.lua")).bare(&[1, 1, 0]));
/// Answers its usual outcome, the lock freed (0), with the bare request id.
pub(crate) static RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/release.lua")).bare(&[0]));
pub(crate) static RENEW: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/renew.lua")));
/// Renewals of any slots one cluster node serves, in one script.
pub(crate) static RENEW_ACROSS_SLOTS: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/renew_across_slots.lua")));
/// Sent whole with `EVAL`, not by hash: it is the cleanup after a call of unknown outcome, and
/// should apply in one request even when the script cache is empty.
pub(crate) static ABANDON: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::sent_whole(include_str!("../scripts/abandon.lua")));
pub(crate) static FORCE_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/force_release.lua")));
pub(crate) static INSPECT: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/inspect.lua")));

// Either kind, for operators.

/// Everything about one lock name, whichever kind uses it (`RedisBackend::describe`). Not
/// preloaded: it is rarely sent, and a `NOSCRIPT` sends it whole.
pub(crate) static DESCRIBE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/describe.lua")));

// The read-write lock (Redisson's `RReadWriteLock`: the lock hash with `mode`, reader and
// `<owner>:write` fields, and a timeout key per read hold). Not preloaded, as the semaphore's.
// Its snapshot is `INSPECT`'s: the whole hash and its lease.

pub(crate) static RW_READ_ACQUIRE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/rw_read_acquire.lua")));
pub(crate) static RW_READ_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/rw_read_release.lua")));
/// The read release script lowering to a count, sent whole: the cleanup after a call of
/// unknown outcome (see [`ABANDON`]).
pub(crate) static RW_READ_ABANDON: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::sent_whole(include_str!("../scripts/rw_read_release.lua")));
pub(crate) static RW_READ_RENEW: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/rw_read_renew.lua")));
/// Read renewals of any slots one cluster node serves, in one script.
pub(crate) static RW_READ_RENEW_ACROSS_SLOTS: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/rw_read_renew_across_slots.lua")));
pub(crate) static RW_WRITE_ACQUIRE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/rw_write_acquire.lua")));
pub(crate) static RW_WRITE_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/rw_write_release.lua")));
/// The write release script lowering to a count, sent whole (see [`RW_READ_ABANDON`]).
pub(crate) static RW_WRITE_ABANDON: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::sent_whole(include_str!("../scripts/rw_write_release.lua")));
pub(crate) static RW_LEAVE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/rw_leave.lua")));
pub(crate) static RW_FORCE_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/rw_force_release.lua")));

// Leader election (distlock's own, on the reentrant lock's hash plus the leader values). Read
// with `ELECTION_LEADER`; the lock's other reads are the reentrant lock's. Not preloaded.

pub(crate) static ELECTION_ACQUIRE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/election_acquire.lua")));
pub(crate) static ELECTION_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/election_release.lua")));
/// The release script lowering to a count, sent whole (see [`ABANDON`]).
pub(crate) static ELECTION_ABANDON: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::sent_whole(include_str!("../scripts/election_release.lua")));
pub(crate) static ELECTION_RENEW: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/election_renew.lua")));
/// Leadership renewals of any slots one cluster node serves, in one script.
pub(crate) static ELECTION_RENEW_ACROSS_SLOTS: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/election_renew_across_slots.lua")));
pub(crate) static ELECTION_FORCE_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/election_force_release.lua")));
pub(crate) static ELECTION_LEADER: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/election_leader.lua")));

// The fair lock (Redisson's `RFairLock`: the lock hash as `RLock`'s, a queue of waiting owner
// fields and their deadlines). Renewed and read with the reentrant lock's scripts. Not
// preloaded.

pub(crate) static FAIR_ACQUIRE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fair_acquire.lua")));
pub(crate) static FAIR_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fair_release.lua")));
/// The release script lowering to a count, sent whole (see [`ABANDON`]).
pub(crate) static FAIR_ABANDON: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::sent_whole(include_str!("../scripts/fair_release.lua")));
pub(crate) static FAIR_LEAVE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fair_leave.lua")));
pub(crate) static FAIR_FORCE_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fair_force_release.lua")));
pub(crate) static FAIR_STATE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fair_state.lua")));

// Lease-bound permits (Redisson's `RPermitExpirableSemaphore`: the semaphore's count and the
// sorted set of permits out, scored by the end of their leases). Not preloaded.

pub(crate) static PERMIT_ACQUIRE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/permit_acquire.lua")));
pub(crate) static PERMIT_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/permit_release.lua")));
/// The release script lowering to a count, sent whole (see [`ABANDON`]).
pub(crate) static PERMIT_ABANDON: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::sent_whole(include_str!("../scripts/permit_release.lua")));
pub(crate) static PERMIT_RENEW: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/permit_renew.lua")));
/// Permit renewals of any slots one cluster node serves, in one script.
pub(crate) static PERMIT_RENEW_ACROSS_SLOTS: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/permit_renew_across_slots.lua")));
pub(crate) static PERMIT_FORCE_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/permit_force_release.lua")));
pub(crate) static PERMIT_STATE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/permit_state.lua")));

// The countdown latch (Redisson's `RCountDownLatch`: a string holding the count). Read with
// `SEMAPHORE_READ` (a plain read of a count). Not preloaded.

pub(crate) static LATCH_SET: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/latch_set.lua")));
pub(crate) static LATCH_COUNT_DOWN: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/latch_count_down.lua")));
pub(crate) static LATCH_DELETE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/latch_delete.lua")));

// The semaphore (Redisson's `RSemaphore`: a string holding the available permits). Not
// preloaded: a `NOSCRIPT` sends each whole once per connection, and a backend that never uses
// a semaphore loads none.

pub(crate) static SEMAPHORE_TAKE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/semaphore_take.lua")));
/// A release and `add_permits` alike: both add to the count and announce it.
pub(crate) static SEMAPHORE_ADD: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/semaphore_add.lua")));
pub(crate) static SEMAPHORE_SET: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/semaphore_set.lua")));
pub(crate) static SEMAPHORE_RESET: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/semaphore_reset.lua")));
pub(crate) static SEMAPHORE_DRAIN: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/semaphore_drain.lua")));
pub(crate) static SEMAPHORE_DELETE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/semaphore_delete.lua")));
pub(crate) static SEMAPHORE_READ: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/semaphore_read.lua")));

// The fast lock (a plain string key holding its owner): only what native commands cannot do.

pub(crate) static FAST_ACQUIRE_FENCED: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fast_acquire_fenced.lua")));
/// How many keys `fast_release.lua` takes (see [`fast_release_arguments`]).
pub(crate) const FAST_RELEASE_KEYS: usize = 2;
/// Answers its usual outcome, the lock deleted (1), with the bare request id; its request id
/// is optional (the hot path of the fast lock: see [`fast_release_arguments`]).
pub(crate) static FAST_RELEASE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(include_str!("../scripts/fast_release.lua"))
        .bare(&[1])
        .optional_id()
});
pub(crate) static FAST_RENEW: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fast_renew.lua")));
/// Renewals of any slots one cluster node serves, in one script.
pub(crate) static FAST_RENEW_ACROSS_SLOTS: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fast_renew_across_slots.lua")));
pub(crate) static FAST_FORCE_RELEASE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fast_force_release.lua")));
pub(crate) static FAST_INSPECT: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fast_inspect.lua")));
/// A held fast lock's TTL, and its waiting mark set (an attempt while a local waiter waits).
pub(crate) static FAST_HELD: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(include_str!("../scripts/fast_held.lua")));

/// Every script sent by hash, loaded on each new connection.
pub(crate) fn preloaded() -> [&'static LockScript; 13] {
    [
        &ACQUIRE,
        &RELEASE,
        &RENEW,
        &RENEW_ACROSS_SLOTS,
        &FORCE_RELEASE,
        &INSPECT,
        &FAST_ACQUIRE_FENCED,
        &FAST_RELEASE,
        &FAST_RENEW,
        &FAST_RENEW_ACROSS_SLOTS,
        &FAST_FORCE_RELEASE,
        &FAST_INSPECT,
        &FAST_HELD,
    ]
}

/// The keys and arguments of `fast_release.lua` (before the request id): its two keys, the
/// lock and its waiting mark ([`FAST_RELEASE_KEYS`]), the owner, and how to announce the
/// release, in capitals when `waited_for` (the releasing client has waiters for the lock: the
/// release is announced whether the lock was marked or not). The script derives the channel
/// and the message itself, and takes plain `PUBLISH` (`p`) when the announcement is left out,
/// which it is when no request id follows (`id_follows`: the script tells the two apart by
/// their count): each argument costs the server about as much as a command.
pub(crate) fn fast_release_arguments(
    command: &mut Cmd,
    name: &str,
    owner_field: &str,
    announce: Announce,
    waited_for: bool,
    id_follows: bool,
) {
    command
        .arg(name)
        .arg(keys::waiting_key(name))
        .arg(owner_field);
    let how = if waited_for {
        announce.arg_always()
    } else {
        announce.arg()
    };
    if id_follows || how != Announce::Plain.arg() {
        command.arg(how);
    }
}

/// The compare-and-delete script of the fast lock as one `EVAL`, for replaying a cleanup on a
/// new connection. It announces the release whether the lock was marked or not: a replayed
/// cleanup is rare, and the client's waiters then may have missed a release.
pub(crate) fn fast_release_command(
    name: &str,
    owner_field: &str,
    announce: Announce,
    request_id: u64,
) -> Cmd {
    FAST_RELEASE.command(
        true,
        FAST_RELEASE_KEYS,
        |command| fast_release_arguments(command, name, owner_field, announce, true, true),
        Some(request_id),
    )
}

/// The reentrant lock's scripts as the server receives them (their `--#include` fragments
/// spliced in), for tools that run the protocol without the client: lockbench's `raw-script`
/// rows send them by `EVALSHA` with the keys and arguments `RedisBackend` sends.
pub mod lua {
    use std::sync::LazyLock;

    /// The acquire script (take, re-enter, or report the holder's TTL).
    ///
    /// ```
    /// assert!(lock_redis::lua::acquire().starts_with("#!lua"));
    /// assert!(!lock_redis::lua::acquire().contains("--#include"));
    /// ```
    pub fn acquire() -> &'static str {
        LazyLock::force(&super::ACQUIRE).source()
    }

    /// The release script (give back one hold; the last one deletes and announces).
    ///
    /// ```
    /// assert!(lock_redis::lua::release().contains("local function announce("));
    /// ```
    pub fn release() -> &'static str {
        LazyLock::force(&super::RELEASE).source()
    }
}

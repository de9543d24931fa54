//! The read-write lock: Redisson's `RReadWriteLock`, the lock hash with `mode`, each reader's
//! hold count under its owner field, the writer's under `<owner>:write`, and one timeout key
//! per read hold; both sides' operations, each one Lua script.

use std::sync::Arc;

use lock_core::fair_backend::QUEUE_TIMEOUT;
use lock_core::{AcquireRequest, Error, LockState, ReadWriteMode, ReadWriteState, Result};

use crate::call::Calls;
use crate::kind::family::{GiveBack, Primitive, ScriptCall};
use crate::wire::announce::Announce;
use crate::wire::keys;
use crate::wire::lock_script::LockScript;
use crate::wire::reply::{millis, ttl_from_pttl};
use crate::wire::scripts::{
    INSPECT, RENEW, RENEW_ACROSS_SLOTS, RW_FORCE_RELEASE, RW_LEAVE, RW_READ_ABANDON,
    RW_READ_ACQUIRE, RW_READ_RELEASE, RW_READ_RENEW, RW_READ_RENEW_ACROSS_SLOTS, RW_WRITE_ABANDON,
    RW_WRITE_ACQUIRE, RW_WRITE_RELEASE,
};

/// One side of the lock, a [`Primitive`] of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Read,
    /// The write side; `prefer`: writers preferred (a waiting writer holds new readers back).
    Write {
        prefer: bool,
    },
}

impl Side {
    fn mode(self) -> &'static str {
        match self {
            Side::Read => "read",
            Side::Write { .. } => "write",
        }
    }

    /// The hash field this side counts `owner_field`'s holds under.
    fn field(self, owner_field: &str) -> String {
        match self {
            Side::Read => owner_field.to_owned(),
            Side::Write { .. } => format!("{owner_field}{}", keys::WRITE_FIELD_SUFFIX),
        }
    }
}

impl Primitive for Side {
    fn acquire(self, calls: &Calls, request: &AcquireRequest<'_>) -> ScriptCall {
        let write_field = Side::Write { prefer: false }.field(request.owner_field);
        let (script, first, second): (&'static LockScript, &str, &str) = match self {
            Side::Read => (&RW_READ_ACQUIRE, request.owner_field, &write_field),
            Side::Write { .. } => (&RW_WRITE_ACQUIRE, &write_field, request.owner_field),
        };
        let call = ScriptCall::new(script, request.name)
            .key(keys::token_key(request.name))
            .key(keys::rw_writers_waiting(request.name))
            .arg(millis(request.lease))
            .arg(first)
            .arg(second)
            .arg(calls.token_flag(request.fencing));
        match self {
            Side::Read => call,
            // The request id follows; the writer's preference and its place's length come
            // before it.
            Side::Write { prefer } => call
                .arg(if prefer && request.waits { "1" } else { "0" })
                .arg(millis(QUEUE_TIMEOUT)),
        }
    }

    /// An owner that reads cannot upgrade: it would wait for itself.
    fn refusal(self, reply: &[i64], name: &str) -> Option<Error> {
        (reply == [-1]).then(|| Error::UpgradeRefused {
            name: name.to_owned(),
        })
    }

    fn release_scripts(self) -> (&'static LockScript, &'static LockScript) {
        match self {
            Side::Read => (&RW_READ_RELEASE, &RW_READ_ABANDON),
            Side::Write { .. } => (&RW_WRITE_RELEASE, &RW_WRITE_ABANDON),
        }
    }

    /// The release of the hash field of the owner on this side; the read side's script also
    /// reads the writers waiting, the write side's lengthens the holds left to the lease.
    fn release(self, call: ScriptCall, give_back: &GiveBack<'_>) -> ScriptCall {
        let field = self.field(give_back.owner_field);
        let call = match self {
            Side::Read => call
                .key(keys::rw_writers_waiting(give_back.name))
                .arg(field)
                .arg(give_back.keep_arg()),
            Side::Write { .. } => call
                .arg(field)
                .arg(give_back.keep_arg())
                .arg(millis(give_back.lease)),
        };
        call.arg(keys::rw_channel(give_back.name))
            .arg(give_back.announce.arg())
    }

    /// The read side renews each owner's timeout keys too; the write side is the plain lock's
    /// renewal (of the `<owner>:write` field: see [`Primitive::hold_field`]).
    fn renew_scripts(self) -> (&'static LockScript, &'static LockScript) {
        match self {
            Side::Read => (&RW_READ_RENEW, &RW_READ_RENEW_ACROSS_SLOTS),
            Side::Write { .. } => (&RENEW, &RENEW_ACROSS_SLOTS),
        }
    }

    fn hold_field(self, owner_field: &str) -> Option<String> {
        matches!(self, Side::Write { .. }).then(|| self.field(owner_field))
    }

    /// Deletes the lock when it is held in this side's mode.
    fn force_release(self, name: &str, announce: Announce) -> ScriptCall {
        ScriptCall::new(&RW_FORCE_RELEASE, name)
            .arg(self.mode())
            .arg(keys::rw_channel(name))
            .arg(announce.arg())
    }
}

/// `LockBackend::leave_queue` of a writer-preferring write side: the writer no longer waits.
pub(crate) async fn leave_queue(calls: &Arc<Calls>, name: &str, owner_field: &str) -> Result<()> {
    let (_was,): (i64,) = calls
        .run_behind(name, &RW_LEAVE, 1, calls.call_timeout(None), |command| {
            command
                .arg(keys::rw_writers_waiting(name))
                .arg(owner_field)
                .arg(keys::rw_channel(name))
                .arg(calls.announce().arg());
        })
        .await?;
    Ok(())
}

/// `ReadWriteBackend::read_write_state`: the whole hash and its lease, read at once.
pub(crate) async fn state(calls: &Calls, name: &str) -> Result<ReadWriteState> {
    let (flat, pttl): (Vec<String>, i64) = calls
        .run(name, &INSPECT, 1, calls.call_timeout(None), |command| {
            command.arg(name);
        })
        .await?;
    let mut mode = None;
    let mut readers = Vec::new();
    let mut writer = None;
    for pair in flat.chunks_exact(2) {
        let (field, value) = (&pair[0], &pair[1]);
        if field == "mode" {
            mode = match value.as_str() {
                "read" => Some(ReadWriteMode::Read),
                "write" => Some(ReadWriteMode::Write),
                other => {
                    return Err(Error::Protocol(
                        format!("read-write lock mode {other:?}").into(),
                    ));
                }
            };
            continue;
        }
        let held: u32 = value
            .parse()
            .map_err(|_| Error::Protocol(format!("hold count {value:?} is not a number").into()))?;
        match field.strip_suffix(keys::WRITE_FIELD_SUFFIX) {
            Some(owner) => writer = Some((owner.to_owned(), held)),
            None => readers.push((field.clone(), held)),
        }
    }
    if mode.is_none() && !flat.is_empty() {
        return Err(Error::WrongType(
            format!("{name:?} is a plain lock, not a read-write lock").into(),
        ));
    }
    readers.sort();
    let ttl = mode.and_then(|_| ttl_from_pttl(pttl));
    Ok(ReadWriteState::new(mode, readers, writer, ttl))
}

/// `LockBackend::inspect` of `side`: that side's holders.
pub(crate) async fn inspect(calls: &Calls, side: Side, name: &str) -> Result<LockState> {
    let state = state(calls, name).await?;
    let holders = match side {
        Side::Read => state.readers,
        Side::Write { .. } => state.writer.into_iter().collect(),
    };
    let ttl = state.ttl.filter(|_| !holders.is_empty());
    Ok(LockState::new(holders, ttl))
}

//! The read-write lock: Redisson's `RReadWriteLock`, the lock hash with `mode`, each reader's
//! hold count under its owner field, the writer's under `<owner>:write`, and one timeout key
//! per read hold; both sides' operations, each one Lua script.

use std::sync::Arc;

use lock_core::fair_backend::QUEUE_TIMEOUT;
use lock_core::{
    AcquireOutcome, AcquireRequest, Error, LockState, ReleaseOutcome, RenewOutcome, Renewal,
    Result, RwMode, RwState,
};

use crate::call::Calls;
use crate::kind::counted::{self, ReleaseCall};
use crate::kind::{replicated, scripted};
use crate::wire::announce::Announce;
use crate::wire::keys;
use crate::wire::lock_script::LockScript;
use crate::wire::reply::{acquire_outcome, millis, ttl_from_pttl};
use crate::wire::scripts::{
    INSPECT, RENEW, RENEW_ACROSS_SLOTS, RW_FORCE_RELEASE, RW_LEAVE, RW_READ_ABANDON,
    RW_READ_ACQUIRE, RW_READ_RELEASE, RW_READ_RENEW, RW_READ_RENEW_ACROSS_SLOTS, RW_WRITE_ABANDON,
    RW_WRITE_ACQUIRE, RW_WRITE_RELEASE,
};

/// One side of the lock.
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

    /// How many keys the side's release script declares (the read side's also reads the
    /// writers waiting).
    fn release_keys(self) -> usize {
        match self {
            Side::Read => 2,
            Side::Write { .. } => 1,
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

/// `LockBackend::try_acquire` of `side` (given back, and refused, on a replica shortfall as the
/// plain lock's).
pub(crate) async fn try_acquire(
    calls: &Arc<Calls>,
    side: Side,
    request: AcquireRequest<'_>,
) -> Result<AcquireOutcome> {
    let token_key = keys::token_key(request.name);
    let writers = keys::rw_writers_waiting(request.name);
    let write_field = Side::Write { prefer: false }.field(request.owner_field);
    let (script, first, second): (&LockScript, &str, &str) = match side {
        Side::Read => (&RW_READ_ACQUIRE, request.owner_field, &write_field),
        Side::Write { .. } => (&RW_WRITE_ACQUIRE, &write_field, request.owner_field),
    };
    let (reply, acknowledged): (Vec<i64>, _) = calls
        .run_write(
            request.name,
            script,
            3,
            calls.call_timeout(Some(request.lease)),
            |command| {
                command
                    .arg(request.name)
                    .arg(&token_key)
                    .arg(&writers)
                    .arg(millis(request.lease))
                    .arg(first)
                    .arg(second)
                    .arg(calls.token_flag(request.fencing));
                if let Side::Write { prefer } = side {
                    // The request id follows; the writer's preference and its place's length
                    // come before it.
                    command
                        .arg(if prefer && request.waits { "1" } else { "0" })
                        .arg(millis(QUEUE_TIMEOUT));
                }
            },
        )
        .await?;
    if reply == [-1] {
        return Err(Error::UpgradeRefused {
            name: request.name.to_owned(),
        });
    }
    let outcome = acquire_outcome(&reply, request.fencing)?;
    replicated::grant_stands(calls, request.name, outcome, acknowledged, || {
        abandon(
            calls,
            side,
            request.name,
            request.owner_field,
            request.known_holds,
        )
    })
    .await
}

/// One call of `side`'s release script for its hash field `field`: one hold less
/// (`keep: None`, the rest lengthened to `lease`) or down to `keep`.
fn release_call(
    side: Side,
    name: &str,
    field: &str,
    keep: Option<u32>,
    lease: std::time::Duration,
    announce: Announce,
) -> ReleaseCall {
    let mut arguments = vec![name.to_owned()];
    if side == Side::Read {
        arguments.push(keys::rw_writers_waiting(name));
    }
    arguments.push(field.to_owned());
    arguments.push(keep.map_or_else(String::new, |keep| keep.to_string()));
    if let Side::Write { .. } = side {
        arguments.push(millis(lease).to_string());
    }
    arguments.push(keys::rw_channel(name));
    arguments.push(announce.arg().to_owned());
    ReleaseCall {
        name: name.to_owned(),
        keys: side.release_keys(),
        arguments,
    }
}

/// `LockBackend::release` of `side`.
pub(crate) async fn release(
    calls: &Arc<Calls>,
    side: Side,
    name: &str,
    owner_field: &str,
    lease: std::time::Duration,
) -> Result<ReleaseOutcome> {
    let script = match side {
        Side::Read => &RW_READ_RELEASE,
        Side::Write { .. } => &RW_WRITE_RELEASE,
    };
    let call = release_call(
        side,
        name,
        &side.field(owner_field),
        None,
        lease,
        calls.announce(),
    );
    counted::release(calls, script, &call).await
}

/// `LockBackend::renew` of `side`: the read side renews each owner's timeout keys too; the
/// write side is the plain lock's renewal of the `<owner>:write` field.
pub(crate) async fn renew(
    calls: &Arc<Calls>,
    side: Side,
    renewals: &[Renewal<'_>],
) -> Result<Vec<RenewOutcome>> {
    match side {
        Side::Read => {
            scripted::renew(calls, &RW_READ_RENEW, &RW_READ_RENEW_ACROSS_SLOTS, renewals).await
        }
        Side::Write { .. } => {
            let fields: Vec<String> = renewals
                .iter()
                .map(|renewal| side.field(renewal.owner_field))
                .collect();
            let renewals: Vec<Renewal<'_>> = renewals
                .iter()
                .zip(&fields)
                .map(|(renewal, field)| Renewal {
                    owner_field: field,
                    ..*renewal
                })
                .collect();
            scripted::renew(calls, &RENEW, &RENEW_ACROSS_SLOTS, &renewals).await
        }
    }
}

/// `LockBackend::abandon` of `side`: the release script lowering to `keep`, sent whole (see
/// [`counted::abandon`]).
pub(crate) async fn abandon(
    calls: &Arc<Calls>,
    side: Side,
    name: &str,
    owner_field: &str,
    keep: u32,
) -> Result<()> {
    let script = match side {
        Side::Read => &RW_READ_ABANDON,
        Side::Write { .. } => &RW_WRITE_ABANDON,
    };
    let call = release_call(
        side,
        name,
        &side.field(owner_field),
        Some(keep),
        std::time::Duration::ZERO,
        calls.announce(),
    );
    counted::abandon(calls, script, call).await
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

/// `LockBackend::force_release` of `side`: deletes the lock when it is held in that mode.
pub(crate) async fn force_release(calls: &Calls, side: Side, name: &str) -> Result<bool> {
    let channel = keys::rw_channel(name);
    let (deleted,): (i64,) = calls
        .run(
            name,
            &RW_FORCE_RELEASE,
            1,
            calls.call_timeout(None),
            |command| {
                command
                    .arg(name)
                    .arg(side.mode())
                    .arg(&channel)
                    .arg(calls.announce().arg());
            },
        )
        .await?;
    Ok(deleted == 1)
}

/// `ReadWriteBackend::rw_state`: the whole hash and its lease, read at once.
pub(crate) async fn state(calls: &Calls, name: &str) -> Result<RwState> {
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
                "read" => Some(RwMode::Read),
                "write" => Some(RwMode::Write),
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
    Ok(RwState::new(mode, readers, writer, ttl))
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

//! The fast lock (`LockKind::Fast`): a plain string key holding its owner.
//!
//! Taking it is `SET name owner NX PX lease`, a native command that costs the server about half
//! of a Lua script; giving it back is a compare-and-delete, native where the server has one
//! (`DELIFEQ` on Valkey 9, `DELEX … IFEQ` on Redis 8.4) and a short script otherwise, plus the
//! same release message on the same channel as the reentrant lock. Plain commands cannot echo
//! a request id the way the scripts do, so each call is a pipeline ending in `PING <id>` (see
//! `Calls::send_coalesced`). Everything that must look at the key before writing (a
//! fencing token, renewals, inspection, force-release) stays a script.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Error, Grant, LockState, ReleaseOutcome, RenewOutcome, Renewal,
    Result,
};
use redis::{Cmd, Value};

use crate::call::{Acknowledged, Calls};
use crate::connection::deferred::Deferred;
use crate::kind::{replicated, scripted};
use crate::wire::announce::Announce;
use crate::wire::capabilities::{Capabilities, Capability};
use crate::wire::errors::map_error;
use crate::wire::keys;
use crate::wire::reply::{acquire_outcome, millis, ttl_from_pttl};
use crate::wire::scripts::{
    FAST_ACQUIRE_FENCED, FAST_FORCE_RELEASE, FAST_INSPECT, FAST_RELEASE, FAST_RENEW,
    FAST_RENEW_ACROSS_SLOTS, fast_release_arguments, fast_release_command,
};

/// The server's own compare-and-delete, if it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NativeDelete {
    /// Valkey 9: `DELIFEQ key value`.
    DelIfEq,
    /// Redis 8.4: `DELEX key IFEQ value`.
    DelExIfEq,
    /// Neither: the `fast_release.lua` script.
    None,
}

impl NativeDelete {
    /// The server's compare-and-delete as the capability probe found it (the probe runs
    /// each on a missing key, so an ACL that refuses it shows as well as a server without it).
    pub(crate) fn of(capabilities: &Capabilities) -> NativeDelete {
        if capabilities.get(Capability::DelIfEq).is_yes() {
            NativeDelete::DelIfEq
        } else if capabilities.get(Capability::DelEx).is_yes() {
            NativeDelete::DelExIfEq
        } else {
            NativeDelete::None
        }
    }
}

/// `LockBackend::try_acquire`: `SET NX PX` in a (coalesced) pipeline, then `PTTL` when the
/// lock is held; the fenced-acquire script when a token is asked for.
pub(crate) async fn try_acquire(
    calls: &Arc<Calls>,
    request: AcquireRequest<'_>,
) -> Result<AcquireOutcome> {
    let (outcome, acknowledged) = acquire_once(calls, request).await?;
    // Not reentrant: a grant is the owner's only hold; give it back, then refuse.
    replicated::grant_stands(calls, request.name, outcome, acknowledged, || {
        abandon(calls, request.name, request.owner_field, 0)
    })
    .await
}

/// One attempt, and what the replicas said of its write (when they were asked).
async fn acquire_once(
    calls: &Arc<Calls>,
    request: AcquireRequest<'_>,
) -> Result<(AcquireOutcome, Acknowledged)> {
    let timeout = calls.call_timeout(Some(request.lease));
    if request.fencing {
        let token_key = keys::token_key(request.name);
        let (reply, acknowledged): (Vec<i64>, _) = calls
            .run_write(request.name, &FAST_ACQUIRE_FENCED, 2, timeout, |command| {
                command
                    .arg(request.name)
                    .arg(&token_key)
                    .arg(millis(request.lease))
                    .arg(request.owner_field)
                    .arg(calls.token_flag(true));
            })
            .await?;
        return Ok((acquire_outcome(&reply, true)?, acknowledged));
    }
    let mut set = redis::cmd("SET");
    set.arg(request.name)
        .arg(request.owner_field)
        .arg("NX")
        .arg("PX")
        .arg(millis(request.lease));
    let mut attempt = 1;
    loop {
        let (replies, acknowledged) = calls.send_write(vec![set.clone()], timeout).await?;
        match replies.first() {
            Some(Value::Okay) => return Ok((acquired(), acknowledged)),
            Some(Value::SimpleString(ok)) if ok == "OK" => return Ok((acquired(), acknowledged)),
            // Held: a second round trip for how long, so the waiter's timer is capped by it.
            // Only the contended path pays it.
            Some(Value::Nil) => {
                let mut pttl = redis::cmd("PTTL");
                pttl.arg(request.name);
                let replies = calls.send_coalesced(vec![pttl], timeout).await?;
                match replies.first() {
                    // The key expired (or was released) between the SET and the PTTL: the
                    // lock is free, so take it now rather than have the waiter sleep without
                    // a TTL to cap it.
                    Some(Value::Int(-2)) if attempt < SET_ATTEMPTS => attempt += 1,
                    // Still gone after every attempt (the name is changing hands quickly):
                    // have the waiter look again at once.
                    Some(Value::Int(-2)) => {
                        let held = AcquireOutcome::Held {
                            ttl: Some(Duration::ZERO),
                        };
                        return Ok((held, None));
                    }
                    // A TTL, or -1 (no expiry: `None`).
                    Some(Value::Int(pttl)) => {
                        let held = AcquireOutcome::Held {
                            ttl: ttl_from_pttl(*pttl),
                        };
                        return Ok((held, None));
                    }
                    // Refused (an ACL without `+pttl`): in step, as the pipeline's echo said.
                    Some(Value::ServerError(error)) => {
                        return Err(map_error(&error.clone().into(), timeout));
                    }
                    other => {
                        return Err(Error::Protocol(format!("PTTL answered {other:?}").into()));
                    }
                }
            }
            Some(Value::ServerError(error)) => {
                return Err(map_error(&error.clone().into(), timeout));
            }
            other => return Err(Error::Protocol(format!("SET NX answered {other:?}").into())),
        }
    }
}

/// How many times `try_acquire` sends `SET NX` when the key it found taken is gone by the time
/// it asks for the key's TTL.
const SET_ATTEMPTS: u32 = 3;

fn acquired() -> AcquireOutcome {
    AcquireOutcome::Acquired(Grant {
        hold_count: 1,
        fencing_token: None,
    })
}

/// Gives the lock back if `owner` holds it, with the server's own compare-and-delete when
/// `native_delete` names one.
pub(crate) async fn release(
    calls: &Arc<Calls>,
    native_delete: NativeDelete,
    name: &str,
    owner_field: &str,
) -> Result<ReleaseOutcome> {
    let timeout = calls.call_timeout(None);
    let channel = keys::channel(name);
    let deleted = match native_delete {
        NativeDelete::None => {
            let ((deleted,), acknowledged): ((i64,), _) = calls
                .run_write(name, &FAST_RELEASE, 1, timeout, |command| {
                    fast_release_arguments(command, name, owner_field, &channel, calls.announce());
                })
                .await?;
            replicated::log_release(calls, name, acknowledged);
            deleted
        }
        native => {
            // The release message goes out even when nothing was deleted (the lease had run
            // out): a pipeline cannot make it conditional, and a spare wake-up only makes a
            // waiter look again.
            let mut delete = match native {
                NativeDelete::DelIfEq => redis::cmd("DELIFEQ"),
                _ => redis::cmd("DELEX"),
            };
            delete.arg(name);
            if native != NativeDelete::DelIfEq {
                delete.arg("IFEQ");
            }
            delete.arg(owner_field);
            let mut commands = vec![delete];
            commands.extend(calls.announce().commands(name));
            let (replies, acknowledged) = calls.send_write(commands, timeout).await?;
            replicated::log_release(calls, name, acknowledged);
            match replies.first() {
                Some(Value::Int(deleted)) => *deleted,
                Some(Value::ServerError(error)) => {
                    return Err(map_error(&error.clone().into(), timeout));
                }
                other => {
                    return Err(Error::Protocol(
                        format!("DELIFEQ answered {other:?}").into(),
                    ));
                }
            }
        }
    };
    Ok(if deleted == 1 {
        ReleaseOutcome::Released
    } else {
        ReleaseOutcome::NotHeld
    })
}

/// A fast lock has at most one hold per owner: with `keep ≥ 1` the owner still holds it and
/// nothing changes; with `keep = 0` it is given back if it is the owner's.
pub(crate) async fn abandon(
    calls: &Arc<Calls>,
    name: &str,
    owner_field: &str,
    keep: u32,
) -> Result<()> {
    if keep >= 1 {
        return Ok(());
    }
    // The compare-and-delete script, without a replica wait (the replicas may be the very
    // reason for it), written after every pipeline under way: one of them may carry the call
    // this cleans up after (its caller gone), which must reach the server first. As for the
    // reentrant lock, kept for the new connection, first in line, when it cannot go out now.
    let channel = keys::channel(name);
    let (started, timeout) = (tokio::time::Instant::now(), calls.call_timeout(None));
    let given_back: Result<(i64,)> = calls
        .run_behind(name, &FAST_RELEASE, 1, timeout, |command| {
            fast_release_arguments(command, name, owner_field, &channel, calls.announce());
        })
        .await;
    calls
        .settle_cleanup(given_back, started, timeout, || {
            Arc::new(Cleanup {
                name: name.to_owned(),
                owner_field: owner_field.to_owned(),
                announce: calls.announce(),
            })
        })
        .await
}

/// `LockBackend::renew` with the fast renew script.
pub(crate) async fn renew(
    calls: &Arc<Calls>,
    renewals: &[Renewal<'_>],
) -> Result<Vec<RenewOutcome>> {
    scripted::renew(calls, &FAST_RENEW, &FAST_RENEW_ACROSS_SLOTS, renewals).await
}

/// `LockBackend::force_release` with the fast force-release script.
pub(crate) async fn force_release(calls: &Calls, name: &str) -> Result<bool> {
    scripted::force_release(calls, &FAST_FORCE_RELEASE, name).await
}

/// `LockBackend::inspect` with the fast inspect script.
pub(crate) async fn inspect(calls: &Calls, name: &str) -> Result<LockState> {
    scripted::inspect(calls, &FAST_INSPECT, name).await
}

/// A release that could not be sent: the compare-and-delete script, replayed whole on the next
/// connection.
struct Cleanup {
    name: String,
    owner_field: String,
    announce: Announce,
}

impl Deferred for Cleanup {
    fn route(&self) -> &str {
        &self.name
    }

    fn command(&self, request_id: u64) -> Cmd {
        fast_release_command(&self.name, &self.owner_field, self.announce, request_id)
    }
}

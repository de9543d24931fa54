//! The fast lock (`LockKind::Fast`): a plain string key holding its owner.
//!
//! Taking it is `SET name owner NX PX lease`, a native command that costs the server about half
//! of a Lua script; giving it back is a compare-and-delete, native where the server has one
//! (`DELIFEQ` on Valkey 9, `DELEX … IFEQ` on Redis 8.4) and a short script otherwise, plus the
//! same release message on the same channel as the reentrant lock. Plain commands cannot echo
//! a request id the way the scripts do, so each call is a pipeline ending in `PING <id>` (see
//! `Calls::send_coalesced`). Where scripts run, everything that must look at the key before
//! writing (a fencing token, renewals, inspection, force-release) is a script; on a server that
//! runs no script but has the native compare-and-set and compare-and-delete (Valkey 9 with
//! scripting denied by its ACL), renewals are `SET … IFEQ … PX`, inspection `GET` and `PTTL`,
//! and a force-release a `GET` then a compare-and-delete of what it read; a fencing token is
//! refused (see `docs/deployments.md`, "Without scripts").

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Error, Grant, LockState, ReleaseOutcome, RenewOutcome, Renewal,
    Result,
};
use redis::{Cmd, Pipeline, Value};

use crate::call::{Acknowledged, Calls};
use crate::connection::deferred::{self, Deferred};
use crate::kind::{replicated, scripted};
use crate::wire::announce::Announce;
use crate::wire::capabilities::{Capabilities, Capability};
use crate::wire::errors::map_error;
use crate::wire::keys;
use crate::wire::reply::{acquire_outcome, millis, ttl_from_pttl};
use crate::wire::scripts::{
    FAST_ACQUIRE_FENCED, FAST_FORCE_RELEASE, FAST_HELD, FAST_INSPECT, FAST_RELEASE,
    FAST_RELEASE_KEYS, FAST_RENEW, FAST_RENEW_ACROSS_SLOTS, fast_release_arguments,
    fast_release_command,
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
/// lock is held; the fenced-acquire script when a token is asked for. With `waited_for` (a
/// waiter of this client watches the lock's releases: `RedisBackend::waited_for`) an attempt
/// that finds the lock held also marks it as waited for, so that its release, whoever makes
/// it, announces itself ([`mark_waiting`]). An attempt of a caller that waits
/// (`request.waits`) reports at most [`MARK_TTL`]` / 2` as the time left, so that the waiter
/// looks again (and marks again) before its mark lapses; also when it does not watch the name
/// here (its subscription failed): a composite (RedLock, MultiLock) sleeps for the longest time
/// its nodes report, and a long lease on such a node would otherwise outlast the marks its
/// waiter set on the others, whose releases would then go unannounced while it sleeps.
pub(crate) async fn try_acquire(
    calls: &Arc<Calls>,
    native_delete: NativeDelete,
    request: AcquireRequest<'_>,
    waited_for: bool,
) -> Result<AcquireOutcome> {
    let (outcome, acknowledged) = acquire_once(calls, request, waited_for).await?;
    let outcome = match outcome {
        AcquireOutcome::Held { ttl: Some(ttl) } if waited_for || request.waits => {
            AcquireOutcome::Held {
                ttl: Some(ttl.min(MARK_TTL / 2)),
            }
        }
        outcome => outcome,
    };
    // Not reentrant: a grant is the owner's only hold; give it back, then refuse.
    replicated::grant_stands(calls, request.name, outcome, acknowledged, || {
        abandon(calls, native_delete, request.name, request.owner_field, 0)
    })
    .await
}

/// How long a waiting mark lives after the attempt that set it (a later mark moves its end
/// later, never sooner: every mark is set for this long).
pub(crate) const MARK_TTL: Duration = Duration::from_secs(60);

/// The waiting mark an attempt sets when it finds the lock held while a waiter of its client
/// waits for it: `SET <name>:distlock_waiting:{<name>} 1 PX 60000` ([`keys::waiting_key`],
/// [`MARK_TTL`]).
///
/// The scripted release (`fast_release.lua`) deletes the mark with the lock and announces
/// itself only when the mark was there or the releasing client has waiters of its own, so a
/// lock nobody waits for is released without a `PUBLISH`. What keeps every waiter woken:
/// - a waiter registers (subscribes) before the attempt that sets the mark, so a release after
///   the mark reaches it, and a release before it left the lock free for that attempt (or for
///   a taker whose own release then finds the mark);
/// - a release wakes one waiter per client; if it loses, its attempt marks the lock again for
///   its client's waiters still asleep; if it wins, its release announces itself because its
///   client still has waiters (a waiter cancelled after its wake-up hands it on, as before);
/// - a waiter relying on a mark sleeps at most half the mark's life between looks, and each
///   look that finds the lock held marks it again;
/// - a lost notification connection wakes every waiter, whose attempts mark again.
///
/// Marks are set whichever release the client uses, so that a client on the native
/// compare-and-delete (which always announces: a pipeline cannot make it conditional) and one
/// on the script can share names. A mark left behind (the lock expired unreleased, a native
/// release, a force-release) lapses by itself; until then each release announces, which wakes
/// nobody or makes a waiter look again. The mark is its own command, never in a pipeline with
/// the `SET NX` (a pipeline with two keys is sent again whole after an `ASK` while its slot
/// moves, and would write the lock on the importing node).
fn mark_waiting(name: &str) -> Cmd {
    let mut mark = redis::cmd("SET");
    mark.arg(keys::waiting_key(name))
        .arg("1")
        .arg("PX")
        .arg(millis(MARK_TTL));
    mark
}

/// One attempt, and what the replicas said of its write (when they were asked).
async fn acquire_once(
    calls: &Arc<Calls>,
    request: AcquireRequest<'_>,
    waited_for: bool,
) -> Result<(AcquireOutcome, Acknowledged)> {
    let timeout = calls.call_timeout(Some(request.lease));
    if request.fencing {
        let token_key = keys::token_key(request.name);
        let waiting_key = keys::waiting_key(request.name);
        let mark_ttl = if waited_for { millis(MARK_TTL) } else { 0 };
        let (reply, acknowledged): (Vec<i64>, _) = calls
            .run_write(request.name, &FAST_ACQUIRE_FENCED, 3, timeout, |command| {
                command
                    .arg(request.name)
                    .arg(&token_key)
                    .arg(&waiting_key)
                    .arg(millis(request.lease))
                    .arg(request.owner_field)
                    .arg(calls.token_flag(true))
                    .arg(mark_ttl);
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
            Some(Value::Nil) => match held_for(calls, request.name, waited_for, timeout).await? {
                // The key expired (or was released) between the SET and the PTTL: the lock is
                // free, so take it now rather than have the waiter sleep without a TTL to cap
                // it.
                -2 if attempt < SET_ATTEMPTS => attempt += 1,
                // Still gone after every attempt (the name is changing hands quickly): have
                // the waiter look again at once.
                -2 => {
                    let held = AcquireOutcome::Held {
                        ttl: Some(Duration::ZERO),
                    };
                    return Ok((held, None));
                }
                // A TTL, or -1 (no expiry: `None`).
                pttl => {
                    let held = AcquireOutcome::Held {
                        ttl: ttl_from_pttl(pttl),
                    };
                    return Ok((held, None));
                }
            },
            Some(Value::ServerError(error)) => {
                return Err(map_error(&error.clone().into(), timeout));
            }
            other => return Err(Error::Protocol(format!("SET NX answered {other:?}").into())),
        }
    }
}

/// How long the fast lock `name`, found held, is still held (`PTTL`: -2 gone, -1 no expiry);
/// with `waited_for`, marked as waited for in the same step where scripts run
/// (`fast_held.lua`, which marks only a lock still there), else by the mark's own `SET`
/// after the `PTTL` (two keys in one pipeline: see [`mark_waiting`] for why not with `SET
/// NX`; a `PTTL` sent again after an `ASK` writes nothing).
async fn held_for(
    calls: &Arc<Calls>,
    name: &str,
    waited_for: bool,
    timeout: Duration,
) -> Result<i64> {
    if waited_for && calls.runs_scripts() {
        let waiting_key = keys::waiting_key(name);
        // In turn with the other calls, as the `PTTL` it replaces (a call sent outside the
        // queue could wait behind another call's replica `WAIT` and time out); what the
        // replicas say of the mark is not needed.
        let ((pttl,), _): ((i64,), _) = calls
            .run_write(name, &FAST_HELD, 2, timeout, |command| {
                command.arg(name).arg(&waiting_key).arg(millis(MARK_TTL));
            })
            .await?;
        return Ok(pttl);
    }
    let mut pttl = redis::cmd("PTTL");
    pttl.arg(name);
    let mut commands = vec![pttl];
    if waited_for {
        commands.push(mark_waiting(name));
    }
    let replies = calls.send_coalesced(commands, timeout).await?;
    match replies.first() {
        Some(Value::Int(pttl)) => Ok(*pttl),
        // Refused (an ACL without `+pttl`): in step, as the pipeline's echo said.
        Some(Value::ServerError(error)) => Err(map_error(&error.clone().into(), timeout)),
        other => Err(Error::Protocol(format!("PTTL answered {other:?}").into())),
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
    waited_for: bool,
) -> Result<ReleaseOutcome> {
    let timeout = calls.call_timeout(None);
    let deleted = match native_delete {
        NativeDelete::None => {
            let id_follows = calls.sends_request_id(&FAST_RELEASE);
            let ((deleted,), acknowledged): ((i64,), _) = calls
                .run_write(name, &FAST_RELEASE, FAST_RELEASE_KEYS, timeout, |command| {
                    fast_release_arguments(
                        command,
                        name,
                        owner_field,
                        calls.announce(),
                        waited_for,
                        id_follows,
                    );
                })
                .await?;
            replicated::log_release(calls, name, acknowledged);
            deleted
        }
        native => {
            let commands = native_release(native, name, owner_field, calls.announce());
            let (replies, acknowledged) = calls.send_write(commands, timeout).await?;
            replicated::log_release(calls, name, acknowledged);
            deleted_by(&replies, timeout)?
        }
    };
    Ok(if deleted == 1 {
        ReleaseOutcome::Released
    } else {
        ReleaseOutcome::NotHeld
    })
}

/// The native compare-and-delete of `owner_field`'s hold on `name`, then the release message.
/// The message goes out even when nothing was deleted (the lease had run out): a pipeline
/// cannot make it conditional, and a spare wake-up only makes a waiter look again.
fn native_release(
    native: NativeDelete,
    name: &str,
    owner_field: &str,
    announce: Announce,
) -> Vec<Cmd> {
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
    commands.extend(announce.commands(name));
    commands
}

/// What the compare-and-delete of [`native_release`] answered: `1` deleted, `0` not the owner's.
fn deleted_by(replies: &[Value], timeout: Duration) -> Result<i64> {
    match replies.first() {
        Some(Value::Int(deleted)) => Ok(*deleted),
        Some(Value::ServerError(error)) => Err(map_error(&error.clone().into(), timeout)),
        other => Err(Error::Protocol(
            format!("the compare-and-delete answered {other:?}").into(),
        )),
    }
}

/// A fast lock has at most one hold per owner: with `keep ≥ 1` the owner still holds it and
/// nothing changes; with `keep = 0` it is given back if it is the owner's, with the server's
/// own compare-and-delete when `native_delete` names one.
pub(crate) async fn abandon(
    calls: &Arc<Calls>,
    native_delete: NativeDelete,
    name: &str,
    owner_field: &str,
    keep: u32,
) -> Result<()> {
    if keep >= 1 {
        return Ok(());
    }
    // The compare-and-delete, without a replica wait (the replicas may be the very reason for
    // it), written after every pipeline under way: one of them may carry the call this cleans
    // up after (its caller gone), which must reach the server first. As for the reentrant
    // lock, kept for the new connection, first in line, when it cannot go out now.
    let (started, timeout) = (tokio::time::Instant::now(), calls.call_timeout(None));
    let given_back = match native_delete {
        NativeDelete::None => {
            let id_follows = calls.sends_request_id(&FAST_RELEASE);
            calls
                .run_behind(name, &FAST_RELEASE, FAST_RELEASE_KEYS, timeout, |command| {
                    // Announced whether marked or not: a cleanup is rare, and it may undo a
                    // grant a local waiter was not told of.
                    let announce = calls.announce();
                    fast_release_arguments(command, name, owner_field, announce, true, id_follows);
                })
                .await
                .map(|(_,): (i64,)| ())
        }
        native => {
            let commands = native_release(native, name, owner_field, calls.announce());
            let replies = calls.send_behind(commands, timeout).await;
            replies.and_then(|replies| deleted_by(&replies, timeout).map(drop))
        }
    };
    calls
        .settle_cleanup(given_back, started, timeout, || {
            Arc::new(Cleanup {
                name: name.to_owned(),
                owner_field: owner_field.to_owned(),
                announce: calls.announce(),
                native_delete,
            })
        })
        .await
}

/// `LockBackend::renew`: the fast renew script, or where scripts do not run
/// `SET name owner IFEQ owner PX lease` for each, in one pipeline. Natively the lease is set
/// to `lease` rather than only lengthened (the contract asks for at least `lease` from now).
pub(crate) async fn renew(
    calls: &Arc<Calls>,
    renewals: &[Renewal<'_>],
) -> Result<Vec<RenewOutcome>> {
    if calls.runs_scripts() {
        return scripted::renew(calls, &FAST_RENEW, &FAST_RENEW_ACROSS_SLOTS, renewals).await;
    }
    if renewals.is_empty() {
        return Ok(Vec::new());
    }
    let commands = renewals
        .iter()
        .map(|renewal| {
            let mut set = redis::cmd("SET");
            set.arg(renewal.name)
                .arg(renewal.owner_field)
                .arg("IFEQ")
                .arg(renewal.owner_field)
                .arg("PX")
                .arg(millis(renewal.lease));
            set
        })
        .collect();
    let timeout = calls.call_timeout(None);
    // A renewal asks no replica acknowledgement (as the script's): any answer is dropped.
    let (replies, _) = calls.send_write(commands, timeout).await?;
    if replies.len() != renewals.len() {
        return Err(Error::Protocol(
            format!("{} renewals answered {}", renewals.len(), replies.len()).into(),
        ));
    }
    replies
        .iter()
        .map(|reply| match reply {
            Value::Okay => Ok(RenewOutcome::Renewed),
            Value::SimpleString(ok) if ok == "OK" => Ok(RenewOutcome::Renewed),
            Value::Nil => Ok(RenewOutcome::NotHeld),
            // Not a string: the name lapsed and is another kind's now, so not ours.
            Value::ServerError(error) if error.code() == "WRONGTYPE" => Ok(RenewOutcome::NotHeld),
            Value::ServerError(error) => Err(map_error(&error.clone().into(), timeout)),
            other => Err(Error::Protocol(
                format!("SET IFEQ answered {other:?}").into(),
            )),
        })
        .collect()
}

/// `LockBackend::force_release`: the fast force-release script, or where scripts do not run
/// `GET`, then the native compare-and-delete of the owner it read (so a name that changed
/// hands meanwhile, or holds another kind's data, is never deleted blindly).
pub(crate) async fn force_release(
    calls: &Arc<Calls>,
    native_delete: NativeDelete,
    name: &str,
) -> Result<bool> {
    if calls.runs_scripts() || native_delete == NativeDelete::None {
        return scripted::force_release(calls, &FAST_FORCE_RELEASE, name).await;
    }
    let timeout = calls.call_timeout(None);
    for _ in 0..FORCE_ATTEMPTS {
        let Some(owner) = holder(calls, name, timeout).await? else {
            return Ok(false);
        };
        let commands = native_release(native_delete, name, &owner, calls.announce());
        let (replies, _) = calls.send_write(commands, timeout).await?;
        if deleted_by(&replies, timeout)? == 1 {
            return Ok(true);
        }
    }
    Err(Error::Unavailable(
        format!("{name} changed hands during each of {FORCE_ATTEMPTS} force-releases").into(),
    ))
}

/// How many times a force-release without scripts reads the holder and deletes it if it is
/// still that one.
const FORCE_ATTEMPTS: u32 = 5;

/// The fast lock's holder, read with `GET`: `None` when it is free.
async fn holder(calls: &Arc<Calls>, name: &str, timeout: Duration) -> Result<Option<String>> {
    let mut get = redis::cmd("GET");
    get.arg(name);
    let (replies, _) = calls.send_write(vec![get], timeout).await?;
    match replies.first() {
        Some(Value::Nil) => Ok(None),
        Some(Value::BulkString(owner)) => Ok(Some(String::from_utf8_lossy(owner).into_owned())),
        Some(Value::ServerError(error)) => Err(map_error(&error.clone().into(), timeout)),
        other => Err(Error::Protocol(format!("GET answered {other:?}").into())),
    }
}

/// `LockBackend::inspect`: the fast inspect script, or where scripts do not run `GET` and
/// `PTTL` in one pipeline (not one atomic read: a lease ending between the two reads shows as
/// a holder without a TTL).
pub(crate) async fn inspect(calls: &Arc<Calls>, name: &str) -> Result<LockState> {
    if calls.runs_scripts() {
        return scripted::inspect(calls, &FAST_INSPECT, name).await;
    }
    let timeout = calls.call_timeout(None);
    let mut get = redis::cmd("GET");
    get.arg(name);
    let mut pttl = redis::cmd("PTTL");
    pttl.arg(name);
    let (replies, _) = calls.send_write(vec![get, pttl], timeout).await?;
    let refused = |error: &redis::ServerError| map_error(&error.clone().into(), timeout);
    match (replies.first(), replies.get(1)) {
        (Some(Value::ServerError(error)), _) | (_, Some(Value::ServerError(error))) => {
            Err(refused(error))
        }
        (Some(Value::Nil), Some(_)) => Ok(LockState::default()),
        (Some(Value::BulkString(owner)), Some(Value::Int(pttl))) => Ok(LockState::new(
            vec![(String::from_utf8_lossy(owner).into_owned(), 1)],
            ttl_from_pttl(*pttl),
        )),
        other => Err(Error::Protocol(
            format!("GET, PTTL answered {other:?}").into(),
        )),
    }
}

/// A release that could not be sent, replayed on the next connection: the compare-and-delete
/// script sent whole, or the native compare-and-delete and the release message.
struct Cleanup {
    name: String,
    owner_field: String,
    announce: Announce,
    native_delete: NativeDelete,
}

impl Deferred for Cleanup {
    fn route(&self) -> &str {
        &self.name
    }

    fn request(&self, request_id: u64) -> Pipeline {
        match self.native_delete {
            NativeDelete::None => deferred::one(fast_release_command(
                &self.name,
                &self.owner_field,
                self.announce,
                request_id,
            )),
            native => deferred::plain(
                request_id,
                native_release(native, &self.name, &self.owner_field, self.announce),
            ),
        }
    }
}

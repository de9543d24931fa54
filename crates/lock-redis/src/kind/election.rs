//! Leader election: the reentrant lock's hash (the leader is its holder) plus the leader values
//! `distlock_leader:{name}` written with the grant and renewed, released and expiring with the
//! lock; leader changes announced on `distlock_leader_channel:{name}`. Every operation one Lua
//! script.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Leader, ReleaseOutcome, RenewOutcome, Renewal, Result,
};
use redis::Cmd;

use crate::call::Calls;
use crate::connection::deferred::Deferred;
use crate::kind::{replicated, scripted};
use crate::wire::announce::Announce;
use crate::wire::keys;
use crate::wire::reply::{acquire_outcome, count, millis, ttl_from_pttl};
use crate::wire::scripts::{
    ELECTION_ABANDON, ELECTION_ACQUIRE, ELECTION_FORCE_RELEASE, ELECTION_LEADER, ELECTION_RELEASE,
    ELECTION_RENEW, ELECTION_RENEW_ACROSS_SLOTS,
};

/// `LockBackend::try_acquire` of the campaign side, recording `value` with a first hold.
pub(crate) async fn try_acquire(
    calls: &Arc<Calls>,
    request: AcquireRequest<'_>,
    value: &str,
) -> Result<AcquireOutcome> {
    let token_key = keys::token_key(request.name);
    let values = keys::election_values(request.name);
    let channel = keys::election_channel(request.name);
    let (reply, acknowledged): (Vec<i64>, _) = calls
        .run_write(
            request.name,
            &ELECTION_ACQUIRE,
            3,
            calls.call_timeout(Some(request.lease)),
            |command| {
                command
                    .arg(request.name)
                    .arg(&token_key)
                    .arg(&values)
                    .arg(millis(request.lease))
                    .arg(request.owner_field)
                    .arg(if request.fencing { "1" } else { "0" })
                    .arg(value)
                    .arg(&channel)
                    .arg(calls.announce().arg());
            },
        )
        .await?;
    let outcome = acquire_outcome(&reply, request.fencing)?;
    if let AcquireOutcome::Acquired(_) = outcome
        && let Err(shortfall) = replicated::grant_verdict(calls, request.name, acknowledged)
    {
        let given_back = abandon(
            calls,
            request.name,
            request.owner_field,
            request.known_holds,
        )
        .await;
        return Err(replicated::refused(given_back, shortfall));
    }
    Ok(outcome)
}

/// The keys and arguments of `election_release.lua` (before the request id).
fn release_arguments(
    command: &mut Cmd,
    name: &str,
    owner_field: &str,
    keep: Option<u32>,
    lease: Duration,
    announce: Announce,
) {
    command
        .arg(name)
        .arg(keys::election_values(name))
        .arg(owner_field);
    match keep {
        Some(keep) => command.arg(keep),
        None => command.arg(""),
    };
    command
        .arg(millis(lease))
        .arg(keys::channel(name))
        .arg(keys::election_channel(name))
        .arg(announce.arg());
}

/// `LockBackend::release` of the campaign side.
pub(crate) async fn release(
    calls: &Arc<Calls>,
    name: &str,
    owner_field: &str,
    lease: Duration,
) -> Result<ReleaseOutcome> {
    let ((left,), acknowledged): ((i64,), _) = calls
        .run_write(
            name,
            &ELECTION_RELEASE,
            2,
            calls.call_timeout(None),
            |command| {
                release_arguments(command, name, owner_field, None, lease, calls.announce());
            },
        )
        .await?;
    replicated::log_release(calls, name, acknowledged);
    Ok(match left {
        -1 => ReleaseOutcome::NotHeld,
        0 => ReleaseOutcome::Released,
        left => ReleaseOutcome::StillHeld {
            hold_count: count(left)?,
        },
    })
}

/// `LockBackend::renew` of the campaign side: the lock and the leader values together.
pub(crate) async fn renew(
    calls: &Arc<Calls>,
    renewals: &[Renewal<'_>],
) -> Result<Vec<RenewOutcome>> {
    scripted::renew(
        calls,
        &ELECTION_RENEW,
        &ELECTION_RENEW_ACROSS_SLOTS,
        renewals,
    )
    .await
}

/// `LockBackend::abandon` of the campaign side: the release script lowering to `keep`, sent
/// whole behind every pipeline under way; deferred to the next connection when it cannot be
/// sent now.
pub(crate) async fn abandon(
    calls: &Arc<Calls>,
    name: &str,
    owner_field: &str,
    keep: u32,
) -> Result<()> {
    let cleanup = Cleanup {
        name: name.to_owned(),
        owner_field: owner_field.to_owned(),
        keep,
        announce: calls.announce(),
    };
    let abandoned: Result<(i64,)> = calls
        .run_behind(
            name,
            &ELECTION_ABANDON,
            2,
            calls.call_timeout(None),
            |command| {
                release_arguments(
                    command,
                    name,
                    owner_field,
                    Some(keep),
                    Duration::ZERO,
                    cleanup.announce,
                );
            },
        )
        .await;
    if let Err(error) = abandoned {
        if error.is_ambiguous() && calls.connection().defer(Arc::new(cleanup)) {
            return Ok(());
        }
        return Err(error);
    }
    Ok(())
}

/// `LockBackend::force_release` of the campaign side: deposes the leader.
pub(crate) async fn force_release(calls: &Calls, name: &str) -> Result<bool> {
    let (existed,): (i64,) = calls
        .run(
            name,
            &ELECTION_FORCE_RELEASE,
            2,
            calls.call_timeout(None),
            |command| {
                command
                    .arg(name)
                    .arg(keys::election_values(name))
                    .arg(keys::channel(name))
                    .arg(keys::election_channel(name))
                    .arg(calls.announce().arg());
            },
        )
        .await?;
    Ok(existed == 1)
}

/// `ElectionBackend::leader`.
pub(crate) async fn leader(calls: &Calls, name: &str) -> Result<Option<Leader>> {
    let (holder, value, pttl): (Option<String>, Option<String>, i64) = calls
        .run(
            name,
            &ELECTION_LEADER,
            2,
            calls.call_timeout(None),
            |command| {
                command.arg(name).arg(keys::election_values(name));
            },
        )
        .await?;
    // A holder without a value is not a leader of this election (a plain lock of the name).
    Ok(match (holder, value) {
        (Some(holder), Some(value)) => Some(Leader::new(value, holder, ttl_from_pttl(pttl))),
        _ => None,
    })
}

/// An abandon that could not be sent, replayed whole on the next connection.
struct Cleanup {
    name: String,
    owner_field: String,
    keep: u32,
    announce: Announce,
}

impl Deferred for Cleanup {
    fn route(&self) -> &str {
        &self.name
    }

    fn command(&self, request_id: u64) -> Cmd {
        ELECTION_ABANDON.command(
            true,
            2,
            |command| {
                release_arguments(
                    command,
                    &self.name,
                    &self.owner_field,
                    Some(self.keep),
                    Duration::ZERO,
                    self.announce,
                );
            },
            request_id,
        )
    }
}

//! Leader election: the reentrant lock's hash (the leader is its holder) plus the leader values
//! `distlock_leader:{name}` written with the grant and renewed, released and expiring with the
//! lock; leader changes announced on `distlock_leader_channel:{name}`. Every operation one Lua
//! script.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Leader, ReleaseOutcome, RenewOutcome, Renewal, Result,
};

use crate::call::Calls;
use crate::kind::counted::{self, ReleaseCall};
use crate::kind::{replicated, scripted};
use crate::wire::announce::Announce;
use crate::wire::keys;
use crate::wire::reply::{acquire_outcome, millis, ttl_from_pttl};
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
                    .arg(calls.token_flag(request.fencing))
                    .arg(value)
                    .arg(&channel)
                    .arg(calls.announce().arg());
            },
        )
        .await?;
    let outcome = acquire_outcome(&reply, request.fencing)?;
    replicated::grant_stands(calls, request.name, outcome, acknowledged, || {
        abandon(
            calls,
            request.name,
            request.owner_field,
            request.known_holds,
        )
    })
    .await
}

/// One call of `election_release.lua` for `owner_field`: one hold less (`keep: None`, the rest lengthened
/// to `lease`) or down to `keep`.
fn release_call(
    name: &str,
    owner_field: &str,
    keep: Option<u32>,
    lease: Duration,
    announce: Announce,
) -> ReleaseCall {
    let keep = keep.map_or_else(String::new, |keep| keep.to_string());
    ReleaseCall {
        name: name.to_owned(),
        keys: 2,
        arguments: vec![
            name.to_owned(),
            keys::election_values(name),
            owner_field.to_owned(),
            keep,
            millis(lease).to_string(),
            keys::channel(name),
            keys::election_channel(name),
            announce.arg().to_owned(),
        ],
    }
}

/// `LockBackend::release` of the campaign side.
pub(crate) async fn release(
    calls: &Arc<Calls>,
    name: &str,
    owner_field: &str,
    lease: Duration,
) -> Result<ReleaseOutcome> {
    let call = release_call(name, owner_field, None, lease, calls.announce());
    counted::release(calls, &ELECTION_RELEASE, &call).await
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
/// whole (see [`counted::abandon`]).
pub(crate) async fn abandon(
    calls: &Arc<Calls>,
    name: &str,
    owner_field: &str,
    keep: u32,
) -> Result<()> {
    let call = release_call(
        name,
        owner_field,
        Some(keep),
        Duration::ZERO,
        calls.announce(),
    );
    counted::abandon(calls, &ELECTION_ABANDON, call).await
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

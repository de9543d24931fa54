//! Lease-bound permits: Redisson's `RPermitExpirableSemaphore`, the semaphore's count (the
//! bare name) and the sorted set `{name}:timeout` of permits out, each a member
//! `<owner field>:<k>` scored by the end of its lease on the server's clock; every operation one
//! Lua script.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Error, LeasedState, LockState, ReleaseOutcome, RenewOutcome,
    Renewal, Result,
};

use crate::call::Calls;
use crate::kind::counted::{self, ReleaseCall};
use crate::kind::{replicated, scripted};
use crate::wire::announce::Announce;
use crate::wire::keys;
use crate::wire::reply::{acquire_outcome, millis};
use crate::wire::scripts::{
    PERMIT_ABANDON, PERMIT_ACQUIRE, PERMIT_FORCE_RELEASE, PERMIT_RELEASE, PERMIT_RENEW,
    PERMIT_RENEW_ACROSS_SLOTS, PERMIT_STATE,
};

/// `LockBackend::try_acquire` of the permit side (given back, and refused, on a replica
/// shortfall as the lock's).
pub(crate) async fn try_acquire(
    calls: &Arc<Calls>,
    request: AcquireRequest<'_>,
) -> Result<AcquireOutcome> {
    let permits_key = keys::permits_key(request.name);
    let token_key = keys::token_key(request.name);
    let channel = keys::semaphore_channel(request.name);
    let (reply, acknowledged): (Vec<i64>, _) = calls
        .run_write(
            request.name,
            &PERMIT_ACQUIRE,
            3,
            calls.call_timeout(Some(request.lease)),
            |command| {
                command
                    .arg(request.name)
                    .arg(&permits_key)
                    .arg(&token_key)
                    .arg(millis(request.lease))
                    .arg(request.owner_field)
                    .arg(&channel)
                    .arg(calls.announce().arg())
                    .arg(calls.token_flag(request.fencing));
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

/// One call of `permit_release.lua` for `owner_field`: one hold less (`keep: None`, the rest lengthened
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
            keys::permits_key(name),
            owner_field.to_owned(),
            keep,
            millis(lease).to_string(),
            keys::semaphore_channel(name),
            announce.arg().to_owned(),
        ],
    }
}

/// `LockBackend::release` of the permit side.
pub(crate) async fn release(
    calls: &Arc<Calls>,
    name: &str,
    owner_field: &str,
    lease: Duration,
) -> Result<ReleaseOutcome> {
    let call = release_call(name, owner_field, None, lease, calls.announce());
    counted::release(calls, &PERMIT_RELEASE, &call).await
}

/// `LockBackend::renew` of the permit side.
pub(crate) async fn renew(
    calls: &Arc<Calls>,
    renewals: &[Renewal<'_>],
) -> Result<Vec<RenewOutcome>> {
    scripted::renew(calls, &PERMIT_RENEW, &PERMIT_RENEW_ACROSS_SLOTS, renewals).await
}

/// `LockBackend::abandon` of the permit side: the release script lowering to `keep`, sent
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
    counted::abandon(calls, &PERMIT_ABANDON, call).await
}

/// `LockBackend::force_release` of the permit side: every permit back.
pub(crate) async fn force_release(calls: &Calls, name: &str) -> Result<bool> {
    let (any,): (i64,) = calls
        .run(
            name,
            &PERMIT_FORCE_RELEASE,
            2,
            calls.call_timeout(None),
            |command| {
                command
                    .arg(name)
                    .arg(keys::permits_key(name))
                    .arg(keys::semaphore_channel(name))
                    .arg(calls.announce().arg());
            },
        )
        .await?;
    Ok(any == 1)
}

/// `LeasedSemaphoreBackend::leased_state`, and what `inspect` reads.
async fn snapshot(calls: &Calls, name: &str) -> Result<(LeasedState, Option<Duration>)> {
    let (available, flat): (Option<i64>, Vec<redis::Value>) = calls
        .run(
            name,
            &PERMIT_STATE,
            2,
            calls.call_timeout(None),
            |command| {
                command.arg(name).arg(keys::permits_key(name));
            },
        )
        .await?;
    let mut holders: Vec<(String, u32)> = Vec::new();
    let mut expired = 0;
    let mut longest: Option<i64> = None;
    for pair in flat.chunks_exact(2) {
        // Bytes, not text: a Redisson client's permit id is 16 raw bytes.
        let member: Vec<u8> = redis::from_redis_value(pair[0].clone())
            .map_err(|error| Error::Protocol(format!("permit id: {error}").into()))?;
        let left: i64 = redis::from_redis_value(pair[1].clone())
            .map_err(|error| Error::Protocol(format!("permit lease: {error}").into()))?;
        if left <= 0 {
            expired += 1;
            continue;
        }
        longest = Some(longest.map_or(left, |longest| longest.max(left)));
        let holder = holder_of(member);
        match holders.iter_mut().find(|(field, _)| *field == holder) {
            Some((_, count)) => *count += 1,
            None => holders.push((holder, 1)),
        }
    }
    holders.sort();
    let longest = longest.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
    Ok((LeasedState::new(available, holders, expired), longest))
}

/// Who holds the permit `member` of `{name}:timeout`: the owner field of our `<owner
/// field>:<k>`; any other member (a Redisson client's permit id, 16 raw bytes) is its own
/// holder, written as the hex id Redisson's user sees (`ByteBufUtil.hexDump`).
fn holder_of(member: Vec<u8>) -> String {
    if let Ok(text) = std::str::from_utf8(&member)
        && let Some((owner, k)) = text.rsplit_once(':')
        && k.parse::<u32>().is_ok()
    {
        return owner.to_owned();
    }
    member.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// `LeasedSemaphoreBackend::leased_state`.
pub(crate) async fn state(calls: &Calls, name: &str) -> Result<LeasedState> {
    Ok(snapshot(calls, name).await?.0)
}

/// `LockBackend::inspect` of the permit side: the holders, and the longest lease left.
pub(crate) async fn inspect(calls: &Calls, name: &str) -> Result<LockState> {
    let (state, longest) = snapshot(calls, name).await?;
    Ok(LockState::new(state.holders, longest))
}

//! The reentrant lock (`LockKind::Reentrant`): Redisson's `RLock`, a hash
//! `{owner → hold count}`, every operation one Lua script.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, LockState, ReleaseOutcome, RenewOutcome, Renewal, Result,
};

use crate::call::Calls;
use crate::kind::family::{self, ScriptCall};
use crate::kind::{replicated, scripted};
use crate::wire::keys;
use crate::wire::reply::{acquire_outcome, millis, release_outcome};
use crate::wire::scripts::{
    ABANDON, ACQUIRE, FORCE_RELEASE, INSPECT, RELEASE, RENEW, RENEW_ACROSS_SLOTS,
};

/// `LockBackend::try_acquire`: the acquire script, in a pipeline shared with concurrent calls
/// (or, when writes wait for replicas, followed by the wait, and given back on a shortfall).
pub(crate) async fn try_acquire(
    calls: &Arc<Calls>,
    request: AcquireRequest<'_>,
) -> Result<AcquireOutcome> {
    let token_key = keys::token_key(request.name);
    let (reply, acknowledged): (Vec<i64>, _) = calls
        .run_write(
            request.name,
            &ACQUIRE,
            2,
            calls.call_timeout(Some(request.lease)),
            |command| {
                command
                    .arg(request.name)
                    .arg(&token_key)
                    .arg(millis(request.lease))
                    .arg(request.owner_field)
                    .arg(calls.token_flag(request.fencing));
            },
        )
        .await?;
    let outcome = acquire_outcome(&reply, request.fencing)?;
    // Given back to the holds known before this attempt, then refused.
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

/// `LockBackend::release`: the release script, in a pipeline shared with concurrent calls.
pub(crate) async fn release(
    calls: &Arc<Calls>,
    name: &str,
    owner_field: &str,
    lease: Duration,
) -> Result<ReleaseOutcome> {
    let channel = keys::channel(name);
    let ((reply,), acknowledged): ((i64,), _) = calls
        .run_write(name, &RELEASE, 1, calls.call_timeout(None), |command| {
            command
                .arg(name)
                .arg(millis(lease))
                .arg(owner_field)
                .arg(&channel)
                .arg(keys::UNLOCK_MESSAGE)
                .arg(calls.announce().arg());
        })
        .await?;
    replicated::log_release(calls, name, acknowledged);
    release_outcome(reply)
}

/// `LockBackend::renew` with the reentrant renew script.
pub(crate) async fn renew(
    calls: &Arc<Calls>,
    renewals: &[Renewal<'_>],
) -> Result<Vec<RenewOutcome>> {
    scripted::renew(calls, &RENEW, &RENEW_ACROSS_SLOTS, renewals).await
}

/// `LockBackend::abandon`: the cleanup script, sent whole; kept for the next connection when
/// the call's outcome is unknown and there is no connection right now (see
/// [`Calls::settle_cleanup`]: `Ok` only once it ran).
pub(crate) async fn abandon(
    calls: &Arc<Calls>,
    name: &str,
    owner_field: &str,
    keep: u32,
) -> Result<()> {
    let call = ScriptCall::new(&ABANDON, name)
        .arg(owner_field)
        .arg(keep)
        .arg(keys::channel(name))
        .arg(keys::UNLOCK_MESSAGE)
        .arg(calls.announce().arg());
    // Written after every pipeline under way: one of them may carry the call this cleans up
    // after (its caller gone), which must reach the server first.
    family::cleanup(calls, call).await
}

/// `LockBackend::force_release` with the reentrant force-release script.
pub(crate) async fn force_release(calls: &Calls, name: &str) -> Result<bool> {
    scripted::force_release(calls, &FORCE_RELEASE, name).await
}

/// `LockBackend::inspect` with the reentrant inspect script.
pub(crate) async fn inspect(calls: &Calls, name: &str) -> Result<LockState> {
    scripted::inspect(calls, &INSPECT, name).await
}

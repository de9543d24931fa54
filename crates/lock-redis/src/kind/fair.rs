//! The fair lock: Redisson's `RFairLock`, the reentrant lock's hash plus the queue
//! `redisson_lock_queue:{name}` of waiting owner fields and their deadlines in
//! `redisson_lock_timeout:{name}` (taken from the server's clock), each waiter told its turn
//! on `redisson_lock__channel:{name}:<owner field>`; every operation one Lua script.

use std::sync::Arc;
use std::time::Duration;

use lock_core::fair_backend::QUEUE_TIMEOUT;
use lock_core::{AcquireOutcome, AcquireRequest, Error, FairState, ReleaseOutcome, Result};

use crate::call::Calls;
use crate::kind::counted::{self, ReleaseCall};
use crate::kind::replicated;
use crate::wire::announce::Announce;
use crate::wire::keys;
use crate::wire::reply::{acquire_outcome, millis, ttl_from_pttl};
use crate::wire::scripts::{
    FAIR_ABANDON, FAIR_ACQUIRE, FAIR_FORCE_RELEASE, FAIR_LEAVE, FAIR_RELEASE, FAIR_STATE,
};

/// `LockBackend::try_acquire` of the fair side (given back, and refused, on a replica
/// shortfall as the lock's).
pub(crate) async fn try_acquire(
    calls: &Arc<Calls>,
    request: AcquireRequest<'_>,
) -> Result<AcquireOutcome> {
    let queue = keys::fair_queue(request.name);
    let timeouts = keys::fair_timeouts(request.name);
    let token_key = keys::token_key(request.name);
    let (reply, acknowledged): (Vec<i64>, _) = calls
        .run_write(
            request.name,
            &FAIR_ACQUIRE,
            4,
            calls.call_timeout(Some(request.lease)),
            |command| {
                command
                    .arg(request.name)
                    .arg(&queue)
                    .arg(&timeouts)
                    .arg(&token_key)
                    .arg(millis(request.lease))
                    .arg(request.owner_field)
                    .arg(calls.token_flag(request.fencing))
                    .arg(if request.waits { "1" } else { "0" })
                    .arg(millis(QUEUE_TIMEOUT));
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

/// One call of `fair_release.lua` for `owner_field`: one hold less (`keep: None`, the rest lengthened
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
            keys::fair_queue(name),
            owner_field.to_owned(),
            keep,
            millis(lease).to_string(),
            keys::channel(name),
            announce.arg().to_owned(),
        ],
    }
}

/// `LockBackend::release` of the fair side.
pub(crate) async fn release(
    calls: &Arc<Calls>,
    name: &str,
    owner_field: &str,
    lease: Duration,
) -> Result<ReleaseOutcome> {
    let call = release_call(name, owner_field, None, lease, calls.announce());
    counted::release(calls, &FAIR_RELEASE, &call).await
}

/// `LockBackend::abandon` of the fair side: the release script lowering to `keep`, sent whole
/// (see [`counted::abandon`]).
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
    counted::abandon(calls, &FAIR_ABANDON, call).await
}

/// `LockBackend::leave_queue` of the fair side.
pub(crate) async fn leave_queue(calls: &Arc<Calls>, name: &str, owner_field: &str) -> Result<()> {
    let (_left,): (i64,) = calls
        .run_behind(name, &FAIR_LEAVE, 3, calls.call_timeout(None), |command| {
            command
                .arg(name)
                .arg(keys::fair_queue(name))
                .arg(keys::fair_timeouts(name))
                .arg(owner_field)
                .arg(keys::channel(name))
                .arg(calls.announce().arg());
        })
        .await?;
    Ok(())
}

/// `LockBackend::force_release` of the fair side.
pub(crate) async fn force_release(calls: &Calls, name: &str) -> Result<bool> {
    let (existed,): (i64,) = calls
        .run(
            name,
            &FAIR_FORCE_RELEASE,
            2,
            calls.call_timeout(None),
            |command| {
                command
                    .arg(name)
                    .arg(keys::fair_queue(name))
                    .arg(keys::channel(name))
                    .arg(calls.announce().arg());
            },
        )
        .await?;
    Ok(existed == 1)
}

/// `FairBackend::fair_state`.
pub(crate) async fn state(calls: &Calls, name: &str) -> Result<FairState> {
    let (flat, pttl, queue): (Vec<String>, i64, Vec<redis::Value>) = calls
        .run(name, &FAIR_STATE, 3, calls.call_timeout(None), |command| {
            command
                .arg(name)
                .arg(keys::fair_queue(name))
                .arg(keys::fair_timeouts(name));
        })
        .await?;
    let mut holders = Vec::with_capacity(flat.len() / 2);
    for pair in flat.chunks_exact(2) {
        let held: u32 = pair[1].parse().map_err(|_| {
            Error::Protocol(format!("hold count {:?} is not a number", pair[1]).into())
        })?;
        holders.push((pair[0].clone(), held));
    }
    holders.sort();
    let ttl = if holders.is_empty() {
        None
    } else {
        ttl_from_pttl(pttl)
    };
    let mut waiters = Vec::with_capacity(queue.len() / 2);
    for pair in queue.chunks_exact(2) {
        let field: String = redis::from_redis_value(pair[0].clone())
            .map_err(|error| Error::Protocol(format!("queued owner: {error}").into()))?;
        let left: Option<i64> = redis::from_redis_value(pair[1].clone())
            .map_err(|error| Error::Protocol(format!("queue deadline: {error}").into()))?;
        let left = left.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
        waiters.push((field, left));
    }
    Ok(FairState::new(holders, ttl, waiters))
}

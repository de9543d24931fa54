//! The semaphore: Redisson's `RSemaphore`, a string holding the available permits, each new
//! count announced on `redisson_sc:{name}`; every operation one Lua script.

use std::sync::Arc;

use lock_core::{Error, PermitsTaken, Result, SemaphoreState};

use crate::call::Calls;
use crate::kind::replicated;
use crate::wire::keys;
use crate::wire::lock_script::LockScript;
use crate::wire::scripts::{
    SEMAPHORE_ADD, SEMAPHORE_DELETE, SEMAPHORE_DRAIN, SEMAPHORE_READ, SEMAPHORE_RESET,
    SEMAPHORE_SET, SEMAPHORE_TAKE,
};

/// `SemaphoreBackend::try_take_permits`. When writes wait for replicas and too few
/// acknowledged, the permits are given back and the shortfall returned.
pub(crate) async fn try_take(calls: &Arc<Calls>, name: &str, permits: u32) -> Result<PermitsTaken> {
    let ((taken, count), acknowledged): ((i64, Option<i64>), _) = calls
        .run_write(
            name,
            &SEMAPHORE_TAKE,
            1,
            calls.call_timeout(None),
            |command| {
                command.arg(name).arg(permits);
            },
        )
        .await?;
    if taken != 1 {
        return Ok(PermitsTaken::Short { available: count });
    }
    let left = count.ok_or_else(|| Error::Protocol("a take answered no count".into()))?;
    if let Err(shortfall) = replicated::grant_verdict(calls, name, acknowledged) {
        let given_back = add(calls, name, i64::from(permits)).await.map(drop);
        return Err(replicated::refused(given_back, shortfall));
    }
    Ok(PermitsTaken::Taken { left })
}

/// `SemaphoreBackend::return_permits` and `add_permits`: adds `delta` and announces the new
/// count; returns it.
pub(crate) async fn add(calls: &Arc<Calls>, name: &str, delta: i64) -> Result<i64> {
    let ((count,), acknowledged) = announced(calls, &SEMAPHORE_ADD, name, delta).await?;
    replicated::log_release(calls, name, acknowledged);
    Ok(count)
}

/// `SemaphoreBackend::try_set_permits`.
pub(crate) async fn try_set(calls: &Arc<Calls>, name: &str, permits: u32) -> Result<bool> {
    let ((set,), acknowledged): ((i64,), _) =
        announced(calls, &SEMAPHORE_SET, name, i64::from(permits)).await?;
    replicated::log_release(calls, name, acknowledged);
    Ok(set == 1)
}

/// `SemaphoreBackend::reset_permits`.
pub(crate) async fn reset(calls: &Arc<Calls>, name: &str, permits: i64) -> Result<Option<i64>> {
    let ((before,), acknowledged): ((Option<i64>,), _) =
        announced(calls, &SEMAPHORE_RESET, name, permits).await?;
    replicated::log_release(calls, name, acknowledged);
    Ok(before)
}

/// `SemaphoreBackend::drain_permits`.
pub(crate) async fn drain(calls: &Arc<Calls>, name: &str) -> Result<i64> {
    let (before,): (i64,) = unannounced(calls, &SEMAPHORE_DRAIN, name).await?;
    Ok(before)
}

/// `SemaphoreBackend::delete_semaphore`.
pub(crate) async fn delete(calls: &Arc<Calls>, name: &str) -> Result<bool> {
    let (existed,): (i64,) = unannounced(calls, &SEMAPHORE_DELETE, name).await?;
    Ok(existed == 1)
}

/// `SemaphoreBackend::permits_state`.
pub(crate) async fn state(calls: &Calls, name: &str) -> Result<SemaphoreState> {
    Ok(SemaphoreState::new(read_count(calls, name).await?))
}

/// The count the string `name` holds (a semaphore's permits, a latch's count), `None` when
/// there is none.
pub(crate) async fn read_count(calls: &Calls, name: &str) -> Result<Option<i64>> {
    let (count,): (Option<i64>,) = calls
        .run(
            name,
            &SEMAPHORE_READ,
            1,
            calls.call_timeout(None),
            |command| {
                command.arg(name);
            },
        )
        .await?;
    Ok(count)
}

/// Runs a write script that takes the semaphore's name alone and announces nothing.
async fn unannounced<T: redis::FromRedisValue>(
    calls: &Arc<Calls>,
    script: &LockScript,
    name: &str,
) -> Result<T> {
    let (reply, acknowledged) = calls
        .run_write(name, script, 1, calls.call_timeout(None), |command| {
            command.arg(name);
        })
        .await?;
    replicated::log_release(calls, name, acknowledged);
    Ok(reply)
}

/// Runs one of the scripts that set or add to the count and announce it, with `value` as its
/// first argument.
async fn announced<T: redis::FromRedisValue>(
    calls: &Arc<Calls>,
    script: &LockScript,
    name: &str,
    value: i64,
) -> Result<(T, crate::call::Acknowledged)> {
    let channel = keys::semaphore_channel(name);
    calls
        .run_write(name, script, 1, calls.call_timeout(None), |command| {
            command
                .arg(name)
                .arg(value)
                .arg(&channel)
                .arg(calls.announce().arg());
        })
        .await
}

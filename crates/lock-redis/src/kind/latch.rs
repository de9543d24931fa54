//! The countdown latch: Redisson's `RCountDownLatch`, a string holding the count, reaching zero
//! announced on `redisson_countdownlatch__channel__{name}`; every operation one Lua script.

use std::sync::Arc;

use lock_core::{Error, Result};

use crate::call::Calls;
use crate::kind::{replicated, semaphore};
use crate::wire::keys;
use crate::wire::lock_script::LockScript;
use crate::wire::scripts::{LATCH_COUNT_DOWN, LATCH_DELETE, LATCH_SET};

/// `LatchBackend::try_set_count`.
pub(crate) async fn try_set(calls: &Arc<Calls>, name: &str, count: u64) -> Result<bool> {
    let channel = keys::latch_channel(name);
    let ((set,), acknowledged): ((i64,), _) = calls
        .run_write(name, &LATCH_SET, 1, calls.call_timeout(None), |command| {
            command
                .arg(name)
                .arg(count)
                .arg(&channel)
                .arg(calls.announce().arg());
        })
        .await?;
    replicated::log_release(calls, name, acknowledged);
    Ok(set == 1)
}

/// `LatchBackend::count_down`.
pub(crate) async fn count_down(calls: &Arc<Calls>, name: &str) -> Result<u64> {
    let (left,) = announced(calls, &LATCH_COUNT_DOWN, name).await?;
    Ok(left)
}

/// `LatchBackend::delete_latch`.
pub(crate) async fn delete(calls: &Arc<Calls>, name: &str) -> Result<bool> {
    let (existed,): (i64,) = announced(calls, &LATCH_DELETE, name).await?;
    Ok(existed == 1)
}

/// `LatchBackend::latch_count`.
pub(crate) async fn count(calls: &Calls, name: &str) -> Result<u64> {
    let count = semaphore::read_count(calls, name).await?.unwrap_or(0);
    // Redisson leaves nothing below zero either: a negative count is not a latch's.
    u64::try_from(count)
        .map_err(|_| Error::Protocol(format!("latch count {count} is below zero").into()))
}

/// Runs a script that takes the latch's channel and announcement kind as its only arguments.
async fn announced<T: redis::FromRedisValue>(
    calls: &Arc<Calls>,
    script: &LockScript,
    name: &str,
) -> Result<T> {
    let channel = keys::latch_channel(name);
    let (reply, acknowledged) = calls
        .run_write(name, script, 1, calls.call_timeout(None), |command| {
            command.arg(name).arg(&channel).arg(calls.announce().arg());
        })
        .await?;
    replicated::log_release(calls, name, acknowledged);
    Ok(reply)
}

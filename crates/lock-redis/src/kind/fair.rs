//! The fair lock: Redisson's `RFairLock`, the reentrant lock's hash plus the queue
//! `redisson_lock_queue:{name}` of waiting owner fields and their deadlines in
//! `redisson_lock_timeout:{name}` (taken from the server's clock), each waiter told its turn
//! on `redisson_lock__channel:{name}:<owner field>`; every operation one Lua script.

use std::sync::Arc;
use std::time::Duration;

use lock_core::fair_backend::QUEUE_TIMEOUT;
use lock_core::{AcquireRequest, Error, FairState, Result};

use crate::call::Calls;
use crate::kind::family::{GiveBack, Primitive, ScriptCall};
use crate::wire::announce::Announce;
use crate::wire::keys;
use crate::wire::lock_script::LockScript;
use crate::wire::reply::{holders, millis};
use crate::wire::scripts::{
    FAIR_ABANDON, FAIR_ACQUIRE, FAIR_FORCE_RELEASE, FAIR_LEAVE, FAIR_RELEASE, FAIR_STATE, RENEW,
    RENEW_ACROSS_SLOTS,
};

/// The fair lock as a [`Primitive`]: renewed as the reentrant lock (the same hash), its own
/// scripts for the rest.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fair;

impl Primitive for Fair {
    fn acquire(self, calls: &Calls, request: &AcquireRequest<'_>) -> ScriptCall {
        ScriptCall::new(&FAIR_ACQUIRE, request.name)
            .key(keys::fair_queue(request.name))
            .key(keys::fair_timeouts(request.name))
            .key(keys::token_key(request.name))
            .arg(millis(request.lease))
            .arg(request.owner_field)
            .arg(calls.token_flag(request.fencing))
            .arg(if request.waits { "1" } else { "0" })
            .arg(millis(QUEUE_TIMEOUT))
    }

    fn release_scripts(self) -> (&'static LockScript, &'static LockScript) {
        (&FAIR_RELEASE, &FAIR_ABANDON)
    }

    fn release(self, call: ScriptCall, give_back: &GiveBack<'_>) -> ScriptCall {
        call.key(keys::fair_queue(give_back.name))
            .arg(give_back.owner_field)
            .arg(give_back.keep_arg())
            .arg(millis(give_back.lease))
            .arg(keys::channel(give_back.name))
            .arg(give_back.announce.arg())
    }

    fn renew_scripts(self) -> (&'static LockScript, &'static LockScript) {
        (&RENEW, &RENEW_ACROSS_SLOTS)
    }

    fn force_release(self, name: &str, announce: Announce) -> ScriptCall {
        ScriptCall::new(&FAIR_FORCE_RELEASE, name)
            .key(keys::fair_queue(name))
            .arg(keys::channel(name))
            .arg(announce.arg())
    }
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
    let (holders, ttl) = holders(&flat, pttl)?;
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

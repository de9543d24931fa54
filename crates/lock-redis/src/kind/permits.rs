//! Lease-bound permits: Redisson's `RPermitExpirableSemaphore`, the semaphore's count (the
//! bare name) and the sorted set `{name}:timeout` of permits out, each a member
//! `<owner field>:<k>` scored by the end of its lease on the server's clock; every operation one
//! Lua script.

use std::time::Duration;

use lock_core::{AcquireRequest, Error, LockState, PermitState, Result};

use crate::call::Calls;
use crate::kind::family::{GiveBack, Primitive, ScriptCall};
use crate::wire::announce::Announce;
use crate::wire::keys;
use crate::wire::lock_script::LockScript;
use crate::wire::reply::millis;
use crate::wire::scripts::{
    PERMIT_ABANDON, PERMIT_ACQUIRE, PERMIT_FORCE_RELEASE, PERMIT_RELEASE, PERMIT_RENEW,
    PERMIT_RENEW_ACROSS_SLOTS, PERMIT_STATE,
};

/// Lease-bound permits as a [`Primitive`]: each grant one permit; a force-release gives every
/// permit back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Permits;

impl Primitive for Permits {
    fn acquire(self, calls: &Calls, request: &AcquireRequest<'_>) -> ScriptCall {
        ScriptCall::new(&PERMIT_ACQUIRE, request.name)
            .key(keys::permits_key(request.name))
            .key(keys::token_key(request.name))
            .arg(millis(request.lease))
            .arg(request.owner_field)
            .arg(keys::semaphore_channel(request.name))
            .arg(calls.announce().arg())
            .arg(calls.token_flag(request.fencing))
    }

    fn release_scripts(self) -> (&'static LockScript, &'static LockScript) {
        (&PERMIT_RELEASE, &PERMIT_ABANDON)
    }

    fn release(self, call: ScriptCall, give_back: &GiveBack<'_>) -> ScriptCall {
        call.key(keys::permits_key(give_back.name))
            .arg(give_back.owner_field)
            .arg(give_back.keep_arg())
            .arg(millis(give_back.lease))
            .arg(keys::semaphore_channel(give_back.name))
            .arg(give_back.announce.arg())
    }

    fn renew_scripts(self) -> (&'static LockScript, &'static LockScript) {
        (&PERMIT_RENEW, &PERMIT_RENEW_ACROSS_SLOTS)
    }

    fn force_release(self, name: &str, announce: Announce) -> ScriptCall {
        ScriptCall::new(&PERMIT_FORCE_RELEASE, name)
            .key(keys::permits_key(name))
            .arg(keys::semaphore_channel(name))
            .arg(announce.arg())
    }
}

/// `PermitBackend::permit_state`, and what `inspect` reads.
async fn snapshot(calls: &Calls, name: &str) -> Result<(PermitState, Option<Duration>)> {
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
    Ok((PermitState::new(available, holders, expired), longest))
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

/// `PermitBackend::permit_state`.
pub(crate) async fn state(calls: &Calls, name: &str) -> Result<PermitState> {
    Ok(snapshot(calls, name).await?.0)
}

/// `LockBackend::inspect` of the permit side: the holders, and the longest lease left.
pub(crate) async fn inspect(calls: &Calls, name: &str) -> Result<LockState> {
    let (state, longest) = snapshot(calls, name).await?;
    Ok(LockState::new(state.holders, longest))
}

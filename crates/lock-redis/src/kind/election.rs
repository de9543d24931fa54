//! Leader election: the reentrant lock's hash (the leader is its holder) plus the leader values
//! `distlock_leader:{name}` written with the grant and renewed, released and expiring with the
//! lock; leader changes announced on `distlock_leader_channel:{name}`. Every operation one Lua
//! script.

use lock_core::{AcquireRequest, Leader, Result};

use crate::call::Calls;
use crate::kind::family::{GiveBack, Primitive, ScriptCall};
use crate::wire::announce::Announce;
use crate::wire::keys;
use crate::wire::lock_script::LockScript;
use crate::wire::reply::{millis, ttl_from_pttl};
use crate::wire::scripts::{
    ELECTION_ABANDON, ELECTION_ACQUIRE, ELECTION_FORCE_RELEASE, ELECTION_LEADER, ELECTION_RELEASE,
    ELECTION_RENEW, ELECTION_RENEW_ACROSS_SLOTS,
};

/// A campaign as a [`Primitive`], with the value it records on a first hold (read by the
/// acquire only): the lock and the leader values taken, renewed, released and deposed
/// together.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Campaign<'v> {
    /// The value the candidate campaigns with.
    pub value: &'v str,
}

impl Campaign<'static> {
    /// A campaign whose value no operation reads: all but the acquire.
    pub(crate) const ANY: Self = Campaign { value: "" };
}

impl Primitive for Campaign<'_> {
    fn acquire(self, calls: &Calls, request: &AcquireRequest<'_>) -> ScriptCall {
        ScriptCall::new(&ELECTION_ACQUIRE, request.name)
            .key(keys::token_key(request.name))
            .key(keys::election_values(request.name))
            .arg(millis(request.lease))
            .arg(request.owner_field)
            .arg(calls.token_flag(request.fencing))
            .arg(self.value)
            .arg(keys::election_channel(request.name))
            .arg(calls.announce().arg())
    }

    fn release_scripts(self) -> (&'static LockScript, &'static LockScript) {
        (&ELECTION_RELEASE, &ELECTION_ABANDON)
    }

    fn release(self, call: ScriptCall, give_back: &GiveBack<'_>) -> ScriptCall {
        call.key(keys::election_values(give_back.name))
            .arg(give_back.owner_field)
            .arg(give_back.keep_arg())
            .arg(millis(give_back.lease))
            .arg(keys::channel(give_back.name))
            .arg(keys::election_channel(give_back.name))
            .arg(give_back.announce.arg())
    }

    fn renew_scripts(self) -> (&'static LockScript, &'static LockScript) {
        (&ELECTION_RENEW, &ELECTION_RENEW_ACROSS_SLOTS)
    }

    /// Deposes the leader.
    fn force_release(self, name: &str, announce: Announce) -> ScriptCall {
        ScriptCall::new(&ELECTION_FORCE_RELEASE, name)
            .key(keys::election_values(name))
            .arg(keys::channel(name))
            .arg(keys::election_channel(name))
            .arg(announce.arg())
    }
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

//! What the family's lock sides (fair, lease-bound permits, election, both read-write sides) do
//! the same way, each with scripts of its own: a release script that gives back one hold or
//! lowers the owner's holds to a count, and the cleanup that runs that script whole after a
//! call of unknown outcome, replayed on the next connection when it cannot be sent now.

use std::sync::Arc;

use lock_core::{ReleaseOutcome, Result};
use redis::{Cmd, Pipeline};

use crate::call::Calls;
use crate::connection::deferred::{self, Deferred};
use crate::kind::replicated;
use crate::wire::lock_script::LockScript;
use crate::wire::reply::count;

/// One call of a release script: its keys (the first routes the call), then its arguments
/// before the request id.
pub(crate) struct ReleaseCall {
    /// The lock the call is about (its route).
    pub name: String,
    /// How many of `arguments` are keys.
    pub keys: usize,
    /// The keys, then the arguments.
    pub arguments: Vec<String>,
}

impl ReleaseCall {
    fn fill(&self, command: &mut Cmd) {
        for argument in &self.arguments {
            command.arg(argument);
        }
    }
}

/// Runs a release script that answers `-1` (the owner held nothing), `0` (its last hold went)
/// or the holds it has left.
pub(crate) async fn release(
    calls: &Arc<Calls>,
    script: &LockScript,
    call: &ReleaseCall,
) -> Result<ReleaseOutcome> {
    let ((left,), acknowledged): ((i64,), _) = calls
        .run_write(
            &call.name,
            script,
            call.keys,
            calls.call_timeout(None),
            |command| {
                call.fill(command);
            },
        )
        .await?;
    replicated::log_release(calls, &call.name, acknowledged);
    Ok(match left {
        -1 => ReleaseOutcome::NotHeld,
        0 => ReleaseOutcome::Released,
        left => ReleaseOutcome::StillHeld {
            hold_count: count(left)?,
        },
    })
}

/// Runs `script` (one sent whole: [`LockScript::sent_whole`]) as the cleanup after a call of
/// unknown outcome, written behind every pipeline under way (the call it undoes may be in one);
/// kept for the next connection when it cannot be sent now (see [`Calls::settle_cleanup`]:
/// `Ok` only once it ran).
pub(crate) async fn abandon(
    calls: &Arc<Calls>,
    script: &'static LockScript,
    call: ReleaseCall,
) -> Result<()> {
    let (started, timeout) = (tokio::time::Instant::now(), calls.call_timeout(None));
    let abandoned: Result<(i64,)> = calls
        .run_behind(&call.name, script, call.keys, timeout, |command| {
            call.fill(command);
        })
        .await;
    calls
        .settle_cleanup(abandoned, started, timeout, || {
            Arc::new(Cleanup { script, call })
        })
        .await
}

/// A cleanup that could not be sent, replayed whole on the next connection.
struct Cleanup {
    script: &'static LockScript,
    call: ReleaseCall,
}

impl Deferred for Cleanup {
    fn route(&self) -> &str {
        &self.call.name
    }

    fn request(&self, request_id: u64) -> Pipeline {
        deferred::one(self.script.command(
            true,
            self.call.keys,
            |command| self.call.fill(command),
            request_id,
        ))
    }
}

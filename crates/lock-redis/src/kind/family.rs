//! What the family's lock sides (the fair lock, lease-bound permits, the election's campaign
//! side, both read-write sides) do the same way, each with the scripts, keys and arguments of
//! its own [`Primitive`]: take a hold (given back, and refused, on a replica shortfall), give
//! back one hold or lower the owner's holds to a count, renew, force-release, and the cleanup
//! that runs a script whole after a call of unknown outcome, replayed on the next connection
//! when it cannot be sent now (the reentrant lock's cleanup too).

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Error, ReleaseOutcome, RenewOutcome, Renewal, Result,
};
use redis::{Cmd, Pipeline};

use crate::call::{Acknowledged, Calls};
use crate::connection::deferred::{self, Deferred};
use crate::kind::{replicated, scripted};
use crate::wire::announce::Announce;
use crate::wire::lock_script::LockScript;
use crate::wire::reply::{acquire_outcome, release_outcome};

/// One primitive of the family: its scripts, and the keys and arguments each takes. The
/// operations of this module run them the same way for every primitive.
pub(crate) trait Primitive: Copy {
    /// The acquire script's call for `request`, answering as [`acquire_outcome`] reads.
    fn acquire(self, calls: &Calls, request: &AcquireRequest<'_>) -> ScriptCall;

    /// What an acquire reply means before [`acquire_outcome`] reads it, when the primitive
    /// answers something of its own (the read-write lock's refused upgrade).
    fn refusal(self, _reply: &[i64], _name: &str) -> Option<Error> {
        None
    }

    /// The release script, and the same script sent whole ([`LockScript::sent_whole`]) for
    /// the cleanup after a call of unknown outcome. Either answers as [`release_outcome`]
    /// reads.
    fn release_scripts(self) -> (&'static LockScript, &'static LockScript);

    /// `call` (of a release script, its first key the lock) with the keys and arguments that
    /// give back `give_back`.
    fn release(self, call: ScriptCall, give_back: &GiveBack<'_>) -> ScriptCall;

    /// The renewal scripts: of keys of one slot, and of any slots one cluster node serves (see
    /// [`scripted::renew`]).
    fn renew_scripts(self) -> (&'static LockScript, &'static LockScript);

    /// The hash field the primitive counts `owner_field`'s holds under, when it is not the
    /// owner field itself (the write side's `<owner>:write`): what a renewal names.
    fn hold_field(self, _owner_field: &str) -> Option<String> {
        None
    }

    /// The force-release script's call, answering `1` when there was something to release.
    fn force_release(self, name: &str, announce: Announce) -> ScriptCall;
}

/// What a release script gives back: one hold of `owner_field` (`keep: None`, the rest
/// lengthened to `lease`), or its holds down to `keep` (the cleanup).
pub(crate) struct GiveBack<'a> {
    /// The lock.
    pub name: &'a str,
    /// The owner giving back (the primitive names its hold field).
    pub owner_field: &'a str,
    /// `None` for one hold less, else the holds to keep.
    pub keep: Option<u32>,
    /// What the holds left are lengthened to (one hold less only).
    pub lease: Duration,
    /// How the script announces a lock it frees.
    pub announce: Announce,
}

impl GiveBack<'_> {
    /// The holds to keep as the release scripts take it: `''` for one hold less.
    pub(crate) fn keep_arg(&self) -> String {
        self.keep.map_or_else(String::new, |keep| keep.to_string())
    }

    /// The call of `primitive`'s release script (sent whole for a cleanup).
    fn call(&self, primitive: impl Primitive) -> ScriptCall {
        let (release, cleanup) = primitive.release_scripts();
        let script = if self.keep.is_some() {
            cleanup
        } else {
            release
        };
        primitive.release(ScriptCall::new(script, self.name), self)
    }
}

/// One call of a script: its keys (the first, the lock's name, routes the call), then its
/// arguments before the request id.
pub(crate) struct ScriptCall {
    script: &'static LockScript,
    /// The lock the call is about (its route).
    name: String,
    /// How many of `arguments` are keys.
    keys: usize,
    /// The keys, then the arguments.
    arguments: Vec<String>,
}

impl ScriptCall {
    /// A call of `script` about the lock `name`, its first key.
    pub(crate) fn new(script: &'static LockScript, name: &str) -> Self {
        ScriptCall {
            script,
            name: name.to_owned(),
            keys: 1,
            arguments: vec![name.to_owned()],
        }
    }

    /// One key more (keys come before every argument).
    pub(crate) fn key(mut self, key: String) -> Self {
        debug_assert_eq!(self.keys, self.arguments.len(), "a key after an argument");
        self.keys += 1;
        self.arguments.push(key);
        self
    }

    /// One argument more.
    pub(crate) fn arg(mut self, argument: impl ToString) -> Self {
        self.arguments.push(argument.to_string());
        self
    }

    fn fill(&self, command: &mut Cmd) {
        for argument in &self.arguments {
            command.arg(argument);
        }
    }
}

/// `LockBackend::try_acquire` of `primitive`: its acquire script; a grant the replicas did not
/// acknowledge enough is given back to the holds known before this attempt, then refused.
pub(crate) async fn try_acquire(
    calls: &Arc<Calls>,
    primitive: impl Primitive,
    request: AcquireRequest<'_>,
) -> Result<AcquireOutcome> {
    let call = primitive.acquire(calls, &request);
    let (reply, acknowledged): (Vec<i64>, _) = write(calls, &call, Some(request.lease)).await?;
    if let Some(refusal) = primitive.refusal(&reply, request.name) {
        return Err(refusal);
    }
    let outcome = acquire_outcome(&reply, request.fencing)?;
    replicated::grant_stands(calls, request.name, outcome, acknowledged, || {
        abandon(
            calls,
            primitive,
            request.name,
            request.owner_field,
            request.known_holds,
        )
    })
    .await
}

/// Runs `call`, a write, within the call timeout for `lease` (see [`Calls::call_timeout`]).
async fn write<T: redis::FromRedisValue>(
    calls: &Arc<Calls>,
    call: &ScriptCall,
    lease: Option<Duration>,
) -> Result<(T, Acknowledged)> {
    calls
        .run_write(
            &call.name,
            call.script,
            call.keys,
            calls.call_timeout(lease),
            |command| call.fill(command),
        )
        .await
}

/// `LockBackend::release` of `primitive`: one hold of `owner_field` less.
pub(crate) async fn release(
    calls: &Arc<Calls>,
    primitive: impl Primitive,
    name: &str,
    owner_field: &str,
    lease: Duration,
) -> Result<ReleaseOutcome> {
    let call = GiveBack {
        name,
        owner_field,
        keep: None,
        lease,
        announce: calls.announce(),
    }
    .call(primitive);
    let ((left,), acknowledged): ((i64,), _) = write(calls, &call, None).await?;
    replicated::log_release(calls, &call.name, acknowledged);
    release_outcome(left)
}

/// `LockBackend::abandon` of `primitive`: its release script lowering `owner_field`'s holds
/// to `keep`, sent whole (see [`cleanup`]).
pub(crate) async fn abandon(
    calls: &Arc<Calls>,
    primitive: impl Primitive,
    name: &str,
    owner_field: &str,
    keep: u32,
) -> Result<()> {
    let call = GiveBack {
        name,
        owner_field,
        keep: Some(keep),
        lease: Duration::ZERO,
        announce: calls.announce(),
    }
    .call(primitive);
    cleanup(calls, call).await
}

/// `LockBackend::renew` of `primitive`, each renewal of its hold field.
pub(crate) async fn renew(
    calls: &Arc<Calls>,
    primitive: impl Primitive,
    renewals: &[Renewal<'_>],
) -> Result<Vec<RenewOutcome>> {
    let (keyed, across_slots) = primitive.renew_scripts();
    let fields: Vec<Option<String>> = renewals
        .iter()
        .map(|renewal| primitive.hold_field(renewal.owner_field))
        .collect();
    if fields.iter().all(Option::is_none) {
        return scripted::renew(calls, keyed, across_slots, renewals).await;
    }
    let renewals: Vec<Renewal<'_>> = renewals
        .iter()
        .zip(&fields)
        .map(|(renewal, field)| Renewal {
            owner_field: field.as_deref().unwrap_or(renewal.owner_field),
            ..*renewal
        })
        .collect();
    scripted::renew(calls, keyed, across_slots, &renewals).await
}

/// `LockBackend::force_release` of `primitive`: whether there was something to release.
pub(crate) async fn force_release(
    calls: &Calls,
    primitive: impl Primitive,
    name: &str,
) -> Result<bool> {
    let call = primitive.force_release(name, calls.announce());
    let (released,): (i64,) = calls
        .run(
            &call.name,
            call.script,
            call.keys,
            calls.call_timeout(None),
            |command| call.fill(command),
        )
        .await?;
    Ok(released == 1)
}

/// Runs `call` (of a script sent whole: [`LockScript::sent_whole`]) as the cleanup after a
/// call of unknown outcome, written behind every pipeline under way (the call it undoes may be
/// in one); kept for the next connection when it cannot be sent now (see
/// [`Calls::settle_cleanup`]: `Ok` only once it ran).
pub(crate) async fn cleanup(calls: &Arc<Calls>, call: ScriptCall) -> Result<()> {
    let (started, timeout) = (tokio::time::Instant::now(), calls.call_timeout(None));
    let abandoned: Result<(i64,)> = calls
        .run_behind(&call.name, call.script, call.keys, timeout, |command| {
            call.fill(command);
        })
        .await;
    calls
        .settle_cleanup(abandoned, started, timeout, || Arc::new(Cleanup(call)))
        .await
}

/// A cleanup that could not be sent, replayed whole on the next connection.
struct Cleanup(ScriptCall);

impl Deferred for Cleanup {
    fn route(&self) -> &str {
        &self.0.name
    }

    fn request(&self, request_id: u64) -> Pipeline {
        let Cleanup(call) = self;
        deferred::one(call.script.command(
            true,
            call.keys,
            |command| call.fill(command),
            Some(request_id),
        ))
    }
}

/// The `LockBackend` methods a family side runs as this module's operations with its
/// primitive, written in its `impl LockBackend` block: `$this` is the methods' `self`,
/// `$backend` the expression of it that is the `RedisBackend`, `$primitive` the one that is
/// the side's primitive. `all` writes every such method; `shared` leaves taking,
/// releasing and abandoning holds to the side (the campaign side does more there).
macro_rules! family_lock_methods {
    (all, $this:ident, $backend:expr, $primitive:expr) => {
        $crate::kind::family::family_lock_methods!(shared, $this, $backend, $primitive);

        async fn try_acquire(
            &$this,
            request: lock_core::AcquireRequest<'_>,
        ) -> lock_core::Result<lock_core::AcquireOutcome> {
            $crate::kind::family::try_acquire($backend.calls(), $primitive, request).await
        }

        async fn release(
            &$this,
            name: &str,
            owner_field: &str,
            lease: std::time::Duration,
        ) -> lock_core::Result<lock_core::ReleaseOutcome> {
            $crate::kind::family::release($backend.calls(), $primitive, name, owner_field, lease)
                .await
        }

        async fn abandon(&$this, name: &str, owner_field: &str, keep: u32) -> lock_core::Result<()> {
            $crate::kind::family::abandon($backend.calls(), $primitive, name, owner_field, keep)
                .await
        }
    };
    (shared, $this:ident, $backend:expr, $primitive:expr) => {
        fn client_id(&$this) -> &str {
            $backend.client_id()
        }

        fn check_name(&$this, name: &str) -> lock_core::Result<()> {
            $crate::wire::keys::check_name(name)
        }

        async fn renew(
            &$this,
            renewals: &[lock_core::Renewal<'_>],
        ) -> lock_core::Result<Vec<lock_core::RenewOutcome>> {
            $crate::kind::family::renew($backend.calls(), $primitive, renewals).await
        }

        async fn force_release(&$this, name: &str) -> lock_core::Result<bool> {
            $crate::kind::family::force_release($backend.calls(), $primitive, name).await
        }
    };
}
pub(crate) use family_lock_methods;

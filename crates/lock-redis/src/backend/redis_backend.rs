//! The backend: [`RedisBackend`] and its `LockBackend` implementation, which hands each
//! operation to the lock kind it keeps.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, LockBackend, LockState, ReleaseOutcome, ReleaseWatch,
    RenewOutcome, Renewal, Result,
};

use crate::backend::options::LockKind;
use crate::call::Calls;
use crate::connection::pubsub::Notifications;
use crate::kind::fast::{self, NativeDelete};
use crate::kind::{reentrant, scripted};
use crate::wire::capabilities::Capabilities;
use crate::wire::description::{Layout, LockDescription, LockList, is_derived_key};
use crate::wire::keys;

struct Inner {
    client_id: String,
    calls: Arc<Calls>,
    notifications: Notifications,
    kind: LockKind,
    /// How the fast lock is given back on this server.
    native_delete: NativeDelete,
    /// What the server answered the capability probe when connecting.
    capabilities: Capabilities,
}

/// A lock store on one Redis or Valkey node, with Redisson's `RLock` layout.
///
/// Cheap to clone; clones share connections and the client id. Each `RedisBackend::connect`
/// makes a new client id (a UUID v4), like a separate process.
///
/// # Example
///
/// ```no_run
/// use lock_core::Locker;
/// use lock_redis::RedisBackend;
///
/// # async fn demo() -> Result<(), lock_core::Error> {
/// let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1:6379/").await?);
/// let guard = locker.lock("orders:42").await?;
/// // ... critical section ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("client_id", &self.inner.client_id)
            .field("command_timeout", &self.inner.calls.command_timeout())
            .field("kind", &self.inner.kind)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// A backend making its calls through `calls`, with a new client id.
    pub(crate) fn new(
        calls: Calls,
        notifications: Notifications,
        kind: LockKind,
        native_delete: NativeDelete,
        capabilities: Capabilities,
    ) -> RedisBackend {
        RedisBackend {
            inner: Arc::new(Inner {
                client_id: lock_core::new_client_id(),
                calls: Arc::new(calls),
                notifications,
                kind,
                native_delete,
                capabilities,
            }),
        }
    }

    /// The calls every operation goes through.
    pub(crate) fn calls(&self) -> &Arc<Calls> {
        &self.inner.calls
    }

    /// The notification side, for the primitives' own channels.
    pub(super) fn notifications(&self) -> &Notifications {
        &self.inner.notifications
    }

    /// Whether a waiter of this backend watches the releases of the fast lock `name`: its
    /// attempts then mark the lock as waited for, and its releases announce themselves
    /// whether marked or not (see `fast::mark_waiting`). No lookup when nothing is watched.
    fn waited_for(&self, name: &str) -> bool {
        let notifications = &self.inner.notifications;
        notifications.watches_any() && notifications.is_watched(&keys::channel(name))
    }

    /// How many lock names have local waiters subscribed to their release channel.
    #[must_use]
    pub fn watched_locks(&self) -> usize {
        self.inner.notifications.watched_channels()
    }

    /// Which lock this backend keeps.
    #[must_use]
    pub fn lock_kind(&self) -> LockKind {
        self.inner.kind
    }

    /// What the server (or the proxy in front of it) answered the capability probe when the
    /// backend connected: which commands it runs, refuses, does not know or hangs up on, and
    /// so which degradations this backend chose (see `docs/deployments.md`).
    ///
    /// # Example
    ///
    /// ```no_run
    /// use lock_redis::{Capability, RedisBackend};
    ///
    /// # async fn demo() -> Result<(), lock_core::Error> {
    /// let backend = RedisBackend::connect("redis://127.0.0.1:6379/").await?;
    /// println!("{}", backend.capabilities());
    /// assert!(backend.capabilities().supports(Capability::EvalSha));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn capabilities(&self) -> &Capabilities {
        &self.inner.capabilities
    }

    /// What the server answered the latest capability probe: the one at connect, or on one
    /// server and behind Sentinels the one run after the command connection was last
    /// replaced (at most one every 10 s). A re-probe that finds a capability gained or lost
    /// logs one warning and counts `distlock_capabilities_changed_total`; the choices made at
    /// connect ([`capabilities`](Self::capabilities)) stay. A cluster keeps the answers at
    /// connect.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use lock_redis::{Capability, RedisBackend};
    ///
    /// # async fn demo() -> Result<(), lock_core::Error> {
    /// let backend = RedisBackend::connect("redis://127.0.0.1:6379/").await?;
    /// let now = backend.latest_capabilities();
    /// if now.supports(Capability::EvalSha) != backend.capabilities().supports(Capability::EvalSha) {
    ///     println!("the server changed since connect: {now}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn latest_capabilities(&self) -> Capabilities {
        self.inner
            .calls
            .connection()
            .latest_capabilities()
            .unwrap_or_else(|| self.inner.capabilities.clone())
    }

    /// Everything the server holds for the name `name`, in one atomic read, whichever kind of
    /// the family (if any) uses it: its [`Layout`] (a lock of either kind, a read-write lock,
    /// a fair lock, an election, lease-bound permits, a semaphore's or a latch's count), its
    /// holders and hold counts, the time its lease has left, its fencing counter, how many
    /// clients are subscribed to its release channel (the waiters of distlock and Redisson, on
    /// the node serving the name) and to the other kinds' channels, and what the kind keeps
    /// besides (a read-write lock's mode, readers and writer; a fair lock's queue with each
    /// place's deadline; an election's leader value; the permits out with their leases; a
    /// count). The name's other keys and channels are all in its slot, so one script reads
    /// them together; the one exception, a latch's channel for a name with its own hash tag,
    /// is not read ([`ChannelSubscribers::latch`](crate::ChannelSubscribers::latch) is `None`).
    ///
    /// A semaphore's permits and a latch's count are the same data (a string integer): they
    /// are told apart only by whose channel has subscribers ([`Layout::Semaphore`],
    /// [`Layout::Latch`]), else [`Layout::Counter`]. A fair lock with nobody queued, and
    /// lease-bound permits with none out, look like a plain lock and a plain count.
    ///
    /// Needs, besides what locking needs, `+hgetall +get +lrange +zrange +time +pubsub|numsub
    /// +pubsub|shardnumsub`, the fencing counter's key and the family's derived keys (the
    /// "reading locks for operators" line of the ACL rule in `docs/deployments.md`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`](lock_core::Error::InvalidName) for a name the locks refuse, before any I/O;
    /// else as any call: a timeout, a lost connection, `NotPermitted`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() -> lock_core::Result<()> {
    /// use lock_redis::{Layout, RedisBackend};
    ///
    /// let backend = RedisBackend::connect("redis://127.0.0.1:6379/").await?;
    /// let lock = backend.describe("orders:42").await?;
    /// if lock.layout == Layout::Free {
    ///     println!("free");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn describe(&self, name: &str) -> Result<LockDescription> {
        keys::check_name(name)?;
        scripted::describe(&self.inner.calls, name).await
    }

    /// The names of the family whose names match `pattern` (a `SCAN MATCH` glob: `*`, `?`,
    /// `[…]`, `\` escapes), each with what [`describe`](Self::describe) reads for it: locks of
    /// either kind, read-write and fair locks, elections, semaphores (with lease-bound permits
    /// or not) and latches. The keys are walked with `SCAN` on every primary (never `KEYS`,
    /// which would block the server), and at most `limit` of them are looked at (a lock's
    /// derived keys count: see below); [`LockList::complete`] says whether that was every key
    /// matching the pattern. Keys that are not a
    /// name of their own are left out: the kinds' derived keys by their shapes (fencing
    /// counters, fair queues and their deadlines, leader values, read-write lock hold keys
    /// `{name}:<owner field>:rwlock_timeout:<k>`, permits out `{name}:timeout`) and other data
    /// by what `describe` finds (another type, a hash or string of another shape; a string
    /// holding an integer is listed, as a [`Layout::Counter`] at least: a semaphore or a latch
    /// is nothing more). A name
    /// changed during the walk may be missing or listed as free: the walk is not one atomic
    /// read.
    ///
    /// Needs `+scan` besides what [`describe`](Self::describe) needs (the same ACL line).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`](lock_core::Error::InvalidOptions) for an empty pattern or a
    /// `limit` of 0, before any I/O; else as any call.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() -> lock_core::Result<()> {
    /// let backend = lock_redis::RedisBackend::connect("redis://127.0.0.1:6379/").await?;
    /// let list = backend.list_locks("orders:*", 1000).await?;
    /// for (name, lock) in &list.locks {
    ///     println!("{name}: {:?}, {} holder(s)", lock.layout, lock.holders.len());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list_locks(&self, pattern: &str, limit: usize) -> Result<LockList> {
        if pattern.is_empty() || limit == 0 {
            return Err(lock_core::Error::InvalidOptions {
                reason: "list_locks needs a pattern and a limit of at least 1".into(),
            });
        }
        let calls = &self.inner.calls;
        let (names, walked) = calls.scan(pattern, limit).await?;
        // A `SCAN` step returns every key it finds, so the walk may hold more than `limit`:
        // only the first `limit` are looked at, each with a call of its own.
        let complete = walked && names.len() <= limit;
        let mut locks = Vec::new();
        for name in names.into_iter().take(limit) {
            if is_derived_key(&name) || keys::check_name(&name).is_err() {
                continue;
            }
            let lock = scripted::describe(calls, &name).await?;
            if !matches!(lock.layout, Layout::Free | Layout::Other(_)) {
                locks.push((name, lock));
            }
        }
        Ok(LockList { locks, complete })
    }
}

impl LockBackend for RedisBackend {
    fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    fn check_name(&self, name: &str) -> Result<()> {
        keys::check_name(name)
    }

    fn reentrant(&self) -> bool {
        self.inner.kind == LockKind::Reentrant
    }

    fn kind(&self) -> &'static str {
        match self.inner.kind {
            LockKind::Reentrant => "reentrant",
            LockKind::Fast => "fast",
        }
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> Result<AcquireOutcome> {
        let calls = &self.inner.calls;
        record_node(calls, request.name);
        match self.inner.kind {
            LockKind::Fast => {
                let waited_for = self.waited_for(request.name);
                fast::try_acquire(calls, self.inner.native_delete, request, waited_for).await
            }
            LockKind::Reentrant => reentrant::try_acquire(calls, request).await,
        }
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> Result<ReleaseOutcome> {
        let calls = &self.inner.calls;
        record_node(calls, name);
        match self.inner.kind {
            LockKind::Fast => {
                // The server's own compare-and-delete always announces: no need to look.
                let native = self.inner.native_delete;
                let waited_for = native == NativeDelete::None && self.waited_for(name);
                fast::release(calls, native, name, owner_field, waited_for).await
            }
            LockKind::Reentrant => reentrant::release(calls, name, owner_field, lease).await,
        }
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> Result<Vec<RenewOutcome>> {
        let calls = &self.inner.calls;
        match self.inner.kind {
            LockKind::Fast => fast::renew(calls, renewals).await,
            LockKind::Reentrant => reentrant::renew(calls, renewals).await,
        }
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> Result<()> {
        let calls = &self.inner.calls;
        match self.inner.kind {
            LockKind::Fast => {
                fast::abandon(calls, self.inner.native_delete, name, owner_field, keep).await
            }
            LockKind::Reentrant => reentrant::abandon(calls, name, owner_field, keep).await,
        }
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        let calls = &self.inner.calls;
        match self.inner.kind {
            LockKind::Fast => fast::force_release(calls, self.inner.native_delete, name).await,
            LockKind::Reentrant => reentrant::force_release(calls, name).await,
        }
    }

    async fn inspect(&self, name: &str) -> Result<LockState> {
        let calls = &self.inner.calls;
        match self.inner.kind {
            LockKind::Fast => fast::inspect(calls, name).await,
            LockKind::Reentrant => reentrant::inspect(calls, name).await,
        }
    }

    async fn watch_releases(&self, name: &str) -> Result<ReleaseWatch> {
        self.inner.notifications.watch(&keys::channel(name)).await
    }
}

/// Names the node a call about `name` is sent to, in the `node` field of the current span when
/// it is one of distlock's (`distlock.acquire`, `distlock.release`, a composite's
/// `distlock.node`) and a subscriber records it: the address is looked up only then, and a
/// span of the application's own is never written to.
fn record_node(calls: &Calls, name: &str) {
    // The spans that take a `node` are INFO: nothing to look at when no subscriber wants INFO
    // (one atomic load; the usual case without tracing).
    if !tracing::level_enabled!(tracing::Level::INFO) {
        return;
    }
    let span = tracing::Span::current();
    let ours = span.metadata().is_some_and(|metadata| {
        metadata.name().starts_with("distlock.") && metadata.fields().field("node").is_some()
    });
    if ours
        && !span.is_disabled()
        && let Some(node) = calls.connection().node_of(name)
    {
        span.record("node", node.as_str());
    }
}

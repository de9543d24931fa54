//! Release notifications shared by the local waiters of one backend.
//!
//! Waiters for the same lock name share one [`ReleaseWatch`] topic; the backend subscribes on the
//! server once per topic and is told by the idle hook when the last local waiter has gone. A
//! release wakes **one** local waiter (the one that can then take the lock), so a release never
//! stampedes every waiting task at once; a lost notification connection wakes all of them to
//! retry, since releases may have been missed.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OnceCell, futures::Notified};

use crate::error::Result;

type IdleHook = Box<dyn Fn(&str, u64) + Send + Sync>;

static NEXT_TOPIC_ID: AtomicU64 = AtomicU64::new(1);

/// From this count on, [`ReleaseHub::notify_up_to`] wakes every waiter of the name at once.
const WAKE_ALL_FROM: usize = 64;

struct HubInner {
    topics: Mutex<HashMap<String, Weak<Topic>>>,
    /// How many topics are alive: lets [`ReleaseHub::is_watched`] answer without the lock
    /// when nothing is watched (the uncontended path asks on every attempt).
    live: AtomicUsize,
    on_idle: IdleHook,
    /// Told when the store's notifications are back: the hub's polling-for-now watches
    /// ([`ReleaseHub::polling_for_now`]) end their poll and register again.
    back: Notify,
}

struct Topic {
    name: String,
    /// Distinguishes successive topics of one name, so the backend can count subscriptions per
    /// topic and ignore an unsubscribe for one it never counted.
    id: u64,
    notify: Notify,
    /// How many announcements (releases, counts, wake-ups) reached this topic.
    announcements: AtomicU64,
    subscribed: OnceCell<()>,
    /// Set before the subscribe request is made: a waiter cancelled while subscribing leaves a
    /// request the backend may have applied, which must be undone when the topic goes away.
    requested: AtomicBool,
    hub: Weak<HubInner>,
}

impl Topic {
    /// Counts one announcement.
    fn announced(&self) {
        self.announcements.fetch_add(1, Ordering::AcqRel);
    }
}

impl Drop for Topic {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        hub.live.fetch_sub(1, Ordering::AcqRel);
        let mut topics = hub.topics.lock().unwrap_or_else(|e| e.into_inner());
        // A new topic for the same name may already have replaced this one; only remove our own.
        if topics
            .get(&self.name)
            .is_some_and(|weak| std::ptr::eq(weak.as_ptr(), self))
        {
            topics.remove(&self.name);
        }
        drop(topics);
        if self.requested.load(Ordering::Acquire) {
            (hub.on_idle)(&self.name, self.id);
        }
    }
}

/// The registry of watched lock names of one backend instance.
///
/// Backends that deliver release notifications create one hub, hand out watches from
/// [`ReleaseHub::watch`] in `watch_releases`, and call [`ReleaseHub::notify_released`] when a
/// release message arrives and [`ReleaseHub::wake_all`] when the notification connection was lost.
///
/// # Example
///
/// ```
/// use lock_core::ReleaseHub;
///
/// # tokio_test_block_on(async {
/// let hub = ReleaseHub::new();
/// let watch = hub.watch("orders:42");
/// watch.ensure_subscribed(|_topic| async { Ok(()) }).await.unwrap(); // e.g. SUBSCRIBE
/// hub.notify_released("orders:42");
/// watch.wait_released().await; // returns at once: the release above left a permit
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Clone)]
pub struct ReleaseHub {
    inner: Arc<HubInner>,
}

impl Default for ReleaseHub {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ReleaseHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseHub")
            .field("watched", &self.watched_count())
            .finish()
    }
}

impl ReleaseHub {
    /// A hub without server subscriptions to manage (for stores that notify in-process).
    #[must_use]
    pub fn new() -> Self {
        Self::with_idle_hook(|_, _| {})
    }

    /// A hub that calls `on_idle(name, topic_id)` when the last watch of a name whose subscription
    /// was requested (see [`ReleaseWatch::ensure_subscribed`]) is dropped, so the backend can
    /// unsubscribe on the server. The hook runs inside `Drop`: it must not block (send a message
    /// to a task instead). It runs even when the subscribe request was cancelled or failed, since
    /// the backend may have applied it; pair subscribe and unsubscribe by `topic_id`.
    #[must_use]
    pub fn with_idle_hook(on_idle: impl Fn(&str, u64) + Send + Sync + 'static) -> Self {
        ReleaseHub {
            inner: Arc::new(HubInner {
                topics: Mutex::new(HashMap::new()),
                live: AtomicUsize::new(0),
                on_idle: Box::new(on_idle),
                back: Notify::new(),
            }),
        }
    }

    /// A watch on `name`, shared with every other live watch on the same name.
    #[must_use]
    pub fn watch(&self, name: &str) -> ReleaseWatch {
        let mut topics = self.inner.topics.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(topic) = topics.get(name).and_then(Weak::upgrade) {
            return ReleaseWatch {
                source: Source::Topic(topic),
            };
        }
        let topic = Arc::new(Topic {
            name: name.to_owned(),
            id: NEXT_TOPIC_ID.fetch_add(1, Ordering::Relaxed),
            notify: Notify::new(),
            announcements: AtomicU64::new(0),
            subscribed: OnceCell::new(),
            requested: AtomicBool::new(false),
            hub: Arc::downgrade(&self.inner),
        });
        topics.insert(name.to_owned(), Arc::downgrade(&topic));
        self.inner.live.fetch_add(1, Ordering::AcqRel);
        ReleaseWatch {
            source: Source::Topic(topic),
        }
    }

    /// Delivers a release of `name`: wakes one local waiter, or leaves a permit for the next one.
    pub fn notify_released(&self, name: &str) {
        let topic = {
            let topics = self.inner.topics.lock().unwrap_or_else(|e| e.into_inner());
            topics.get(name).and_then(Weak::upgrade)
        };
        if let Some(topic) = topic {
            topic.announced();
            topic.notify.notify_one();
        }
    }

    /// Delivers an announcement that `count` permits are available on `name` (a semaphore's new
    /// count): wakes up to `count` local waiters, or leaves a permit for the next one when fewer
    /// wait. Nothing for a count of zero or below. (Redisson's semaphore waiters do the same.)
    pub fn notify_up_to(&self, name: &str, count: i64) {
        let Ok(count) = usize::try_from(count) else {
            return;
        };
        if count == 0 {
            return;
        }
        let topic = {
            let topics = self.inner.topics.lock().unwrap_or_else(|e| e.into_inner());
            topics.get(name).and_then(Weak::upgrade)
        };
        let Some(topic) = topic else {
            return;
        };
        topic.announced();
        if count >= WAKE_ALL_FROM {
            // Likely more than wait here: wake them all rather than count them out.
            topic.notify.notify_waiters();
            topic.notify.notify_one();
        } else {
            // Each wakes one waiter, or (when none waits) stores the one permit `Notify` keeps.
            for _ in 0..count {
                topic.notify.notify_one();
            }
        }
    }

    /// Wakes every waiter of `name` to retry: used when that name's notifications may have been
    /// lost (for example right after its subscription was re-established).
    pub fn wake_watchers(&self, name: &str) {
        let topic = {
            let topics = self.inner.topics.lock().unwrap_or_else(|e| e.into_inner());
            topics.get(name).and_then(Weak::upgrade)
        };
        if let Some(topic) = topic {
            topic.announced();
            topic.notify.notify_waiters();
            // A waiter between its attempt and its wait also has to retry.
            topic.notify.notify_one();
        }
    }

    /// A polling watch for while the store's notifications are down, as
    /// [`ReleaseWatch::polling_for_now`], whose waiter is also woken by
    /// [`notifications_back`](Self::notifications_back): it registers again at once instead of
    /// at its next poll (a fair lock's head polling every second would hold up its queue).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use lock_core::backend::ReleaseHub;
    ///
    /// let hub = ReleaseHub::new();
    /// let watch = hub.polling_for_now(Duration::from_secs(1));
    /// assert!(watch.is_for_now());
    /// assert_eq!(watch.poll_interval(), Some(Duration::from_secs(1)));
    /// ```
    #[must_use]
    pub fn polling_for_now(&self, interval: Duration) -> ReleaseWatch {
        ReleaseWatch {
            source: Source::Polling {
                interval,
                for_now: true,
                back: Some(Arc::clone(&self.inner)),
            },
        }
    }

    /// The store's notifications are back (a notification connection made again): wakes every
    /// waiter, as [`wake_all`](Self::wake_all) (releases may have been missed meanwhile), and
    /// the waiters polling on this hub's [`polling_for_now`](Self::polling_for_now) watches,
    /// which register again.
    pub fn notifications_back(&self) {
        self.wake_all();
        self.inner.back.notify_waiters();
    }

    /// Wakes every waiter of every name, to retry: used when notifications may have been lost.
    pub fn wake_all(&self) {
        let topics: Vec<Arc<Topic>> = {
            let topics = self.inner.topics.lock().unwrap_or_else(|e| e.into_inner());
            topics.values().filter_map(Weak::upgrade).collect()
        };
        for topic in topics {
            topic.announced();
            topic.notify.notify_waiters();
            // A waiter between its attempt and its wait also has to retry.
            topic.notify.notify_one();
        }
    }

    /// Whether `name` has a live watch here: some local waiter registered for its releases
    /// and still waits (or is about to). A backend whose releases announce themselves only
    /// when someone waits asks it on each attempt, to tell the store that someone does. One
    /// atomic load when nothing is watched at all.
    ///
    /// # Example
    ///
    /// ```
    /// use lock_core::ReleaseHub;
    ///
    /// let hub = ReleaseHub::new();
    /// assert!(!hub.is_watched("orders:42"));
    /// let watch = hub.watch("orders:42");
    /// assert!(hub.is_watched("orders:42"));
    /// assert!(!hub.is_watched("orders:43"));
    /// drop(watch);
    /// assert!(!hub.is_watched("orders:42"));
    /// ```
    #[must_use]
    pub fn is_watched(&self, name: &str) -> bool {
        if self.inner.live.load(Ordering::Acquire) == 0 {
            return false;
        }
        let topics = self.inner.topics.lock().unwrap_or_else(|e| e.into_inner());
        topics.get(name).is_some_and(|weak| weak.strong_count() > 0)
    }

    /// Whether any name has a live watch (see [`is_watched`](Self::is_watched)): one atomic
    /// load, for a caller that must build the name before asking.
    #[must_use]
    pub fn watches_any(&self) -> bool {
        self.inner.live.load(Ordering::Acquire) > 0
    }

    /// How many names have live watches.
    #[must_use]
    pub fn watched_count(&self) -> usize {
        let topics = self.inner.topics.lock().unwrap_or_else(|e| e.into_inner());
        topics
            .values()
            .filter(|weak| weak.strong_count() > 0)
            .count()
    }
}

enum Source {
    Topic(Arc<Topic>),
    /// Polling at this interval; `for_now`: only while the notifications are down; `back`:
    /// the hub that says when they are back ([`ReleaseHub::polling_for_now`]).
    Polling {
        interval: Duration,
        for_now: bool,
        back: Option<Arc<HubInner>>,
    },
}

/// A registration for the release notifications of one lock name.
///
/// Held by a waiter while it waits; dropping the last watch of a name lets the backend
/// unsubscribe. A watch made with [`ReleaseWatch::polling`] never fires: the waiter re-checks on a
/// timer instead (for stores without notifications).
pub struct ReleaseWatch {
    source: Source,
}

impl std::fmt::Debug for ReleaseWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Source::Topic(topic) => write!(f, "ReleaseWatch({:?})", topic.name),
            Source::Polling {
                interval, for_now, ..
            } => write!(
                f,
                "ReleaseWatch(polling every {interval:?}{})",
                if *for_now { ", for now" } else { "" }
            ),
        }
    }
}

impl ReleaseWatch {
    /// A watch without notifications: waiters re-check the lock about every `interval` (with
    /// jitter), and never later than the holder's remaining lease.
    #[must_use]
    pub fn polling(interval: Duration) -> Self {
        ReleaseWatch {
            source: Source::Polling {
                interval,
                for_now: false,
                back: None,
            },
        }
    }

    /// A polling watch for while a store's notifications are down (a lost notification
    /// connection, a subscription that failed): waiters poll as with
    /// [`polling`](Self::polling), and register again at each look, so that they wait on
    /// notifications again once they are back. A wait that kept polling for good would lose
    /// every race for a contended lock to waiters that are woken the moment it is free.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use lock_core::backend::ReleaseWatch;
    ///
    /// let watch = ReleaseWatch::polling_for_now(Duration::from_secs(1));
    /// assert_eq!(watch.poll_interval(), Some(Duration::from_secs(1)));
    /// assert!(watch.is_for_now());
    /// assert!(!ReleaseWatch::polling(Duration::from_secs(1)).is_for_now());
    /// ```
    #[must_use]
    pub fn polling_for_now(interval: Duration) -> Self {
        ReleaseWatch {
            source: Source::Polling {
                interval,
                for_now: true,
                back: None,
            },
        }
    }

    /// Whether this is a watch for while the notifications are down
    /// ([`polling_for_now`](Self::polling_for_now)): the waiter registers again at its next
    /// look.
    #[must_use]
    pub fn is_for_now(&self) -> bool {
        matches!(self.source, Source::Polling { for_now: true, .. })
    }

    /// The polling interval, for a watch without notifications.
    #[must_use]
    pub fn poll_interval(&self) -> Option<Duration> {
        match self.source {
            Source::Polling { interval, .. } => Some(interval),
            Source::Topic(_) => None,
        }
    }

    /// Runs `subscribe(topic_id)` once for the lifetime of this name's shared topic; concurrent
    /// callers wait for the one running it. After a failure the next caller tries again (with the
    /// same topic id).
    ///
    /// # Errors
    ///
    /// Whatever `subscribe` returns.
    pub async fn ensure_subscribed<F, Fut>(&self, subscribe: F) -> Result<()>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        match &self.source {
            Source::Topic(topic) => topic
                .subscribed
                .get_or_try_init(|| {
                    topic.requested.store(true, Ordering::Release);
                    subscribe(topic.id)
                })
                .await
                .map(|_| ()),
            Source::Polling { .. } => Ok(()),
        }
    }

    /// A future that completes at the next release of this name (a hub's polling-for-now
    /// watch: when the notifications are back). Create it **before** the attempt whose failure
    /// makes you wait, so a release between the two is not missed.
    pub(crate) fn notified(&self) -> Option<Notified<'_>> {
        match &self.source {
            Source::Topic(topic) => Some(topic.notify.notified()),
            Source::Polling {
                back: Some(hub), ..
            } => Some(hub.back.notified()),
            Source::Polling { back: None, .. } => None,
        }
    }

    /// How many announcements reached this name's topic so far (0 for a polling watch).
    pub(crate) fn announcements(&self) -> u64 {
        match &self.source {
            Source::Topic(topic) => topic.announcements.load(Ordering::Acquire),
            Source::Polling { .. } => 0,
        }
    }

    /// Hands a consumed release to the next local waiter (a woken waiter went away unused).
    pub(crate) fn pass_on(&self) {
        if let Source::Topic(topic) = &self.source {
            topic.notify.notify_one();
        }
    }

    /// Waits for the next release of this name (a polling watch: never, or, for one made by
    /// [`ReleaseHub::polling_for_now`], until the notifications are back).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe; a release that arrives while nobody waits is kept for the next waiter.
    pub async fn wait_released(&self) {
        match self.notified() {
            Some(notified) => notified.await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn watches_share_a_topic_and_the_idle_hook_runs_once() {
        let idle = Arc::new(AtomicUsize::new(0));
        let counter = idle.clone();
        let hub = ReleaseHub::with_idle_hook(move |_, _| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let subscribes = AtomicUsize::new(0);
        let a = hub.watch("x");
        let b = hub.watch("x");
        for watch in [&a, &b] {
            watch
                .ensure_subscribed(|_| async {
                    subscribes.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .await
                .unwrap();
        }
        assert_eq!(subscribes.load(Ordering::SeqCst), 1);
        assert_eq!(hub.watched_count(), 1);
        drop(a);
        assert_eq!(idle.load(Ordering::SeqCst), 0);
        drop(b);
        assert_eq!(idle.load(Ordering::SeqCst), 1);
        assert_eq!(hub.watched_count(), 0);
    }

    #[tokio::test]
    async fn a_count_wakes_up_to_that_many_waiters() {
        let hub = ReleaseHub::new();
        let watch = hub.watch("x");
        let waits: Vec<_> = (0..3).map(|_| watch.notified().unwrap()).collect();
        let mut waits: Vec<_> = waits.into_iter().map(Box::pin).collect();
        for wait in &mut waits {
            wait.as_mut().enable();
        }
        hub.notify_up_to("x", 0);
        hub.notify_up_to("x", -4);
        hub.notify_up_to("x", 2);
        let mut woken = 0;
        for wait in &mut waits {
            if futures_util::poll!(wait.as_mut()).is_ready() {
                woken += 1;
            }
        }
        assert_eq!(woken, 2);
    }

    #[tokio::test]
    async fn a_release_wakes_one_waiter() {
        let hub = ReleaseHub::new();
        let watch = hub.watch("x");
        let first = watch.notified().unwrap();
        let second = watch.notified().unwrap();
        tokio::pin!(first, second);
        first.as_mut().enable();
        second.as_mut().enable();
        hub.notify_released("x");
        assert!(futures_util::poll!(first.as_mut()).is_ready());
        assert!(futures_util::poll!(second.as_mut()).is_pending());
        hub.wake_all();
        assert!(futures_util::poll!(second.as_mut()).is_ready());
    }
}

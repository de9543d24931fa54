//! [`CountDownLatch`]: a countdown latch shared by every client of a store (Redisson's
//! `RCountDownLatch`), over any [`LatchBackend`]; the waiting is the lock's own wait loop.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::latch_backend::LatchBackend;
use crate::locker::Locker;
use crate::notify::ReleaseWatch;
use crate::options::{Wait, check_wait};
use crate::waiter::{Attempts, Tried, Waiter};

/// How often a waiter reads the count again without an announcement: the backstop that turns
/// a lost announcement into a delay instead of a hang.
const RECHECK: Duration = Duration::from_secs(1);

/// A countdown latch: a count set once, counted down by anyone, and waited for until it
/// reaches zero, across every process (Redisson's `RCountDownLatch` layout on Redis).
///
/// Unlike Redisson's untimed `await`, a waiter reads the count again every second even without
/// an announcement, so a lost message only delays it.
///
/// Made by [`crate::Locker::latch`]; cheap to clone.
///
/// # Example
///
/// ```
/// use lock_core::{Locker, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let locker = Locker::new(MemoryBackend::new());
/// let loaded = locker.latch("shards-loaded")?;
/// loaded.try_set_count(1).await?;
/// let waiter = tokio::spawn({
///     let loaded = loaded.clone();
///     async move { loaded.wait().await }
/// });
/// loaded.count_down().await?; // the last shard is loaded: every waiter goes on
/// waiter.await.expect("task")?;
/// # Ok(())
/// # }
/// ```
pub struct CountDownLatch<B: LatchBackend> {
    backend: Arc<B>,
    name: Arc<str>,
}

impl<B: LatchBackend> Clone for CountDownLatch<B> {
    fn clone(&self) -> Self {
        CountDownLatch {
            backend: self.backend.clone(),
            name: self.name.clone(),
        }
    }
}

impl<B: LatchBackend> std::fmt::Debug for CountDownLatch<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<B: LatchBackend> Locker<B> {
    /// A handle on the countdown latch `name` (Redisson's `RCountDownLatch`; see
    /// [`CountDownLatch`]). Nothing is sent until the handle is used.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidName`] for a name the backend refuses, before any I/O.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// let locker = lock_core::Locker::new(lock_core::MemoryBackend::new());
    /// let started = locker.latch("started")?;
    /// started.try_set_count(3).await?;
    /// assert_eq!(started.count_down().await?, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn latch(&self, name: &str) -> Result<CountDownLatch<B>> {
        CountDownLatch::new(self.shared_backend().clone(), name)
    }
}

impl<B: LatchBackend> CountDownLatch<B> {
    /// A handle on the latch `name` of `backend`, the name checked.
    pub(crate) fn new(backend: Arc<B>, name: &str) -> Result<Self> {
        backend.check_name(name)?;
        Ok(CountDownLatch {
            backend,
            name: name.into(),
        })
    }

    /// The latch's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the count, unless the latch exists: returns whether it did. Every process can call
    /// it at start; only the first one sets the count. A count of 0 leaves the latch open.
    ///
    /// # Errors
    ///
    /// The backend's errors (safe to retry: a second call answers `false`).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have set the count.
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        self.backend.try_set_count(&self.name, count).await
    }

    /// Counts down by one and returns the count left; at zero every waiter goes on. Counting
    /// down an open latch changes nothing.
    ///
    /// # Errors
    ///
    /// The backend's errors; an ambiguous one ([`Error::is_ambiguous`]) may have counted down.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may have counted down.
    pub async fn count_down(&self) -> Result<u64> {
        self.backend.count_down(&self.name).await
    }

    /// The count now (0: open, or never set).
    ///
    /// # Errors
    ///
    /// The backend's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn count(&self) -> Result<u64> {
        self.backend.latch_count(&self.name).await
    }

    /// Waits until the count is zero (at once when it is, or when the latch was never set).
    ///
    /// # Errors
    ///
    /// The backend's errors: a retryable one (a reconnect, a failover) is retried with backoff
    /// for up to 30 s in a row.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads and waits.
    pub async fn wait(&self) -> Result<()> {
        match self.wait_with(Wait::Forever).await? {
            true => Ok(()),
            false => Err(Error::Protocol(
                "a wait without a deadline ended without the latch open".into(),
            )),
        }
    }

    /// Waits at most `timeout` for the count to reach zero: whether it did.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] for a zero timeout or one above
    /// [`MAX_DURATION`](crate::options::MAX_DURATION), before any I/O; the backend's errors (a
    /// retryable one is retried until the timeout).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads and waits.
    pub async fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        self.wait_with(Wait::Upto(timeout)).await
    }

    async fn wait_with(&self, wait: Wait) -> Result<bool> {
        check_wait(wait)?;
        let attempts = Open {
            backend: &*self.backend,
            name: &self.name,
        };
        Ok(Waiter::new(attempts, wait).acquire().await?.is_some())
    }

    /// Deletes the latch, which opens it for every waiter (an operator's reset); returns
    /// whether it existed.
    ///
    /// # Errors
    ///
    /// The backend's errors (safe to retry).
    ///
    /// # Cancel safety
    ///
    /// A dropped call may or may not have deleted it.
    pub async fn delete(&self) -> Result<bool> {
        self.backend.delete_latch(&self.name).await
    }
}

/// The attempts of one wait: read the count; zero wins.
struct Open<'a, B> {
    backend: &'a B,
    name: &'a str,
}

impl<B: LatchBackend> Attempts for Open<'_, B> {
    type Won = ();

    async fn attempt(&self) -> Result<Tried<()>> {
        Ok(match self.backend.latch_count(self.name).await? {
            0 => Tried::Won(()),
            _ => Tried::Busy {
                recheck: Some(RECHECK),
                pass_on: false,
            },
        })
    }

    async fn register(&self) -> Result<ReleaseWatch> {
        self.backend.watch_latch(self.name).await
    }
}

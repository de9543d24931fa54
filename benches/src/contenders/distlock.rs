//! distlock itself: `Locker<RedisBackend>` with the default backend settings, or (W4) a
//! `Locker` over a MultiLock / RedLock composite, or (W1P, W2P) over `PostgresBackend`.

use lock_core::{LockBackend, LockGuard, LockOptions, Locker, ReleaseOutcome};
use lock_redis::RedisBackend;

use super::{BenchError, LEASE};

/// Which entry point takes the lock.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// `lock_with(no_wait().fixed_lease(30 s))`: no watchdog.
    Fixed,
    /// `try_lock`: no wait, watchdog lease (registers with the watchdog).
    TryLock,
    /// `lock`: waits forever, watchdog lease.
    Lock,
}

/// One locker over one backend (for `RedisBackend`, one command connection).
pub struct Distlock<B: LockBackend = RedisBackend> {
    locker: Locker<B>,
    mode: Mode,
    fixed: LockOptions,
}

impl<B: LockBackend> Clone for Distlock<B> {
    fn clone(&self) -> Self {
        Distlock {
            locker: self.locker.clone(),
            mode: self.mode,
            fixed: self.fixed.clone(),
        }
    }
}

impl Distlock {
    /// Connects a backend with the default settings.
    pub async fn connect(url: &str, mode: Mode) -> Result<Self, BenchError> {
        Ok(Self::new(RedisBackend::connect(url).await?, mode))
    }

    /// Connects a backend that keeps the fast (non-reentrant) lock.
    pub async fn connect_fast(url: &str, mode: Mode) -> Result<Self, BenchError> {
        let backend = RedisBackend::builder(url)
            .lock_kind(lock_redis::LockKind::Fast)
            .connect()
            .await?;
        Ok(Self::new(backend, mode))
    }

    /// Connects the backend `builder` describes (a cluster, replica acknowledgement, a lock
    /// kind), taking locks the `mode` way.
    pub async fn connect_with(
        builder: lock_redis::RedisBackendBuilder,
        mode: Mode,
    ) -> Result<Self, BenchError> {
        Ok(Self::new(builder.connect().await?, mode))
    }
}

impl<B: LockBackend> Distlock<B> {
    /// A locker over `backend`.
    pub fn new(backend: B, mode: Mode) -> Self {
        Distlock {
            locker: Locker::new(backend),
            mode,
            fixed: LockOptions::new().no_wait().fixed_lease(LEASE),
        }
    }

    /// One lock + release.
    pub async fn lock_unlock(&self, key: &str) -> Result<(), BenchError> {
        let guard = match self.mode {
            Mode::Fixed => Some(self.locker.lock_with(key, &self.fixed).await?),
            Mode::TryLock => self.locker.try_lock(key).await?,
            Mode::Lock => Some(self.locker.lock(key).await?),
        };
        let guard = guard.ok_or_else(|| format!("distlock: {key} was busy"))?;
        match guard.release().await? {
            ReleaseOutcome::Released => Ok(()),
            other => Err(format!("distlock: release of {key} answered {other:?}").into()),
        }
    }

    /// Takes `count` more watchdog locks (`lock()`) on this locker, for a registry that is not
    /// empty while the row runs.
    pub async fn hold(&self, prefix: &str, count: usize) -> Result<Vec<LockGuard<B>>, BenchError> {
        let mut guards = Vec::with_capacity(count);
        for i in 0..count {
            guards.push(self.locker.lock(&format!("{prefix}:{i}")).await?);
        }
        Ok(guards)
    }
}

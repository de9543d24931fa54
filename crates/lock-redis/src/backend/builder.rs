//! Making a backend: [`RedisBackendBuilder`] checks the settings, connects, learns what the
//! server offers, and puts the layers together.

use std::time::Duration;

use lock_core::{Error, Result};

use crate::backend::options::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_POLL_INTERVAL, LockKind,
    NotificationMode,
};
use crate::backend::redis_backend::RedisBackend;
use crate::call::Calls;
use crate::connection::Connection;
use crate::connection::pubsub::Notifications;
use crate::kind::fast::NativeDelete;

/// Builds a [`RedisBackend`].
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use lock_redis::RedisBackend;
///
/// # async fn demo() -> Result<(), lock_core::Error> {
/// let backend = RedisBackend::builder("redis://:secret@127.0.0.1:6379/0")
///     .command_timeout(Duration::from_millis(500))
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedisBackendBuilder {
    url: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    notifications: NotificationMode,
    kind: LockKind,
}

impl RedisBackendBuilder {
    /// Which lock to keep: [`LockKind::Reentrant`] (the default) or [`LockKind::Fast`].
    #[must_use]
    pub fn lock_kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

    /// The timeout of each call to the server (capped at half the lease for calls that set one).
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// The limit for making the first connection.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How waiters learn about releases.
    #[must_use]
    pub fn notifications(mut self, mode: NotificationMode) -> Self {
        self.notifications = mode;
        self
    }

    /// Checks the configuration, connects, and returns the backend.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a bad URL or timeout (before any I/O);
    /// [`Error::NotPermitted`] for bad credentials; [`Error::ConnectionLost`] or
    /// [`Error::Timeout`] when the server cannot be reached.
    pub async fn connect(self) -> Result<RedisBackend> {
        for (what, value) in [
            ("command timeout", self.command_timeout),
            ("connect timeout", self.connect_timeout),
        ] {
            if value < Duration::from_millis(1) || value > Duration::from_secs(3600) {
                return Err(Error::InvalidConfig {
                    reason: format!("{what} {value:?} is outside 1 ms ..= 1 h"),
                });
            }
        }
        if let NotificationMode::Polling(every) = self.notifications
            && (every < Duration::from_millis(1) || every > Duration::from_secs(3600))
        {
            return Err(Error::InvalidConfig {
                reason: format!("poll interval {every:?} is outside 1 ms ..= 1 h"),
            });
        }
        let client =
            redis::Client::open(self.url.as_str()).map_err(|error| Error::InvalidConfig {
                reason: format!("bad Redis URL: {error}"),
            })?;
        let connection =
            Connection::standalone(client.clone(), self.connect_timeout, self.command_timeout)
                .await?;
        let native_delete = match self.kind {
            LockKind::Fast => NativeDelete::detect(&connection, self.connect_timeout).await,
            LockKind::Reentrant => NativeDelete::None,
        };
        let notifications = match self.notifications {
            NotificationMode::Polling(every) => Notifications::polling(every),
            NotificationMode::PubSub => {
                Notifications::pubsub(&client, self.command_timeout, DEFAULT_POLL_INTERVAL)
            }
        };
        Ok(RedisBackend::new(
            Calls::new(connection, self.command_timeout),
            notifications,
            self.kind,
            native_delete,
        ))
    }
}

impl RedisBackend {
    /// A builder for a backend at `url` (`redis://[user:password@]host:port[/db]`, or `rediss://`
    /// with a TLS feature).
    #[must_use]
    pub fn builder(url: impl Into<String>) -> RedisBackendBuilder {
        RedisBackendBuilder {
            url: url.into(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            notifications: NotificationMode::PubSub,
            kind: LockKind::Reentrant,
        }
    }

    /// Connects with the default settings.
    ///
    /// # Errors
    ///
    /// As [`RedisBackendBuilder::connect`].
    pub async fn connect(url: impl Into<String>) -> Result<RedisBackend> {
        Self::builder(url).connect().await
    }
}

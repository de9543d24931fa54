//! Where the standalone connection finds its server: a fixed address, or the primary that
//! Sentinels name at the moment of connecting.
//!
//! redis-rs resolves a Sentinel service once and keeps the connection on that address after a
//! failover; here every new connection (each replacement of the command connection) asks the
//! Sentinels again, so a replacement after a failover reaches the new primary.

use redis::{Client, RedisResult};

/// Where new connections go.
#[derive(Clone)]
pub(crate) enum Source {
    /// One server.
    Fixed(Client),
    /// The primary of a Sentinel service, looked up for each new connection.
    #[cfg(feature = "sentinel")]
    Sentinel(SentinelService),
}

/// A Sentinel service: the client that looks its primary up, and what the switch listener
/// needs (`super::sentinel_watch`).
#[cfg(feature = "sentinel")]
#[derive(Clone)]
pub(crate) struct SentinelService {
    pub(crate) client: std::sync::Arc<tokio::sync::Mutex<redis::sentinel::SentinelClient>>,
    pub(crate) sentinels: Vec<redis::ConnectionInfo>,
    pub(crate) service: String,
}

impl Source {
    /// The client of the server to connect to now.
    ///
    /// # Errors
    ///
    /// No Sentinel answers, or none names a primary that confirms its role.
    pub(crate) async fn client(&self) -> RedisResult<Client> {
        match self {
            Source::Fixed(client) => Ok(client.clone()),
            #[cfg(feature = "sentinel")]
            Source::Sentinel(sentinel) => sentinel.client.lock().await.async_get_client().await,
        }
    }

    /// Whether the server can change under the connection (a failover): a `READONLY` answer
    /// then means "look the primary up again", not a refusal.
    pub(crate) fn follows_primary(&self) -> bool {
        match self {
            Source::Fixed(_) => false,
            #[cfg(feature = "sentinel")]
            Source::Sentinel(_) => true,
        }
    }
}

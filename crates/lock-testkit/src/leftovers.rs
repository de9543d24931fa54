//! "Nothing left behind": after a test, its lock keys are gone and no connection is still
//! subscribed to anything on its servers.
//!
//! A lock that was released (or whose lease ran out) leaves no key, and a backend whose waiters
//! are all gone holds no subscription, even while the backend itself is still alive.
//! [`assert_nothing_left`] checks both on every server, and [`check_nothing_left`] returns what
//! it found instead of panicking. Both look again until everything is clean or a bounded wait
//! has passed, since an expiring lease or an unsubscribe still in flight (or retried after a
//! fault) takes a moment to land.
//!
//! Check while the clients under test are **still alive**: closing a connection drops its
//! subscriptions on the server, which would hide a leak.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

/// The pause between two looks at the servers while something is still left.
const POLL: Duration = Duration::from_millis(50);
/// The limit of one look at one server (connecting and every query).
const LOOK_TIMEOUT: Duration = Duration::from_secs(2);

/// What one server still holds (see [`check_nothing_left`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerLeftovers {
    /// The server's URL, as given.
    pub url: String,
    /// The keys asked about that still exist.
    pub keys: Vec<String>,
    /// `PUBSUB CHANNELS` and `PUBSUB SHARDCHANNELS`: the channels some connection is
    /// subscribed to, sorted.
    pub channels: Vec<String>,
    /// Those of `channels` that `PUBSUB SHARDCHANNELS` gave (sharded pub/sub), sorted: tells a
    /// leak of sharded subscriptions from one of plain subscriptions.
    pub shard_channels: Vec<String>,
    /// The server's role (`ROLE`: `master`, `slave`, ...), looked up when it holds a
    /// subscription: a sharded subscription on a replica went there by a path of its own.
    pub role: Option<String>,
    /// The `CLIENT LIST` entries of the connections holding subscriptions (when any): which
    /// connection leaked, how old it is, and how many plain and sharded channels it holds.
    pub subscribers: Vec<String>,
    /// `PUBSUB NUMPAT`: how many pattern subscriptions exist.
    pub patterns: u64,
    /// Why the server could not be inspected (it counts as not clean).
    pub error: Option<String>,
}

impl ServerLeftovers {
    /// Whether nothing is left on this server (and it could be inspected).
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.keys.is_empty()
            && self.channels.is_empty()
            && self.patterns == 0
            && self.error.is_none()
    }
}

impl fmt::Display for ServerLeftovers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.url)?;
        if let Some(error) = &self.error {
            return write!(f, " could not be inspected: {error}");
        }
        if self.is_clean() {
            return write!(f, " nothing left");
        }
        if !self.keys.is_empty() {
            write!(f, " keys {:?}", self.keys)?;
        }
        if !self.channels.is_empty() {
            write!(f, " subscribed channels {:?}", self.channels)?;
            if !self.shard_channels.is_empty() {
                write!(f, " (sharded: {:?})", self.shard_channels)?;
            }
            if let Some(role) = &self.role {
                write!(f, " on a {role}")?;
            }
            for subscriber in &self.subscribers {
                write!(f, "\n  held by {subscriber}")?;
            }
        }
        if self.patterns > 0 {
            write!(f, " {} pattern subscription(s)", self.patterns)?;
        }
        Ok(())
    }
}

/// What the servers of a test still hold: one entry per server that is not clean.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leftovers {
    /// The servers with something left (or that could not be inspected), in the order given.
    pub servers: Vec<ServerLeftovers>,
}

impl Leftovers {
    /// Whether every server is clean.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

impl fmt::Display for Leftovers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "nothing left behind");
        }
        for (i, server) in self.servers.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{server}")?;
        }
        Ok(())
    }
}

/// Looks at every server at `urls` (e.g. [`RedisServer::url`](crate::RedisServer::url) or
/// [`RedisNodes::urls`](crate::RedisNodes::urls)) until none holds any of `keys` or any
/// subscription (channel or pattern), for at most `within`, and returns what the last look
/// found: empty when everything was clean in time. `within` of zero looks once.
///
/// Each look opens a fresh connection to each server (so a restarted server is fine) and is
/// bounded to 2 s per server; a server that cannot be inspected is reported with its error.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use lock_testkit::{RedisServer, check_nothing_left};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = RedisServer::start()?;
/// let mut con = server.connection().await;
/// redis::cmd("SET").arg("orders:42").arg("held").exec_async(&mut con).await?;
///
/// let left = check_nothing_left([server.url()], &["orders:42"], Duration::ZERO).await;
/// assert_eq!(left.servers[0].keys, ["orders:42"]);
/// assert!(left.servers[0].channels.is_empty());
///
/// redis::cmd("DEL").arg("orders:42").exec_async(&mut con).await?;
/// let left = check_nothing_left([server.url()], &["orders:42"], Duration::from_secs(1)).await;
/// assert!(left.is_empty(), "{left}");
/// # Ok(())
/// # }
/// ```
pub async fn check_nothing_left<I, S>(urls: I, keys: &[&str], within: Duration) -> Leftovers
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let urls: Vec<String> = urls
        .into_iter()
        .map(|url| url.as_ref().to_owned())
        .collect();
    let deadline = Instant::now() + within;
    loop {
        let mut left = Leftovers::default();
        for url in &urls {
            let server = look(url, keys).await;
            if !server.is_clean() {
                left.servers.push(server);
            }
        }
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(POLL.min(deadline - Instant::now())).await;
    }
}

/// Asserts that, within `within`, no server at `urls` holds any of `keys` or any subscription
/// (channel or pattern): see [`check_nothing_left`]. Call it while the clients under test are
/// still alive.
///
/// # Panics
///
/// With the leftovers of each server when something is still there after `within`.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use lock_testkit::{RedisNodes, assert_nothing_left};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let nodes = RedisNodes::start(2)?;
/// let client = nodes[0].client();
/// let mut subscriber = client.get_async_pubsub().await?;
/// subscriber.subscribe("redisson_lock__channel:{orders:42}").await?;
/// // ... the test's locks ...
/// drop(subscriber); // the last waiter is gone: its subscription must go too
/// assert_nothing_left(nodes.urls(), &["orders:42"], Duration::from_secs(2)).await;
/// # Ok(())
/// # }
/// ```
pub async fn assert_nothing_left<I, S>(urls: I, keys: &[&str], within: Duration)
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let left = check_nothing_left(urls, keys, within).await;
    assert!(left.is_empty(), "left behind after {within:?}:\n{left}");
}

/// One look at one server.
async fn look(url: &str, keys: &[&str]) -> ServerLeftovers {
    let mut server = ServerLeftovers {
        url: url.to_owned(),
        ..ServerLeftovers::default()
    };
    match tokio::time::timeout(LOOK_TIMEOUT, query(url, keys, &mut server)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => server.error = Some(error.to_string()),
        Err(_) => server.error = Some(format!("no answer within {LOOK_TIMEOUT:?}")),
    }
    server
}

async fn query(url: &str, keys: &[&str], server: &mut ServerLeftovers) -> redis::RedisResult<()> {
    let client = redis::Client::open(url)?;
    let mut con = client.get_multiplexed_async_connection().await?;
    for key in keys {
        let exists: redis::RedisResult<u64> =
            redis::cmd("EXISTS").arg(key).query_async(&mut con).await;
        match exists {
            Ok(0) => {}
            Ok(_) => server.keys.push((*key).to_owned()),
            // A cluster node that does not serve the key's slot: the key is not here (give
            // every node, and the one that serves it is looked at too).
            Err(error)
                if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Moved) => {}
            Err(error) => return Err(error),
        }
    }
    server.channels = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(&mut con)
        .await?;
    // Sharded channels (Redis and Valkey 7+; an older server refuses the question, and has
    // none).
    let sharded: redis::RedisResult<Vec<String>> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .query_async(&mut con)
        .await;
    server.shard_channels = sharded.unwrap_or_default();
    server.shard_channels.sort();
    server
        .channels
        .extend(server.shard_channels.iter().cloned());
    server.channels.sort();
    if !server.channels.is_empty() {
        let role: redis::RedisResult<Vec<redis::Value>> =
            redis::cmd("ROLE").query_async(&mut con).await;
        server.role = role.ok().and_then(|role| match role.first() {
            Some(redis::Value::BulkString(name)) => Some(String::from_utf8_lossy(name).into()),
            Some(redis::Value::SimpleString(name)) => Some(name.clone()),
            _ => None,
        });
        let clients: redis::RedisResult<String> =
            redis::cmd("CLIENT").arg("LIST").query_async(&mut con).await;
        server.subscribers = clients
            .unwrap_or_default()
            .lines()
            .filter(|line| {
                line.split(' ').any(|field| {
                    ["sub=", "ssub="]
                        .iter()
                        .any(|kind| field.strip_prefix(kind).is_some_and(|count| count != "0"))
                })
            })
            .map(|line| {
                // The fields that say which connection and what it holds.
                line.split(' ')
                    .filter(|field| {
                        [
                            "id=", "addr=", "age=", "flags=", "sub=", "ssub=", "cmd=", "resp=",
                        ]
                        .iter()
                        .any(|name| field.starts_with(name))
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
    }
    server.patterns = redis::cmd("PUBSUB")
        .arg("NUMPAT")
        .query_async(&mut con)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisServer;

    #[tokio::test]
    async fn reports_subscriptions_until_they_are_gone() {
        let server = RedisServer::start().expect("start");
        assert!(
            check_nothing_left([server.url()], &["k"], Duration::ZERO)
                .await
                .is_empty()
        );

        let mut subscriber = server.client().get_async_pubsub().await.unwrap();
        subscriber.subscribe("b").await.unwrap();
        subscriber.subscribe("a").await.unwrap();
        subscriber.psubscribe("p*").await.unwrap();
        let left = check_nothing_left([server.url()], &["k"], Duration::from_millis(100)).await;
        assert_eq!(left.servers.len(), 1);
        assert_eq!(left.servers[0].channels, ["a", "b"]);
        assert_eq!(left.servers[0].patterns, 1);
        assert!(left.servers[0].keys.is_empty());
        let text = left.to_string();
        assert!(text.contains(r#"subscribed channels ["a", "b"]"#), "{text}");

        // Unsubscribed a moment later: the bounded wait sees it.
        let started = Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            drop(subscriber);
        });
        assert_nothing_left([server.url()], &["k"], Duration::from_secs(5)).await;
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    async fn a_server_that_cannot_be_inspected_is_not_clean() {
        let mut server = RedisServer::start().expect("start");
        let url = server.url();
        server.kill().unwrap();
        let left = check_nothing_left([url.as_str()], &[], Duration::ZERO).await;
        assert_eq!(left.servers.len(), 1);
        assert!(left.servers[0].error.is_some(), "{left}");
        assert!(
            left.to_string().contains("could not be inspected"),
            "{left}"
        );
    }

    #[tokio::test]
    #[should_panic(expected = "keys [\"k\"]")]
    async fn assert_nothing_left_panics_with_the_leftovers() {
        let server = RedisServer::start().expect("start");
        let mut con = server.connection().await;
        redis::cmd("SET")
            .arg("k")
            .arg("v")
            .exec_async(&mut con)
            .await
            .unwrap();
        assert_nothing_left([server.url()], &["k"], Duration::from_millis(100)).await;
    }
}

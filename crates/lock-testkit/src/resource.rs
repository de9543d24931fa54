//! A fenced "protected resource" on its own Redis server, for safety tests of locks.
//!
//! [`FencedResource`] is the thing a lock protects: a counter stored in Redis, updated by
//! read-modify-write cycles, that refuses writes carrying a stale fencing token. It lives on a
//! server of its own (not the lock server), so faults can be injected into the lock service
//! without touching the resource and vice versa.
//!
//! Each resource key `k` is the hash `resource:k` with the fields
//!
//! | field | meaning |
//! |---|---|
//! | `value` | the counter (an `i64`; missing means 0) |
//! | `token` | the highest fencing token seen so far (missing: no fenced access yet) |
//! | `owner` | the owner that presented `token` (or, after an unfenced write, the last writer) |
//!
//! Every operation is one Lua script, so it is atomic on the server.
//!
//! # The fencing rule
//!
//! A fenced access (a [`write`](FencedResource::write) or a
//! [`read_fenced`](FencedResource::read_fenced) with a token) by `(token, owner)` is accepted
//! when there is no `token` field yet, when `token > last_token`, or when
//! `token == last_token && owner == last_owner` (the same holder accessing again). It then
//! records `token` and `owner`. Otherwise it is rejected and changes nothing. Tokens are
//! compared exactly as unsigned 64-bit integers (as decimal strings, not Lua doubles).
//!
//! An unfenced write (no token) is always accepted: it sets `value` and `owner` and leaves
//! `token` alone. It exists to show what happens without fencing.
//!
//! # Why reads are fenced too
//!
//! Fencing only the write does **not** make a read-modify-write safe. With two overlapping
//! holders A (token 5) and B (token 6): A reads 10, B reads 10, A writes 11 (5 > 4: accepted),
//! B writes 11 (6 > 5: accepted), and one increment is lost although every write carried a valid
//! token. [`increment`](FencedResource::increment) therefore performs a *fenced read*: the read
//! also records its token, so A's later write (5 < 6) is rejected. With fenced reads, an
//! accepted write is always based on the latest accepted write, so fenced increments never lose
//! updates, whatever the lock does. [`increment_write_fenced`](FencedResource::increment_write_fenced)
//! keeps the write-only variant to demonstrate the gap.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use lock_testkit::RedisServer;
//! use lock_testkit::resource::{FencedResource, WriteOutcome};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let server = RedisServer::start()?; // the resource's own server, not the lock server
//! let resource = FencedResource::connect(&server.url()).await?;
//!
//! // The holder of token 7 increments the counter (fenced read, then fenced write).
//! let step = resource.increment("orders", Some(7), "client-a:1", Duration::ZERO).await?;
//! assert_eq!(step.outcome, WriteOutcome::Accepted);
//!
//! // A holder with an older token is refused and changes nothing.
//! let stale = resource.write("orders", 100, Some(6), "client-b:1").await?;
//! assert_eq!(stale, WriteOutcome::RejectedStale { last_token: 7 });
//!
//! let state = resource.read("orders").await?;
//! assert_eq!((state.value, state.last_token), (1, Some(7)));
//! assert_eq!(state.last_owner.as_deref(), Some("client-a:1"));
//! assert_eq!((resource.stats().accepted, resource.stats().rejected), (1, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::Script;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// The Lua fencing rule shared by the fenced read and the write scripts.
///
/// `fence_ok(token, owner, last_token, last_owner)` compares decimal strings without leading
/// zeros, which orders them exactly like the integers they spell (Lua numbers are doubles and
/// would lose precision above 2^53).
const FENCE_RULE: &str = r"
local function fence_ok(token, owner, last_token, last_owner)
  if not last_token then return true end
  if #token ~= #last_token then return #token > #last_token end
  if token ~= last_token then return token > last_token end
  return owner == last_owner
end
";

/// `KEYS[1]`: the hash. Returns `[value, token, owner]`, each possibly nil.
static READ: LazyLock<Script> =
    LazyLock::new(|| Script::new("return redis.call('HMGET', KEYS[1], 'value', 'token', 'owner')"));

/// `KEYS[1]`: the hash; `ARGV[1]`: token; `ARGV[2]`: owner.
/// Returns `[accepted (1/0), value, token, owner]` (the state after the call).
static READ_FENCED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{FENCE_RULE}
local cur = redis.call('HMGET', KEYS[1], 'value', 'token', 'owner')
if fence_ok(ARGV[1], ARGV[2], cur[2], cur[3]) then
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'owner', ARGV[2])
  return {{1, cur[1], ARGV[1], ARGV[2]}}
end
return {{0, cur[1], cur[2], cur[3]}}
"
    ))
});

/// `KEYS[1]`: the hash; `ARGV[1]`: new value; `ARGV[2]`: token (empty: unfenced);
/// `ARGV[3]`: owner. Returns `[1, nil]` when accepted, `[0, last_token]` when rejected.
static WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{FENCE_RULE}
if ARGV[2] == '' then
  redis.call('HSET', KEYS[1], 'value', ARGV[1], 'owner', ARGV[3])
  return {{1, false}}
end
local cur = redis.call('HMGET', KEYS[1], 'token', 'owner')
if not fence_ok(ARGV[2], ARGV[3], cur[1], cur[2]) then
  return {{0, cur[1]}}
end
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'token', ARGV[2], 'owner', ARGV[3])
return {{1, false}}
"
    ))
});

/// What the resource said to a write (or to a fenced read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteOutcome {
    /// The write was applied (and its token and owner recorded, if it had a token).
    Accepted,
    /// The token was older than the highest one seen (or equal to it but from another owner).
    /// Nothing changed.
    RejectedStale {
        /// The highest token the resource had seen when it refused.
        last_token: u64,
    },
}

impl WriteOutcome {
    /// Whether the write was applied.
    pub fn is_accepted(self) -> bool {
        matches!(self, Self::Accepted)
    }
}

/// The state of one resource key, as returned by [`FencedResource::read`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceState {
    /// The counter (0 if it was never written).
    pub value: i64,
    /// The highest fencing token seen so far, if any fenced access happened.
    pub last_token: Option<u64>,
    /// The owner that presented `last_token`, or the last unfenced writer.
    pub last_owner: Option<String>,
}

/// The result of a fenced read ([`FencedResource::read_fenced`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedRead {
    /// The state after the read (with the reader's token and owner if it was accepted).
    pub state: ResourceState,
    /// `Accepted` if the reader's token is now the fence; `RejectedStale` if a newer token had
    /// already been seen (any write with this token will be refused too).
    pub outcome: WriteOutcome,
}

/// One read-modify-write by [`FencedResource::increment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Increment {
    /// The value read.
    pub read_value: i64,
    /// The value written (`read_value + 1`).
    pub written_value: i64,
    /// The write's outcome.
    pub outcome: WriteOutcome,
    /// When the write was sent (right before the script call), on tokio's monotonic clock.
    /// Pass it to [`HoldRecorder::write_sent_at`](crate::history::HoldRecorder::write_sent_at).
    pub write_sent_at: Instant,
}

/// Counts of writes as seen from the Rust side (shared by clones of a [`FencedResource`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteStats {
    /// Writes that returned [`WriteOutcome::Accepted`].
    pub accepted: u64,
    /// Writes that returned [`WriteOutcome::RejectedStale`].
    pub rejected: u64,
    /// Fenced reads that found a newer token already recorded.
    pub stale_reads: u64,
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    rejected: AtomicU64,
    stale_reads: AtomicU64,
}

/// A counter on a Redis server that refuses writes carrying stale fencing tokens. See the
/// [module documentation](self) for the data layout and the fencing rule.
///
/// Cheap to clone; clones share the connection and the [`stats`](Self::stats) counters.
#[derive(Clone)]
pub struct FencedResource {
    connection: MultiplexedConnection,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for FencedResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedResource")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl FencedResource {
    /// A resource using an existing connection (for example
    /// [`RedisServer::connection`](crate::RedisServer::connection)).
    pub fn new(connection: MultiplexedConnection) -> Self {
        Self {
            connection,
            counters: Arc::default(),
        }
    }

    /// Connects to the resource server at `url` (one multiplexed connection).
    pub async fn connect(url: &str) -> redis::RedisResult<Self> {
        let client = redis::Client::open(url)?;
        Ok(Self::new(client.get_multiplexed_async_connection().await?))
    }

    /// The Redis key holding the resource `key`: `resource:<key>`.
    pub fn redis_key(key: &str) -> String {
        format!("resource:{key}")
    }

    /// Reads the state of `key` without changing anything.
    pub async fn read(&self, key: &str) -> redis::RedisResult<ResourceState> {
        let (value, last_token, last_owner): (Option<i64>, Option<u64>, Option<String>) = READ
            .key(Self::redis_key(key))
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(ResourceState {
            value: value.unwrap_or(0),
            last_token,
            last_owner,
        })
    }

    /// Reads `key` and, if `(token, owner)` passes the fencing rule, records them as the
    /// fence, so that later writes with older tokens are refused.
    ///
    /// A rejected fenced read changes nothing and is counted in [`WriteStats::stale_reads`].
    pub async fn read_fenced(
        &self,
        key: &str,
        token: u64,
        owner: &str,
    ) -> redis::RedisResult<FencedRead> {
        let (accepted, value, last_token, last_owner): (
            i64,
            Option<i64>,
            Option<u64>,
            Option<String>,
        ) = READ_FENCED
            .key(Self::redis_key(key))
            .arg(token.to_string())
            .arg(owner)
            .invoke_async(&mut self.connection.clone())
            .await?;
        let outcome = if accepted == 1 {
            WriteOutcome::Accepted
        } else {
            self.counters.stale_reads.fetch_add(1, Ordering::Relaxed);
            WriteOutcome::RejectedStale {
                last_token: last_token.unwrap_or(0),
            }
        };
        Ok(FencedRead {
            state: ResourceState {
                value: value.unwrap_or(0),
                last_token,
                last_owner,
            },
            outcome,
        })
    }

    /// Writes `new_value` to `key`.
    ///
    /// With `Some(token)` the write is fenced: accepted only by the fencing rule (see the
    /// [module documentation](self)), recording `token` and `owner`. With `None` it is always
    /// accepted (unfenced mode). The outcome is counted in [`stats`](Self::stats).
    pub async fn write(
        &self,
        key: &str,
        new_value: i64,
        token: impl Into<Option<u64>>,
        owner: &str,
    ) -> redis::RedisResult<WriteOutcome> {
        let token: Option<u64> = token.into();
        let (accepted, last_token): (i64, Option<u64>) = WRITE
            .key(Self::redis_key(key))
            .arg(new_value)
            .arg(token.map(|token| token.to_string()).unwrap_or_default())
            .arg(owner)
            .invoke_async(&mut self.connection.clone())
            .await?;
        if accepted == 1 {
            self.counters.accepted.fetch_add(1, Ordering::Relaxed);
            Ok(WriteOutcome::Accepted)
        } else {
            self.counters.rejected.fetch_add(1, Ordering::Relaxed);
            Ok(WriteOutcome::RejectedStale {
                last_token: last_token.unwrap_or(0),
            })
        }
    }

    /// The workload's read-modify-write: read `key`, sleep `pause` (if not zero), write the
    /// value read plus one.
    ///
    /// With `Some(token)` the read is a [fenced read](Self::read_fenced) and the write is
    /// fenced, so no update is ever lost (a stale holder's write is refused instead). With
    /// `None` it is a plain read and an unfenced write, which loses updates when holders
    /// overlap.
    pub async fn increment(
        &self,
        key: &str,
        token: impl Into<Option<u64>>,
        owner: &str,
        pause: Duration,
    ) -> redis::RedisResult<Increment> {
        let token: Option<u64> = token.into();
        let read_value = match token {
            Some(token) => self.read_fenced(key, token, owner).await?.state.value,
            None => self.read(key).await?.value,
        };
        self.finish_increment(key, read_value, token, owner, pause)
            .await
    }

    /// Like [`increment`](Self::increment) with a token, but with a plain (unfenced) read:
    /// only the write is fenced. This can lose updates when holders overlap (see the
    /// [module documentation](self#why-reads-are-fenced-too)); it exists to show that.
    pub async fn increment_write_fenced(
        &self,
        key: &str,
        token: u64,
        owner: &str,
        pause: Duration,
    ) -> redis::RedisResult<Increment> {
        let read_value = self.read(key).await?.value;
        self.finish_increment(key, read_value, Some(token), owner, pause)
            .await
    }

    async fn finish_increment(
        &self,
        key: &str,
        read_value: i64,
        token: Option<u64>,
        owner: &str,
        pause: Duration,
    ) -> redis::RedisResult<Increment> {
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        let written_value = read_value.wrapping_add(1);
        let write_sent_at = Instant::now();
        let outcome = self.write(key, written_value, token, owner).await?;
        Ok(Increment {
            read_value,
            written_value,
            outcome,
            write_sent_at,
        })
    }

    /// Takes the next token from a counter `resource-tokens:<key>` (`INCR`) on the resource
    /// server: tokens that increase per call but come from no lock. For negative controls
    /// ("fenced but unlocked").
    pub async fn next_token(&self, key: &str) -> redis::RedisResult<u64> {
        redis::cmd("INCR")
            .arg(format!("resource-tokens:{key}"))
            .query_async(&mut self.connection.clone())
            .await
    }

    /// Deletes the resource `key` (and its token counter), so it reads as value 0, no token.
    pub async fn reset(&self, key: &str) -> redis::RedisResult<()> {
        redis::cmd("DEL")
            .arg(Self::redis_key(key))
            .arg(format!("resource-tokens:{key}"))
            .exec_async(&mut self.connection.clone())
            .await
    }

    /// The write counts seen by this resource and its clones.
    pub fn stats(&self) -> WriteStats {
        WriteStats {
            accepted: self.counters.accepted.load(Ordering::Relaxed),
            rejected: self.counters.rejected.load(Ordering::Relaxed),
            stale_reads: self.counters.stale_reads.load(Ordering::Relaxed),
        }
    }
}

//! Wire compatibility with Redisson's `RPermitExpirableSemaphore`: Redisson's own Lua scripts,
//! copied verbatim from `org.redisson.RedissonPermitExpirableSemaphore`, sent with `EVAL` on a
//! plain connection with the keys and arguments Redisson passes (permit ids as 16 raw bytes,
//! lease ends and "now" from this process's clock, as Redisson's client computes them), against
//! the same count, `{name}:timeout` set and channel as distlock's lease-bound permits
//! ([`Permits`](lock_core::Permits)). Each side's permits count against the other's, each side's
//! expired permits are taken back by the other, and each side wakes the other.
//!
//! One server serves every case of this file: cases use fresh names, and the server is started
//! by the first case and stopped when the last one running lets go.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_core::{LockOptions, Locker, Permits};
use lock_redis::RedisBackend;
use lock_redis::redis::{self, aio::MultiplexedConnection};
use lock_testkit::conformance::{LeaseWindow, fresh_name, run};
use lock_testkit::{RedisServer, SharedFixture};

/// How long a woken waiter may take to get its permit: well under the one-second re-check that
/// would get it without any announcement heard.
const HAND_OFF: Duration = Duration::from_millis(700);

// Redisson's scripts, verbatim (the Java string concatenations, piece by piece), from
// redisson/src/main/java/org/redisson/RedissonPermitExpirableSemaphore.java at Redisson commit
// 66863978b4a9.

/// `tryAcquireAsync(List<String> ids, long timeoutDate)` (behind every acquire): KEYS = [name,
/// timeoutName, channelName], ARGV = [ids.size(), timeoutDate, System.currentTimeMillis(),
/// nonExpirableTimeout, publish command, the ids as raw bytes...]; `'OK'` when taken,
/// `':' .. score` of the nearest permit out, or nil.
const TRY_ACQUIRE: &str = concat!(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); ",
    "if #expiredIds > 0 then ",
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); ",
    "local value = redis.call('incrby', KEYS[1], #expiredIds); ",
    "if tonumber(value) > 0 then ",
    "redis.call(ARGV[5], KEYS[3], value); ",
    "end;",
    "end; ",
    "local value = redis.call('get', KEYS[1]); ",
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then ",
    "redis.call('decrby', KEYS[1], ARGV[1]); ",
    "for i = 6, #ARGV, 1 do ",
    "redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); ",
    "end; ",
    "local ttl = redis.call('pttl', KEYS[1]); ",
    "if ttl > 0 then ",
    "redis.call('pexpire', KEYS[2], ttl); ",
    "end; ",
    "return 'OK'; ",
    "end; ",
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); ",
    "if v[1] ~= nil and v[2] ~= ARGV[4] then ",
    "return ':' .. tostring(v[2]); ",
    "end ",
    "return nil;",
);

/// `tryReleaseAsync(String permitId)`: KEYS = [name, channelName, timeoutName], ARGV = [id as
/// raw bytes, 1, System.currentTimeMillis(), publish command]; 1 when a live permit was given
/// back.
const TRY_RELEASE: &str = concat!(
    "local expire = redis.call('zscore', KEYS[3], ARGV[1]);",
    "local removed = redis.call('zrem', KEYS[3], ARGV[1]);",
    "if tonumber(removed) ~= 1 then ",
    "return 0;",
    "end;",
    "local value = redis.call('incrby', KEYS[1], ARGV[2]); ",
    "redis.call(ARGV[4], KEYS[2], value); ",
    "if tonumber(expire) <= tonumber(ARGV[3]) then ",
    "return 0;",
    "end;",
    "return 1;",
);

/// `availablePermitsAsync()`: KEYS = [name, timeoutName, channelName], ARGV =
/// [System.currentTimeMillis(), publish command].
const AVAILABLE_PERMITS: &str = concat!(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); ",
    "if #expiredIds > 0 then ",
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); ",
    "local value = redis.call('incrby', KEYS[1], #expiredIds); ",
    "if tonumber(value) > 0 then ",
    "redis.call(ARGV[2], KEYS[3], value); ",
    "end;",
    "return value; ",
    "end; ",
    "local ret = redis.call('get', KEYS[1]); ",
    "return ret == false and 0 or ret;",
);

/// `acquiredPermitsAsync()`: KEYS = [name, timeoutName, channelName], ARGV =
/// [System.currentTimeMillis(), publish command].
const ACQUIRED_PERMITS: &str = concat!(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, -1); ",
    "if #expiredIds > 0 then ",
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); ",
    "local value = redis.call('incrby', KEYS[1], #expiredIds); ",
    "if tonumber(value) > 0 then ",
    "redis.call(ARGV[2], KEYS[3], value); ",
    "end;",
    "end; ",
    "local acquired = redis.call('zcount', KEYS[2], 0, '+inf'); ",
    "return acquired == false and 0 or acquired;",
);

/// `trySetPermitsAsync(permits)`: KEYS = [name, channelName], ARGV = [permits, publish
/// command]; 1 when set.
const TRY_SET_PERMITS: &str = concat!(
    "local value = redis.call('get', KEYS[1]); ",
    "if (value == false) then ",
    "redis.call('set', KEYS[1], ARGV[1]); ",
    "redis.call(ARGV[2], KEYS[2], ARGV[1]); ",
    "return 1;",
    "end;",
    "return 0;",
);

/// `addPermitsAsync(permits)`: KEYS = [name, channelName], ARGV = [permits, publish command].
const ADD_PERMITS: &str = concat!(
    "local value = redis.call('get', KEYS[1]); ",
    "if (value == false) then ",
    "value = 0;",
    "end;",
    "redis.call('set', KEYS[1], tonumber(value) + tonumber(ARGV[1])); ",
    "if tonumber(ARGV[1]) > 0 then ",
    "redis.call(ARGV[2], KEYS[2], ARGV[1]); ",
    "end;",
);

/// `RedissonPermitExpirableSemaphore.nonExpirableTimeout`: the score of a permit taken without
/// a lease.
const NON_EXPIRABLE_TIMEOUT: i64 = 922_337_203_685_477;

/// `PublishSubscribeService.getPublishCommand()` without sharded pub/sub (one server).
const PUBLISH_COMMAND: &str = "PUBLISH";

/// `System.currentTimeMillis()` of this process, the clock Redisson's client reads.
fn client_now() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970");
    i64::try_from(since.as_millis()).expect("milliseconds fit")
}

/// `RedissonObject.suffixName(name, "timeout")` and `prefixName("redisson_sc", name)`,
/// written out here, not taken from distlock, so the test checks distlock's own derivation.
fn redisson_keys(name: &str) -> (String, String) {
    if name.contains('{') {
        (format!("{name}:timeout"), format!("redisson_sc:{name}"))
    } else {
        (
            format!("{{{name}}}:timeout"),
            format!("redisson_sc:{{{name}}}"),
        )
    }
}

/// A Redisson permit id: `ServiceManager.generateIdArray()`, 16 random bytes (Redisson hands
/// the user their hex dump and sends the raw bytes).
fn redisson_id() -> [u8; 16] {
    rand::random()
}

/// `ByteBufUtil.hexDump`: how Redisson writes a permit id for its user.
fn hex_dump(id: &[u8]) -> String {
    id.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// What Redisson's acquire script answered.
#[derive(Debug, PartialEq)]
enum Acquired {
    Taken,
    /// Not taken: the score of the nearest permit out.
    Nearest(i64),
    /// Not taken, nothing out with a lease.
    Nothing,
}

/// A Redisson `RPermitExpirableSemaphore` on `name`: its scripts on a plain connection.
struct Redisson {
    con: MultiplexedConnection,
    name: String,
    timeout_name: String,
    channel_name: String,
}

impl Redisson {
    fn new(con: MultiplexedConnection, name: &str) -> Self {
        let (timeout_name, channel_name) = redisson_keys(name);
        Redisson {
            con,
            name: name.to_owned(),
            timeout_name,
            channel_name,
        }
    }

    fn eval(script: &str, keys: &[&str]) -> redis::Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(script).arg(keys.len()).arg(keys);
        eval
    }

    /// `tryAcquire(leaseTime)` (`tryAcquire()` with `None`: a permit without a lease) of the
    /// permit `id`: one attempt, as `tryAcquireAsync(1, timeoutDate)`.
    async fn try_acquire(&mut self, id: [u8; 16], lease: Option<Duration>) -> Acquired {
        // calcTimeout(leaseTime, unit)
        let timeout_date = match lease {
            Some(lease) => client_now() + i64::try_from(lease.as_millis()).expect("lease"),
            None => NON_EXPIRABLE_TIMEOUT,
        };
        let reply: Option<Vec<u8>> = Self::eval(
            TRY_ACQUIRE,
            &[&self.name, &self.timeout_name, &self.channel_name],
        )
        .arg(1)
        .arg(timeout_date)
        .arg(client_now())
        .arg(NON_EXPIRABLE_TIMEOUT)
        .arg(PUBLISH_COMMAND)
        .arg(&id[..])
        .query_async(&mut self.con)
        .await
        .expect("Redisson tryAcquire");
        match reply.as_deref() {
            None => Acquired::Nothing,
            Some(b"OK") => Acquired::Taken,
            Some(other) => {
                let text = std::str::from_utf8(other).expect("a text reply");
                let score = text
                    .strip_prefix(':')
                    .unwrap_or_else(|| panic!("unexpected tryAcquire reply {text:?}"));
                // Redisson's Long.parseLong: the score must be an integer.
                Acquired::Nearest(score.parse().unwrap_or_else(|_| {
                    panic!("nearest timeout {score:?} does not read as a Long")
                }))
            }
        }
    }

    /// `tryRelease(permitId)`.
    async fn try_release(&mut self, id: [u8; 16]) -> bool {
        let released: i64 = Self::eval(
            TRY_RELEASE,
            &[&self.name, &self.channel_name, &self.timeout_name],
        )
        .arg(&id[..])
        .arg(1)
        .arg(client_now())
        .arg(PUBLISH_COMMAND)
        .query_async(&mut self.con)
        .await
        .expect("Redisson tryRelease");
        released == 1
    }

    /// `availablePermits()`.
    async fn available_permits(&mut self) -> i64 {
        Self::eval(
            AVAILABLE_PERMITS,
            &[&self.name, &self.timeout_name, &self.channel_name],
        )
        .arg(client_now())
        .arg(PUBLISH_COMMAND)
        .query_async(&mut self.con)
        .await
        .expect("Redisson availablePermits")
    }

    /// `acquiredPermits()`.
    async fn acquired_permits(&mut self) -> i64 {
        Self::eval(
            ACQUIRED_PERMITS,
            &[&self.name, &self.timeout_name, &self.channel_name],
        )
        .arg(client_now())
        .arg(PUBLISH_COMMAND)
        .query_async(&mut self.con)
        .await
        .expect("Redisson acquiredPermits")
    }

    /// `trySetPermits(permits)`.
    async fn try_set_permits(&mut self, permits: i32) -> bool {
        let set: i64 = Self::eval(TRY_SET_PERMITS, &[&self.name, &self.channel_name])
            .arg(permits)
            .arg(PUBLISH_COMMAND)
            .query_async(&mut self.con)
            .await
            .expect("Redisson trySetPermits");
        set == 1
    }

    /// `addPermits(permits)`.
    async fn add_permits(&mut self, permits: i32) {
        let () = Self::eval(ADD_PERMITS, &[&self.name, &self.channel_name])
            .arg(permits)
            .arg(PUBLISH_COMMAND)
            .query_async(&mut self.con)
            .await
            .expect("Redisson addPermits");
    }
}

static SHARED: SharedFixture<RedisServer> = SharedFixture::new();

fn shared_server() -> Arc<RedisServer> {
    SHARED.get_or_start(|| RedisServer::start().expect("start redis-server"))
}

/// One distlock client and one Redisson client of the semaphore `name`.
struct Pair {
    // Kept alive while the case runs.
    server: Arc<RedisServer>,
    ours: Permits<RedisBackend>,
    redisson: Redisson,
}

async fn pair(name: &str) -> Pair {
    let server = shared_server();
    let ours = Locker::new(
        RedisBackend::connect(server.url())
            .await
            .expect("connect to the test server"),
    )
    .permits(name)
    .expect("a valid name");
    let redisson = Redisson::new(server.connection().await, name);
    Pair {
        server,
        ours,
        redisson,
    }
}

/// A permit Redisson holds counts against ours: with two permits, one Redisson's and one ours,
/// our next acquire waits; Redisson's release (`tryRelease`: ZREM, INCRBY, PUBLISH of the new
/// count) wakes it at once.
#[test]
fn a_redisson_permit_counts_against_ours() {
    run(async {
        let name = fresh_name("permits-interop-theirs");
        let Pair {
            server: _server,
            ours,
            mut redisson,
        } = pair(&name).await;
        assert!(redisson.try_set_permits(2).await);
        let theirs = redisson_id();
        assert_eq!(redisson.try_acquire(theirs, None).await, Acquired::Taken);
        let mine = ours.acquire().await.expect("the other permit");
        assert!(
            ours.try_acquire().await.expect("try").is_none(),
            "Redisson holds the last permit"
        );
        let waiter = tokio::spawn({
            let ours = ours.clone();
            async move {
                let permit = ours.acquire().await.expect("acquire");
                (Instant::now(), permit)
            }
        });
        // The waiter has made its attempt and waits: its backstop re-check is ~1 s away.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "nothing to take yet");
        let released_at = Instant::now();
        assert!(
            redisson.try_release(theirs).await,
            "Redisson's permit was live"
        );
        let (taken_at, woken) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter gets the permit")
            .expect("waiter task");
        let hand_off = taken_at.duration_since(released_at);
        assert!(
            hand_off < HAND_OFF,
            "woken {hand_off:?} after Redisson's release (not by it)"
        );
        assert_eq!(redisson.acquired_permits().await, 2);
        assert!(woken.release().await.expect("release").was_held());
        assert!(mine.release().await.expect("release").was_held());
        assert_eq!(redisson.available_permits().await, 2);
        assert_eq!(redisson.acquired_permits().await, 0);
    });
}

/// Our permits are members of Redisson's `{name}:timeout`, scored in Unix milliseconds: they
/// are Redisson's `acquiredPermits`, Redisson's `tryAcquire` is refused while they are out (and
/// told when the nearest lease ends), and gets the permit once ours is given back. Permits
/// Redisson adds are ours to take.
#[test]
fn our_permits_count_for_redisson() {
    run(async {
        let name = fresh_name("permits-interop-ours");
        let Pair {
            server: _server,
            ours,
            mut redisson,
        } = pair(&name).await;
        assert!(ours.try_set_permits(2).await.expect("set"));
        assert!(!redisson.try_set_permits(5).await, "set once");
        let options = LockOptions::new().watchdog_lease(Duration::from_secs(10));
        let first = ours.acquire_with(&options).await.expect("first");
        let second = ours.acquire().await.expect("second");
        let acquired_at = client_now();
        assert_eq!(redisson.acquired_permits().await, 2);
        assert_eq!(redisson.available_permits().await, 0);
        let id = redisson_id();
        match redisson.try_acquire(id, Some(Duration::from_secs(5))).await {
            Acquired::Nearest(score) => {
                // The nearest lease is the first permit's: 10 s from its grant.
                let left = score - acquired_at;
                assert!(
                    (8_000..=10_500).contains(&left),
                    "nearest lease ends {left} ms away, not ~10 s"
                );
            }
            other => panic!("Redisson took a permit of two held by us: {other:?}"),
        }
        assert!(first.release().await.expect("release").was_held());
        assert_eq!(redisson.acquired_permits().await, 1);
        assert_eq!(
            redisson.try_acquire(id, Some(Duration::from_secs(5))).await,
            Acquired::Taken
        );
        assert_eq!(redisson.acquired_permits().await, 2);
        assert!(
            ours.try_acquire().await.expect("try").is_none(),
            "Redisson took the last one"
        );
        redisson.add_permits(1).await;
        let third = ours
            .try_acquire()
            .await
            .expect("try")
            .expect("Redisson added one");
        assert_eq!(redisson.acquired_permits().await, 3);
        assert!(third.release().await.expect("release").was_held());
        assert!(second.release().await.expect("release").was_held());
        assert!(redisson.try_release(id).await);
        assert_eq!(redisson.available_permits().await, 3);
    });
}

/// A Redisson permit whose lease ended is taken back by our next acquire (our waiter gets it
/// when the lease ends, and Redisson's release of it then fails); a permit of ours whose holder
/// died (a fixed lease, never released) is taken back by Redisson's `availablePermits` and
/// `tryAcquire` once its lease ends, not before.
#[test]
fn expired_permits_are_taken_back_both_ways() {
    run(async {
        let name = fresh_name("permits-interop-expired");
        let Pair {
            server: _server,
            ours,
            mut redisson,
        } = pair(&name).await;
        assert!(redisson.try_set_permits(1).await);

        // Redisson's permit expires: ours takes it back.
        let lease = Duration::from_millis(500);
        let theirs = redisson_id();
        let (taken, window) =
            LeaseWindow::of(lease, redisson.try_acquire(theirs, Some(lease))).await;
        assert_eq!(taken, Acquired::Taken);
        assert!(ours.try_acquire().await.expect("try").is_none());
        let mine = tokio::time::timeout(Duration::from_secs(5), ours.acquire())
            .await
            .expect("the expired permit comes back")
            .expect("acquire");
        window.assert_taken_over(
            tokio::time::Instant::now(),
            Duration::from_millis(1000),
            "Redisson's expired permit",
        );
        assert!(!redisson.try_release(theirs).await, "no longer Redisson's");
        assert_eq!(redisson.acquired_permits().await, 1);
        assert!(mine.release().await.expect("release").was_held());

        // Our holder dies: Redisson takes its permit back when the lease ends.
        let lease = Duration::from_millis(800);
        let dead = ours
            .acquire_with(&LockOptions::new().fixed_lease(lease))
            .await
            .expect("acquire");
        let taken_at = Instant::now();
        std::mem::forget(dead);
        let id = redisson_id();
        assert_eq!(redisson.available_permits().await, 0);
        assert!(
            matches!(
                redisson.try_acquire(id, Some(lease)).await,
                Acquired::Nearest(_)
            ),
            "our permit is live for Redisson"
        );
        tokio::time::sleep((taken_at + lease + Duration::from_millis(100)) - Instant::now()).await;
        assert_eq!(
            redisson.available_permits().await,
            1,
            "Redisson gives the dead holder's permit back"
        );
        assert_eq!(redisson.try_acquire(id, None).await, Acquired::Taken);
        assert_eq!(ours.state().await.expect("state").available, Some(0));
        assert!(redisson.try_release(id).await);
        let state = ours.state().await.expect("state");
        assert_eq!(
            (state.available, state.held(), state.expired),
            (Some(1), 0, 0)
        );
    });
}

/// `state()` and the permit side's `inspect` list a Redisson permit (16 raw bytes, not text)
/// as a holder entry of its own, named by the hex id Redisson's user sees, next to ours; a
/// Redisson permit whose lease ended is counted as expired.
#[test]
fn state_lists_redisson_permits() {
    run(async {
        let name = fresh_name("permits-interop-state");
        let Pair {
            server: _server,
            ours,
            mut redisson,
        } = pair(&name).await;
        assert!(redisson.try_set_permits(4).await);
        // Not text: 0xff never appears in UTF-8.
        let theirs: [u8; 16] = [
            0xff, 0x00, 0x3a, 0x31, 0xde, 0xad, 0xbe, 0xef, 0x80, 0x7f, 0x3a, 0x39, 0x00, 0xc3,
            0x28, 0x0a,
        ];
        assert_eq!(redisson.try_acquire(theirs, None).await, Acquired::Taken);
        let short = redisson_id();
        assert_eq!(
            redisson
                .try_acquire(short, Some(Duration::from_millis(100)))
                .await,
            Acquired::Taken
        );
        let mine = ours.acquire().await.expect("acquire");
        tokio::time::sleep(Duration::from_millis(200)).await;

        let state = ours.state().await.expect("state with a Redisson permit");
        assert_eq!(state.available, Some(1));
        assert_eq!(state.expired, 1, "Redisson's short lease ended");
        let mut expected = vec![(hex_dump(&theirs), 1), (mine.owner_field().to_owned(), 1)];
        expected.sort();
        assert_eq!(state.holders, expected);

        let inspected = ours.locker().state(&name).await.expect("inspect");
        assert_eq!(inspected.holders, expected);
        assert!(mine.release().await.expect("release").was_held());
        assert!(redisson.try_release(theirs).await);
        assert_eq!(redisson.available_permits().await, 4);
    });
}

/// A hash-tagged name (`{t}:gpu`): the permits out are in `{t}:gpu:timeout` and the channel is
/// `redisson_sc:{t}:gpu`, as Redisson derives them, so counts, take-backs and wake-ups cross
/// over.
#[test]
fn hash_tagged_names_follow_redisson() {
    run(async {
        let name = "{t}:gpu";
        let (timeout_name, channel_name) = redisson_keys(name);
        assert_eq!(timeout_name, "{t}:gpu:timeout");
        assert_eq!(channel_name, "redisson_sc:{t}:gpu");
        assert_eq!(lock_redis::keys::permits_key(name), timeout_name);
        assert_eq!(lock_redis::keys::semaphore_channel(name), channel_name);
        let Pair {
            server,
            ours,
            mut redisson,
        } = pair(name).await;
        assert!(redisson.try_set_permits(1).await);
        let mine = ours.acquire().await.expect("acquire");
        let mut con = server.connection().await;
        let kind: String = redis::cmd("TYPE")
            .arg(&timeout_name)
            .query_async(&mut con)
            .await
            .expect("TYPE");
        assert_eq!(kind, "zset", "our permit is in {timeout_name}");
        assert_eq!(redisson.acquired_permits().await, 1);
        let id = redisson_id();
        assert!(matches!(
            redisson.try_acquire(id, None).await,
            Acquired::Nearest(_)
        ));
        assert!(mine.release().await.expect("release").was_held());
        assert_eq!(redisson.try_acquire(id, None).await, Acquired::Taken);

        // Redisson's release wakes our waiter on the hash-tagged channel.
        let waiter = tokio::spawn({
            let ours = ours.clone();
            async move {
                let permit = ours.acquire().await.expect("acquire");
                (Instant::now(), permit)
            }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "Redisson holds the permit");
        let released_at = Instant::now();
        assert!(redisson.try_release(id).await);
        let (taken_at, woken) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter gets the permit")
            .expect("waiter task");
        let hand_off = taken_at.duration_since(released_at);
        assert!(hand_off < HAND_OFF, "woken {hand_off:?} after the release");

        // Our dead holder's permit, taken back by Redisson on the hash-tagged keys.
        assert!(woken.release().await.expect("release").was_held());
        let lease = Duration::from_millis(300);
        std::mem::forget(
            ours.acquire_with(&LockOptions::new().fixed_lease(lease))
                .await
                .expect("acquire"),
        );
        assert_eq!(redisson.available_permits().await, 0);
        tokio::time::sleep(lease + Duration::from_millis(100)).await;
        assert_eq!(redisson.available_permits().await, 1);
        let exists: i64 = redis::cmd("EXISTS")
            .arg("{{t}:gpu}:timeout")
            .query_async(&mut con)
            .await
            .expect("EXISTS");
        assert_eq!(exists, 0, "no key of another derivation");
    });
}

/// A Redisson permit taken without a lease (scored with Redisson's never-ending
/// `nonExpirableTimeout`) gives our waiter no lease end to wait for: it keeps looking again about
/// every second, so a permit given back without an announcement (an operator's `ZREM` and
/// `INCRBY`, or a lost message) is found within about a second, not never.
#[test]
fn a_redisson_permit_without_lease_keeps_our_recheck() {
    run(async {
        let name = fresh_name("permits-interop-forever");
        let Pair {
            server,
            ours,
            mut redisson,
        } = pair(&name).await;
        assert!(redisson.try_set_permits(1).await);
        let theirs = redisson_id();
        assert_eq!(redisson.try_acquire(theirs, None).await, Acquired::Taken);
        let waiter = tokio::spawn({
            let ours = ours.clone();
            async move { ours.acquire().await.expect("acquire") }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "Redisson holds the permit");
        // Given back without a message.
        let mut con = server.connection().await;
        let (timeout_name, _) = redisson_keys(&name);
        let (removed, count): (i64, i64) = redis::pipe()
            .atomic()
            .cmd("ZREM")
            .arg(&timeout_name)
            .arg(&theirs[..])
            .cmd("INCRBY")
            .arg(&name)
            .arg(1)
            .query_async(&mut con)
            .await
            .expect("ZREM + INCRBY");
        assert_eq!((removed, count), (1, 1));
        let permit = tokio::time::timeout(Duration::from_secs(3), waiter)
            .await
            .expect("found by the waiter's re-check")
            .expect("waiter task");
        assert!(permit.release().await.expect("release").was_held());
    });
}

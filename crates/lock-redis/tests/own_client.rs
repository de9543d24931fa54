//! Backends made from the application's own redis-rs settings (a `redis::Client` or a
//! `ConnectionInfo` as the `RedisTarget` of one server, a cluster's seeds or Sentinels), against real
//! servers: every setting of the `Client` / `ConnectionInfo` reaches every connection the
//! backend makes, which the servers' `CLIENT LIST` shows (user, database, protocol), and the
//! keys land in the database the info names. Over TLS, a client's own certificates are used,
//! and the builder's certificates are added to an info without any. Conflicting or unusable
//! TLS settings are typed errors before any I/O (a listener on the address sees no
//! connection).

use std::time::Duration;

use lock_core::{Error, Locker, ReleaseOutcome};
use lock_redis::redis::{self, ConnectionInfo, IntoConnectionInfo, ProtocolVersion};
use lock_redis::{RedisBackend, RedisBackendBuilder};
use lock_testkit::conformance::run;
use lock_testkit::{ClientInfo, RedisServer};
use tokio::time::{Instant, sleep, timeout};

/// The ACL user the backends log in as, and its password.
const USER: &str = "locker";
const PASSWORD: &str = "locker-secret";

/// Makes the test user on `server` (as its default user).
fn add_user(server: &RedisServer) {
    let mut connection = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("admin connection");
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            USER,
            "on",
            &format!(">{PASSWORD}"),
            "~*",
            "&*",
            "+@all",
        ])
        .exec(&mut connection)
        .expect("ACL SETUSER");
}

/// `info` with the test user, database `db` and `protocol`.
fn with_settings(info: ConnectionInfo, db: i64, protocol: ProtocolVersion) -> ConnectionInfo {
    let settings = info
        .redis_settings()
        .clone()
        .set_username(USER)
        .set_password(PASSWORD)
        .set_db(db)
        .set_protocol(protocol);
    info.set_redis_settings(settings)
}

/// The connection info of `url`.
fn info_of(url: &str) -> ConnectionInfo {
    url.into_connection_info().expect("a test URL")
}

/// The clients on `server` logged in as the test user.
fn ours(server: &RedisServer) -> Vec<ClientInfo> {
    server
        .client_list()
        .expect("CLIENT LIST")
        .into_iter()
        .filter(|client| client.get("user") == Some(USER))
        .collect()
}

/// Waits (up to 5 s) until `server` lists a connection of the test user subscribed to
/// something (a waiter's notification connection), and returns it.
async fn subscriber(server: &RedisServer) -> ClientInfo {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(client) = ours(server).into_iter().find(ClientInfo::is_pubsub) {
            return client;
        }
        assert!(
            Instant::now() < deadline,
            "no notification connection of user {USER} on the server: {:?}",
            server.client_list()
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// Takes `name` with `holder`, makes `waiter` wait for it, checks the waiter's notification
/// connection on `server` with `check`, releases, and returns how long the hand-off took (a
/// notification wakes the waiter at once; without one it would wait out the 30 s lease).
async fn hand_off(
    holder: &Locker<RedisBackend>,
    waiter: Locker<RedisBackend>,
    name: &str,
    server: &RedisServer,
    check: impl Fn(&ClientInfo),
) -> Duration {
    let held = holder.lock(name).await.expect("the holder's lock");
    let waiting = tokio::spawn({
        let name = name.to_owned();
        async move {
            let guard = waiter.lock(&name).await.expect("the waiter's lock");
            (Instant::now(), guard.release().await.expect("release"))
        }
    });
    check(&subscriber(server).await);
    assert!(!waiting.is_finished(), "the waiter waits while it is held");
    let released_at = Instant::now();
    assert_eq!(
        held.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let (acquired_at, released) = timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the release notification wakes the waiter")
        .expect("waiter task");
    assert_eq!(released, ReleaseOutcome::Released);
    acquired_at.duration_since(released_at)
}

/// A blocking connection to `server` as its default user, on database `db`.
fn admin(server: &RedisServer, db: i64) -> redis::Connection {
    let info = server.client().get_connection_info().clone();
    let settings = info.redis_settings().clone().set_db(db);
    redis::Client::open(info.set_redis_settings(settings))
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
        .expect("admin connection")
}

#[test]
fn a_client_keeps_its_user_and_database() {
    run(async {
        let server = RedisServer::start().expect("start a server");
        add_user(&server);
        let client = redis::Client::open(with_settings(
            info_of(&server.url()),
            5,
            ProtocolVersion::RESP2,
        ))
        .expect("client");
        let backend = || async {
            Locker::new(
                RedisBackend::builder(client.clone())
                    .connect()
                    .await
                    .expect("connect with the client"),
            )
        };
        let holder = backend().await;
        let guard = holder.lock("own:db").await.expect("lock");
        let exists = |db| -> bool {
            redis::cmd("EXISTS")
                .arg("own:db")
                .query(&mut admin(&server, db))
                .expect("EXISTS")
        };
        assert!(exists(5), "the lock key is in the client's database 5");
        assert!(!exists(0), "and not in database 0");
        let commands = ours(&server);
        assert!(
            !commands.is_empty() && commands.iter().all(|c| c.get("db") == Some("5")),
            "the command connection is the client's user on database 5: {commands:?}"
        );
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        assert!(!exists(5), "released");
        let handoff = hand_off(&holder, backend().await, "own:wake", &server, |_| {}).await;
        assert!(handoff < Duration::from_secs(2), "hand-off {handoff:?}");
    });
}

#[test]
fn a_resp3_info_locks_and_wakes_waiters() {
    run(async {
        let server = RedisServer::start().expect("start a server");
        add_user(&server);
        let info = with_settings(info_of(&server.url()), 0, ProtocolVersion::RESP3);
        let backend = || async {
            RedisBackend::builder(info.clone())
                .connect()
                .await
                .expect("connect with the info")
        };
        let holder = Locker::new(backend().await);
        // A reentrant hold, a contended try, the state as operators read it: replies in RESP3.
        let outer = holder.lock("own:resp3").await.expect("lock");
        let inner = holder.lock("own:resp3").await.expect("re-entry");
        let other = Locker::new(backend().await);
        assert!(
            other.try_lock("own:resp3").await.expect("try").is_none(),
            "held by the other locker"
        );
        let described = backend()
            .await
            .describe("own:resp3")
            .await
            .expect("describe");
        assert_eq!(described.holders.len(), 1, "{described:?}");
        assert_eq!(described.holders[0].1, 2, "two holds: {described:?}");
        let resp: Vec<_> = ours(&server)
            .iter()
            .map(|client| client.get("resp").map(str::to_owned))
            .collect();
        assert!(
            !resp.is_empty() && resp.iter().all(|resp| resp.as_deref() == Some("3")),
            "every connection of the backend speaks RESP3: {resp:?}"
        );
        assert!(inner.release().await.expect("release").was_held());
        assert_eq!(
            outer.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        let handoff = hand_off(&holder, other, "own:resp3:wake", &server, |client| {
            assert_eq!(client.get("resp"), Some("3"), "{client:?}");
        })
        .await;
        assert!(handoff < Duration::from_secs(2), "hand-off {handoff:?}");
        eprintln!("RESP3 info: hand-off {handoff:?}");
    });
}

/// Each builder (a case, a part of the reason expected, the builder) must be refused with
/// `InvalidConfig` before any I/O: a listener stands at the address every builder names, and
/// must see no connection.
async fn refused_before_io(
    builders: impl FnOnce(&str) -> Vec<(&'static str, &'static str, RedisBackendBuilder)>,
) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let address = listener.local_addr().expect("address").to_string();
    for (case, expected, builder) in builders(&address) {
        match timeout(Duration::from_secs(1), builder.connect()).await {
            Ok(Err(Error::InvalidConfig { reason })) => {
                eprintln!("{case}: {reason}");
                assert!(reason.contains(expected), "{case}: {reason}");
            }
            Ok(Err(other)) => panic!("{case}: expected InvalidConfig, got {other:?}"),
            Ok(Ok(_)) => panic!("{case}: expected InvalidConfig, got a backend"),
            Err(_) => panic!("{case}: no answer within 1 s"),
        }
        match listener.accept() {
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("{case}: something connected: {other:?}"),
        }
    }
}

#[test]
fn a_tls_setting_on_a_plain_client_is_refused_before_io() {
    let certs = lock_testkit::TestCerts::generate().expect("certificates");
    run(refused_before_io(|address| {
        let client = redis::Client::open(format!("redis://{address}/")).expect("client");
        vec![(
            "a CA bundle on a plain client",
            "is not reached over TLS",
            RedisBackend::builder(client).tls_ca_pem(certs.ca_pem()),
        )]
    }));
}

#[cfg(feature = "tls-rustls")]
mod tls {
    use lock_testkit::{ServerError, ServerOptions, TestCerts};

    use super::*;

    /// A client of `rediss://address/` with certificates of its own (the test CA).
    fn with_own_certificates(address: &str, certs: &TestCerts) -> redis::Client {
        redis::Client::build_with_tls(
            format!("rediss://{address}/"),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(certs.ca_pem().to_vec()),
            },
        )
        .expect("TLS client")
    }

    #[test]
    fn conflicting_tls_settings_are_refused_before_io() {
        let certs = TestCerts::generate().expect("certificates");
        run(refused_before_io(|address| {
            let own = with_own_certificates(address, &certs);
            let mut cases = vec![
                (
                    "the builder's CA on a client with its own",
                    "of its own",
                    RedisBackend::builder(own.clone()).tls_ca_pem(certs.ca_pem()),
                ),
                (
                    "the builder's identity on an info with its own certificates",
                    "of its own",
                    RedisBackend::builder(own.get_connection_info().clone())
                        .tls_client_identity(certs.client_cert_pem(), certs.client_key_pem()),
                ),
                (
                    "an info that checks no certificate",
                    "`#insecure`",
                    RedisBackend::builder(info_of(&format!("rediss://{address}/#insecure"))),
                ),
            ];
            #[cfg(feature = "cluster")]
            cases.push((
                "a cluster seed with certificates of its own",
                "nodes found through it",
                RedisBackend::builder(lock_redis::RedisTarget::cluster([own
                    .get_connection_info()
                    .clone()])),
            ));
            #[cfg(feature = "sentinel")]
            cases.push((
                "a Sentinel with certificates of its own",
                "nodes found through it",
                RedisBackend::builder(lock_redis::RedisTarget::sentinel(
                    [own.get_connection_info().clone()],
                    "mymaster",
                )),
            ));
            cases
        }));
    }

    #[test]
    fn tls_from_the_client_or_added_to_the_info() {
        run(async {
            let certs = TestCerts::generate().expect("certificates");
            let server = match RedisServer::start_with(ServerOptions::new().tls(&certs, true)) {
                Ok(server) => server,
                Err(ServerError::TlsUnsupported { binary, .. }) => {
                    eprintln!("skipped: {} has no TLS support", binary.display());
                    return;
                }
                Err(error) => panic!("could not start the TLS server: {error}"),
            };
            add_user(&server);
            let info = with_settings(info_of(&server.url()), 3, ProtocolVersion::RESP3);
            // The client's own CA and client certificate, as the application made them.
            let own = redis::Client::build_with_tls(
                info.clone(),
                redis::TlsCertificates {
                    client_tls: Some(redis::ClientTlsConfig {
                        client_cert: certs.client_cert_pem().to_vec(),
                        client_key: certs.client_key_pem().to_vec(),
                    }),
                    root_cert: Some(certs.ca_pem().to_vec()),
                },
            )
            .expect("TLS client");
            let from_client = || async {
                Locker::new(
                    RedisBackend::builder(own.clone())
                        .connect()
                        .await
                        .expect("connect with the TLS client"),
                )
            };
            let handoff = hand_off(
                &from_client().await,
                from_client().await,
                "own:tls:client",
                &server,
                |client| {
                    assert_eq!(client.get("db"), Some("3"), "{client:?}");
                    assert_eq!(client.get("resp"), Some("3"), "{client:?}");
                },
            )
            .await;
            assert!(handoff < Duration::from_secs(2), "hand-off {handoff:?}");
            // An info without certificates: the builder's are added.
            let from_info = || async {
                Locker::new(
                    RedisBackend::builder(info.clone())
                        .tls_ca_pem(certs.ca_pem())
                        .tls_client_identity(certs.client_cert_pem(), certs.client_key_pem())
                        .connect()
                        .await
                        .expect("connect with the info and the builder's certificates"),
                )
            };
            let handoff = hand_off(
                &from_info().await,
                from_info().await,
                "own:tls:info",
                &server,
                |_| {},
            )
            .await;
            assert!(handoff < Duration::from_secs(2), "hand-off {handoff:?}");
            let guard = from_info().await.lock("own:tls:db").await.expect("lock");
            let exists: bool = redis::cmd("EXISTS")
                .arg("own:tls:db")
                .query(&mut admin(&server, 3))
                .expect("EXISTS");
            assert!(exists, "the lock key is in the info's database 3");
            assert_eq!(
                guard.release().await.expect("release"),
                ReleaseOutcome::Released
            );
        });
    }
}

#[cfg(feature = "cluster")]
#[test]
fn a_cluster_from_connection_infos() {
    use lock_testkit::RedisCluster;
    run(async {
        let cluster = RedisCluster::start(3, 0).expect("start a cluster");
        for index in 0..cluster.len() {
            add_user(cluster.node(index));
        }
        let seeds: Vec<_> = cluster
            .urls()
            .iter()
            .map(|url| with_settings(info_of(url), 0, ProtocolVersion::RESP3))
            .collect();
        let backend = || async {
            Locker::new(
                RedisBackend::builder(lock_redis::RedisTarget::cluster(seeds.clone()))
                    .connect()
                    .await
                    .expect("connect with the seeds"),
            )
        };
        let name = "own:cluster";
        let node = cluster
            .primary_of_slot(cluster.slot_of(name).expect("slot"))
            .expect("the primary of the slot");
        let holder = backend().await;
        let handoff = hand_off(
            &holder,
            backend().await,
            name,
            cluster.node(node),
            |client| {
                assert_eq!(client.get("resp"), Some("3"), "{client:?}");
            },
        )
        .await;
        assert!(handoff < Duration::from_secs(2), "hand-off {handoff:?}");
        let commands = ours(cluster.node(node));
        assert!(
            commands.iter().any(|client| !client.is_pubsub()),
            "the command connection to the lock's node is the seeds' user: {commands:?}"
        );
    });
}

#[cfg(feature = "sentinel")]
#[test]
fn a_sentinel_service_from_connection_infos() {
    use lock_testkit::SentinelGroup;
    run(async {
        let group = SentinelGroup::start(1).expect("start a Sentinel group");
        // The Sentinels' own user, given in their infos.
        for index in 0..3 {
            add_user(group.sentinel(index));
        }
        let sentinels: Vec<_> = group
            .sentinel_urls()
            .iter()
            .map(|url| with_settings(info_of(url), 0, ProtocolVersion::RESP2))
            .collect();
        let backend = || async {
            Locker::new(
                RedisBackend::builder(lock_redis::RedisTarget::sentinel(
                    sentinels.clone(),
                    group.service(),
                ))
                .connect()
                .await
                .expect("connect through the Sentinels"),
            )
        };
        let primary = group.primary().expect("the primary");
        let held = backend().await.lock("own:sentinel").await.expect("lock");
        let exists: bool = redis::cmd("EXISTS")
            .arg("own:sentinel")
            .query(&mut admin(group.node(primary), 0))
            .expect("EXISTS");
        assert!(exists, "the lock key is on the primary the Sentinels name");
        // The switch listener (subscribed on a Sentinel) logs in with the infos' user.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !(0..3).any(|index| {
            ours(group.sentinel(index))
                .iter()
                .any(ClientInfo::is_pubsub)
        }) {
            assert!(
                Instant::now() < deadline,
                "no Sentinel lists a subscription of user {USER}"
            );
            sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            held.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    });
}

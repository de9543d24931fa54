//! Tests of `ReplicatedPair` and of the server-side fault helpers of `RedisServer`, against a
//! real server binary (see `find_server_binary`).

use std::time::{Duration, Instant};

use lock_testkit::{RedisServer, ReplicatedPair, ServerError, ServerOptions};

fn connect(server: &RedisServer) -> redis::Connection {
    let con = server.client().get_connection().expect("connect");
    con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    con
}

fn set(con: &mut redis::Connection, key: &str) -> redis::RedisResult<()> {
    redis::cmd("SET").arg(key).arg("v").exec(con)
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

fn role(server: &RedisServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut connect(server))
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("role:"))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn writes_on_the_primary_reach_the_replica() {
    let pair = ReplicatedPair::start().expect("start pair");
    assert_ne!(pair.primary().port(), pair.replica().port());
    assert_eq!(role(pair.primary()), "master");
    assert_eq!(role(pair.replica()), "slave");
    let (mut primary, mut replica) = (connect(pair.primary()), connect(pair.replica()));
    for i in 0..100 {
        set(&mut primary, &format!("key:{i}")).unwrap();
    }
    pair.wait_replicated().expect("replicated");
    for i in 0..100 {
        assert_eq!(get(&mut replica, &format!("key:{i}")).as_deref(), Some("v"));
    }
}

#[test]
fn the_replica_refuses_writes_until_promoted() {
    let mut pair = ReplicatedPair::start().expect("start pair");
    let mut replica = connect(pair.replica());
    let error = set(&mut replica, "on-replica").unwrap_err();
    assert_eq!(error.code(), Some("READONLY"), "{error}");

    pair.promote().expect("promote");
    assert_eq!(role(pair.replica()), "master");
    set(&mut replica, "on-replica").expect("a promoted replica accepts writes");
    // The old primary is still a primary: two primaries, diverging.
    assert_eq!(role(pair.primary()), "master");
    let mut primary = connect(pair.primary());
    assert_eq!(get(&mut primary, "on-replica"), None);
}

#[test]
fn a_cut_link_stops_replication_but_the_replica_stays_readable() {
    let mut pair = ReplicatedPair::start().expect("start pair");
    let (mut primary, mut replica) = (connect(pair.primary()), connect(pair.replica()));
    set(&mut primary, "before").unwrap();
    pair.wait_replicated().unwrap();

    pair.cut_link().expect("cut");
    set(&mut primary, "after").unwrap();
    // Give replication every chance to (wrongly) deliver the write.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(&mut replica, "before").as_deref(), Some("v"));
    assert_eq!(get(&mut replica, "after"), None);
    let error = set(&mut replica, "still-read-only").unwrap_err();
    assert_eq!(error.code(), Some("READONLY"), "{error}");
    let started = Instant::now();
    let error = pair
        .wait_replicated_within(Duration::from_millis(300))
        .unwrap_err();
    assert!(matches!(error, ServerError::Replication(_)), "{error}");
    assert!(started.elapsed() >= Duration::from_millis(300));

    // Failover to the replica that missed the write: the write is lost.
    pair.promote().expect("promote");
    assert_eq!(get(&mut replica, "after"), None);
    assert_eq!(get(&mut replica, "before").as_deref(), Some("v"));
    set(&mut replica, "after-promote").expect("writable after promote");

    // Linking again resyncs the replica from the primary, dropping its own writes.
    pair.link().expect("relink");
    assert_eq!(role(pair.replica()), "slave");
    let mut replica = connect(pair.replica());
    assert_eq!(get(&mut replica, "after").as_deref(), Some("v"));
    assert_eq!(get(&mut replica, "after-promote"), None);
}

#[test]
fn a_password_protected_pair_replicates() {
    let pair = ReplicatedPair::start_with(ServerOptions::new().requirepass(Some("s3cret".into())))
        .expect("start pair");
    set(&mut connect(pair.primary()), "k").unwrap();
    pair.wait_replicated().unwrap();
    assert_eq!(get(&mut connect(pair.replica()), "k").as_deref(), Some("v"));
}

#[test]
fn a_restarted_primary_is_found_again() {
    let mut pair = ReplicatedPair::start().expect("start pair");
    pair.primary_mut().restart().expect("restart primary");
    set(&mut connect(pair.primary()), "after-restart").unwrap();
    pair.wait_replicated()
        .expect("the replica reconnects to the same port");
    assert_eq!(
        get(&mut connect(pair.replica()), "after-restart").as_deref(),
        Some("v")
    );
}

#[test]
fn client_kills_by_type() {
    let server = RedisServer::start().expect("start");
    let mut normal = connect(&server);
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("plain")
        .exec(&mut normal)
        .unwrap();
    let mut subscriber = connect(&server);
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("subscriber")
        .exec(&mut subscriber)
        .unwrap();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe("channel").unwrap();

    let clients = server.client_list().unwrap();
    assert_eq!(
        clients.len(),
        2,
        "the helper's own connection is not listed"
    );
    let plain = clients.iter().find(|c| c.name() == "plain").unwrap();
    let sub = clients.iter().find(|c| c.name() == "subscriber").unwrap();
    assert!(!plain.is_pubsub());
    assert!(sub.is_pubsub());
    assert_eq!(sub.subscriptions(), 1);
    assert!(plain.id() > 0 && plain.id() != sub.id());

    assert_eq!(server.kill_pubsub_clients().unwrap(), 1);
    assert_eq!(server.kill_normal_clients().unwrap(), 1);
    assert!(server.client_list().unwrap().is_empty());
    assert!(redis::cmd("PING").exec(&mut normal).is_err());

    let mut again = connect(&server);
    let id: u64 = redis::cmd("CLIENT").arg("ID").query(&mut again).unwrap();
    assert!(server.kill_client(id).unwrap());
    assert!(!server.kill_client(id).unwrap());
}

#[test]
fn script_flush_forgets_scripts() {
    let server = RedisServer::start().expect("start");
    let mut con = connect(&server);
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query(&mut con)
        .unwrap();
    server.script_flush().unwrap();
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, [0]);
}

#[test]
fn helpers_report_a_dead_or_paused_server() {
    let mut server = RedisServer::start().expect("start");
    server.pause().unwrap();
    let started = Instant::now();
    let error = server.script_flush().unwrap_err();
    assert!(matches!(error, ServerError::Command { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(8));
    server.resume().unwrap();
    server.kill().unwrap();
    let error = server.kill_normal_clients().unwrap_err();
    assert!(matches!(error, ServerError::NotRunning { .. }), "{error}");
}

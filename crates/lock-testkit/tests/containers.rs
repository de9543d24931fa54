//! The fixtures with their servers in containers (feature `testcontainers`): a standalone server
//! and a 3×1 cluster, each node a container on the host network, answering on 127.0.0.1; a
//! container that cannot start and an image the engine does not have.
//!
//! They need a container engine and an image in `DISTLOCK_REDIS_IMAGE` (scripts/ensure-docker.sh
//! provides both); without them each test says why on stderr and passes, unless
//! `DISTLOCK_CONTAINERS_REQUIRED` is set (the script sets it): then it fails. Only one cluster
//! is alive at a time: a single test starts one.
#![cfg(feature = "testcontainers")]

use std::io::Write;
use std::process::{Command, Stdio};

use lock_testkit::containers::{LABEL, image_or_skip};
use lock_testkit::{FailoverMode, RedisCluster, RedisServer, ServerError, ServerOptions};

/// Whether the engine still knows container `id`.
fn container_exists(id: &str) -> bool {
    Command::new("docker")
        .args(["inspect", "--format", "{{.Id}}", id])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// The label the engine shows on container `id`.
fn label_of(id: &str) -> String {
    let format = format!("{{{{index .Config.Labels \"{LABEL}\"}}}}");
    let output = Command::new("docker")
        .args(["inspect", "--format", &format, id])
        .output()
        .expect("docker inspect");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The ids of the containers (any state) of `image`.
fn containers_of(image: &str) -> Vec<String> {
    let output = Command::new("docker")
        .args(["ps", "--all", "--quiet", "--no-trunc", "--filter"])
        .arg(format!("ancestor={image}"))
        .output()
        .expect("docker ps");
    assert!(output.status.success(), "docker ps: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Imports an empty root filesystem as `image` with the Dockerfile instruction `change`.
fn import_empty(image: &str, change: &str) {
    let mut import = Command::new("docker")
        .args(["import", "--change", change, "-", image])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("docker import");
    // An empty tar archive: two zero blocks.
    import
        .stdin
        .take()
        .expect("stdin")
        .write_all(&[0; 1024])
        .expect("write the archive");
    assert!(import.wait().expect("docker import").success());
}

fn assert_unsupported(result: Result<(), ServerError>, operation: &str) {
    match result {
        Err(ServerError::Unsupported { operation: op, .. }) => assert_eq!(op, operation),
        other => panic!("{operation} on a container: expected Unsupported, got {other:?}"),
    }
}

#[test]
fn a_server_in_a_container_answers_on_loopback_and_is_removed_on_drop() {
    let Some(image) = image_or_skip("a_server_in_a_container_answers_on_loopback") else {
        return;
    };
    let mut server = RedisServer::start_with(
        ServerOptions::new()
            .container(&image)
            .requirepass(Some("s3cret pass".to_owned())),
    )
    .unwrap_or_else(|err| panic!("start a server in {image}: {err}"));
    let id = server.container_id().expect("a container id").to_owned();
    assert_eq!(server.image(), Some(image.as_str()));
    assert_eq!(label_of(&id), std::process::id().to_string());
    assert!(server.addr().ip().is_loopback());
    assert_eq!(server.pid(), None);
    assert!(server.is_running());
    assert!(
        server.version().starts_with("Redis server v=")
            || server.version().starts_with("Valkey server v="),
        "{}",
        server.version()
    );

    let mut con = server.client().get_connection().unwrap();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    // It is the container's server: its options are the fixture's.
    let bind: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("bind")
        .query(&mut con)
        .unwrap();
    assert_eq!(bind, ["bind", "127.0.0.1"]);
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    assert!(
        info.contains(&format!("tcp_port:{}", server.port())),
        "{info}"
    );
    assert!(server.log_tail(50).contains("Ready to accept connections"));
    // Faults sent as commands work; the process controls are refused with a typed error.
    server.script_flush().unwrap();
    assert_unsupported(server.pause(), "pause");
    assert_unsupported(server.kill(), "kill");
    assert_unsupported(server.restart(), "restart");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");

    drop(con);
    drop(server);
    assert!(!container_exists(&id), "container {id} left behind");
}

#[test]
fn a_cluster_in_containers_forms_fails_over_and_moves_slots() {
    let Some(image) = image_or_skip("a_cluster_in_containers_forms") else {
        return;
    };
    let mut cluster = RedisCluster::start_with(3, 1, ServerOptions::new().container(&image))
        .unwrap_or_else(|err| panic!("start a cluster in {image}: {err}"));
    let ids: Vec<String> = (0..cluster.len())
        .map(|index| {
            cluster
                .node(index)
                .container_id()
                .expect("every node in a container")
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 6);
    for index in 0..cluster.len() {
        let mut con = cluster.node(index).client().get_connection().unwrap();
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
        assert!(info.contains("cluster_state:ok"), "node {index}: {info}");
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con).unwrap();
        // Every node knows every other one at its loopback address.
        assert_eq!(nodes.lines().count(), 6, "{nodes}");
        assert!(
            nodes.lines().all(|line| line.contains(" 127.0.0.1:")),
            "{nodes}"
        );
    }
    for primary in 0..3 {
        assert_eq!(cluster.replicas_of(primary).unwrap(), vec![3 + primary]);
    }

    // The fixture's faults that need no process work as on a cluster of processes.
    let key = "orders:{42}";
    let slot = cluster.slot_of(key).unwrap();
    let owner = cluster.primary_of_slot(slot).unwrap();
    redis::cmd("SET")
        .arg(key)
        .arg("v1")
        .exec(&mut cluster.node(owner).client().get_connection().unwrap())
        .unwrap();
    let replica = cluster.replicas_of(owner).unwrap()[0];
    cluster
        .failover(replica, FailoverMode::Coordinated)
        .unwrap();
    assert_eq!(cluster.primary_of_slot(slot).unwrap(), replica);
    let target = (0..3).find(|&p| p != owner).unwrap();
    cluster.move_slot(slot, target).unwrap();
    assert_eq!(cluster.primary_of_slot(slot).unwrap(), target);
    let value: Option<String> = redis::cmd("GET")
        .arg(key)
        .query(&mut cluster.node(target).client().get_connection().unwrap())
        .unwrap();
    assert_eq!(value.as_deref(), Some("v1"));
    assert_unsupported(cluster.node_mut(target).kill(), "kill");

    drop(cluster);
    for id in &ids {
        assert!(!container_exists(id), "container {id} left behind");
    }
}

/// `docker run` creates the container and then cannot start it (its entrypoint does not
/// exist): the container, left "Created" by the engine, is removed all the same.
#[test]
fn a_container_that_cannot_start_is_not_left_behind() {
    if image_or_skip("a_container_that_cannot_start_is_not_left_behind").is_none() {
        return;
    }
    let broken = format!("distlock-broken:{}", std::process::id());
    import_empty(&broken, r#"ENTRYPOINT ["/no/such/server"]"#);
    let result = RedisServer::start_with(ServerOptions::new().container(&broken));
    let left = containers_of(&broken);
    let _ = Command::new("docker")
        .args(["rm", "--force"])
        .args(&left)
        .output();
    let _ = Command::new("docker").args(["rmi", &broken]).output();
    match result {
        Err(ServerError::Container(words)) => assert!(words.contains("/no/such/server"), "{words}"),
        other => panic!("expected ServerError::Container, got {other:?}"),
    }
    assert!(left.is_empty(), "containers left behind: {left:?}");
}

/// An image the engine does not have is an error that says how to bring it in; nothing is
/// pulled.
#[test]
fn an_image_not_in_the_engine_is_not_pulled() {
    if image_or_skip("an_image_not_in_the_engine_is_not_pulled").is_none() {
        return;
    }
    let absent = format!("distlock-absent:{}", std::process::id());
    match RedisServer::start_with(ServerOptions::new().container(&absent)) {
        Err(ServerError::Container(words)) => assert!(
            words.contains("No such image") && words.contains("nothing is pulled"),
            "{words}"
        ),
        other => panic!("expected ServerError::Container, got {other:?}"),
    }
    assert!(containers_of(&absent).is_empty());
}

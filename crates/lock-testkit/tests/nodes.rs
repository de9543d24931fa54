//! Tests of `RedisNodes` against real server binaries (see `find_server_binary`).

mod common;

use std::collections::HashSet;
use std::time::Duration;

#[cfg(target_os = "linux")]
use common::pid::{process_is_dead, wait_until_dead};
use lock_testkit::{RedisNodes, RedisServer, ServerError, ServerOptions};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

/// `PING` with a short timeout: `Ok(reply)`, or `Err` on timeout.
async fn ping(con: &mut MultiplexedConnection) -> Result<String, String> {
    match tokio::time::timeout(
        Duration::from_millis(300),
        redis::cmd("PING").query_async::<String>(con),
    )
    .await
    {
        Ok(Ok(pong)) => Ok(pong),
        Ok(Err(err)) => Err(format!("error: {err}")),
        Err(_) => Err("timeout".to_owned()),
    }
}

async fn connections(nodes: &RedisNodes) -> Vec<MultiplexedConnection> {
    let mut cons = Vec::new();
    for node in nodes {
        cons.push(node.connection().await);
    }
    cons
}

fn info_field(info: &str, field: &str) -> String {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in INFO:\n{info}"))
        .trim()
        .to_owned()
}

#[tokio::test]
async fn three_nodes_answer_ping_on_distinct_ports() {
    let nodes = RedisNodes::start(3).expect("start");
    assert_eq!(nodes.len(), 3);
    assert!(!nodes.is_empty());

    let ports = nodes.ports();
    assert_eq!(ports.iter().collect::<HashSet<_>>().len(), 3, "{ports:?}");
    assert_eq!(
        nodes.urls(),
        ports
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}/"))
            .collect::<Vec<_>>()
    );
    let dirs: HashSet<_> = nodes.iter().map(RedisServer::dir).collect();
    assert_eq!(dirs.len(), 3);
    let pids: HashSet<_> = nodes.iter().map(|node| node.pid().unwrap()).collect();
    assert_eq!(pids.len(), 3);

    for (i, node) in nodes.iter().enumerate() {
        assert_eq!(node.port(), ports[i]);
        assert_eq!(nodes[i].port(), ports[i]);
        assert_eq!(nodes.get(i).map(RedisServer::port), Some(ports[i]));
        let mut con = node.connection().await;
        assert_eq!(ping(&mut con).await.as_deref(), Ok("PONG"), "node {i}");

        // The answering process is this node's own, on its own port, a standalone master.
        let info: String = redis::cmd("INFO").query_async(&mut con).await.unwrap();
        assert_eq!(info_field(&info, "tcp_port"), ports[i].to_string());
        assert_eq!(
            info_field(&info, "process_id"),
            node.pid().unwrap().to_string()
        );
        assert_eq!(info_field(&info, "role"), "master");
        assert_eq!(info_field(&info, "connected_slaves"), "0");
        assert_eq!(info_field(&info, "cluster_enabled"), "0");
    }
    assert!(nodes.get(3).is_none());
}

#[tokio::test]
async fn a_key_set_on_one_node_is_absent_on_the_others() {
    let nodes = RedisNodes::start(3).expect("start");
    let mut cons = connections(&nodes).await;
    let () = cons[0].set("lock", "owner-0").await.unwrap();

    let value: Option<String> = cons[0].get("lock").await.unwrap();
    assert_eq!(value.as_deref(), Some("owner-0"));
    for (i, con) in cons.iter_mut().enumerate().skip(1) {
        let value: Option<String> = con.get("lock").await.unwrap();
        assert_eq!(value, None, "node {i} sees a key set on node 0");
        let size: u64 = redis::cmd("DBSIZE").query_async(con).await.unwrap();
        assert_eq!(size, 0, "node {i}");
    }
}

#[tokio::test]
async fn pause_freezes_only_that_node_and_resume_thaws_it() {
    let mut nodes = RedisNodes::start(3).expect("start");
    // Connect before pausing: connecting to a frozen server hangs in the handshake.
    let mut cons = connections(&nodes).await;

    nodes.pause(1).unwrap();
    assert!(nodes[1].is_paused());
    assert!(!nodes[0].is_paused() && !nodes[2].is_paused());
    assert_eq!(ping(&mut cons[0]).await.as_deref(), Ok("PONG"));
    assert_eq!(ping(&mut cons[2]).await.as_deref(), Ok("PONG"));
    let frozen = ping(&mut cons[1]).await;
    assert_eq!(frozen, Err("timeout".to_owned()), "paused node 1 answered");

    nodes.resume(1).unwrap();
    assert!(!nodes[1].is_paused());
    let mut con = nodes[1].connection().await;
    assert_eq!(ping(&mut con).await.as_deref(), Ok("PONG"));
}

#[tokio::test]
async fn pause_all_and_resume_all() {
    let mut nodes = RedisNodes::start(2).expect("start");
    let mut cons = connections(&nodes).await;

    nodes.pause_all().unwrap();
    assert!(nodes.iter().all(RedisServer::is_paused));
    for con in &mut cons {
        assert_eq!(ping(con).await, Err("timeout".to_owned()));
    }

    nodes.resume_all().unwrap();
    assert!(!nodes.iter().any(RedisServer::is_paused));
    for node in &nodes {
        let mut con = node.connection().await;
        assert_eq!(ping(&mut con).await.as_deref(), Ok("PONG"));
    }

    // A killed node makes pause_all fail, but the others are still paused.
    nodes.kill(0).unwrap();
    let err = nodes.pause_all().unwrap_err();
    assert!(matches!(err, ServerError::NotRunning { .. }), "{err:?}");
    assert!(nodes[1].is_paused());
    nodes.resume(1).unwrap();
}

#[tokio::test]
async fn kill_makes_connecting_fail_and_restart_brings_the_node_back() {
    let mut nodes = RedisNodes::start(3).expect("start");
    let port = nodes[2].port();
    let dir = nodes[2].dir().to_path_buf();

    nodes.kill(2).unwrap();
    assert_eq!(nodes[2].pid(), None);
    assert!(!nodes[2].is_running());
    let refused = tokio::time::timeout(Duration::from_secs(2), nodes[2].try_connection())
        .await
        .expect("connecting to a killed node must fail fast, not hang");
    assert!(refused.is_err(), "connected to a killed node");
    assert!(matches!(
        nodes.pause(2),
        Err(ServerError::NotRunning { .. })
    ));
    for i in [0, 1] {
        let mut con = nodes[i].connection().await;
        assert_eq!(ping(&mut con).await.as_deref(), Ok("PONG"), "node {i}");
    }

    nodes.restart(2).unwrap();
    assert!(nodes[2].is_running());
    assert_eq!(nodes[2].port(), port);
    assert_eq!(nodes[2].dir(), dir);
    let mut con = nodes[2].connection().await;
    assert_eq!(ping(&mut con).await.as_deref(), Ok("PONG"));

    nodes.stop(2).unwrap();
    assert_eq!(nodes[2].pid(), None);
    nodes.stop(2).unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn dropping_the_nodes_stops_every_process() {
    let mut nodes = RedisNodes::start(3).expect("start");
    nodes.pause(1).unwrap();
    let pids: Vec<u32> = nodes.iter().map(|node| node.pid().unwrap()).collect();
    let dirs: Vec<_> = nodes.iter().map(|node| node.dir().to_path_buf()).collect();
    assert!(pids.iter().all(|&pid| !process_is_dead(pid)));

    drop(nodes);
    for pid in pids {
        assert!(
            wait_until_dead(pid, Duration::from_secs(2)),
            "pid {pid} still alive"
        );
    }
    for dir in dirs {
        assert!(!dir.exists(), "{} not removed", dir.display());
    }
}

#[test]
fn start_zero_nodes_is_an_error() {
    let err = RedisNodes::start(0).unwrap_err();
    assert!(matches!(err, ServerError::NoNodes), "{err:?}");
    assert!(err.to_string().contains("at least one node"), "{err}");
    let err = RedisNodes::start_with(0, ServerOptions::new()).unwrap_err();
    assert!(matches!(err, ServerError::NoNodes), "{err:?}");
}

#[test]
fn failing_servers_report_the_error() {
    let options = ServerOptions::new().config("no-such-directive", "1");
    let err = RedisNodes::start_with(2, options).unwrap_err();
    let ServerError::NotReady { log_tail, .. } = &err else {
        panic!("expected NotReady, got {err:?}");
    };
    assert!(log_tail.contains("no-such-directive"), "{err}");
}

#[tokio::test]
async fn options_apply_to_every_node() {
    let nodes = RedisNodes::start_with(2, ServerOptions::new().requirepass(Some("pw".into())))
        .expect("start");
    for node in &nodes {
        assert_eq!(node.password(), Some("pw"));
        let mut con = node.connection().await;
        assert_eq!(ping(&mut con).await.as_deref(), Ok("PONG"));
    }
}

#[test]
#[should_panic(expected = "node index 1 out of range: RedisNodes has 1 node(s)")]
fn out_of_range_fault_control_panics() {
    let mut nodes = RedisNodes::start(1).expect("start");
    let _ = nodes.kill(1);
}

#[test]
#[should_panic(expected = "node index 2 out of range")]
fn out_of_range_index_panics() {
    let nodes = RedisNodes::start(1).expect("start");
    let _ = nodes[2].port();
}

#[test]
fn nodes_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RedisNodes>();
}

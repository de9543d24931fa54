//! `counter` counts exactly on a Redis Cluster while the lock's slot moves to another primary
//! and its primary fails over, on a Sentinel group, over mutual TLS in every mode, and through
//! twemproxy: the binary itself, in worker processes, against real server processes. One
//! deployment at a time.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lock_testkit::restrictions::{RESTRICTIONS, restricted_user};
use lock_testkit::{
    FailoverMode, RedisCluster, RedisServer, SentinelGroup, ServerError, ServerOptions, TestCerts,
    Twemproxy,
};

const LOCK: &str = "distlock:demo:counter";

fn counter(deployment: &[String]) -> std::process::Child {
    counter_sized(deployment, "500", "6")
}

/// `counter` over 2 processes with `tasks` tasks of `increments` increments.
fn counter_sized(deployment: &[String], tasks: &str, increments: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_counter"))
        .args(deployment)
        .args([
            "--tasks",
            tasks,
            "--processes",
            "2",
            "--increments",
            increments,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run counter")
}

fn assert_exact(child: std::process::Child) {
    assert_total(child, 3000);
}

fn assert_total(child: std::process::Child, expected: u32) {
    let output = child.wait_with_output().expect("counter output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(&format!("actual total:   {expected}\n")),
        "counter failed\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    );
    let retried = stderr.matches("trying again").count();
    let release_failed = stderr.matches("release failed").count();
    eprintln!(
        "{}\nlock calls retried: {retried}, releases failed: {release_failed}",
        stdout
            .lines()
            .filter(|line| line.contains("total")
                || line.contains("elapsed")
                || line.contains("outcomes"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn counts_exactly_on_a_cluster_while_it_changes() {
    let mut cluster = RedisCluster::start(3, 1).expect("start a cluster");
    let seeds = cluster.urls().join(",");
    let started = Instant::now();
    let child = counter(&["--cluster".into(), seeds]);
    std::thread::sleep(Duration::from_millis(500));
    // The lock's slot moves to another primary while the workers take turns on it...
    let slot = cluster.slot_of(LOCK).expect("slot");
    let from = cluster.primary_of_slot(slot).expect("owner");
    let to = (0..3).find(|&node| node != from).expect("another primary");
    cluster.move_slot(slot, to).expect("move the slot");
    let moved_at = started.elapsed();
    // ...and then its new primary fails over to its replica.
    let replica = cluster.replicas_of(to).expect("replicas")[0];
    cluster
        .failover(replica, FailoverMode::Coordinated)
        .expect("fail over");
    let failed_over_at = started.elapsed();
    assert_exact(child);
    let finished_at = started.elapsed();
    eprintln!(
        "slot moved at {moved_at:?}, failed over at {failed_over_at:?}, counter done at {finished_at:?}"
    );
    assert!(
        failed_over_at < finished_at,
        "the changes happened while the counter ran"
    );
}

/// Through twemproxy, which closes the connection on `CLIENT`, `SCRIPT`, `PING <id>` and the
/// pub/sub commands: the locks connect (the capability probe finds each refusal), the waiters
/// poll, and every increment is made under the lock.
#[test]
fn counts_exactly_through_twemproxy() {
    let server = RedisServer::start().expect("start redis-server");
    let proxy = Twemproxy::start(&[&server]).expect("start twemproxy (nutcracker)");
    let child = counter_sized(&["--url".into(), proxy.url()], "500", "1");
    assert_total(child, 500);
}

/// Under each restriction set of managed services that an ACL can express
/// (`lock_testkit::restrictions`), one after the other on one server. Under the set without
/// scripts the counter runs the fast lock (`--kind fast`): exact on a server with native
/// compare-and-set (Valkey 9; the CI's second step), refused at connect elsewhere, naming what
/// is missing.
#[test]
fn counts_exactly_under_each_restriction_set() {
    let server = RedisServer::start().expect("start redis-server");
    for (index, restriction) in RESTRICTIONS.iter().enumerate() {
        let url = restricted_user(&server, &format!("restricted{index}"), restriction.denied)
            .expect("make the user");
        eprintln!("{}:", restriction.name);
        let mut args = vec!["--url".to_owned(), url];
        if !restriction.scripts {
            args.extend(["--kind".to_owned(), "fast".to_owned()]);
            if !server_has_natives(&server) {
                let output = counter_sized(&args, "500", "1")
                    .wait_with_output()
                    .expect("counter output");
                let stderr = String::from_utf8_lossy(&output.stderr);
                assert!(
                    !output.status.success()
                        && stderr.contains("SET IFEQ")
                        && stderr.contains("DELIFEQ"),
                    "refused at connect, naming the missing commands:\n{stderr}"
                );
                eprintln!("refused: the server has no native compare-and-set");
                continue;
            }
        }
        assert_total(counter_sized(&args, "500", "1"), 500);
    }
}

/// Whether the server answers `SET … IFEQ` and `DELIFEQ` or `DELEX` (Valkey 9, Redis 8.4).
fn server_has_natives(server: &RedisServer) -> bool {
    let mut connection = redis::Client::open(server.url())
        .expect("client")
        .get_connection()
        .expect("connect");
    let mut known = |command: &str| {
        let info: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(command)
            .query(&mut connection)
            .expect("COMMAND INFO");
        !matches!(info.first(), Some(redis::Value::Nil) | None)
    };
    let deletes = known("DELIFEQ") || known("DELEX");
    let set_ifeq: redis::RedisResult<redis::Value> = redis::cmd("SET")
        .arg("counter-deployments:probe")
        .arg("x")
        .arg("IFEQ")
        .arg("y")
        .query(&mut connection);
    deletes && set_ifeq.is_ok()
}

#[test]
fn counts_exactly_behind_sentinels() {
    // One deployment at a time: wait for the cluster test's processes to be gone is not
    // needed for correctness, only for load; a Sentinel group is 5 processes.
    let group = SentinelGroup::start(1).expect("start a Sentinel group");
    let child = counter(&[
        "--sentinel".into(),
        group.sentinel_urls().join(","),
        "--service".into(),
        group.service().into(),
    ]);
    assert_exact(child);
}

/// With `--tls-ca`, `--tls-cert` and `--tls-key` (files made for the run), against servers on
/// TLS only that ask for client certificates: one server, a 3-primary cluster, a Sentinel group
/// (Sentinels on TLS too), one after the other. A `skipped:` line when the server binary has no
/// TLS.
#[test]
fn counts_exactly_over_mutual_tls_in_every_mode() {
    let certs = TestCerts::generate().expect("certificates");
    let options = || ServerOptions::new().tls(&certs, true);
    let path = |path: &std::path::Path| path.display().to_string();
    let tls = [
        "--tls-ca".to_owned(),
        path(certs.ca_path()),
        "--tls-cert".to_owned(),
        path(certs.client_cert_path()),
        "--tls-key".to_owned(),
        path(certs.client_key_path()),
    ];
    // 100 tasks × 3 increments: small, the other tests load the deployments harder.
    let run = |deployment: Vec<String>| {
        assert_total(
            counter_sized(&[deployment, tls.to_vec()].concat(), "100", "3"),
            300,
        );
    };

    let server = match RedisServer::start_with(options()) {
        Ok(server) => server,
        Err(ServerError::TlsUnsupported { binary, .. }) => {
            eprintln!("skipped: {} has no TLS support", binary.display());
            return;
        }
        Err(error) => panic!("start a server on TLS: {error}"),
    };
    run(vec!["--url".into(), server.url()]);
    drop(server);

    let cluster = RedisCluster::start_with(3, 0, options()).expect("a cluster on TLS");
    run(vec!["--cluster".into(), cluster.urls().join(",")]);
    drop(cluster);

    let group = SentinelGroup::start_with(1, options()).expect("a Sentinel group on TLS");
    run(vec![
        "--sentinel".into(),
        group.sentinel_urls().join(","),
        "--service".into(),
        group.service().into(),
    ]);
}

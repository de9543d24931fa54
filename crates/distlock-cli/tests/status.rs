//! `distlock status`, `watch` and `unlock --force` end to end, against a real server.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lock_testkit::RedisServer;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const DISTLOCK: &str = env!("CARGO_BIN_EXE_distlock");

fn distlock(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(DISTLOCK);
    command.env("DISTLOCK_URL", url).args(args);
    command
}

fn output(url: &str, args: &[&str]) -> Output {
    distlock(url, args)
        .stdin(Stdio::null())
        .output()
        .expect("run distlock")
}

fn json(url: &str, name: &str) -> serde_json::Value {
    let shown = output(url, &["status", name, "--json"]);
    assert_eq!(shown.status.code(), Some(0), "{shown:?}");
    serde_json::from_slice(&shown.stdout).expect("one JSON object")
}

fn wait_for(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `status` shows a free lock, then one held by a `distlock run` (its holder, lease, fencing
/// counter and a second `run` waiting for it), as text and as JSON; `unlock --force` refuses
/// without `--yes` when not on a terminal, releases with it, and the holder's command is
/// stopped for its lost lease.
#[test]
fn status_and_forced_unlock() {
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    let free = json(&url, "cli:status");
    assert_eq!(free["state"], "free");
    assert_eq!(free["holders"], serde_json::json!([]));

    let mut holder = distlock(
        &url,
        &[
            "run",
            "cli:status",
            "--lease",
            "3s",
            "--fencing-env",
            "TOKEN",
            "--",
            "sleep",
            "30",
        ],
    )
    .spawn()
    .expect("run the holder");
    wait_for("the holder", || json(&url, "cli:status")["state"] == "held");
    let mut waiter = distlock(&url, &["run", "cli:status", "--", "true"])
        .spawn()
        .expect("run a waiter");
    wait_for("the waiter", || {
        json(&url, "cli:status")["waiters"]["subscribed"] == 1
    });
    let held = json(&url, "cli:status");
    assert_eq!(held["kind"], "reentrant");
    assert_eq!(held["holders"][0]["holds"], 1);
    assert!(held["ttl_ms"].as_u64().expect("a lease") > 1000);
    assert!(held["fencing_counter"].as_u64().expect("a counter") > 0);
    let text = output(&url, &["status", "cli:status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with("cli:status: held (reentrant lock"),
        "{text}"
    );
    assert!(text.contains("waiters subscribed 1 (pub/sub)"), "{text}");

    // Not on a terminal and no --yes: refused, nothing changed.
    let refused = output(&url, &["unlock", "--force", "cli:status"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert_eq!(json(&url, "cli:status")["state"], "held");
    // With --yes: released; the waiter gets it and ends, the holder loses its lease.
    let released = output(&url, &["unlock", "--force", "--yes", "cli:status"]);
    assert_eq!(released.status.code(), Some(0), "{released:?}");
    assert_eq!(waiter.wait().expect("the waiter ends").code(), Some(0));
    assert_eq!(holder.wait().expect("the holder ends").code(), Some(70));
    assert_eq!(json(&url, "cli:status")["state"], "free");
    // Not a lock: left alone.
    let mut connection = server.client().get_connection().expect("connect");
    redis::cmd("RPUSH")
        .arg("cli:list")
        .arg("x")
        .query::<()>(&mut connection)
        .expect("RPUSH");
    assert_eq!(json(&url, "cli:list")["state"], "other");
    let not_a_lock = output(&url, &["unlock", "--force", "--yes", "cli:list"]);
    assert_eq!(not_a_lock.status.code(), Some(2), "{not_a_lock:?}");
}

/// `watch --json` prints the lock again when it changes (free, held, free) and ends with 0 on
/// SIGINT.
#[test]
fn watch_prints_changes() {
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    let mut watch = distlock(&url, &["watch", "cli:watch", "--json", "--every", "20ms"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    let mut next_state = || {
        let line = lines.next().expect("a line").expect("a line");
        let value: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        value["state"].as_str().expect("a state").to_owned()
    };
    assert_eq!(next_state(), "free");
    let ran = output(&url, &["run", "cli:watch", "--", "sleep", "0.3"]);
    assert_eq!(ran.status.code(), Some(0));
    assert_eq!(next_state(), "held");
    assert_eq!(next_state(), "free");
    let pid = i32::try_from(watch.id()).expect("a pid");
    kill(Pid::from_raw(pid), Signal::SIGINT).expect("SIGINT");
    assert_eq!(watch.wait().expect("watch ends").code(), Some(0));
}

/// `list` finds the locks matching a glob (held by `distlock run`s), not other keys, as text
/// and JSON, and says when its limit cut the walk short.
#[test]
fn list_finds_the_held_locks() {
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    let mut holders: Vec<_> = ["cli:list:a", "cli:list:b"]
        .iter()
        .map(|name| {
            distlock(&url, &["run", name, "--", "sleep", "30"])
                .spawn()
                .expect("run a holder")
        })
        .collect();
    let mut connection = server.client().get_connection().expect("connect");
    redis::cmd("SET")
        .arg("cli:list:data")
        .arg("x")
        .query::<()>(&mut connection)
        .expect("SET");
    let listed = || {
        let shown = output(&url, &["list", "cli:list:*", "--json"]);
        assert_eq!(shown.status.code(), Some(0), "{shown:?}");
        serde_json::from_slice::<serde_json::Value>(&shown.stdout).expect("JSON")
    };
    wait_for("both holders", || {
        listed()["locks"]
            .as_array()
            .is_some_and(|locks| locks.len() == 2)
    });
    let list = listed();
    assert_eq!(list["complete"], true);
    assert_eq!(list["locks"][0]["name"], "cli:list:a");
    assert_eq!(list["locks"][1]["name"], "cli:list:b");
    let text = output(&url, &["list", "cli:list:*"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.starts_with("cli:list:a\treentrant\t"), "{text}");
    let cut = output(&url, &["list", "--limit", "1"]);
    assert!(
        String::from_utf8_lossy(&cut.stderr).contains("--limit"),
        "{cut:?}"
    );
    for holder in &mut holders {
        let pid = i32::try_from(holder.id()).expect("a pid");
        kill(Pid::from_raw(pid), Signal::SIGTERM).expect("SIGTERM");
        let _ = holder.wait();
    }
    assert_eq!(listed()["locks"], serde_json::json!([]));
}

/// On a Redis Cluster (`--cluster`): `run` holds a lock, `status` reads it from its slot's
/// primary, `list` finds locks on every primary.
#[test]
fn on_a_cluster() {
    let cluster = lock_testkit::RedisCluster::start(3, 0).expect("start a cluster");
    let seeds = cluster.urls().join(",");
    let names = [
        "cli:cluster:a",
        "cli:cluster:b",
        "cli:cluster:c",
        "cli:cluster:d",
    ];
    let mut holders: Vec<_> = names
        .iter()
        .map(|name| {
            Command::new(DISTLOCK)
                .args(["--cluster", &seeds, "run", name, "--", "sleep", "30"])
                .spawn()
                .expect("run a holder")
        })
        .collect();
    let shown = |args: &[&str]| {
        let mut all = vec!["--cluster", seeds.as_str()];
        all.extend_from_slice(args);
        let shown = Command::new(DISTLOCK)
            .args(&all)
            .stdin(Stdio::null())
            .output()
            .expect("run distlock");
        assert_eq!(shown.status.code(), Some(0), "{shown:?}");
        serde_json::from_slice::<serde_json::Value>(&shown.stdout).expect("JSON")
    };
    wait_for("every holder", || {
        shown(&["list", "cli:cluster:*", "--json"])["locks"]
            .as_array()
            .is_some_and(|locks| locks.len() == names.len())
    });
    let slots: std::collections::BTreeSet<u16> = names
        .iter()
        .map(|name| distlock::redis::keys::slot(name))
        .collect();
    assert!(slots.len() > 1, "the names live in several slots");
    let status = shown(&["status", "cli:cluster:c", "--json"]);
    assert_eq!(status["state"], "held");
    for holder in &mut holders {
        let pid = i32::try_from(holder.id()).expect("a pid");
        kill(Pid::from_raw(pid), Signal::SIGTERM).expect("SIGTERM");
        let _ = holder.wait();
    }
    assert_eq!(
        shown(&["list", "cli:cluster:*", "--json"])["locks"],
        serde_json::json!([])
    );
}

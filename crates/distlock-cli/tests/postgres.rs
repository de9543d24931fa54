//! The tool on PostgreSQL (`--url postgres://…`), end to end against a real server: the schema
//! printed and installed, `run` holding a lock while its command runs (with its fencing token),
//! `status` and `list` showing it and the family's other kinds, `unlock --force` releasing it
//! and the holder's command stopped for its lost lease.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lock_testkit::PostgresServer;

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
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_tool_on_postgres() {
    let server = PostgresServer::start().expect("start PostgreSQL");
    let url = server.url();

    // Before the schema: a command names what is missing; `postgres schema` prints the SQL
    // without a server; `postgres install` installs it (twice is fine).
    let missing = output(&url, &["status", "cli:pg"]);
    assert_eq!(missing.status.code(), Some(69), "{missing:?}");
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("not installed"),
        "{missing:?}"
    );
    let schema = output("redis://127.0.0.1:1/", &["postgres", "schema"]);
    assert_eq!(schema.status.code(), Some(0), "{schema:?}");
    assert!(
        String::from_utf8_lossy(&schema.stdout).contains("CREATE SCHEMA IF NOT EXISTS distlock")
    );
    for _ in 0..2 {
        let installed = output(&url, &["postgres", "install"]);
        assert_eq!(installed.status.code(), Some(0), "{installed:?}");
    }

    let free = json(&url, "cli:pg");
    assert_eq!(free["state"], "free");
    assert_eq!(free["kinds"], serde_json::json!([]));

    // `run` holds the lock while its command runs, with the fencing token in its environment.
    let mut holder = distlock(
        &url,
        &[
            "run",
            "cli:pg",
            "--lease",
            "3s",
            "--fencing-env",
            "TOKEN",
            "--",
            "sh",
            "-c",
            "echo token=$TOKEN; sleep 30",
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("run the holder");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the command's first line");
    let token: u64 = line
        .trim()
        .strip_prefix("token=")
        .and_then(|token| token.parse().ok())
        .unwrap_or_else(|| panic!("a fencing token, got {line:?}"));
    assert!(
        token > 1_000_000_000_000_000,
        "floored at the server's clock in µs: {token}"
    );

    let held = json(&url, "cli:pg");
    assert_eq!(held["state"], "held", "{held}");
    assert_eq!(held["kinds"], serde_json::json!(["lock"]), "{held}");
    assert_eq!(held["holders"][0]["holds"], 1, "{held}");
    let ttl = held["ttl_ms"].as_u64().expect("a lease");
    assert!(ttl > 0 && ttl <= 3000, "{held}");
    let text = output(&url, &["status", "cli:pg"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("cli:pg: lock\n"), "{text}");
    assert!(text.contains("    holder "), "{text}");

    // `list` finds it by a glob, and not by another.
    let listed = output(&url, &["list", "cli:*"]);
    let listed_text = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.status.code(), Some(0), "{listed:?}");
    assert!(listed_text.starts_with("cli:pg\tlock\t"), "{listed_text}");
    let other = output(&url, &["list", "other:*", "--json"]);
    let other: serde_json::Value = serde_json::from_slice(&other.stdout).expect("JSON");
    assert_eq!(other["locks"], serde_json::json!([]), "{other}");
    assert_eq!(other["complete"], true, "{other}");

    // A second `run` does not get it without waiting.
    let refused = output(&url, &["run", "cli:pg", "--wait", "0s", "--", "true"]);
    assert_eq!(refused.status.code(), Some(75), "{refused:?}");

    // `unlock --force` wants --yes off a terminal; with it the lock goes, and the holder's
    // command is stopped for its lost lease (exit 70) at its next renewal.
    let asked = output(&url, &["unlock", "cli:pg", "--force"]);
    assert_eq!(asked.status.code(), Some(2), "{asked:?}");
    let forced = output(&url, &["unlock", "cli:pg", "--force", "--yes"]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    assert!(
        String::from_utf8_lossy(&forced.stdout).contains("cli:pg: lock released"),
        "{forced:?}"
    );
    let status = holder.wait().expect("the holder ends");
    assert_eq!(status.code(), Some(70), "the holder's lease was lost");
    wait_for("the lock to be free", || {
        json(&url, "cli:pg")["state"] == "free"
    });

    // The next `run` gets it, and leaves it free.
    let next = output(&url, &["run", "cli:pg", "--wait", "2s", "--", "true"]);
    assert_eq!(next.status.code(), Some(0), "{next:?}");
    assert_eq!(json(&url, "cli:pg")["state"], "free");
}

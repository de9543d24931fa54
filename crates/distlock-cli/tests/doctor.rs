//! `distlock doctor` end to end: on a full server, through twemproxy (which hangs up on what it
//! does not know), and for a user the ACL denies scripts.

use std::process::{Command, Output, Stdio};

use lock_testkit::{RedisServer, Twemproxy};

const DISTLOCK: &str = env!("CARGO_BIN_EXE_distlock");

fn doctor(url: &str, json: bool) -> Output {
    let mut command = Command::new(DISTLOCK);
    command.env("DISTLOCK_URL", url).arg("doctor");
    if json {
        command.arg("--json");
    }
    command
        .stdin(Stdio::null())
        .output()
        .expect("run distlock doctor")
}

fn parsed(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

fn support<'a>(report: &'a serde_json::Value, command: &str) -> &'a str {
    report["capabilities"]
        .as_array()
        .expect("capabilities")
        .iter()
        .find(|entry| entry["command"] == command)
        .and_then(|entry| entry["support"].as_str())
        .unwrap_or_else(|| panic!("no {command} in {report}"))
}

fn standing<'a>(report: &'a serde_json::Value, feature: &str) -> &'a str {
    report["features"]
        .as_array()
        .expect("features")
        .iter()
        .find(|entry| entry["feature"].as_str().unwrap_or("").starts_with(feature))
        .and_then(|entry| entry["standing"].as_str())
        .unwrap_or_else(|| panic!("no {feature} in {report}"))
}

#[test]
fn a_full_server_runs_everything_the_default_lock_needs() {
    let server = RedisServer::start().expect("start redis-server");
    let output = doctor(&server.url(), true);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report = parsed(&output);
    assert_eq!(report["default_lock_works"], true);
    assert!(report["server"]["version"].as_str().is_some(), "{report}");
    for command in ["EVAL", "EVALSHA", "SUBSCRIBE", "CLIENT INFO", "SCRIPT LOAD"] {
        assert_eq!(support(&report, command), "yes", "{command}");
    }
    assert_eq!(standing(&report, "waking waiters"), "works");
    let text = doctor(&server.url(), false);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("the default lock works here"), "{text}");
}

#[test]
fn through_twemproxy_the_lock_works_degraded() {
    let server = RedisServer::start().expect("start redis-server");
    let proxy = Twemproxy::start(&[&server]).expect("start twemproxy (nutcracker)");
    let output = doctor(&proxy.url(), true);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report = parsed(&output);
    assert_eq!(report["default_lock_works"], true);
    for command in [
        "SUBSCRIBE",
        "CLIENT INFO",
        "SCRIPT LOAD",
        "PING <id>",
        "WAIT",
    ] {
        assert_eq!(support(&report, command), "closes_connection", "{command}");
    }
    assert_eq!(standing(&report, "waking waiters"), "degraded");
    assert_eq!(standing(&report, "fencing a replaced"), "degraded");
    assert_eq!(standing(&report, "replica acknowledgement"), "unavailable");
    assert_eq!(standing(&report, "the reentrant lock"), "works");
}

#[test]
fn without_scripts_no_lock_works_and_the_exit_status_says_so() {
    let server = RedisServer::start().expect("start redis-server");
    let mut admin = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "noscripts",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-@scripting",
        ])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://noscripts:pw@127.0.0.1:{}/", server.port());
    let output = doctor(&url, true);
    assert_eq!(output.status.code(), Some(69), "{output:?}");
    let report = parsed(&output);
    assert_eq!(report["default_lock_works"], false);
    assert_eq!(support(&report, "EVAL"), "not_permitted");
    assert_eq!(standing(&report, "the reentrant lock"), "unavailable");
    // The fast lock runs on native commands where the server has them (Valkey 9).
    let natives = support(&report, "SET IFEQ") == "yes"
        && (support(&report, "DELIFEQ") == "yes" || support(&report, "DELEX") == "yes");
    let fast = if natives { "degraded" } else { "unavailable" };
    assert_eq!(standing(&report, "the fast lock"), fast);
    let text = doctor(&url, false);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("does NOT work"), "{text}");
}

//! `distlock run` end to end: the built binary against a real server, its commands real
//! processes.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lock_testkit::RedisServer;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const DISTLOCK: &str = env!("CARGO_BIN_EXE_distlock");

/// `distlock ARGS…` against the server at `url`.
fn distlock(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(DISTLOCK);
    command.env("DISTLOCK_URL", url).args(args);
    command
}

fn output(url: &str, args: &[&str]) -> Output {
    distlock(url, args).output().expect("run distlock")
}

fn exists(server: &RedisServer, key: &str) -> bool {
    let mut connection = server.client().get_connection().expect("connect");
    redis::cmd("EXISTS")
        .arg(key)
        .query::<bool>(&mut connection)
        .expect("EXISTS")
}

fn wait_for(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

/// The intervals `(start, end)` in nanoseconds the commands wrote to `log`, sorted.
fn intervals(log: &Path) -> Vec<(u128, u128)> {
    let text = std::fs::read_to_string(log).expect("the commands' log");
    let mut starts = std::collections::HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [pid, what, at] = fields[..] else {
            panic!("a line of three fields: {line:?}");
        };
        let at: u128 = at.parse().expect("a time in ns");
        match what {
            "start" => {
                starts.insert(pid.to_owned(), at);
            }
            "end" => out.push((starts.remove(pid).expect("its start"), at)),
            other => panic!("unknown event {other:?}"),
        }
    }
    out.sort_unstable();
    out
}

/// Two loops of `distlock run` on one lock, at the same time: the commands' own timestamps
/// (taken by the commands, appended to one file) never overlap. (Run under two different lock
/// names, the same loops do overlap: the check can fail.)
#[test]
fn concurrent_runs_never_overlap_their_commands() {
    let server = RedisServer::start().expect("start a server");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let log = dir.path().join("intervals");
    let command = format!(
        "echo \"$$ start $(date +%s%N)\" >> {log}; sleep 0.1; echo \"$$ end $(date +%s%N)\" >> {log}",
        log = log.display()
    );
    let loops: Vec<_> = (0..3)
        .map(|_| {
            let (url, command) = (server.url(), command.clone());
            std::thread::spawn(move || {
                for _ in 0..4 {
                    let ran = output(&url, &["run", "cli:overlap", "--", "sh", "-c", &command]);
                    assert_eq!(code(&ran), 0, "{ran:?}");
                }
            })
        })
        .collect();
    for each in loops {
        each.join().expect("a loop of runs");
    }
    let intervals = intervals(&log);
    assert_eq!(intervals.len(), 12);
    for pair in intervals.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "overlap: {:?} and {:?}",
            pair[0],
            pair[1]
        );
    }
    assert!(
        !exists(&server, "cli:overlap"),
        "released after the last run"
    );
}

/// The exit codes: the command's own, and `distlock`'s when there was no command to run.
#[test]
fn exit_codes() {
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    // The command's status, and its fencing token in the variable asked for.
    let ran = output(
        &url,
        &[
            "run",
            "cli:codes",
            "--fencing-env",
            "TOKEN",
            "--",
            "sh",
            "-c",
            "echo \"$TOKEN\"; exit 3",
        ],
    );
    assert_eq!(code(&ran), 3, "{ran:?}");
    let token: u64 = String::from_utf8_lossy(&ran.stdout)
        .trim()
        .parse()
        .expect("a fencing token");
    assert!(token > 0);
    // A command killed by a signal: 128 + its number.
    let killed = output(&url, &["run", "cli:codes", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(code(&killed), 128 + 9, "{killed:?}");
    // Held by another run: not acquired within --wait.
    let mut holder = distlock(&url, &["run", "cli:codes", "--", "sleep", "5"])
        .spawn()
        .expect("run the holder");
    wait_for("the holder's lock", || exists(&server, "cli:codes"));
    let refused = output(&url, &["run", "cli:codes", "--wait", "200ms", "--", "true"]);
    assert_eq!(code(&refused), 75, "{refused:?}");
    let once = output(&url, &["run", "cli:codes", "--wait", "0", "--", "true"]);
    assert_eq!(code(&once), 75, "{once:?}");
    let _ = holder.kill();
    let _ = holder.wait();
    // A command that cannot be started: the lock is released again.
    let missing = output(&url, &["run", "cli:missing", "--", "/nonexistent/command"]);
    assert_eq!(code(&missing), 127, "{missing:?}");
    assert!(!exists(&server, "cli:missing"));
    // No server: a backend error.
    let port = server.port();
    drop(server);
    let unreachable = output(
        &format!("redis://127.0.0.1:{port}/"),
        &["run", "cli:codes", "--", "true"],
    );
    assert_eq!(code(&unreachable), 69, "{unreachable:?}");
    // Bad arguments.
    let usage = output(&url, &["run", "cli:codes", "--lease", "soon", "--", "true"]);
    assert_eq!(code(&usage), 2, "{usage:?}");
}

/// A lease lost under a running command (its key deleted) stops the command within a renewal
/// period (0.3 s here) and the command timeout (1 s), and `distlock` exits 70.
#[test]
fn a_lost_lease_stops_the_command() {
    let server = RedisServer::start().expect("start a server");
    let mut run = distlock(
        &server.url(),
        &[
            "--command-timeout",
            "1s",
            "run",
            "cli:lost",
            "--lease",
            "900ms",
            "--",
            "sleep",
            "30",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("run distlock");
    wait_for("the lock", || exists(&server, "cli:lost"));
    let mut connection = server.client().get_connection().expect("connect");
    redis::cmd("DEL")
        .arg("cli:lost")
        .query::<()>(&mut connection)
        .expect("DEL");
    let deleted_at = Instant::now();
    let status = run.wait().expect("distlock ends");
    let stopped_after = deleted_at.elapsed();
    assert_eq!(status.code(), Some(70), "{status:?}");
    assert!(
        stopped_after < Duration::from_millis(1300),
        "stopped {stopped_after:?} after the key was deleted"
    );
}

/// SIGTERM to `distlock` is passed on to the command; once the command has ended the lock is
/// released, and `distlock` exits with the command's status (143: ended by SIGTERM).
#[test]
fn sigterm_stops_the_command_and_releases() {
    let server = RedisServer::start().expect("start a server");
    let mut run = distlock(&server.url(), &["run", "cli:term", "--", "sleep", "30"])
        .spawn()
        .expect("run distlock");
    wait_for("the lock", || exists(&server, "cli:term"));
    let pid = i32::try_from(run.id()).expect("a pid");
    kill(Pid::from_raw(pid), Signal::SIGTERM).expect("SIGTERM");
    let status = run.wait().expect("distlock ends");
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    assert!(!exists(&server, "cli:term"), "released");
}

/// SIGTERM while the lock's grant is on its way back (replies held up by a slow link): the wait
/// stops, what the dropped lock call left on the server is given back before `distlock` exits
/// (143), and nothing is left behind. (It used to exit at once, and the runtime's end dropped
/// the cleanup: the lock stayed held until its lease ended.)
#[test]
fn sigterm_while_the_grant_is_on_its_way_leaves_nothing() {
    let server = RedisServer::start().expect("start a server");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let proxy = runtime
        .block_on(lock_testkit::FaultProxy::start(server.addr()))
        .expect("proxy");
    proxy.set_fault(lock_testkit::Fault::Latency(Duration::from_millis(150)));
    let mut run = distlock(
        &proxy.url(),
        &[
            "--command-timeout",
            "5s",
            "run",
            "cli:in-flight",
            "--",
            "sleep",
            "30",
        ],
    )
    .spawn()
    .expect("run distlock");
    // The acquire ran on the server; its reply is still in the proxy for up to 150 ms.
    wait_for("the lock", || exists(&server, "cli:in-flight"));
    let pid = i32::try_from(run.id()).expect("a pid");
    kill(Pid::from_raw(pid), Signal::SIGTERM).expect("SIGTERM");
    let status = run.wait().expect("distlock ends");
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    assert!(
        !exists(&server, "cli:in-flight"),
        "given back before exiting"
    );
}

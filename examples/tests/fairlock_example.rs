//! The `fairlock` demo, run as several OS processes on one real server while the lock is held:
//! they are granted the lock in the order they were started, one at a time.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use distlock::{LockOptions, Locker, RedisBackend};
use lock_testkit::RedisServer;

const DEMO: &str = env!("CARGO_BIN_EXE_fairlock");

/// One run's hold, in Unix milliseconds: from its `ACQUIRED` line to its `RELEASING` line, a
/// span inside the time it held the lock on the server.
#[derive(Clone, Copy, Debug)]
struct Hold {
    from: u128,
    to: u128,
}

/// The value of the line `word <unix-ms>` in `stdout`.
fn stamp(stdout: &str, word: &str) -> Option<u128> {
    stdout.lines().find_map(|line| {
        line.strip_prefix(word)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|ms| ms.trim().parse().ok())
    })
}

/// Starts the demo with `args`, its output captured.
fn spawn(args: &[&str]) -> Child {
    Command::new(DEMO)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the fairlock demo")
}

/// Waits for every child until `limit` has passed; a child still running then is killed (the
/// test fails). The outputs are small: nothing blocks on a full pipe.
fn wait_all(mut children: Vec<Child>, limit: Duration) -> Vec<Output> {
    let give_up_at = Instant::now() + limit;
    let mut statuses = vec![None; children.len()];
    while statuses.iter().any(Option::is_none) {
        for (child, status) in children.iter_mut().zip(statuses.iter_mut()) {
            if status.is_none() {
                *status = child.try_wait().expect("poll a demo process");
            }
        }
        if Instant::now() >= give_up_at {
            for (child, status) in children.iter_mut().zip(&statuses) {
                if status.is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            panic!("demo processes still running after {limit:?}: {statuses:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    children
        .into_iter()
        .zip(statuses)
        .map(|(mut child, status)| {
            let mut stdout = Vec::new();
            let mut stderr = Vec::new();
            child
                .stdout
                .take()
                .expect("stdout")
                .read_to_end(&mut stdout)
                .expect("read stdout");
            child
                .stderr
                .take()
                .expect("stderr")
                .read_to_end(&mut stderr)
                .expect("read stderr");
            Output {
                status: status.expect("exited"),
                stdout,
                stderr,
            }
        })
        .collect()
}

#[test]
fn processes_are_granted_in_the_order_they_came() {
    const PROCESSES: usize = 5;
    const HOLD_MS: u128 = 150;
    const NAME: &str = "distlock:test:fairlock-example";
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let backend = runtime
        .block_on(RedisBackend::connect(url.as_str()))
        .expect("connect");
    let fair = Locker::new(backend).fair(NAME).expect("a valid name");
    let held = runtime
        .block_on(fair.lock_with(&LockOptions::new().fixed_lease(Duration::from_secs(30))))
        .expect("the test holds the lock while the runs queue");
    let queued = || {
        runtime
            .block_on(fair.state())
            .expect("fair_state")
            .queue
            .len()
    };

    let hold_ms = HOLD_MS.to_string();
    let args = [
        "--url",
        url.as_str(),
        "--lock-name",
        NAME,
        "--hold-ms",
        hold_ms.as_str(),
    ];
    // ~100 ms apart, each once the one before is queued: the start order is the arrival order.
    let mut children = Vec::new();
    for started in 0..PROCESSES {
        children.push(spawn(&args));
        std::thread::sleep(Duration::from_millis(100));
        let give_up_at = Instant::now() + Duration::from_secs(10);
        while queued() <= started {
            assert!(Instant::now() < give_up_at, "run {started} never queued");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    assert!(
        runtime
            .block_on(held.release())
            .expect("release")
            .was_held()
    );
    let outputs = wait_all(children, Duration::from_secs(60));

    let mut holds = Vec::new();
    for output in &outputs {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "a run failed ({}): {stdout}{stderr}",
            output.status
        );
        let line = |word| {
            stamp(&stdout, word).unwrap_or_else(|| panic!("no {word} line in: {stdout}{stderr}"))
        };
        let (acquired, releasing, released) =
            (line("ACQUIRED"), line("RELEASING"), line("RELEASED"));
        assert!(
            releasing >= acquired + HOLD_MS && released >= releasing,
            "held {acquired}..{releasing}, released {released}: not the {HOLD_MS} ms asked for"
        );
        holds.push(Hold {
            from: acquired,
            to: releasing,
        });
    }
    eprintln!("holds in start order (unix ms): {holds:?}");
    for (started, pair) in holds.windows(2).enumerate() {
        assert!(
            pair[0].to <= pair[1].from,
            "run {} was granted before run {started} released, or out of order: {holds:?}",
            started + 1
        );
    }
    assert_eq!(queued(), 0, "every run left the queue");
}

#[test]
fn bad_input_is_refused_before_connecting() {
    // Port 9 on loopback (discard), where no server listens: these runs must stop before
    // sending anything anywhere.
    for (url, name, says) in [
        ("redis://127.0.0.1:9/", "", "name"),
        ("not a url", "printer", "error"),
    ] {
        let args = ["--url", url, "--lock-name", name, "--hold-ms", "10"];
        let output = spawn(&args).wait_with_output().expect("run the demo");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

//! The `semaphore` demo, run as several OS processes at once on one real server: together they
//! never hold more permits than the semaphore has, and every one of them gets its turn.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_testkit::RedisServer;

const DEMO: &str = env!("CARGO_BIN_EXE_semaphore");

/// One run's hold, in Unix milliseconds: from its `ACQUIRED` line to its `RELEASING` line, a
/// span inside the time its permits were taken on the server.
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

/// The most holds in progress at any one instant (each hold takes `permits` permits, so this
/// times `permits` is the most permits held together). A sweep over the holds' starts and ends;
/// at equal instants the ends come first: a hold that ended in the millisecond another began
/// ended before it on the server, since each hold's span lies inside its server-side hold.
fn most_at_once(holds: &[Hold]) -> usize {
    let mut events: Vec<(u128, i32)> = holds
        .iter()
        .flat_map(|hold| [(hold.from, 1), (hold.to, -1)])
        .collect();
    events.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in events {
        now += step;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// Starts the demo with `args`, its output captured.
fn spawn(args: &[&str]) -> Child {
    Command::new(DEMO)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the semaphore demo")
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
fn the_sweep_counts_the_holds_in_progress() {
    let hold = |from, to| Hold { from, to };
    assert_eq!(most_at_once(&[]), 0);
    assert_eq!(most_at_once(&[hold(0, 10), hold(10, 20), hold(20, 30)]), 1);
    assert_eq!(
        most_at_once(&[hold(0, 10), hold(5, 15), hold(9, 12), hold(12, 20)]),
        3
    );
}

#[test]
fn six_processes_never_hold_more_than_the_two_permits() {
    six_processes_on_two_permits(&[]);
}

/// The same with `--leased`: lease-bound permits, each seen in `{name}:timeout` while held and
/// removed from it when given back.
#[test]
fn six_leased_processes_never_hold_more_than_the_two_permits() {
    six_processes_on_two_permits(&["--leased"]);
}

/// Six runs of the demo with `extra` arguments at once on one server, 2 permits, one each.
fn six_processes_on_two_permits(extra: &[&str]) {
    const PROCESSES: usize = 6;
    const HOLD_MS: u128 = 200;
    const NAME: &str = "distlock:test:semaphore-example";
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    let hold_ms = HOLD_MS.to_string();
    let mut args = vec![
        "--url",
        url.as_str(),
        "--name",
        NAME,
        "--permits",
        "2",
        "--acquire",
        "1",
        "--hold-ms",
        hold_ms.as_str(),
    ];
    args.extend_from_slice(extra);
    let leased = extra.contains(&"--leased");
    // Meanwhile, the most permits seen in `{name}:timeout` (lease-bound permits out).
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = std::thread::spawn({
        let stop = stop.clone();
        let mut raw = redis::Client::open(url.as_str())
            .and_then(|client| client.get_connection())
            .expect("connect");
        move || {
            let mut most = 0i64;
            while !stop.load(Ordering::Relaxed) {
                let out: i64 = redis::cmd("ZCARD")
                    .arg(format!("{{{NAME}}}:timeout"))
                    .query(&mut raw)
                    .expect("ZCARD");
                most = most.max(out);
                std::thread::sleep(Duration::from_millis(5));
            }
            most
        }
    });
    let children = (0..PROCESSES).map(|_| spawn(&args)).collect();
    let outputs = wait_all(children, Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    let most_out = watcher.join().expect("watcher");
    if leased {
        assert!(
            (1..=2).contains(&most_out),
            "{most_out} leased permits seen out at once"
        );
    } else {
        assert_eq!(most_out, 0, "plain permits are not lease-bound");
    }

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
    assert_eq!(holds.len(), PROCESSES, "every run got its turn");
    let most = most_at_once(&holds);
    eprintln!("holds (unix ms): {holds:?}; at most {most} at once");
    assert!(
        most <= 2,
        "{most} runs held a permit at once with 2 permits: {holds:?}"
    );
    assert!(most >= 1);
    // Every permit is back.
    let mut raw = redis::Client::open(url.as_str())
        .and_then(|client| client.get_connection())
        .expect("connect");
    let available: i64 = redis::cmd("GET").arg(NAME).query(&mut raw).expect("GET");
    assert_eq!(available, 2);
    // Leased permits are members of `{name}:timeout` while out: none is left.
    let out: i64 = redis::cmd("ZCARD")
        .arg(format!("{{{NAME}}}:timeout"))
        .query(&mut raw)
        .expect("ZCARD");
    assert_eq!(out, 0);
}

#[test]
fn bad_input_is_refused_before_connecting() {
    // Port 9 on loopback (discard), where no server listens: these runs must stop before
    // sending anything anywhere.
    let url = "redis://127.0.0.1:9/";
    // (URL, name, --permits, --acquire, what the message names)
    for (url, name, permits, acquire, says) in [
        (url, "s", "0", "1", "--permits"),
        (url, "s", "1", "0", "--acquire"),
        (url, "s", "2", "3", "could never be granted"),
        (url, "", "2", "1", "name"),
        ("not a url", "s", "2", "1", "error"),
    ] {
        let args = [
            "--url",
            url,
            "--name",
            name,
            "--permits",
            permits,
            "--acquire",
            acquire,
        ];
        let output = spawn(&args).wait_with_output().expect("run the demo");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

//! The `latch` demo, run as several OS processes on one real server: one sets the count to 3,
//! four wait, three count down one after the other; no waiter goes on before the last
//! count-down, and every one goes on promptly after it.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_testkit::RedisServer;

const DEMO: &str = env!("CARGO_BIN_EXE_latch");

/// How long after the last count-down every waiter must have gone on: the opening is announced,
/// so well under the waiters' one-second re-check, with room for process scheduling.
const WAKE_UP_MS: u128 = 700;

/// Milliseconds since the Unix epoch, as the demo prints them.
fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis())
}

/// The value of the line `word <value>` in `stdout`.
fn value(stdout: &str, word: &str) -> Option<u128> {
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
        .expect("run the latch demo")
}

/// Waits for `child` until `give_up_at`, polling; kills it if it is still running then.
fn wait_until(child: &mut Child, give_up_at: Instant) -> Option<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().expect("poll a demo process") {
            return Some(status);
        }
        if Instant::now() >= give_up_at {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The output of an exited (or killed) child. The outputs are small: nothing blocks on a full
/// pipe.
fn output_of(mut child: Child, status: Option<ExitStatus>) -> (Option<ExitStatus>, Output) {
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
    let status = status.or_else(|| child.wait().ok());
    (
        status,
        Output {
            status: status.expect("exited"),
            stdout,
            stderr,
        },
    )
}

/// Runs a short-lived demo to its end (20 s at most) and returns its stdout.
fn run_to_end(args: &[&str]) -> String {
    let mut child = spawn(args);
    let status = wait_until(&mut child, Instant::now() + Duration::from_secs(20));
    let (status, output) = output_of(child, status);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        status.is_some_and(|status| status.success()),
        "{args:?} failed ({status:?}): {stdout}{stderr}"
    );
    stdout
}

#[test]
fn four_waiters_go_on_right_after_the_third_count_down() {
    const NAME: &str = "distlock:test:latch-example";
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    let common = ["--url", url.as_str(), "--name", NAME];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        common
            .iter()
            .copied()
            .chain(extra.iter().copied())
            .collect()
    };

    assert_eq!(value(&run_to_end(&with(&["--set", "3"])), "SET"), Some(3));
    // Two waiters without a deadline, two with one far beyond the test's length.
    let mut waiters: Vec<Child> = (0..4)
        .map(|i| {
            if i % 2 == 0 {
                spawn(&with(&["--wait"]))
            } else {
                spawn(&with(&["--wait", "--timeout-ms", "60000"]))
            }
        })
        .collect();
    // Time for the waiters to start, connect and wait.
    std::thread::sleep(Duration::from_millis(1000));
    for waiter in &mut waiters {
        assert!(
            waiter.try_wait().expect("poll a waiter").is_none(),
            "a waiter went on before any count-down"
        );
    }

    // Three count-downs, started ~300 ms apart, each run to its end.
    let mut third_started = 0;
    let mut third_exited = 0;
    for expected_left in [2, 1, 0] {
        std::thread::sleep(Duration::from_millis(300));
        let started = unix_ms();
        let stdout = run_to_end(&with(&["--count-down"]));
        let exited = unix_ms();
        assert_eq!(value(&stdout, "COUNT"), Some(expected_left), "{stdout}");
        if expected_left > 0 {
            for waiter in &mut waiters {
                assert!(
                    waiter.try_wait().expect("poll a waiter").is_none(),
                    "a waiter went on with {expected_left} count(s) left"
                );
            }
        }
        (third_started, third_exited) = (started, exited);
    }

    let give_up_at = Instant::now() + Duration::from_secs(10);
    let mut went_on = Vec::new();
    for mut waiter in waiters {
        let status = wait_until(&mut waiter, give_up_at);
        let (status, output) = output_of(waiter, status);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            status.is_some_and(|status| status.success()),
            "a waiter failed or never went on ({status:?}): {stdout}{stderr}"
        );
        let line = |word| {
            value(&stdout, word).unwrap_or_else(|| panic!("no {word} line in: {stdout}{stderr}"))
        };
        let (acquired, released) = (line("ACQUIRED"), line("RELEASED"));
        assert!(released >= acquired, "{stdout}");
        went_on.push(acquired);
    }
    eprintln!(
        "third count-down ran {third_started}..{third_exited} (unix ms); waiters went on at \
         {went_on:?}"
    );
    for acquired in went_on {
        // The opening happened inside the third count-down's run: before it started the count
        // was at least 1. (A waiter may print before the count-down process has exited: both
        // learn of the opening at once.)
        assert!(
            acquired >= third_started,
            "a waiter went on at {acquired}, before the third count-down started at \
             {third_started}"
        );
        assert!(
            acquired <= third_exited + WAKE_UP_MS,
            "a waiter went on at {acquired}, {} ms after the third count-down exited at \
             {third_exited}",
            acquired - third_exited
        );
    }
    // Open: the key is gone (Redisson's countDown deletes it at zero too).
    let mut raw = redis::Client::open(url.as_str())
        .and_then(|client| client.get_connection())
        .expect("connect");
    let exists: bool = redis::cmd("EXISTS")
        .arg(NAME)
        .query(&mut raw)
        .expect("EXISTS");
    assert!(!exists);
}

#[test]
fn bad_input_is_refused_before_connecting() {
    // Port 9 on loopback (discard), where no server listens: these runs must stop before
    // sending anything anywhere.
    let url = "redis://127.0.0.1:9/";
    let too_long = (u64::MAX / 2).to_string();
    for (args, says) in [
        (vec!["--url", url, "--name", "l"], "--set"),
        (
            vec!["--url", url, "--name", "l", "--set", "1", "--wait"],
            "cannot be used with",
        ),
        (
            vec![
                "--url",
                url,
                "--name",
                "l",
                "--count-down",
                "--timeout-ms",
                "5",
            ],
            "--wait",
        ),
        (
            vec!["--url", url, "--name", "l", "--wait", "--timeout-ms", "0"],
            "--timeout-ms",
        ),
        (
            vec![
                "--url",
                url,
                "--name",
                "l",
                "--wait",
                "--timeout-ms",
                too_long.as_str(),
            ],
            "--timeout-ms",
        ),
        (vec!["--url", url, "--name", "l", "--set", "-1"], "--set"),
        (vec!["--url", url, "--name", "", "--wait"], "name"),
        (vec!["--url", url, "--name", "a{b", "--wait"], "name"),
        (vec!["--url", "not a url", "--name", "l", "--wait"], "error"),
    ] {
        let output = spawn(&args).wait_with_output().expect("run the demo");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

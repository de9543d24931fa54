//! The `leader` demo, run as several OS processes at once on one real server: candidates never
//! lead at once, terms grow in the order they led, and an observer process sees every leader,
//! in order.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lock_testkit::RedisServer;

const DEMO: &str = env!("CARGO_BIN_EXE_leader");

/// How long an observer may take to print a new leader: announced at once, and read again
/// every second besides.
const PROMPT_MS: u128 = 700;

/// The first value of the line `word <value> ...` in `stdout`.
fn stamp(stdout: &str, word: &str) -> Option<u128> {
    stdout.lines().find_map(|line| {
        line.strip_prefix(word)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|value| value.parse().ok())
    })
}

/// Starts the demo with `args`, its output captured.
fn spawn(args: &[&str]) -> Child {
    Command::new(DEMO)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the leader demo")
}

/// Waits for `child` until `limit` has passed (killed then: the test fails), and collects its
/// output. The outputs are small: nothing blocks on a full pipe.
fn wait(mut child: Child, limit: Duration) -> Output {
    let give_up_at = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll a demo process") {
            break status;
        }
        if Instant::now() >= give_up_at {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a demo process still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut stdout).expect("read stdout");
    }
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_end(&mut stderr)
        .expect("read stderr");
    Output {
        status,
        stdout,
        stderr,
    }
}

/// One candidate's leadership, from its output.
#[derive(Debug)]
struct Led {
    value: String,
    term: u128,
    from: u128,
    to: u128,
}

#[test]
fn candidates_lead_one_at_a_time_and_the_observer_sees_each() {
    const CANDIDATES: usize = 4;
    const HOLD_MS: u128 = 300;
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    let name = "distlock:test:leader-example";

    // The observer first; its lines are read as they come, so the candidates start only once
    // it has printed the leadership as it was (nobody).
    let mut observer = spawn(&[
        "--url",
        url.as_str(),
        "--name",
        name,
        "--observe",
        "--for-ms",
        "15000",
    ]);
    let lines = BufReader::new(observer.stdout.take().expect("stdout"));
    let (sender, seen) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in lines.lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let first = seen
        .recv_timeout(Duration::from_secs(10))
        .expect("the observer's first line");
    assert!(
        first.starts_with("LEADER ") && first.ends_with(" -"),
        "{first}"
    );

    let hold_ms = HOLD_MS.to_string();
    let values: Vec<String> = (0..CANDIDATES).map(|i| format!("candidate-{i}")).collect();
    let candidates: Vec<Child> = values
        .iter()
        .map(|value| {
            spawn(&[
                "--url",
                url.as_str(),
                "--name",
                name,
                "--value",
                value,
                "--hold-ms",
                hold_ms.as_str(),
            ])
        })
        .collect();
    let mut led = Vec::new();
    for (child, value) in candidates.into_iter().zip(&values) {
        let output = wait(child, Duration::from_secs(60));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{value} failed ({}): {stdout}{stderr}",
            output.status
        );
        let line = |word| {
            stamp(&stdout, word).unwrap_or_else(|| panic!("no {word} line in: {stdout}{stderr}"))
        };
        let led_now = Led {
            value: value.clone(),
            term: line("TERM"),
            from: line("ACQUIRED"),
            to: line("RELEASING"),
        };
        assert!(
            led_now.to >= led_now.from + HOLD_MS && line("RELEASED") >= led_now.to,
            "{led_now:?}: not the {HOLD_MS} ms asked for"
        );
        assert!(stamp(&stdout, "LOST").is_none(), "{stdout}");
        led.push(led_now);
    }
    led.sort_by_key(|led| led.from);
    eprintln!("leaderships (unix ms): {led:#?}");
    for pair in led.windows(2) {
        // Equal milliseconds are no overlap: each span lies inside its leadership on the server.
        assert!(pair[0].to <= pair[1].from, "two leaders at once: {pair:#?}");
        assert!(pair[1].term > pair[0].term, "terms must grow: {pair:#?}");
    }

    // Every leader resigned: the observer's last word is nobody, well before its end.
    let mut changes = Vec::new();
    let give_up_at = Instant::now() + Duration::from_secs(5);
    loop {
        let left = give_up_at.saturating_duration_since(Instant::now());
        let line = seen
            .recv_timeout(left)
            .expect("the observer sees nobody lead");
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("LEADER"), "{line}");
        let at: u128 = words.next().and_then(|ms| ms.parse().ok()).expect("ms");
        let value = words.next().expect("a value").to_owned();
        if value == "-" && changes.len() >= led.len() {
            break;
        }
        if value != "-" {
            changes.push((at, value));
        }
    }
    let _ = observer.kill();
    let _ = observer.wait();
    reader.join().expect("the reader thread");
    eprintln!("observed: {changes:?}");
    let order: Vec<&str> = changes.iter().map(|(_, value)| value.as_str()).collect();
    let expected: Vec<&str> = led.iter().map(|led| led.value.as_str()).collect();
    assert_eq!(order, expected, "the observer saw every leader, in order");
    for ((at, value), led) in changes.iter().zip(&led) {
        assert!(
            *at + PROMPT_MS >= led.from && *at <= led.from + PROMPT_MS,
            "{value} seen at {at}, led from {}",
            led.from
        );
    }
}

#[test]
fn bad_input_is_refused_before_connecting() {
    // Port 9 on loopback (discard), where no server listens: these runs must stop before
    // sending anything anywhere.
    let url = "redis://127.0.0.1:9/";
    let cases: &[(&[&str], &str)] = &[
        (&["--url", url, "--name", "e"], "required"),
        (
            &["--url", url, "--name", "e", "--value", "v", "--observe"],
            "cannot be used",
        ),
        (&["--url", url, "--name", "e", "--value", ""], "--value"),
        (&["--url", url, "--name", "e", "--value", "-"], "--value"),
        (&["--url", url, "--name", "e", "--value", "a b"], "--value"),
        (
            &["--url", url, "--name", "e", "--observe", "--hold-ms", "5"],
            "--hold-ms",
        ),
        (
            &["--url", url, "--name", "e", "--observe", "--lease-ms", "5"],
            "--lease-ms",
        ),
        (
            &["--url", url, "--name", "e", "--value", "v", "--for-ms", "5"],
            "--for-ms",
        ),
        (
            &[
                "--url",
                url,
                "--name",
                "e",
                "--value",
                "v",
                "--lease-ms",
                "1",
            ],
            "--lease-ms",
        ),
        (&["--url", url, "--name", "", "--value", "v"], "name"),
        (&["--url", "not a url", "--name", "e", "--observe"], "error"),
    ];
    for (args, says) in cases {
        let output = spawn(args).wait_with_output().expect("run the demo");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

//! The `rwlock` demo, run as several readers and writers (OS processes) at once on one real
//! server: readers hold the lock together, no writer holds it alongside anyone, and every run
//! gets its turn.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lock_testkit::RedisServer;

const DEMO: &str = env!("CARGO_BIN_EXE_rwlock");

/// One run's hold, in Unix milliseconds: from its `ACQUIRED` line to its `RELEASING` line, a
/// span inside the time it held the lock on the server.
#[derive(Clone, Copy, Debug)]
struct Hold {
    writer: bool,
    from: u128,
    to: u128,
}

/// What a sweep over the holds found: the most readers at once, and every instant a writer
/// held the lock alongside someone (its time and how many held it then).
#[derive(Debug, Default, PartialEq)]
struct Sweep {
    most_readers: usize,
    overlaps: Vec<(u128, usize)>,
}

/// The value of the line `word <unix-ms>` in `stdout`.
fn stamp(stdout: &str, word: &str) -> Option<u128> {
    stdout.lines().find_map(|line| {
        line.strip_prefix(word)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|ms| ms.trim().parse().ok())
    })
}

/// Sweeps the holds' starts and ends in time order; at equal instants the ends come first (a
/// hold that ended in the millisecond another began ended before it on the server, since each
/// hold's span lies inside its server-side hold).
fn sweep(holds: &[Hold]) -> Sweep {
    let mut events: Vec<(u128, i32, bool)> = holds
        .iter()
        .flat_map(|hold| [(hold.from, 1, hold.writer), (hold.to, -1, hold.writer)])
        .collect();
    events.sort_unstable();
    let (mut readers, mut writers) = (0i32, 0i32);
    let mut found = Sweep::default();
    for (at, step, writer) in events {
        if writer {
            writers += step;
        } else {
            readers += step;
        }
        found.most_readers = found
            .most_readers
            .max(usize::try_from(readers).unwrap_or(0));
        if writers > 0 && readers + writers > 1 {
            found
                .overlaps
                .push((at, usize::try_from(readers + writers).unwrap_or(0)));
        }
    }
    found
}

/// Starts the demo with `args`, its output captured.
fn spawn(args: &[&str]) -> Child {
    Command::new(DEMO)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the rwlock demo")
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
fn the_sweep_finds_shared_readers_and_overlapping_writers() {
    let read = |from, to| Hold {
        writer: false,
        from,
        to,
    };
    let write = |from, to| Hold {
        writer: true,
        from,
        to,
    };
    assert_eq!(sweep(&[]), Sweep::default());
    let fine = sweep(&[read(0, 10), read(5, 15), write(15, 20), read(20, 30)]);
    assert_eq!(fine.most_readers, 2);
    assert!(fine.overlaps.is_empty());
    assert_eq!(sweep(&[write(0, 10), read(9, 12)]).overlaps, vec![(9, 2)]);
    assert_eq!(sweep(&[write(0, 10), write(5, 12)]).overlaps, vec![(5, 2)]);
    assert_eq!(sweep(&[read(0, 10), write(5, 12)]).overlaps, vec![(5, 2)]);
}

#[test]
fn readers_share_and_writers_hold_alone() {
    const READERS: usize = 4;
    const WRITERS: usize = 3;
    // Readers hold longer than the processes take to start, so they meet.
    const READ_MS: u128 = 600;
    const WRITE_MS: u128 = 150;
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    let name = "distlock:test:rwlock-example";
    let (read_ms, write_ms) = (READ_MS.to_string(), WRITE_MS.to_string());
    let args = |mode, hold_ms| {
        [
            "--url",
            url.as_str(),
            "--lock-name",
            name,
            "--mode",
            mode,
            "--hold-ms",
            hold_ms,
        ]
    };
    let mut children = Vec::new();
    // Interleaved, so some writers start before some readers.
    for i in 0..READERS.max(WRITERS) {
        if i < WRITERS {
            children.push((true, spawn(&args("write", write_ms.as_str()))));
        }
        if i < READERS {
            children.push((false, spawn(&args("read", read_ms.as_str()))));
        }
    }
    let (writers, children): (Vec<bool>, Vec<Child>) = children.into_iter().unzip();
    let outputs = wait_all(children, Duration::from_secs(60));

    let mut holds = Vec::new();
    for (writer, output) in writers.into_iter().zip(&outputs) {
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
        let hold_ms = if writer { WRITE_MS } else { READ_MS };
        assert!(
            releasing >= acquired + hold_ms && released >= releasing,
            "held {acquired}..{releasing}, released {released}: not the {hold_ms} ms asked for"
        );
        holds.push(Hold {
            writer,
            from: acquired,
            to: releasing,
        });
    }
    assert_eq!(holds.len(), READERS + WRITERS, "every run got its turn");
    let found = sweep(&holds);
    eprintln!("holds (unix ms): {holds:?}; {found:?}");
    assert!(
        found.overlaps.is_empty(),
        "a writer held the lock alongside others: {found:?} in {holds:?}"
    );
    assert!(
        found.most_readers >= 2,
        "the readers never held the lock together: {holds:?}"
    );
    // The lock is free.
    let mut raw = redis::Client::open(url.as_str())
        .and_then(|client| client.get_connection())
        .expect("connect");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(name)
        .query(&mut raw)
        .expect("EXISTS");
    assert_eq!(exists, 0);
}

#[test]
fn bad_input_is_refused_before_connecting() {
    // Port 9 on loopback (discard), where no server listens: these runs must stop before
    // sending anything anywhere.
    let url = "redis://127.0.0.1:9/";
    // (URL, name, mode, what the message names)
    for (url, name, mode, says) in [
        (url, "l", "upgrade", "--mode"),
        (url, "", "read", "name"),
        ("not a url", "l", "write", "error"),
    ] {
        let args = ["--url", url, "--lock-name", name, "--mode", mode];
        let output = spawn(&args).wait_with_output().expect("run the demo");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

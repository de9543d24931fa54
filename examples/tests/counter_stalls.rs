//! `counter` rides through server stalls: a real redis-server is frozen (`SIGSTOP`, by the pid
//! the testkit started) for up to the command timeout, several times while the binary runs in
//! 2 worker processes, and the total still comes out exact. The data calls under the lock wait
//! as long as the locks do and are tried again while the lock is held; with redis-rs's default
//! 500 ms response timeout a worker gave up (`error: timed out`) and the total came out short.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_testkit::RedisServer;

/// The command timeout given to the counter (`--command-timeout`).
const TIMEOUT: Duration = Duration::from_secs(1);

/// How long each stall lasts, in turn: up to the command timeout, and exactly it (a call sent
/// just before the stall then times out and is tried again).
const STALLS: [Duration; 3] = [
    TIMEOUT,
    Duration::from_millis(800),
    Duration::from_millis(600),
];

/// The running time between two stalls.
const BETWEEN: Duration = Duration::from_millis(700);

#[test]
fn counts_exactly_through_stalls_of_up_to_the_command_timeout() {
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    let tasks = 200;
    let increments = 20;
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_counter"))
        .args(["--url", &url])
        .args(["--tasks", &tasks.to_string(), "--processes", "2"])
        .args(["--increments", &increments.to_string()])
        .args(["--command-timeout", "1s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run counter");

    // The staller owns the server (pausing needs it mutably) and hands it back when told to
    // stop, with the number of stalls that began while the counter ran.
    let done = Arc::new(AtomicBool::new(false));
    let staller = std::thread::spawn({
        let done = done.clone();
        move || {
            let mut server = server;
            let mut stalls = Vec::new();
            for length in STALLS.iter().cycle() {
                // Sleep in small steps, to stop soon after the counter is done.
                let until = Instant::now() + BETWEEN;
                while Instant::now() < until && !done.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let at = started.elapsed();
                server.pause().expect("SIGSTOP the server");
                std::thread::sleep(*length);
                server.resume().expect("SIGCONT the server");
                stalls.push((at, *length));
            }
            (server, stalls)
        }
    });

    let output = child.wait_with_output().expect("counter output");
    let finished_at = started.elapsed();
    done.store(true, Ordering::SeqCst);
    let (_server, stalls) = staller.join().expect("the staller");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let during_run = stalls.iter().filter(|(at, _)| *at < finished_at).count();
    eprintln!(
        "counter done at {finished_at:?}; stalls (start, length): {stalls:?}\n\
         data calls tried again: {}, lock calls tried again: {}, releases failed: {}\n{}",
        stderr
            .matches("trying again while the lock is held")
            .count(),
        stderr.matches("lock: ").count(),
        stderr.matches("release failed").count(),
        stdout
            .lines()
            .filter(|line| line.contains("total") || line.contains("outcomes"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let expected = tasks * increments;
    assert!(
        output.status.success() && stdout.contains(&format!("actual total:   {expected}\n")),
        "counter failed\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    );
    assert!(
        during_run >= 3,
        "only {during_run} stall(s) began while the counter ran ({finished_at:?}): the test \
         proves nothing; make the run longer"
    );
}

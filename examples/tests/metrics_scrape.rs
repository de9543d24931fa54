//! The `metrics` demo, scraped as Prometheus would: after a few locks, the expected distlock
//! series are there.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

#[test]
fn a_scrape_after_a_few_locks_finds_the_series() {
    let mut demo = Command::new(env!("CARGO_BIN_EXE_metrics"))
        .args(["--tasks", "3", "--serve-for", "60s"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the metrics demo");
    let stdout = demo.stdout.take().expect("stdout");
    let url = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            line.strip_prefix("serving metrics on http://")
                .map(str::to_owned)
        })
        .expect("the demo prints where it serves");
    let address = url.trim_end_matches("/metrics");
    let mut stream = TcpStream::connect(address).expect("connect to the demo");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("ask");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("the answer");
    let _ = demo.kill();
    let _ = demo.wait();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    for series in [
        // lock-core: 3 acquisitions, 2 of which waited, holds past a watchdog renewal.
        "distlock_acquire_seconds_count{outcome=\"granted\"} 3",
        "distlock_wait_seconds_count{outcome=\"granted\"} 2",
        "distlock_hold_seconds_count{outcome=\"released\"} 3",
        "distlock_acquires_in_flight 0",
        "distlock_renewals_total{outcome=\"renewed\"}",
        "distlock_renewal_lag_seconds_count",
    ] {
        assert!(answer.contains(series), "no {series:?} in:\n{answer}");
    }
}

//! `counter --postgres` counts exactly with the locks and the counter in one real PostgreSQL,
//! over two worker processes; without the lock the same run loses increments (so the check can
//! fail).

use std::process::{Command, Output};

use lock_testkit::PostgresServer;

/// `counter --postgres URL` over 2 processes, with `extra` flags.
fn counter(server: &PostgresServer, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_counter"))
        .args(["--postgres", &server.url(), "--processes", "2"])
        .args(extra)
        .output()
        .expect("run counter")
}

fn describe(output: &Output) -> String {
    format!(
        "status {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn counter_on_postgres_is_exact_over_two_processes() {
    let server = PostgresServer::start().expect("start PostgreSQL");
    let output = counter(&server, &["--tasks", "500", "--increments", "2"]);
    let shown = describe(&output);
    assert!(output.status.success(), "{shown}");
    assert!(shown.contains("actual total:   1000\n"), "{shown}");
    assert_eq!(
        shown.matches("250 Released, 0 NotHeld").count(),
        0,
        "{shown}"
    );
    assert_eq!(
        shown.matches("500 Released, 0 NotHeld").count(),
        2,
        "{shown}"
    );
}

#[test]
fn counter_on_postgres_without_the_lock_loses_increments() {
    let server = PostgresServer::start().expect("start PostgreSQL");
    let output = counter(
        &server,
        &["--tasks", "200", "--increments", "5", "--no-lock"],
    );
    let shown = describe(&output);
    assert!(!output.status.success(), "{shown}");
    assert!(shown.contains("MISMATCH"), "{shown}");
}

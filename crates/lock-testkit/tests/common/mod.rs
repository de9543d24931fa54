//! Helpers shared by the integration tests of this crate (`mod common;` in each test file).

/// Process checks by pid, through `/proc` (Linux only).
#[cfg(target_os = "linux")]
pub mod pid {
    use std::time::{Duration, Instant};

    /// Whether the process `pid` is gone (or a zombie, i.e. dead but not reaped by its new
    /// parent).
    pub fn process_is_dead(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].trim_start().chars().next())
                .is_some_and(|state| matches!(state, 'Z' | 'X')),
        }
    }

    /// Polls [`process_is_dead`] for at most `limit`; returns whether the process died.
    pub fn wait_until_dead(pid: u32, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if process_is_dead(pid) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

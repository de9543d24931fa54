//! A watch on a test that may hang where its own timeout cannot see it.
//!
//! A case's `tokio::time::timeout` only fires when the runtime gets to poll it: a case stuck in
//! a synchronous call (a fixture starting its servers inside the case's first poll), a runtime
//! whose worker threads are all blocked, or a runtime whose drop waits for a blocking task that
//! never returns, all hang past it. A test binary then runs until its runner kills it, and the
//! log names nothing. [`HangWatch`] is a plain thread beside the test: when the test is not done
//! by its limit, it writes the test's name (and, when `gdb` is installed, every thread's stack)
//! to the process's standard error and aborts the process, so the binary fails at once, naming
//! the test and where it stood. The servers the testkit started die with the process
//! (`PR_SET_PDEATHSIG`).

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread;
use std::time::Duration;

/// How long `gdb` may take to print the stacks before the abort goes ahead without them.
const STACKS_TIMEOUT: Duration = Duration::from_secs(20);

/// Aborts the process, naming the test, unless dropped within its limit.
///
/// ```
/// use std::time::Duration;
/// use lock_testkit::hang_watch::HangWatch;
///
/// let watch = HangWatch::arm("my test", Duration::from_secs(90));
/// // ... the test's work ...
/// drop(watch); // done in time: the watch thread ends
/// ```
#[must_use = "the watch is disarmed when dropped"]
#[derive(Debug)]
pub struct HangWatch {
    // Dropping the sender wakes the watch thread, which then ends.
    _disarm: Sender<()>,
}

impl HangWatch {
    /// Starts watching: `what` names the test in the report.
    pub fn arm(what: impl Into<String>, limit: Duration) -> Self {
        let what = what.into();
        let (disarm, disarmed) = mpsc::channel::<()>();
        thread::Builder::new()
            .name("hang-watch".into())
            .spawn(move || {
                if let Err(RecvTimeoutError::Timeout) = disarmed.recv_timeout(limit) {
                    report_and_abort(&what, limit);
                }
            })
            .expect("spawn the hang watch thread");
        HangWatch { _disarm: disarm }
    }
}

fn report_and_abort(what: &str, limit: Duration) -> ! {
    // Straight to the standard error's file: `eprintln!` in a thread a test spawned goes to
    // the test's captured output, which the abort would lose.
    let mut stderr = std::io::stderr();
    let _ = writeln!(
        stderr,
        "\n{what}: still running after {limit:?}, past its own timeout (a blocked thread or a \
         runtime that cannot stop); aborting the test binary. Every thread's stack:"
    );
    let _ = stderr.write_all(&thread_stacks());
    let _ = stderr.flush();
    std::process::abort()
}

/// Every thread's stack from `gdb`, or why there are none.
fn thread_stacks() -> Vec<u8> {
    let pid = std::process::id().to_string();
    // Under Yama's `ptrace_scope` 1 a process may only be traced by its ancestors unless it
    // names a tracer; `gdb` is our child.
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    // SAFETY: `prctl(PR_SET_PTRACER, ..)` only changes who may trace this process.
    unsafe {
        libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
    }
    let child = Command::new("gdb")
        .args(["-p", &pid, "-batch", "-nx", "-ex", "thread apply all bt"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        return b"(gdb is not installed: no stacks)\n".to_vec();
    };
    let (sent, output) = mpsc::channel();
    thread::spawn(move || {
        let _ = sent.send(child.wait_with_output());
    });
    match output.recv_timeout(STACKS_TIMEOUT) {
        Ok(Ok(output)) => output.stdout,
        _ => b"(gdb gave no stacks in time)\n".to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child process [`a_watch_not_dropped_in_time_aborts_naming_the_test`] runs.
    const CHILD: &str = "DISTLOCK_HANG_WATCH_CHILD";

    /// In the child process: a test that hangs past its watch. Elsewhere it does nothing.
    #[test]
    fn hanging_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        let _watch = HangWatch::arm("the hanging child", Duration::from_millis(100));
        thread::sleep(Duration::from_secs(60));
    }

    #[test]
    fn a_watch_not_dropped_in_time_aborts_naming_the_test() {
        let output = Command::new(std::env::current_exe().expect("this test binary"))
            .args(["--exact", "hang_watch::tests::hanging_child", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .expect("run the child");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success(),
            "the child was not aborted: {stderr}"
        );
        assert!(
            stderr.contains("the hanging child: still running after 100ms"),
            "the report names the test: {stderr}"
        );
    }

    #[test]
    fn a_watch_dropped_in_time_does_nothing() {
        let watch = HangWatch::arm("quick", Duration::from_millis(200));
        drop(watch);
        // Past the limit: had the watch fired, this process would have aborted.
        thread::sleep(Duration::from_millis(400));
    }
}

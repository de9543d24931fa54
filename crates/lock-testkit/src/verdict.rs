//! The verdict of a fault battery: what every run of a [`Schedule`] under in-model faults must
//! show, checked in one place so that every battery (one node, MultiLock, RedLock, your own
//! backend) holds itself to the same bar.

use std::time::Duration;

use crate::leftovers::assert_nothing_left;
use crate::schedule::{Schedule, ScheduleReport};

/// At least this many faults must have been injected for a run to count.
pub const MIN_FAULTS: usize = 20;

/// At least this share of the attempts must get the lock within the wait.
pub const MIN_ACQUIRED_RATIO: f64 = 0.95;

/// Prints the summary of a battery run (`what` names it) and asserts its verdict: at least
/// [`MIN_FAULTS`] faults, at least `schedule.acquisitions` attempts, no overlap, no lost update,
/// no fence rejection, no resource error, at least [`MIN_ACQUIRED_RATIO`] of the attempts
/// acquired; then, as [`assert_nothing_left`], that within `settle` no server at `urls` holds
/// the schedule's lock or any subscription.
///
/// Call it while the run's clients are still alive: the leftover check must see what they
/// failed to clean up, not what dropping them cleaned up.
///
/// # Panics
///
/// When any part of the verdict fails, with the overlaps found or the leftovers in the message;
/// after an overlap, a lost update or a fence rejection the message also names the timeline
/// picture the checker drew ([`Report::timeline`](crate::Report::timeline)).
///
/// # Example
///
/// ```no_run
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
///
/// use lock_core::{LockOptions, Locker};
/// use lock_redis::RedisBackend;
/// use lock_testkit::{
///     FaultFuture, FencedResource, RedisServer, Schedule, assert_battery_verdict, run_schedule,
/// };
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let lock_server = Arc::new(Mutex::new(RedisServer::start()?));
/// let url = lock_server.lock().unwrap().url();
/// let resource_server = RedisServer::start()?;
/// let resource = FencedResource::connect(&resource_server.url()).await?;
/// let lockers = vec![Locker::new(RedisBackend::connect(url.as_str()).await?)];
/// let options = LockOptions::new()
///     .watchdog_lease(Duration::from_millis(1200))
///     .fenced()
///     .wait(Duration::from_secs(5));
/// let schedule = Schedule::new(8, 2000, options);
/// // The faults: the lock server paused for 100 ms, over and over.
/// let server = lock_server.clone();
/// let pause = move |n: usize| -> FaultFuture {
///     let server = server.clone();
///     Box::pin(async move {
///         server.lock().unwrap().pause().expect("pause");
///         tokio::time::sleep(Duration::from_millis(100)).await;
///         server.lock().unwrap().resume().expect("resume");
///         format!("pause {n}")
///     })
/// };
/// let report = run_schedule(&schedule, lockers.clone(), resource, pause).await;
/// // `lockers` still holds the clients: what they left behind is still there to see.
/// assert_battery_verdict("one node", &schedule, &report, [url], Duration::from_secs(5)).await;
/// # Ok(())
/// # }
/// ```
pub async fn assert_battery_verdict<I, S>(
    what: &str,
    schedule: &Schedule,
    report: &ScheduleReport,
    urls: I,
    settle: Duration,
) where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    eprintln!("{what}, in-model faults: {report}");
    eprintln!("  check: {}", report.check);
    for fault in &report.faults {
        eprintln!("  fault: {fault}");
    }
    assert!(
        report.faults.len() >= MIN_FAULTS,
        "only {} faults",
        report.faults.len()
    );
    assert!(report.attempts >= schedule.acquisitions as u64);
    // The checker drew the holds around a violation: the failure names the picture.
    let timeline = report
        .check
        .timeline
        .as_ref()
        .map_or_else(String::new, |path| {
            format!("\ntimeline: {}", path.display())
        });
    assert_eq!(
        report.check.overlaps, 0,
        "{:#?}{timeline}",
        report.check.overlap_examples
    );
    assert_eq!(report.check.lost_updates, 0, "lost updates{timeline}");
    assert_eq!(
        report.check.fence_rejections, 0,
        "fence rejections{timeline}"
    );
    assert_eq!(report.resource_errors, 0);
    assert!(
        report.acquired_ratio() >= MIN_ACQUIRED_RATIO,
        "only {:.1} % acquired within the wait",
        report.acquired_ratio() * 100.0
    );
    assert_nothing_left(urls, &[&schedule.lock_name], settle).await;
}

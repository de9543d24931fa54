//! Faults injected one after another at random gaps while a workload runs: the loop every
//! battery shares (the lock schedule of [`crate::run_schedule`] and the lock family's own
//! workloads).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rand::Rng;

/// A boxed fault: runs one fault to completion (inject, hold it for a while, heal) and returns
/// a label for the summary.
pub type FaultFuture = Pin<Box<dyn Future<Output = String> + Send>>;

/// A running fault loop: `fault(n)` for the n-th fault, each after a random gap, until
/// [`stop`](Self::stop). A fault in progress when it is stopped is run to its end, so that
/// whatever it broke is healed before the workload's checks. Each label ends with when the
/// fault began (from the loop's start) and how long it took, ` (at 1.20s for 310ms)`, so a
/// failing check can be laid against the faults.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use lock_testkit::FaultLoop;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let faults = FaultLoop::start(
///     |n| Box::pin(async move { format!("fault {n}") }),
///     (Duration::from_millis(1), Duration::from_millis(5)),
/// );
/// tokio::time::sleep(Duration::from_millis(100)).await; // the workload
/// let labels = faults.stop().await;
/// assert!(labels[0].starts_with("fault 0 (at "));
/// # }
/// ```
#[must_use = "a fault loop runs until it is stopped; stop it to heal the last fault"]
pub struct FaultLoop {
    done: Arc<AtomicBool>,
    /// Faults started so far.
    started: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl FaultLoop {
    /// Starts injecting `fault(0)`, `fault(1)`, ... one at a time, each after a gap drawn
    /// from `gap` (low, high).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start<F>(mut fault: F, gap: (Duration, Duration)) -> Self
    where
        F: FnMut(usize) -> FaultFuture + Send + 'static,
    {
        let done = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicUsize::new(0));
        let task = {
            let (done, started) = (done.clone(), started.clone());
            let (low, high) = gap;
            let began = tokio::time::Instant::now();
            tokio::spawn(async move {
                let mut labels = Vec::new();
                loop {
                    let gap = rand::rng().random_range(low..=high);
                    tokio::time::sleep(gap).await;
                    if done.load(Ordering::Acquire) {
                        return labels;
                    }
                    started.fetch_add(1, Ordering::Relaxed);
                    let at = began.elapsed();
                    let label = fault(labels.len()).await;
                    let took = began.elapsed().saturating_sub(at);
                    labels.push(format!("{label} (at {at:.2?} for {took:.0?})"));
                }
            })
        };
        FaultLoop {
            done,
            started,
            task,
        }
    }

    /// How many faults have started so far (a workload can run until it has seen enough).
    #[must_use]
    pub fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }

    /// The count behind [`started`](Self::started), for tasks that outlive a borrow of the loop.
    #[must_use]
    pub fn started_count(&self) -> Arc<AtomicUsize> {
        self.started.clone()
    }

    /// Stops the loop once the fault in progress (if any) has healed, and returns the label
    /// of every fault injected, in order.
    ///
    /// # Panics
    ///
    /// When a fault panicked.
    pub async fn stop(self) -> Vec<String> {
        self.done.store(true, Ordering::Release);
        self.task.await.expect("the fault task panicked")
    }
}

//! The loop applications write most: take a lock per job and let the guard drop at the end of
//! the block, then lock again at once — with another client asking for the same lock now and
//! then while the loop runs.
//!
//! ```text
//! loop {
//!     let _guard = locker.lock("jobs").await?;
//!     do_job().await;
//! } // the guard drops here; its release runs in the background
//! ```
//!
//! [`relock_loop`] runs it and reports what the loop's owner got (a fresh hold each time, or
//! re-entries of the hold it had just dropped) and how long the other client waited each time
//! it asked.

use std::time::Duration;

use lock_core::{LockBackend, LockOptions, Locker};
use tokio::time::Instant;

/// How the relock loop is run.
#[derive(Clone, Debug)]
pub struct RelockPlan {
    /// The lock name.
    pub name: String,
    /// How many times the loop takes the lock.
    pub iterations: usize,
    /// The job under the lock (a sleep).
    pub work: Duration,
    /// How long the other client sleeps between two of its requests (it holds the lock for one
    /// `work` each time it gets it).
    pub other_every: Duration,
    /// How long the other client waits at most each time.
    pub other_wait: Duration,
}

impl RelockPlan {
    /// `iterations` jobs of 5 ms on `name`; the other client asks every 50 ms and waits up to
    /// 5 s.
    #[must_use]
    pub fn new(name: &str, iterations: usize) -> Self {
        RelockPlan {
            name: name.to_owned(),
            iterations,
            work: Duration::from_millis(5),
            other_every: Duration::from_millis(50),
            other_wait: Duration::from_secs(5),
        }
    }
}

/// What [`relock_loop`] saw.
#[derive(Clone, Debug, Default)]
pub struct RelockReport {
    /// Locks the loop took.
    pub iterations: usize,
    /// Of those, how many came back as re-entries (`hold_count() > 1`): the hold it had just
    /// dropped was still there.
    pub reentries: usize,
    /// Each wait of the other client that ended with the lock, in order.
    pub other_waits: Vec<Duration>,
    /// Requests of the other client that ended without the lock (its wait ran out).
    pub other_gave_up: usize,
    /// How long the loop took.
    pub elapsed: Duration,
}

impl RelockReport {
    /// The other client's longest wait that ended with the lock (zero if none did).
    #[must_use]
    pub fn longest_wait(&self) -> Duration {
        self.other_waits.iter().copied().max().unwrap_or_default()
    }

    /// The other client's median wait (zero if it never got the lock).
    #[must_use]
    pub fn median_wait(&self) -> Duration {
        let mut waits = self.other_waits.clone();
        waits.sort();
        waits.get(waits.len() / 2).copied().unwrap_or_default()
    }
}

impl std::fmt::Display for RelockReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} locks, {} re-entries in {:?}; the other client got it {} times (median wait {:?}, \
             longest {:?}) and gave up {} times",
            self.iterations,
            self.reentries,
            self.elapsed,
            self.other_waits.len(),
            self.median_wait(),
            self.longest_wait(),
            self.other_gave_up,
        )
    }
}

/// Runs the relock loop of `plan` on `looping` (each lock owned by the current task, the guard
/// dropped at the end of each job), while `other` (another client of the same store) asks for the
/// same lock every `plan.other_every` until the loop ends.
///
/// # Panics
///
/// When a lock call fails (an error, not a wait that ran out).
pub async fn relock_loop<B, O>(
    looping: &Locker<B>,
    other: &Locker<O>,
    plan: &RelockPlan,
) -> RelockReport
where
    B: LockBackend,
    O: LockBackend,
{
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let asker = {
        let other = other.clone();
        let plan = plan.clone();
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let mut waits = Vec::new();
            let mut gave_up = 0;
            let options = LockOptions::new().wait(plan.other_wait);
            loop {
                tokio::select! {
                    () = tokio::time::sleep(plan.other_every) => {}
                    _ = stopped.changed() => break,
                }
                if *stopped.borrow() {
                    break;
                }
                let asked = Instant::now();
                match other.lock_with(&plan.name, &options).await {
                    Ok(guard) => {
                        waits.push(asked.elapsed());
                        tokio::time::sleep(plan.work).await;
                        let released = guard.release().await.expect("the other client's release");
                        assert!(released.was_held(), "the other client's hold lasted");
                    }
                    Err(lock_core::Error::NotAcquired { .. }) => gave_up += 1,
                    Err(error) => panic!("the other client's lock failed: {error}"),
                }
            }
            (waits, gave_up)
        })
    };
    let started = Instant::now();
    let mut reentries = 0;
    for _ in 0..plan.iterations {
        let guard = looping.lock(&plan.name).await.expect("the loop's lock");
        if guard.hold_count() > 1 {
            reentries += 1;
        }
        tokio::time::sleep(plan.work).await;
    } // each guard drops here
    let elapsed = started.elapsed();
    let _ = stop.send(true);
    let (other_waits, other_gave_up) = asker.await.expect("the other client's task");
    RelockReport {
        iterations: plan.iterations,
        reentries,
        other_waits,
        other_gave_up,
        elapsed,
    }
}

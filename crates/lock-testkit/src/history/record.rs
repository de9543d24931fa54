//! The record: what workers write down as they run. Each critical section becomes a [`Hold`]
//! (who, when, how long it waited, what the resource answered to its write), appended to a
//! shared [`History`] directly or through a [`HoldRecorder`] started right after the acquire.
//!
//! Apart from the checker and the drawings because it is what the workload touches while it
//! runs: it knows nothing of what the holds will be checked for, and stands below both.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::resource::WriteOutcome;

/// What the protected resource answered to a hold's write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteStatus {
    /// The write was applied (an unfenced write always is).
    Accepted,
    /// The write was refused (a stale fencing token).
    Rejected,
}

impl From<WriteOutcome> for WriteStatus {
    fn from(outcome: WriteOutcome) -> Self {
        match outcome {
            WriteOutcome::Accepted => Self::Accepted,
            WriteOutcome::RejectedStale { .. } => Self::Rejected,
        }
    }
}

/// One critical section: a lock held by one owner from `acquired_at` to `released_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The worker (task) index that held the lock.
    pub worker: usize,
    /// The owner as the lock server knows it (`LockGuard::owner_field()`). Holds of the same
    /// owner never count as overlapping each other: a reentrant hold nests inside its owner's
    /// outer hold by design.
    pub owner: String,
    /// The fencing token of the hold, if fencing was used.
    pub token: Option<u64>,
    /// Taken right after the acquire returned.
    pub acquired_at: Instant,
    /// Taken right before the release was sent. A value before `acquired_at` is treated as
    /// `acquired_at` (an empty hold).
    pub released_at: Instant,
    /// How long the acquire waited (from the call to its return), if recorded.
    pub waited: Option<Duration>,
    /// The resource's answer to the hold's write, if it wrote. Each accepted write is counted as
    /// one increment of the resource.
    pub write: Option<WriteStatus>,
    /// When the write was sent; `None` means "not recorded", and `released_at` is used instead.
    pub written_at: Option<Instant>,
    /// Whether the guard reported its lease lost (`LockGuard::is_lost()` or `lost()`) during
    /// the hold.
    pub lost_signal: bool,
}

impl Hold {
    /// A hold without wait time, write or lost signal.
    pub fn new(
        worker: usize,
        owner: impl Into<String>,
        token: Option<u64>,
        acquired_at: Instant,
        released_at: Instant,
    ) -> Self {
        Self {
            worker,
            owner: owner.into(),
            token,
            acquired_at,
            released_at,
            waited: None,
            write: None,
            written_at: None,
            lost_signal: false,
        }
    }

    /// Sets the write's answer and the time it was sent (`None`: use `released_at`).
    #[must_use]
    pub fn with_write(mut self, write: WriteStatus, written_at: Option<Instant>) -> Self {
        self.write = Some(write);
        self.written_at = written_at;
        self
    }

    /// Sets how long the acquire waited.
    #[must_use]
    pub fn with_waited(mut self, waited: Duration) -> Self {
        self.waited = Some(waited);
        self
    }

    /// Sets whether the guard reported its lease lost.
    #[must_use]
    pub fn with_lost_signal(mut self, lost: bool) -> Self {
        self.lost_signal = lost;
        self
    }

    /// `released_at`, but never before `acquired_at`.
    pub(super) fn end(&self) -> Instant {
        self.released_at.max(self.acquired_at)
    }

    /// When the write was sent (`released_at` if not recorded).
    pub(super) fn write_time(&self) -> Instant {
        self.written_at.unwrap_or(self.released_at)
    }
}

/// A thread-safe, cheaply clonable log of [`Hold`]s. Clones share the same log.
#[derive(Debug, Clone, Default)]
pub struct History {
    holds: Arc<Mutex<Vec<Hold>>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a finished hold.
    pub fn record(&self, hold: Hold) {
        self.lock().push(hold);
    }

    /// Starts recording a hold now (call it right after the acquire returned), with its
    /// fencing token if it has one (`u64` or `Option<u64>`). Finish it with
    /// [`HoldRecorder::end`] right before sending the release; a recorder dropped without
    /// `end` records nothing.
    pub fn begin(
        &self,
        worker: usize,
        owner: impl Into<String>,
        token: impl Into<Option<u64>>,
    ) -> HoldRecorder {
        self.begin_at(worker, owner, token, Instant::now())
    }

    /// Like [`begin`](Self::begin), with an explicit acquisition time.
    pub fn begin_at(
        &self,
        worker: usize,
        owner: impl Into<String>,
        token: impl Into<Option<u64>>,
        acquired_at: Instant,
    ) -> HoldRecorder {
        HoldRecorder {
            history: self.clone(),
            hold: Hold::new(worker, owner, token.into(), acquired_at, acquired_at),
        }
    }

    /// A copy of the holds recorded so far, in recording order.
    pub fn holds(&self) -> Vec<Hold> {
        self.lock().clone()
    }

    /// The number of holds recorded so far.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no hold has been recorded.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Forgets every recorded hold.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The recorded holds, behind the log's lock (a poisoned lock is taken as it is).
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Hold>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A hold being recorded; see [`History::begin`].
#[derive(Debug)]
#[must_use = "a hold is recorded only when `end` is called"]
pub struct HoldRecorder {
    history: History,
    hold: Hold,
}

impl HoldRecorder {
    /// Sets how long the acquire waited (from the call to its return).
    pub fn set_waited(&mut self, waited: Duration) {
        self.hold.waited = Some(waited);
    }

    /// Sets when the hold's write was sent (for example
    /// [`Increment::write_sent_at`](crate::resource::Increment::write_sent_at)). Without it,
    /// the release time is used as the write time.
    pub fn write_sent_at(&mut self, at: Instant) {
        self.hold.written_at = Some(at);
    }

    /// Marks the write as sent now.
    pub fn write_sent_now(&mut self) {
        self.write_sent_at(Instant::now());
    }

    /// Sets whether the guard reported its lease lost.
    pub fn set_lost_signal(&mut self, lost: bool) {
        self.hold.lost_signal = lost;
    }

    /// The hold recorded so far (its `released_at` is still `acquired_at`).
    pub fn hold(&self) -> &Hold {
        &self.hold
    }

    /// Ends the hold now (call it right before sending the release) with the resource's answer
    /// to its write (`None` if it did not write), and records it.
    pub fn end(self, write: Option<WriteStatus>) {
        self.end_at(write, Instant::now());
    }

    /// Like [`end`](Self::end), with an explicit release time.
    pub fn end_at(mut self, write: Option<WriteStatus>, released_at: Instant) {
        self.hold.write = write;
        self.hold.released_at = released_at;
        self.history.record(self.hold);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn recorder_and_clones_share_the_log() {
        let history = History::new();
        let t0 = Instant::now();
        let mut recorder = history.clone().begin_at(3, "x:1", Some(9), t0);
        recorder.set_waited(ms(2));
        recorder.write_sent_at(t0 + ms(1));
        recorder.set_lost_signal(true);
        recorder.end_at(
            Some(WriteOutcome::RejectedStale { last_token: 10 }.into()),
            t0 + ms(3),
        );
        drop(history.begin(4, "y:1", None)); // never ended: not recorded
        assert_eq!(history.len(), 1);
        let holds = history.holds();
        assert_eq!(
            holds[0],
            Hold::new(3, "x:1", Some(9), t0, t0 + ms(3))
                .with_waited(ms(2))
                .with_write(WriteStatus::Rejected, Some(t0 + ms(1)))
                .with_lost_signal(true)
        );
        let report = history.check(0, 0);
        assert_eq!((report.fence_rejections, report.lost_signals), (1, 1));
        history.clear();
        assert!(history.is_empty());
    }
}

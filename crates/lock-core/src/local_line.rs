//! Fairness among one locker's own tasks: a release that frees a lock this locker's waiters
//! wait for holds the locker's new calls on that name back until one of those waiters has
//! tried, so the woken waiter is not overtaken by a task that asks for the first time.
//!
//! Why: a waiter learns of a release through its notification (the store publishes, the
//! notification connection reads it, the waiter wakes) and only then sends its attempt, while
//! a task that asks for the first time sends its attempt at once. With many tasks looping on
//! one name (the releasing task itself usually asks again at once), a waiter could lose every
//! race for its whole wait while the lock kept changing hands: under faults, 16 owners per
//! client saw 10 s waits end without the lock in a third of the runs
//! (`lock-multi/tests/usage_battery.rs`, `redis_reentrant_many_owners`).
//!
//! What is held back, and for how long: only a call that may wait (not a single attempt), on a
//! name one of this locker's waiters waits for, after a release by this locker freed it, until
//! a waiter's attempt on that name came back or [`HANDOFF_BOUND`] passed (a notification lost
//! with its connection, a waiter polling), and never past the call's own deadline. The call
//! looks once its turn in its owner's line came (`LockerShared::first_attempt`), so a dropped
//! guard's release, put in line before it, has had its say. Tasks of other clients are not
//! held back: across
//! clients the lock stays as fair as the store makes it (see `docs/lock-family.md`).

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The longest a new call waits for a local waiter to try after a release: a few round trips
/// and a notification on a loaded machine; past it the call goes ahead (the waiter's
/// notification was lost, or it polls).
pub(crate) const HANDOFF_BOUND: Duration = Duration::from_millis(20);

/// The lines of one locker, by name.
#[derive(Default)]
pub(crate) struct LocalLines {
    lines: Mutex<HashMap<Box<str>, Line>>,
    /// Names with a waiter: lets the uncontended path skip the lock.
    waited: AtomicUsize,
}

#[derive(Default)]
struct Line {
    waiting: usize,
    handoff: Option<Arc<Handoff>>,
}

/// A release freed the name while local waiters waited: new calls wait for this.
struct Handoff {
    until: Instant,
    /// Set (before `done` is notified) once the hand-off is over.
    over: AtomicBool,
    done: Notify,
}

impl Handoff {
    fn end(&self) {
        self.over.store(true, Ordering::Release);
        self.done.notify_waiters();
    }
}

impl LocalLines {
    fn lines(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Line>> {
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A waiter on `name` starts waiting (registered for its releases).
    pub(crate) fn enter(&self, name: &str) {
        let mut lines = self.lines();
        let line = lines.entry(name.into()).or_default();
        line.waiting += 1;
        if line.waiting == 1 {
            self.waited.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A waiter on `name` stops waiting (won, gave up, or was dropped).
    pub(crate) fn leave(&self, name: &str) {
        let mut lines = self.lines();
        let Some(line) = lines.get_mut(name) else {
            return;
        };
        line.waiting -= 1;
        if line.waiting > 0 {
            return;
        }
        self.waited.fetch_sub(1, Ordering::AcqRel);
        // The last waiter left: nobody is to be handed the lock.
        if let Some(handoff) = lines.remove(name).and_then(|line| line.handoff) {
            handoff.end();
        }
    }

    /// A release by this locker freed `name`: if local waiters wait for it, new calls wait for
    /// one of them to try first.
    pub(crate) fn released(&self, name: &str) {
        if self.waited.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut lines = self.lines();
        let now = Instant::now();
        if let Some(line) = lines.get_mut(name)
            && line.waiting > 0
        {
            // One past its bound (no waiter tried: a lost notification, a polling waiter)
            // gives way to this release's.
            if let Some(stale) = line.handoff.take_if(|handoff| handoff.until <= now) {
                stale.end();
            }
            if line.handoff.is_none() {
                line.handoff = Some(Arc::new(Handoff {
                    until: now + HANDOFF_BOUND,
                    over: AtomicBool::new(false),
                    done: Notify::new(),
                }));
            }
        }
    }

    /// A local waiter's attempt on `name` came back: the hand-off (if any) is over.
    pub(crate) fn tried(&self, name: &str) {
        let handoff = {
            let mut lines = self.lines();
            lines.get_mut(name).and_then(|line| line.handoff.take())
        };
        if let Some(handoff) = handoff {
            handoff.end();
        }
    }

    /// Waits, before a new call's first attempt on `name`, for a pending hand-off to a local
    /// waiter to be over: at most until its bound, and never past the call's `deadline`.
    pub(crate) async fn behind_handoff(&self, name: &str, deadline: Option<Instant>) {
        if self.waited.load(Ordering::Acquire) == 0 {
            return;
        }
        let handoff = {
            let lines = self.lines();
            lines.get(name).and_then(|line| line.handoff.clone())
        };
        let Some(handoff) = handoff else {
            return;
        };
        // Armed before looking whether it is over, so an end in between still wakes it.
        let mut done = pin!(handoff.done.notified());
        done.as_mut().enable();
        if handoff.over.load(Ordering::Acquire) {
            return;
        }
        let until = deadline.map_or(handoff.until, |deadline| deadline.min(handoff.until));
        tokio::select! {
            () = done => {}
            () = tokio::time::sleep_until(until) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `behind_handoff` is still waiting after the tasks ran.
    async fn still_waiting(task: &tokio::task::JoinHandle<()>) -> bool {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        !task.is_finished()
    }

    /// Lines where a waiter waits for `x` and a release just freed it: a hand-off is pending.
    fn handing_off() -> Arc<LocalLines> {
        let lines = Arc::new(LocalLines::default());
        lines.enter("x");
        lines.released("x");
        lines
    }

    /// A new call on `x`, waiting behind a hand-off if one is pending.
    fn new_call(lines: &Arc<LocalLines>) -> tokio::task::JoinHandle<()> {
        let lines = lines.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            lines.behind_handoff("x", None).await;
            // Woken by the end of the hand-off, not by its bound (time is paused: the bound
            // would pass as soon as every task waits).
            assert_eq!(started.elapsed(), Duration::ZERO, "woken by the bound");
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_call_waits_until_a_waiter_tried_after_the_release() {
        let lines = handing_off();
        let call = new_call(&lines);
        assert!(still_waiting(&call).await);
        lines.tried("x");
        call.await.unwrap();
        // Over: the next call goes at once.
        let started = Instant::now();
        lines.behind_handoff("x", None).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hand_off_nobody_takes_ends_at_its_bound() {
        let lines = handing_off();
        let started = Instant::now();
        lines.behind_handoff("x", None).await;
        assert_eq!(started.elapsed(), HANDOFF_BOUND);
        // A call whose wait ends sooner is not held past its deadline.
        lines.released("x");
        let started = Instant::now();
        let deadline = started + Duration::from_millis(5);
        lines.behind_handoff("x", Some(deadline)).await;
        assert_eq!(started.elapsed(), Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hand_off_past_its_bound_gives_way_to_the_next_release() {
        let lines = handing_off();
        tokio::time::sleep(HANDOFF_BOUND).await;
        lines.released("x");
        let started = Instant::now();
        lines.behind_handoff("x", None).await;
        assert_eq!(
            started.elapsed(),
            HANDOFF_BOUND,
            "held back by the new hand-off"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_waiter_leaving_ends_the_hand_off() {
        let lines = handing_off();
        let call = new_call(&lines);
        assert!(still_waiting(&call).await);
        lines.leave("x");
        call.await.unwrap();
        assert_eq!(lines.waited.load(Ordering::Acquire), 0);
        assert!(lines.lines().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_nobody_here_waits_for_holds_nothing_back() {
        let lines = LocalLines::default();
        lines.released("x");
        lines.enter("y");
        lines.released("x");
        let started = Instant::now();
        lines.behind_handoff("x", None).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}

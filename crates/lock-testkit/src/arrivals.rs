//! Arrival order of a fair lock's waiters, as seen from its clients: who came when, and the
//! grants made while someone who came earlier still waited (out of order).
//!
//! A waiter *comes* when its first attempt of a wait runs on the server (for a fair lock: when
//! it enters the queue). First attempts pass one at a time through a gate that numbers them, so
//! the numbering is the server's order, not the order in which tasks happened to be polled. A
//! grant while a lower number still waits is out of order. [`BookedBackend`] books every attempt
//! of a lock backend this way; other clients (a raw script client) call
//! [`Arrivals::attempt`] themselves.
//!
//! Under faults a first attempt may fail after it ran on the server (its reply lost): that
//! waiter may be queued from an earlier moment than any number it could get, so it is left
//! out of the judging (counted as `unjudged`) until its wait ends. A later attempt that fails
//! may have been a grant whose answer was lost, which the locker gives back (an unseen hold
//! must not linger), so the waiter queues again at the back: passing over such a waiter is
//! counted as `displaced`, not out of order. A waiter that gives up and leaves the queue stops
//! waiting in the book when it starts leaving.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, LockBackend, LockState, ReleaseOutcome, ReleaseWatch,
    RenewOutcome, Renewal,
};

/// What the book has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArrivalTally {
    /// First attempts numbered (each a wait's arrival).
    pub arrivals: u64,
    /// Grants judged against the arrival order.
    pub grants: u64,
    /// Grants made while someone who came earlier still waited (and had seen no failure).
    pub out_of_order: u64,
    /// Waiters passed over after one of their attempts failed while they waited: the attempt
    /// may have been a grant whose answer was lost, given back by the locker (an unseen hold
    /// must not linger), so that they queued again at the back.
    pub displaced: u64,
    /// Grants not judged: to a waiter whose first attempt failed, so whose place is unknown.
    pub unjudged: u64,
    /// Waits that ended without a grant (the waiter left the queue).
    pub left: u64,
}

impl fmt::Display for ArrivalTally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} arrivals, {} grants judged ({} out of order), {} waiters displaced after a \
             failed attempt, {} grants unjudged, {} waits given up",
            self.arrivals, self.grants, self.out_of_order, self.displaced, self.unjudged, self.left
        )
    }
}

/// The book: waiting owners by arrival number.
#[derive(Default)]
struct Book {
    next: u64,
    /// Waiting owners by the number of their first attempt.
    waiting: BTreeMap<u64, String>,
    /// The number of each waiting owner's first attempt, by owner.
    numbers: HashMap<String, u64>,
    /// Waiting owners whose first attempt failed: their place in the queue is unknown.
    uncertain: HashSet<String>,
    troubled: HashSet<String>,
    /// Troubled waiters passed over by a grant (counted once each).
    displaced: HashSet<String>,
    tally: ArrivalTally,
}

impl Book {
    /// A first attempt ran on the server: `owner` came now, granted or not.
    fn came(&mut self, owner: &str, granted: bool) {
        let number = self.next;
        self.next += 1;
        self.tally.arrivals += 1;
        if granted {
            self.granted(number);
        } else {
            self.waiting.insert(number, owner.to_owned());
            self.numbers.insert(owner.to_owned(), number);
        }
    }

    /// A later attempt of `owner`, which came earlier, was granted.
    fn granted_waiter(&mut self, owner: &str) {
        self.troubled.remove(owner);
        self.displaced.remove(owner);
        if self.uncertain.remove(owner) {
            self.tally.unjudged += 1;
        } else if let Some(number) = self.numbers.remove(owner) {
            self.waiting.remove(&number);
            self.granted(number);
        }
    }

    /// A grant to the owner that came as `number`: out of order when anyone who came before
    /// it still waits; a troubled waiter passed over is counted as displaced instead (once).
    fn granted(&mut self, number: u64) {
        self.tally.grants += 1;
        for (_, owner) in self.waiting.range(..number) {
            if !self.troubled.contains(owner) {
                self.tally.out_of_order += 1;
                return;
            }
            if self.displaced.insert(owner.clone()) {
                self.tally.displaced += 1;
            }
        }
    }

    /// `owner` is waiting (numbered, or uncertain).
    fn waits(&self, owner: &str) -> bool {
        self.numbers.contains_key(owner) || self.uncertain.contains(owner)
    }

    /// `owner`'s first attempt failed: it may or may not be queued, from when is unknown.
    fn failed_first(&mut self, owner: &str) {
        self.uncertain.insert(owner.to_owned());
    }

    /// An attempt of `owner`, waiting, failed: it may have been a grant whose answer was lost,
    /// which the locker gives back (an unseen hold must not linger), so that the waiter queues
    /// again at the back.
    fn failed_waiting(&mut self, owner: &str) {
        self.troubled.insert(owner.to_owned());
    }

    /// `owner`'s wait ended without a grant.
    fn left(&mut self, owner: &str) {
        self.troubled.remove(owner);
        self.displaced.remove(owner);
        let numbered = self.numbers.remove(owner);
        if let Some(number) = numbered {
            self.waiting.remove(&number);
        }
        if self.uncertain.remove(owner) || numbered.is_some() {
            self.tally.left += 1;
        }
    }
}

/// The arrival book of one lock and the gate its first attempts pass one at a time.
///
/// # Example
///
/// ```
/// use lock_testkit::arrivals::Arrivals;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let arrivals = Arrivals::default();
/// // "a" finds the lock free, "b" then "c" queue behind it, "c" is granted first.
/// arrivals.attempt("a", async { Ok::<_, ()>(true) }).await.unwrap();
/// arrivals.attempt("b", async { Ok::<_, ()>(false) }).await.unwrap();
/// arrivals.attempt("c", async { Ok::<_, ()>(false) }).await.unwrap();
/// arrivals.attempt("c", async { Ok::<_, ()>(true) }).await.unwrap();
/// assert_eq!(arrivals.tally().out_of_order, 1);
/// # }
/// ```
#[derive(Default)]
pub struct Arrivals {
    gate: tokio::sync::Mutex<()>,
    book: Mutex<Book>,
}

impl Arrivals {
    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one attempt of `owner` (`Ok(true)` when it was granted): a first attempt of a wait
    /// through the gate, numbered in the order it ran on the server; a later one as it is.
    /// Books the grant, or the failure of a first attempt.
    ///
    /// # Errors
    ///
    /// The attempt's.
    ///
    /// # Cancel safety
    ///
    /// Cancelling a first attempt books nothing; the next attempt of `owner` is a first one.
    pub async fn attempt<F: Future<Output = Result<bool, E>>, E>(
        &self,
        owner: &str,
        attempt: F,
    ) -> Result<bool, E> {
        if self.book().waits(owner) {
            let granted = match attempt.await {
                Ok(granted) => granted,
                Err(error) => {
                    self.book().failed_waiting(owner);
                    return Err(error);
                }
            };
            if granted {
                self.book().granted_waiter(owner);
            }
            return Ok(granted);
        }
        let _one_at_a_time = self.gate.lock().await;
        match attempt.await {
            Ok(granted) => {
                self.book().came(owner, granted);
                Ok(granted)
            }
            Err(error) => {
                self.book().failed_first(owner);
                Err(error)
            }
        }
    }

    /// `owner`'s wait ended without a grant: it no longer waits.
    pub fn left(&self, owner: &str) {
        self.book().left(owner);
    }

    /// What the book has seen so far.
    #[must_use]
    pub fn tally(&self) -> ArrivalTally {
        self.book().tally
    }
}

/// A lock backend that books every waiting attempt at a first hold in its [`Arrivals`] (and
/// every leave from the queue), and single attempts that win, and otherwise does what its inner
/// backend does. Re-entries are not booked: a holder re-entering does not queue.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
///
/// use lock_core::{FairBackend, Locker, MemoryBackend};
/// use lock_testkit::arrivals::{Arrivals, BookedBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let arrivals = Arc::new(Arrivals::default());
/// let locker = Locker::new(BookedBackend::new(MemoryBackend::new().fair_side(), arrivals.clone()));
/// locker.lock("orders").await?.release().await?;
/// assert_eq!(arrivals.tally().grants, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct BookedBackend<B> {
    inner: B,
    arrivals: Arc<Arrivals>,
}

impl<B> BookedBackend<B> {
    /// `inner`, booking in `arrivals`.
    pub fn new(inner: B, arrivals: Arc<Arrivals>) -> Self {
        BookedBackend { inner, arrivals }
    }
}

impl<B: LockBackend> LockBackend for BookedBackend<B> {
    fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    fn check_name(&self, name: &str) -> lock_core::Result<()> {
        self.inner.check_name(name)
    }

    fn clock_drift(&self, lease: Duration) -> Duration {
        self.inner.clock_drift(lease)
    }

    fn reentrant(&self) -> bool {
        self.inner.reentrant()
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    async fn try_acquire(&self, request: AcquireRequest<'_>) -> lock_core::Result<AcquireOutcome> {
        // A re-entry does not queue (by design), so it arrives nowhere; a single attempt
        // (`no_wait`) that fails does not wait, so it must not be left waiting in the book; one
        // that wins is judged like any grant.
        if request.known_holds > 0 {
            return self.inner.try_acquire(request).await;
        }
        if !request.waits {
            let got = self.inner.try_acquire(request).await?;
            if matches!(got, AcquireOutcome::Acquired(_)) {
                self.arrivals
                    .attempt(request.owner_field, async {
                        Ok::<_, lock_core::Error>(true)
                    })
                    .await?;
            }
            return Ok(got);
        }
        let mut outcome = None;
        self.arrivals
            .attempt(request.owner_field, async {
                let got = self.inner.try_acquire(request).await?;
                let granted = matches!(got, AcquireOutcome::Acquired(_));
                outcome = Some(got);
                Ok::<_, lock_core::Error>(granted)
            })
            .await?;
        outcome.ok_or_else(|| lock_core::Error::Protocol("no attempt made".into()))
    }

    async fn release(
        &self,
        name: &str,
        owner_field: &str,
        lease: Duration,
    ) -> lock_core::Result<ReleaseOutcome> {
        self.inner.release(name, owner_field, lease).await
    }

    async fn renew(&self, renewals: &[Renewal<'_>]) -> lock_core::Result<Vec<RenewOutcome>> {
        self.inner.renew(renewals).await
    }

    async fn abandon(&self, name: &str, owner_field: &str, keep: u32) -> lock_core::Result<()> {
        self.inner.abandon(name, owner_field, keep).await
    }

    async fn force_release(&self, name: &str) -> lock_core::Result<bool> {
        self.inner.force_release(name).await
    }

    async fn inspect(&self, name: &str) -> lock_core::Result<LockState> {
        self.inner.inspect(name).await
    }

    async fn watch_releases(&self, name: &str) -> lock_core::Result<ReleaseWatch> {
        self.inner.watch_releases(name).await
    }

    async fn watch_releases_of(
        &self,
        name: &str,
        owner_field: &str,
    ) -> lock_core::Result<ReleaseWatch> {
        self.inner.watch_releases_of(name, owner_field).await
    }

    fn queues(&self) -> bool {
        self.inner.queues()
    }

    async fn leave_queue(&self, name: &str, owner_field: &str) -> lock_core::Result<()> {
        // Leaving starts now: from here the queue may drop the owner at any moment.
        self.arrivals.left(owner_field);
        self.inner.leave_queue(name, owner_field).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_while_someone_who_came_earlier_waits_is_out_of_order() {
        let mut book = Book::default();
        book.came("a", true); // free: granted at once, nobody waits
        book.came("b", false);
        book.came("c", false);
        assert!(book.waits("b") && book.waits("c"));
        book.granted_waiter("b"); // in order
        assert_eq!(book.tally.out_of_order, 0);
        book.came("a", true); // the releasing task takes it again ahead of c
        assert_eq!(book.tally.out_of_order, 1);
        book.came("b", false);
        book.granted_waiter("b"); // ahead of c, who came before it
        assert_eq!(book.tally.out_of_order, 2);
        book.granted_waiter("c");
        assert_eq!(book.tally.out_of_order, 2);
        assert!(book.waiting.is_empty() && book.numbers.is_empty());
        book.granted_waiter("nobody");
        assert_eq!(book.tally.out_of_order, 2);
        assert_eq!((book.tally.arrivals, book.tally.grants), (5, 5));
    }

    #[test]
    fn a_waiter_that_left_is_no_longer_ahead_of_anyone() {
        let mut book = Book::default();
        book.came("a", true);
        book.came("b", false);
        book.came("c", false);
        book.left("b");
        book.granted_waiter("c");
        assert_eq!(book.tally.out_of_order, 0);
        assert_eq!(book.tally.left, 1);
        book.left("nobody");
        assert_eq!(book.tally.left, 1);
    }

    #[test]
    fn a_waiter_whose_first_attempt_failed_is_not_judged_nor_judged_against() {
        let mut book = Book::default();
        book.came("a", true);
        book.failed_first("b"); // maybe queued, from an unknown moment
        book.came("c", false);
        assert!(book.waits("b"));
        book.granted_waiter("b");
        book.granted_waiter("c");
        assert_eq!(book.tally.out_of_order, 0);
        assert_eq!(book.tally.unjudged, 1);
        assert!(!book.waits("b"));
    }

    #[test]
    fn passing_over_a_waiter_whose_attempt_failed_displaces_it_once() {
        let mut book = Book::default();
        book.came("a", true);
        book.came("b", false);
        book.came("c", false);
        book.came("d", false);
        book.failed_waiting("b");
        book.granted_waiter("c");
        book.granted_waiter("d");
        assert_eq!((book.tally.out_of_order, book.tally.displaced), (0, 1));
        book.came("e", false);
        book.came("f", false);
        book.granted_waiter("f"); // ahead of e, which saw no failure
        assert_eq!((book.tally.out_of_order, book.tally.displaced), (1, 1));
        book.granted_waiter("b");
        assert!(book.troubled.is_empty() && book.displaced.is_empty());
    }

    #[tokio::test]
    async fn a_failed_first_attempt_is_booked_as_uncertain() {
        let arrivals = Arrivals::default();
        assert!(
            arrivals
                .attempt("a", async { Err::<bool, _>("reset") })
                .await
                .is_err()
        );
        assert!(arrivals.book().waits("a"));
        arrivals.left("a");
        assert_eq!(arrivals.tally().left, 1);
        assert!(!arrivals.book().waits("a"));
    }
}

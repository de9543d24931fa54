//! The read-write lock conformance suite: behaviour every [`ReadWriteBackend`] must show through
//! [`ReadWriteLock`], for any [`Harness`] whose backend implements it, as one test per case with
//! [`rw_conformance_tests!`](crate::rw_conformance_tests):
//!
//! ```
//! use lock_core::MemoryBackend;
//! use lock_testkit::conformance::Harness;
//!
//! struct Memory(MemoryBackend);
//!
//! impl Harness for Memory {
//!     type Backend = MemoryBackend;
//!     async fn client(&self) -> MemoryBackend {
//!         self.0.new_client()
//!     }
//! }
//!
//! lock_testkit::rw_conformance_tests!(Memory(MemoryBackend::new()));
//! # fn main() {}
//! ```
//!
//! The write side alone is an exclusive lock, so the plain lock suite runs on it too, through
//! [`WriteSide`]: `lock_testkit::conformance_tests!(WriteSide(Memory(MemoryBackend::new())))`.
//! (Not the read side: readers share it, which the lock suite calls a failure.)
//!
//! Holders that are not meant to end by themselves hold 20 s leases, so a waiter that is not
//! woken by a release would wait for the lease: hand-offs are asserted to take well under a
//! second.

use std::time::Duration;

use lock_core::{
    AcquireOutcome, AcquireRequest, Error, LeaseLoss, LockBackend, LockGuard, LockOptions, Locker,
    Owner, ReadWriteBackend, ReadWriteLock, ReadWriteMode, ReadWriteState, ReleaseOutcome,
};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use crate::conformance::{Harness, LeaseWindow, fresh_name};

/// How long a woken waiter may take to get the lock: well under a second, and far under the
/// holders' 20 s leases that would let it in without any wake-up.
const HAND_OFF: Duration = Duration::from_millis(700);

/// The lease of holds that only a release (or a forced one) is meant to end.
const LONG_LEASE: Duration = Duration::from_secs(20);

/// How long a test waits for something that must happen soon, before calling it a hang.
const PATIENCE: Duration = Duration::from_secs(5);

/// The [`Harness`] of the write side of a read-write store: its clients are the write sides of
/// the inner harness's clients, so the plain lock suite runs on the write lock (an exclusive,
/// reentrant lock like any other).
///
/// # Example
///
/// ```
/// use lock_core::MemoryBackend;
/// use lock_testkit::conformance::Harness;
/// use lock_testkit::rw_conformance::WriteSide;
///
/// struct Memory(MemoryBackend);
///
/// impl Harness for Memory {
///     type Backend = MemoryBackend;
///     async fn client(&self) -> MemoryBackend {
///         self.0.new_client()
///     }
/// }
///
/// lock_testkit::conformance_tests!(WriteSide(Memory(MemoryBackend::new())));
/// # fn main() {}
/// ```
#[derive(Debug)]
pub struct WriteSide<H>(pub H);

impl<H: Harness> Harness for WriteSide<H>
where
    H::Backend: ReadWriteBackend,
{
    type Backend = <H::Backend as ReadWriteBackend>::Write;

    async fn client(&self) -> Self::Backend {
        self.0.client().await.write_side()
    }
}

/// A locker over a new client of the store.
async fn rw_client<H: Harness>(harness: &H) -> Locker<H::Backend>
where
    H::Backend: ReadWriteBackend,
{
    Locker::new(harness.client().await)
}

/// The read-write lock `name` of `client`.
fn rw<B: ReadWriteBackend + LockBackend>(client: &Locker<B>, name: &str) -> ReadWriteLock<B> {
    client.read_write(name).expect("a valid name")
}

fn long() -> LockOptions {
    LockOptions::new().fixed_lease(LONG_LEASE)
}

/// The readers of `guards` as [`ReadWriteState::readers`] lists them: one hold each, sorted.
fn one_hold_each<B: lock_core::LockBackend>(guards: &[&LockGuard<B>]) -> Vec<(String, u32)> {
    let mut readers: Vec<(String, u32)> = guards
        .iter()
        .map(|guard| (guard.owner_field().to_owned(), 1))
        .collect();
    readers.sort();
    readers
}

/// Waits for a waiting task that returns when it got the lock, and how long after `since` it
/// did; fails when that is not a prompt hand-off.
async fn promptly<T>(task: JoinHandle<(Instant, T)>, since: Instant, what: &str) -> T {
    let (at, value) = timeout(PATIENCE, task)
        .await
        .unwrap_or_else(|_| panic!("{what}: not woken"))
        .expect("task");
    let hand_off = at.duration_since(since);
    assert!(hand_off < HAND_OFF, "{what}: took {hand_off:?}");
    value
}

/// A task taking the read lock `name` on `locks` (as its own owner), returning when it got it.
fn spawn_reader<B: ReadWriteBackend + LockBackend>(
    locks: &Locker<B>,
    name: &str,
) -> JoinHandle<(Instant, LockGuard<B::Read>)> {
    let (locks, name) = (locks.clone(), name.to_owned());
    tokio::spawn(async move {
        let guard = rw(&locks, &name).read_with(&long()).await.expect("read");
        (Instant::now(), guard)
    })
}

/// A task taking the write lock `name` on `locks` (as its own owner), returning when it got it.
fn spawn_writer<B: ReadWriteBackend + LockBackend>(
    locks: &Locker<B>,
    name: &str,
) -> JoinHandle<(Instant, LockGuard<B::Write>)> {
    let (locks, name) = (locks.clone(), name.to_owned());
    tokio::spawn(async move {
        let guard = rw(&locks, &name).write_with(&long()).await.expect("write");
        (Instant::now(), guard)
    })
}

async fn assert_free<B: ReadWriteBackend + LockBackend>(locks: &Locker<B>, name: &str) {
    assert_eq!(
        rw(locks, name).state().await.expect("state"),
        ReadWriteState::default()
    );
}

/// Readers share the lock: two clients and two owners of one client read at once, `state`
/// lists them all with their counts, and a writer of a third client is kept out until the last
/// of them leaves, whose release wakes it at once.
pub async fn rw_readers_share<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let a = rw_client(harness).await;
    let b = rw_client(harness).await;
    let w = rw_client(harness).await;
    let name = fresh_name("rw-share");
    let first = rw(&a, &name).read_with(&long()).await.expect("read");
    let second = rw(&b, &name)
        .try_read()
        .await
        .expect("try_read")
        .expect("shared");
    let third = rw(&a, &name)
        .read_with(&long().owner(Owner::new()).no_wait())
        .await
        .expect("another owner of the same client reads too");
    let state = rw(&a, &name).state().await.expect("state");
    assert_eq!(state.mode, Some(ReadWriteMode::Read));
    assert_eq!(state.readers, one_hold_each(&[&first, &second, &third]));
    assert_eq!(state.writer, None);
    assert!(
        state.ttl.is_some_and(|ttl| ttl > LONG_LEASE / 2),
        "{state:?}"
    );
    assert_eq!(
        rw(&b, &name)
            .reads()
            .state(&name)
            .await
            .expect("state")
            .holders,
        state.readers
    );
    assert!(
        rw(&w, &name)
            .try_write()
            .await
            .expect("try_write")
            .is_none()
    );
    let writer = spawn_writer(&w, &name);
    sleep(Duration::from_millis(200)).await;
    assert_eq!(
        first.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(
        second.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "a reader still holds the lock");
    let state = rw(&w, &name).state().await.expect("state");
    assert_eq!(state.mode, Some(ReadWriteMode::Read));
    assert_eq!(state.readers, one_hold_each(&[&third]));
    let last_left = Instant::now();
    assert_eq!(
        third.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let writing = promptly(writer, last_left, "the writer after the last reader").await;
    let state = rw(&a, &name).state().await.expect("state");
    assert_eq!(state.mode, Some(ReadWriteMode::Write));
    assert_eq!(state.writer, Some((writing.owner_field().to_owned(), 1)));
    assert!(state.readers.is_empty());
    assert_eq!(
        writing.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_free(&a, &name).await;
}

/// A writer excludes everyone else, readers and writers of other clients and other owners of
/// its own client; its release lets every waiting reader in at once.
pub async fn rw_writer_excludes<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let w = rw_client(harness).await;
    let other = rw_client(harness).await;
    let readers = rw_client(harness).await;
    let name = fresh_name("rw-writer");
    let writing = rw(&w, &name).write_with(&long()).await.expect("write");
    assert!(
        rw(&other, &name)
            .try_read()
            .await
            .expect("try_read")
            .is_none()
    );
    assert!(
        rw(&other, &name)
            .try_write()
            .await
            .expect("try_write")
            .is_none()
    );
    let another_owner = LockOptions::new().no_wait().owner(Owner::new());
    assert!(matches!(
        rw(&w, &name).read_with(&another_owner).await,
        Err(Error::NotAcquired { .. })
    ));
    assert!(matches!(
        rw(&w, &name).write_with(&another_owner).await,
        Err(Error::NotAcquired { .. })
    ));
    let state = rw(&other, &name).state().await.expect("state");
    assert_eq!(state.mode, Some(ReadWriteMode::Write));
    assert_eq!(state.writer, Some((writing.owner_field().to_owned(), 1)));
    assert!(state.readers.is_empty());
    assert!(state.ttl.is_some_and(|ttl| ttl > LONG_LEASE / 2));
    let waiting: Vec<_> = (0..3).map(|_| spawn_reader(&readers, &name)).collect();
    sleep(Duration::from_millis(300)).await;
    assert!(waiting.iter().all(|task| !task.is_finished()));
    let released_at = Instant::now();
    assert_eq!(
        writing.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let mut guards = Vec::new();
    for task in waiting {
        guards.push(promptly(task, released_at, "a reader after the writer").await);
    }
    let state = rw(&other, &name).state().await.expect("state");
    assert_eq!(state.mode, Some(ReadWriteMode::Read));
    assert_eq!(
        state.readers,
        one_hold_each(&guards.iter().collect::<Vec<_>>())
    );
    for guard in guards {
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    }
    assert_free(&w, &name).await;
}

/// Both sides are reentrant: each hold counts, `state` shows the counts, and releases give
/// them back one by one down to zero.
pub async fn rw_reentrant_counts<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let a = rw_client(harness).await;
    let b = rw_client(harness).await;
    let name = fresh_name("rw-reentrant");
    let reads = [
        rw(&a, &name).read_with(&long()).await.expect("read"),
        rw(&a, &name).read_with(&long()).await.expect("re-enter"),
        rw(&a, &name)
            .try_read()
            .await
            .expect("try")
            .expect("re-enter"),
    ];
    let counts: Vec<u32> = reads.iter().map(LockGuard::hold_count).collect();
    assert_eq!(counts, [1, 2, 3]);
    let field = reads[0].owner_field().to_owned();
    let theirs = rw(&b, &name).read_with(&long()).await.expect("read");
    let mut expected = vec![(field.clone(), 3), (theirs.owner_field().to_owned(), 1)];
    expected.sort();
    assert_eq!(
        rw(&a, &name).state().await.expect("state").readers,
        expected
    );
    let [first, second, third] = reads;
    assert_eq!(
        third.release().await.expect("release"),
        ReleaseOutcome::StillHeld { hold_count: 2 }
    );
    assert_eq!(
        second.release().await.expect("release"),
        ReleaseOutcome::StillHeld { hold_count: 1 }
    );
    let mut expected = vec![(field.clone(), 1), (theirs.owner_field().to_owned(), 1)];
    expected.sort();
    assert_eq!(
        rw(&a, &name).state().await.expect("state").readers,
        expected
    );
    assert_eq!(
        first.release().await.expect("release"),
        ReleaseOutcome::Released,
        "this owner holds no read hold any more"
    );
    assert_eq!(
        rw(&a, &name).state().await.expect("state").readers,
        one_hold_each(&[&theirs])
    );
    assert_eq!(
        theirs.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_free(&a, &name).await;

    // Nested read holds given back out of order: the hold left keeps the longer lease.
    let short = Duration::from_millis(300);
    let outer = rw(&a, &name)
        .read_with(&LockOptions::new().fixed_lease(short))
        .await
        .expect("read");
    let inner = rw(&a, &name).read_with(&long()).await.expect("re-enter");
    let theirs = rw(&b, &name).read_with(&long()).await.expect("read");
    assert_eq!(
        outer.release().await.expect("release"),
        ReleaseOutcome::StillHeld { hold_count: 1 }
    );
    sleep(short + Duration::from_millis(200)).await;
    assert_eq!(
        theirs.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(
        rw(&b, &name).try_write().await.expect("try").is_none(),
        "the inner hold's long lease still runs"
    );
    assert_eq!(
        inner.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_free(&a, &name).await;

    let writes = [
        rw(&a, &name).write_with(&long()).await.expect("write"),
        rw(&a, &name).write_with(&long()).await.expect("re-enter"),
        rw(&a, &name)
            .try_write()
            .await
            .expect("try")
            .expect("re-enter"),
    ];
    let counts: Vec<u32> = writes.iter().map(LockGuard::hold_count).collect();
    assert_eq!(counts, [1, 2, 3]);
    let state = rw(&a, &name).state().await.expect("state");
    assert_eq!(state.writer, Some((field.clone(), 3)));
    assert!(rw(&b, &name).try_read().await.expect("try").is_none());
    let [first, second, third] = writes;
    assert_eq!(
        third.release().await.expect("release"),
        ReleaseOutcome::StillHeld { hold_count: 2 }
    );
    assert_eq!(
        second.release().await.expect("release"),
        ReleaseOutcome::StillHeld { hold_count: 1 }
    );
    assert_eq!(
        rw(&a, &name).state().await.expect("state").writer,
        Some((field, 1))
    );
    assert!(rw(&b, &name).try_write().await.expect("try").is_none());
    assert_eq!(
        first.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_free(&a, &name).await;
}

/// A downgrade: the writer takes the read lock too, gives back the write lock and keeps
/// reading. Other readers get in at the write release (the mode goes from write to read);
/// another writer waits for the downgraded reader as for any reader.
pub async fn rw_downgrade<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let a = rw_client(harness).await;
    let b = rw_client(harness).await;
    let c = rw_client(harness).await;
    let name = fresh_name("rw-downgrade");
    let writing = rw(&a, &name).write_with(&long()).await.expect("write");
    let reading = rw(&a, &name)
        .try_read()
        .await
        .expect("try_read")
        .expect("the writer may read");
    assert_eq!(reading.hold_count(), 1);
    let field = writing.owner_field().to_owned();
    let state = rw(&a, &name).state().await.expect("state");
    assert_eq!(
        state.mode,
        Some(ReadWriteMode::Write),
        "the write hold lasts"
    );
    assert_eq!(state.writer, Some((field.clone(), 1)));
    assert_eq!(state.readers, vec![(field.clone(), 1)]);
    assert!(rw(&b, &name).try_read().await.expect("try_read").is_none());
    let reader = spawn_reader(&b, &name);
    assert!(
        rw(&c, &name)
            .try_write()
            .await
            .expect("try_write")
            .is_none()
    );
    sleep(Duration::from_millis(200)).await;
    assert!(
        !reader.is_finished(),
        "the write hold keeps other readers out"
    );
    let released_at = Instant::now();
    assert_eq!(
        writing.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let theirs = promptly(reader, released_at, "a reader after the downgrade").await;
    let state = rw(&a, &name).state().await.expect("state");
    assert_eq!(state.mode, Some(ReadWriteMode::Read));
    assert_eq!(state.writer, None);
    assert_eq!(state.readers, one_hold_each(&[&reading, &theirs]));
    let writer = spawn_writer(&c, &name);
    sleep(Duration::from_millis(200)).await;
    assert_eq!(
        theirs.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "the downgraded reader still reads");
    assert_eq!(
        rw(&c, &name).state().await.expect("state").readers,
        vec![(field, 1)]
    );
    let released_at = Instant::now();
    assert_eq!(
        reading.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let writing = promptly(
        writer,
        released_at,
        "the writer after the downgraded reader",
    )
    .await;
    assert_eq!(
        writing.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_free(&a, &name).await;
}

/// An owner that reads and asks to write is refused with [`Error::UpgradeRefused`] at once
/// (by the [`ReadWriteLock`], and by the store through the write side's locker alone), and nothing
/// changes; a read guard dropped just before is not an upgrade: the write waits for its
/// release and gets the lock.
pub async fn rw_upgrade_refused<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let a = rw_client(harness).await;
    let b = rw_client(harness).await;
    let name = fresh_name("rw-upgrade");
    let reading = rw(&a, &name).read_with(&long()).await.expect("read");
    let theirs = rw(&b, &name).read_with(&long()).await.expect("read");
    let before = rw(&a, &name).state().await.expect("state");
    let waits = LockOptions::new().wait(PATIENCE);
    let started = Instant::now();
    for attempt in [
        rw(&a, &name).write().await.map(drop),
        rw(&a, &name).try_write().await.map(drop),
        rw(&a, &name).write_with(&waits).await.map(drop),
        // The store's own refusal: this locker has not seen the read hold.
        rw(&a, &name)
            .writes()
            .lock_with(&name, &waits)
            .await
            .map(drop),
    ] {
        assert!(
            matches!(&attempt, Err(Error::UpgradeRefused { name: refused }) if *refused == name),
            "{attempt:?}"
        );
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "refusals took {took:?}");
    let after = rw(&a, &name).state().await.expect("state");
    assert_eq!(
        (before.mode, &before.readers, &before.writer),
        (after.mode, &after.readers, &after.writer),
        "a refusal changes nothing"
    );
    assert_eq!(
        reading.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(
        theirs.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    // Several rounds: the dropped guard's release runs in the background, and must never be
    // mistaken for a read still held.
    for _ in 0..20 {
        let reading = rw(&a, &name).read().await.expect("read");
        drop(reading);
        let writing = timeout(PATIENCE, rw(&a, &name).write())
            .await
            .expect("not waiting for itself")
            .expect("a dropped read guard is no upgrade");
        assert_eq!(
            writing.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    }
    assert_free(&a, &name).await;
}

/// A crashed reader (never released nor renewed) does not keep the lock: alone it holds it
/// for its lease and no longer; among other readers, the lock is free once they have all left
/// (its expired hold is no reason to keep it), while a crashed reader's live lease still counts.
pub async fn rw_crashed_reader_does_not_keep_lock<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let a = rw_client(harness).await;
    let b = rw_client(harness).await;
    let w = rw_client(harness).await;
    let lease = Duration::from_millis(400);
    let crash = |locks: &Locker<H::Backend>, name: String| {
        let locks = locks.clone();
        async move {
            let options = LockOptions::new()
                .fixed_lease(lease)
                .owner(Owner::new())
                .no_wait();
            let (guard, window) =
                LeaseWindow::of(lease, rw(&locks, &name).read_with(&options)).await;
            std::mem::forget(guard.expect("read"));
            window
        }
    };
    let bound = LockOptions::new().wait(PATIENCE);

    // Alone: the writer gets in when the crashed reader's lease ends.
    let name = fresh_name("rw-crash-alone");
    let crashed = crash(&a, name.clone()).await;
    assert!(rw(&w, &name).try_write().await.expect("try").is_none());
    let writing = rw(&w, &name).write_with(&bound).await.expect("write");
    crashed.assert_taken_over(Instant::now(), HAND_OFF, "the crashed reader's hold");
    assert!(writing.release().await.expect("release").was_held());

    // Among readers that leave after its lease: free as soon as the last of them leaves.
    let name = fresh_name("rw-crash-among");
    let first = rw(&a, &name).read_with(&long()).await.expect("read");
    crash(&a, name.clone()).await;
    let second = rw(&b, &name).read_with(&long()).await.expect("read");
    sleep(lease + Duration::from_millis(200)).await;
    assert!(rw(&w, &name).try_write().await.expect("try").is_none());
    let writer = spawn_writer(&w, &name);
    sleep(Duration::from_millis(100)).await;
    assert_eq!(
        first.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "a reader still holds the lock");
    let last_left = Instant::now();
    assert_eq!(
        second.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let writing = promptly(writer, last_left, "the writer after the last live reader").await;
    let state = rw(&w, &name).state().await.expect("state");
    assert_eq!(state.mode, Some(ReadWriteMode::Write));
    assert!(state.readers.is_empty(), "{state:?}");
    assert!(writing.release().await.expect("release").was_held());

    // Among readers that leave before its lease ends: its lease still counts, and no longer.
    let name = fresh_name("rw-crash-outlives");
    let other = rw(&b, &name).read_with(&long()).await.expect("read");
    let crashed = crash(&a, name.clone()).await;
    assert_eq!(
        other.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let writing = rw(&w, &name).write_with(&bound).await.expect("write");
    crashed.assert_taken_over(
        Instant::now(),
        HAND_OFF,
        "the crashed reader's hold (among others)",
    );
    assert!(writing.release().await.expect("release").was_held());
    assert_free(&w, &name).await;

    // A downgraded reader that crashes: the write lease it had no longer keeps the lock.
    let name = fresh_name("rw-crash-downgraded");
    let owner = Owner::new();
    let writing = rw(&a, &name)
        .write_with(&long().owner(owner))
        .await
        .expect("write");
    let (reading, crashed) = LeaseWindow::of(
        lease,
        rw(&a, &name).read_with(&LockOptions::new().fixed_lease(lease).owner(owner)),
    )
    .await;
    std::mem::forget(reading.expect("downgrade"));
    assert_eq!(
        writing.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let writing = rw(&w, &name).write_with(&bound).await.expect("write");
    crashed.assert_taken_over(Instant::now(), HAND_OFF, "the downgraded reader's hold");
    assert!(writing.release().await.expect("release").was_held());
    assert_free(&w, &name).await;
}

/// A read hold ends with its lease also while other readers keep the lock alive: the owner
/// field's next read hold does not count it. (A hold nobody saw granted, such as an acquire
/// whose answer was lost, is never released; counted on, it would make the owner's next hold a
/// re-entry the owner does not know of.) Among live holds of the same owner field, only the
/// lapsed one goes.
pub async fn rw_lapsed_read_hold_is_not_counted<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let other = rw_client(harness).await;
    let store = harness.client().await;
    let side = store.read_side();
    let field = Owner::new().field(side.client_id());
    let short = Duration::from_millis(300);
    // Its only hold lapses while another reader holds the lock: the next hold is a first one.
    let name = fresh_name("rw-lapsed");
    let reading = rw(&other, &name).read_with(&long()).await.expect("read");
    assert_eq!(read_hold(&side, &name, &field, short).await, 1);
    sleep(short + Duration::from_millis(200)).await;
    assert_eq!(
        read_hold(&side, &name, &field, LONG_LEASE).await,
        1,
        "the lapsed hold was counted"
    );
    let state = rw(&other, &name).state().await.expect("state");
    assert!(state.readers.contains(&(field.clone(), 1)), "{state:?}");
    assert_eq!(
        give_back_read(&side, &name, &field).await,
        ReleaseOutcome::Released
    );
    assert_eq!(
        reading.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_free(&other, &name).await;

    // A lapsed hold below a live one: the live one stays counted, the lapsed one does not.
    let name = fresh_name("rw-lapsed-among-own");
    let reading = rw(&other, &name).read_with(&long()).await.expect("read");
    assert_eq!(read_hold(&side, &name, &field, short).await, 1);
    assert_eq!(read_hold(&side, &name, &field, LONG_LEASE).await, 2);
    sleep(short + Duration::from_millis(200)).await;
    assert_eq!(
        read_hold(&side, &name, &field, LONG_LEASE).await,
        2,
        "one live hold and the new one"
    );
    let state = rw(&other, &name).state().await.expect("state");
    assert!(state.readers.contains(&(field.clone(), 2)), "{state:?}");
    assert_eq!(
        give_back_read(&side, &name, &field).await,
        ReleaseOutcome::StillHeld { hold_count: 1 }
    );
    assert_eq!(
        give_back_read(&side, &name, &field).await,
        ReleaseOutcome::Released
    );
    assert_eq!(
        reading.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_free(&other, &name).await;
}

/// One read hold of `field` given back on the read side directly.
async fn give_back_read<B: LockBackend>(side: &B, name: &str, field: &str) -> ReleaseOutcome {
    side.release(name, field, LONG_LEASE)
        .await
        .expect("release")
}

/// One read hold of `field` taken on the read side directly, as an attempt whose answer its
/// locker never sees: its hold count.
async fn read_hold<B: LockBackend>(side: &B, name: &str, field: &str, lease: Duration) -> u32 {
    let request = AcquireRequest {
        name,
        owner_field: field,
        lease,
        fencing: false,
        known_holds: 0,
        waits: false,
    };
    match side.try_acquire(request).await.expect("read") {
        AcquireOutcome::Acquired(grant) => grant.hold_count,
        outcome => panic!("expected a read hold, got {outcome:?}"),
    }
}

/// The watchdog renews read holds past their lease (each reader's own hold, not only the
/// lock's expiry: one reader leaving does not end the other's), and write holds likewise.
pub async fn rw_watchdog_renews_both_sides<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let a = rw_client(harness).await;
    let b = rw_client(harness).await;
    let w = rw_client(harness).await;
    let lease = Duration::from_millis(600);
    let renewed = LockOptions::new().watchdog_lease(lease);
    let name = fresh_name("rw-watchdog");
    let first = rw(&a, &name).read_with(&renewed).await.expect("read");
    let second = rw(&b, &name).read_with(&renewed).await.expect("read");
    assert!(first.is_watchdog());
    let first_deadline = first.valid_until();
    for _ in 0..4 {
        sleep(Duration::from_millis(500)).await;
        assert!(
            rw(&w, &name).try_write().await.expect("try").is_none(),
            "read"
        );
    }
    assert!(!first.is_lost() && !second.is_lost());
    assert!(first.valid_until() > first_deadline, "renewed");
    assert_eq!(
        second.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    sleep(lease).await;
    assert!(
        rw(&w, &name).try_write().await.expect("try").is_none(),
        "the remaining reader's own hold was renewed"
    );
    assert_eq!(
        first.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_free(&a, &name).await;

    let writing = rw(&a, &name).write_with(&renewed).await.expect("write");
    let first_deadline = writing.valid_until();
    for _ in 0..4 {
        sleep(Duration::from_millis(500)).await;
        assert!(
            rw(&b, &name).try_read().await.expect("try").is_none(),
            "written"
        );
        assert!(
            rw(&b, &name).try_write().await.expect("try").is_none(),
            "written"
        );
    }
    assert!(!writing.is_lost());
    assert!(writing.valid_until() > first_deadline, "renewed");
    assert_eq!(
        writing.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    sleep(lease * 2).await;
    assert_free(&a, &name).await;
}

/// The watchdog renews many read holds at once (one renewal batch of many names, which on a
/// cluster spans slots and primaries): every reader keeps every lock past several leases, and
/// each reader's own holds are renewed, not only the locks' expiry.
pub async fn rw_many_read_holds_renewed<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let a = rw_client(harness).await;
    let b = rw_client(harness).await;
    let w = rw_client(harness).await;
    let lease = Duration::from_millis(600);
    let renewed = LockOptions::new().watchdog_lease(lease);
    let names: Vec<String> = (0..24)
        .map(|i| fresh_name(&format!("rw-many-{i}")))
        .collect();
    let mut firsts = Vec::new();
    let mut seconds = Vec::new();
    for (i, name) in names.iter().enumerate() {
        firsts.push(rw(&a, name).read_with(&renewed).await.expect("read"));
        if i % 2 == 0 {
            seconds.push(rw(&b, name).read_with(&renewed).await.expect("read"));
        }
    }
    sleep(lease * 5 / 2).await;
    for (name, guard) in names.iter().zip(&firsts) {
        assert!(!guard.is_lost(), "{name}: kept");
        assert!(
            rw(&w, name).try_write().await.expect("try").is_none(),
            "{name}: read"
        );
    }
    for guard in seconds {
        assert!(!guard.is_lost());
        assert!(guard.release().await.expect("release").was_held());
    }
    // Past the lease of holds made before the releases: only renewals of the first reader's
    // own holds keep the locks.
    sleep(lease * 3 / 2).await;
    for (name, guard) in names.iter().zip(&firsts) {
        assert!(!guard.is_lost(), "{name}: kept");
        assert!(
            rw(&w, name).try_write().await.expect("try").is_none(),
            "{name}: the remaining reader's own hold was renewed"
        );
    }
    for guard in firsts {
        assert_eq!(
            guard.release().await.expect("release"),
            ReleaseOutcome::Released
        );
    }
    for name in &names {
        assert_free(&a, name).await;
    }
}

/// `force_unlock` deletes the lock whichever side holds it: its holders find out at their next
/// renewal, and its waiters wake (all of them after a writer).
pub async fn rw_force_unlock_either_side<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let a = rw_client(harness).await;
    let b = rw_client(harness).await;
    let w = rw_client(harness).await;
    const ROUNDS: usize = 10;
    let admin = rw_client(harness).await;
    // Renewed often enough for the loss to show within a second or two, yet long enough that
    // the waiters' own re-check at the end of the holder's lease comes far later than a wake-up.
    let renewed = LockOptions::new().watchdog_lease(Duration::from_secs(3));
    let name = fresh_name("rw-force");
    assert!(
        !rw(&admin, &name).force_unlock().await.expect("force"),
        "free"
    );

    let first = rw(&a, &name).read_with(&renewed).await.expect("read");
    let second = rw(&b, &name).read_with(&renewed).await.expect("read");
    let writer = spawn_writer(&w, &name);
    sleep(Duration::from_millis(200)).await;
    let forced_at = Instant::now();
    assert!(
        rw(&admin, &name).force_unlock().await.expect("force"),
        "read"
    );
    let writing = promptly(writer, forced_at, "a writer after a forced unlock").await;
    for reading in [&first, &second] {
        let loss = timeout(PATIENCE, reading.lost())
            .await
            .expect("a reader sees the loss at its next renewal");
        assert_eq!(loss, LeaseLoss::NotOurs);
    }
    for reading in [first, second] {
        assert_eq!(
            reading.release().await.expect("release"),
            ReleaseOutcome::NotHeld
        );
    }
    assert!(writing.release().await.expect("release").was_held());

    // Several rounds: the readers woken by the forced unlock of a writer may get in at once,
    // and their new lock must not be deleted as well.
    for round in 0..ROUNDS {
        let writing = rw(&a, &name).write_with(&renewed).await.expect("write");
        let waiting: Vec<_> = (0..3).map(|_| spawn_reader(&b, &name)).collect();
        sleep(Duration::from_millis(100)).await;
        let forced_at = Instant::now();
        assert!(
            rw(&admin, &name).force_unlock().await.expect("force"),
            "written"
        );
        let mut readers = Vec::new();
        for task in waiting {
            readers.push(promptly(task, forced_at, "a reader after a forced unlock").await);
        }
        if round == 0 {
            let loss = timeout(PATIENCE, writing.lost())
                .await
                .expect("the writer sees the loss at its next renewal");
            assert_eq!(loss, LeaseLoss::NotOurs);
        }
        assert_eq!(
            writing.release().await.expect("release"),
            ReleaseOutcome::NotHeld
        );
        for reading in readers {
            assert_eq!(
                reading.release().await.expect("release"),
                ReleaseOutcome::Released,
                "a reader let in by the forced unlock keeps its hold"
            );
        }
    }
    assert!(
        !rw(&admin, &name).force_unlock().await.expect("force"),
        "free"
    );
    assert_free(&a, &name).await;
}

/// Fencing tokens come from one counter per name for both sides: every grant, read or write,
/// re-entry or downgrade, gets a greater token than every grant before it.
pub async fn rw_fencing_tokens_increase<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let a = rw_client(harness).await;
    let b = rw_client(harness).await;
    let name = fresh_name("rw-fencing");
    let fenced = LockOptions::new().fenced().fixed_lease(LONG_LEASE);
    let mut tokens = Vec::new();
    let first = rw(&a, &name).read_with(&fenced).await.expect("read");
    let second = rw(&b, &name).read_with(&fenced).await.expect("read");
    let again = rw(&a, &name).read_with(&fenced).await.expect("re-enter");
    tokens.extend([
        first.fencing_token(),
        second.fencing_token(),
        again.fencing_token(),
    ]);
    for guard in [first, second, again] {
        assert!(guard.release().await.expect("release").was_held());
    }
    let writing = rw(&a, &name).write_with(&fenced).await.expect("write");
    let downgrade = rw(&a, &name).read_with(&fenced).await.expect("downgrade");
    tokens.extend([writing.fencing_token(), downgrade.fencing_token()]);
    assert!(writing.release().await.expect("release").was_held());
    assert!(downgrade.release().await.expect("release").was_held());
    for (locks, read) in [(&b, false), (&b, true), (&a, false)] {
        if read {
            let guard = rw(locks, &name).read_with(&fenced).await.expect("read");
            tokens.push(guard.fencing_token());
            assert!(guard.release().await.expect("release").was_held());
        } else {
            let guard = rw(locks, &name).write_with(&fenced).await.expect("write");
            tokens.push(guard.fencing_token());
            assert!(guard.release().await.expect("release").was_held());
        }
    }
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens must grow: {tokens:?}"
    );
    // Plain grants of the same name still work alongside the counter.
    let plain = rw(&a, &name).read().await.expect("read");
    assert!(plain.release().await.expect("release").was_held());
    assert_free(&a, &name).await;
}

/// Bad names and options get a typed error on both sides and on `state`, before anything else
/// (an invalid option is reported as such even by an owner that reads), and nothing is held.
pub async fn rw_bad_input_is_rejected<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let locks = rw_client(harness).await;
    let too_long = "x".repeat(lock_core::options::MAX_NAME_LEN + 1);
    for bad in ["", too_long.as_str()] {
        let result = locks.read_write(bad).map(drop);
        assert!(
            matches!(result, Err(Error::InvalidName { .. })),
            "{bad:?} gave {result:?}"
        );
    }
    let name = fresh_name("rw-bad-input");
    let bad_options = [
        LockOptions::new().fixed_lease(Duration::ZERO),
        LockOptions::new().fixed_lease(Duration::from_millis(1)),
        LockOptions::new().watchdog_lease(Duration::from_secs(400 * 24 * 3600)),
        LockOptions::new().wait(Duration::ZERO),
        LockOptions::new().wait(Duration::MAX),
    ];
    for options in &bad_options {
        for result in [
            rw(&locks, &name).read_with(options).await.map(drop),
            rw(&locks, &name).write_with(options).await.map(drop),
        ] {
            assert!(
                matches!(result, Err(Error::InvalidOptions { .. })),
                "{options:?} gave {result:?}"
            );
        }
    }
    assert_free(&locks, &name).await;
    let reading = rw(&locks, &name).read().await.expect("read");
    for options in &bad_options {
        let result = rw(&locks, &name).write_with(options).await;
        assert!(
            matches!(result, Err(Error::InvalidOptions { .. })),
            "{options:?} gave {result:?}"
        );
    }
    assert_eq!(
        reading.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_free(&locks, &name).await;
}

/// A write or read wait dropped midway leaves nothing behind: no hold, no swallowed wake-up
/// (another waiter still gets in at the release), and the lock stays usable for the client.
pub async fn rw_cancelled_wait_leaves_nothing<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let a = rw_client(harness).await;
    let b = rw_client(harness).await;
    let c = rw_client(harness).await;
    let name = fresh_name("rw-cancel-write");
    let reading = rw(&a, &name).read_with(&long()).await.expect("read");
    let cancelled = timeout(Duration::from_millis(300), rw(&b, &name).write()).await;
    assert!(cancelled.is_err(), "a reader holds: write() was waiting");
    let writer = spawn_writer(&c, &name);
    sleep(Duration::from_millis(200)).await;
    let released_at = Instant::now();
    assert_eq!(
        reading.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let writing = promptly(writer, released_at, "the other writer").await;
    let state = rw(&a, &name).state().await.expect("state");
    assert_eq!(state.writer, Some((writing.owner_field().to_owned(), 1)));
    assert!(state.readers.is_empty(), "{state:?}");
    assert!(writing.release().await.expect("release").was_held());
    assert_free(&a, &name).await;
    let again = timeout(Duration::from_secs(2), rw(&b, &name).write())
        .await
        .expect("a free lock is taken at once")
        .expect("write");
    assert!(again.release().await.expect("release").was_held());

    let name = fresh_name("rw-cancel-read");
    let writing = rw(&a, &name).write_with(&long()).await.expect("write");
    let cancelled = timeout(Duration::from_millis(300), rw(&b, &name).read()).await;
    assert!(cancelled.is_err(), "a writer holds: read() was waiting");
    let reader = spawn_reader(&c, &name);
    sleep(Duration::from_millis(200)).await;
    let released_at = Instant::now();
    assert_eq!(
        writing.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let reading = promptly(reader, released_at, "the other reader").await;
    let state = rw(&a, &name).state().await.expect("state");
    assert_eq!(state.readers, one_hold_each(&[&reading]));
    assert!(reading.release().await.expect("release").was_held());
    assert_free(&a, &name).await;
    let again = timeout(Duration::from_secs(2), rw(&b, &name).read())
        .await
        .expect("a free lock is taken at once")
        .expect("read");
    assert!(again.release().await.expect("release").was_held());
    assert_free(&a, &name).await;
}

/// A writer that also reads (a downgrade in progress) keeps the write lease: giving back one
/// of its short read holds must not cut the lock short while the write hold lasts.
pub async fn rw_read_release_keeps_the_write_lease<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let name = fresh_name("rw-write-lease");
    let writer = rw_client(harness).await;
    let other = rw_client(harness).await;
    let writing = rw(&writer, &name).write_with(&long()).await.expect("write");
    let short = LockOptions::new().fixed_lease(Duration::from_millis(600));
    let first = rw(&writer, &name).read_with(&short).await.expect("read");
    let second = rw(&writer, &name)
        .read_with(&short)
        .await
        .expect("read again");
    assert_eq!(
        second.release().await.expect("release"),
        ReleaseOutcome::StillHeld { hold_count: 1 }
    );
    // Well past the short read leases: the write hold (20 s) still holds the lock.
    sleep(Duration::from_millis(1500)).await;
    assert!(!writing.is_lost());
    assert!(
        rw(&other, &name).try_write().await.expect("try").is_none(),
        "another writer got in while the first one's write hold lasts"
    );
    assert_eq!(
        rw(&other, &name).state().await.expect("state").mode,
        Some(ReadWriteMode::Write)
    );
    // Its lease has run out; whether the store still counts it is not what this case checks.
    let _first = first.release().await.expect("release");
    assert!(writing.release().await.expect("release").was_held());
}

/// With writers preferred ([`ReadWriteLock::prefer_writers`]), a writer gets the lock under a
/// steady stream of overlapping readers (which, without it, can keep a writer out for good);
/// readers held back come in again once the writer is done, or gives up.
pub async fn rw_writer_preferring_is_not_starved<H: Harness>(harness: &H)
where
    H::Backend: ReadWriteBackend,
{
    let name = fresh_name("rw-prefer");
    let readers = rw_client(harness).await;
    let writers = rw_client(harness).await;
    let preferred = rw(&writers, &name).prefer_writers();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut stream = Vec::new();
    for _ in 0..4 {
        let (readers, name, stop, reads) =
            (readers.clone(), name.clone(), stop.clone(), reads.clone());
        stream.push(tokio::spawn(async move {
            let options = LockOptions::new().owner(lock_core::Owner::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let guard = rw(&readers, &name).read_with(&options).await.expect("read");
                reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                sleep(Duration::from_millis(40)).await;
                assert!(guard.release().await.expect("release").was_held());
            }
        }));
    }
    // The stream is under way: the readers overlap, so the lock is never free on its own.
    sleep(Duration::from_millis(300)).await;
    let asked_at = Instant::now();
    let writing = timeout(Duration::from_secs(3), preferred.write())
        .await
        .expect("the preferred writer gets in while the readers keep coming")
        .expect("write");
    let waited = asked_at.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "the writer waited {waited:?}"
    );
    let state = rw(&readers, &name).state().await.expect("state");
    assert_eq!(state.mode, Some(ReadWriteMode::Write));
    assert!(state.readers.is_empty(), "{state:?}");
    let before = reads.load(std::sync::atomic::Ordering::Relaxed);
    assert!(writing.release().await.expect("release").was_held());
    sleep(Duration::from_millis(500)).await;
    assert!(
        reads.load(std::sync::atomic::Ordering::Relaxed) > before,
        "readers come back after the writer"
    );
    // A preferred writer that gives up lets the readers in again at once.
    let gave_up = preferred
        .write_with(&LockOptions::new().wait(Duration::from_millis(30)))
        .await;
    if let Ok(guard) = gave_up {
        assert!(guard.release().await.expect("release").was_held());
    }
    let before = reads.load(std::sync::atomic::Ordering::Relaxed);
    sleep(Duration::from_millis(500)).await;
    assert!(
        reads.load(std::sync::atomic::Ordering::Relaxed) > before,
        "readers come back after a writer gives up"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in stream {
        timeout(Duration::from_secs(5), task)
            .await
            .expect("the readers finish")
            .expect("task");
    }
    assert!(
        !rw(&readers, &name)
            .state()
            .await
            .expect("state")
            .is_locked()
    );
}

/// Generates one `#[test]` per read-write lock conformance case for a harness expression whose
/// backend implements [`ReadWriteBackend`], as [`conformance_tests!`](crate::conformance_tests)
/// does for locks (`@sequence` included).
///
/// ```no_run
/// # use lock_core::MemoryBackend;
/// # use lock_testkit::conformance::Harness;
/// # struct Memory(MemoryBackend);
/// # impl Harness for Memory {
/// #     type Backend = MemoryBackend;
/// #     async fn client(&self) -> MemoryBackend { self.0.new_client() }
/// # }
/// let harness = Memory(MemoryBackend::new());
/// lock_testkit::conformance::run(lock_testkit::rw_conformance_tests!(@sequence &harness));
/// ```
#[macro_export]
macro_rules! rw_conformance_tests {
    (@sequence $harness:expr) => {
        $crate::rw_conformance_tests! { @every run $harness }
    };
    ($harness:expr) => {
        $crate::rw_conformance_tests! { @every cases $harness }
    };
    (@every $mode:ident $harness:expr) => {
        $crate::rw_conformance_tests! { @$mode $harness;
            rw_readers_share,
            rw_writer_excludes,
            rw_reentrant_counts,
            rw_downgrade,
            rw_upgrade_refused,
            rw_crashed_reader_does_not_keep_lock,
            rw_lapsed_read_hold_is_not_counted,
            rw_watchdog_renews_both_sides,
            rw_many_read_holds_renewed,
            rw_force_unlock_either_side,
            rw_fencing_tokens_increase,
            rw_bad_input_is_rejected,
            rw_cancelled_wait_leaves_nothing,
            rw_writer_preferring_is_not_starved,
            rw_read_release_keeps_the_write_lease,
        }
    };
    (@run $harness:expr; $($case:ident),* $(,)?) => {
        async {
            let harness = $harness;
            $($crate::rw_conformance::$case(harness).await;)*
        }
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run(async {
                    let harness = $harness;
                    $crate::rw_conformance::$case(&harness).await;
                });
            }
        )*
    };
}

//! The leader election conformance suite: behaviour every [`ElectionBackend`] must show, for
//! any [`Harness`] whose backend implements it, as one test per case with
//! [`election_conformance_tests!`](crate::election_conformance_tests):
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
//! lock_testkit::election_conformance_tests!(Memory(MemoryBackend::new()));
//! # fn main() {}
//! ```

use std::time::Duration;

use lock_core::{Election, ElectionBackend, Error, LeaseLoss, LockOptions, Locker};
use tokio::time::{Instant, sleep, timeout};

use crate::conformance::{Harness, LeaseWindow, fresh_name};

/// How long a waiting candidate or an observer may take to see a change: well under the
/// one-second re-reads that would find it without any announcement.
const PROMPT: Duration = Duration::from_millis(700);

/// The election `name` as a new client sees it (its own connection and client id).
async fn election_of<H: Harness>(harness: &H, name: &str) -> Election<H::Backend>
where
    H::Backend: ElectionBackend,
    <H::Backend as ElectionBackend>::Campaign: Clone,
{
    Locker::new(harness.client().await)
        .election(name)
        .expect("a valid name")
}

/// One leader at a time among candidates of every client; when it resigns the next one leads
/// at once, with a greater term; `leader` shows the value of whoever leads.
pub async fn election_one_leader_at_a_time<H: Harness>(harness: &H)
where
    H::Backend: ElectionBackend,
    <H::Backend as ElectionBackend>::Campaign: Clone,
{
    let name = fresh_name("election-one");
    let reader = election_of(harness, &name).await;
    assert_eq!(reader.leader().await.expect("leader"), None);
    let first = election_of(harness, &name).await;
    let leadership = first.campaign("a").await.expect("campaign");
    let leader = reader.leader().await.expect("leader").expect("a leads");
    assert_eq!(leader.value, "a");
    assert_eq!(leader.owner_field, leadership.guard().owner_field());
    let mut candidates = Vec::new();
    for value in ["b", "c"] {
        let election = election_of(harness, &name).await;
        candidates.push(tokio::spawn(async move {
            let leadership = election.campaign(value).await.expect("campaign");
            (Instant::now(), leadership)
        }));
    }
    sleep(Duration::from_millis(300)).await;
    assert!(candidates.iter().all(|candidate| !candidate.is_finished()));
    let resigned_at = Instant::now();
    let first_term = leadership.term();
    assert!(leadership.resign().await.expect("resign"));
    let (mut b, mut c) = {
        let mut both = candidates.into_iter();
        (both.next().expect("b"), both.next().expect("c"))
    };
    let ((won_at, next), other) = tokio::select! {
        won = &mut b => (won.expect("task"), c),
        won = &mut c => (won.expect("task"), b),
    };
    let took = won_at.duration_since(resigned_at);
    assert!(took < PROMPT, "the next candidate took {took:?}");
    assert!(next.term() > first_term, "terms must grow");
    let leader = reader
        .leader()
        .await
        .expect("leader")
        .expect("someone leads");
    assert_eq!(leader.value, next.value());
    sleep(Duration::from_millis(200)).await;
    assert!(!other.is_finished(), "two leaders at once");
    assert!(next.resign().await.expect("resign"));
    let (_, last) = timeout(Duration::from_secs(5), other)
        .await
        .expect("the last candidate leads in turn")
        .expect("task");
    assert!(last.resign().await.expect("resign"));
    assert_eq!(reader.leader().await.expect("leader"), None);
}

/// A leader that stops renewing (a crash) is replaced one lease later, and an observer sees it.
pub async fn election_a_crashed_leader_is_replaced<H: Harness>(harness: &H)
where
    H::Backend: ElectionBackend,
    <H::Backend as ElectionBackend>::Campaign: Clone,
{
    let name = fresh_name("election-crash");
    let crashed = election_of(harness, &name).await;
    let lease = Duration::from_millis(600);
    let options = LockOptions::new().fixed_lease(lease);
    let (leadership, window) =
        LeaseWindow::of(lease, crashed.campaign_with("crashed", &options)).await;
    std::mem::forget(leadership.expect("campaign"));
    let next = election_of(harness, &name).await;
    let won = timeout(Duration::from_secs(5), next.campaign("next"))
        .await
        .expect("replaced")
        .expect("campaign");
    window.assert_taken_over(
        Instant::now(),
        Duration::from_millis(1500),
        "the leadership",
    );
    let leader = next.leader().await.expect("leader").expect("next leads");
    assert_eq!(leader.value, "next");
    assert!(won.resign().await.expect("resign"));
}

/// An observer sees the leadership now, then each change promptly.
pub async fn election_observers_see_each_change<H: Harness>(harness: &H)
where
    H::Backend: ElectionBackend,
    <H::Backend as ElectionBackend>::Campaign: Clone,
{
    let name = fresh_name("election-observe");
    let watcher = election_of(harness, &name).await;
    let mut observer = watcher.observe();
    assert_eq!(observer.changed().await.expect("now"), None);
    let candidate = election_of(harness, &name).await;
    let pending = tokio::spawn(async move {
        let change = observer.changed().await.expect("change");
        (Instant::now(), change, observer)
    });
    // Campaign just after the observer's read: its own re-read is most of a second away.
    sleep(Duration::from_millis(100)).await;
    let elected_at = Instant::now();
    let leadership = candidate.campaign("x").await.expect("campaign");
    let (seen_at, change, mut observer) = timeout(Duration::from_secs(5), pending)
        .await
        .expect("seen")
        .expect("task");
    assert_eq!(change.map(|leader| leader.value), Some("x".to_owned()));
    let took = seen_at.duration_since(elected_at);
    assert!(took < PROMPT, "the observer took {took:?}");
    let resigned = tokio::spawn(async move {
        sleep(Duration::from_millis(100)).await;
        let at = Instant::now();
        assert!(leadership.resign().await.expect("resign"));
        at
    });
    let change = timeout(Duration::from_secs(5), observer.changed())
        .await
        .expect("seen")
        .expect("change");
    let seen_at = Instant::now();
    assert_eq!(change, None);
    let resigned_at = resigned.await.expect("task");
    let took = seen_at.duration_since(resigned_at);
    assert!(took < PROMPT, "the observer took {took:?}");
}

/// Deposing a leader ends its leadership: it sees `lost`, and another candidate leads.
pub async fn election_depose<H: Harness>(harness: &H)
where
    H::Backend: ElectionBackend,
    <H::Backend as ElectionBackend>::Campaign: Clone,
{
    let name = fresh_name("election-depose");
    let leader = election_of(harness, &name).await;
    let options = LockOptions::new().watchdog_lease(Duration::from_millis(600));
    let leadership = leader
        .campaign_with("old", &options)
        .await
        .expect("campaign");
    let operator = election_of(harness, &name).await;
    assert!(operator.depose().await.expect("depose"));
    assert_eq!(operator.leader().await.expect("leader"), None);
    let loss = timeout(Duration::from_secs(3), leadership.lost())
        .await
        .expect("lost at the next renewal");
    assert_eq!(loss, LeaseLoss::NotOurs);
    let next = operator.campaign("new").await.expect("campaign");
    assert!(next.term() > leadership.term());
    assert!(
        !leadership.resign().await.expect("resign"),
        "not held any more"
    );
    assert_eq!(
        operator.leader().await.expect("leader").map(|l| l.value),
        Some("new".to_owned())
    );
    assert!(next.resign().await.expect("resign"));
}

/// A campaign dropped while it waits leaves no candidacy behind.
pub async fn election_cancelled_campaign_leaves_nothing<H: Harness>(harness: &H)
where
    H::Backend: ElectionBackend,
    <H::Backend as ElectionBackend>::Campaign: Clone,
{
    let name = fresh_name("election-cancel");
    let leader = election_of(harness, &name).await;
    let leadership = leader.campaign("leader").await.expect("campaign");
    let quitter = election_of(harness, &name).await;
    let dropped = timeout(Duration::from_millis(300), quitter.campaign("quitter")).await;
    assert!(dropped.is_err(), "someone leads");
    let bounded = quitter
        .campaign_with(
            "bounded",
            &LockOptions::new().wait(Duration::from_millis(200)),
        )
        .await;
    assert!(
        matches!(bounded, Err(Error::NotAcquired { .. })),
        "{bounded:?}"
    );
    assert!(leadership.resign().await.expect("resign"));
    sleep(Duration::from_millis(300)).await;
    assert_eq!(
        quitter.leader().await.expect("leader"),
        None,
        "nobody campaigns"
    );
}

/// Bad input gets a typed error before any I/O.
pub async fn election_bad_input_is_rejected<H: Harness>(harness: &H)
where
    H::Backend: ElectionBackend,
    <H::Backend as ElectionBackend>::Campaign: Clone,
{
    let locker = Locker::new(harness.client().await);
    let too_long = "x".repeat(lock_core::options::MAX_NAME_LEN + 1);
    for bad in ["", too_long.as_str()] {
        assert!(matches!(
            locker.election(bad),
            Err(Error::InvalidName { .. })
        ));
    }
    let name = fresh_name("election-bad");
    let election = locker.election(&name).expect("a valid name");
    let result = election
        .campaign_with("v", &LockOptions::new().wait(Duration::ZERO))
        .await;
    assert!(
        matches!(result, Err(Error::InvalidOptions { .. })),
        "{result:?}"
    );
    assert_eq!(election.leader().await.expect("leader"), None);
}

/// Generates one `#[test]` per election conformance case for a harness expression whose
/// backend implements [`ElectionBackend`], as [`conformance_tests!`](crate::conformance_tests)
/// does for locks (`@sequence` included).
#[macro_export]
macro_rules! election_conformance_tests {
    (@sequence $harness:expr) => {
        $crate::election_conformance_tests! { @every run $harness }
    };
    ($harness:expr) => {
        $crate::election_conformance_tests! { @every cases $harness }
    };
    (@every $mode:ident $harness:expr) => {
        $crate::election_conformance_tests! { @$mode $harness;
            election_one_leader_at_a_time,
            election_a_crashed_leader_is_replaced,
            election_observers_see_each_change,
            election_depose,
            election_cancelled_campaign_leaves_nothing,
            election_bad_input_is_rejected,
        }
    };
    (@run $harness:expr; $($case:ident),* $(,)?) => {
        async {
            let harness = $harness;
            $($crate::election_conformance::$case(harness).await;)*
        }
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run(async {
                    let harness = $harness;
                    $crate::election_conformance::$case(&harness).await;
                });
            }
        )*
    };
}

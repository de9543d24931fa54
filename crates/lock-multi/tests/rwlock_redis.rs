//! Read-write locks over several nodes: a composite of the read sides of three Redis nodes and
//! one of their write sides are lock backends like any other, so MultiLock and RedLock compose
//! them, and over the same nodes and names they behave as one read-write lock: composite
//! readers share, a composite writer excludes them and they it.
//!
//! The three servers are shared by every case of this file (fresh names per case), started by
//! the first case and stopped when the last one running lets go.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{
    DynLockBackend, LockOptions, Locker, ReadWriteBackend, ReadWriteMode, ReleaseOutcome,
};
use lock_multi::{Composite, MultiLock, Quorum, RedLock};
use lock_redis::RedisBackend;
use lock_testkit::conformance::{fresh_name, run};
use lock_testkit::{RedisNodes, SharedFixture};

/// How long a woken waiter may take to get the lock: far under the 20 s leases of holders,
/// which would let it in without any wake-up.
const HAND_OFF: Duration = Duration::from_millis(700);

static SHARED: SharedFixture<RedisNodes> = SharedFixture::new();

fn shared_nodes() -> Arc<RedisNodes> {
    SHARED.get_or_start(|| RedisNodes::start(3).expect("start three redis-server nodes"))
}

/// Which side of every node a composite is made of.
#[derive(Clone, Copy)]
enum Side {
    Read,
    Write,
}

/// One client of the three nodes: a backend per node.
async fn backends(nodes: &RedisNodes) -> Vec<RedisBackend> {
    let mut backends = Vec::new();
    for url in nodes.urls() {
        backends.push(RedisBackend::connect(&url).await.expect("connect"));
    }
    backends
}

/// A composite (with its own client id) of one side of every node, on a new client.
async fn composite<P: Quorum + Default>(nodes: &RedisNodes, side: Side) -> Locker<Composite<P>> {
    let sides: Vec<Arc<dyn DynLockBackend>> = backends(nodes)
        .await
        .into_iter()
        .map(|backend| -> Arc<dyn DynLockBackend> {
            match side {
                Side::Read => Arc::new(backend.read_side()),
                Side::Write => Arc::new(backend.write_side()),
            }
        })
        .collect();
    Locker::new(Composite::new(sides).expect("three nodes"))
}

/// Holds that only a release is meant to end.
fn long() -> LockOptions {
    LockOptions::new().fixed_lease(Duration::from_secs(20))
}

/// The read-write state of `name` on every node, as one client of each sees it.
async fn modes(nodes: &RedisNodes, name: &str) -> Vec<Option<ReadWriteMode>> {
    let mut modes = Vec::new();
    for backend in backends(nodes).await {
        let state = Locker::new(backend)
            .read_write(name)
            .expect("a valid name")
            .state()
            .await
            .expect("state");
        modes.push(state.mode);
    }
    modes
}

/// Asserts that `name` is read on at least the policy's quorum of the three nodes and written on
/// none: a reader is granted once a quorum granted (MultiLock: all three), and a RedLock
/// reader's request to the remaining node may still be on its way, or refused there.
async fn assert_read_on_quorum<P: Quorum + Default>(nodes: &RedisNodes, name: &str) {
    let modes = modes(nodes, name).await;
    let reading = modes
        .iter()
        .filter(|mode| **mode == Some(ReadWriteMode::Read))
        .count();
    assert!(
        reading >= P::default().required(3)
            && modes.iter().all(|mode| *mode != Some(ReadWriteMode::Write)),
        "read on fewer nodes than a quorum: {modes:?}"
    );
}

/// Readers of two composites of read sides hold `name` at once (and a third reader joins), as
/// read holds on every node; a composite of write sides over the same nodes cannot get in
/// until the last of them leaves.
async fn composite_readers_share<P: Quorum + Default>() {
    let nodes = shared_nodes();
    let name = fresh_name("rw-composite-share");
    let first = composite::<P>(&nodes, Side::Read).await;
    let second = composite::<P>(&nodes, Side::Read).await;
    let writer = composite::<P>(&nodes, Side::Write).await;
    let a = first.lock_with(&name, &long()).await.expect("read");
    let b = tokio::time::timeout(Duration::from_secs(2), second.lock_with(&name, &long()))
        .await
        .expect("a second reader gets in at once")
        .expect("read");
    let c = second.try_lock(&name).await.expect("try").expect("shared");
    assert_read_on_quorum::<P>(&nodes, &name).await;
    assert!(writer.try_lock(&name).await.expect("try").is_none(), "read");
    for guard in [a, c] {
        assert!(guard.release().await.expect("release").was_held());
    }
    assert!(writer.try_lock(&name).await.expect("try").is_none(), "read");
    assert_eq!(
        b.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(modes(&nodes, &name).await, vec![None; 3], "free everywhere");
    let writing = writer.try_lock(&name).await.expect("try").expect("free");
    assert!(writing.release().await.expect("release").was_held());
}

/// A composite writer keeps composite readers out, and its release lets every waiting reader
/// (of two composites) in at once; then they keep a composite writer out, whose wait ends at
/// the release of the last reader.
async fn composite_writer_excludes_readers<P: Quorum + Default>() {
    let nodes = shared_nodes();
    let name = fresh_name("rw-composite-excl");
    let writer = composite::<P>(&nodes, Side::Write).await;
    let readers = [
        composite::<P>(&nodes, Side::Read).await,
        composite::<P>(&nodes, Side::Read).await,
    ];
    let writing = writer.lock_with(&name, &long()).await.expect("write");
    assert_eq!(
        modes(&nodes, &name).await,
        vec![Some(ReadWriteMode::Write); 3]
    );
    let mut waiting = Vec::new();
    for reader in readers.iter().chain(readers.iter()) {
        assert!(
            reader.try_lock(&name).await.expect("try").is_none(),
            "written"
        );
        waiting.push(tokio::spawn({
            let reader = reader.clone();
            let name = name.clone();
            async move {
                let guard = reader.lock_with(&name, &long()).await.expect("read");
                (Instant::now(), guard)
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(waiting.iter().all(|task| !task.is_finished()), "written");
    let released_at = Instant::now();
    assert_eq!(
        writing.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let mut guards = Vec::new();
    for task in waiting {
        let (at, guard) = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("every reader woken")
            .expect("reader task");
        let hand_off = at.duration_since(released_at);
        assert!(hand_off < HAND_OFF, "a reader took {hand_off:?}");
        guards.push(guard);
    }
    // Woken by the first node's release, a RedLock reader may try another node before the
    // writer's release reaches it.
    assert_read_on_quorum::<P>(&nodes, &name).await;

    let next_writer = tokio::spawn({
        let writer = writer.clone();
        let name = name.clone();
        async move {
            let guard = writer.lock_with(&name, &long()).await.expect("write");
            (Instant::now(), guard)
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!next_writer.is_finished(), "readers hold it");
    let last = guards.pop().expect("four readers");
    for guard in guards {
        assert!(guard.release().await.expect("release").was_held());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!next_writer.is_finished(), "one reader still holds it");
    let released_at = Instant::now();
    assert!(last.release().await.expect("release").was_held());
    let (at, writing) = tokio::time::timeout(Duration::from_secs(5), next_writer)
        .await
        .expect("the writer is woken")
        .expect("writer task");
    let hand_off = at.duration_since(released_at);
    assert!(hand_off < HAND_OFF, "the writer took {hand_off:?}");
    assert!(writing.release().await.expect("release").was_held());
    assert_eq!(modes(&nodes, &name).await, vec![None; 3], "free everywhere");
}

#[test]
fn multilock_readers_share() {
    run(composite_readers_share::<lock_multi::AllNodes>());
}

#[test]
fn redlock_readers_share() {
    run(composite_readers_share::<lock_multi::Majority>());
}

#[test]
fn multilock_writer_excludes_readers() {
    run(composite_writer_excludes_readers::<lock_multi::AllNodes>());
}

#[test]
fn redlock_writer_excludes_readers() {
    run(composite_writer_excludes_readers::<lock_multi::Majority>());
}

/// A MultiLock of read sides needs every node: with one node written by someone else it is
/// refused, and gives back the read holds it got on the others (nothing is left there), while
/// a RedLock of read sides gets in on the other two (a majority).
#[test]
fn one_written_node_refuses_a_multilock_reader_not_a_redlock_reader() {
    run(async {
        let nodes = shared_nodes();
        let name = fresh_name("rw-composite-partial");
        let urls = nodes.urls();
        let outsider = Locker::new(RedisBackend::connect(&urls[2]).await.expect("connect"))
            .read_write(&name)
            .expect("a valid name");
        let outside = outsider.write_with(&long()).await.expect("write");

        let multi: Locker<MultiLock> = composite(&nodes, Side::Read).await;
        assert!(multi.try_lock(&name).await.expect("try").is_none(), "all");
        // What it got on the first two nodes was given back (in the background: wait a bit).
        let deadline = Instant::now() + Duration::from_secs(2);
        while modes(&nodes, &name).await[..2] != [None, None] {
            assert!(Instant::now() < deadline, "a partial read hold was left");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let red: Locker<RedLock> = composite(&nodes, Side::Read).await;
        let reading = red.try_lock(&name).await.expect("try").expect("a majority");
        assert_eq!(
            modes(&nodes, &name).await,
            vec![
                Some(ReadWriteMode::Read),
                Some(ReadWriteMode::Read),
                Some(ReadWriteMode::Write)
            ]
        );
        assert!(reading.release().await.expect("release").was_held());
        assert!(outside.release().await.expect("release").was_held());
        assert_eq!(modes(&nodes, &name).await, vec![None; 3]);
    });
}

/// The composites of read sides and of write sides are two clients with owner fields of their
/// own: the writer's task asking the read composite is kept out by its own write hold (no
/// downgrade), and a reader's task asking the write composite is kept out by its own read hold
/// (not refused as an upgrade), as docs/multi-node.md says.
#[test]
fn composites_of_the_two_sides_do_not_downgrade_or_refuse_upgrades() {
    run(async {
        let nodes = shared_nodes();
        let name = fresh_name("rw-composite-grade");
        let reader: Locker<MultiLock> = composite(&nodes, Side::Read).await;
        let writer: Locker<MultiLock> = composite(&nodes, Side::Write).await;
        let writing = writer.lock_with(&name, &long()).await.expect("write");
        assert!(
            reader.try_lock(&name).await.expect("try").is_none(),
            "no downgrade across composites"
        );
        assert!(writing.release().await.expect("release").was_held());
        let reading = reader.lock_with(&name, &long()).await.expect("read");
        assert!(
            writer.try_lock(&name).await.expect("not refused").is_none(),
            "an upgrade across composites waits"
        );
        assert!(reading.release().await.expect("release").was_held());
        assert_eq!(modes(&nodes, &name).await, vec![None; 3]);
    });
}

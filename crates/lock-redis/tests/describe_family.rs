//! `RedisBackend::describe` and `list_locks` on every kind of the family, each made with the
//! real API on a real server: a read-write lock, a fair lock with a queue, an election,
//! lease-bound permits, a semaphore, a countdown latch, and a count nobody waits on.

use std::time::Duration;

use lock_core::{LockOptions, Locker, ReadWriteMode, ReleaseOutcome, Wait};
use lock_redis::{Layout, LockDescription, RedisBackend};
use lock_testkit::RedisServer;
use tokio::time::{Instant, sleep};

async fn connect(server: &RedisServer) -> RedisBackend {
    RedisBackend::connect(server.url()).await.expect("connect")
}

/// Describes `name` until `ready` holds (a waiter subscribed, a queue filled), at most 5 s.
async fn described(
    backend: &RedisBackend,
    name: &str,
    ready: impl Fn(&LockDescription) -> bool,
) -> LockDescription {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lock = backend.describe(name).await.expect("describe");
        if ready(&lock) || Instant::now() > deadline {
            return lock;
        }
        sleep(Duration::from_millis(10)).await;
    }
}

/// A read-write lock in read mode (two readers, a writer waiting on its channel), then in
/// write mode; the readers' hold keys are not listed as names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_lock() {
    let server = RedisServer::start().expect("start redis-server");
    let backend = connect(&server).await;
    let (a, b) = (
        Locker::new(backend.clone()),
        Locker::new(connect(&server).await),
    );
    for name in ["fam:rw", "{fam}:rw"] {
        let first = a
            .read_write(name)
            .expect("name")
            .read()
            .await
            .expect("read");
        let second = b
            .read_write(name)
            .expect("name")
            .read()
            .await
            .expect("read");
        let writer = Locker::new(connect(&server).await)
            .read_write(name)
            .expect("name");
        let waiting = tokio::spawn(async move { writer.write().await.map(drop) });
        let lock = described(&backend, name, |lock| lock.channels.read_write > 0).await;
        assert_eq!(lock.layout, Layout::ReadWrite, "{lock:?}");
        assert_eq!(lock.mode, Some(ReadWriteMode::Read));
        let mut readers = vec![
            (first.owner_field().to_owned(), 1),
            (second.owner_field().to_owned(), 1),
        ];
        readers.sort();
        assert_eq!(lock.readers, readers);
        assert_eq!(lock.holders, readers);
        assert_eq!(lock.writer, None);
        assert!(lock.ttl.is_some());
        assert_eq!(lock.channels.read_write, 1, "the waiting writer");
        let list = backend.list_locks("*", 1000).await.expect("list");
        let names: Vec<&str> = list.locks.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, [name], "the hold keys are not names");
        drop((first, second));
        waiting.await.expect("the writer").expect("written");

        let write = a
            .read_write(name)
            .expect("name")
            .write()
            .await
            .expect("write");
        let lock = backend.describe(name).await.expect("describe");
        assert_eq!(lock.layout, Layout::ReadWrite);
        assert_eq!(lock.mode, Some(ReadWriteMode::Write));
        assert_eq!(lock.writer, Some((write.owner_field().to_owned(), 1)));
        assert!(lock.readers.is_empty());
        assert_eq!(
            write.release().await.expect("release"),
            ReleaseOutcome::Released
        );
        assert_eq!(
            backend.describe(name).await.expect("describe").layout,
            Layout::Free
        );
    }
}

/// A fair lock with one waiter queued: its holder, and the queue with the waiter's deadline;
/// the queue and its deadlines are not listed as names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock() {
    let server = RedisServer::start().expect("start redis-server");
    let backend = connect(&server).await;
    let holder = Locker::new(backend.clone()).fair("fam:fair").expect("name");
    let guard = holder.lock().await.expect("lock");
    let other = Locker::new(connect(&server).await)
        .fair("fam:fair")
        .expect("name");
    let waiter = tokio::spawn(async move {
        let guard = other
            .lock_with(&LockOptions::new().wait(Duration::from_secs(10)))
            .await
            .expect("the waiter's turn");
        guard.owner_field().to_owned()
    });
    let lock = described(&backend, "fam:fair", |lock| !lock.queue.is_empty()).await;
    assert_eq!(lock.layout, Layout::Fair, "{lock:?}");
    assert_eq!(lock.holders, vec![(guard.owner_field().to_owned(), 1)]);
    assert_eq!(lock.queue.len(), 1);
    let deadline = lock.queue[0].1.expect("a queue deadline");
    assert!(
        deadline <= lock_core::fair_backend::QUEUE_TIMEOUT && deadline > Duration::from_secs(5)
    );
    let list = backend.list_locks("*", 1000).await.expect("list");
    let names: Vec<&str> = list.locks.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["fam:fair"]);
    assert_eq!(list.locks[0].1.layout, Layout::Fair);
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let queued = waiter.await.expect("the waiter");
    assert_eq!(lock.queue[0].0, queued);
}

/// An election with a leader: its value, its lock's holder, an observer on its channel; the
/// leader values are not listed as a name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election() {
    let server = RedisServer::start().expect("start redis-server");
    let backend = connect(&server).await;
    let election = Locker::new(backend.clone())
        .election("fam:leader")
        .expect("name");
    let leadership = election.campaign("node-a").await.expect("campaign");
    let mut observer = election.observe();
    // The first call reads the leader; the second waits, subscribed, for a change.
    let observing = tokio::spawn(async move {
        observer.changed().await?;
        observer.changed().await.map(|_| ())
    });
    let lock = described(&backend, "fam:leader", |lock| lock.channels.election > 0).await;
    assert_eq!(lock.layout, Layout::Election, "{lock:?}");
    assert_eq!(lock.leader_value.as_deref(), Some("node-a"));
    assert_eq!(
        lock.holders,
        vec![(leadership.guard().owner_field().to_owned(), 1)]
    );
    assert_eq!(lock.fencing_counter, Some(leadership.term()));
    assert_eq!(lock.channels.election, 1);
    let list = backend.list_locks("*", 1000).await.expect("list");
    let names: Vec<&str> = list.locks.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["fam:leader"]);
    observing.abort();
    leadership.resign().await.expect("resign");
}

/// Lease-bound permits: the count, each permit out with its lease, its holders; with none out
/// the count alone; the permits out are not listed as a name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_bound_permits() {
    let server = RedisServer::start().expect("start redis-server");
    let backend = connect(&server).await;
    let permits = Locker::new(backend.clone())
        .permits("fam:gpu")
        .expect("name");
    assert!(permits.try_set_permits(3).await.expect("set"));
    let one = permits.acquire().await.expect("a permit");
    let two = permits.acquire().await.expect("a permit");
    let lock = backend.describe("fam:gpu").await.expect("describe");
    assert_eq!(lock.layout, Layout::Permits, "{lock:?}");
    assert_eq!(lock.available, Some(1));
    assert_eq!(lock.permits.len(), 2);
    assert!(
        lock.permits
            .iter()
            .all(|(_, left)| *left > Duration::from_secs(20))
    );
    let held: u32 = lock.holders.iter().map(|(_, count)| count).sum();
    assert_eq!(held, 2);
    assert!(
        lock.holders
            .iter()
            .any(|(owner, _)| owner == one.owner_field())
    );
    assert_eq!(lock.expired_permits, 0);
    let list = backend.list_locks("*", 1000).await.expect("list");
    let names: Vec<&str> = list.locks.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["fam:gpu"]);
    drop((one, two));
    let deadline = Instant::now() + Duration::from_secs(5);
    let counted = loop {
        let lock = backend.describe("fam:gpu").await.expect("describe");
        if lock.layout != Layout::Permits || Instant::now() > deadline {
            break lock;
        }
        sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(counted.layout, Layout::Counter, "none out: a plain count");
    assert_eq!(counted.available, Some(3));
}

/// A semaphore and a latch are told apart by their waiters; with none, a count; a latch whose
/// name has its own hash tag has its channel unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_and_latch() {
    let server = RedisServer::start().expect("start redis-server");
    let backend = connect(&server).await;
    let locker = Locker::new(backend.clone());
    let semaphore = locker.semaphore("fam:pool").expect("semaphore");
    assert!(semaphore.try_set_permits(1).await.expect("set"));
    let idle = backend.describe("fam:pool").await.expect("describe");
    assert_eq!(idle.layout, Layout::Counter);
    assert_eq!(idle.available, Some(1));
    semaphore.acquire(1).await.expect("acquire");
    let other = Locker::new(connect(&server).await)
        .semaphore("fam:pool")
        .expect("semaphore");
    let waiting = tokio::spawn(async move {
        other
            .acquire_with(1, Wait::Upto(Duration::from_secs(10)))
            .await
    });
    let lock = described(&backend, "fam:pool", |lock| lock.channels.semaphore > 0).await;
    assert_eq!(lock.layout, Layout::Semaphore, "{lock:?}");
    assert_eq!(lock.available, Some(0));
    assert_eq!(lock.channels.latch, Some(0));
    semaphore.release(1).await.expect("release");
    waiting.await.expect("the waiter").expect("acquired");

    for name in ["fam:ready", "{fam}:ready"] {
        let latch = locker.latch(name).expect("latch");
        assert!(latch.try_set_count(2).await.expect("set"));
        let other = Locker::new(connect(&server).await)
            .latch(name)
            .expect("latch");
        let waiting = tokio::spawn(async move { other.wait().await });
        if name.contains('{') {
            sleep(Duration::from_millis(200)).await;
            let lock = backend.describe(name).await.expect("describe");
            assert_eq!(lock.channels.latch, None, "another slot: not read");
            assert_eq!(lock.layout, Layout::Counter, "{lock:?}");
        } else {
            let lock = described(&backend, name, |lock| {
                lock.channels.latch.is_some_and(|latch| latch > 0)
            })
            .await;
            assert_eq!(lock.layout, Layout::Latch, "{lock:?}");
            assert_eq!(lock.available, Some(2));
        }
        latch.count_down().await.expect("count down");
        latch.count_down().await.expect("count down");
        waiting.await.expect("the waiter").expect("opened");
    }
    let list = backend.list_locks("*", 1000).await.expect("list");
    let names: Vec<&str> = list.locks.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["fam:pool"], "an opened latch is deleted");
}

/// On a 3-primary cluster (sharded pub/sub): each name's one read stays in its slot, also for
/// names with their own hash tag, whose latch channel hashes elsewhere and is not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster() {
    let cluster = lock_testkit::RedisCluster::start(3, 0).expect("start a cluster");
    let backend = RedisBackend::builder(lock_redis::RedisTarget::cluster(cluster.urls()))
        .connect()
        .await
        .expect("connect");
    let locker = Locker::new(backend.clone());
    for name in ["fam:c", "{fam:t}:c"] {
        let reader = locker
            .read_write(&format!("{name}:rw"))
            .expect("name")
            .read()
            .await
            .expect("read");
        let lock = backend
            .describe(&format!("{name}:rw"))
            .await
            .expect("describe");
        assert_eq!(lock.layout, Layout::ReadWrite);
        assert_eq!(lock.readers, vec![(reader.owner_field().to_owned(), 1)]);
        let gpu = format!("{name}:gpu");
        let permits = locker.permits(&gpu).expect("name");
        assert!(permits.try_set_permits(2).await.expect("set"));
        let permit = permits.acquire().await.expect("a permit");
        let lock = backend.describe(&gpu).await.expect("describe");
        assert_eq!(lock.layout, Layout::Permits);
        assert_eq!(lock.permits.len(), 1);
        let ready = format!("{name}:ready");
        let latch = locker.latch(&ready).expect("latch");
        assert!(latch.try_set_count(1).await.expect("set"));
        let lock = backend.describe(&ready).await.expect("describe");
        assert_eq!(lock.layout, Layout::Counter);
        assert_eq!(lock.channels.latch.is_none(), name.contains('{'));
        let list = backend
            .list_locks(
                &format!("{}*", name.replace('{', "\\{").replace('}', "\\}")),
                1000,
            )
            .await
            .expect("list");
        let names: Vec<&str> = list.locks.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [gpu.as_str(), ready.as_str(), &format!("{name}:rw")],
            "{name}"
        );
        drop((reader, permit));
    }
}

//! `distlock status`, `list` and `unlock --force` on every kind of the family besides the two
//! locks (see `status.rs`), each made with the library's own API in this process while the tool
//! runs against the same real server.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use distlock::{LockOptions, Locker, RedisBackend, Wait};
use lock_testkit::RedisServer;
use serde_json::Value;
use tokio::runtime::Runtime;

const DISTLOCK: &str = env!("CARGO_BIN_EXE_distlock");

fn output(url: &str, args: &[&str]) -> Output {
    Command::new(DISTLOCK)
        .env("DISTLOCK_URL", url)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run distlock")
}

fn text(url: &str, name: &str) -> String {
    let shown = output(url, &["status", name]);
    assert_eq!(shown.status.code(), Some(0), "{shown:?}");
    String::from_utf8_lossy(&shown.stdout).into_owned()
}

fn json(url: &str, name: &str) -> Value {
    let shown = output(url, &["status", name, "--json"]);
    assert_eq!(shown.status.code(), Some(0), "{shown:?}");
    serde_json::from_slice(&shown.stdout).expect("one JSON object")
}

/// `unlock --force --yes NAME`: its exit code and what it printed (stdout, stderr).
fn force(url: &str, name: &str) -> (Option<i32>, String, String) {
    let shown = output(url, &["unlock", "--force", "--yes", name]);
    (
        shown.status.code(),
        String::from_utf8_lossy(&shown.stdout).into_owned(),
        String::from_utf8_lossy(&shown.stderr).into_owned(),
    )
}

fn wait_for(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn setup() -> (RedisServer, String, Runtime) {
    let server = RedisServer::start().expect("start a server");
    let url = server.url();
    let runtime = Runtime::new().expect("a runtime");
    (server, url, runtime)
}

fn connect(runtime: &Runtime, url: &str) -> RedisBackend {
    runtime
        .block_on(RedisBackend::connect(url))
        .expect("connect")
}

/// A read-write lock: its mode, readers and writer as text and JSON, `rwlock` in `list`;
/// `unlock --force` deletes it in read mode and in write mode, and a reader waiting on the
/// writer gets in.
#[test]
fn read_write_lock() {
    let (_server, url, runtime) = setup();
    let rw = Locker::new(connect(&runtime, &url))
        .read_write("fam:rw")
        .expect("a valid name");
    let reader = runtime.block_on(rw.read()).expect("read");
    let shown = json(&url, "fam:rw");
    assert_eq!(shown["kind"], "rwlock");
    assert_eq!(shown["state"], "held");
    assert_eq!(shown["mode"], "read");
    assert_eq!(shown["readers"][0]["owner"], reader.owner_field());
    assert_eq!(shown["writer"], Value::Null);
    let shown = text(&url, "fam:rw");
    assert!(
        shown.starts_with("fam:rw: held for reading (read-write lock"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("  reader {} (1 read hold)", reader.owner_field())),
        "{shown}"
    );
    let listed = output(&url, &["list", "fam:*"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.starts_with("fam:rw\trwlock\t"), "{listed}");
    let (code, said, _) = force(&url, "fam:rw");
    assert_eq!((code, said.as_str()), (Some(0), "fam:rw: released\n"));
    assert_eq!(json(&url, "fam:rw")["state"], "free");
    drop(reader);

    let writer = runtime.block_on(rw.write()).expect("write");
    let other = Locker::new(connect(&runtime, &url))
        .read_write("fam:rw")
        .expect("a valid name");
    let waiting = runtime.spawn(async move {
        let started = Instant::now();
        let guard = other.read().await.expect("read after the writer");
        drop(guard);
        started.elapsed()
    });
    wait_for("the reader to wait", || {
        json(&url, "fam:rw")["waiters"]["read_write"] == 1
    });
    let shown = json(&url, "fam:rw");
    assert_eq!(shown["mode"], "write");
    assert_eq!(shown["writer"]["owner"], writer.owner_field());
    assert!(text(&url, "fam:rw").contains("held for writing"));
    let (code, _, _) = force(&url, "fam:rw");
    assert_eq!(code, Some(0));
    let waited = runtime.block_on(waiting).expect("the reader");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    drop(writer);
}

/// A fair lock: its holder and queue; `unlock --force` tells the head of the queue, who gets
/// the lock at once (not at its next attempt, seconds later).
#[test]
fn fair_lock() {
    let (_server, url, runtime) = setup();
    let holder = Locker::new(connect(&runtime, &url))
        .fair("fam:fair")
        .expect("a valid name");
    let guard = runtime.block_on(holder.lock()).expect("lock");
    let other = Locker::new(connect(&runtime, &url))
        .fair("fam:fair")
        .expect("a valid name");
    let waiting = runtime.spawn(async move {
        let guard = other
            .lock_with(&LockOptions::new().wait(Duration::from_secs(20)))
            .await
            .expect("the waiter's turn");
        let at = Instant::now();
        drop(guard);
        at
    });
    wait_for("the queue", || {
        json(&url, "fam:fair")["queue"]
            .as_array()
            .is_some_and(|queue| queue.len() == 1)
    });
    let shown = json(&url, "fam:fair");
    assert_eq!(shown["kind"], "fair");
    assert_eq!(shown["holders"][0]["owner"], guard.owner_field());
    assert!(shown["queue"][0]["place_ms"].as_u64().expect("a deadline") > 1000);
    let shown = text(&url, "fam:fair");
    assert!(shown.starts_with("fam:fair: held (fair lock"), "{shown}");
    assert!(shown.contains("  queued 1. "), "{shown}");
    let listed = output(&url, &["list", "*"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(
        listed.lines().count(),
        1,
        "the queue is not a name: {listed}"
    );
    assert!(listed.starts_with("fam:fair\tfair\t"), "{listed}");
    let forced = Instant::now();
    let (code, said, _) = force(&url, "fam:fair");
    assert_eq!((code, said.as_str()), (Some(0), "fam:fair: released\n"));
    let got = runtime.block_on(waiting).expect("the waiter");
    assert!(
        got.duration_since(forced) < Duration::from_millis(1500),
        "the head was told: {:?}",
        got.duration_since(forced)
    );
    drop(guard);
}

/// An election: the leader's value; `unlock --force` deposes it.
#[test]
fn election() {
    let (_server, url, runtime) = setup();
    let election = Locker::new(connect(&runtime, &url))
        .election("fam:leader")
        .expect("a valid name");
    let leadership = runtime
        .block_on(election.campaign("node-a"))
        .expect("campaign");
    let shown = json(&url, "fam:leader");
    assert_eq!(shown["kind"], "election");
    assert_eq!(shown["leader_value"], "node-a");
    assert_eq!(shown["fencing_counter"], leadership.term());
    assert!(text(&url, "fam:leader").contains("  leader value node-a\n"));
    let listed = output(&url, &["list", "*", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(listed["locks"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed["locks"][0]["kind"], "election");
    let (code, said, _) = force(&url, "fam:leader");
    assert_eq!((code, said.as_str()), (Some(0), "fam:leader: deposed\n"));
    assert_eq!(runtime.block_on(election.leader()).expect("leader"), None);
    assert_eq!(json(&url, "fam:leader")["state"], "free");
    drop(leadership);
}

/// Lease-bound permits: available, the permits out; `unlock --force` gives every permit back,
/// leaving the count.
#[test]
fn lease_bound_permits() {
    let (_server, url, runtime) = setup();
    let permits = Locker::new(connect(&runtime, &url))
        .permits("fam:gpu")
        .expect("a valid name");
    assert!(runtime.block_on(permits.try_set_permits(2)).expect("set"));
    let permit = runtime.block_on(permits.acquire()).expect("a permit");
    let shown = json(&url, "fam:gpu");
    assert_eq!(shown["kind"], "permits");
    assert_eq!(shown["available"], 1);
    assert_eq!(shown["holders"][0]["owner"], permit.owner_field());
    assert_eq!(shown["permits"].as_array().map(Vec::len), Some(1));
    assert!(shown["permits"][0]["ttl_ms"].as_u64().expect("a lease") > 1000);
    let shown = text(&url, "fam:gpu");
    assert!(shown.contains("  available 1\n"), "{shown}");
    assert!(shown.contains("(1 permit)"), "{shown}");
    let listed = output(&url, &["list", "*"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(
        listed.lines().count(),
        1,
        "the permits out are not a name: {listed}"
    );
    assert!(listed.starts_with("fam:gpu\tpermits\t"), "{listed}");
    let (code, said, _) = force(&url, "fam:gpu");
    assert_eq!(
        (code, said.as_str()),
        (Some(0), "fam:gpu: every permit given back\n")
    );
    let shown = json(&url, "fam:gpu");
    assert_eq!(shown["kind"], "semaphore-or-latch");
    assert_eq!(shown["count"], 2);
    drop(permit);
}

/// Counts: a semaphore and a latch told apart by their waiters, or a count nobody waits on;
/// `unlock --force` leaves each alone and says which library call changes it.
#[test]
fn semaphore_and_latch_counts() {
    let (_server, url, runtime) = setup();
    let locker = Locker::new(connect(&runtime, &url));
    let semaphore = locker.semaphore("fam:pool").expect("semaphore");
    assert!(runtime.block_on(semaphore.try_set_permits(1)).expect("set"));
    let shown = json(&url, "fam:pool");
    assert_eq!(shown["kind"], "semaphore-or-latch");
    assert_eq!(shown["state"], "counter");
    assert_eq!(shown["count"], 1);
    assert!(
        text(&url, "fam:pool").contains("a semaphore or a latch"),
        "{}",
        text(&url, "fam:pool")
    );
    let (code, _, said) = force(&url, "fam:pool");
    assert_eq!(code, Some(2));
    assert!(
        said.contains("Semaphore::reset") && said.contains("CountDownLatch::delete"),
        "{said}"
    );

    let other = Locker::new(connect(&runtime, &url))
        .semaphore("fam:pool")
        .expect("semaphore");
    let waiting = runtime.spawn(async move {
        other
            .acquire_with(2, Wait::Upto(Duration::from_secs(20)))
            .await
    });
    wait_for("the semaphore's waiter", || {
        json(&url, "fam:pool")["kind"] == "semaphore"
    });
    let shown = json(&url, "fam:pool");
    assert_eq!(shown["available"], 1);
    assert_eq!(shown["waiters"]["semaphore"], 1);
    assert!(text(&url, "fam:pool").starts_with("fam:pool: semaphore ("));
    let (code, _, said) = force(&url, "fam:pool");
    assert_eq!(code, Some(2));
    assert!(
        said.contains("Semaphore::reset") && !said.contains("CountDownLatch"),
        "{said}"
    );
    assert_eq!(json(&url, "fam:pool")["available"], 1, "left alone");
    assert_eq!(runtime.block_on(semaphore.release(1)).expect("release"), 2);
    runtime
        .block_on(waiting)
        .expect("the waiter")
        .expect("acquired");

    let latch = locker.latch("fam:ready").expect("latch");
    assert!(runtime.block_on(latch.try_set_count(1)).expect("set"));
    let other = Locker::new(connect(&runtime, &url))
        .latch("fam:ready")
        .expect("latch");
    let waiting = runtime.spawn(async move { other.wait().await });
    wait_for("the latch's waiter", || {
        json(&url, "fam:ready")["kind"] == "latch"
    });
    assert_eq!(json(&url, "fam:ready")["count"], 1);
    let listed = output(&url, &["list", "fam:*"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("fam:ready\tlatch\tcount 1\t"), "{listed}");
    let (code, _, said) = force(&url, "fam:ready");
    assert_eq!(code, Some(2));
    assert!(
        said.contains("CountDownLatch::delete") && !said.contains("Semaphore"),
        "{said}"
    );
    assert_eq!(runtime.block_on(latch.count_down()).expect("count down"), 0);
    runtime
        .block_on(waiting)
        .expect("the waiter")
        .expect("opened");
}

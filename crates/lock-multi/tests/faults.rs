//! Fault injection for both composites (MultiLock and RedLock) over real Redis nodes: foreign
//! holds on every subset of the nodes, a paused node, killed nodes, request latency beyond the
//! lease, and what errors and release outcomes report. Every check of what is left on a node is
//! made with raw Redis commands, not through the library.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    DynLockBackend, Error, LeaseLoss, LockBackend, LockGuard, LockOptions, Locker, Owner,
    ReleaseOutcome,
};
use lock_multi::{Composite, MultiLock, Quorum, RedLock};
use lock_redis::RedisBackend;
use lock_testkit::{RedisNodes, SlowNode, granted};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// One single-node backend per URL (each with its own client id and connection).
async fn connect_all(urls: &[String]) -> Vec<RedisBackend> {
    let mut backends = Vec::with_capacity(urls.len());
    for url in urls {
        backends.push(RedisBackend::connect(url.as_str()).await.expect("connect"));
    }
    backends
}

/// The backends as composite nodes (clones share the connection).
fn as_nodes(backends: &[RedisBackend]) -> Vec<Arc<dyn DynLockBackend>> {
    backends
        .iter()
        .map(|backend| Arc::new(backend.clone()) as Arc<dyn DynLockBackend>)
        .collect()
}

/// A composite with default settings over fresh connections to every URL.
async fn composite<P: Quorum + Default>(urls: &[String]) -> Composite<P> {
    Composite::new(as_nodes(&connect_all(urls).await)).expect("valid composite")
}

/// One raw connection per node, for checks that bypass the library.
async fn raw_connections(nodes: &RedisNodes) -> Vec<MultiplexedConnection> {
    let mut connections = Vec::with_capacity(nodes.len());
    for node in nodes {
        connections.push(node.connection().await);
    }
    connections
}

/// `HGETALL name`: the owner fields and hold counts of the lock hash on one node.
async fn hgetall(connection: &MultiplexedConnection, name: &str) -> HashMap<String, i64> {
    let mut connection = connection.clone();
    redis::cmd("HGETALL")
        .arg(name)
        .query_async(&mut connection)
        .await
        .expect("HGETALL")
}

/// `EXISTS name` on one node.
async fn exists(connection: &MultiplexedConnection, name: &str) -> bool {
    let mut connection = connection.clone();
    let count: i64 = redis::cmd("EXISTS")
        .arg(name)
        .query_async(&mut connection)
        .await
        .expect("EXISTS");
    count == 1
}

/// The fields of `hash` that belong to the backend with this client id.
fn fields_of<'a>(hash: &'a HashMap<String, i64>, client_id: &str) -> Vec<&'a str> {
    let prefix = format!("{client_id}:");
    hash.keys()
        .filter(|field| field.starts_with(&prefix))
        .map(String::as_str)
        .collect()
}

/// Asserts that no field of `client_id` is left in the lock hash `name` on any node.
async fn assert_nothing_of(connections: &[MultiplexedConnection], name: &str, client_id: &str) {
    for (i, connection) in connections.iter().enumerate() {
        let hash = hgetall(connection, name).await;
        let ours = fields_of(&hash, client_id);
        assert!(
            ours.is_empty(),
            "{name}: node {i} still holds fields of {client_id}: {hash:?}"
        );
    }
}

/// Polls `EXISTS name` on one node until it is gone, for at most `within`.
async fn gone_within(connection: &MultiplexedConnection, name: &str, within: Duration) -> bool {
    let until = Instant::now() + within;
    loop {
        if !exists(connection, name).await {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn quorum_failed_nodes(error: &Error) -> Option<Vec<usize>> {
    match error {
        Error::Quorum(quorum) => {
            let mut failed: Vec<usize> = quorum.failures.iter().map(|f| f.node).collect();
            failed.sort_unstable();
            Some(failed)
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Foreign holds on every subset of the nodes
// ---------------------------------------------------------------------------------------------

/// One no-wait attempt by `locker` on `name`, whose masked nodes (`foreign_fields[i]` set) are
/// held by a foreign owner; checks the outcome and what is left on every node.
async fn attempt_against_foreign_holds<P: Quorum>(
    locker: &Locker<Composite<P>>,
    name: &str,
    options: &LockOptions,
    connections: &[MultiplexedConnection],
    foreign_fields: &[Option<String>],
    expect_grant: bool,
) {
    let n = connections.len();
    let free = foreign_fields.iter().filter(|f| f.is_none()).count();
    let client_id = LockBackend::client_id(locker.backend()).to_owned();
    let guard = granted(locker.lock_with(name, options).await)
        .unwrap_or_else(|error| panic!("{name}: attempt failed: {error}"));
    assert_eq!(
        guard.is_some(),
        expect_grant,
        "{name}: granted with {free} of {n} nodes free"
    );
    if let Some(guard) = guard {
        assert!(guard.owner_field().starts_with(&format!("{client_id}:")));
        // Ours on enough free nodes, and never on a foreign-held one. (The attempt is decided as
        // soon as a quorum grants, so a free node's grant may still be on its way.)
        let mut ours = 0;
        for (i, connection) in connections.iter().enumerate() {
            let hash = hgetall(connection, name).await;
            let held_here = hash.get(guard.owner_field()).copied();
            if foreign_fields[i].is_some() {
                assert_eq!(held_here, None, "{name}: node {i}: {hash:?}");
            } else if held_here == Some(1) {
                ours += 1;
            }
        }
        // At least a majority (a MultiLock is granted only with every node free and granting).
        assert!(ours > n / 2, "{name}: ours on {ours} of {free} free nodes");
        // Foreign-held nodes answer "not held": nothing of ours is left there, so the release is
        // complete.
        let outcome = guard.release().await.expect("release");
        assert_eq!(outcome, ReleaseOutcome::Released, "{name}: release");
    }
    // Nothing of ours anywhere; the foreign holds intact; the free nodes empty.
    assert_nothing_of(connections, name, &client_id).await;
    for (i, connection) in connections.iter().enumerate() {
        let hash = hgetall(connection, name).await;
        match &foreign_fields[i] {
            Some(field) => assert_eq!(
                hash,
                HashMap::from([(field.clone(), 1)]),
                "{name}: node {i}: the foreign hold changed"
            ),
            None => assert!(hash.is_empty(), "{name}: node {i} not empty: {hash:?}"),
        }
    }
}

async fn every_mask_of_foreign_held_nodes(n: usize) {
    let nodes = RedisNodes::start(n).expect("start redis nodes");
    let urls = nodes.urls();
    let connections = raw_connections(&nodes).await;
    let backends = connect_all(&urls).await;
    // The foreign owner: a single-node locker per node, each with its own client id.
    let foreign: Vec<Locker<RedisBackend>> = backends
        .iter()
        .map(|backend| Locker::new(backend.clone()))
        .collect();
    let foreign_options = LockOptions::new()
        .no_wait()
        .fixed_lease(Duration::from_secs(10))
        .owner(Owner::new());
    let multi = Locker::new(MultiLock::new(as_nodes(&backends)).expect("multilock"));
    let red = Locker::new(RedLock::new(as_nodes(&backends)).expect("redlock"));
    let required = n / 2 + 1;
    assert_eq!(red.backend().required(), required);
    assert_eq!(multi.backend().required(), n);
    let ours = LockOptions::new()
        .no_wait()
        .fixed_lease(Duration::from_secs(10))
        .owner(Owner::new());

    let mut granted = [0usize; 2];
    for mask in 0u32..(1 << n) {
        let held = usize::try_from(mask.count_ones()).unwrap();
        for (k, kind) in ["multi", "redlock"].into_iter().enumerate() {
            let name = format!("mask:n{n}:{kind}:{mask:0n$b}");
            let mut foreign_guards = Vec::new();
            let mut foreign_fields = vec![None; n];
            for (i, locker) in foreign.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    let guard = locker
                        .lock_with(&name, &foreign_options)
                        .await
                        .expect("foreign lock");
                    foreign_fields[i] = Some(guard.owner_field().to_owned());
                    foreign_guards.push(guard);
                }
            }
            let expect_grant = match kind {
                "multi" => mask == 0,
                _ => n - held >= required,
            };
            granted[k] += usize::from(expect_grant);
            match kind {
                "multi" => {
                    attempt_against_foreign_holds(
                        &multi,
                        &name,
                        &ours,
                        &connections,
                        &foreign_fields,
                        expect_grant,
                    )
                    .await;
                }
                _ => {
                    attempt_against_foreign_holds(
                        &red,
                        &name,
                        &ours,
                        &connections,
                        &foreign_fields,
                        expect_grant,
                    )
                    .await;
                }
            }
            for guard in foreign_guards {
                assert_eq!(
                    guard.release().await.expect("release"),
                    ReleaseOutcome::Released
                );
            }
            for (i, connection) in connections.iter().enumerate() {
                assert!(!exists(connection, &name).await, "{name}: node {i}");
            }
        }
    }
    // Sanity of the expectations themselves: MultiLock only on the empty mask; RedLock on every
    // mask with at most n - required held nodes.
    assert_eq!(granted[0], 1);
    let redlock_masks: usize = (0..=n - required).map(|k| binomial(n, k)).sum();
    assert_eq!(granted[1], redlock_masks);
}

fn binomial(n: usize, k: usize) -> usize {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mask_of_foreign_held_nodes_n3() {
    every_mask_of_foreign_held_nodes(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mask_of_foreign_held_nodes_n5() {
    every_mask_of_foreign_held_nodes(5).await;
}

// ---------------------------------------------------------------------------------------------
// 2. A paused node (SIGSTOP)
// ---------------------------------------------------------------------------------------------

/// Loads every script the tests rely on (acquire, release, abandon) on every node, so that
/// commands queued on a paused node run as soon as it resumes instead of failing with NOSCRIPT.
async fn warm_up<P: Quorum>(locker: &Locker<Composite<P>>) {
    let options = LockOptions::new()
        .no_wait()
        .fixed_lease(Duration::from_secs(2))
        .owner(Owner::new());
    let guard = locker
        .lock_with("warm-up", &options)
        .await
        .expect("warm-up lock");
    assert_eq!(
        guard.release().await.expect("warm-up release"),
        ReleaseOutcome::Released
    );
    LockBackend::abandon(locker.backend(), "warm-up", "nobody:0", 0)
        .await
        .expect("warm-up abandon");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_node() {
    let mut nodes = RedisNodes::start(3).expect("start redis nodes");
    let urls = nodes.urls();
    let connections = raw_connections(&nodes).await;
    let red: Locker<RedLock> = Locker::new(composite(&urls).await);
    let multi: Locker<MultiLock> = Locker::new(composite(&urls).await);
    warm_up(&red).await;
    warm_up(&multi).await;
    let lease = Duration::from_secs(2);
    let node_timeout = red.backend().node_timeout(lease);
    assert_eq!(node_timeout, Duration::from_millis(100));
    assert_eq!(multi.backend().node_timeout(lease), node_timeout);

    nodes.pause(1).expect("pause node 1");

    // RedLock: two of three nodes grant, which settles the attempt without waiting for the
    // paused one.
    let started = Instant::now();
    let guard = red
        .lock_with(
            "paused:redlock",
            &LockOptions::new().no_wait().fixed_lease(lease),
        )
        .await
        .expect("redlock attempt");
    let elapsed = started.elapsed();
    eprintln!("redlock acquire with a paused node took {elapsed:?}");
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
    assert!(!guard.is_lost());
    assert!(guard.remaining() > Duration::ZERO);
    for i in [0, 2] {
        let hash = hgetall(&connections[i], "paused:redlock").await;
        assert_eq!(
            hash.get(guard.owner_field()),
            Some(&1),
            "node {i}: {hash:?}"
        );
    }
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::PartlyReleased {
            released: 2,
            nodes: 3
        }
    );

    // MultiLock: needs every node, so it never gets the lock while node 1 sleeps.
    let started = Instant::now();
    let result = multi
        .lock_with(
            "paused:multi",
            &LockOptions::new()
                .wait(Duration::from_secs(1))
                .fixed_lease(lease)
                .owner(Owner::new()),
        )
        .await;
    let elapsed = started.elapsed();
    eprintln!("multilock wait(1s) with a paused node took {elapsed:?}: {result:?}");
    match &result {
        Err(Error::NotAcquired { .. }) => {}
        Ok(_) => panic!("multilock granted with a paused node"),
        Err(error @ Error::Quorum(quorum)) => {
            assert_eq!(quorum.operation, "acquire", "{error}");
            let failure = quorum
                .failures
                .iter()
                .find(|f| f.node == 1)
                .unwrap_or_else(|| panic!("node 1 not named: {error}"));
            assert!(
                matches!(failure.error, Error::Timeout { .. }),
                "node 1 should time out: {error}"
            );
            assert!(error.to_string().contains("node 1"), "{error}");
            assert!(error.is_retryable());
        }
        Err(error) => panic!("unexpected error: {error}"),
    }
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    for i in [0, 2] {
        assert!(!exists(&connections[i], "paused:multi").await, "node {i}");
        assert!(!exists(&connections[i], "paused:redlock").await, "node {i}");
    }

    // Once node 1 runs again, the acquires queued on it run, and so do the undos sent after
    // them: nothing of either lock is left.
    nodes.resume(1).expect("resume node 1");
    let node1 = nodes[1].connection().await;
    for name in ["paused:multi", "paused:redlock"] {
        assert!(
            gone_within(&node1, name, Duration::from_secs(2)).await,
            "node 1 still holds {name}: {:?}",
            hgetall(&node1, name).await
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Killed nodes while a RedLock is held
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_nodes_while_redlock_held() {
    let mut nodes = RedisNodes::start(3).expect("start redis nodes");
    let urls = nodes.urls();
    let connections = raw_connections(&nodes).await;
    // Both clients connect while every node is up.
    let red: Locker<RedLock> = Locker::new(composite(&urls).await);
    let other: Locker<RedLock> = Locker::new(composite(&urls).await);
    let lease = Duration::from_millis(900);
    let name = "killed:held";
    let guard = red
        .lock_with(name, &LockOptions::new().no_wait().watchdog_lease(lease))
        .await
        .expect("lock");
    assert!(guard.is_watchdog());

    nodes.kill(0).expect("kill node 0");
    tokio::time::sleep(lease * 3).await;
    assert!(!guard.is_lost(), "a majority still renews");
    assert!(guard.remaining() > Duration::ZERO);
    for i in [1, 2] {
        let hash = hgetall(&connections[i], name).await;
        assert_eq!(
            hash.get(guard.owner_field()),
            Some(&1),
            "node {i}: {hash:?}"
        );
        let mut connection = connections[i].clone();
        let pttl: i64 = redis::cmd("PTTL")
            .arg(name)
            .query_async(&mut connection)
            .await
            .expect("PTTL");
        assert!(pttl > 0, "node {i}: renewed lease, pttl {pttl}");
    }
    let taken = other
        .lock_with(name, &LockOptions::new().no_wait().owner(Owner::new()))
        .await;
    assert!(
        matches!(taken, Err(Error::NotAcquired { .. })),
        "a second client took a held lock: {taken:?}"
    );

    nodes.kill(1).expect("kill node 1");
    let started = Instant::now();
    let loss = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the lease is lost once only one node renews");
    eprintln!(
        "lease lost {:?} after the second kill: {loss:?}",
        started.elapsed()
    );
    assert!(
        matches!(loss, LeaseLoss::Expired | LeaseLoss::NotOurs),
        "{loss:?}"
    );
    assert!(guard.is_lost());
}

// ---------------------------------------------------------------------------------------------
// 4. Request latency beyond the lease
// ---------------------------------------------------------------------------------------------

/// Nodes over `backends` where the first `slow` nodes delay every acquire by `delay`.
fn with_slow_nodes(
    backends: &[RedisBackend],
    slow: usize,
    delay: Duration,
) -> Vec<Arc<dyn DynLockBackend>> {
    backends
        .iter()
        .enumerate()
        .map(|(i, backend)| {
            if i < slow {
                Arc::new(SlowNode::new(backend.clone(), delay)) as Arc<dyn DynLockBackend>
            } else {
                Arc::new(backend.clone()) as Arc<dyn DynLockBackend>
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_exceeded_by_latency_fails_and_leaves_no_keys() {
    let nodes = RedisNodes::start(3).expect("start redis nodes");
    let connections = raw_connections(&nodes).await;
    let backends = connect_all(&nodes.urls()).await;
    let lease = Duration::from_millis(400);
    let options = LockOptions::new()
        .no_wait()
        .fixed_lease(lease)
        .owner(Owner::new());
    // Generous per-node timeout: the slow node answers, only too late for the lease.
    let node_timeout = Duration::from_secs(5);

    for delay in [Duration::from_millis(600), Duration::from_millis(50)] {
        let red = Locker::new(
            // Two slow nodes: every majority includes one, so the quorum itself is slow.
            RedLock::builder(with_slow_nodes(&backends, 2, delay))
                .node_timeout(node_timeout)
                .build()
                .expect("redlock"),
        );
        let multi = Locker::new(
            MultiLock::builder(with_slow_nodes(&backends, 1, delay))
                .node_timeout(node_timeout)
                .build()
                .expect("multilock"),
        );
        latency_attempt(
            &red,
            &format!("latency:redlock:{}", delay.as_millis()),
            &options,
            delay,
            &connections,
        )
        .await;
        latency_attempt(
            &multi,
            &format!("latency:multi:{}", delay.as_millis()),
            &options,
            delay,
            &connections,
        )
        .await;
    }
}

/// One no-wait attempt through a composite whose quorum needs a node that delays acquires by
/// `delay`: granted
/// (with a validity that counts the latency) when `delay` is well under the lease, refused with
/// nothing left on any node when it is over.
async fn latency_attempt<P: Quorum>(
    locker: &Locker<Composite<P>>,
    name: &str,
    options: &LockOptions,
    delay: Duration,
    connections: &[MultiplexedConnection],
) {
    let lease = options.lease_mode().duration();
    let too_slow = delay > lease;
    let client_id = LockBackend::client_id(locker.backend()).to_owned();
    let started = Instant::now();
    let guard = granted(locker.lock_with(name, options).await)
        .unwrap_or_else(|error| panic!("{name}: {error}"));
    let elapsed = started.elapsed();
    let remaining = guard.as_ref().map(LockGuard::remaining);
    eprintln!("{name}: remaining {remaining:?} after {elapsed:?}");
    assert!(elapsed >= delay, "{name}: {elapsed:?}");
    match guard {
        None => {
            assert!(
                too_slow,
                "{name}: not granted with only {delay:?} of latency"
            );
            // Right away: the slow node's late grant was undone, not left to expire.
            for (i, connection) in connections.iter().enumerate() {
                assert!(
                    !exists(connection, name).await,
                    "{name}: node {i} still holds {:?}",
                    hgetall(connection, name).await
                );
            }
        }
        Some(guard) => {
            assert!(
                !too_slow,
                "{name}: granted after {elapsed:?} > lease {lease:?}"
            );
            let remaining = remaining.unwrap_or_default();
            assert!(remaining > Duration::ZERO, "{name}");
            assert!(
                remaining < lease - delay,
                "{name}: remaining {remaining:?} does not count the elapsed {delay:?}"
            );
            assert_eq!(
                guard.release().await.expect("release"),
                ReleaseOutcome::Released
            );
        }
    }
    assert_nothing_of(connections, name, &client_id).await;
}

// ---------------------------------------------------------------------------------------------
// 5. Quorum errors
// ---------------------------------------------------------------------------------------------

fn assert_names_nodes_1_and_2(error: &Error) {
    let Error::Quorum(quorum) = error else {
        panic!("expected a quorum error, got {error:?}");
    };
    assert_eq!(quorum.operation, "acquire", "{error}");
    assert_eq!(quorum.granted, 1, "{error}");
    assert_eq!(quorum.required, 2, "{error}");
    assert_eq!(quorum.nodes, 3, "{error}");
    assert_eq!(quorum_failed_nodes(error), Some(vec![1, 2]), "{error}");
    let text = error.to_string();
    assert!(text.contains("node 1") && text.contains("node 2"), "{text}");
    assert!(error.is_retryable(), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_error_names_failed_nodes() {
    let mut nodes = RedisNodes::start(3).expect("start redis nodes");
    let urls = nodes.urls();
    let connections = raw_connections(&nodes).await;
    // Built while every node is up. The second one uses a fixed 100 ms per-node timeout for
    // every call, subscriptions included, so registering for release notifications on the dead
    // nodes costs 100 ms of the wait, not the default 1.5 s (see the next test for the default).
    let red: Locker<RedLock> = Locker::new(composite(&urls).await);
    let fast = Locker::new(
        RedLock::builder(as_nodes(&connect_all(&urls).await))
            .node_timeout(Duration::from_millis(100))
            .build()
            .expect("redlock"),
    );
    nodes.kill(1).expect("kill node 1");
    nodes.kill(2).expect("kill node 2");

    let name = "quorum:error";
    let started = Instant::now();
    let error = red.try_lock(name).await.expect_err("only one node is up");
    eprintln!("try_lock failed after {:?}: {error}", started.elapsed());
    assert_names_nodes_1_and_2(&error);
    assert!(
        !exists(&connections[0], name).await,
        "node 0 was not undone"
    );

    let started = Instant::now();
    let result = fast
        .lock_with(
            name,
            &LockOptions::new()
                .wait(Duration::from_millis(500))
                .fixed_lease(Duration::from_secs(2)),
        )
        .await;
    let elapsed = started.elapsed();
    eprintln!("wait(500ms) ended after {elapsed:?}: {result:?}");
    let error = result.expect_err("only one node is up");
    assert_names_nodes_1_and_2(&error);
    assert!(
        elapsed >= Duration::from_millis(400) && elapsed < Duration::from_secs(3),
        "retried until the deadline: {elapsed:?}"
    );
    assert!(
        !exists(&connections[0], name).await,
        "node 0 was not undone"
    );
}

/// A wait shorter than the composite's subscribe timeout (1.5 s by default: control calls use
/// the per-node timeout of a 30 s lease) still ends with the quorum error: subscribing on the
/// dead nodes outlasts the deadline, and the first attempt's error is the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_error_survives_a_wait_shorter_than_the_subscribe_timeout() {
    let mut nodes = RedisNodes::start(3).expect("start redis nodes");
    let urls = nodes.urls();
    let red: Locker<RedLock> = Locker::new(composite(&urls).await);
    nodes.kill(1).expect("kill node 1");
    nodes.kill(2).expect("kill node 2");

    let started = Instant::now();
    let result = red
        .lock_with(
            "quorum:short-wait",
            &LockOptions::new()
                .wait(Duration::from_millis(500))
                .fixed_lease(Duration::from_secs(2)),
        )
        .await;
    let elapsed = started.elapsed();
    eprintln!("wait(500ms) ended after {elapsed:?}: {result:?}");
    let error = result.expect_err("only one node is up: the wait must end with the error");
    assert_names_nodes_1_and_2(&error);
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

// ---------------------------------------------------------------------------------------------
// 6. Release outcomes
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_reports_partly_released() {
    let mut nodes = RedisNodes::start(3).expect("start redis nodes");
    let urls = nodes.urls();
    let connections = raw_connections(&nodes).await;
    let red: Locker<RedLock> = Locker::new(composite(&urls).await);
    let options = LockOptions::new()
        .no_wait()
        .fixed_lease(Duration::from_secs(5))
        .owner(Owner::new());

    let guard = red
        .lock_with("release:all-up", &options)
        .await
        .expect("lock");
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );

    let guard = red
        .lock_with("release:one-down", &options)
        .await
        .expect("lock");
    nodes.kill(2).expect("kill node 2");
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::PartlyReleased {
            released: 2,
            nodes: 3
        }
    );
    for i in [0, 1] {
        for name in ["release:all-up", "release:one-down"] {
            assert!(!exists(&connections[i], name).await, "node {i}: {name}");
        }
    }
}

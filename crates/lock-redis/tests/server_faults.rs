//! Server-side faults against real servers: connections closed by the server (`CLIENT KILL`)
//! and a flushed script cache, while locks are held and waited for.

use std::time::Duration;

use lock_core::{LockOptions, Locker, ReleaseOutcome};
use lock_redis::RedisBackend;
use lock_testkit::RedisServer;
use tokio::time::{Instant, sleep, timeout};

fn start() -> RedisServer {
    RedisServer::start().expect("start redis-server")
}

async fn locker(server: &RedisServer) -> Locker<RedisBackend> {
    Locker::new(RedisBackend::connect(server.url()).await.expect("connect"))
}

/// Waits until `locker` has a subscribed waiter on one lock and the server lists a pub/sub
/// connection subscribed to something.
async fn until_subscribed(server: &RedisServer, locker: &Locker<RedisBackend>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let subscribed = locker.backend().watched_locks() == 1
            && server
                .client_list()
                .expect("CLIENT LIST")
                .iter()
                .any(|client| client.subscriptions() > 0);
        if subscribed {
            return;
        }
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        sleep(Duration::from_millis(5)).await;
    }
}

/// How long waiters get; a waiter that is not woken by a notification waits all of it (the
/// holder's watchdog lease, 30 s, is longer), which the test must tell apart from a wake.
const WAIT: Duration = Duration::from_secs(5);
/// A waiter woken by the release must have the lock well within this.
const WOKEN_WITHIN: Duration = Duration::from_secs(1);

/// One round: a watchdog (lease-less) holder, a waiter blocked on it with `wait(5 s)`, the
/// waiter's notification connection killed by the server, then, after `pause_after_kill`, the
/// release. Returns how long after the release the waiter got the lock (`None`: it gave up).
async fn kill_then_release(
    server: &RedisServer,
    holder: &Locker<RedisBackend>,
    waiter: &Locker<RedisBackend>,
    name: &str,
    pause_after_kill: Duration,
) -> Option<Duration> {
    let held = holder.lock(name).await.expect("lock");
    let task = {
        let (waiter, name) = (waiter.clone(), name.to_owned());
        tokio::spawn(async move {
            let options = LockOptions::new().wait(WAIT);
            let guard = waiter.lock_with(&name, &options).await;
            let at = Instant::now();
            match guard {
                Ok(guard) => {
                    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
                }
                Err(lock_core::Error::NotAcquired { .. }) => {}
                Err(error) => panic!("lock_with: {error}"),
            }
            at
        })
    };
    until_subscribed(server, waiter).await;
    let killed = server
        .kill_pubsub_clients()
        .expect("CLIENT KILL TYPE pubsub");
    assert_eq!(killed, 1, "exactly the waiter's notification connection");
    sleep(pause_after_kill).await;
    let released_at = Instant::now();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let acquired_at = timeout(WAIT + Duration::from_secs(2), task)
        .await
        .expect("the waiter returns by its deadline")
        .expect("waiter task");
    let waited = acquired_at.saturating_duration_since(released_at);
    (waited < WAIT - Duration::from_millis(500)).then_some(waited)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_survive_a_killed_notification_connection() {
    let server = start();
    let (holder, waiter) = (locker(&server).await, locker(&server).await);
    let mut latencies = Vec::new();
    for round in 0..20 {
        let name = format!("faults:pubsub-kill:{round}");
        // Give the notification connection time to come back and resubscribe: the release is
        // then published to a live subscription.
        let waited =
            kill_then_release(&server, &holder, &waiter, &name, Duration::from_millis(200)).await;
        let waited = waited.unwrap_or_else(|| {
            panic!("round {round}: the waiter was not woken by the release and hit its deadline")
        });
        assert!(
            waited < WOKEN_WITHIN,
            "round {round}: the waiter took {waited:?} after the release"
        );
        latencies.push(waited);
    }
    println!("release → acquire after a pub/sub kill: {latencies:?}");
    assert_eq!(waiter.backend().watched_locks(), 0);
}

/// A release published while the notification connection is being re-established (after the
/// first wake-up, before the automatic re-subscription) must still wake the waiter: the backend
/// wakes every waiter again when the re-subscription is confirmed. Before that second wake-up
/// this missed about 1 round in 4 and the waiter slept until its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_right_after_a_notification_kill_wakes_the_waiter() {
    let server = start();
    let (holder, waiter) = (locker(&server).await, locker(&server).await);
    let mut missed = Vec::new();
    for round in 0..20 {
        let name = format!("faults:pubsub-race:{round}");
        // The release races the reconnect and resubscription of the killed connection.
        match kill_then_release(&server, &holder, &waiter, &name, Duration::ZERO).await {
            Some(waited) => assert!(
                waited < WOKEN_WITHIN,
                "round {round}: the waiter took {waited:?} after the release"
            ),
            None => missed.push(round),
        }
    }
    assert!(
        missed.is_empty(),
        "rounds {missed:?} of 20: a release published while the notification connection was \
         reconnecting was missed, and the waiter slept until its deadline"
    );
}

#[tokio::test]
async fn scripts_are_reloaded_after_a_script_flush() {
    let server = start();
    let locker = locker(&server).await;
    let mut last_token = 0;
    for _ in 0..2 {
        let guard = locker
            .lock_with("faults:flush", &LockOptions::new().fenced())
            .await
            .unwrap();
        let token = guard.fencing_token();
        assert!(token > last_token, "{token} after {last_token}");
        last_token = token;
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        server.script_flush().expect("SCRIPT FLUSH");
    }
    // A flush while a watchdog lock is held: the renewal and the release reload their scripts.
    let guard = locker
        .lock_with(
            "faults:flush",
            &LockOptions::new().watchdog_lease(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    server.script_flush().unwrap();
    sleep(Duration::from_millis(600)).await;
    assert!(!guard.is_lost());
    server.script_flush().unwrap();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn a_watchdog_lock_survives_killed_command_connections() {
    let server = start();
    let locker = locker(&server).await;
    let name = "faults:normal-kill";
    let guard = locker
        .lock_with(
            name,
            &LockOptions::new().watchdog_lease(Duration::from_millis(600)),
        )
        .await
        .unwrap();
    let killed = server
        .kill_normal_clients()
        .expect("CLIENT KILL TYPE normal");
    assert!(killed >= 1, "the command connection was killed");
    // Kill again while the renewals reconnect, then let a few renewal periods pass.
    sleep(Duration::from_millis(250)).await;
    server.kill_normal_clients().unwrap();
    sleep(Duration::from_millis(1750)).await;
    assert!(!guard.is_lost(), "{:?}", guard.remaining());
    let state = locker.state(name).await.unwrap();
    assert_eq!(state.holders, [(guard.owner_field().to_owned(), 1)]);
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(!locker.is_locked(name).await.unwrap());
}

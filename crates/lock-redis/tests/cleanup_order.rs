//! Cleanups that cannot go out at once (the connection is being replaced) are kept for the next
//! connection: `abandon` answers `Ok` only once the server has run one, a refusal that passes
//! (a server still loading its data) is retried rather than dropped, and one the server will
//! never take is reported, so that the caller keeps owing the cleanup.

use std::time::Duration;

use lock_core::LockBackend;
use lock_redis::{LockKind, RedisBackend};
use lock_testkit::{Fault, FaultProxy, RedisServer, ServerOptions};
use tokio::time::sleep;

const COMMAND_TIMEOUT: Duration = Duration::from_millis(200);

async fn backend_through(proxy: &FaultProxy) -> RedisBackend {
    RedisBackend::builder(proxy.url())
        .lock_kind(LockKind::Reentrant)
        .command_timeout(COMMAND_TIMEOUT)
        .connect()
        .await
        .expect("connect")
}

async fn hold_count(server: &RedisServer, name: &str, field: &str) -> Option<u32> {
    let mut connection = server.connection().await;
    redis::cmd("HGET")
        .arg(name)
        .arg(field)
        .query_async(&mut connection)
        .await
        .expect("HGET")
}

/// A hold of `count` for `field` on `name`, written directly.
async fn set_holds(server: &RedisServer, name: &str, field: &str, count: u32) {
    let mut connection = server.connection().await;
    redis::pipe()
        .cmd("HSET")
        .arg(name)
        .arg(field)
        .arg(count)
        .cmd("PEXPIRE")
        .arg(name)
        .arg(600_000)
        .exec_async(&mut connection)
        .await
        .expect("HSET");
}

/// Waits until `backend` has a connection again (its calls go through).
async fn until_connected(backend: &RedisBackend) {
    for _ in 0..200 {
        if backend.inspect("cleanup-order:probe").await.is_ok() {
            return;
        }
        sleep(Duration::from_millis(50)).await;
    }
    panic!("the backend never got a connection back");
}

/// The server comes back from a crash and answers `LOADING` for a while (a large append-only
/// file, loaded slowly): a cleanup waiting for the new connection meets that refusal first. It
/// must stay first in line and run once the data is loaded, not be dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_cleanup_that_meets_a_loading_server_still_runs() {
    let options = ServerOptions::new()
        .aof_fsync_always(true)
        // Loading takes seconds, and the server answers other clients meanwhile (`LOADING`).
        .config("key-load-delay", "20")
        .config("loading-process-events-interval-bytes", "1024");
    let mut server = RedisServer::start_with(options).expect("server");
    {
        let mut raw = server.connection().await;
        let mut fill = redis::pipe();
        for key in 0..20_000 {
            fill.cmd("SET")
                .arg(format!("cleanup-order:filler:{key}"))
                .arg("x")
                .ignore();
        }
        fill.exec_async(&mut raw).await.expect("fill");
        // Into the base file, which is what loads slowly.
        redis::cmd("BGREWRITEAOF")
            .exec_async(&mut raw)
            .await
            .expect("BGREWRITEAOF");
        for _ in 0..200 {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query_async(&mut raw)
                .await
                .expect("INFO");
            if info.contains("aof_rewrite_in_progress:0")
                && info.contains("aof_rewrite_scheduled:0")
            {
                break;
            }
            sleep(Duration::from_millis(25)).await;
        }
    }
    let (name, field) = ("cleanup-order:loading", "owner-1:1");
    set_holds(&server, name, field, 3).await;

    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let backend = backend_through(&proxy).await;
    // The cleanup never reaches the server: it times out, the connection is replaced, and it
    // waits for the next one.
    proxy.set_fault(Fault::Blackhole);
    let abandoned = backend.abandon(name, field, 1).await;
    server.kill().expect("kill");
    proxy.clear();
    let restarted = tokio::task::spawn_blocking(move || server.restart().map(|()| server));
    let server = restarted.await.expect("join").expect("restart");
    until_connected(&backend).await;
    assert_eq!(
        hold_count(&server, name, field).await,
        Some(1),
        "the cleanup ran once the server had loaded its data (abandon said {abandoned:?})"
    );
}

/// `abandon` answers `Ok` only when the cleanup has run: one deferred to the next connection
/// and answered there in time is done when `abandon` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandon_answers_ok_only_once_its_deferred_cleanup_ran() {
    let server = RedisServer::start().expect("server");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let backend = backend_through(&proxy).await;
    for round in 0..10 {
        let name = format!("cleanup-order:answered:{round}");
        let field = "owner-2:1";
        set_holds(&server, &name, field, 3).await;
        // The connection breaks under the cleanup: it is kept for the next one.
        proxy.reset_connections();
        let abandoned = backend.abandon(&name, field, 1).await;
        if abandoned.is_ok() {
            assert_eq!(
                hold_count(&server, &name, field).await,
                Some(1),
                "round {round}: abandon said Ok before its cleanup ran"
            );
        }
        until_connected(&backend).await;
        // An error says the cleanup is still owed (the new connection may already have been up
        // when it failed, so nothing was kept for it): the caller sends it again, as the
        // Locker does with a debt, and it is never lost in between.
        if let Err(error) = abandoned {
            assert!(error.is_retryable(), "round {round}: {error}");
            let mut again = backend.abandon(&name, field, 1).await;
            for _ in 0..20 {
                if again.is_ok() {
                    break;
                }
                sleep(Duration::from_millis(50)).await;
                again = backend.abandon(&name, field, 1).await;
            }
            again.unwrap_or_else(|error| panic!("round {round}: the owed cleanup: {error}"));
        }
        assert_eq!(
            hold_count(&server, &name, field).await,
            Some(1),
            "round {round}"
        );
    }
}

/// A deferred cleanup the server refuses for good (the key is of another kind) is dropped, and
/// its `abandon` says so rather than `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_cleanup_refused_for_good_is_an_error() {
    let server = RedisServer::start().expect("server");
    let proxy = FaultProxy::start(server.addr()).await.expect("proxy");
    let backend = backend_through(&proxy).await;
    let mut raw = server.connection().await;
    for round in 0..10 {
        let name = format!("cleanup-order:refused:{round}");
        redis::cmd("SET")
            .arg(&name)
            .arg("not a lock")
            .exec_async(&mut raw)
            .await
            .expect("SET");
        proxy.reset_connections();
        let abandoned = backend.abandon(&name, "owner-3:1", 0).await;
        assert!(
            abandoned.is_err(),
            "round {round}: a refused cleanup answered {abandoned:?}"
        );
        until_connected(&backend).await;
        let kept: String = redis::cmd("GET")
            .arg(&name)
            .query_async(&mut raw)
            .await
            .expect("GET");
        assert_eq!(kept, "not a lock");
    }
}

//! What the backend does with its connections when the server stops answering: a statement
//! that may still commit is fenced (its server process ended) before the name's next step.

use std::time::Duration;

use lock_core::{Error, LockOptions, Locker};
use lock_postgres::PostgresBackend;
use lock_testkit::PostgresServer;
use lock_testkit::conformance::run;
use tokio_postgres::{Client, NoTls};

async fn sql(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// A server with the schema installed, a client of it for the test's own statements, and
/// URLs as the superuser plain (`admin_url`) and with `application` as the connections' name.
struct Setup {
    _server: PostgresServer,
    admin: Client,
    admin_url: String,
    url: String,
}

async fn setup(application: &str) -> Setup {
    let server = PostgresServer::start().expect("start PostgreSQL");
    let admin_url = server.url();
    lock_postgres::install_schema(&admin_url.parse().expect("url"))
        .await
        .expect("install");
    Setup {
        admin: sql(&admin_url).await,
        url: format!("{admin_url}?application_name={application}"),
        admin_url,
        _server: server,
    }
}

/// The server processes of the connections whose application name is `application`.
async fn processes(admin: &Client, application: &str) -> Vec<i32> {
    admin
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid",
            &[&application],
        )
        .await
        .expect("pg_stat_activity")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

fn signal(pid: i32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal} {pid}");
}

/// A release sent to a server process that stops answering times out (ambiguous), and the
/// connection is retired: until its process is gone, steps on its names fail (retryably)
/// instead of overtaking it on another connection; once it is gone, the next step fences it
/// and goes on, and the lock ends up free.
#[test]
fn a_connection_that_stops_answering_is_fenced_before_the_next_step() {
    run(async {
        let application = "distlock-fence-test";
        let Setup {
            _server,
            admin,
            admin_url,
            url,
        } = setup(application).await;
        let backend = PostgresBackend::builder(&url)
            .expect("url")
            .connections(1)
            .listen(false)
            .call_timeout(Duration::from_millis(600))
            .connect()
            .await
            .expect("connect");
        let locker = Locker::new(backend);
        let other = Locker::new(PostgresBackend::connect(&admin_url).await.expect("connect"));

        let options = LockOptions::new().fixed_lease(Duration::from_secs(30));
        let guard = locker.lock_with("fenced", &options).await.expect("lock");
        let stalled = processes(&admin, application).await;
        assert_eq!(stalled.len(), 1, "one connection: {stalled:?}");
        signal(stalled[0], "-STOP");

        let released = guard.release().await;
        assert!(
            matches!(released, Err(Error::Timeout { .. })),
            "an unanswered release is ambiguous: {released:?}"
        );
        // The stopped process cannot be ended yet: steps on its names fail, retryably, and
        // nothing reaches the lock through another connection meanwhile.
        let state = locker.state("fenced").await;
        assert!(
            state.as_ref().is_err_and(Error::is_retryable),
            "a step while the fence cannot hold: {state:?}"
        );
        assert!(other.state("fenced").await.expect("state").is_locked());

        signal(stalled[0], "-CONT");
        // The stopped process ends (it had a SIGTERM waiting). The owner's next lock on the
        // name first fences it, then settles the cleanup it owes (the release's outcome was
        // unknown): a fresh hold, not a re-entry into the one whose release it lost.
        let again = locker
            .lock_with("fenced", &options.clone().wait(Duration::from_secs(10)))
            .await
            .expect("the lock, once the fence holds");
        assert_eq!(again.hold_count(), 1, "no re-entry into an unseen hold");
        let now = processes(&admin, application).await;
        assert!(
            !now.contains(&stalled[0]),
            "the retired process is gone: {now:?}"
        );
        assert!(again.release().await.expect("release").was_held());
        let taken = other.try_lock("fenced").await.expect("try").expect("free");
        assert!(taken.release().await.expect("release").was_held());
    });
}

/// A backend dropped, with waiters' channels listened on and every connection used, leaves no
/// connection on the server.
#[test]
fn a_dropped_backend_leaves_no_connection() {
    run(async {
        let application = "distlock-drop-test";
        let Setup {
            _server,
            admin,
            admin_url,
            url,
        } = setup(application).await;
        let backend = PostgresBackend::builder(&url)
            .expect("url")
            .connections(3)
            .connect()
            .await
            .expect("connect");
        let locker = Locker::new(backend);
        let holder = Locker::new(PostgresBackend::connect(&admin_url).await.expect("connect"));
        for name in ["drop:a", "drop:b", "drop:c", "drop:d", "drop:e", "drop:f"] {
            let held = holder.lock(name).await.expect("lock");
            let waiting = tokio::spawn({
                let locker = locker.clone();
                let name = name.to_owned();
                async move {
                    let guard = locker.lock(&name).await.expect("lock");
                    assert!(guard.release().await.expect("release").was_held());
                }
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(held.release().await.expect("release").was_held());
            waiting.await.expect("waiter");
        }
        assert!(
            processes(&admin, application).await.len() >= 2,
            "steps and notifications on connections of their own"
        );
        drop(locker);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let left = processes(&admin, application).await;
            if left.is_empty() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "connections left after the backend was dropped: {left:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

//! The schema on a real server: installed once or many times, refused when missing or newer,
//! and the release channel computed alike by the client and by the SQL.

use std::time::Duration;

use lock_core::{Error, Locker};
use lock_postgres::{PostgresBackend, SCHEMA_SQL, SCHEMA_VERSION, install_schema};
use lock_testkit::PostgresServer;
use lock_testkit::conformance::run;
use tokio_postgres::{Client, NoTls};

/// A client of `url` for the test's own statements.
async fn sql(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// A database of its own on `server`, and its URL.
async fn fresh_database(server: &PostgresServer, name: &str) -> String {
    sql(&server.url())
        .await
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    server.url().replace("/postgres", &format!("/{name}"))
}

#[test]
fn a_missing_schema_is_named_at_connect_and_installing_it_twice_at_once_is_fine() {
    run(async {
        let server = PostgresServer::start().expect("start PostgreSQL");
        let url = fresh_database(&server, "schema_twice").await;
        let error = PostgresBackend::connect(&url)
            .await
            .expect_err("no schema yet");
        assert!(
            matches!(&error, Error::Backend(cause) if cause.contains("not installed")),
            "{error}"
        );
        let config: tokio_postgres::Config = url.parse().expect("url");
        let (a, b) = tokio::join!(install_schema(&config), install_schema(&config));
        a.expect("first installer");
        b.expect("second installer");
        install_schema(&config).await.expect("once more");
        let version: i32 = sql(&url)
            .await
            .query_one("SELECT max(version) FROM distlock.schema_version", &[])
            .await
            .expect("version")
            .get(0);
        assert_eq!(version, SCHEMA_VERSION);
        assert!(SCHEMA_SQL.contains(&format!(
            "INSERT INTO distlock.schema_version (version) VALUES ({SCHEMA_VERSION})"
        )));
        let locker = Locker::new(PostgresBackend::connect(&url).await.expect("connect"));
        let guard = locker.lock("after-install").await.expect("lock");
        assert!(guard.release().await.expect("release").was_held());
    });
}

#[test]
fn a_newer_schema_is_neither_replaced_nor_used() {
    run(async {
        let server = PostgresServer::start().expect("start PostgreSQL");
        let url = fresh_database(&server, "schema_newer").await;
        let config: tokio_postgres::Config = url.parse().expect("url");
        install_schema(&config).await.expect("install");
        let admin = sql(&url).await;
        admin
            .batch_execute("UPDATE distlock.schema_version SET version = version + 1")
            .await
            .expect("pretend a newer version");
        let refused = install_schema(&config).await.expect_err("newer in place");
        assert!(refused.to_string().contains("newer"), "{refused}");
        let error = PostgresBackend::connect(&url)
            .await
            .expect_err("other version");
        assert!(matches!(error, Error::Backend(_)), "{error}");
    });
}

#[test]
fn the_release_channel_is_the_same_in_the_client_and_the_sql() {
    run(async {
        let server = PostgresServer::start().expect("start PostgreSQL");
        let url = server.url();
        install_schema(&url.parse().expect("url"))
            .await
            .expect("install");
        // A release announced by the SQL wakes a waiter that listens where the client computed.
        let holder = Locker::new(PostgresBackend::connect(&url).await.expect("connect"));
        let waiter = Locker::new(
            PostgresBackend::builder(&url)
                .expect("url")
                .poll_interval(Duration::from_secs(30))
                .connect()
                .await
                .expect("connect"),
        );
        for name in [
            "a",
            "orders:42",
            &"long-".repeat(800),
            "nul\0inside",
            "ünïcödé",
        ] {
            let options = lock_core::LockOptions::new().fixed_lease(Duration::from_secs(20));
            let guard = holder.lock_with(name, &options).await.expect("lock");
            let name_owned = name.to_owned();
            let waiting = tokio::spawn({
                let waiter = waiter.clone();
                async move {
                    let guard = waiter.lock(&name_owned).await.expect("lock");
                    assert!(guard.release().await.expect("release").was_held());
                }
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(!waiting.is_finished(), "{name:?} is held");
            assert!(guard.release().await.expect("release").was_held());
            // Far under the 20 s lease and the 30 s polling: only the notification explains it.
            tokio::time::timeout(Duration::from_secs(3), waiting)
                .await
                .expect("woken by the release")
                .expect("waiter");
        }
    });
}

/// The grants `docs/postgres.md` lists for the role services use (its SQL block, read from the
/// page, so the page and the test cannot drift apart), with `app` as that role.
fn documented_grants() -> String {
    let page = include_str!("../../../docs/postgres.md");
    let after = page
        .split("The role the services use needs only:")
        .nth(1)
        .expect("the grants' paragraph");
    let block = after
        .split("```sql\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the grants' SQL block");
    block.to_owned()
}

/// A role with only the documented grants (no superuser, no `CREATE`, not the owner of the
/// schema) runs every primitive of the family.
#[test]
fn the_documented_grants_are_enough_for_every_primitive() {
    run(async {
        let server = PostgresServer::start().expect("start PostgreSQL");
        let url = fresh_database(&server, "grants").await;
        install_schema(&url.parse().expect("url"))
            .await
            .expect("install as the owner");
        let owner = sql(&url).await;
        owner
            .batch_execute("CREATE ROLE app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
            .await
            .expect("create the role");
        owner
            .batch_execute(&documented_grants())
            .await
            .expect("the documented grants");
        let app_url = url.replace("postgres://distlock@", "postgres://app@");
        let locker = Locker::new(
            PostgresBackend::connect(&app_url)
                .await
                .expect("connect as app"),
        );

        let guard = locker.lock("grants:lock").await.expect("lock");
        assert!(guard.release().await.expect("release").was_held());
        let fair = locker.fair("grants:fair").expect("name");
        let guard = fair.lock().await.expect("fair lock");
        assert!(guard.release().await.expect("release").was_held());
        let rw = locker.read_write("grants:rw").expect("name");
        let read = rw.read().await.expect("read");
        assert!(read.release().await.expect("release").was_held());
        let write = rw.write().await.expect("write");
        assert!(write.release().await.expect("release").was_held());
        let semaphore = locker.semaphore("grants:semaphore").expect("name");
        assert!(semaphore.try_set_permits(2).await.expect("set"));
        semaphore.acquire(1).await.expect("acquire a permit");
        semaphore.release(1).await.expect("give it back");
        let permits = locker.permits("grants:permits").expect("name");
        assert!(permits.try_set_permits(1).await.expect("set"));
        let permit = permits.acquire().await.expect("a permit");
        assert!(permit.release().await.expect("release").was_held());
        let latch = locker.latch("grants:latch").expect("name");
        assert!(latch.try_set_count(1).await.expect("set"));
        latch.count_down().await.expect("count down");
        assert_eq!(latch.count().await.expect("count"), 0);
        let election = locker.election("grants:election").expect("name");
        let leadership = election.campaign("me").await.expect("campaign");
        assert_eq!(
            election
                .leader()
                .await
                .expect("leader")
                .map(|leader| leader.value),
            Some("me".to_owned())
        );
        leadership.resign().await.expect("resign");
    });
}

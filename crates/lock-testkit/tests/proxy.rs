//! Tests of `FaultProxy` in front of a real server binary (see `find_server_binary`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lock_testkit::{Fault, FaultProxy, RedisServer};
use redis::aio::MultiplexedConnection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// The timeout the fault tests put on a single command that is expected to hang.
const HANG: Duration = Duration::from_millis(300);
/// What "fails quickly" means.
const QUICK: Duration = Duration::from_secs(1);

async fn start() -> (RedisServer, FaultProxy) {
    let server = RedisServer::start().expect("start server");
    let proxy = FaultProxy::start(server.addr()).await.expect("start proxy");
    (server, proxy)
}

async fn connect(proxy: &FaultProxy) -> MultiplexedConnection {
    redis::Client::open(proxy.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect through the proxy")
}

/// The value of key `k`, read on `con`.
async fn get_k(con: &mut MultiplexedConnection) -> Option<String> {
    redis::cmd("GET").arg("k").query_async(con).await.unwrap()
}

async fn ping(con: &mut MultiplexedConnection) -> redis::RedisResult<String> {
    redis::cmd("PING").query_async(con).await
}

/// Sends an inline `PING` on a raw connection and reads the reply.
async fn raw_ping(stream: &mut TcpStream) -> io::Result<String> {
    stream.write_all(b"PING\r\n").await?;
    let mut buf = [0; 64];
    let n = stream.read(&mut buf).await?;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Connects to `addr` and pings, within [`QUICK`].
async fn raw_connect_and_ping(addr: SocketAddr) -> io::Result<String> {
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await?;
        raw_ping(&mut stream).await
    };
    timeout(QUICK, attempt)
        .await
        .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
}

/// Waits until `condition` holds, for at most [`QUICK`].
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + QUICK;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs `future` and returns its output with the time it took.
async fn timed<T>(future: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let output = future.await;
    (output, started.elapsed())
}

#[tokio::test]
async fn ping_through_the_proxy_counts_bytes() {
    let (server, proxy) = start().await;
    assert!(proxy.addr().ip().is_loopback());
    assert_ne!(proxy.addr(), server.addr());
    assert_eq!(proxy.upstream(), server.addr());
    assert_eq!(
        proxy.url(),
        format!("redis://127.0.0.1:{}/", proxy.addr().port())
    );
    assert_eq!(proxy.fault(), Fault::None);
    assert!(format!("{proxy:?}").contains("FaultProxy"));

    let mut con = connect(&proxy).await;
    let (to_server, to_client) = (proxy.bytes_to_server(), proxy.bytes_to_client());
    assert_eq!(ping(&mut con).await.unwrap(), "PONG");
    assert!(proxy.bytes_to_server() > to_server);
    assert!(proxy.bytes_to_client() >= to_client + b"+PONG\r\n".len() as u64);
    assert_eq!(proxy.connections(), 1);

    // Larger values and pipelines go through intact and in order.
    let big = "x".repeat(1 << 20);
    redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .exec_async(&mut con)
        .await
        .unwrap();
    let back: String = redis::cmd("GET")
        .arg("big")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(back, big);
    assert!(proxy.bytes_to_server() > 1 << 20);
    assert!(proxy.bytes_to_client() > 1 << 20);

    let mut con2 = connect(&proxy).await;
    assert_eq!(ping(&mut con2).await.unwrap(), "PONG");
    assert_eq!(proxy.connections(), 2);
    drop(con2);
    eventually("a closed client connection is no longer counted", || {
        proxy.connections() == 1
    })
    .await;
}

#[tokio::test]
async fn counters_stay_zero_when_nothing_is_sent() {
    let (_server, proxy) = start().await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    eventually("the connection is accepted", || proxy.connections() == 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(proxy.bytes_to_server(), 0);
    assert_eq!(proxy.bytes_to_client(), 0);

    // Bytes dropped by a black hole are not counted either.
    proxy.set_fault(Fault::Blackhole);
    assert!(timeout(HANG, raw_ping(&mut stream)).await.is_err());
    assert_eq!(proxy.bytes_to_server(), 0);
    assert_eq!(proxy.bytes_to_client(), 0);
}

#[tokio::test]
async fn latency_delays_each_direction() {
    let (_server, proxy) = start().await;
    let mut con = connect(&proxy).await;
    let latency = Duration::from_millis(100);
    proxy.set_fault(Fault::Latency(latency));
    assert_eq!(proxy.fault(), Fault::Latency(latency));

    let (pong, elapsed) = timed(ping(&mut con)).await;
    assert_eq!(pong.unwrap(), "PONG");
    assert!(elapsed >= 2 * latency, "PING took {elapsed:?}");

    // Order is preserved, and a pipeline pays the latency once, not once per command.
    let mut pipe = redis::pipe();
    for _ in 0..200 {
        pipe.cmd("INCR").arg("counter");
    }
    let (counts, elapsed) = timed(pipe.query_async::<Vec<i64>>(&mut con)).await;
    assert_eq!(counts.unwrap(), (1..=200).collect::<Vec<i64>>());
    assert!(elapsed >= 2 * latency, "pipeline took {elapsed:?}");
    assert!(elapsed < 10 * latency, "pipeline took {elapsed:?}");

    proxy.clear();
    assert_eq!(proxy.fault(), Fault::None);
    let (pong, elapsed) = timed(ping(&mut con)).await;
    assert_eq!(pong.unwrap(), "PONG");
    assert!(elapsed < latency, "PING took {elapsed:?} without latency");
}

#[tokio::test]
async fn clearing_latency_delivers_queued_bytes_at_once() {
    let (_server, proxy) = start().await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    proxy.set_fault(Fault::Latency(Duration::from_secs(60)));
    let reply = tokio::spawn(async move { raw_ping(&mut stream).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!reply.is_finished());
    proxy.clear();
    let reply = timeout(QUICK, reply).await.expect("reply after clear()");
    assert_eq!(reply.unwrap().unwrap(), "+PONG\r\n");
}

#[tokio::test]
async fn blackhole_hangs_until_cleared() {
    let (_server, proxy) = start().await;
    let mut con = connect(&proxy).await;
    assert_eq!(ping(&mut con).await.unwrap(), "PONG");

    proxy.set_fault(Fault::Blackhole);
    let to_server = proxy.bytes_to_server();
    assert!(timeout(HANG, ping(&mut con)).await.is_err());
    assert_eq!(
        proxy.bytes_to_server(),
        to_server,
        "the black hole forwarded bytes"
    );

    // New connections are accepted but hang as well.
    let mut raw = TcpStream::connect(proxy.addr()).await.unwrap();
    assert!(timeout(HANG, raw_ping(&mut raw)).await.is_err());

    proxy.clear();
    let mut fresh = connect(&proxy).await;
    assert_eq!(ping(&mut fresh).await.unwrap(), "PONG");
    // The PING sent into the black hole was dropped, not delayed: the raw connection now
    // gets exactly one reply, to its next request.
    assert_eq!(raw_ping(&mut raw).await.unwrap(), "+PONG\r\n");
}

#[tokio::test]
async fn drop_replies_runs_the_request_but_loses_the_reply() {
    let (server, proxy) = start().await;
    let mut con = connect(&proxy).await;
    proxy.set_fault(Fault::DropReplies);

    let to_client = proxy.bytes_to_client();
    let set = timeout(
        HANG,
        redis::cmd("SET").arg("k").arg("v").exec_async(&mut con),
    )
    .await;
    assert!(set.is_err(), "the reply was not lost");
    assert_eq!(proxy.bytes_to_client(), to_client);

    let mut direct = server.connection().await;
    let value = get_k(&mut direct).await;
    assert_eq!(value.as_deref(), Some("v"));

    proxy.clear();
    let mut fresh = connect(&proxy).await;
    let value = get_k(&mut fresh).await;
    assert_eq!(value.as_deref(), Some("v"));
}

#[tokio::test]
async fn cut_replies_runs_the_request_and_ends_the_connection_inside_its_reply() {
    let (server, proxy) = start().await;
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    // Through first, so the connection to the server is up before the cut.
    assert_eq!(raw_ping(&mut stream).await.expect("ping"), "+PONG\r\n");
    proxy.set_fault(Fault::CutReplies);

    stream
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
        .await
        .expect("send SET");
    let mut received = Vec::new();
    timeout(QUICK, stream.read_to_end(&mut received))
        .await
        .expect("the connection ends")
        .expect("ended by a FIN, not a reset");
    assert_eq!(received, b"+OK", "half of `+OK\\r\\n`, then the end");

    let mut direct = server.connection().await;
    let value = get_k(&mut direct).await;
    assert_eq!(value.as_deref(), Some("v"), "the request ran");

    proxy.clear();
    assert_eq!(
        raw_connect_and_ping(proxy.addr()).await.expect("ping"),
        "+PONG\r\n"
    );
}

#[tokio::test]
async fn reset_connections_breaks_existing_connections_only() {
    let (_server, proxy) = start().await;
    let mut con = connect(&proxy).await;
    assert_eq!(ping(&mut con).await.unwrap(), "PONG");

    // An in-flight request (held by a black hole) fails quickly once reset.
    let mut raw = TcpStream::connect(proxy.addr()).await.unwrap();
    eventually("both connections are accepted", || proxy.connections() == 2).await;
    proxy.set_fault(Fault::Blackhole);
    let in_flight = tokio::spawn(async move { raw_ping(&mut raw).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!in_flight.is_finished());

    proxy.reset_connections();
    let (result, elapsed) = timed(timeout(QUICK, in_flight)).await;
    let result = result.expect("in-flight request not failed").unwrap();
    assert!(result.is_err(), "in-flight request got {result:?}");
    assert!(elapsed < QUICK);
    eventually("reset connections are no longer counted", || {
        proxy.connections() == 0
    })
    .await;

    // The next command on the existing connection fails quickly too.
    proxy.clear();
    let (result, _) = timed(timeout(QUICK, ping(&mut con))).await;
    let result = result.expect("command on a reset connection did not fail quickly");
    assert!(
        result.is_err(),
        "command on a reset connection got {result:?}"
    );

    // New connections are proxied normally.
    let mut fresh = connect(&proxy).await;
    assert_eq!(ping(&mut fresh).await.unwrap(), "PONG");
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test]
async fn refuse_new_keeps_existing_connections() {
    let (_server, proxy) = start().await;
    let mut con = connect(&proxy).await;
    proxy.set_fault(Fault::RefuseNew);

    let refused = raw_connect_and_ping(proxy.addr()).await;
    assert!(refused.is_err(), "new connection got {refused:?}");
    let client = redis::Client::open(proxy.url()).unwrap();
    let refused = async {
        let mut con = client.get_multiplexed_async_connection().await?;
        ping(&mut con).await
    };
    let refused = timeout(QUICK, refused)
        .await
        .expect("refusal was not quick");
    assert!(refused.is_err(), "new redis connection got {refused:?}");
    assert_eq!(proxy.connections(), 1);

    assert_eq!(ping(&mut con).await.unwrap(), "PONG");

    proxy.clear();
    assert_eq!(
        raw_connect_and_ping(proxy.addr()).await.unwrap(),
        "+PONG\r\n"
    );
}

#[tokio::test]
async fn drop_closes_the_listener_and_connections() {
    let (_server, proxy) = start().await;
    let addr = proxy.addr();
    let mut raw = TcpStream::connect(addr).await.unwrap();
    assert_eq!(raw_ping(&mut raw).await.unwrap(), "+PONG\r\n");

    drop(proxy);
    #[cfg(target_os = "linux")]
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "connected to a dropped proxy"
    );
    // Whatever the platform, the listener is gone once the runtime has run the aborts.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = raw_connect_and_ping(addr).await;
    assert!(after.is_err(), "dropped proxy answered {after:?}");

    // The proxied connection is closed too.
    let mut buf = [0; 16];
    let read = timeout(QUICK, raw.read(&mut buf))
        .await
        .expect("proxied connection still open after drop");
    assert!(matches!(read, Ok(0) | Err(_)), "read {read:?}");
}

#[tokio::test]
async fn refuses_non_loopback_upstreams() {
    for upstream in [
        "10.0.0.1:6379",
        "192.0.2.1:6379",
        "[::1]:6379",
        "0.0.0.0:6379",
    ] {
        let err = FaultProxy::start(upstream.parse().unwrap())
            .await
            .expect_err(upstream);
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{upstream}");
    }
    FaultProxy::start("127.0.0.2:6379".parse().unwrap())
        .await
        .expect("any 127.0.0.0/8 address is accepted");
}

#[tokio::test]
async fn upstream_down_resets_the_client() {
    let (mut server, proxy) = start().await;
    server.kill().unwrap();
    let result = raw_connect_and_ping(proxy.addr()).await;
    assert!(
        matches!(&result, Err(err) if err.kind() != io::ErrorKind::TimedOut),
        "got {result:?}"
    );
    eventually("the failed connection is no longer counted", || {
        proxy.connections() == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_on_a_multi_thread_runtime() {
    let (_server, proxy) = start().await;
    let mut con = connect(&proxy).await;
    assert_eq!(ping(&mut con).await.unwrap(), "PONG");
    proxy.set_fault(Fault::DropReplies);
    assert!(timeout(HANG, ping(&mut con)).await.is_err());
    proxy.reset_connections();
    let result = timeout(QUICK, ping(&mut con)).await.expect("quick failure");
    assert!(result.is_err());
}

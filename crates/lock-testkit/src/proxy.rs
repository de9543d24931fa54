//! A loopback TCP proxy with faults that can be switched at run time, for fault-injection tests.
//!
//! [`FaultProxy`] listens on `127.0.0.1:<free port>` and forwards every connection to an
//! upstream server on the loopback interface (typically a [`RedisServer`](crate::RedisServer)).
//! Point the code under test at [`FaultProxy::url`] instead of the server, then switch a
//! [`Fault`] on and off with [`FaultProxy::set_fault`] and [`FaultProxy::clear`], or cut every
//! connection with [`FaultProxy::reset_connections`], while checking the server's real state
//! through a direct connection.
//!
//! ```
//! use std::time::Duration;
//!
//! use lock_testkit::{Fault, FaultProxy, RedisServer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = RedisServer::start()?;
//! let proxy = FaultProxy::start(server.addr()).await?;
//! let client = redis::Client::open(proxy.url())?;
//! let mut con = client.get_multiplexed_async_connection().await?;
//!
//! // The reply to this SET is lost: the client times out, but the write happened.
//! proxy.set_fault(Fault::DropReplies);
//! let mut set = redis::cmd("SET");
//! set.arg("key").arg("value");
//! let lost = tokio::time::timeout(Duration::from_millis(300), set.exec_async(&mut con)).await;
//! assert!(lost.is_err()); // timed out
//!
//! let mut direct = server.connection().await;
//! let value: Option<String> = redis::cmd("GET").arg("key").query_async(&mut direct).await?;
//! assert_eq!(value.as_deref(), Some("value"));
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use socket2::SockRef;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// Size of the read buffer of each direction of each connection.
const CHUNK_SIZE: usize = 16 * 1024;
/// Chunks queued per direction (read but not yet written) before reading pauses.
const QUEUE_CHUNKS: usize = 64;
/// How long a new connection waits for the upstream server to accept before it is reset.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(10);

/// A network fault applied by a [`FaultProxy`].
///
/// A fault applies at once to every connection, existing or new: bytes already read but not
/// yet delivered (waiting out a [`Latency`](Fault::Latency)) are delivered, delayed or dropped
/// according to the fault in force when they are due. Connection closes (EOF, reset) are
/// always passed on, so a client still notices when the server goes away.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// No fault: bytes are forwarded as they arrive.
    #[default]
    None,
    /// Delay every chunk in both directions by this much (so a request/reply round trip takes
    /// at least twice as long). Byte order is preserved in each direction, and throughput is
    /// not limited: chunks are delayed, not serialized behind each other's delays.
    Latency(Duration),
    /// Accept and read, but forward nothing in either direction (a network partition).
    ///
    /// Data read while the black hole is active is dropped, not delivered later: requests
    /// sent meanwhile never reach the server. New connections are still accepted.
    Blackhole,
    /// Forward client→server, but drop the server→client bytes: requests run on the server,
    /// their replies are lost.
    ///
    /// As with a real lost reply, a pipelined RESP client is desynchronized afterwards (the
    /// next reply it reads belongs to a later request), so the client's timeout and reconnect
    /// logic must cope; a new connection after [`FaultProxy::clear`] is always clean.
    DropReplies,
    /// Refuse new connections while active: they are accepted, then reset at once (`RST`), so
    /// the client sees a reset or EOF on its first read or write. Existing connections are
    /// unaffected and keep forwarding normally.
    RefuseNew,
    /// Cut the server's next reply short on every connection: the first half of the next
    /// chunk from the server is delivered, then the connection to the client is closed
    /// (`FIN`), as when a server or the network goes away in the middle of a reply. Requests
    /// sent before run on the server. A chunk is usually one reply; one of several pipelined
    /// replies may be cut between two of them, and a one-byte chunk is delivered whole before
    /// the close. Connections made after the cut are cut in turn, at their first reply, until
    /// the fault is cleared.
    CutReplies,
}

/// Which way bytes flow through a proxied connection.
#[derive(Clone, Copy, Debug)]
enum Direction {
    ToServer,
    ToClient,
}

impl Direction {
    /// Whether `fault` drops the bytes flowing this way.
    fn drops(self, fault: Fault) -> bool {
        match self {
            Direction::ToServer => fault == Fault::Blackhole,
            Direction::ToClient => matches!(fault, Fault::Blackhole | Fault::DropReplies),
        }
    }

    /// Whether `fault` cuts the connection short in the middle of the bytes flowing this way.
    fn cuts(self, fault: Fault) -> bool {
        matches!(self, Direction::ToClient) && fault == Fault::CutReplies
    }
}

/// State shared by the [`FaultProxy`] handle, its accept task and its connection tasks.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    fault: watch::Sender<Fault>,
    /// Bumped by [`FaultProxy::reset_connections`]; each connection watches it.
    resets: watch::Sender<u64>,
    connections: AtomicUsize,
    bytes_to_server: AtomicU64,
    bytes_to_client: AtomicU64,
    /// Set when the proxy is dropped, so `accept` errors end the accept loop.
    closed: AtomicBool,
}

impl Shared {
    fn counter(&self, direction: Direction) -> &AtomicU64 {
        match direction {
            Direction::ToServer => &self.bytes_to_server,
            Direction::ToClient => &self.bytes_to_client,
        }
    }
}

/// A loopback TCP proxy in front of a server, with switchable faults (see [`Fault`]).
///
/// It listens on `127.0.0.1:<free port>` ([`addr`](Self::addr), [`url`](Self::url)) and
/// opens one upstream connection per accepted client connection. It runs as tokio tasks on
/// the runtime that called [`start`](Self::start), so that runtime must keep running (any
/// `#[tokio::test]` flavour works, as long as the test awaits while waiting for the network).
///
/// Dropping it stops listening at once (on Linux, later connection attempts are refused
/// immediately; elsewhere, once the runtime has processed the cancellation) and aborts all
/// its tasks, which closes every proxied connection.
///
/// It only ever contacts `127.0.0.0/8`: [`start`](Self::start) refuses other upstreams.
///
/// ```
/// use std::time::{Duration, Instant};
///
/// use lock_testkit::{Fault, FaultProxy, RedisServer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = RedisServer::start()?;
/// let proxy = FaultProxy::start(server.addr()).await?;
/// let mut con = redis::Client::open(proxy.url())?
///     .get_multiplexed_async_connection()
///     .await?;
///
/// proxy.set_fault(Fault::Latency(Duration::from_millis(50)));
/// let started = Instant::now();
/// let pong: String = redis::cmd("PING").query_async(&mut con).await?;
/// assert_eq!(pong, "PONG");
/// assert!(started.elapsed() >= Duration::from_millis(100)); // 50 ms each way
///
/// proxy.clear();
/// proxy.reset_connections(); // the connection above is now broken
/// assert!(redis::cmd("PING").query_async::<String>(&mut con).await.is_err());
/// # Ok(())
/// # }
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Also held by the accept task; kept here to stop listening synchronously on drop.
    listener: Arc<TcpListener>,
    /// Owns (through a `JoinSet`) every connection task: aborting it aborts them all.
    accept_task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy listening on `127.0.0.1:<free port>` that forwards to `upstream`,
    /// initially without fault.
    ///
    /// The upstream need not be up yet: it is connected to once per accepted connection, and
    /// a client connection whose upstream connection fails is reset.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if `upstream` is not in `127.0.0.0/8` (IPv6 `::1`
    /// included: the proxy never contacts anything but IPv4 loopback), or the error from
    /// binding the listening socket.
    ///
    /// # Panics
    ///
    /// If called outside a tokio runtime.
    pub async fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        if !is_ipv4_loopback(upstream.ip()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("FaultProxy only forwards to 127.0.0.0/8, not to {upstream}"),
            ));
        }
        let listener = Arc::new(TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?);
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            fault: watch::Sender::new(Fault::None),
            resets: watch::Sender::new(0),
            connections: AtomicUsize::new(0),
            bytes_to_server: AtomicU64::new(0),
            bytes_to_client: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        let accept_task = tokio::spawn(accept_loop(Arc::clone(&listener), Arc::clone(&shared)));
        Ok(FaultProxy {
            addr,
            shared,
            listener,
            accept_task,
        })
    }

    /// The address the proxy listens on, `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The upstream address given to [`start`](Self::start).
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// A Redis URL for the proxy, `redis://127.0.0.1:<port>/`.
    ///
    /// It carries no password: for a server started with
    /// [`ServerOptions::requirepass`](crate::ServerOptions::requirepass), build the URL from
    /// [`addr`](Self::addr) yourself.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.addr.port())
    }

    /// Switches to `fault`, at once for existing and new connections.
    pub fn set_fault(&self, fault: Fault) {
        self.shared.fault.send_replace(fault);
    }

    /// The fault currently in force.
    pub fn fault(&self) -> Fault {
        *self.shared.fault.borrow()
    }

    /// Back to [`Fault::None`]. Does not repair connections desynchronized or reset by an
    /// earlier fault.
    pub fn clear(&self) {
        self.set_fault(Fault::None);
    }

    /// Resets every currently open proxied connection, on both sides (`SO_LINGER` 0, then
    /// close, so both peers get an `RST`): the client sees a reset (or EOF) on its pending or
    /// next read or write. Connections accepted afterwards are proxied normally.
    ///
    /// The resets are carried out by the connection tasks as soon as the runtime runs them;
    /// [`connections`](Self::connections) drops to 0 once they are done.
    pub fn reset_connections(&self) {
        self.shared
            .resets
            .send_modify(|generation| *generation = generation.wrapping_add(1));
    }

    /// The number of currently open proxied connections (accepted and not yet closed;
    /// connections refused by [`Fault::RefuseNew`] are not counted).
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    /// Total bytes written to the server, over all connections (dropped bytes not counted).
    pub fn bytes_to_server(&self) -> u64 {
        self.shared.bytes_to_server.load(Ordering::Acquire)
    }

    /// Total bytes written to clients, over all connections (dropped bytes not counted).
    pub fn bytes_to_client(&self) -> u64 {
        self.shared.bytes_to_client.load(Ordering::Acquire)
    }
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("fault", &self.fault())
            .field("connections", &self.connections())
            .field("bytes_to_server", &self.bytes_to_server())
            .field("bytes_to_client", &self.bytes_to_client())
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        // Stop listening now rather than when the runtime gets to the aborted task: on Linux,
        // shutting down a listening socket makes new connection attempts fail immediately.
        let _ = SockRef::from(&*self.listener).shutdown(Shutdown::Both);
        self.accept_task.abort();
    }
}

fn is_ipv4_loopback(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V4(v4) if v4.is_loopback())
}

/// Makes the next close of `stream` send an `RST` instead of a `FIN`.
fn set_reset_on_close(stream: &TcpStream) {
    let _ = SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// Decrements the connection count when a connection task ends or is aborted.
struct ConnectionGuard(Arc<Shared>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn accept_loop(listener: Arc<TcpListener>, shared: Arc<Shared>) {
    // Dropping this set (when the task is aborted) aborts every connection task.
    let mut tasks = JoinSet::new();
    loop {
        let accepted = listener.accept().await;
        while tasks.try_join_next().is_some() {}
        let client = match accepted {
            Ok((client, _peer)) => client,
            Err(_) if shared.closed.load(Ordering::Acquire) => return,
            Err(_) => {
                tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                continue;
            }
        };
        if *shared.fault.borrow() == Fault::RefuseNew {
            set_reset_on_close(&client);
            continue;
        }
        // Subscribed before the task starts, so a reset right after `accept` is not missed.
        let resets = shared.resets.subscribe();
        shared.connections.fetch_add(1, Ordering::AcqRel);
        let guard = ConnectionGuard(Arc::clone(&shared));
        tasks.spawn(run_connection(client, Arc::clone(&shared), resets, guard));
    }
}

async fn run_connection(
    mut client: TcpStream,
    shared: Arc<Shared>,
    mut resets: watch::Receiver<u64>,
    _guard: ConnectionGuard,
) {
    let connect = tokio::time::timeout(
        UPSTREAM_CONNECT_TIMEOUT,
        TcpStream::connect(shared.upstream),
    );
    let mut server = tokio::select! {
        connected = connect => match connected {
            Ok(Ok(server)) => server,
            Ok(Err(_)) | Err(_) => {
                set_reset_on_close(&client);
                return;
            }
        },
        _ = resets.changed() => {
            set_reset_on_close(&client);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);

    let result = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let pumps = async {
            tokio::try_join!(
                pump(client_read, server_write, Direction::ToServer, &shared),
                pump(server_read, client_write, Direction::ToClient, &shared),
            )
        };
        tokio::select! {
            result = pumps => result.map(|_| ()),
            _ = resets.changed() => Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "reset by FaultProxy::reset_connections",
            )),
        }
    };
    // A clean end (both directions reached EOF) closes normally; anything else (an error on
    // either side, or a reset) resets both sides.
    if result.is_err() {
        set_reset_on_close(&client);
        set_reset_on_close(&server);
    }
}

/// A chunk read from one side, to be written to the other; `data: None` is the EOF.
struct Item {
    read_at: Instant,
    data: Option<Vec<u8>>,
}

/// Forwards one direction of a connection until EOF (passed on as a write shutdown).
async fn pump(
    mut reader: ReadHalf<'_>,
    writer: WriteHalf<'_>,
    direction: Direction,
    shared: &Shared,
) -> io::Result<()> {
    let (tx, rx) = mpsc::channel(QUEUE_CHUNKS);
    let read_side = async move {
        let mut buf = vec![0; CHUNK_SIZE];
        loop {
            let n = reader.read(&mut buf).await?;
            let read_at = Instant::now();
            let data = if n == 0 {
                None
            } else if direction.drops(*shared.fault.borrow()) {
                continue;
            } else {
                Some(buf[..n].to_vec())
            };
            let eof = data.is_none();
            if tx.send(Item { read_at, data }).await.is_err() || eof {
                return Ok(());
            }
        }
    };
    let write_side = deliver(rx, writer, direction, shared);
    tokio::try_join!(read_side, write_side).map(|_| ())
}

/// Writes the queued chunks in order, each once its latency has passed, unless dropped by the
/// fault in force at that time.
async fn deliver(
    mut rx: mpsc::Receiver<Item>,
    mut writer: WriteHalf<'_>,
    direction: Direction,
    shared: &Shared,
) -> io::Result<()> {
    let mut faults = shared.fault.subscribe();
    while let Some(item) = rx.recv().await {
        let fault = wait_until_due(&mut faults, item.read_at).await;
        match item.data {
            None => {
                writer.shutdown().await?;
                return Ok(());
            }
            Some(_) if direction.drops(fault) => {}
            Some(data) => {
                let cut = direction.cuts(fault);
                // Cut: half of it, at least one byte (usually a reply begun and not ended).
                let sent = if cut {
                    data.len().div_ceil(2)
                } else {
                    data.len()
                };
                writer.write_all(&data[..sent]).await?;
                shared
                    .counter(direction)
                    .fetch_add(sent as u64, Ordering::AcqRel);
                if cut {
                    writer.shutdown().await?;
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// Waits until a chunk read at `read_at` is due under the current fault (re-evaluated when the
/// fault changes), and returns the fault in force then.
async fn wait_until_due(faults: &mut watch::Receiver<Fault>, read_at: Instant) -> Fault {
    loop {
        let fault = *faults.borrow_and_update();
        let Fault::Latency(delay) = fault else {
            return fault;
        };
        let due = read_at.checked_add(delay);
        if due.is_some_and(|due| due <= Instant::now()) {
            return fault;
        }
        let sleep = async {
            match due {
                Some(due) => tokio::time::sleep_until(due).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => return fault,
            changed = faults.changed() => {
                if changed.is_err() {
                    // Cannot happen while `Shared` is alive; keep the current delay.
                    if let Some(due) = due {
                        tokio::time::sleep_until(due).await;
                    }
                    return fault;
                }
            }
        }
    }
}

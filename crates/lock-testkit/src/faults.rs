//! Fault sequences for the batteries ([`crate::run_schedule`]): what one fault does, and for how
//! long, on the deployments the batteries run against.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;

use crate::fault_loop::FaultFuture;
use crate::proxy::{Fault, FaultProxy};
use crate::server::RedisServer;

/// The in-model faults of one node reached through `proxy`, in turn: latency on the proxy,
/// reset connections, a pause of the server shorter than a 1.2 s lease minus a renewal period,
/// its notification connections killed, its script cache flushed, replies cut off in their
/// middle for a moment (the requests ran, the connections end inside their replies), and
/// `kill -9` with a restart from an `appendfsync always` AOF (start the server with
/// [`ServerOptions::aof_fsync_always`](crate::ServerOptions::aof_fsync_always)).
///
/// # Panics
///
/// The returned faults panic when the server cannot be paused, resumed, killed or restarted.
pub fn single_node(
    server: Arc<Mutex<RedisServer>>,
    proxy: Arc<FaultProxy>,
) -> impl FnMut(usize) -> FaultFuture {
    move |n| {
        let (server, proxy) = (server.clone(), proxy.clone());
        // Random choices made up front: the thread-local generator cannot cross an await.
        let latency = Duration::from_millis(rand::rng().random_range(10..=40));
        let pause = Duration::from_millis(rand::rng().random_range(100..=300));
        let cut = Duration::from_millis(rand::rng().random_range(20..=80));
        Box::pin(async move {
            match n % 7 {
                0 => {
                    proxy.set_fault(Fault::Latency(latency));
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    proxy.clear();
                    format!("latency {latency:?}")
                }
                1 => {
                    proxy.reset_connections();
                    "reset connections".to_owned()
                }
                2 => {
                    // Shorter than the lease minus one renewal period: every hold survives.
                    server.lock().unwrap().pause().expect("pause");
                    tokio::time::sleep(pause).await;
                    server.lock().unwrap().resume().expect("resume");
                    format!("pause {pause:?}")
                }
                3 => {
                    let killed = off_the_runtime(server, |server| {
                        server.kill_pubsub_clients().expect("client kill")
                    })
                    .await;
                    format!("kill {killed} pubsub clients")
                }
                4 => {
                    off_the_runtime(server, |server| {
                        server.script_flush().expect("script flush");
                    })
                    .await;
                    "script flush".to_owned()
                }
                5 => {
                    // Every connection that gets a reply meanwhile is cut inside it: the calls
                    // it answered ran, their callers cannot know it.
                    proxy.set_fault(Fault::CutReplies);
                    tokio::time::sleep(cut).await;
                    proxy.clear();
                    format!("replies cut off for {cut:?}")
                }
                _ => {
                    off_the_runtime(server, |server| {
                        server.kill().expect("kill -9");
                        server.restart().expect("restart from the AOF");
                    })
                    .await;
                    "kill -9 + restart (appendfsync always)".to_owned()
                }
            }
        })
    }
}

/// Runs a blocking server helper on tokio's blocking pool: a command helper may wait seconds
/// for a server stalled on its disk, and the workload under test must keep its worker threads
/// meanwhile.
async fn off_the_runtime<T: Send + 'static>(
    server: Arc<Mutex<RedisServer>>,
    helper: impl FnOnce(&mut RedisServer) -> T + Send + 'static,
) -> T {
    tokio::task::spawn_blocking(move || helper(&mut server.lock().unwrap()))
        .await
        .unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()))
}

//! distlock's metrics in Prometheus text: a few tasks take turns on one lock (waiting, holding
//! past a watchdog renewal), and `GET /metrics` on the address printed answers what they
//! recorded. Build with the `metrics` feature of `distlock`; any `metrics` recorder works, this
//! one is `metrics-exporter-prometheus`.
//!
//! ```sh
//! cargo run -p distlock-examples --bin metrics            # a private server, then serves
//! curl http://127.0.0.1:<port>/metrics
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use distlock::{LockOptions, Locker, RedisBackend};
use distlock_examples::DemoRedis;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Take turns on a lock, then serve distlock's metrics in Prometheus text.
#[derive(Debug, Parser)]
struct Args {
    /// The server (default: start a private one).
    #[arg(long)]
    url: Option<String>,
    /// Where to answer `GET /metrics` (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Tasks taking turns on the lock.
    #[arg(long, default_value_t = 4)]
    tasks: u32,
    /// Serve this long, then exit (default: until interrupted).
    #[arg(long, value_parser = humantime::parse_duration)]
    serve_for: Option<Duration>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let recorder = match PrometheusBuilder::new().install_recorder() {
        Ok(handle) => handle,
        Err(error) => {
            eprintln!("error: cannot install the metrics recorder: {error}");
            return ExitCode::FAILURE;
        }
    };
    let redis = match DemoRedis::from_arg(args.url.clone()) {
        Ok(redis) => redis,
        Err(code) => return code,
    };
    if let Err(error) = take_turns(redis.url(), args.tasks).await {
        eprintln!("error: {error}");
        return ExitCode::FAILURE;
    }
    let listener = match TcpListener::bind(&args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("error: cannot listen on {}: {error}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(address) => println!("serving metrics on http://{address}/metrics"),
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    }
    let serving = serve(listener, recorder);
    match args.serve_for {
        Some(duration) => {
            let _ = tokio::time::timeout(duration, serving).await;
        }
        None => {
            tokio::select! {
                () = serving => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
    }
    ExitCode::SUCCESS
}

/// `tasks` tasks each take the lock once, hold it past a renewal of its 600 ms watchdog lease,
/// and release it; all but the first wait.
async fn take_turns(url: &str, tasks: u32) -> distlock::Result<()> {
    let locker = Locker::new(RedisBackend::connect(url).await?);
    let options = LockOptions::new()
        .watchdog_lease(Duration::from_millis(600))
        .wait(Duration::from_secs(30));
    let turns: Vec<_> = (0..tasks)
        .map(|_| {
            let (locker, options) = (locker.clone(), options.clone());
            tokio::spawn(async move {
                let guard = locker.lock_with("distlock:demo:metrics", &options).await?;
                tokio::time::sleep(Duration::from_millis(250)).await;
                guard.release().await
            })
        })
        .collect();
    for turn in turns {
        let released = turn
            .await
            .map_err(|error| distlock::Error::Unavailable(error.to_string().into()))??;
        if released != distlock::ReleaseOutcome::Released {
            eprintln!("a turn ended with {released:?}");
        }
    }
    Ok(())
}

/// Answers every connection with the metrics in Prometheus text (whatever it asked for: this
/// is a demo, not a web server).
async fn serve(listener: TcpListener, recorder: PrometheusHandle) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let body = recorder.render();
        tokio::spawn(async move {
            let mut request = [0_u8; 1024];
            let _ = stream.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
        });
    }
}

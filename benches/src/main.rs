//! `lockbench`: the cost of a distlock lock + unlock against its floors and its peer, on a real
//! `redis-server`.
//!
//! Rows (contenders): `raw-setnx` (SET NX PX + compare-and-delete), `raw-script` (distlock's own
//! acquire/release Lua by EVALSHA on a `MultiplexedConnection`), `raw-script-cm` (the same on a
//! `ConnectionManager`), `distlock-fixed` / `distlock-try_lock` / `distlock-lock`
//! (`Locker<RedisBackend>`), and `rslock`. Workloads: W1 (`uncontended`: one task) and W2
//! (`distinct-names`: many tasks on one client), the default of `suite`. An op is one lock +
//! unlock pair; latencies are per pair.
//!
//! Each workload is a subcommand with only its own flags (see `cli.rs`; each workload's own
//! `Args` is in its `w*.rs`); `suite --workloads` runs several in one run with all their flags.
//!
//! W4 (`redlock`) runs one task over several independent servers: rows
//! `single` (`Locker<RedisBackend>` on node 0), and for every `--nodes` count `n`, `multi-n`
//! (`Locker<MultiLock>`), `redlock-n` (`Locker<RedLock>`) and `rslock-n` (rslock's Redlock over
//! the same nodes); see `w4.rs`.
//!
//! W3 (`handoffs`), W5 (`renewals`), W6 (`wake-ups`), W7 (`semaphore`), W8 (`read-lock`) and W8W
//! (`writer-wait`) run on the one server:
//! - W3: `--w3-tasks` tasks contend on one key; op = a handoff to another task, latency = the
//!   release → next-acquire wait; rows `distlock`, `rslock`, `rslock-tuned` and `ping` (the PING
//!   round trip of the same run). See `w3.rs`.
//! - W5: `--locks` watchdog locks held for `--w5-periods` renewal periods; renewal calls per
//!   period, client CPU and memory per lock, keys left after releasing. See `w5.rs`.
//! - W6: `--waiters` waiters on distinct locks held by another client; connections of the waiting
//!   client and wake-up latency under paced releases. See `w6.rs`.
//! - W7: `--w7-tasks` tasks take and give back one permit of a semaphore of `--w7-permits`
//!   permits; rows `distlock-semaphore` (`Semaphore<RedisBackend>`) and `raw-scripts`
//!   (Redisson's `RSemaphore` scripts on a raw redis-rs client), and both with a permit per
//!   task (`-nowait`). See `w7.rs`.
//! - W8: `--w8-tasks` tasks take and release the read lock of one name; rows `distlock-read`
//!   (`ReadWriteLock<RedisBackend>::read`), `distlock-exclusive` (the same tasks on
//!   `Locker::lock` of the plain lock) and `raw-scripts` (Redisson's `RReadWriteLock` read
//!   scripts on a raw redis-rs client). See `w8.rs`.
//! - W8W: `--w8w-readers` readers holding the read lock `--w8w-hold-ms` each, back to back, and
//!   one writer trying to get in (each attempt given up after `--w8w-give-up` s): the writer's
//!   wait and writes; rows `distlock-writer` and `raw-scripts`. See `w8w.rs`.
//!
//! W9 (`fair-handoffs`): `--w9-tasks` tasks (separate owners) take a lock, hold it
//! `--w9-hold-ms`, release it and queue again; throughput, the wait for the grant and grants
//! out of arrival order; rows `distlock-fair` (the fair lock, which must grant in order),
//! `distlock-lock` (the plain lock) and `raw-fair-scripts` (Redisson's `RFairLock` scripts on a
//! raw redis-rs client). See `w9.rs`.
//!
//! W1C, W2C and W5C (`uncontended-cluster`, ...) are W1, W2 and W5 on a throw-away Redis
//! Cluster of 3 primaries: rows `ping2`, `raw-script` (a raw redis-rs cluster client running the
//! same scripts) and the distlock rows on `RedisBackend::cluster_builder`; see `cluster.rs`. W1A
//! and W2A (`uncontended-acked`, `distinct-names-acked`) are W1 and W2 on a throw-away primary
//! with one replica, each distlock row as it is and with replica acknowledgement (`<row>-ack`);
//! see `acked.rs`.
//!
//! W10 (`failover`) is leader election failover on the one server: for each lease
//! of `--w10-leases-ms`, rows `crash-<lease>` (a leader crashes: its runtime and connections gone
//! without a word; latency = crash -> a waiting candidate leads) and `resign-<lease>` (the
//! leader resigns; latency = resign -> the waiting candidate leads), with the latency ÷ the lease.
//! See `w10.rs`.
//!
//! W1P, W2P and W3P (`uncontended-postgres`, `distinct-names-postgres`, `handoffs-postgres`)
//! are W1, W2 and W3 on PostgreSQL (a throw-away server, or `--postgres-url`), the schema
//! installed first: rows `distlock-lock` / `distlock-try_lock` (`Locker<PostgresBackend>`,
//! `--pg-connections` connections), `raw-sql` (the backend's own statements on a bare
//! tokio-postgres client of as many connections: the ceiling) and `advisory` (session advisory
//! locks: the floor); in W3P `raw-sql` retries every `--w3p-retry-ms` while distlock waits for
//! `LISTEN` wake-ups and `advisory` tasks block in `pg_advisory_lock`, and `select1` is the
//! round trip. Statements per op come from `pg_stat_statements`. See `postgres.rs`.
//!
//! ```text
//! cargo run --release -p distlock-bench --bin lockbench -- suite --workloads w1,w2 --json out.json
//! cargo run --release -p distlock-bench --bin lockbench -- plot --from out.json --to out.svg
//! cargo run --release -p distlock-bench --bin lockbench -- redlock --nodes 3,5
//! cargo run --release -p distlock-bench --bin lockbench -- suite --workloads w1,w2,w4 --smoke
//! cargo run --release -p distlock-bench --bin lockbench -- suite --workloads w3,w5,w6 --rounds 1
//! cargo run --release -p distlock-bench --bin lockbench -- semaphore --rounds 2
//! cargo run --release -p distlock-bench --bin lockbench -- suite --workloads w8,w8w --rounds 2
//! cargo run --release -p distlock-bench --bin lockbench -- suite --workloads w1c,w2c,w5c,w1a,w2a
//! cargo run --release -p distlock-bench --bin lockbench -- fair-handoffs --rounds 2
//! cargo run --release -p distlock-bench --bin lockbench -- failover --w10-leases-ms 1000,3000,10000
//! cargo run --release -p distlock-bench --bin lockbench -- suite --workloads w1p,w2p,w3p --rounds 3
//! cargo run --release -p distlock-bench --bin lockbench -- handoffs --help
//! ```

mod acked;
mod cli;
mod cluster;
mod contenders;
mod measurement;
mod plot;
mod postgres;
mod probe;
mod server_limit;
mod targets;
mod w1;
mod w10;
mod w2;
mod w3;
mod w4;
mod w5;
mod w6;
mod w7;
mod w8;
mod w8w;
mod w9;

use std::time::Duration;

use clap::Parser;
use lock_redis::RedisBackend;
use lock_testkit::{RedisCluster, RedisNodes, RedisServer, ReplicatedPair};

use cli::{Cli, Plan, Suite, Workload};
use contenders::{BenchError, Contender, Kind};
use measurement::Measurement;
use probe::Probe;
use server_limit::ServerLimit;

fn main() -> Result<(), BenchError> {
    let mut args = match Cli::parse().command.plan() {
        Plan::Run(suite) => suite,
        Plan::Plot { from, to } => {
            let text = std::fs::read_to_string(&from)
                .map_err(|error| format!("--from {}: {error}", from.display()))?;
            let rows = plot::rows_from_json(&text)
                .map_err(|error| format!("--from {}: {error}", from.display()))?;
            let title = format!("lockbench: {}", from.display());
            return write_plot(&to, &title, &rows);
        }
    };
    if args.shared.smoke {
        args.smoke();
    }
    let mut counts = args.w4.nodes.clone();
    counts.sort_unstable();
    counts.dedup();
    if counts.first() == Some(&0) {
        return Err("--nodes: a node count must be at least 1".into());
    }
    // Started before the runtime: `RedisServer::start` blocks until the server answers.
    let single = args
        .workloads
        .iter()
        .any(|workload| workload.on_one_server());
    let (server, url) = match &args.shared.url {
        _ if !single => (None, None),
        Some(url) => (None, Some(url.clone())),
        None => {
            let server = RedisServer::start()?;
            let url = server.url();
            (Some(server), Some(url))
        }
    };
    let version = server
        .as_ref()
        .map_or("external", |server| server.version());
    if let Some(url) = &url {
        println!(
            "lockbench: server {url} ({version}), runtime {} thread(s), one connection per contender, op = lock+unlock, loadavg {}",
            args.shared.threads,
            loadavg()
        );
    }
    let most = counts.last().copied().unwrap_or(0);
    let (nodes, node_urls) = if !args.workloads.contains(&Workload::W4) {
        (None, Vec::new())
    } else if args.w4.urls.is_empty() {
        let nodes = RedisNodes::start(most.max(1))?;
        let urls = nodes.urls();
        (Some(nodes), urls)
    } else if args.w4.urls.len() < most {
        return Err(format!(
            "--urls: {} node(s) given, --nodes asks for {most}",
            args.w4.urls.len()
        )
        .into());
    } else {
        (None, args.w4.urls.clone())
    };
    let node_version = nodes
        .as_ref()
        .map_or("external", |nodes| nodes[0].version())
        .to_owned();
    if !node_urls.is_empty() {
        println!(
            "lockbench W4: {} independent node(s) {} ({node_version}), node counts {counts:?}, runtime {} thread(s), one connection per row and node, op = lock+unlock, loadavg {}",
            node_urls.len(),
            node_urls.join(" "),
            args.shared.threads,
            loadavg()
        );
    }

    // A cluster (W1C, W2C, W5C) and a replicated pair (W1A, W2A), started from the same server
    // binary, each stopped when dropped.
    let cluster = if args.workloads.iter().any(|workload| workload.on_cluster()) {
        let cluster = RedisCluster::start(cluster::PRIMARIES, 0)?;
        println!(
            "lockbench W1C/W2C/W5C: cluster of {} primaries {} ({}), runtime {} thread(s), one cluster connection per row, op = lock+unlock, loadavg {}",
            cluster::PRIMARIES,
            cluster.urls().join(" "),
            cluster.node(0).version(),
            args.shared.threads,
            loadavg()
        );
        Some(cluster)
    } else {
        None
    };
    let pair = if args
        .workloads
        .iter()
        .any(|workload| workload.on_replicated_pair())
    {
        let pair = ReplicatedPair::start()?;
        println!(
            "lockbench W1A/W2A: primary {} with one replica {} ({}), acknowledged rows ask {:?}, runtime {} thread(s), one connection per row, op = lock+unlock, loadavg {}",
            pair.primary().url(),
            pair.replica().url(),
            pair.primary().version(),
            acked::ack(),
            args.shared.threads,
            loadavg()
        );
        Some(pair)
    } else {
        None
    };
    // Started before the runtime too: the throw-away server blocks until it answers.
    let database = if args.workloads.iter().any(|workload| workload.on_postgres()) {
        Some(postgres::Database::start(&args.postgres)?)
    } else {
        None
    };
    let topologies = Topologies {
        cluster_urls: cluster.as_ref().map(RedisCluster::urls).unwrap_or_default(),
        cluster_version: cluster
            .as_ref()
            .map(|cluster| cluster.node(0).version().to_owned()),
        pair_urls: pair
            .as_ref()
            .map(|pair| (pair.primary().url(), pair.replica().url())),
    };

    let runtime = if args.shared.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.shared.threads)
            .enable_all()
            .build()?
    };
    let postgres = match &database {
        Some(database) => Some(runtime.block_on(postgres::prepare(
            database,
            &args.postgres,
            args.shared.threads,
        ))?),
        None => None,
    };
    let rows = runtime.block_on(run_all(
        &args,
        url.as_deref(),
        &node_urls,
        &counts,
        &topologies,
        postgres.as_ref(),
    ))?;
    let postgres_server = postgres
        .as_ref()
        .map(|ready| (ready.url.clone(), ready.version().to_owned()));
    drop(postgres);
    drop(runtime);
    drop(database);
    drop(nodes);
    drop(cluster);
    drop(pair);

    let medians = measurement::medians(&rows);
    if args.shared.rounds > 1 {
        println!("--- median of {} rounds ---", args.shared.rounds);
        medians.iter().for_each(|row| row.print_line());
    }
    let mut ratios = measurement::ratios(&medians);
    if !ratios.is_empty() {
        println!(
            "--- throughput ratios (higher = distlock faster), loadavg {} ---",
            loadavg()
        );
        measurement::print_ratios(&ratios);
    }
    let acknowledged = acked::ratios(&medians);
    if !acknowledged.is_empty() {
        println!(
            "--- W1A/W2A ratios (acknowledged ÷ plain ops/s; informational, no target), loadavg {} ---",
            loadavg()
        );
        measurement::print_ratios(&acknowledged);
        ratios.extend(acknowledged);
    }
    if args.workloads.contains(&Workload::W3) {
        let contended = w3::ratios(&medians);
        println!(
            "--- W3 ratios (p50 wait ÷ ping p50: target distlock ≤ 2.00; handoffs/s: higher = distlock faster), loadavg {} ---",
            loadavg()
        );
        measurement::print_ratios(&contended);
        ratios.extend(contended);
    }
    if args.workloads.contains(&Workload::W3p) {
        let contended = postgres::w3_ratios(&medians);
        println!(
            "--- W3P ratios (p50 wait ÷ select1 p50; distlock-lock ÷ raw-sql and ÷ advisory: handoffs/s higher = distlock faster, p50 wait lower = distlock faster), loadavg {} ---",
            loadavg()
        );
        measurement::print_ratios(&contended);
        ratios.extend(contended);
    }
    if args.workloads.contains(&Workload::W9) {
        let fair = w9::ratios(&medians);
        println!(
            "--- W9 ratios (distlock-fair ÷ Redisson's fair scripts on a raw client, and ÷ the plain lock; ops/s: higher = the fair lock faster; p50 wait: lower = the fair lock's waiters get in sooner), loadavg {} ---",
            loadavg()
        );
        measurement::print_ratios(&fair);
        ratios.extend(fair);
    }
    if args.workloads.contains(&Workload::W7) {
        let semaphore = w7::ratios(&medians);
        println!(
            "--- W7 ratios (distlock ÷ Redisson's scripts on a raw client; ops/s: higher = distlock faster; p50: lower = distlock faster), loadavg {} ---",
            loadavg()
        );
        measurement::print_ratios(&semaphore);
        ratios.extend(semaphore);
    }
    if args.workloads.contains(&Workload::W8) {
        let reads = w8::ratios(&medians);
        println!(
            "--- W8 ratios (distlock-read ÷ Redisson's scripts on a raw client, and ÷ the exclusive lock; ops/s: higher = the read lock faster; p50: lower = the read lock faster), loadavg {} ---",
            loadavg()
        );
        measurement::print_ratios(&reads);
        ratios.extend(reads);
    }
    if args.workloads.contains(&Workload::W8w) {
        let writer = w8w::ratios(&medians);
        println!(
            "--- W8W ratios (the writer's p50 wait, distlock ÷ Redisson's scripts; lower = distlock's writer gets in sooner), loadavg {} ---",
            loadavg()
        );
        measurement::print_ratios(&writer);
        ratios.extend(writer);
    }
    if !node_urls.is_empty() {
        let multi = w4::ratios(&medians, &counts);
        println!(
            "--- W4 ratios (p50: lower = numerator faster; ops/s: higher = numerator faster), loadavg {} ---",
            loadavg()
        );
        measurement::print_ratios(&multi);
        ratios.extend(multi);
    }

    if args.workloads.contains(&Workload::W10) {
        println!(
            "--- W10: election failover ÷ lease (crash: the lease left plus finding out; resign: announced), loadavg {} ---",
            loadavg()
        );
        w10::print_per_lease(&medians);
    }

    let goals = targets::targets(&medians, &rows);
    if !goals.is_empty() {
        println!(
            "--- targets (medians of {} round(s); throughput: of same-round ratios) ---",
            args.shared.rounds
        );
        goals.iter().for_each(|goal| println!("{}", goal.line()));
    }

    // Only against our own throw-away server: redis-benchmark leaves `key:__rand_int__` behind.
    let limits = match &server {
        Some(server) if !args.shared.no_redis_benchmark => {
            server_limit::measure("127.0.0.1", server.port())
        }
        _ => Vec::new(),
    };
    if !limits.is_empty() {
        println!("--- raw server limit (one command per request) ---");
        limits.iter().for_each(ServerLimit::print_line);
    }

    if let Some(path) = &args.shared.json {
        let servers = Servers {
            url: url.as_deref(),
            version,
            node_urls: &node_urls,
            node_version: &node_version,
            counts: &counts,
            topologies: &topologies,
            postgres: postgres_server.as_ref(),
        };
        let json = to_json(&args, &servers, &rows, &medians, &ratios, &goals, &limits);
        std::fs::write(path, json)?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.shared.plot {
        let rows: Vec<plot::PlotRow> = medians.iter().map(|row| plot::PlotRow::of(row)).collect();
        let title = format!(
            "lockbench, median of {} round(s), {version}",
            args.shared.rounds.max(1)
        );
        write_plot(path, &title, &rows)?;
    }
    Ok(())
}

/// Writes `--plot`'s picture of `rows`.
fn write_plot(
    path: &std::path::Path,
    title: &str,
    rows: &[plot::PlotRow],
) -> Result<(), BenchError> {
    std::fs::write(path, plot::svg(title, rows))
        .map_err(|error| format!("--plot {}: {error}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The throw-away cluster and replicated pair, when a workload asked for them.
struct Topologies {
    /// The cluster's primaries (W1C, W2C, W5C), or none.
    cluster_urls: Vec<String>,
    cluster_version: Option<String>,
    /// The replicated pair's primary and replica (W1A, W2A).
    pair_urls: Option<(String, String)>,
}

/// Every selected workload × contender, each contender on a fresh connection. W1–W3 and W5–W8W
/// run on `url`, W4 on `node_urls`, W1P–W3P on `postgres`, the others on `topologies`.
async fn run_all(
    args: &Suite,
    url: Option<&str>,
    node_urls: &[String],
    counts: &[usize],
    topologies: &Topologies,
    postgres: Option<&postgres::Ready>,
) -> Result<Vec<Measurement>, BenchError> {
    // Unique per run, so keys never meet leftovers on an existing server.
    let prefix = format!(
        "lockbench:{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let probe = match url {
        Some(url) => Some((url, Probe::connect(url).await?)),
        None => None,
    };
    let mut node_probes = Vec::with_capacity(node_urls.len());
    for url in node_urls {
        node_probes.push(Probe::connect(url).await?);
    }
    let mut cluster_probes = Vec::with_capacity(topologies.cluster_urls.len());
    for url in &topologies.cluster_urls {
        cluster_probes.push(Probe::connect(url).await?);
    }
    let pair_probe = match &topologies.pair_urls {
        Some((primary, _)) => vec![Probe::connect(primary).await?],
        None => Vec::new(),
    };
    let mut rows = Vec::new();
    for round in 1..=args.shared.rounds.max(1) {
        if args.shared.rounds > 1 {
            println!("--- round {round}/{} ---", args.shared.rounds);
        }
        for &workload in &args.workloads {
            let prefix = format!("{prefix}:r{round}");
            let measured = match (workload, &probe) {
                (Workload::W1p | Workload::W2p, _) => {
                    let postgres = postgres.ok_or("W1P/W2P: no PostgreSQL database")?;
                    let entrants = postgres::entrants(&args.postgres, &postgres.url).await?;
                    let probes = std::slice::from_ref(&postgres.probe);
                    run_rows(args, workload, &entrants, probes, &prefix).await?
                }
                (Workload::W3p, _) => {
                    let postgres = postgres.ok_or("W3P: no PostgreSQL database")?;
                    let config = w3_config(args);
                    if round == 1 {
                        println!(
                            "lockbench W3P: {} tasks on one name over {} client(s) per row (advisory: a connection per task), {} s per row in {} slices, critical section {} us busy, raw-sql retry every {} ms; op = handoff, latency = release -> next acquire",
                            config.tasks,
                            config.clients,
                            args.w3.w3_duration,
                            config.slices,
                            args.w3.w3_hold_us,
                            args.postgres.w3p_retry_ms
                        );
                    }
                    let rows = postgres::w3_rows(&args.postgres, &postgres.url, &config).await?;
                    w3::run("W3P", rows, &postgres.probe, &prefix, config).await?
                }
                (Workload::W3, Some((url, probe))) => {
                    let config = w3_config(args);
                    if round == 1 {
                        println!(
                            "lockbench W3: {} tasks on one key over {} client(s) per row, {} s per row in {} slices, critical section {} us busy, rslock-tuned retry delay 0..{} ms; op = handoff, latency = release -> next acquire",
                            config.tasks,
                            config.clients,
                            args.w3.w3_duration,
                            config.slices,
                            args.w3.w3_hold_us,
                            args.w3.w3_rslock_retry_ms
                        );
                    }
                    let rows = w3::connect(url, &config).await?;
                    w3::run("W3", rows, probe, &prefix, config).await?
                }
                (Workload::W5, Some((url, probe))) => {
                    let config = w5_config(args, workload, round);
                    let backend = RedisBackend::connect(*url).await?;
                    w5::run("W5", backend, std::slice::from_ref(probe), &prefix, config).await?
                }
                (Workload::W5c, _) => {
                    let config = w5_config(args, workload, round);
                    let seeds = topologies.cluster_urls.iter().cloned();
                    let backend = RedisBackend::builder(lock_redis::RedisTarget::cluster(seeds))
                        .connect()
                        .await?;
                    w5::run("W5C", backend, &cluster_probes, &prefix, config).await?
                }
                (Workload::W1c | Workload::W2c, _) => {
                    let kinds = args.rows.contenders.as_deref();
                    let entrants = cluster::entrants(kinds, &topologies.cluster_urls).await?;
                    run_rows(args, workload, &entrants, &cluster_probes, &prefix).await?
                }
                (Workload::W1a | Workload::W2a, _) => {
                    let (primary, _) = topologies
                        .pair_urls
                        .as_ref()
                        .ok_or("W1A/W2A: no replicated pair")?;
                    let entrants =
                        acked::entrants(args.rows.contenders.as_deref(), primary).await?;
                    run_rows(args, workload, &entrants, &pair_probe, &prefix).await?
                }
                (Workload::W9, Some((url, probe))) => {
                    let config = w9::Config {
                        tasks: usize::try_from(args.w9.w9_tasks)?,
                        hold: Duration::from_millis(args.w9.w9_hold_ms),
                        duration: Duration::from_secs_f64(args.paced.duration),
                        slices: args.paced.slices.slices.max(1),
                        warmup: Duration::from_millis(300),
                    };
                    if round == 1 {
                        println!(
                            "lockbench W9: {} tasks (separate owners) on one client per row take one lock, hold it {} ms, release it and queue again; {} s per row in {} slices; op = one turn, latency = the wait from the lock call to the grant",
                            config.tasks, args.w9.w9_hold_ms, args.paced.duration, config.slices
                        );
                    }
                    w9::run(url, probe, &prefix, config).await?
                }
                (Workload::W7, Some((url, probe))) => {
                    let config = w7::Config {
                        tasks: usize::try_from(args.w7.w7_tasks)?,
                        permits: args.w7.w7_permits,
                        duration: Duration::from_secs_f64(args.paced.duration),
                        slices: args.paced.slices.slices.max(1),
                        warmup: Duration::from_millis(300),
                    };
                    if round == 1 {
                        println!(
                            "lockbench W7: {} tasks on one client per row take and give back 1 permit of {} (the -nowait rows: of {}), {} s per row in {} slices; op = acquire(1) + release(1), latency = acquire call -> release returned",
                            config.tasks,
                            config.permits,
                            config.tasks,
                            args.paced.duration,
                            config.slices
                        );
                    }
                    w7::run(url, probe, &prefix, config).await?
                }
                (Workload::W8, Some((url, probe))) => {
                    let config = w8::Config {
                        tasks: usize::try_from(args.w8.w8_tasks)?,
                        duration: Duration::from_secs_f64(args.paced.duration),
                        slices: args.paced.slices.slices.max(1),
                        warmup: Duration::from_millis(300),
                    };
                    if round == 1 {
                        println!(
                            "lockbench W8: {} tasks on one client per row take and release the lock of one name (read lock; distlock-exclusive: the plain lock), {} s per row in {} slices; op = lock + release, latency = lock call -> release returned",
                            config.tasks, args.paced.duration, config.slices
                        );
                    }
                    w8::run(url, probe, &prefix, config).await?
                }
                (Workload::W8w, Some((url, probe))) => {
                    let config = w8w::Config {
                        readers: usize::try_from(args.w8w.w8w_readers)?,
                        hold: Duration::from_millis(args.w8w.w8w_hold_ms),
                        duration: Duration::from_secs_f64(args.w8w.w8w_duration),
                        give_up: Duration::from_secs_f64(args.w8w.w8w_give_up),
                    };
                    if round == 1 {
                        println!(
                            "lockbench W8W: {} readers on one client per row hold the read lock {} ms each and take it again at once; one writer on the same client tries for the write lock (holds {} ms, asks again {} ms after a write, gives an attempt up after {} s) for {} s; op = write attempt, latency = the writer's wait, costs per read or write pair",
                            config.readers,
                            args.w8w.w8w_hold_ms,
                            args.w8w.w8w_hold_ms,
                            w8w::WRITER_PAUSE.as_millis(),
                            args.w8w.w8w_give_up,
                            args.w8w.w8w_duration
                        );
                    }
                    w8w::run(url, probe, &prefix, config).await?
                }
                (Workload::W6, Some((url, probe))) => {
                    let config = w6::Config {
                        waiters: args.w6.waiters,
                        batch: args.w6.release_batch.max(1),
                    };
                    if round == 1 {
                        println!(
                            "lockbench W6: {} waiters on distinct locks held by another client, released in closed-loop batches of {}; op = wake-up, latency = release returned -> waiter's lock returned",
                            config.waiters, config.batch
                        );
                    }
                    w6::run(url, probe, &prefix, config).await?
                }
                (Workload::W10, Some((url, probe))) => {
                    let config = w10_config(args, round)?;
                    w10::run(url, probe, &prefix, &config).await?
                }
                (Workload::W4, _) => {
                    let entrants =
                        w4::only(w4::connect(node_urls, counts).await?, &args.w4.w4_rows);
                    let (warmup, iterations) = (args.w1.pairs.warmup, args.w4.w4_iterations);
                    w4::run(
                        entrants,
                        &node_probes,
                        &prefix,
                        warmup,
                        iterations,
                        args.w1.pairs.chunk,
                    )
                    .await?
                }
                (_, Some((url, probe))) => run_single(args, workload, url, probe, &prefix).await?,
                (_, None) => unreachable!("every workload but W4 has a server"),
            };
            for mut row in measured {
                row.round = round;
                row.print_line();
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// W3's settings (also W3P's).
fn w3_config(args: &Suite) -> w3::Config {
    w3::Config {
        tasks: args.w3.w3_tasks.max(1),
        clients: args.w3.w3_clients.max(1),
        duration: Duration::from_secs_f64(args.w3.w3_duration),
        slices: args.paced.slices.slices.max(1),
        hold: Duration::from_micros(args.w3.w3_hold_us),
        rslock_retry: Duration::from_millis(args.w3.w3_rslock_retry_ms),
    }
}

/// W10's settings (leases checked as any lease is); printed in the first round.
fn w10_config(args: &Suite, round: usize) -> Result<w10::Config, BenchError> {
    let mut leases = Vec::with_capacity(args.w10.w10_leases_ms.len());
    for &ms in &args.w10.w10_leases_ms {
        let lease = Duration::from_millis(ms);
        lock_core::options::check_lease(lease)
            .map_err(|error| format!("--w10-leases-ms {ms}: {error}"))?;
        leases.push(lease);
    }
    let config = w10::Config {
        leases,
        failovers: usize::try_from(args.w10.w10_failovers)?,
        handovers: usize::try_from(args.w10.w10_handovers)?,
    };
    if round == 1 {
        println!(
            "lockbench W10: leases {:?} ms, watchdog-renewed; crash rows: {} crash(es) per lease of a leader in its own runtime (leadership forgotten, runtime shut down: no release, connections closed) at a random point of its renewal cycle; resign rows: {} resignation(s) per lease; op = one failover, latency = crash or resign -> the waiting candidate leads",
            args.w10.w10_leases_ms, config.failovers, config.handovers
        );
    }
    Ok(config)
}

/// W5's and W5C's settings; printed in the first round.
fn w5_config(args: &Suite, workload: Workload, round: usize) -> w5::Config {
    let config = w5::Config {
        locks: args.w5.locks,
        lease: Duration::from_millis(args.w5.w5_lease_ms),
        periods: args.w5.w5_periods,
        hash_tags: args.w5.w5_hash_tags,
    };
    if round == 1 {
        let names = match config.hash_tags {
            0 => "names hashed on their own".to_owned(),
            tags => format!("names sharing {tags} hash tag(s)"),
        };
        println!(
            "lockbench {}: {} watchdog locks, {names}, lease {} ms (renewed every {} ms), held {} period(s); op = one acquisition, costs per renewal period",
            workload.label(),
            config.locks,
            args.w5.w5_lease_ms,
            args.w5.w5_lease_ms / 3,
            config.periods
        );
    }
    config
}

/// W1's loop (W1, W1C, W1A, W1P) or W2's (W2, W2C, W2A, W2P) over `entrants`, the counters
/// summed over `probes`.
async fn run_rows(
    args: &Suite,
    workload: Workload,
    entrants: &[(&'static str, Contender)],
    probes: &[Probe],
    prefix: &str,
) -> Result<Vec<Measurement>, BenchError> {
    let label = workload.label();
    match workload {
        Workload::W1 | Workload::W1c | Workload::W1a | Workload::W1p => {
            let (warmup, iterations) = (args.w1.pairs.warmup, args.w1.iterations);
            w1::run(
                label,
                entrants,
                probes,
                prefix,
                warmup,
                iterations,
                args.w1.pairs.chunk,
            )
            .await
        }
        Workload::W2 | Workload::W2c | Workload::W2a | Workload::W2p => {
            let slices = args.paced.slices.slices.max(1);
            let each = match args.w2.per_task {
                Some(count) => w2::Stop::Count(count.div_ceil(u64::from(slices))),
                None => w2::Stop::After(Duration::from_secs_f64(
                    args.paced.duration / f64::from(slices),
                )),
            };
            let slices = w2::Slices {
                count: slices,
                each,
            };
            let warmup = Duration::from_millis(300);
            w2::run(
                label,
                entrants,
                probes,
                prefix,
                args.w2.tasks,
                warmup,
                slices,
            )
            .await
        }
        Workload::W3
        | Workload::W3p
        | Workload::W4
        | Workload::W5
        | Workload::W5c
        | Workload::W6
        | Workload::W7
        | Workload::W8
        | Workload::W8w
        | Workload::W9
        | Workload::W10 => Err(format!("{label}: not a W1 or W2 loop").into()),
    }
}

/// W1 or W2 × every selected contender on `url`, each contender on a fresh connection.
async fn run_single(
    args: &Suite,
    workload: Workload,
    url: &str,
    probe: &Probe,
    prefix: &str,
) -> Result<Vec<Measurement>, BenchError> {
    let kinds = args
        .rows
        .contenders
        .clone()
        .unwrap_or_else(|| Kind::ALL.to_vec());
    let mut entrants = Vec::new();
    for &kind in &kinds {
        match Contender::connect(kind, url).await? {
            Some(contender) => entrants.push((kind.name(), contender)),
            None => eprintln!("{}: not built (feature `rslock` is off)", kind.name()),
        }
    }
    let mut held = Vec::new();
    for (_, contender) in &entrants {
        let prefix = format!("{prefix}:held:{}", held.len());
        held.push(
            contender
                .hold_background(&prefix, args.rows.background_holds)
                .await?,
        );
    }
    let probes = std::slice::from_ref(probe);
    let measured = run_rows(args, workload, &entrants, probes, prefix).await?;
    let mut rows = Vec::with_capacity(measured.len());
    for (mut row, guards) in measured.into_iter().zip(held) {
        row.background = guards.len();
        for guard in guards {
            let _ = guard.release().await?;
        }
        rows.push(row);
    }
    Ok(rows)
}

/// `/proc/loadavg`'s first three fields (`?` elsewhere): other work on the machine skews results.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".to_owned(),
        |text| text.split(' ').take(3).collect::<Vec<_>>().join(" "),
    )
}

/// The servers a run used, for the JSON file.
struct Servers<'a> {
    /// W1 / W2's server, if they ran.
    url: Option<&'a str>,
    version: &'a str,
    /// W4's nodes, if it ran.
    node_urls: &'a [String],
    node_version: &'a str,
    /// W4's node counts.
    counts: &'a [usize],
    /// The cluster's and the replicated pair's servers, if their workloads ran.
    topologies: &'a Topologies,
    /// W1P–W3P's database and its server's version, if they ran.
    postgres: Option<&'a (String, String)>,
}

fn to_json(
    args: &Suite,
    servers: &Servers<'_>,
    rows: &[Measurement],
    medians: &[&Measurement],
    ratios: &[measurement::Ratio],
    goals: &[targets::Target],
    limits: &[ServerLimit],
) -> String {
    let list = |items: Vec<String>| format!("[\n    {}\n  ]", items.join(",\n    "));
    let (url, version) = servers.url.map_or_else(
        || ("null".to_owned(), "null".to_owned()),
        |url| (format!("\"{url}\""), format!("\"{}\"", servers.version)),
    );
    let node_urls: Vec<String> = servers
        .node_urls
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let counts: Vec<String> = servers.counts.iter().map(usize::to_string).collect();
    let topologies = servers.topologies;
    let cluster_urls: Vec<String> = topologies
        .cluster_urls
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let quoted =
        |text: Option<&str>| text.map_or_else(|| "null".to_owned(), |t| format!("\"{t}\""));
    let cluster_version = quoted(topologies.cluster_version.as_deref());
    let (pair_primary, pair_replica) = match &topologies.pair_urls {
        Some((primary, replica)) => (quoted(Some(primary)), quoted(Some(replica))),
        None => (quoted(None), quoted(None)),
    };
    let (postgres_url, postgres_server) = match servers.postgres {
        Some((url, version)) => (quoted(Some(url)), quoted(Some(version))),
        None => (quoted(None), quoted(None)),
    };
    format!(
        "{{\n  \"url\": {url},\n  \"server\": {version},\n  \"w4_urls\": [{}],\n  \"w4_server\": \"{}\",\n  \"w4_node_counts\": [{}],\n  \"cluster_urls\": [{}],\n  \"cluster_server\": {cluster_version},\n  \"pair_primary\": {pair_primary},\n  \"pair_replica\": {pair_replica},\n  \"postgres_url\": {postgres_url},\n  \"postgres_server\": {postgres_server},\n  \"threads\": {},\n  \"rounds\": {},\n  \"smoke\": {},\n  \"loadavg_end\": \"{}\",\n  \"results\": {},\n  \"medians\": {},\n  \"ratios\": {},\n  \"targets\": {},\n  \"server_limit\": {}\n}}\n",
        node_urls.join(", "),
        servers.node_version,
        counts.join(", "),
        cluster_urls.join(", "),
        args.shared.threads,
        args.shared.rounds,
        args.shared.smoke,
        loadavg(),
        list(rows.iter().map(Measurement::to_json).collect()),
        list(medians.iter().map(|row| row.to_json()).collect()),
        list(ratios.iter().map(measurement::Ratio::to_json).collect()),
        list(goals.iter().map(targets::Target::to_json).collect()),
        list(limits.iter().map(ServerLimit::to_json).collect()),
    )
}

//! Where the time of an op goes: commands the server ran (`INFO commandstats`), server CPU
//! (`INFO cpu`), the server's read events (`INFO stats`: how many separate arrivals the requests
//! made) and this process's CPU (`/proc/self/stat`), sampled around each measured slice and added
//! up per contender.
//!
//! On PostgreSQL (W1P, W2P, W3P) the commands are the statements clients sent, by the function
//! they call (`pg_stat_statements`, when the server loads it), and the server CPU is that of the
//! server's processes (`/proc`, when the server runs on this machine); there are no read events.

use std::collections::BTreeMap;
use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use tokio_postgres::{NoTls, Statement};

use crate::contenders::BenchError;

/// A connection that reads the server's counters; not used by any contender.
#[derive(Clone)]
pub struct Probe {
    source: Source,
}

/// The server a probe reads.
#[derive(Clone)]
enum Source {
    Redis(MultiplexedConnection),
    Postgres(Arc<PgSource>),
}

/// A PostgreSQL server's counters, read on a connection of the probe's own.
struct PgSource {
    client: tokio_postgres::Client,
    /// `SELECT 1`, the round trip [`Probe::ping`] times.
    ping: Statement,
    /// Reads `pg_stat_statements`; `None` when the server does not load it.
    statements: Option<Statement>,
    /// The server's main process, when it runs on this machine: the CPU of it and of every
    /// process it started is the server's.
    postmaster: Option<u32>,
    /// `server_version`, e.g. `15.18 (Debian 15.18-0+deb12u1)`.
    version: String,
}

/// The statements of the probe's database that `pg_stat_statements` counted, the probe's own
/// reads of it left out. Nested statements (inside the `distlock` functions) are not counted
/// with its default `track = top`: each call is one statement a client sent.
const STATEMENTS: &str = "SELECT query, calls, total_exec_time FROM pg_stat_statements \
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
       AND query NOT LIKE '%pg_stat_statements%'";

/// Counters: absolute at one instant ([`Probe::snapshot`]), or the difference between two
/// ([`Counters::since`]), or a sum of differences ([`Counters::add`]).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Command name → (calls, microseconds spent in it).
    commands: BTreeMap<String, (u64, u64)>,
    /// Server CPU seconds (user + system).
    server_cpu: f64,
    /// Read events the server processed (`total_reads_processed`): one per arrival of requests
    /// on a connection, however many requests it carried. Each snapshot adds one per node (its
    /// own `INFO`), which [`Counters::since`] takes off again.
    server_reads: u64,
    /// Nodes whose counters these are (a snapshot; 0 in a difference).
    nodes: u64,
    /// This process's CPU seconds (user + system), on Linux.
    client_cpu: Option<f64>,
    /// The commands are SQL statements, each sent by a client (PostgreSQL): all of them are
    /// requests.
    sql: bool,
}

/// Commands a client sends itself; everything else in `commandstats` here was called from a Lua
/// script (Redis counts those too).
const CLIENT_COMMANDS: &[&str] = &[
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "script",
    "set",
    "get",
    "del",
    "ping",
    "hello",
    "client",
    "select",
    "subscribe",
    "unsubscribe",
    "ssubscribe",
    "multi",
    "exec",
    "wait",
    "waitaof",
];

/// Per-op costs of a [`Counters`] difference.
#[derive(Debug, Default)]
pub struct Cost {
    /// Commands the server ran per op, by name, most frequent first (the probe's own `INFO`
    /// left out), including those called from scripts.
    pub commands: Vec<(String, f64)>,
    /// Requests per op: calls of the commands clients send themselves (`CLIENT_COMMANDS`), minus
    /// `get` and `del` when they were called from a compare-and-delete script (counted when
    /// `evalsha` or `eval` also ran). PostgreSQL: every statement counted.
    pub requests: f64,
    /// Microseconds per op the server spent executing those requests (scripts included).
    pub server_cmd_us: f64,
    /// Server CPU microseconds per op (includes networking).
    pub server_cpu_us: f64,
    /// Server read events per op: requests per op divided by this is how many requests arrived
    /// together. 0 on PostgreSQL, which does not count them.
    pub server_reads: f64,
    /// This process's CPU microseconds per op.
    pub client_cpu_us: Option<f64>,
}

impl Probe {
    /// Opens the probe's own connection to the Redis server at `url`.
    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        let client = redis::Client::open(url)?;
        Ok(Probe {
            source: Source::Redis(client.get_multiplexed_async_connection().await?),
        })
    }

    /// Opens the probe's own connection to the PostgreSQL database at `url`, creating the
    /// `pg_stat_statements` extension there if it can (it counts only on a server that loads
    /// it: `shared_preload_libraries`).
    pub async fn connect_postgres(url: &str) -> Result<Self, BenchError> {
        let config: tokio_postgres::Config = url.parse()?;
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            // Ends with the client; an error then is nobody's concern here.
            let _ = connection.await;
        });
        // Fails without the privilege or the extension's files: then nothing is counted.
        let _ = client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await;
        // The view exists without the library loaded, but reading it then fails.
        let statements = match client.prepare(STATEMENTS).await {
            Ok(statement) if client.query(&statement, &[]).await.is_ok() => Some(statement),
            _ => None,
        };
        let ping = client.prepare("SELECT 1").await?;
        let row = client
            .query_one(
                "SELECT pg_backend_pid(), current_setting('server_version')",
                &[],
            )
            .await?;
        let (backend, version): (i32, String) = (row.get(0), row.get(1));
        // The probe's server process is a child of the postmaster when the server runs here
        // (and a `postgres` process of this machine has that pid).
        let postmaster = u32::try_from(backend)
            .ok()
            .and_then(proc_stat)
            .filter(|stat| stat.comm == "postgres")
            .and_then(|stat| proc_stat(stat.ppid))
            .filter(|stat| stat.comm == "postgres")
            .map(|stat| stat.pid);
        Ok(Probe {
            source: Source::Postgres(Arc::new(PgSource {
                client,
                ping,
                statements,
                postmaster,
                version,
            })),
        })
    }

    /// A PostgreSQL server's version; `None` on Redis.
    pub fn server_version(&self) -> Option<&str> {
        match &self.source {
            Source::Redis(_) => None,
            Source::Postgres(source) => Some(&source.version),
        }
    }

    /// PostgreSQL: whether statements are counted (the server loads `pg_stat_statements`) and
    /// whether the server's CPU is read (it runs on this machine). Redis: both.
    pub fn counts(&self) -> (bool, bool) {
        match &self.source {
            Source::Redis(_) => (true, true),
            Source::Postgres(source) => (source.statements.is_some(), source.postmaster.is_some()),
        }
    }

    /// The connection of a Redis probe; an error for a PostgreSQL one.
    fn redis(&self) -> Result<MultiplexedConnection, BenchError> {
        match &self.source {
            Source::Redis(connection) => Ok(connection.clone()),
            Source::Postgres(_) => Err("a Redis command on a PostgreSQL probe".into()),
        }
    }

    /// Reads the counters.
    pub async fn snapshot(&self) -> Result<Counters, BenchError> {
        let mut connection = match &self.source {
            Source::Redis(connection) => connection.clone(),
            Source::Postgres(source) => return source.snapshot().await,
        };
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .arg("stats")
            .query_async(&mut connection)
            .await?;
        let mut commands = BTreeMap::new();
        let mut server_cpu = 0.0;
        let mut server_reads = 0;
        for line in info.lines() {
            if let Some((name, stats)) = line
                .strip_prefix("cmdstat_")
                .and_then(|rest| rest.split_once(':'))
            {
                commands.insert(
                    name.to_owned(),
                    (field(stats, "calls"), field(stats, "usec")),
                );
            } else if let Some(value) = line
                .strip_prefix("used_cpu_user:")
                .or_else(|| line.strip_prefix("used_cpu_sys:"))
            {
                server_cpu += value.trim().parse::<f64>().unwrap_or(0.0);
            } else if let Some(value) = line.strip_prefix("total_reads_processed:") {
                server_reads = value.trim().parse().unwrap_or(0);
            }
        }
        Ok(Counters {
            commands,
            server_cpu,
            server_reads,
            nodes: 1,
            client_cpu: process_cpu_seconds(),
            sql: false,
        })
    }
}

impl PgSource {
    /// The statements counted so far, by [`statement_label`], and the CPU of the server's
    /// processes (0 when it is not on this machine).
    async fn snapshot(&self) -> Result<Counters, BenchError> {
        let mut commands = BTreeMap::new();
        if let Some(statement) = &self.statements {
            for row in self.client.query(statement, &[]).await? {
                let (calls, ms): (i64, f64) = (row.get(1), row.get(2));
                let entry: &mut (u64, u64) =
                    commands.entry(statement_label(row.get(0))).or_default();
                entry.0 += u64::try_from(calls).unwrap_or(0);
                // Whole microseconds of a running total: the truncation does not add up.
                entry.1 += (ms * 1000.0) as u64;
            }
        }
        Ok(Counters {
            commands,
            server_cpu: self.postmaster.map_or(0.0, tree_cpu_seconds),
            server_reads: 0,
            nodes: 1,
            client_cpu: process_cpu_seconds(),
            sql: true,
        })
    }
}

/// A short name for a statement `pg_stat_statements` shows: the first function it calls
/// (`distlock.acquire`, `pg_try_advisory_lock`), else its first word in lower case (`select`,
/// `listen`).
fn statement_label(query: &str) -> String {
    let called = query.find('(').map(|open| {
        let before = &query[..open];
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .map_or(0, |at| at + 1);
        &before[start..]
    });
    match called {
        Some(function) if !function.is_empty() => function.to_ascii_lowercase(),
        _ => query
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase(),
    }
}

/// What `/proc/<pid>/stat` says of a process.
struct ProcStat {
    pid: u32,
    /// The command name (`postgres`).
    comm: String,
    ppid: u32,
    /// utime + stime, in ticks of 1/100 s.
    ticks: u64,
}

/// `/proc/<pid>/stat` of `pid`, when it can be read (Linux).
fn proc_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    // Fields after the command name: state is field 3, ppid 4, utime 14, stime 15.
    let fields: Vec<&str> = stat.get(close + 2..)?.split(' ').collect();
    let number = |index: usize| fields.get(index)?.parse::<u64>().ok();
    Some(ProcStat {
        pid,
        comm: stat[open + 1..close].to_owned(),
        ppid: u32::try_from(number(1)?).ok()?,
        ticks: number(11)? + number(12)?,
    })
}

/// CPU seconds (user + system) of process `root` and of its children: a PostgreSQL server's
/// postmaster and every process serving it. A connection that ended meanwhile takes its CPU
/// with it, so the slices measured keep their connections.
fn tree_cpu_seconds(root: u32) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let ticks: u64 = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .filter(|stat| stat.pid == root || stat.ppid == root)
        .map(|stat| stat.ticks)
        .sum();
    ticks as f64 / 100.0
}

/// One connection of `CLIENT LIST`.
#[derive(Clone, Debug)]
pub struct ClientEntry {
    /// The connection's id.
    pub id: u64,
    /// Whether it is subscribed to anything (`sub`, `psub` or `ssub` above 0, or flag `P`).
    pub pubsub: bool,
}

impl Probe {
    /// One `PING` (PostgreSQL: a prepared `SELECT 1`), timed from send to reply.
    pub async fn ping(&self) -> Result<std::time::Duration, BenchError> {
        let sent = std::time::Instant::now();
        match &self.source {
            Source::Redis(connection) => {
                let _: String = redis::cmd("PING")
                    .query_async(&mut connection.clone())
                    .await?;
            }
            Source::Postgres(source) => {
                source.client.query_one(&source.ping, &[]).await?;
            }
        }
        Ok(sent.elapsed())
    }

    /// The name of the row of [`Probe::ping`]'s round trips: `ping`, or `select1` on
    /// PostgreSQL.
    pub fn ping_name(&self) -> &'static str {
        match self.source {
            Source::Redis(_) => "ping",
            Source::Postgres(_) => "select1",
        }
    }

    /// An integer field of `INFO <section>`, e.g. `pubsub_channels` of `stats`.
    pub async fn info_field(&self, section: &str, name: &str) -> Result<i64, BenchError> {
        let mut connection = self.redis()?;
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut connection)
            .await?;
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.trim().parse().ok())
            .ok_or_else(|| format!("INFO {section}: no integer field {name}").into())
    }

    /// `CLIENT LIST`: every connection of the server, the probe's own included.
    pub async fn client_list(&self) -> Result<Vec<ClientEntry>, BenchError> {
        let mut connection = self.redis()?;
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut connection)
            .await?;
        Ok(list.lines().filter_map(parse_client_line).collect())
    }

    /// How many keys match `pattern` (`SCAN … MATCH`; not atomic, fine for a quiet keyspace).
    pub async fn count_keys(&self, pattern: &str) -> Result<usize, BenchError> {
        let mut connection = self.redis()?;
        let mut cursor: u64 = 0;
        let mut count = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut connection)
                .await?;
            count += keys.len();
            if next == 0 {
                return Ok(count);
            }
            cursor = next;
        }
    }
}

/// One `CLIENT LIST` line (`id=7 addr=… flags=N … sub=0 psub=0 …`).
fn parse_client_line(line: &str) -> Option<ClientEntry> {
    let mut id = None;
    let mut pubsub = false;
    for (key, value) in line.split(' ').filter_map(|pair| pair.split_once('=')) {
        match key {
            "id" => id = value.parse().ok(),
            "sub" | "psub" | "ssub" => pubsub |= value.parse::<u64>().is_ok_and(|n| n > 0),
            "flags" => pubsub |= value.contains('P'),
            _ => {}
        }
    }
    Some(ClientEntry { id: id?, pubsub })
}

/// The counters of several servers at one instant, added up: their commands and server CPU
/// summed, this process's CPU read once.
pub async fn snapshot_all(probes: &[Probe]) -> Result<Counters, BenchError> {
    let mut total = Counters::default();
    for probe in probes {
        let counters = probe.snapshot().await?;
        for (name, (calls, usec)) in counters.commands {
            let entry = total.commands.entry(name).or_default();
            entry.0 += calls;
            entry.1 += usec;
        }
        total.server_cpu += counters.server_cpu;
        total.server_reads += counters.server_reads;
        total.nodes += counters.nodes;
        total.client_cpu = counters.client_cpu;
        total.sql |= counters.sql;
    }
    Ok(total)
}

fn field(stats: &str, name: &str) -> u64 {
    stats
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}

/// utime + stime of this process from `/proc/self/stat` (Linux ticks are 1/100 s).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which ends with the last ')': state is field 3, utime 14.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ').skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

impl Counters {
    /// What changed from `earlier` to `self`.
    pub fn since(&self, earlier: &Counters) -> Counters {
        let mut commands = BTreeMap::new();
        for (name, &(calls, usec)) in &self.commands {
            let (calls_before, usec_before) = earlier.commands.get(name).copied().unwrap_or((0, 0));
            let calls = calls.saturating_sub(calls_before);
            if name != "info" && calls > 0 {
                commands.insert(name.clone(), (calls, usec.saturating_sub(usec_before)));
            }
        }
        Counters {
            commands,
            server_cpu: self.server_cpu - earlier.server_cpu,
            // The later snapshot's own INFO on each node is counted in it.
            server_reads: self
                .server_reads
                .saturating_sub(earlier.server_reads)
                .saturating_sub(self.nodes),
            nodes: 0,
            client_cpu: self
                .client_cpu
                .zip(earlier.client_cpu)
                .map(|(now, before)| now - before),
            sql: self.sql,
        }
    }

    /// Adds a difference to this sum of differences.
    pub fn add(&mut self, delta: &Counters) {
        for (name, &(calls, usec)) in &delta.commands {
            let entry = self.commands.entry(name.clone()).or_default();
            entry.0 += calls;
            entry.1 += usec;
        }
        self.server_cpu += delta.server_cpu;
        self.server_reads += delta.server_reads;
        self.sql |= delta.sql;
        if let Some(cpu) = delta.client_cpu {
            *self.client_cpu.get_or_insert(0.0) += cpu;
        }
    }

    /// Calls of the commands named (lower case), e.g. `["evalsha", "eval", "fcall"]`.
    pub fn calls(&self, names: &[&str]) -> u64 {
        names
            .iter()
            .filter_map(|name| self.commands.get(*name))
            .map(|&(calls, _)| calls)
            .sum()
    }

    /// Adds calls of the commands named, as a difference would have them (tests).
    #[cfg(test)]
    pub fn record_calls(&mut self, calls: &[(&str, u64)]) {
        for &(name, count) in calls {
            self.commands.entry(name.to_owned()).or_default().0 += count;
        }
    }

    /// This difference spread over `ops` ops.
    pub fn per_op(&self, ops: u64) -> Cost {
        let ops_f = ops.max(1) as f64;
        let scripted = self
            .commands
            .keys()
            .any(|name| name.starts_with("eval") || name == "fcall");
        let (mut requests, mut request_usec) = (0, 0);
        for (name, &(calls, usec)) in &self.commands {
            let from_script = scripted && (name == "get" || name == "del");
            if self.sql || (CLIENT_COMMANDS.contains(&name.as_str()) && !from_script) {
                requests += calls;
                request_usec += usec;
            }
        }
        let mut commands: Vec<(String, f64)> = self
            .commands
            .iter()
            .map(|(name, &(calls, _))| (name.clone(), calls as f64 / ops_f))
            .collect();
        commands.sort_by(|a, b| b.1.total_cmp(&a.1));
        Cost {
            commands,
            requests: requests as f64 / ops_f,
            server_cmd_us: request_usec as f64 / ops_f,
            server_cpu_us: self.server_cpu * 1e6 / ops_f,
            server_reads: self.server_reads as f64 / ops_f,
            client_cpu_us: self.client_cpu.map(|cpu| cpu * 1e6 / ops_f),
        }
    }
}

impl Cost {
    /// `evalsha=2.00 publish=…`: the commands per op.
    pub fn commands_text(&self) -> String {
        let parts: Vec<String> = self
            .commands
            .iter()
            .map(|(name, per_op)| format!("{name}={per_op:.2}"))
            .collect();
        if parts.is_empty() {
            "-".to_owned()
        } else {
            parts.join(",")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_commandstats_fields() {
        let stats = "calls=2000,usec=5000,usec_per_call=2.50,rejected_calls=0,failed_calls=0";
        assert_eq!(field(stats, "calls"), 2000);
        assert_eq!(field(stats, "usec"), 5000);
        assert_eq!(field(stats, "missing"), 0);
    }

    #[test]
    fn differences_add_up() {
        let at = |calls, cpu, server_reads| Counters {
            commands: BTreeMap::from([
                ("evalsha".to_owned(), (calls, calls * 3)),
                ("info".to_owned(), (calls, 1)),
            ]),
            server_cpu: cpu,
            server_reads,
            // Two nodes: each snapshot's INFO adds one read on each.
            nodes: 2,
            client_cpu: Some(cpu),
            sql: false,
        };
        let mut sum = Counters::default();
        // One read per call, plus the snapshots' own.
        sum.add(&at(10, 1.0, 18).since(&at(4, 0.5, 10)));
        sum.add(&at(20, 2.0, 30).since(&at(10, 1.0, 18)));
        let cost = sum.per_op(8);
        assert_eq!(cost.commands, vec![("evalsha".to_owned(), 2.0)]);
        assert!((cost.requests - 2.0).abs() < 1e-9);
        assert!((cost.server_cmd_us - 6.0).abs() < 1e-9);
        // 16 calls, 16 reads once the snapshots' own are taken off: 2 per op.
        assert!(
            (cost.server_reads - 2.0).abs() < 1e-9,
            "{}",
            cost.server_reads
        );
        assert!((cost.server_cpu_us - 187_500.0).abs() < 1e-6);
    }

    #[test]
    fn parses_client_list_lines() {
        let plain = parse_client_line("id=7 addr=127.0.0.1:5 laddr=x fd=8 name= age=0 idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1").unwrap();
        assert_eq!(plain.id, 7);
        assert!(!plain.pubsub);
        let subscribed =
            parse_client_line("id=9 addr=127.0.0.1:6 flags=P db=0 sub=3 psub=0").unwrap();
        assert!(subscribed.pubsub);
        assert!(parse_client_line("").is_none());
    }

    #[test]
    fn labels_statements_by_the_function_they_call() {
        let label = |query| statement_label(query);
        assert_eq!(
            label("SELECT holds, token, ttl_ms FROM distlock.acquire($1, $2, $3, $4, $5)"),
            "distlock.acquire"
        );
        assert_eq!(
            label("SELECT distlock.release($1, $2, $3)"),
            "distlock.release"
        );
        assert_eq!(
            label("SELECT pg_try_advisory_lock(hashtextextended($1, $2))"),
            "pg_try_advisory_lock"
        );
        assert_eq!(label("SELECT $1"), "select");
        assert_eq!(label("LISTEN \"distlock_ab\""), "listen");
        assert_eq!(label("SELECT pid, (SELECT max(version) FROM t)"), "select");
    }

    #[test]
    fn reads_own_cpu_time() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu_seconds().is_some());
        }
    }
}

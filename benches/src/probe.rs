//! Where the time of an op goes: commands the server ran (`INFO commandstats`), server CPU
//! (`INFO cpu`), the server's read events (`INFO stats`: how many separate arrivals the requests
//! made) and this process's CPU (`/proc/self/stat`), sampled around each measured slice and added
//! up per contender.

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;

use crate::contenders::BenchError;

/// A connection that reads the server's counters; not used by any contender.
#[derive(Clone)]
pub struct Probe {
    connection: MultiplexedConnection,
}

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
    /// `evalsha` or `eval` also ran).
    pub requests: f64,
    /// Microseconds per op the server spent executing those requests (scripts included).
    pub server_cmd_us: f64,
    /// Server CPU microseconds per op (includes networking).
    pub server_cpu_us: f64,
    /// Server read events per op: requests per op divided by this is how many requests arrived
    /// together.
    pub server_reads: f64,
    /// This process's CPU microseconds per op.
    pub client_cpu_us: Option<f64>,
}

impl Probe {
    /// Opens the probe's own connection.
    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        let client = redis::Client::open(url)?;
        Ok(Probe {
            connection: client.get_multiplexed_async_connection().await?,
        })
    }

    /// Reads the counters.
    pub async fn snapshot(&self) -> Result<Counters, BenchError> {
        let mut connection = self.connection.clone();
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
        })
    }
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
    /// One `PING`, timed from send to reply.
    pub async fn ping(&self) -> Result<std::time::Duration, BenchError> {
        let mut connection = self.connection.clone();
        let sent = std::time::Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut connection).await?;
        Ok(sent.elapsed())
    }

    /// An integer field of `INFO <section>`, e.g. `pubsub_channels` of `stats`.
    pub async fn info_field(&self, section: &str, name: &str) -> Result<i64, BenchError> {
        let mut connection = self.connection.clone();
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
        let mut connection = self.connection.clone();
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut connection)
            .await?;
        Ok(list.lines().filter_map(parse_client_line).collect())
    }

    /// How many keys match `pattern` (`SCAN … MATCH`; not atomic, fine for a quiet keyspace).
    pub async fn count_keys(&self, pattern: &str) -> Result<usize, BenchError> {
        let mut connection = self.connection.clone();
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
            if CLIENT_COMMANDS.contains(&name.as_str()) && !from_script {
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
    fn reads_own_cpu_time() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu_seconds().is_some());
        }
    }
}

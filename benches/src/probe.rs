//! Where the time of an op goes: commands the server ran (`INFO commandstats`), server CPU
//! (`INFO cpu`) and this process's CPU (`/proc/self/stat`), sampled around a measured phase.

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;

use crate::contenders::BenchError;

/// A connection that reads the server's counters; not used by any contender.
#[derive(Clone)]
pub struct Probe {
    connection: MultiplexedConnection,
}

/// Counters at one instant.
#[derive(Debug)]
pub struct Snapshot {
    /// Command name → (calls, microseconds spent in it).
    commands: BTreeMap<String, (u64, u64)>,
    /// Server CPU seconds (user + system).
    server_cpu: f64,
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
];

/// Per-op costs between two snapshots.
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
    pub async fn snapshot(&self) -> Result<Snapshot, BenchError> {
        let mut connection = self.connection.clone();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .query_async(&mut connection)
            .await?;
        let mut commands = BTreeMap::new();
        let mut server_cpu = 0.0;
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
            }
        }
        Ok(Snapshot {
            commands,
            server_cpu,
            client_cpu: process_cpu_seconds(),
        })
    }
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

impl Snapshot {
    /// Costs per op from `self` (earlier) to `later`, over `ops` ops.
    pub fn cost_until(&self, later: &Snapshot, ops: u64) -> Cost {
        let ops_f = ops.max(1) as f64;
        let mut commands = Vec::new();
        for (name, &(calls, usec)) in &later.commands {
            let (calls_before, usec_before) = self.commands.get(name).copied().unwrap_or((0, 0));
            let calls = calls.saturating_sub(calls_before);
            if name != "info" && calls > 0 {
                commands.push((name.clone(), calls, usec.saturating_sub(usec_before)));
            }
        }
        let scripted = commands
            .iter()
            .any(|(name, _, _)| name.starts_with("eval") || name == "fcall");
        let (mut requests, mut request_usec) = (0, 0);
        for (name, calls, usec) in &commands {
            let from_script = scripted && (name == "get" || name == "del");
            if CLIENT_COMMANDS.contains(&name.as_str()) && !from_script {
                requests += calls;
                request_usec += usec;
            }
        }
        let mut commands: Vec<(String, f64)> = commands
            .into_iter()
            .map(|(name, calls, _)| (name, calls as f64 / ops_f))
            .collect();
        commands.sort_by(|a, b| b.1.total_cmp(&a.1));
        Cost {
            commands,
            requests: requests as f64 / ops_f,
            server_cmd_us: request_usec as f64 / ops_f,
            server_cpu_us: (later.server_cpu - self.server_cpu) * 1e6 / ops_f,
            client_cpu_us: match (self.client_cpu, later.client_cpu) {
                (Some(before), Some(after)) => Some((after - before) * 1e6 / ops_f),
                _ => None,
            },
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
    fn reads_own_cpu_time() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu_seconds().is_some());
        }
    }
}

//! One measured row (workload × contender), its output line, and the ratios between rows.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::probe::{Cost, Counters};

/// Latencies are recorded in nanoseconds (3 significant digits) and printed in microseconds.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// Records one latency sample, saturating at the histogram's upper bound.
pub fn record(histogram: &mut Histogram<u64>, latency: Duration) {
    let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
    histogram.saturating_record(nanos.max(1));
}

/// One contender's measured slices of a workload, added up.
#[derive(Debug)]
pub struct Tally {
    /// Pairs measured.
    pub ops: u64,
    /// Wall time of the measured slices.
    pub elapsed: Duration,
    /// Per-pair latency, nanoseconds.
    pub latency: Histogram<u64>,
    /// Server and process counters over the measured slices.
    pub counters: Counters,
}

impl Tally {
    /// Nothing measured yet.
    pub fn new() -> Self {
        Tally {
            ops: 0,
            elapsed: Duration::ZERO,
            latency: new_histogram(),
            counters: Counters::default(),
        }
    }

    /// The row named `contender` in `workload`, over `nodes` servers.
    pub fn into_row(
        self,
        workload: &'static str,
        contender: &'static str,
        tasks: usize,
        nodes: usize,
    ) -> Measurement {
        Measurement {
            workload,
            contender,
            tasks,
            nodes,
            ops: self.ops,
            elapsed: self.elapsed,
            cost: self.counters.per_op(self.ops),
            latency: self.latency,
            background: 0,
            round: 0,
            per: "op",
            extra: Vec::new(),
        }
    }
}

/// The result of one workload for one contender. An op is one lock + unlock pair.
#[derive(Debug)]
pub struct Measurement {
    /// `W1` … `W8`, `W8W`; `W1C`, `W2C`, `W5C` (a cluster); `W1A`, `W2A` (a primary and its
    /// replica); `W1P`, `W2P`, `W3P` (PostgreSQL).
    pub workload: &'static str,
    /// The contender's row name, e.g. `distlock-fixed` or `redlock-3`.
    pub contender: &'static str,
    /// Concurrent tasks.
    pub tasks: usize,
    /// Servers the row's counters are summed over (1 but for W4's multi-node rows and the
    /// cluster's primaries).
    pub nodes: usize,
    /// Lock + unlock pairs measured.
    pub ops: u64,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Per-pair latency, nanoseconds.
    pub latency: Histogram<u64>,
    /// Server commands and CPU per pair during the measured phase, summed over the row's nodes.
    pub cost: Cost,
    /// Watchdog locks the same locker held throughout (`--background-holds`; distlock rows only).
    pub background: usize,
    /// Which round (1-based) of `--rounds` this row is from.
    pub round: usize,
    /// What `cost` is spread over: `op` (a lock + unlock pair; W3: a handoff; W6: a wake-up; W7:
    /// an acquire + release pair), `period` (W5: one watchdog renewal period) or `pair` (W8W,
    /// whose ops are write attempts: every read or write pair of the row).
    pub per: &'static str,
    /// Workload-specific figures (W3, W5, W6, W7, W8, W8W), printed as `name=value` after the line and written
    /// to the JSON row under `extra`.
    pub extra: Vec<(&'static str, f64)>,
}

impl Measurement {
    /// Pairs per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// A latency quantile in microseconds.
    pub fn quantile_us(&self, quantile: f64) -> f64 {
        self.latency.value_at_quantile(quantile) as f64 / 1000.0
    }

    /// Prints the row as one line, then the server commands per op on a second, indented line.
    pub fn print_line(&self) {
        let client_cpu = self
            .cost
            .client_cpu_us
            .map_or_else(|| "-".to_owned(), |us| format!("{us:.1}us"));
        let mut background = if self.background > 0 {
            format!("  background-holds={}", self.background)
        } else {
            String::new()
        };
        if !self.extra.is_empty() {
            background.push(' ');
        }
        for (name, value) in &self.extra {
            let _ = write!(background, " {name}={}", number(*value));
        }
        println!(
            "{:<3} {:<17} tasks={:<2} ops={:<7} {:>7.0} ops/s  p50={:>6.1}us p99={:>7.1}us p999={:>7.1}us max={:>7.1}us  req/{}={:.2} reads={:.2} srv-cpu={:.1}us cli-cpu={client_cpu}{background}",
            self.workload,
            self.contender,
            self.tasks,
            self.ops,
            self.ops_per_sec(),
            self.quantile_us(0.50),
            self.quantile_us(0.99),
            self.quantile_us(0.999),
            self.latency.max() as f64 / 1000.0,
            self.per,
            self.cost.requests,
            self.cost.server_reads,
            self.cost.server_cpu_us,
        );
        println!(
            "    server cmds/{}: {}",
            self.per,
            self.cost.commands_text()
        );
    }

    /// The row as a JSON object.
    pub fn to_json(&self) -> String {
        let commands: Vec<String> = self
            .cost
            .commands
            .iter()
            .map(|(name, per_op)| format!("\"{name}\":{per_op:.3}"))
            .collect();
        let client_cpu = self
            .cost
            .client_cpu_us
            .map_or_else(|| "null".to_owned(), |us| format!("{us:.2}"));
        let extra: Vec<String> = self
            .extra
            .iter()
            .map(|(name, value)| format!("\"{name}\":{}", json_number(*value)))
            .collect();
        format!(
            "{{\"workload\":\"{}\",\"contender\":\"{}\",\"round\":{},\"tasks\":{},\"nodes\":{},\"background_holds\":{},\"ops\":{},\"elapsed_s\":{:.6},\"ops_per_sec\":{:.1},\"p50_us\":{:.1},\"p99_us\":{:.1},\"p999_us\":{:.1},\"max_us\":{:.1},\"requests_per_op\":{:.3},\"server_reads_per_op\":{:.3},\"server_cmd_us_per_op\":{:.2},\"server_cpu_us_per_op\":{:.2},\"client_cpu_us_per_op\":{client_cpu},\"cost_per\":\"{}\",\"server_commands_per_op\":{{{}}},\"extra\":{{{}}}}}",
            self.workload,
            self.contender,
            self.round,
            self.tasks,
            self.nodes,
            self.background,
            self.ops,
            self.elapsed.as_secs_f64(),
            self.ops_per_sec(),
            self.quantile_us(0.50),
            self.quantile_us(0.99),
            self.quantile_us(0.999),
            self.latency.max() as f64 / 1000.0,
            self.cost.requests,
            self.cost.server_reads,
            self.cost.server_cmd_us,
            self.cost.server_cpu_us,
            self.per,
            commands.join(","),
            extra.join(","),
        )
    }
}

/// An extra figure as printed: whole numbers without decimals, others with two (three
/// significant digits below 1).
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else if value.abs() < 1.0 {
        format!("{value:.3}")
    } else {
        format!("{value:.2}")
    }
}

/// An extra figure as a JSON number (`null` when not finite).
fn json_number(value: f64) -> String {
    if value.is_finite() {
        format!("{value}")
    } else {
        "null".to_owned()
    }
}

/// What a [`Ratio`] divides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// ops/s ÷ ops/s: higher = the numerator is faster.
    Throughput,
    /// p50 latency ÷ p50 latency: lower = the numerator is faster.
    P50,
}

impl Metric {
    /// The metric as printed (`ops/s`, `p50`).
    pub fn label(self) -> &'static str {
        match self {
            Metric::Throughput => "ops/s",
            Metric::P50 => "p50",
        }
    }

    /// The metric as its JSON name.
    fn json_name(self) -> &'static str {
        match self {
            Metric::Throughput => "ops_per_sec",
            Metric::P50 => "p50_us",
        }
    }

    /// The metric's value for `row`.
    pub fn of(self, row: &Measurement) -> f64 {
        match self {
            Metric::Throughput => row.ops_per_sec(),
            Metric::P50 => row.quantile_us(0.50),
        }
    }
}

/// `metric` of `numerator` ÷ `metric` of `denominator` within one workload.
#[derive(Debug)]
pub struct Ratio {
    /// The rows' workload, e.g. `W1` or `W2C`.
    pub workload: &'static str,
    /// What is divided.
    pub metric: Metric,
    /// The row divided.
    pub numerator: &'static str,
    /// The row divided by.
    pub denominator: &'static str,
    /// `metric` ÷ `metric`.
    pub value: f64,
}

impl Ratio {
    /// `metric(numerator) ÷ metric(denominator)`, when both rows are in `rows` (same workload).
    pub fn between(
        rows: &[&Measurement],
        workload: &'static str,
        metric: Metric,
        numerator: &str,
        denominator: &str,
    ) -> Option<Ratio> {
        let find = |name: &str| {
            rows.iter()
                .find(|row| row.workload == workload && row.contender == name)
        };
        let (num, den) = (find(numerator)?, find(denominator)?);
        Some(Ratio {
            workload,
            metric,
            numerator: num.contender,
            denominator: den.contender,
            value: metric.of(num) / metric.of(den),
        })
    }
}

/// Per workload and contender, the round with the median throughput (the lower middle one for an
/// even count), in first-run order.
pub fn medians(rows: &[Measurement]) -> Vec<&Measurement> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for row in rows {
        let key = (row.workload, row.contender);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let mut same: Vec<&Measurement> = rows
            .iter()
            .filter(|other| (other.workload, other.contender) == key)
            .collect();
        same.sort_by(|a, b| a.ops_per_sec().total_cmp(&b.ops_per_sec()));
        out.push(same[(same.len() - 1) / 2]);
    }
    out
}

/// W1 and W2 (and W1C, W2C on a cluster, W1P, W2P on PostgreSQL): every distlock row divided by
/// every baseline row of the same workload. (The other workloads pick their own ratios.)
pub fn ratios(rows: &[&Measurement]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for row in rows.iter().filter(|row| {
        matches!(row.workload, "W1" | "W2" | "W1C" | "W2C" | "W1P" | "W2P")
            && row.contender.starts_with("distlock")
    }) {
        for base in rows
            .iter()
            .filter(|base| base.workload == row.workload && !base.contender.starts_with("distlock"))
        {
            out.push(Ratio {
                workload: row.workload,
                metric: Metric::Throughput,
                numerator: row.contender,
                denominator: base.contender,
                value: row.ops_per_sec() / base.ops_per_sec(),
            });
        }
    }
    out
}

/// Prints the ratios, one line per workload, numerator row and metric.
pub fn print_ratios(ratios: &[Ratio]) {
    let mut line = String::new();
    let mut current: Option<(&str, &str, Metric)> = None;
    for ratio in ratios {
        let key = (ratio.workload, ratio.numerator, ratio.metric);
        if current != Some(key) {
            if !line.is_empty() {
                println!("{line}");
            }
            line = format!(
                "{:<3} {:<18} {} ÷",
                ratio.workload,
                ratio.numerator,
                ratio.metric.label()
            );
            current = Some(key);
        }
        let _ = write!(line, "  {} {:.2}", ratio.denominator, ratio.value);
    }
    if !line.is_empty() {
        println!("{line}");
    }
}

impl Ratio {
    /// The ratio as a JSON object.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"workload\":\"{}\",\"metric\":\"{}\",\"numerator\":\"{}\",\"denominator\":\"{}\",\"ratio\":{:.4}}}",
            self.workload,
            self.metric.json_name(),
            self.numerator,
            self.denominator,
            self.value
        )
    }
}

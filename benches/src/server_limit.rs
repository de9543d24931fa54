//! The raw server limit: `redis-benchmark` SET/GET, when the binary is installed.

use std::process::Command;

/// One `redis-benchmark -q` result line, e.g. `SET: 40080.16 requests per second, p50=0.023 msec`.
#[derive(Debug)]
pub struct ServerLimit {
    /// `-c 1` or `-c 64 -P 1`.
    pub clients: u32,
    /// `SET` or `GET`.
    pub test: String,
    /// Requests per second.
    pub rps: f64,
    /// The rest of the line (the p50), as printed.
    pub detail: String,
}

/// Runs `redis-benchmark -h host -p port -q -n 100000 -t set,get -c {1, 64} -P 1`. Returns
/// nothing (and says why on stderr) when the binary is missing or fails.
pub fn measure(host: &str, port: u16) -> Vec<ServerLimit> {
    let mut out = Vec::new();
    for clients in [1, 64] {
        let result = Command::new("redis-benchmark")
            .args(["-h", host, "-p", &port.to_string()])
            .args(["-q", "-n", "100000", "-t", "set,get", "-P", "1"])
            .args(["-c", &clients.to_string()])
            .output();
        let output = match result {
            Ok(output) if output.status.success() => output,
            Ok(output) => {
                eprintln!(
                    "redis-benchmark -c {clients} failed ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                );
                return out;
            }
            Err(error) => {
                eprintln!("redis-benchmark skipped: {error}");
                return out;
            }
        };
        // Progress updates end in '\r'; the final lines in '\n'.
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        for line in text.split(['\r', '\n']) {
            if let Some(limit) = parse_line(clients, line) {
                out.push(limit);
            }
        }
    }
    out
}

fn parse_line(clients: u32, line: &str) -> Option<ServerLimit> {
    let (test, rest) = line.split_once(": ")?;
    let (rps, detail) = rest.split_once(" requests per second")?;
    Some(ServerLimit {
        clients,
        test: test.trim().to_owned(),
        rps: rps.trim().parse().ok()?,
        detail: detail.trim_start_matches(',').trim().to_owned(),
    })
}

impl ServerLimit {
    /// Prints the result as one line.
    pub fn print_line(&self) {
        println!(
            "SRV redis-benchmark      -c {:<2} -P 1 {:<4} {:>9.0} req/s  {}",
            self.clients, self.test, self.rps, self.detail
        );
    }

    /// The result as a JSON object.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"tool\":\"redis-benchmark\",\"clients\":{},\"test\":\"{}\",\"rps\":{:.1},\"detail\":\"{}\"}}",
            self.clients,
            self.test,
            self.rps,
            self.detail.replace(['"', '\\'], "")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quiet_output() {
        let line = "SET: 40080.16 requests per second, p50=0.023 msec";
        let limit = parse_line(1, line).unwrap();
        assert_eq!(limit.test, "SET");
        assert!((limit.rps - 40080.16).abs() < 1e-6);
        assert_eq!(limit.detail, "p50=0.023 msec");
        assert!(parse_line(1, "SET: rps=1234.0 (overall: 1.0) avg_msec=0.1").is_none());
    }
}

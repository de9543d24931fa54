//! How often a server ran a command, from `INFO commandstats`: the count tests use to show what
//! a lock call sent (no `PING` per lone call, no `PUBLISH` nobody hears, batched renewals).
//! Commands a script ran are counted too.

use redis::aio::MultiplexedConnection;

/// `calls=` of `command` (lower case, as the server names it: `evalsha`, `ping`) in the text of
/// `INFO commandstats`; 0 when it never ran.
///
/// ```
/// let info = "# Commandstats\r\ncmdstat_ping:calls=3,usec=4,usec_per_call=1.33\r\n";
/// assert_eq!(lock_testkit::commandstats::calls_in(info, "ping"), 3);
/// assert_eq!(lock_testkit::commandstats::calls_in(info, "publish"), 0);
/// ```
///
/// # Panics
///
/// When the count is not a number (not `INFO commandstats` text).
#[must_use]
pub fn calls_in(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |count| count.trim().parse().expect("calls is a number"))
}

/// How many times the server behind `connection` ran `command` so far ([`calls_in`]).
///
/// # Panics
///
/// When the server does not answer `INFO commandstats`.
pub async fn command_calls(connection: &mut MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(connection)
        .await
        .expect("INFO commandstats");
    calls_in(&info, command)
}

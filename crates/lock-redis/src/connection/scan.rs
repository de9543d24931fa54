//! Walking a node's keys with `SCAN` (never `KEYS`, which blocks the server for the whole
//! keyspace), for operators' listings.

use std::collections::BTreeSet;
use std::future::Future;

use std::time::Duration;

use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, Value};

/// Keys asked for per `SCAN` step: a hint to the server, which may return more or fewer.
const STEP: usize = 1000;

/// Adds the keys matching `pattern` of one node to `into`, one `SCAN` step at a time through
/// `send`, each step within `step_timeout`, until the node's keys are walked or `into` holds
/// `limit` keys. Returns whether the node's keys were walked to the end (a step returns as
/// many keys as it finds, so `into` may then hold more than `limit`).
///
/// # Errors
///
/// The first error `send` returns, a step that timed out, or a reply that is not a `SCAN`
/// reply.
pub(crate) async fn scan_node<F, Fut>(
    mut send: F,
    pattern: &str,
    limit: usize,
    step_timeout: Duration,
    into: &mut BTreeSet<String>,
) -> RedisResult<bool>
where
    F: FnMut(Cmd) -> Fut,
    Fut: Future<Output = RedisResult<Value>>,
{
    let mut cursor = String::from("0");
    loop {
        let mut step = redis::cmd("SCAN");
        step.arg(&cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(STEP);
        let reply = tokio::time::timeout(step_timeout, send(step))
            .await
            .map_err(|_| RedisError::from((ErrorKind::Io, "a SCAN step timed out")))??
            .extract_error()?;
        let (next, keys) = <(String, Vec<String>)>::from_redis_value(reply)?;
        into.extend(keys);
        if next == "0" {
            return Ok(true);
        }
        if into.len() >= limit {
            return Ok(false);
        }
        cursor = next;
    }
}

//! W1C, W2C and W5C: W1, W2 and W5 on a Redis Cluster of [`PRIMARIES`] primaries (no
//! replicas), started from the same server binary as the other workloads.
//!
//! Rows of W1C and W2C (each on its own cluster connection, so its own connection to every
//! primary):
//!
//! - `ping2`: two `PING`s per cycle, each routed to the primary serving the cycle's key (the
//!   round-trip floor of the cluster client stack);
//! - `raw-script`: a raw redis-rs cluster client (`cluster_async::ClusterConnection`, default
//!   settings) running distlock's acquire.lua and release.lua by `EVALSHA` with the keys and
//!   arguments distlock sends, routed by redis-rs from the first key, the release announced the
//!   way a cluster backend with the default `ShardedPubSub::Auto` announces it (asked the same
//!   way: `b`, both kinds, on Redis 7+);
//! - `distlock-fixed`, `distlock-lock`, `distlock-fast` (and the other distlock rows when
//!   picked with `--contenders`): `Locker<RedisBackend>` from `RedisBackend::cluster_builder`,
//!   default settings.
//!
//! Every cycle locks a fresh name (`<prefix>:w1c:<row>:<i>`; W2C adds the task), so the names
//! spread over the slots and the primaries. The counters of each row are summed over the
//! primaries.

use crate::contenders::{BenchError, Contender, Kind};

/// Primaries of the cluster the workloads start.
pub const PRIMARIES: usize = 3;

/// The rows W1C and W2C run: `kinds` (from `--contenders`) that a cluster offers, else
/// [`Kind::CLUSTER`], each connected to the cluster through `seeds`.
pub async fn entrants(
    kinds: Option<&[Kind]>,
    seeds: &[String],
) -> Result<Vec<(&'static str, Contender)>, BenchError> {
    let kinds = kinds.unwrap_or(&Kind::CLUSTER);
    let mut entrants = Vec::with_capacity(kinds.len());
    for &kind in kinds {
        if let Some(contender) = Contender::connect_cluster(kind, seeds).await? {
            entrants.push((kind.name(), contender));
        }
    }
    if entrants.is_empty() {
        return Err(
            "W1C/W2C: none of --contenders runs on a cluster (ping2, raw-script and \
                    the distlock rows do)"
                .into(),
        );
    }
    Ok(entrants)
}

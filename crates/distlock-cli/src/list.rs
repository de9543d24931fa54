//! `distlock list [PATTERN]`: the names of the family (locks of every kind, elections,
//! semaphores, latches) matching a glob, with their kind, walked with `SCAN` on every primary ([`distlock::redis::RedisBackend::list_locks`]).

use std::process::ExitCode;

use distlock::RedisLocker;
use serde_json::json;

use crate::exit;
use crate::status::as_json;

/// `distlock list [PATTERN] [--limit N] [--json]`
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// A glob on lock names (`*`, `?`, `[…]`; `\` escapes).
    #[arg(default_value = "*")]
    pub(crate) pattern: String,
    /// Look at no more than about this many keys.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) limit: u64,
    /// One JSON object (`locks`, `complete`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `distlock list`.
pub async fn list(locker: RedisLocker, args: ListArgs) -> ExitCode {
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let list = match locker.backend().list_locks(&args.pattern, limit).await {
        Ok(list) => list,
        Err(error) => {
            eprintln!("distlock: cannot list {:?}: {error}", args.pattern);
            return exit::code(exit::BACKEND_ERROR);
        }
    };
    if args.json {
        let locks: Vec<_> = list
            .locks
            .iter()
            .map(|(name, lock)| as_json(name, lock))
            .collect();
        println!("{}", json!({ "locks": locks, "complete": list.complete }));
    } else {
        for (name, lock) in &list.locks {
            let holders: Vec<String> = lock
                .holders
                .iter()
                .map(|(owner, holds)| format!("{owner}×{holds}"))
                .collect();
            let mut held = holders.join(",");
            // A count has no holders: its count instead.
            if let (true, Some(count)) = (held.is_empty(), lock.available) {
                held = format!("count {count}");
            }
            let lease = lock
                .ttl
                .map_or_else(|| "-".to_owned(), |ttl| format!("{} s", ttl.as_secs()));
            let channels = &lock.channels;
            let waiters = lock.subscribers
                + lock.sharded_subscribers
                + channels.read_write
                + channels.semaphore
                + channels.latch.unwrap_or(0);
            println!(
                "{name}\t{}\t{held}\tlease {lease}\twaiters {waiters}",
                crate::status::kind_name(&lock.layout).unwrap_or("?"),
            );
        }
        if !list.complete {
            eprintln!(
                "distlock: stopped after {} keys (--limit); there may be more",
                args.limit
            );
        }
    }
    ExitCode::SUCCESS
}

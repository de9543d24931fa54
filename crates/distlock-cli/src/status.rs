//! `distlock status NAME` and `distlock watch NAME`: what the server holds for a lock name,
//! read in one step ([`distlock::redis::RedisBackend::describe`]), as text or JSON.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use distlock::RedisLocker;
use distlock::redis::{Layout, LockDescription};
use serde_json::json;

use crate::exit;

/// `distlock status NAME [--json]`
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The lock's name.
    name: String,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// `distlock watch NAME [--json] [--every DUR]`
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The lock's name.
    name: String,
    /// One JSON object per change instead of text.
    #[arg(long)]
    json: bool,
    /// How often to look.
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    every: Duration,
}

/// Runs `distlock status`.
pub async fn status(locker: RedisLocker, args: StatusArgs) -> ExitCode {
    match locker.backend().describe(&args.name).await {
        Ok(lock) => {
            if args.json {
                println!("{}", as_json(&args.name, &lock));
            } else {
                print!("{}", as_text(&args.name, &lock));
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("distlock: cannot read {:?}: {error}", args.name);
            exit::code(exit::BACKEND_ERROR)
        }
    }
}

/// Runs `distlock watch`: prints the lock again whenever what it shows changes (the lease
/// left is shown to the second, so a held lock is reprinted about once a second), until
/// interrupted.
pub async fn watch(locker: RedisLocker, args: WatchArgs) -> ExitCode {
    let terminal = std::io::stdout().is_terminal();
    let mut last = String::new();
    loop {
        let shown = match locker.backend().describe(&args.name).await {
            Ok(lock) if args.json => format!("{}\n", as_json(&args.name, &lock)),
            Ok(lock) => as_text(&args.name, &lock),
            Err(error) => format!("cannot read {:?}: {error}\n", args.name),
        };
        // The text rounds the lease to the second; JSON in ms would change every time.
        let compared = if args.json {
            shown.replace(|c: char| c.is_ascii_digit(), "")
        } else {
            shown.clone()
        };
        if compared != last {
            if terminal && !args.json {
                // Clear the screen and go home: a live view.
                print!("\x1b[2J\x1b[H");
            }
            print!("{shown}");
            last = compared;
        }
        tokio::select! {
            () = tokio::time::sleep(args.every) => {}
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
        }
    }
}

/// The lock kind's command-line name, for a lock.
pub fn kind_name(layout: &Layout) -> Option<&'static str> {
    match layout {
        Layout::Reentrant => Some("reentrant"),
        Layout::Fast => Some("fast"),
        _ => None,
    }
}

/// The lock as a few lines of text.
pub fn as_text(name: &str, lock: &LockDescription) -> String {
    let mut text = match &lock.layout {
        Layout::Free => format!("{name}: free\n"),
        Layout::Reentrant => format!("{name}: held (reentrant lock, Redisson's RLock layout)\n"),
        Layout::Fast => format!("{name}: held (fast lock)\n"),
        Layout::Other(kind) => format!("{name}: not a lock (a key of type {kind})\n"),
        other => format!("{name}: {other:?}\n"),
    };
    for (owner, holds) in &lock.holders {
        text += &format!("  holder {owner} ({holds} hold{})\n", plural(*holds));
    }
    if let Some(ttl) = lock.ttl {
        text += &format!("  lease left {} s\n", ttl.as_secs());
    }
    if let Some(counter) = lock.fencing_counter {
        text += &format!("  last fencing token {counter}\n");
    }
    text += &format!(
        "  waiters subscribed {} (pub/sub), {} (sharded pub/sub)\n",
        lock.subscribers, lock.sharded_subscribers
    );
    text
}

fn plural(count: u32) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// The lock as one JSON object.
pub fn as_json(name: &str, lock: &LockDescription) -> serde_json::Value {
    let state = match lock.layout {
        Layout::Free => "free",
        Layout::Reentrant | Layout::Fast => "held",
        _ => "other",
    };
    let key_type = match &lock.layout {
        Layout::Free => None,
        Layout::Reentrant => Some("hash"),
        Layout::Fast => Some("string"),
        Layout::Other(kind) => Some(kind.as_str()),
        _ => None,
    };
    json!({
        "name": name,
        "state": state,
        "kind": kind_name(&lock.layout),
        "key_type": key_type,
        "holders": lock.holders.iter().map(|(owner, holds)| json!({
            "owner": owner,
            "holds": holds,
        })).collect::<Vec<_>>(),
        "ttl_ms": lock.ttl.map(|ttl| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
        "fencing_counter": lock.fencing_counter,
        "waiters": {
            "subscribed": lock.subscribers,
            "sharded": lock.sharded_subscribers,
        },
    })
}

//! `distlock status NAME` and `distlock watch NAME`: what the server holds for a name, whichever
//! kind of the family uses it, read in one step ([`distlock::redis::RedisBackend::describe`]), as text or JSON.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use distlock::ReadWriteMode;
use distlock::RedisLocker;
use distlock::redis::{Layout, LockDescription};
use serde_json::json;

use crate::exit;

/// `distlock status NAME [--json]`
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The lock's name.
    pub(crate) name: String,
    /// One JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `distlock watch NAME [--json] [--every DUR]`
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The lock's name.
    pub(crate) name: String,
    /// One JSON object per change instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// How often to look.
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    pub(crate) every: Duration,
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

/// The kind's command-line name, for a name of the family.
pub fn kind_name(layout: &Layout) -> Option<&'static str> {
    match layout {
        Layout::Reentrant => Some("reentrant"),
        Layout::Fast => Some("fast"),
        Layout::ReadWrite => Some("rwlock"),
        Layout::Fair => Some("fair"),
        Layout::Election => Some("election"),
        Layout::Permits => Some("permits"),
        Layout::Semaphore => Some("semaphore"),
        Layout::Latch => Some("latch"),
        Layout::Counter => Some("semaphore-or-latch"),
        _ => None,
    }
}

/// The name as a few lines of text.
pub fn as_text(name: &str, lock: &LockDescription) -> String {
    let count = lock.available.unwrap_or(0);
    let mut text = match &lock.layout {
        Layout::Free => format!("{name}: free\n"),
        Layout::Reentrant => format!("{name}: held (reentrant lock, Redisson's RLock layout)\n"),
        Layout::Fast => format!("{name}: held (fast lock)\n"),
        Layout::ReadWrite => format!(
            "{name}: held for {} (read-write lock, Redisson's RReadWriteLock layout)\n",
            match lock.mode {
                Some(ReadWriteMode::Write) => "writing",
                _ => "reading",
            }
        ),
        Layout::Fair if lock.holders.is_empty() => {
            format!("{name}: free, waiters queued (fair lock, Redisson's RFairLock layout)\n")
        }
        Layout::Fair => format!("{name}: held (fair lock, Redisson's RFairLock layout)\n"),
        Layout::Election => format!("{name}: led (election)\n"),
        Layout::Permits => format!(
            "{name}: lease-bound permits (Redisson's RPermitExpirableSemaphore layout)\n{}",
            match lock.available {
                Some(available) => format!("  available {available}\n"),
                None => "  available: no count (deleted)\n".to_owned(),
            }
        ),
        Layout::Semaphore => {
            format!("{name}: semaphore (Redisson's RSemaphore layout)\n  available {count}\n")
        }
        Layout::Latch => format!(
            "{name}: countdown latch (Redisson's RCountDownLatch layout)\n  count {count}\n"
        ),
        Layout::Counter => format!(
            "{name}: a semaphore or a latch (both store a count; nobody waits on either to \
             tell which)\n  count {count}\n"
        ),
        Layout::Other(kind) => format!("{name}: not a lock (a key of type {kind})\n"),
        other => format!("{name}: {other:?}\n"),
    };
    match &lock.layout {
        Layout::ReadWrite => {
            if let Some((owner, holds)) = &lock.writer {
                text += &format!("  writer {owner} ({holds} write hold{})\n", plural(*holds));
            }
            for (owner, holds) in &lock.readers {
                text += &format!("  reader {owner} ({holds} read hold{})\n", plural(*holds));
            }
        }
        Layout::Permits => {
            for (owner, permits) in &lock.holders {
                text += &format!("  holder {owner} ({permits} permit{})\n", plural(*permits));
            }
            for (id, left) in &lock.permits {
                text += &format!("  permit {id} (lease left {} s)\n", left.as_secs());
            }
            if lock.expired_permits > 0 {
                text += &format!(
                    "  expired permits {} (given back at the next attempt)\n",
                    lock.expired_permits
                );
            }
        }
        _ => {
            for (owner, holds) in &lock.holders {
                text += &format!("  holder {owner} ({holds} hold{})\n", plural(*holds));
            }
        }
    }
    if let Some(value) = &lock.leader_value {
        text += &format!("  leader value {value}\n");
    }
    for (place, (owner, left)) in lock.queue.iter().enumerate() {
        let left = left.map_or_else(
            || "no deadline".to_owned(),
            |left| format!("place kept {} s", left.as_secs()),
        );
        text += &format!("  queued {}. {owner} ({left})\n", place + 1);
    }
    if let Some(ttl) = lock.ttl {
        text += &format!("  lease left {} s\n", ttl.as_secs());
    }
    if let Some(counter) = lock.fencing_counter {
        text += &format!("  last fencing token {counter}\n");
    }
    let channels = &lock.channels;
    let latch = || {
        channels
            .latch
            .map_or_else(|| "unknown".to_owned(), |n| n.to_string())
    };
    match &lock.layout {
        Layout::ReadWrite => {
            text += &format!(
                "  waiters subscribed {} (read-write channel)\n",
                channels.read_write
            );
        }
        Layout::Permits | Layout::Semaphore => {
            text += &format!(
                "  waiters subscribed {} (semaphore channel)\n",
                channels.semaphore
            );
        }
        Layout::Latch => text += &format!("  waiters subscribed {} (latch channel)\n", latch()),
        Layout::Counter => {
            text += &format!(
                "  waiters subscribed {} (semaphore channel), {} (latch channel)\n",
                channels.semaphore,
                latch()
            );
        }
        _ => {
            text += &format!(
                "  waiters subscribed {} (pub/sub), {} (sharded pub/sub)\n",
                lock.subscribers, lock.sharded_subscribers
            );
            if lock.layout == Layout::Election {
                text += &format!("  observers subscribed {}\n", channels.election);
            }
        }
    }
    text
}

fn plural(count: u32) -> &'static str {
    if count == 1 { "" } else { "s" }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn holds(holders: &[(String, u32)]) -> Vec<serde_json::Value> {
    holders
        .iter()
        .map(|(owner, holds)| json!({ "owner": owner, "holds": holds }))
        .collect()
}

/// The name as one JSON object: the fields every kind has, and its kind's own.
pub fn as_json(name: &str, lock: &LockDescription) -> serde_json::Value {
    let state = match &lock.layout {
        Layout::Free => "free",
        Layout::Fair if lock.holders.is_empty() => "free",
        Layout::Permits if lock.holders.is_empty() => "counter",
        Layout::Reentrant
        | Layout::Fast
        | Layout::ReadWrite
        | Layout::Fair
        | Layout::Election
        | Layout::Permits => "held",
        Layout::Semaphore | Layout::Latch | Layout::Counter => "counter",
        _ => "other",
    };
    let key_type = match &lock.layout {
        Layout::Free => None,
        Layout::Reentrant | Layout::ReadWrite | Layout::Election => Some("hash"),
        Layout::Fair => (!lock.holders.is_empty()).then_some("hash"),
        Layout::Permits => lock.available.map(|_| "string"),
        Layout::Fast | Layout::Semaphore | Layout::Latch | Layout::Counter => Some("string"),
        Layout::Other(kind) => Some(kind.as_str()),
        _ => None,
    };
    let channels = &lock.channels;
    let mut shown = json!({
        "name": name,
        "state": state,
        "kind": kind_name(&lock.layout),
        "key_type": key_type,
        "holders": holds(&lock.holders),
        "ttl_ms": lock.ttl.map(millis),
        "fencing_counter": lock.fencing_counter,
        "waiters": {
            "subscribed": lock.subscribers,
            "sharded": lock.sharded_subscribers,
            "read_write": channels.read_write,
            "semaphore": channels.semaphore,
            "latch": channels.latch,
            "election": channels.election,
        },
    });
    let extra = match &lock.layout {
        Layout::ReadWrite => json!({
            "mode": match lock.mode {
                Some(ReadWriteMode::Read) => Some("read"),
                Some(ReadWriteMode::Write) => Some("write"),
                _ => None,
            },
            "readers": holds(&lock.readers),
            "writer": lock.writer.as_ref().map(|(owner, holds)| json!({
                "owner": owner,
                "holds": holds,
            })),
        }),
        Layout::Fair => json!({
            "queue": lock.queue.iter().map(|(owner, left)| json!({
                "owner": owner,
                "place_ms": left.map(millis),
            })).collect::<Vec<_>>(),
        }),
        Layout::Election => json!({ "leader_value": lock.leader_value }),
        Layout::Permits => json!({
            "available": lock.available,
            "permits": lock.permits.iter().map(|(id, left)| json!({
                "id": id,
                "ttl_ms": millis(*left),
            })).collect::<Vec<_>>(),
            "expired_permits": lock.expired_permits,
        }),
        Layout::Semaphore => json!({ "available": lock.available }),
        Layout::Latch | Layout::Counter => json!({ "count": lock.available }),
        _ => json!({}),
    };
    if let (Some(shown), serde_json::Value::Object(extra)) = (shown.as_object_mut(), extra) {
        shown.extend(extra);
    }
    shown
}

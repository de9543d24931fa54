//! `distlock postgres schema|install`, and the family's commands (`status`, `watch`, `list`,
//! `unlock`) on a PostgreSQL database.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use distlock::{Leader, LockState, PermitState, PostgresLocker, ReadWriteMode, ReadWriteState};
use serde_json::json;

use crate::Commands;
use crate::connection::ConnectionArgs;
use crate::exit;
use crate::list::ListArgs;
use crate::status::{StatusArgs, WatchArgs};
use crate::unlock::UnlockArgs;

#[derive(Debug, clap::Subcommand)]
pub enum PostgresCommand {
    /// Print the `distlock` schema's SQL (every table and function, idempotent), for operators
    /// who install it themselves: `distlock postgres schema | psql "$DB" -v ON_ERROR_STOP=1 -1 -f -`.
    Schema,
    /// Install (or upgrade) the `distlock` schema in the database `--url` names, in one
    /// transaction; running it again changes nothing. The role needs `CREATE` on the database.
    Install,
}

/// Runs `command`; `url` is the database `--url` names, when it names one.
pub async fn command(url: Option<&str>, command: PostgresCommand) -> ExitCode {
    match command {
        PostgresCommand::Schema => {
            print!("{}", distlock::postgres::SCHEMA_SQL);
            ExitCode::SUCCESS
        }
        PostgresCommand::Install => {
            let Some(url) = url else {
                eprintln!("distlock: `postgres install` needs --url postgres://user@host/db");
                return exit::code(exit::USAGE);
            };
            let config = match url.parse::<distlock::postgres::Config>() {
                Ok(config) => config,
                Err(error) => {
                    eprintln!("distlock: not a PostgreSQL connection string: {error}");
                    return exit::code(exit::USAGE);
                }
            };
            match distlock::postgres::install_schema(&config).await {
                Ok(()) => {
                    println!(
                        "the distlock schema (version {}) is installed",
                        distlock::postgres::SCHEMA_VERSION
                    );
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("distlock: could not install the schema: {error}");
                    exit::code(exit::BACKEND_ERROR)
                }
            }
        }
    }
}

/// What a name holds on PostgreSQL, in every kind of the family at once: there each kind keeps
/// its own rows, so one name may be, say, a lock and a semaphore at the same time.
#[derive(Debug, Default, PartialEq)]
struct Description {
    /// The lock's (and the fair lock's: they share rows) holders and lease.
    lock: LockState,
    /// The fair lock's queue.
    queue: Vec<(String, Option<Duration>)>,
    read_write: ReadWriteState,
    semaphore: Option<i64>,
    permits: PermitState,
    latch: u64,
    leader: Option<Leader>,
}

impl Description {
    /// Reads every kind's state of `name`: one statement each, sent together (they share the
    /// name's one connection, so they reach the server as one pipeline).
    async fn read(locker: &PostgresLocker, name: &str) -> distlock::Result<Self> {
        let (fair, read_write, semaphore, permits, latch, election) = (
            locker.fair(name)?,
            locker.read_write(name)?,
            locker.semaphore(name)?,
            locker.permits(name)?,
            locker.latch(name)?,
            locker.election(name)?,
        );
        let (lock, fair, read_write, semaphore, permits, latch, leader) = tokio::try_join!(
            locker.state(name),
            fair.state(),
            read_write.state(),
            semaphore.state(),
            permits.state(),
            latch.count(),
            election.leader(),
        )?;
        Ok(Description {
            lock,
            queue: fair.queue,
            read_write,
            semaphore: semaphore.available,
            permits,
            latch,
            leader,
        })
    }

    /// The kinds that hold something under the name, by their command-line names.
    fn kinds(&self) -> Vec<&'static str> {
        let mut kinds = Vec::new();
        // An election's leader holds the lock of its name: that hold is the election's.
        let leaders_hold = self.leader.as_ref().is_some_and(|leader| {
            self.lock
                .holders
                .iter()
                .all(|(owner, _)| *owner == leader.owner_field)
        });
        if (!self.lock.holders.is_empty() && !leaders_hold) || !self.queue.is_empty() {
            kinds.push(if self.queue.is_empty() {
                "lock"
            } else {
                "fair"
            });
        }
        if self.read_write.is_locked() {
            kinds.push("rwlock");
        }
        if self.permits.held() > 0 || self.permits.expired > 0 {
            kinds.push("permits");
        }
        if self.semaphore.is_some() {
            kinds.push("semaphore");
        }
        if self.latch > 0 {
            kinds.push("latch");
        }
        if self.leader.is_some() {
            kinds.push("election");
        }
        kinds
    }

    fn as_text(&self, name: &str) -> String {
        let kinds = self.kinds();
        if kinds.is_empty() {
            return format!("{name}: free\n");
        }
        let mut text = format!("{name}: {}\n", kinds.join(", "));
        if !self.lock.holders.is_empty() || !self.queue.is_empty() {
            text += "  lock:\n";
            for (owner, holds) in &self.lock.holders {
                text += &format!("    holder {owner} ({holds} hold{})\n", plural(*holds));
            }
            if let Some(ttl) = self.lock.ttl {
                text += &format!("    lease left {} s\n", ttl.as_secs());
            }
            for (place, (owner, left)) in self.queue.iter().enumerate() {
                let left = left.map_or_else(
                    || "no deadline".to_owned(),
                    |left| format!("place kept {} s", left.as_secs()),
                );
                text += &format!("    queued {}. {owner} ({left})\n", place + 1);
            }
        }
        if self.read_write.is_locked() {
            let mode = match self.read_write.mode {
                Some(ReadWriteMode::Write) => "writing",
                _ => "reading",
            };
            text += &format!("  read-write lock, held for {mode}:\n");
            if let Some((owner, holds)) = &self.read_write.writer {
                text += &format!(
                    "    writer {owner} ({holds} write hold{})\n",
                    plural(*holds)
                );
            }
            for (owner, holds) in &self.read_write.readers {
                text += &format!("    reader {owner} ({holds} read hold{})\n", plural(*holds));
            }
            if let Some(ttl) = self.read_write.ttl {
                text += &format!("    lease left {} s\n", ttl.as_secs());
            }
        }
        if self.permits.held() > 0 || self.permits.expired > 0 {
            text += "  lease-bound permits:\n";
            for (owner, permits) in &self.permits.holders {
                text += &format!(
                    "    holder {owner} ({permits} permit{})\n",
                    plural(*permits)
                );
            }
            if self.permits.expired > 0 {
                text += &format!(
                    "    expired permits {} (given back at the next attempt)\n",
                    self.permits.expired
                );
            }
        }
        if let Some(available) = self.semaphore {
            text += &format!("  semaphore: available {available}\n");
        }
        if self.latch > 0 {
            text += &format!("  countdown latch: count {}\n", self.latch);
        }
        if let Some(leader) = &self.leader {
            text += &format!(
                "  election: led by {} (value {:?})\n",
                leader.owner_field, leader.value
            );
        }
        text
    }

    fn as_json(&self, name: &str) -> serde_json::Value {
        let kinds = self.kinds();
        let holders = |holders: &[(String, u32)]| -> Vec<serde_json::Value> {
            holders
                .iter()
                .map(|(owner, holds)| json!({ "owner": owner, "holds": holds }))
                .collect()
        };
        let state = if kinds.is_empty() {
            "free"
        } else if kinds
            .iter()
            .all(|kind| matches!(*kind, "semaphore" | "latch"))
        {
            "counter"
        } else {
            "held"
        };
        json!({
            "name": name,
            "state": state,
            "kinds": kinds,
            "holders": holders(&self.lock.holders),
            "ttl_ms": self.lock.ttl.map(millis),
            "queue": self.queue.iter().map(|(owner, left)| json!({
                "owner": owner,
                "place_ms": left.map(millis),
            })).collect::<Vec<_>>(),
            "read_write": self.read_write.is_locked().then(|| json!({
                "mode": match self.read_write.mode {
                    Some(ReadWriteMode::Write) => "write",
                    _ => "read",
                },
                "readers": holders(&self.read_write.readers),
                "writer": self.read_write.writer.as_ref().map(|(owner, holds)| json!({
                    "owner": owner,
                    "holds": holds,
                })),
                "ttl_ms": self.read_write.ttl.map(millis),
            })),
            "permits": (self.permits.held() > 0 || self.permits.expired > 0).then(|| json!({
                "available": self.permits.available,
                "holders": holders(&self.permits.holders),
                "expired_permits": self.permits.expired,
            })),
            "semaphore": self.semaphore.map(|available| json!({ "available": available })),
            "latch": (self.latch > 0).then(|| json!({ "count": self.latch })),
            "election": self.leader.as_ref().map(|leader| json!({
                "leader": leader.owner_field,
                "value": leader.value,
                "ttl_ms": leader.ttl.map(millis),
            })),
        })
    }
}

fn plural(count: u32) -> &'static str {
    if count == 1 { "" } else { "s" }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `status`, `watch`, `list` and `unlock` on the database `url`.
pub async fn family_command(connection: &ConnectionArgs, url: &str, command: Commands) -> ExitCode {
    let locker = match connection.postgres_locker(url).await {
        Ok(locker) => locker,
        Err(error) => return crate::cannot_connect(&error),
    };
    match command {
        Commands::Status(args) => status(&locker, &args).await,
        Commands::Watch(args) => watch(&locker, &args).await,
        Commands::List(args) => list(&locker, &args).await,
        Commands::Unlock(args) => unlock(&locker, &args).await,
        Commands::Run(_) | Commands::Doctor(_) | Commands::Postgres(_) => {
            unreachable!("run, doctor and postgres are dispatched before")
        }
    }
}

async fn status(locker: &PostgresLocker, args: &StatusArgs) -> ExitCode {
    match Description::read(locker, &args.name).await {
        Ok(found) => {
            if args.json {
                println!("{}", found.as_json(&args.name));
            } else {
                print!("{}", found.as_text(&args.name));
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("distlock: cannot read {:?}: {error}", args.name);
            exit::code(exit::BACKEND_ERROR)
        }
    }
}

async fn watch(locker: &PostgresLocker, args: &WatchArgs) -> ExitCode {
    let terminal = std::io::stdout().is_terminal();
    let mut last = String::new();
    loop {
        let shown = match Description::read(locker, &args.name).await {
            Ok(found) if args.json => format!("{}\n", found.as_json(&args.name)),
            Ok(found) => found.as_text(&args.name),
            Err(error) => format!("cannot read {:?}: {error}\n", args.name),
        };
        // The text rounds leases to the second; JSON in ms would change every time.
        let compared = if args.json {
            shown.replace(|c: char| c.is_ascii_digit(), "")
        } else {
            shown.clone()
        };
        if compared != last {
            if terminal && !args.json {
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

async fn list(locker: &PostgresLocker, args: &ListArgs) -> ExitCode {
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let listed = match locker.backend().list_names(&args.pattern, limit).await {
        Ok(listed) => listed,
        Err(error) => {
            eprintln!("distlock: cannot list {:?}: {error}", args.pattern);
            return exit::code(exit::BACKEND_ERROR);
        }
    };
    let mut shown = Vec::new();
    for name in &listed.names {
        match Description::read(locker, name).await {
            // Gone between the listing and the read: not shown.
            Ok(found) if found.kinds().is_empty() => {}
            Ok(found) => shown.push((name, found)),
            Err(error) => {
                eprintln!("distlock: cannot read {name:?}: {error}");
                return exit::code(exit::BACKEND_ERROR);
            }
        }
    }
    if args.json {
        let locks: Vec<_> = shown
            .iter()
            .map(|(name, found)| found.as_json(name))
            .collect();
        println!("{}", json!({ "locks": locks, "complete": listed.complete }));
    } else {
        for (name, found) in &shown {
            let holders: Vec<String> = found
                .lock
                .holders
                .iter()
                .chain(&found.read_write.readers)
                .chain(&found.read_write.writer)
                .chain(&found.permits.holders)
                .map(|(owner, holds)| format!("{owner}×{holds}"))
                .collect();
            let lease = found
                .lock
                .ttl
                .or(found.read_write.ttl)
                .map_or_else(|| "-".to_owned(), |ttl| format!("{} s", ttl.as_secs()));
            println!(
                "{name}\t{}\t{}\tlease {lease}",
                found.kinds().join(","),
                holders.join(",")
            );
        }
    }
    if !listed.complete {
        eprintln!(
            "distlock: stopped after {} names (--limit); there may be more",
            args.limit
        );
    }
    ExitCode::SUCCESS
}

/// `unlock --force` on PostgreSQL: every kind that holds the name is released by its own
/// force call (a fair lock's tells the head of its queue, an election's deposes the leader);
/// a semaphore's or latch's count has no holder and is left alone.
async fn unlock(locker: &PostgresLocker, args: &UnlockArgs) -> ExitCode {
    let name = &args.name;
    let found = match Description::read(locker, name).await {
        Ok(found) => found,
        Err(error) => {
            eprintln!("distlock: cannot read {name:?}: {error}");
            return exit::code(exit::BACKEND_ERROR);
        }
    };
    let held: Vec<&str> = found
        .kinds()
        .into_iter()
        .filter(|kind| !matches!(*kind, "semaphore" | "latch"))
        .collect();
    if held.is_empty() {
        if found.kinds().is_empty() {
            println!("{name}: free; nothing to release");
            return ExitCode::SUCCESS;
        }
        eprintln!(
            "distlock: {name:?} is only a count ({}): it has no holder to release; set or \
             remove it with the library's Semaphore::reset / Semaphore::delete or \
             CountDownLatch::delete",
            found.kinds().join(", ")
        );
        return exit::code(exit::USAGE);
    }
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            eprintln!("distlock: not a terminal: pass --yes to force-release {name:?}");
            return exit::code(exit::USAGE);
        }
        print!("{}force-release it? [y/N] ", found.as_text(name));
        let _ = std::io::stdout().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("left as it is");
            return exit::code(exit::USAGE);
        }
    }
    for kind in held {
        let forced = match kind {
            "lock" => locker.force_unlock(name).await,
            "fair" => match locker.fair(name) {
                Ok(fair) => fair.force_unlock().await,
                Err(error) => Err(error),
            },
            "rwlock" => match locker.read_write(name) {
                Ok(lock) => lock.force_unlock().await,
                Err(error) => Err(error),
            },
            "permits" => match locker.permits(name) {
                Ok(permits) => permits.locker().force_unlock(name).await,
                Err(error) => Err(error),
            },
            "election" => match locker.election(name) {
                Ok(election) => election.depose().await,
                Err(error) => Err(error),
            },
            other => unreachable!("{other} has no holder"),
        };
        match forced {
            Ok(true) => println!("{name}: {kind} released"),
            Ok(false) => println!("{name}: {kind} already free"),
            Err(error) => {
                eprintln!("distlock: cannot release {name:?} ({kind}): {error}");
                return exit::code(exit::BACKEND_ERROR);
            }
        }
    }
    ExitCode::SUCCESS
}

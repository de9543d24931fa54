//! The restriction sets of managed services and proxies that an ACL can express
//! (`docs/deployments.md`, "Proxies and managed services"), as users on a real server: for the
//! tests that run the locks under each.

use crate::RedisServer;
use crate::server::ServerError;

/// A restriction set: its name, what it takes away from a user that may do everything else,
/// and the capabilities the probe must find refused.
pub struct Restriction {
    /// Where it comes from.
    pub name: &'static str,
    /// The ACL rules applied after `+@all` (the denials).
    pub denied: &'static [&'static str],
    /// The commands the capability probe must find refused, as
    /// `lock_redis::Capability::command` names them.
    pub refused: &'static [&'static str],
    /// Whether scripts run under it. Where they do not, only the fast lock can, and only on
    /// a server with native compare-and-set and compare-and-delete (Valkey 9, Redis 8.4):
    /// elsewhere `connect` refuses every kind, naming what is missing.
    pub scripts: bool,
}

/// The sets, from the providers' documentation (`docs/deployments.md`).
pub const RESTRICTIONS: &[Restriction] = &[
    Restriction {
        name: "node-based ElastiCache / MemoryDB (admin commands)",
        denied: &[
            "-config",
            "-debug",
            "-migrate",
            "-replicaof",
            "-save",
            "-bgsave",
        ],
        refused: &[],
        scripts: true,
    },
    Restriction {
        name: "Upstash (no CLIENT, no WAIT)",
        denied: &["-client", "-wait"],
        refused: &["CLIENT INFO", "CLIENT KILL", "WAIT"],
        scripts: true,
    },
    Restriction {
        name: "no SCRIPT (scripts sent whole)",
        denied: &["-script"],
        refused: &["SCRIPT LOAD"],
        scripts: true,
    },
    Restriction {
        name: "no EVALSHA (every script sent whole)",
        denied: &["-evalsha"],
        refused: &["EVALSHA"],
        scripts: true,
    },
    Restriction {
        name: "no pub/sub (twemproxy's set, as NOPERM)",
        denied: &[
            "-subscribe",
            "-ssubscribe",
            "-psubscribe",
            "-publish",
            "-spublish",
        ],
        refused: &["SUBSCRIBE", "SSUBSCRIBE", "PUBLISH", "PUBLISH in a script"],
        scripts: true,
    },
    Restriction {
        name: "only what the library lists (Memorystore-like NOPERM for the rest)",
        denied: &[
            "-@all",
            "+ping",
            "+evalsha",
            "+eval",
            "+pexpire",
            "+pttl",
            "+del",
            "+type",
            "+publish",
            "+subscribe",
            "+unsubscribe",
            "+exists",
            "+hset",
            "+hget",
            "+hdel",
            "+hexists",
            "+hincrby",
            "+hgetall",
            "+set",
            "+get",
            "+time",
        ],
        refused: &["CLIENT INFO", "SCRIPT LOAD", "WAIT", "SSUBSCRIBE"],
        scripts: true,
    },
    Restriction {
        name: "no scripts at all (OCI Cache sharded; Valkey 9 with scripting denied)",
        denied: &["-@scripting"],
        refused: &["EVAL", "EVALSHA", "SCRIPT LOAD", "PUBLISH in a script"],
        scripts: false,
    },
];

/// Makes `user` (password `pw`) on `server`: every command, key and channel, then `denied`.
/// Returns the URL that connects as the user.
///
/// # Errors
///
/// [`ServerError::NotRunning`] when the server cannot be reached or refuses a rule.
///
/// # Example
///
/// ```no_run
/// use lock_testkit::RedisServer;
/// use lock_testkit::restrictions::{RESTRICTIONS, restricted_user};
///
/// let server = RedisServer::start()?;
/// for (index, set) in RESTRICTIONS.iter().enumerate() {
///     let url = restricted_user(&server, &format!("user{index}"), set.denied)?;
///     println!("{}: {url}", set.name);
/// }
/// # Ok::<(), lock_testkit::ServerError>(())
/// ```
pub fn restricted_user(
    server: &RedisServer,
    user: &str,
    denied: &[&str],
) -> Result<String, ServerError> {
    let not_running = |_| ServerError::NotRunning {
        port: server.port(),
    };
    let mut admin = redis::Client::open(server.url())
        .map_err(not_running)?
        .get_connection()
        .map_err(not_running)?;
    let mut command = redis::cmd("ACL");
    command
        .arg("SETUSER")
        .arg(user)
        .arg("reset")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all");
    for rule in denied {
        command.arg(*rule);
    }
    command.query::<()>(&mut admin).map_err(not_running)?;
    Ok(format!("redis://{user}:pw@127.0.0.1:{}/", server.port()))
}

//! Replica acknowledgement of lock writes: the setting ([`ReplicaAck`]), the `WAIT` / `WAITAOF`
//! command that asks for it, and how its reply reads.
//!
//! The command always follows the lock's own command in one pipeline, on the connection that
//! carried it: `WAIT` counts the replicas that have every write made *on that connection* so
//! far. Sent on its own through a cluster client it would go to every primary, and a primary
//! that saw no write on that connection answers at once: a false success.

use std::time::Duration;

use lock_core::{Error, Result};
use redis::{Cmd, Value};

/// Requires that lock writes reach replicas before a call returns: after every grant, renewal
/// and release the primary is asked with `WAIT numreplicas timeout` (or, with
/// [`ReplicaAck::fsynced`], `WAITAOF 1 numreplicas timeout`) in the same pipeline.
///
/// This narrows the failover hole (a lock granted on a primary, lost when a replica that never
/// saw it is promoted), it does not close it: replication stays asynchronous, a replica that
/// acknowledged can still be passed over in the election, and a write acknowledged in memory
/// is gone if every copy restarts. See `docs/deployments.md` for the measured effect.
///
/// When fewer replicas acknowledge within the timeout ([`Shortfall`]):
///
/// | call | [`Shortfall::Fail`] (default) | [`Shortfall::Accept`] |
/// |---|---|---|
/// | grant | given back, [`Error::NotReplicated`] (retryable) | kept |
/// | renewal | outcome `Unknown`: retried, and the lease counts as not extended | renewed |
/// | release | released (logged): a lock left on a replica only lingers to its lease's end | released |
///
/// Redisson differs: it waits for as many replicas as are connected at the time and fails
/// only when none acknowledged while at least one was connected (`checkLockSyncedSlaves`,
/// `slavesSyncTimeout` 1 s). A count that follows whatever is connected asks for nothing
/// exactly when replicas are gone, so distlock asks for a fixed number.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use lock_redis::{RedisBackend, ReplicaAck, Shortfall};
///
/// # async fn demo() -> Result<(), lock_core::Error> {
/// let backend = RedisBackend::builder("redis://127.0.0.1:6379/")
///     .replica_ack(
///         ReplicaAck::replicas(1)
///             .timeout(Duration::from_millis(500))
///             .on_shortfall(Shortfall::Fail),
///     )
///     .connect()
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaAck {
    replicas: u32,
    timeout: Duration,
    shortfall: Shortfall,
    fsynced: bool,
}

/// What a call does when fewer replicas than asked acknowledge a write in time (see
/// [`ReplicaAck`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shortfall {
    /// A grant is given back and the call fails with [`Error::NotReplicated`]; a renewal is
    /// left undecided (retried; its lease is not counted as extended).
    #[default]
    Fail,
    /// The write stands; the shortfall is logged.
    Accept,
}

/// The longest wait [`ReplicaAck::timeout`] accepts (a wait longer than the command timeout is
/// refused when the backend is built, too).
const MAX_WAIT: Duration = Duration::from_secs(3600);

impl ReplicaAck {
    /// Wait for `replicas` replicas (at least 1), at most 1 s, and fail when they fall short.
    #[must_use]
    pub fn replicas(replicas: u32) -> Self {
        ReplicaAck {
            replicas,
            timeout: Duration::from_secs(1),
            shortfall: Shortfall::Fail,
            fsynced: false,
        }
    }

    /// How long the primary waits for the replicas (default 1 s, as Redisson's
    /// `slavesSyncTimeout`). Capped, per call, at half the call's own timeout so the answer
    /// has time to come back; must be at least 1 ms and below the command timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What to do when too few replicas acknowledge (default [`Shortfall::Fail`]).
    #[must_use]
    pub fn on_shortfall(mut self, shortfall: Shortfall) -> Self {
        self.shortfall = shortfall;
        self
    }

    /// Wait for the write to be fsynced to the append-only file of the primary and of the
    /// replicas (`WAITAOF 1 numreplicas timeout`, Redis 7.2+ and Valkey), instead of only
    /// received by the replicas (`WAIT`). Needs `appendonly yes` on the primary and the
    /// replicas; checked when the backend connects. With `appendfsync everysec` (the default)
    /// a server fsyncs once a second, so the [`timeout`](Self::timeout) must cover that second
    /// or grants fall short; `appendfsync always` acknowledges at once.
    #[must_use]
    pub fn fsynced(mut self) -> Self {
        self.fsynced = true;
        self
    }

    /// How many replicas are asked for.
    #[must_use]
    pub fn required(&self) -> u32 {
        self.replicas
    }

    /// What happens on a shortfall.
    #[must_use]
    pub fn shortfall(&self) -> Shortfall {
        self.shortfall
    }

    /// Whether the wait is for append-only-file fsyncs (`WAITAOF`).
    #[must_use]
    pub fn is_fsynced(&self) -> bool {
        self.fsynced
    }

    /// Checks the setting against the backend's command timeout.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for no replicas, a wait under 1 ms or not below the command
    /// timeout.
    pub(crate) fn check(&self, command_timeout: Duration) -> Result<()> {
        if self.replicas == 0 {
            return Err(invalid(
                "replica acknowledgement asks for 0 replicas (at least 1)".into(),
            ));
        }
        if self.timeout < Duration::from_millis(1) || self.timeout > MAX_WAIT {
            return Err(invalid(format!(
                "replica acknowledgement timeout {:?} is outside 1 ms ..= 1 h",
                self.timeout
            )));
        }
        if self.timeout >= command_timeout {
            return Err(invalid(format!(
                "replica acknowledgement timeout {:?} is not below the command timeout {:?} \
                 (the call would time out while the primary waits)",
                self.timeout, command_timeout
            )));
        }
        Ok(())
    }

    /// The command that asks for the acknowledgement, its wait capped at half of `call_timeout`
    /// (never 0 ms, which would wait forever).
    pub(crate) fn command(&self, call_timeout: Duration) -> Cmd {
        let wait = self.timeout.min(call_timeout / 2);
        let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        if self.fsynced {
            let mut waitaof = redis::cmd("WAITAOF");
            waitaof.arg(1).arg(self.replicas).arg(millis);
            waitaof
        } else {
            let mut wait = redis::cmd("WAIT");
            wait.arg(self.replicas).arg(millis);
            wait
        }
    }

    /// How many replicas acknowledged, from the command's reply (`WAIT`: an integer;
    /// `WAITAOF`: `[local, replicas]`, and a primary whose own fsync did not happen counts as no
    /// acknowledgement at all).
    ///
    /// # Errors
    ///
    /// The server's refusal (e.g. `NOPERM`, or `WAITAOF` with `appendonly no`) mapped, or
    /// [`Error::Protocol`] for a reply of another shape.
    pub(crate) fn acknowledged(&self, reply: Value) -> Result<u32> {
        let count = |value: &Value| match value {
            Value::Int(count) => u32::try_from(*count).ok(),
            _ => None,
        };
        match reply {
            Value::ServerError(error) => Err(crate::wire::errors::map_error(
                &error.into(),
                Duration::ZERO,
            )),
            Value::Int(_) if !self.fsynced => count(&reply)
                .ok_or_else(|| Error::Protocol(format!("WAIT answered {reply:?}").into())),
            Value::Array(ref items) if self.fsynced && items.len() == 2 => {
                match (count(&items[0]), count(&items[1])) {
                    (Some(0), Some(_)) => Ok(0),
                    (Some(_), Some(replicas)) => Ok(replicas),
                    _ => Err(Error::Protocol(
                        format!("WAITAOF answered {reply:?}").into(),
                    )),
                }
            }
            other => Err(Error::Protocol(
                format!("replica acknowledgement answered {other:?}").into(),
            )),
        }
    }

    /// The error of a grant given back because `acknowledged` replicas fell short.
    pub(crate) fn shortfall_error(&self, acknowledged: u32) -> Error {
        Error::NotReplicated {
            acknowledged,
            required: self.replicas,
        }
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidConfig { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(command: &Cmd) -> Vec<String> {
        command
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not a plain argument>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn the_wait_is_capped_at_half_the_call_and_never_zero() {
        let ack = ReplicaAck::replicas(2).timeout(Duration::from_secs(1));
        assert_eq!(
            args(&ack.command(Duration::from_secs(3))),
            ["WAIT", "2", "1000"]
        );
        assert_eq!(
            args(&ack.command(Duration::from_millis(600))),
            ["WAIT", "2", "300"]
        );
        assert_eq!(
            args(&ack.command(Duration::from_millis(1))),
            ["WAIT", "2", "1"]
        );
        let aof = ack.fsynced();
        assert_eq!(
            args(&aof.command(Duration::from_secs(3))),
            ["WAITAOF", "1", "2", "1000"]
        );
    }

    #[test]
    fn replies_read_as_replica_counts() {
        let wait = ReplicaAck::replicas(1);
        assert_eq!(wait.acknowledged(Value::Int(2)).unwrap(), 2);
        assert!(matches!(
            wait.acknowledged(Value::Array(vec![Value::Int(1), Value::Int(1)])),
            Err(Error::Protocol(_))
        ));
        let aof = wait.fsynced();
        let pair = |local, replicas| Value::Array(vec![Value::Int(local), Value::Int(replicas)]);
        assert_eq!(aof.acknowledged(pair(1, 1)).unwrap(), 1);
        // The primary's own fsync did not happen: nothing is acknowledged.
        assert_eq!(aof.acknowledged(pair(0, 1)).unwrap(), 0);
        assert!(matches!(
            aof.acknowledged(Value::Int(1)),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn settings_are_checked_against_the_command_timeout() {
        let second = Duration::from_secs(1);
        assert!(ReplicaAck::replicas(1).check(3 * second).is_ok());
        for bad in [
            ReplicaAck::replicas(0),
            ReplicaAck::replicas(1).timeout(Duration::ZERO),
            ReplicaAck::replicas(1).timeout(3 * second),
            ReplicaAck::replicas(1).timeout(Duration::from_secs(7200)),
        ] {
            assert!(
                matches!(bad.check(3 * second), Err(Error::InvalidConfig { .. })),
                "{bad:?}"
            );
        }
    }
}

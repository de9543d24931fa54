//! Lock options and the input checks that run before any I/O.

use std::time::Duration;

use std::marker::PhantomData;

use crate::error::{Error, Result};
use crate::fencing::{Fenced, Fencing, Unfenced};
use crate::owner::Owner;

/// Longest accepted lock name, in bytes.
///
/// Names travel in every command and every release notification; a cap keeps a mistaken
/// multi-megabyte name from becoming a multi-megabyte key.
pub const MAX_NAME_LEN: usize = 4096;

/// Shortest accepted lease.
///
/// The watchdog renews every lease/3 in whole milliseconds, so a lease must leave at least a few
/// milliseconds between renewals.
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// Longest accepted lease or wait: one year. Longer values are almost surely unit mistakes and
/// would overflow deadline arithmetic on some platforms.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The lease used in watchdog mode when none is given, as in Redisson.
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);

/// How long a call to `lock_with` may wait for the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// Try once; give up at once if someone else holds the lock.
    No,
    /// Wait until the lock is granted, however long that takes.
    Forever,
    /// Wait at most this long.
    Upto(Duration),
}

/// How the lock's lease is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lease {
    /// The watchdog renews a lease of this length every lease/3 while the guard lives, for at most
    /// `max_hold` in total when given.
    Watchdog {
        /// The lease set on every acquire and renewal.
        lease: Duration,
        /// Stop renewing after this much time since the acquire; the lock then expires.
        max_hold: Option<Duration>,
    },
    /// The lock simply expires after this long; nothing renews it.
    Fixed(Duration),
}

impl Lease {
    /// The length of one lease.
    #[must_use]
    pub fn duration(&self) -> Duration {
        match *self {
            Lease::Watchdog { lease, .. } | Lease::Fixed(lease) => lease,
        }
    }

    /// Whether a watchdog keeps this lease alive.
    #[must_use]
    pub fn is_watchdog(&self) -> bool {
        matches!(self, Lease::Watchdog { .. })
    }
}

/// Options for one call to [`crate::Locker::lock_with`].
///
/// The defaults match [`crate::Locker::lock`]: wait forever, watchdog mode with a 30 s lease,
/// owned by the current task, no fencing token.
///
/// Whether a fencing token is asked for is part of the type: [`LockOptions::fenced`] turns
/// `LockOptions` (that is, `LockOptions<Unfenced>`) into `LockOptions<Fenced>`, whose guards
/// have [`crate::LockGuard::fencing_token`] returning the token itself, not an `Option`.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use lock_core::{LockOptions, Owner};
///
/// let options = LockOptions::new()
///     .wait(Duration::from_secs(2))
///     .fixed_lease(Duration::from_secs(10))
///     .owner(Owner::new())
///     .fenced();
/// assert!(!options.lease_mode().is_watchdog());
/// ```
#[derive(Debug)]
pub struct LockOptions<F: Fencing = Unfenced> {
    wait: Wait,
    lease: Lease,
    owner: Option<Owner>,
    fencing: PhantomData<F>,
}

// By hand: a derive would ask `F: Clone` of generic code, though only a marker of `F` is kept.
impl<F: Fencing> Clone for LockOptions<F> {
    fn clone(&self) -> Self {
        LockOptions {
            wait: self.wait,
            lease: self.lease,
            owner: self.owner,
            fencing: PhantomData,
        }
    }
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            wait: Wait::Forever,
            lease: Lease::Watchdog {
                lease: DEFAULT_WATCHDOG_LEASE,
                max_hold: None,
            },
            owner: None,
            fencing: PhantomData,
        }
    }
}

impl LockOptions {
    /// Options with the defaults of [`crate::Locker::lock`].
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask for a fencing token: a number that strictly increases with every grant of this
    /// name, read with [`crate::LockGuard::fencing_token`]. Pass it to the resource you
    /// protect so it can refuse writes from an older holder.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_core::{LockOptions, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let guard = locker.lock_with("ledger", &LockOptions::new().fenced()).await?;
    /// let token: u64 = guard.fencing_token(); // send it with every write
    /// assert!(token > 0);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn fenced(self) -> LockOptions<Fenced> {
        LockOptions {
            wait: self.wait,
            lease: self.lease,
            owner: self.owner,
            fencing: PhantomData,
        }
    }
}

impl<F: Fencing> LockOptions<F> {
    /// Wait at most `wait` for the lock; `lock_with` then returns [`Error::NotAcquired`].
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Wait::Upto(wait);
        self
    }

    /// Do not wait: one attempt only.
    #[must_use]
    pub fn no_wait(mut self) -> Self {
        self.wait = Wait::No;
        self
    }

    /// Wait until the lock is granted.
    #[must_use]
    pub fn wait_forever(mut self) -> Self {
        self.wait = Wait::Forever;
        self
    }

    /// A fixed lease, **no watchdog**: the lock expires after `lease` unless released or
    /// extended ([`crate::LockGuard::extend`]). For a lease the watchdog keeps renewing, use
    /// [`LockOptions::watchdog_lease`].
    #[must_use]
    pub fn fixed_lease(mut self, lease: Duration) -> Self {
        self.lease = Lease::Fixed(lease);
        self
    }

    /// Watchdog mode with this lease length (renewed every `lease / 3`).
    #[must_use]
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        let max_hold = match self.lease {
            Lease::Watchdog { max_hold, .. } => max_hold,
            Lease::Fixed(_) => None,
        };
        self.lease = Lease::Watchdog { lease, max_hold };
        self
    }

    /// In watchdog mode, stop renewing after `max_hold` in total; switches to watchdog mode with the
    /// default lease if a fixed lease was set.
    #[must_use]
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        let lease = match self.lease {
            Lease::Watchdog { lease, .. } => lease,
            Lease::Fixed(_) => DEFAULT_WATCHDOG_LEASE,
        };
        self.lease = Lease::Watchdog {
            lease,
            max_hold: Some(max_hold),
        };
        self
    }

    /// Hold the lock as this owner instead of the current task.
    #[must_use]
    pub fn owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// The wait policy.
    #[must_use]
    pub fn wait_policy(&self) -> Wait {
        self.wait
    }

    /// The lease policy.
    #[must_use]
    pub fn lease_mode(&self) -> Lease {
        self.lease
    }

    /// The explicit owner, if one was given.
    #[must_use]
    pub fn explicit_owner(&self) -> Option<&Owner> {
        self.owner.as_ref()
    }

    /// Whether a fencing token is requested.
    #[must_use]
    pub fn wants_fencing(&self) -> bool {
        F::WANTED
    }

    /// Checks every option; returns the wait as an optional duration (`None` = forever).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] for a zero, sub-minimum or over-long lease, a zero or over-long
    /// wait, or a zero or over-long `max_hold`.
    pub fn validate(&self) -> Result<()> {
        check_lease(self.lease.duration())?;
        if let Lease::Watchdog {
            max_hold: Some(max_hold),
            ..
        } = self.lease
        {
            check_duration("max_hold", max_hold)?;
        }
        check_wait(self.wait)
    }
}

/// Checks a wait policy: a bounded wait must be above zero and at most [`MAX_DURATION`].
///
/// # Errors
///
/// [`Error::InvalidOptions`] for `Wait::Upto` of zero (a single attempt is `Wait::No`) or above
/// [`MAX_DURATION`].
pub fn check_wait(wait: Wait) -> Result<()> {
    if let Wait::Upto(wait) = wait {
        if wait.is_zero() {
            return Err(Error::invalid_options(
                "wait is zero: use no_wait() (or try_lock) for a single attempt",
            ));
        }
        check_duration("wait", wait)?;
    }
    Ok(())
}

/// Checks a lease length.
///
/// # Errors
///
/// [`Error::InvalidOptions`] when the lease is below [`MIN_LEASE`] or above [`MAX_DURATION`].
pub fn check_lease(lease: Duration) -> Result<()> {
    if lease < MIN_LEASE {
        return Err(Error::invalid_options(format!(
            "lease {lease:?} is below the minimum of {MIN_LEASE:?}"
        )));
    }
    check_duration("lease", lease)
}

fn check_duration(what: &str, value: Duration) -> Result<()> {
    if value.is_zero() {
        return Err(Error::invalid_options(format!("{what} is zero")));
    }
    if value > MAX_DURATION {
        return Err(Error::invalid_options(format!(
            "{what} {value:?} is above the maximum of {MAX_DURATION:?}"
        )));
    }
    Ok(())
}

/// Checks a lock name against the rules every backend shares: not empty, at most
/// [`MAX_NAME_LEN`] bytes. Backends may add rules of their own.
///
/// # Errors
///
/// [`Error::InvalidName`] when the name is empty or too long.
pub fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidName {
            reason: "the lock name is empty",
        });
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidName {
            reason: "the lock name is longer than MAX_NAME_LEN (4096 bytes)",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_watchdog_wait_forever() {
        let options = LockOptions::new();
        options.validate().unwrap();
        assert_eq!(options.wait_policy(), Wait::Forever);
        assert_eq!(options.lease_mode().duration(), DEFAULT_WATCHDOG_LEASE);
        assert!(options.lease_mode().is_watchdog());
    }

    #[test]
    fn rejects_bad_durations() {
        for options in [
            LockOptions::new().fixed_lease(Duration::ZERO),
            LockOptions::new().fixed_lease(Duration::from_millis(9)),
            LockOptions::new().fixed_lease(MAX_DURATION + Duration::from_secs(1)),
            LockOptions::new().watchdog_lease(Duration::from_millis(2)),
            LockOptions::new().wait(Duration::ZERO),
            LockOptions::new().wait(Duration::MAX),
            LockOptions::new().max_hold(Duration::ZERO),
        ] {
            let err = options.validate().unwrap_err();
            assert!(matches!(err, Error::InvalidOptions { .. }), "{options:?}");
            assert!(err.is_input_error());
        }
    }

    #[test]
    fn rejects_bad_names() {
        assert!(matches!(check_name(""), Err(Error::InvalidName { .. })));
        assert!(check_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(matches!(
            check_name(&"x".repeat(MAX_NAME_LEN + 1)),
            Err(Error::InvalidName { .. })
        ));
    }
}

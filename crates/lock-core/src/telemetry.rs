//! What the locks tell the outside about their work: `tracing` spans and events always, and
//! with the `metrics` feature, metrics through the [`metrics`](https://docs.rs/metrics) facade
//! (recorded only when the application installs a recorder, such as a Prometheus exporter).
//!
//! Metrics carry no lock names: a label per name would make one series per lock, without
//! bound. Names go in the spans and events instead. The names and labels are listed in
//! `docs/observability.md`.

use std::time::Duration;

/// Seconds a `lock`/`try_lock`/`lock_with` call took, waiting included; label `outcome`.
pub const ACQUIRE_SECONDS: &str = "distlock_acquire_seconds";
/// Seconds a call waited after its first attempt found the lock held; label `outcome`.
pub const WAIT_SECONDS: &str = "distlock_wait_seconds";
/// Acquire calls under way.
pub const ACQUIRES_IN_FLIGHT: &str = "distlock_acquires_in_flight";
/// Seconds a hold lasted, from its grant to its release; label `outcome`.
pub const HOLD_SECONDS: &str = "distlock_hold_seconds";
/// Lease renewals by the watchdog; label `outcome`.
pub const RENEWALS_TOTAL: &str = "distlock_renewals_total";
/// Seconds a watchdog renewal batch went out after its first renewal fell due.
pub const RENEWAL_LAG_SECONDS: &str = "distlock_renewal_lag_seconds";
/// Leases lost while held; label `reason`.
pub const LEASES_LOST_TOTAL: &str = "distlock_leases_lost_total";

/// An acquire call under way: counted in [`ACQUIRES_IN_FLIGHT`] until dropped.
pub(crate) struct InFlight(());

impl InFlight {
    pub(crate) fn start() -> InFlight {
        #[cfg(feature = "metrics")]
        metrics::gauge!(ACQUIRES_IN_FLIGHT).increment(1.0);
        InFlight(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        metrics::gauge!(ACQUIRES_IN_FLIGHT).decrement(1.0);
    }
}

/// An acquire call ended with `outcome` (`granted`, `held`, `error`) after `took`.
pub(crate) fn acquired(outcome: &'static str, took: Duration) {
    let _ = (outcome, took);
    #[cfg(feature = "metrics")]
    metrics::histogram!(ACQUIRE_SECONDS, "outcome" => outcome).record(took.as_secs_f64());
}

/// A call that had to wait ended with `outcome` after waiting `waited`.
pub(crate) fn waited(outcome: &'static str, waited: Duration) {
    let _ = (outcome, waited);
    #[cfg(feature = "metrics")]
    metrics::histogram!(WAIT_SECONDS, "outcome" => outcome).record(waited.as_secs_f64());
}

/// A hold ended (`released`, `still_held`, `not_held`, `error`, `dropped`) after `held_for`.
pub(crate) fn hold_ended(outcome: &'static str, held_for: Duration) {
    let _ = (outcome, held_for);
    #[cfg(feature = "metrics")]
    metrics::histogram!(HOLD_SECONDS, "outcome" => outcome).record(held_for.as_secs_f64());
}

/// A watchdog batch's renewals by outcome (`renewed`, `not_held`, `undecided`, `failed`), and
/// how late the batch went out.
pub(crate) fn renewals(outcome: &'static str, count: usize, lag: Option<Duration>) {
    let _ = (outcome, count, lag);
    #[cfg(feature = "metrics")]
    {
        if count > 0 {
            metrics::counter!(RENEWALS_TOTAL, "outcome" => outcome)
                .increment(u64::try_from(count).unwrap_or(u64::MAX));
        }
        if let Some(lag) = lag {
            metrics::histogram!(RENEWAL_LAG_SECONDS).record(lag.as_secs_f64());
        }
    }
}

/// A held lease was lost (`why`: `expired`, `not_ours`): a `warn` event with the lock and the
/// reason, and the count.
pub(crate) fn lease_lost(name: &str, owner_field: &str, why: &'static str) {
    tracing::warn!(
        name,
        owner = owner_field,
        reason = why,
        "lease lost: the lock is no longer held"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!(LEASES_LOST_TOTAL, "reason" => why).increment(1);
}

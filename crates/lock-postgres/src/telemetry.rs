//! The PostgreSQL backend's own metrics (with the `metrics` feature), beside lock-core's
//! ([`lock_core::telemetry`]); names and labels in `docs/observability.md`. A leaf: it imports
//! nothing of this crate, so every module may use it.

/// Connections retired after a step whose outcome is unknown (the connection broke, or no
/// answer came in time); each is fenced (its server process ended) before its slot is used
/// again.
pub const CONNECTIONS_RETIRED_TOTAL: &str = "distlock_postgres_connections_retired_total";
/// Notification (`LISTEN`) connections lost; each is reconnected, its channels listened on
/// again and every waiter woken to look.
pub const LISTEN_RECONNECTS_TOTAL: &str = "distlock_postgres_listen_reconnects_total";

/// A connection was retired.
pub(crate) fn connection_retired(pid: i32, slot: usize) {
    tracing::debug!(pid, slot, "retired a PostgreSQL connection");
    #[cfg(feature = "metrics")]
    metrics::counter!(CONNECTIONS_RETIRED_TOTAL).increment(1);
}

/// The notification connection was lost.
pub(crate) fn listen_lost() {
    tracing::warn!("lost the connection for release notifications; reconnecting");
    #[cfg(feature = "metrics")]
    metrics::counter!(LISTEN_RECONNECTS_TOTAL).increment(1);
}

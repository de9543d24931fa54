//! The Redis backend's own metrics (with the `metrics` feature), beside lock-core's
//! ([`lock_core::telemetry`]); names and labels in `docs/observability.md`. A leaf: it imports
//! nothing of this crate, so every layer may use it.

/// Scripts sent whole (`EVAL`) after the server answered `NOSCRIPT` (its script cache was
/// flushed, or it restarted or failed over).
pub const NOSCRIPT_RELOADS_TOTAL: &str = "distlock_noscript_reloads_total";
/// Notification (pub/sub) connections lost; each is reconnected and its channels subscribed
/// again.
pub const PUBSUB_RECONNECTS_TOTAL: &str = "distlock_pubsub_reconnects_total";
/// Probes after a reconnect that found the server answering differently than the probe
/// before (a capability gained or lost): the backend still runs on what it chose at connect.
pub const CAPABILITIES_CHANGED_TOTAL: &str = "distlock_capabilities_changed_total";

/// A script is sent again whole after `NOSCRIPT`.
pub(crate) fn noscript_reload() {
    tracing::debug!("NOSCRIPT: sending the script whole");
    #[cfg(feature = "metrics")]
    metrics::counter!(NOSCRIPT_RELOADS_TOTAL).increment(1);
}

/// A notification connection was lost.
pub(crate) fn pubsub_disconnected() {
    tracing::info!("the notification connection was lost; reconnecting");
    #[cfg(feature = "metrics")]
    metrics::counter!(PUBSUB_RECONNECTS_TOTAL).increment(1);
}

/// A re-probe after a reconnect found the server's capabilities changed.
pub(crate) fn capabilities_changed() {
    #[cfg(feature = "metrics")]
    metrics::counter!(CAPABILITIES_CHANGED_TOTAL).increment(1);
}

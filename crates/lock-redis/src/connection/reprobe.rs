//! The capability probe again after the command connection is replaced: the server behind it
//! may have changed (a Sentinel failover to a differently configured replica, a restart into
//! another version, an ACL edited meanwhile).
//!
//! The choices the backend made at connect stay (how scripts are sent, the native
//! compare-and-delete, the fence, polling): switching them under calls in flight would need
//! every call to agree on them. What changes is what the backend reports
//! (`RedisBackend::latest_capabilities`) and one warning naming every capability whose answer
//! flipped, so an operator learns that the deployment is no longer what the backend was
//! built for.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::wire::capabilities::Capabilities;

/// At most one re-probe per this long: a connection cut again and again (a flapping network)
/// must not multiply the probe's connections.
const MIN_INTERVAL: Duration = Duration::from_secs(10);

/// The latest probe's answers, and when the last re-probe started.
pub(crate) struct Reprobe {
    latest: Mutex<Capabilities>,
    started: Mutex<Option<Instant>>,
}

impl Reprobe {
    /// Starting from what the probe found at connect.
    pub(crate) fn new(found: Capabilities) -> Reprobe {
        Reprobe {
            latest: Mutex::new(found),
            started: Mutex::new(None),
        }
    }

    /// What the latest probe found.
    pub(crate) fn latest(&self) -> Capabilities {
        lock(&self.latest).clone()
    }

    /// Whether a re-probe may start now (none in the last [`MIN_INTERVAL`]); if so, it counts
    /// as started.
    pub(crate) fn due(&self) -> bool {
        let mut started = lock(&self.started);
        let now = Instant::now();
        if started.is_some_and(|at| now.duration_since(at) < MIN_INTERVAL) {
            return false;
        }
        *started = Some(now);
        true
    }

    /// Keeps what a re-probe `found`, warning once about every capability whose answer
    /// flipped (yes to no or back) since the previous probe.
    pub(crate) fn settle(&self, found: Capabilities) {
        let mut latest = lock(&self.latest);
        let flipped = flips(&latest, &found);
        if !flipped.is_empty() {
            tracing::warn!(
                changed = %flipped.join("; "),
                "after reconnecting, the server answers differently than before; the choices \
                 made at connect stay (connect a new backend to adapt to it)"
            );
            crate::telemetry::capabilities_changed();
        }
        *latest = found;
    }
}

/// Every capability whose answer flipped between `before` and `after`, as
/// `"<command>: <before> → <after>"`, and the server's name or version when that changed.
fn flips(before: &Capabilities, after: &Capabilities) -> Vec<String> {
    let mut flipped: Vec<String> = before
        .iter()
        .zip(after.iter())
        .filter(|((_, was), (_, now))| was.is_yes() != now.is_yes())
        .map(|((capability, was), (_, now))| format!("{capability}: {was} → {now}"))
        .collect();
    let server = |capabilities: &Capabilities| {
        capabilities
            .server()
            .map(|server| format!("{} {}", server.name, server.version))
    };
    if server(before) != server(after) {
        flipped.insert(
            0,
            format!(
                "server: {} → {}",
                server(before).unwrap_or_else(|| "unnamed".into()),
                server(after).unwrap_or_else(|| "unnamed".into())
            ),
        );
    }
    flipped
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these locks; recover the data if something ever did.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

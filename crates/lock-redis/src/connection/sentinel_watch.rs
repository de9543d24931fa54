//! Following a Sentinel failover as it happens: a task listens on the Sentinels'
//! `+switch-master` channel and, when the service's primary changes, has the command connection
//! replaced (the replacement looks the primary up again).
//!
//! Why it is needed: after a failover the old primary may keep running as a primary for a
//! while (until the Sentinels reach it and demote it). A connection still on it gets no error:
//! renewals there succeed while the lease on the new primary runs out, and the lock is lost
//! once the old primary is demoted and its data replaced. An I/O error or a `READONLY` answer
//! only comes later, if at all.

use std::time::Duration;

use futures_util::StreamExt;
use redis::{Client, ConnectionInfo};

/// The channel Sentinels announce a new primary on:
/// `<service> <old ip> <old port> <new ip> <new port>`.
const SWITCH_CHANNEL: &str = "+switch-master";
/// The pause before trying the next Sentinel when none could be listened to.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How often a listening task checks that its backend still exists.
const ALIVE_CHECK: Duration = Duration::from_secs(1);

/// Listens for primary switches of `service` on any of `sentinels` (moving to the next one
/// when a Sentinel goes away) and calls `on_event(Some(why))` for each; `on_event(None)` only
/// asks whether the backend still exists. `on_event` returns `false` once its backend is gone,
/// which ends the task.
pub(crate) fn follow_switches(
    sentinels: Vec<ConnectionInfo>,
    service: String,
    on_event: impl Fn(Option<&str>) -> bool + Send + Sync + 'static,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let (mut first, mut warned) = (true, false);
        loop {
            for info in &sentinels {
                if !listen(info, &service, &on_event, &mut first, &mut warned).await {
                    return;
                }
            }
            if !on_event(None) {
                return;
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    });
}

/// Listens on one Sentinel until its connection ends; `false` when the backend is gone.
/// `warned` says whether a refused subscription was logged already (once per backend: the
/// task tries again every 200 ms).
async fn listen(
    info: &ConnectionInfo,
    service: &str,
    on_event: &(impl Fn(Option<&str>) -> bool + Send + Sync),
    first: &mut bool,
    warned: &mut bool,
) -> bool {
    let Ok(client) = Client::open(info.clone()) else {
        return true;
    };
    let Ok(Ok(mut pubsub)) =
        tokio::time::timeout(Duration::from_secs(2), client.get_async_pubsub()).await
    else {
        return true;
    };
    match tokio::time::timeout(Duration::from_secs(2), pubsub.subscribe(SWITCH_CHANNEL)).await {
        Ok(Ok(())) => {}
        // The Sentinels' ACL user lacks `+subscribe` or `&+switch-master`: said once, since
        // failovers are then followed only when the command connection fails.
        Ok(Err(error)) if error.code() == Some("NOPERM") => {
            if !std::mem::replace(warned, true) {
                tracing::warn!(
                    %error,
                    "a Sentinel refused the +switch-master subscription; failovers are followed \
                     only when the command connection fails (see docs/deployments.md, \"ACL\")"
                );
            }
            return true;
        }
        _ => return true,
    }
    // A switch announced while no Sentinel was listened to would be missed: look the primary
    // up again now (not on the very first subscription: the connection was just made).
    if !*first && !on_event(Some("listening to the Sentinels again")) {
        return false;
    }
    *first = false;
    let mut messages = pubsub.on_message();
    loop {
        match tokio::time::timeout(ALIVE_CHECK, messages.next()).await {
            Ok(Some(message)) => {
                let payload: String = message.get_payload().unwrap_or_default();
                if payload.split_ascii_whitespace().next() == Some(service)
                    && !on_event(Some("the Sentinels switched the primary"))
                {
                    return false;
                }
            }
            // The Sentinel went away: the next one.
            Ok(None) => return true,
            Err(_) => {
                if !on_event(None) {
                    return false;
                }
            }
        }
    }
}

//! What a lock operation does with the replicas' answer to its write (see
//! [`ReplicaAck`](crate::wire::replication::ReplicaAck)): the policy, shared by both lock kinds.

use lock_core::Error;

use crate::call::{Acknowledged, Calls};
use crate::wire::replication::Shortfall;

/// Whether a grant may stand: `Ok` when no acknowledgement was asked for, enough replicas
/// acknowledged, or the shortfall is accepted; otherwise the error to return once the grant
/// has been given back. A refused acknowledgement (e.g. the ACL user may not `WAIT`) fails the
/// grant whatever the policy: nothing is known of the replicas.
pub(crate) fn grant_verdict(
    calls: &Calls,
    name: &str,
    acknowledged: Acknowledged,
) -> Result<(), Error> {
    let (Some(replication), Some(acknowledged)) = (calls.replication(), acknowledged) else {
        return Ok(());
    };
    let count = acknowledged?;
    if count >= replication.required() {
        return Ok(());
    }
    match replication.shortfall() {
        Shortfall::Accept => {
            tracing::warn!(
                lock = name,
                acknowledged = count,
                required = replication.required(),
                "grant kept with fewer replica acknowledgements than asked for"
            );
            Ok(())
        }
        Shortfall::Fail => Err(replication.shortfall_error(count)),
    }
}

/// Whether the renewals of one script call may count as renewed: a shortfall the policy does
/// not accept leaves them undecided (`Unknown`: the watchdog tries again, and the lease is not
/// counted as extended until a renewal is acknowledged).
pub(crate) fn renewals_stand(calls: &Calls, acknowledged: Acknowledged) -> bool {
    let (Some(replication), Some(acknowledged)) = (calls.replication(), acknowledged) else {
        return true;
    };
    match acknowledged {
        Ok(count) if count >= replication.required() => true,
        Ok(count) if replication.shortfall() == Shortfall::Accept => {
            tracing::warn!(
                acknowledged = count,
                required = replication.required(),
                "renewal kept with fewer replica acknowledgements than asked for"
            );
            true
        }
        Ok(count) => {
            tracing::debug!(
                acknowledged = count,
                required = replication.required(),
                "renewal not acknowledged by enough replicas: left undecided"
            );
            false
        }
        Err(error) => {
            tracing::warn!(%error, "renewal acknowledgement refused: left undecided");
            false
        }
    }
}

/// A release stands whatever the replicas say (a release lost in a failover only leaves the
/// lock to its lease's end, it never lets two hold it): a shortfall is logged.
pub(crate) fn log_release(calls: &Calls, name: &str, acknowledged: Acknowledged) {
    let (Some(replication), Some(acknowledged)) = (calls.replication(), acknowledged) else {
        return;
    };
    match acknowledged {
        Ok(count) if count >= replication.required() => {}
        Ok(count) => tracing::warn!(
            lock = name,
            acknowledged = count,
            required = replication.required(),
            "release acknowledged by fewer replicas than asked for"
        ),
        Err(error) => tracing::warn!(lock = name, %error, "release acknowledgement refused"),
    }
}

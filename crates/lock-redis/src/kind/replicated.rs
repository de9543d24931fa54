//! What a lock operation does with the replicas' answer to its write (see
//! [`ReplicaAck`](crate::wire::replication::ReplicaAck)): the policy, shared by both lock kinds.

use std::future::Future;

use lock_core::{AcquireOutcome, Error, Result};

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

/// `outcome` when it may stand (see [`grant_verdict`]); a grant refused for too few
/// acknowledgements is given back with `give_back` first, and the refusal returned (see
/// [`refused`]). Every lock side's `try_acquire` ends with it.
pub(crate) async fn grant_stands<F: Future<Output = Result<()>>>(
    calls: &Calls,
    name: &str,
    outcome: AcquireOutcome,
    acknowledged: Acknowledged,
    give_back: impl FnOnce() -> F,
) -> Result<AcquireOutcome> {
    if let AcquireOutcome::Acquired(_) = outcome
        && let Err(shortfall) = grant_verdict(calls, name, acknowledged)
    {
        // Boxed: taken only on a shortfall, and unboxed the give-back's future would make every
        // acquire's future (moved a few times per call) as large as itself.
        return Err(refused(Box::pin(give_back()).await, shortfall));
    }
    Ok(outcome)
}

/// What a grant refused for too few acknowledgements (`refusal`) returns once it was given back
/// (`given_back`): the refusal; or, when giving it back failed, an ambiguous error, since the
/// grant may still stand, so the locker's own cleanup (with its debt) takes it back. A definite
/// failure (e.g. `READONLY` after a failover) would otherwise leave the grant to its lease.
pub(crate) fn refused(given_back: Result<(), Error>, refusal: Error) -> Error {
    match given_back {
        Ok(()) => refusal,
        Err(error) if error.is_ambiguous() => error,
        Err(error) => Error::ConnectionLost(
            format!("{refusal}, and giving the grant back failed ({error}): it may still stand")
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_grant_not_given_back_is_reported_ambiguous() {
        let refusal = || Error::NotReplicated {
            acknowledged: 0,
            required: 1,
        };
        assert!(matches!(
            refused(Ok(()), refusal()),
            Error::NotReplicated { .. }
        ));
        let timeout = Error::Timeout {
            after: Duration::from_millis(5),
        };
        assert!(matches!(
            refused(Err(timeout), refusal()),
            Error::Timeout { .. }
        ));
        // A definite failure to give it back (a demoted primary answering READONLY) must still
        // reach the locker's cleanup: reported as ambiguous.
        let demoted = refused(Err(Error::ReadOnly("READONLY".into())), refusal());
        assert!(demoted.is_ambiguous(), "{demoted:?}");
        assert!(demoted.to_string().contains("READONLY"), "{demoted}");
    }
}

//! The operations both lock kinds run the same way, each with its own script: renewals,
//! force-release and inspection.

use std::sync::Arc;

use lock_core::{Error, LockState, RenewOutcome, Renewal, Result};

use crate::call::Calls;
use crate::kind::replicated;
use crate::wire::keys;
use crate::wire::lock_script::LockScript;
use crate::wire::reply::{millis, ttl_from_pttl};

/// Renewals are sent in scripts of at most this many keys, so one huge batch never blocks the
/// server for long; the chunks go out concurrently on the multiplexed connection.
const RENEW_CHUNK: usize = 256;

/// Renews every lease of `renewals` with `script`, one outcome per renewal, in order.
///
/// Where a script may only touch keys of one slot (a cluster), the renewals are grouped by
/// slot first; the groups' scripts go out concurrently, so each node's connection carries them
/// together.
pub(crate) async fn renew(
    calls: &Arc<Calls>,
    script: &LockScript,
    renewals: &[Renewal<'_>],
) -> Result<Vec<RenewOutcome>> {
    let groups: Vec<Vec<usize>> = if calls.connection().scripts_span_slots() {
        vec![(0..renewals.len()).collect()]
    } else {
        let mut by_slot = std::collections::BTreeMap::<u16, Vec<usize>>::new();
        for (index, renewal) in renewals.iter().enumerate() {
            by_slot
                .entry(keys::slot(renewal.name))
                .or_default()
                .push(index);
        }
        by_slot.into_values().collect()
    };
    let chunks = groups
        .iter()
        .flat_map(|group| group.chunks(RENEW_CHUNK))
        .map(|chunk| async move {
            // A chunk is never empty; its first name routes it.
            let route = renewals[chunk[0]].name;
            let (reply, acknowledged): (Vec<i64>, _) = calls
                .run_write(
                    route,
                    script,
                    chunk.len(),
                    calls.call_timeout(None),
                    |command| {
                        for &index in chunk {
                            command.arg(renewals[index].name);
                        }
                        for &index in chunk {
                            let renewal = &renewals[index];
                            command.arg(renewal.owner_field).arg(millis(renewal.lease));
                        }
                    },
                )
                .await?;
            if reply.len() != chunk.len() {
                return Err(Error::Protocol(format!(
                    "renew script answered {} results for {} keys",
                    reply.len(),
                    chunk.len()
                )));
            }
            // Too few replicas: renewed on the primary, but not yet to be counted on.
            let stand = replicated::renewals_stand(calls, acknowledged);
            Ok(chunk
                .iter()
                .zip(reply)
                .map(|(&index, renewed)| match renewed {
                    1 if !stand => (index, RenewOutcome::Unknown),
                    renewed => (index, RenewOutcome::from_held(renewed == 1)),
                })
                .collect::<Vec<_>>())
        });
    // One group failing (its slot's primary failing over) leaves the others' answers: its locks
    // are undecided (`Unknown`, retried by the watchdog), unless every group failed.
    let mut answers = futures_util::future::join_all(chunks).await;
    if answers.iter().all(Result::is_err)
        && let Some(Err(error)) = answers.pop()
    {
        return Err(error);
    }
    let mut outcomes = vec![RenewOutcome::Unknown; renewals.len()];
    for (index, outcome) in answers.into_iter().filter_map(Result::ok).flatten() {
        outcomes[index] = outcome;
    }
    Ok(outcomes)
}

/// Deletes the lock `name` whoever holds it, with `script`; whether it existed.
pub(crate) async fn force_release(calls: &Calls, script: &LockScript, name: &str) -> Result<bool> {
    let channel = keys::channel(name);
    let (existed,): (i64,) = calls
        .run(name, script, 1, calls.call_timeout(None), |command| {
            command
                .arg(name)
                .arg(&channel)
                .arg(keys::UNLOCK_MESSAGE)
                .arg(calls.announce().arg());
        })
        .await?;
    Ok(existed == 1)
}

/// Who holds the lock `name` and for how long, read with `script`.
pub(crate) async fn inspect(calls: &Calls, script: &LockScript, name: &str) -> Result<LockState> {
    let (flat, pttl): (Vec<String>, i64) = calls
        .run(name, script, 1, calls.call_timeout(None), |command| {
            command.arg(name);
        })
        .await?;
    let mut holders = Vec::with_capacity(flat.len() / 2);
    for pair in flat.chunks_exact(2) {
        let held: u32 = pair[1]
            .parse()
            .map_err(|_| Error::Protocol(format!("hold count {:?} is not a number", pair[1])))?;
        holders.push((pair[0].clone(), held));
    }
    holders.sort();
    let ttl = if holders.is_empty() {
        None
    } else {
        ttl_from_pttl(pttl)
    };
    Ok(LockState::new(holders, ttl))
}

//! The operations both lock kinds run the same way, each with its own script: renewals,
//! force-release and inspection.

use std::sync::Arc;

use lock_core::{Error, LockState, RenewOutcome, Renewal, Result};

use crate::call::Calls;
use crate::connection::Reach;
use crate::kind::replicated;
use crate::wire::description::{DescribeReply, LockDescription, describe_reply};
use crate::wire::keys;
use crate::wire::lock_script::LockScript;
use crate::wire::reply::{holders, millis};
use crate::wire::scripts::DESCRIBE;

/// Renewals are sent in scripts of at most this many keys, so one huge batch never blocks the
/// server for long; the chunks go out concurrently on the multiplexed connection.
const RENEW_CHUNK: usize = 256;

/// How a renewal script names its locks.
#[derive(Clone, Copy)]
enum Naming {
    /// Every lock a declared key (`renew.lua`): any keys on one server, one slot in a cluster.
    Keys,
    /// The first lock the one declared key (it routes the call), every lock in the arguments
    /// (`renew_across_slots.lua`): any slot the node serves; the others answered "elsewhere".
    #[cfg(feature = "cluster")]
    Arguments,
}

/// A renewal script's answer for one lock: renewed (`1`), not ours (`0`), or, from a script
/// sent by [`Naming::Arguments`], not served by that node (`2`).
const ELSEWHERE: i64 = 2;

/// Renews every lease of `renewals`, one outcome per renewal, in order: with `keyed`
/// (`renew.lua` or the fast lock's) where a script may touch any key or one slot's, and with
/// `across_slots` to put a cluster node's renewals in one script.
///
/// In a cluster the renewals are grouped by the primary serving their slot (as last read with
/// `CLUSTER SLOTS`); a lock its node answers "not served here" for (a slot moved or on the
/// move), or whose node is not known, is renewed again by slot, through redirects. The groups
/// go out concurrently, so each node's connection carries them together.
pub(crate) async fn renew(
    calls: &Arc<Calls>,
    keyed: &LockScript,
    // Only a cluster has nodes to group by.
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))] across_slots: &LockScript,
    renewals: &[Renewal<'_>],
) -> Result<Vec<RenewOutcome>> {
    let mut outcomes = vec![RenewOutcome::Unknown; renewals.len()];
    let mut last_error = None;
    let mut answered = false;
    let keyed_groups = match calls.connection().script_reach().await {
        Reach::Everywhere => vec![(0..renewals.len()).collect()],
        #[cfg(feature = "cluster")]
        Reach::Slot => by_slot(renewals, 0..renewals.len()),
        #[cfg(feature = "cluster")]
        Reach::Node(owners) => {
            let mut by_node = vec![Vec::new(); owners.nodes()];
            let mut elsewhere = Vec::new();
            for (index, renewal) in renewals.iter().enumerate() {
                match owners.node_of(keys::slot(renewal.name)) {
                    Some(node) => by_node[node].push(index),
                    None => elsewhere.push(index),
                }
            }
            let mut moved = false;
            for answer in send(calls, across_slots, Naming::Arguments, renewals, &by_node).await {
                match answer {
                    Ok(chunk) => {
                        answered = true;
                        for (index, answer) in chunk {
                            match answer {
                                Answer::Outcome(outcome) => outcomes[index] = outcome,
                                Answer::Elsewhere => {
                                    moved = true;
                                    elsewhere.push(index);
                                }
                                Answer::Confirm => elsewhere.push(index),
                            }
                        }
                    }
                    Err(error) => last_error = Some(error),
                }
            }
            if moved {
                calls.connection().slot_owners_stale();
            }
            by_slot(renewals, elsewhere.into_iter())
        }
    };
    for answer in send(calls, keyed, Naming::Keys, renewals, &keyed_groups).await {
        match answer {
            Ok(chunk) => {
                answered = true;
                for (index, answer) in chunk {
                    // A keyed script never answers "elsewhere": a moved slot is a redirect.
                    outcomes[index] = match answer {
                        Answer::Outcome(outcome) => outcome,
                        _ => RenewOutcome::Unknown,
                    };
                }
            }
            Err(error) => last_error = Some(error),
        }
    }
    // A group failing (its primary failing over) leaves the others' answers: its locks are
    // undecided (`Unknown`, retried by the watchdog), unless every group failed.
    match last_error {
        Some(error) if !answered => Err(error),
        _ => Ok(outcomes),
    }
}

/// The renewals `indices` grouped by slot.
#[cfg(feature = "cluster")]
fn by_slot(renewals: &[Renewal<'_>], indices: impl Iterator<Item = usize>) -> Vec<Vec<usize>> {
    let mut slots = std::collections::BTreeMap::<u16, Vec<usize>>::new();
    for index in indices {
        slots
            .entry(keys::slot(renewals[index].name))
            .or_default()
            .push(index);
    }
    slots.into_values().collect()
}

/// What a renewal script said of one lock.
enum Answer {
    /// Renewed, not ours, or undecided: the outcome.
    Outcome(RenewOutcome),
    /// Not served by the node the script ran on (its slot moved, or is on the move).
    Elsewhere,
    /// "Not ours" from a script sent by [`Naming::Arguments`]: to be confirmed by slot. While
    /// a slot moves, a script sent with `ASKING` to the importing node sees every key of that
    /// slot there, also one still on the other node, and would call a held lock free.
    #[cfg(feature = "cluster")]
    Confirm,
}

/// One chunk's answers: each renewal's index and what the script said of it.
type Answers = Vec<(usize, Answer)>;

/// Sends the renewals of each group with `script`, in chunks of at most [`RENEW_CHUNK`], all
/// at once; one result per chunk.
async fn send(
    calls: &Arc<Calls>,
    script: &LockScript,
    naming: Naming,
    renewals: &[Renewal<'_>],
    groups: &[Vec<usize>],
) -> Vec<Result<Answers>> {
    let chunks = groups
        .iter()
        .flat_map(|group| group.chunks(RENEW_CHUNK))
        .map(|chunk| send_chunk(calls, script, naming, renewals, chunk));
    futures_util::future::join_all(chunks).await
}

async fn send_chunk(
    calls: &Arc<Calls>,
    script: &LockScript,
    naming: Naming,
    renewals: &[Renewal<'_>],
    chunk: &[usize],
) -> Result<Answers> {
    // A chunk is never empty; its first name routes it.
    let route = renewals[chunk[0]].name;
    let declared = match naming {
        Naming::Keys => chunk.len(),
        #[cfg(feature = "cluster")]
        Naming::Arguments => 1,
    };
    let (reply, acknowledged): (Vec<i64>, _) = calls
        .run_write(
            route,
            script,
            declared,
            calls.call_timeout(None),
            |command| {
                #[cfg(feature = "cluster")]
                if let Naming::Arguments = naming {
                    command.arg(route);
                }
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
        return Err(Error::Protocol(
            format!(
                "renew script answered {} results for {} keys",
                reply.len(),
                chunk.len()
            )
            .into(),
        ));
    }
    // Too few replicas: renewed on the primary, but not yet to be counted on.
    let stand = replicated::renewals_stand(calls, acknowledged);
    Ok(chunk
        .iter()
        .zip(reply)
        .map(|(&index, renewed)| {
            let answer = match (renewed, naming) {
                (ELSEWHERE, _) => Answer::Elsewhere,
                #[cfg(feature = "cluster")]
                (0, Naming::Arguments) => Answer::Confirm,
                (1, _) if !stand => Answer::Outcome(RenewOutcome::Unknown),
                (renewed, _) => Answer::Outcome(RenewOutcome::from_held(renewed == 1)),
            };
            (index, answer)
        })
        .collect())
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

/// Everything the server holds for the name `name`, whichever kind of the family uses it, in
/// one read.
pub(crate) async fn describe(calls: &Calls, name: &str) -> Result<LockDescription> {
    let derived_keys = [
        keys::token_key(name),
        keys::fair_queue(name),
        keys::fair_timeouts(name),
        keys::permits_key(name),
        keys::election_values(name),
    ];
    // The latch's channel keeps Redisson's braces whatever the name: with a hash tag of the
    // name's own it hashes to another slot, which one script cannot look at on a cluster.
    let latch = keys::latch_channel(name);
    let latch = if keys::slot(&latch) == keys::slot(name) {
        latch
    } else {
        String::new()
    };
    let channels = [
        keys::channel(name),
        keys::rw_channel(name),
        keys::semaphore_channel(name),
        latch,
        keys::election_channel(name),
    ];
    let reply: DescribeReply = calls
        .run(
            name,
            &DESCRIBE,
            1 + derived_keys.len(),
            calls.call_timeout(None),
            |command| {
                command.arg(name);
                for arg in derived_keys.iter().chain(&channels) {
                    command.arg(arg);
                }
            },
        )
        .await?;
    describe_reply(reply)
}

/// Who holds the lock `name` and for how long, read with `script`.
pub(crate) async fn inspect(calls: &Calls, script: &LockScript, name: &str) -> Result<LockState> {
    let (flat, pttl): (Vec<String>, i64) = calls
        .run(name, script, 1, calls.call_timeout(None), |command| {
            command.arg(name);
        })
        .await?;
    let (holders, ttl) = holders(&flat, pttl)?;
    Ok(LockState::new(holders, ttl))
}

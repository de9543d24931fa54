//! The history checker for locks that may be shared: read-write locks (readers together, a
//! writer alone) and semaphores (at most N permits out). Each recorded hold claims the whole
//! resource or some units of it, from the moment its holder was told it had it until it let go
//! (or until its guard's validity deadline, when the lease was lost first); the checker sweeps
//! the holds in time order and reports every claim that was granted while it conflicted with
//! the claims already out.
//!
//! The exclusive lock has its own, richer checker ([`crate::history`]: fencing, lost updates);
//! this one answers only "were the claims ever out together when they must not be", plus how
//! much sharing was seen, so that a test can also show readers did overlap (a checker that
//! never sees two readers at once proves little about a read-write lock).

use std::fmt;

use tokio::time::Instant;

/// What one hold claims of the resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The whole resource: nobody else may hold anything meanwhile (a write lock).
    Exclusive,
    /// This many units, shared with other shared claims up to the capacity (a read lock is
    /// one unit of an unbounded capacity; a semaphore's acquire of n permits is n units).
    Shared(u32),
}

/// One recorded hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedHold {
    /// Who held it (a worker, task or client number, for the report).
    pub holder: usize,
    /// What it claimed.
    pub claim: Claim,
    /// When its holder was told it had it (the acquire returned).
    pub from: Instant,
    /// When its holder let go: the start of the release, or the guard's validity deadline
    /// when the lease was lost before.
    pub to: Instant,
}

/// Two holds that were out together when they must not have been.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// A hold already out when `granted` began.
    pub out: SharedHold,
    /// The hold that began while `out` was out.
    pub granted: SharedHold,
    /// Units out (shared claims) just after `granted` began.
    pub units_out: u32,
}

/// What [`check_sharing`] found.
#[derive(Clone, Debug, Default)]
pub struct SharingReport {
    /// Holds checked (empty ones, whose lease was over before their acquire returned, are
    /// left out: they held nothing).
    pub holds: usize,
    /// Exclusive holds among them.
    pub exclusive: usize,
    /// Every conflict: a hold begun while it conflicted with one already out.
    pub conflicts: Vec<Conflict>,
    /// The most shared holds out at one instant.
    pub most_shared_holds: usize,
    /// The most shared units out at one instant.
    pub most_shared_units: u32,
}

impl SharingReport {
    /// No conflict.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.conflicts.is_empty()
    }
}

impl fmt::Display for SharingReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} holds ({} exclusive), {} conflicts; at most {} shared holds ({} units) at once",
            self.holds,
            self.exclusive,
            self.conflicts.len(),
            self.most_shared_holds,
            self.most_shared_units
        )?;
        for conflict in self.conflicts.iter().take(10) {
            writeln!(
                f,
                "  holder {} {:?} began {:?} after holder {} {:?} had begun, while it was out \
                 (it ended {:?} later); {} shared units out",
                conflict.granted.holder,
                conflict.granted.claim,
                conflict.granted.from - conflict.out.from,
                conflict.out.holder,
                conflict.out.claim,
                conflict.out.to - conflict.granted.from,
                conflict.units_out
            )?;
        }
        Ok(())
    }
}

/// Checks `holds` against the sharing rules of a resource of `capacity` units: an exclusive
/// claim is out alone; shared claims are out together while their units add up to at most
/// `capacity` (`u32::MAX` for a read lock). A hold ending at the instant another begins does
/// not overlap it.
///
/// # Example
///
/// ```
/// use std::time::Duration;
///
/// use lock_testkit::sharing::{Claim, SharedHold, check_sharing};
/// use tokio::time::Instant;
///
/// let at = Instant::now();
/// let ms = |n| at + Duration::from_millis(n);
/// let hold = |holder, claim, from, to| SharedHold { holder, claim, from: ms(from), to: ms(to) };
/// let readers = [hold(1, Claim::Shared(1), 0, 10), hold(2, Claim::Shared(1), 5, 15)];
/// let report = check_sharing(&readers, u32::MAX);
/// assert!(report.is_clean());
/// assert_eq!(report.most_shared_holds, 2);
///
/// let writer_among_readers = [readers[0].clone(), hold(3, Claim::Exclusive, 8, 9)];
/// assert_eq!(check_sharing(&writer_among_readers, u32::MAX).conflicts.len(), 1);
/// ```
#[must_use]
pub fn check_sharing(holds: &[SharedHold], capacity: u32) -> SharingReport {
    let mut holds: Vec<&SharedHold> = holds.iter().filter(|hold| hold.to > hold.from).collect();
    holds.sort_by_key(|hold| hold.from);
    let mut report = SharingReport {
        holds: holds.len(),
        exclusive: holds
            .iter()
            .filter(|hold| hold.claim == Claim::Exclusive)
            .count(),
        ..SharingReport::default()
    };
    let mut out: Vec<&SharedHold> = Vec::new();
    for hold in holds {
        // Whatever ended by now (or at this very instant) is no longer out.
        out.retain(|earlier| earlier.to > hold.from);
        let units_out: u32 = out.iter().map(|earlier| units(earlier.claim)).sum();
        let after = units_out.saturating_add(units(hold.claim));
        let conflicting = out
            .iter()
            .find(|earlier| match (earlier.claim, hold.claim) {
                (Claim::Exclusive, _) | (_, Claim::Exclusive) => true,
                (Claim::Shared(_), Claim::Shared(_)) => after > capacity,
            });
        if let Some(earlier) = conflicting {
            report.conflicts.push(Conflict {
                out: (*earlier).clone(),
                granted: hold.clone(),
                units_out: after,
            });
        }
        out.push(hold);
        let shared: Vec<&&SharedHold> = out
            .iter()
            .filter(|held| matches!(held.claim, Claim::Shared(_)))
            .collect();
        report.most_shared_holds = report.most_shared_holds.max(shared.len());
        report.most_shared_units = report
            .most_shared_units
            .max(shared.iter().map(|held| units(held.claim)).sum());
    }
    report
}

/// The units a claim counts for against the capacity (an exclusive claim takes none: it
/// conflicts with everything on its own).
fn units(claim: Claim) -> u32 {
    match claim {
        Claim::Exclusive => 0,
        Claim::Shared(units) => units,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn holds(spec: &[(usize, Claim, u64, u64)]) -> Vec<SharedHold> {
        let at = Instant::now();
        spec.iter()
            .map(|&(holder, claim, from, to)| SharedHold {
                holder,
                claim,
                from: at + Duration::from_millis(from),
                to: at + Duration::from_millis(to),
            })
            .collect()
    }

    #[test]
    fn readers_overlap_and_writers_take_turns_between_them() {
        let report = check_sharing(
            &holds(&[
                (1, Claim::Shared(1), 0, 10),
                (2, Claim::Shared(1), 2, 12),
                (3, Claim::Shared(1), 4, 14),
                (4, Claim::Exclusive, 14, 20),
                (5, Claim::Exclusive, 20, 25),
                (1, Claim::Shared(1), 25, 30),
            ]),
            u32::MAX,
        );
        assert!(report.is_clean(), "{report}");
        assert_eq!((report.holds, report.exclusive), (6, 2));
        assert_eq!(report.most_shared_holds, 3);
    }

    #[test]
    fn a_writer_overlapping_a_reader_or_a_writer_is_a_conflict_either_way_round() {
        for spec in [
            [(1, Claim::Shared(1), 0, 10), (2, Claim::Exclusive, 9, 12)],
            [(1, Claim::Exclusive, 0, 10), (2, Claim::Shared(1), 9, 12)],
            [(1, Claim::Exclusive, 0, 10), (2, Claim::Exclusive, 5, 6)],
        ] {
            let report = check_sharing(&holds(&spec), u32::MAX);
            assert_eq!(report.conflicts.len(), 1, "{spec:?}: {report}");
            assert_eq!(report.conflicts[0].out.holder, 1);
            assert_eq!(report.conflicts[0].granted.holder, 2);
        }
    }

    #[test]
    fn shared_units_beyond_the_capacity_are_a_conflict() {
        let spec = [
            (1, Claim::Shared(2), 0, 10),
            (2, Claim::Shared(1), 1, 10),
            (3, Claim::Shared(1), 2, 3),
        ];
        let report = check_sharing(&holds(&spec), 3);
        assert_eq!(report.conflicts.len(), 1, "{report}");
        assert_eq!(report.conflicts[0].granted.holder, 3);
        assert_eq!(report.conflicts[0].units_out, 4);
        assert!(check_sharing(&holds(&spec), 4).is_clean());
        assert_eq!(check_sharing(&holds(&spec), 4).most_shared_units, 4);
    }

    #[test]
    fn holds_touching_at_an_instant_and_empty_holds_do_not_overlap() {
        let report = check_sharing(
            &holds(&[
                (1, Claim::Exclusive, 0, 10),
                (2, Claim::Exclusive, 10, 20),
                // Its lease was over before its acquire returned: it held nothing.
                (3, Claim::Exclusive, 15, 15),
            ]),
            u32::MAX,
        );
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.holds, 2);
    }
}

//! Which requests are out on one link, so that a reply can be proven to be its request's by
//! the link's state alone, without a `PING` of its own.
//!
//! Replies on a multiplexed connection are matched to requests by order. A reply lost on the
//! way (the threat the proofs defend against, see `crate::connection::standalone`) shifts
//! every later reply one request back, and shifts never undo themselves: if the reply a
//! request reads is its own, so was every reply before it. A `PING <id>` after a request
//! proves it that way. So does **solitude**, and this ledger keeps what shows it:
//!
//! - every request on a published link is *entered* before it is handed to redis-rs, and
//!   leaves when its replies came back ([`Entry::answered`]) or its caller stopped waiting
//!   (the entry dropped), which is never before it was handed over if it ever is;
//! - a request is [`Entry::alone`] when, as it was entered, every request entered before it
//!   had left. Each of those was then either answered or already handed over (or never will
//!   be), so **every request written after it was entered after it**, whatever order redis-rs
//!   writes what it is handed in;
//! - its replies are its own when, as they are read, nothing was entered after it
//!   ([`Entry::answered`] says so). Had a reply before it been lost, its own reply would have
//!   gone to an earlier request and its slot could only be filled by a reply to a request
//!   written after it: one entered after it, which the test sees. Replies are never invented,
//!   so a lone request that lost its place waits (and times out) rather than reading another's.
//!
//! When a lone request was overtaken that way, its caller proves it after the fact (a `PING`
//! written after its replies were read); to keep that rare, once a lone request was
//! overtaken, requests bring their own proofs until one comes back quiet (nothing entered
//! after it while it was out: calls go one at a time again).
//!
//! On top of that, as a safeguard the argument above does not need, no request goes alone
//! while the link is in **doubt**: after a request whose caller stopped waiting (its reply may
//! still come, or be lost, and nobody reads it), until a request entered after it is proven by
//! its own `PING`; and on a new link until its first proof, so what it sent before it was
//! published (the handshake, the fence, deferred cleanups, preloaded scripts) needs no entries.

use std::sync::Mutex;

/// How the replies of a pipeline of plain commands are proven to be its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proof {
    /// A `PING <id>` after it, always: for a pipeline of several calls, which exists because
    /// calls overlap (alone, it would likely be overtaken and need a `PING` after its replies,
    /// one round trip more).
    Echo,
    /// The link's solitude when it goes alone on one server (see the module docs), else a
    /// `PING <id>` after it: for one call.
    SolitudeOrEcho,
}

/// The requests out on one link (see the module documentation).
#[derive(Debug)]
pub(crate) struct Ledger {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// How many requests were entered so far: the last one's number.
    entered: u64,
    /// How many entered requests have neither come back nor been given up.
    out: usize,
    /// The number of the latest request given up unanswered, while no later request was
    /// proven; `Some(0)` for a new link (what was sent before it was published).
    doubt: Option<u64>,
    /// Whether the last request that went alone was overtaken (another request entered
    /// before its replies came back), and no request came back quiet since (nothing entered
    /// after it while it was out).
    overtaken: bool,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            state: Mutex::new(State {
                entered: 0,
                out: 0,
                doubt: Some(0),
                overtaken: false,
            }),
        }
    }
}

impl Ledger {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding this lock; recover the counts if something ever did.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Enters a request about to be handed to redis-rs on this link.
    pub(crate) fn enter(&self) -> Entry<'_> {
        let mut state = self.state();
        state.entered += 1;
        let alone = state.out == 0 && state.doubt.is_none() && !state.overtaken;
        state.out += 1;
        Entry {
            ledger: self,
            number: state.entered,
            alone,
            settled: false,
        }
    }
}

/// One request on a link, from before it is handed to redis-rs until its replies came back.
/// Dropped before [`Entry::answered`] (its caller stopped waiting, or the send failed), it
/// leaves the link in doubt.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    ledger: &'a Ledger,
    number: u64,
    alone: bool,
    settled: bool,
}

impl Entry<'_> {
    /// Whether this request may go without a proof of its own: nothing else was out on the
    /// link, no reply was in doubt, and the last lone request was not overtaken.
    pub(crate) fn alone(&self) -> bool {
        self.alone
    }

    /// Records that this request's replies came back, `proven` when they carried a proof of
    /// their own that checked out (which ends any doubt from before this request). Returns
    /// whether they are proven by solitude: the request went [`alone`](Self::alone) and
    /// nothing was entered after it before now.
    pub(crate) fn answered(mut self, proven: bool) -> bool {
        self.settled = true;
        let mut state = self.ledger.state();
        state.out -= 1;
        if proven && state.doubt.is_some_and(|doubt| doubt < self.number) {
            state.doubt = None;
        }
        // Nothing was entered after this request while it was out.
        let quiet = state.entered == self.number;
        if self.alone {
            state.overtaken = !quiet;
            return quiet;
        }
        // A quiet request shows calls going one at a time again: the next may go alone.
        if quiet {
            state.overtaken = false;
        }
        false
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut state = self.ledger.state();
        state.out -= 1;
        state.doubt = Some(
            state
                .doubt
                .map_or(self.number, |doubt| doubt.max(self.number)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ledger past its first proof: no doubt left from before it was published.
    fn proven_ledger() -> Ledger {
        let ledger = Ledger::default();
        let first = ledger.enter();
        assert!(!first.alone(), "a new link is in doubt");
        assert!(!first.answered(true));
        ledger
    }

    #[test]
    fn a_new_link_is_in_doubt_until_a_proof_comes_back() {
        let ledger = Ledger::default();
        let unproven = ledger.enter();
        assert!(!unproven.alone());
        assert!(!unproven.answered(false));
        assert!(
            !ledger.enter().alone(),
            "still in doubt: nothing was proven"
        );
        let ledger = proven_ledger();
        assert!(ledger.enter().alone());
    }

    #[test]
    fn a_lone_request_answered_before_any_other_is_proven_by_solitude() {
        let ledger = proven_ledger();
        for _ in 0..3 {
            let entry = ledger.enter();
            assert!(entry.alone());
            assert!(entry.answered(false));
        }
    }

    #[test]
    fn a_request_entered_while_another_is_out_is_not_alone() {
        let ledger = proven_ledger();
        let first = ledger.enter();
        let second = ledger.enter();
        assert!(first.alone());
        assert!(!second.alone());
        assert!(!second.answered(true));
        // The first was overtaken (the second was entered before its replies came back),
        // whichever was written first.
        assert!(!first.answered(false));
    }

    #[test]
    fn after_an_overtaken_lone_request_the_next_one_brings_its_proof() {
        let ledger = proven_ledger();
        let lone = ledger.enter();
        let other = ledger.enter();
        assert!(!other.answered(true));
        assert!(!lone.answered(false));
        let next = ledger.enter();
        assert!(!next.alone(), "the last lone request was overtaken");
        let overlapping = ledger.enter();
        assert!(!next.answered(true), "not quiet: one was entered after it");
        let third = ledger.enter();
        assert!(!third.alone(), "still overtaken: nothing came back quiet");
        assert!(!overlapping.answered(true), "not quiet either");
        // The third comes back quiet (nothing entered after it): calls go one at a time again.
        assert!(!third.answered(true));
        let lone = ledger.enter();
        assert!(lone.alone());
        assert!(lone.answered(false));
    }

    #[test]
    fn a_request_given_up_leaves_a_doubt_that_only_a_later_proof_ends() {
        let ledger = proven_ledger();
        let earlier = ledger.enter();
        let given_up = ledger.enter();
        drop(given_up);
        // A proof of a request entered before the one given up says nothing of its reply.
        assert!(!earlier.answered(true));
        let unproven = ledger.enter();
        assert!(!unproven.alone(), "in doubt");
        assert!(!unproven.answered(false));
        assert!(!ledger.enter().alone(), "an unproven reply ends no doubt");
        let proven = ledger.enter();
        assert!(!proven.answered(true));
        // The doubt is gone, but a later request given up while another is out brings it back.
        let out = ledger.enter();
        drop(ledger.enter());
        assert!(!out.answered(false));
        assert!(!ledger.enter().alone());
    }
}

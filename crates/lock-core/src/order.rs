//! One order per (lock name, owner field): the line every store call of that pair waits in, and
//! the tally of what the store holds for it.
//!
//! Every call a [`crate::Locker`] makes to the store for one owner on one name — an acquire
//! attempt, a release (explicit or of a dropped guard), a cleanup after an outcome it could not
//! see — takes a [`Place`] in that pair's line at the moment it is *issued* (for a dropped
//! guard: inside `Drop`, before the caller's next line of code runs), and is sent only when
//! every call issued before it has ended. A call whose future is dropped on its turn hands its
//! place to the background task that finishes it, so the next call waits for that task too.
//!
//! So the store sees one owner's calls on one name in the order the program made them, never
//! two at once, and the [`Tally`] read in a turn is exact: `stored` counts the holds the store
//! has for the owner after every call before this one (a dropped guard's hold counts until its
//! release has run). That is the only rule the cleanup needs: "set the owner's count to
//! `stored`" is right at any turn.
//!
//! Lines are per [`OrderBook`]: a [`crate::Locker`] and its clones share one, and so do the two
//! sides of a [`crate::ReadWriteLock`] (each with its own [`Side`] tally, since each side counts its
//! own holds on the store).

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::Duration;

use foldhash::quality::RandomState;
use tokio::time::Instant;

/// The tallies of a lane: one per side of a read-write lock (a plain locker uses the first).
const SIDES: usize = 2;

/// Which tally of a lane a locker keeps: the sides of a read-write lock count their holds
/// apart on the store, but share one line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Side(usize);

impl Side {
    /// A plain locker, and the read side of a read-write lock.
    pub const FIRST: Side = Side(0);
    /// The write side of a read-write lock.
    pub const SECOND: Side = Side(1);
}

/// Idle lanes (nothing in line, held or owed) are kept, so a name locked over and over does
/// not make its lane anew each time; once there are this many lanes (or twice what the last
/// sweep left), making a new lane first drops the idle ones. Small on purpose: a lock used once
/// per name (a job id) leaves an idle lane per call, and a few hundred kilobytes of them pushed
/// the live lanes out of the caches (lockbench W2: 3-4 % fewer locks per second at 1,024).
const KEEP_LANES: usize = 64;

/// The lines of one locker (and its clones; both sides of a read-write lock).
pub(crate) struct OrderBook {
    lanes: Mutex<Lanes>,
}

/// The lanes by (name, owner field), and when to sweep the idle ones.
///
/// The lanes live in `slots`; the map only finds a pair's slot when a call enters its line. A
/// place keeps its slot, so its later steps (its turn, its tally, leaving) index the slot
/// instead of searching the map. A slot is reused only after its lane was swept, and a lane
/// with a place in line is never swept.
struct Lanes {
    map: HashMap<Arc<LaneKey>, usize, BuildHasherDefault<KeyHash>>,
    slots: Vec<Option<Lane>>,
    /// Slots emptied by a sweep, for the next lanes made.
    vacant: Vec<usize>,
    /// Hashes a (name, owner field) once per entry into a line; the map then reuses that hash
    /// (see [`KeyHash`]). Seeded at random per book, like std's `RandomState`, but several
    /// times cheaper than its SipHash for keys this long; names chosen to collide only slow
    /// the book's own lookups, and it holds the lanes of calls in flight plus a bounded few
    /// idle ones.
    hasher: RandomState,
    /// Sweep before making a lane once the map holds this many.
    sweep_at: usize,
    /// How many lanes carry a debt: while none does, a sweep skips the lapsed-debt check.
    indebted: usize,
}

/// The line and tallies of one (name, owner field).
struct Lane {
    /// The lane's own key, handed to each place (one lookup per entry).
    key: Arc<LaneKey>,
    /// The places taken and not yet given up, in the order they were taken; the front one's
    /// call is the one that may run.
    line: VecDeque<Waiting>,
    next_ticket: u64,
    tallies: [Tally; SIDES],
}

struct Waiting {
    ticket: u64,
    waker: Option<Waker>,
}

impl Lanes {
    /// The pair to search the lanes with, hashed.
    fn probe<'a>(&self, name: &'a str, field: &'a str) -> Probe<'a> {
        Probe {
            hash: self.hasher.hash_one((name, field)),
            name,
            field,
        }
    }

    /// Drops the idle lanes, after dropping the debts whose unseen grant has expired on the
    /// store.
    fn sweep(&mut self) {
        let look_at_debts = self.indebted > 0;
        let Lanes {
            map,
            slots,
            vacant,
            indebted,
            ..
        } = self;
        map.retain(|_, &mut slot| {
            let lane = slots[slot].as_mut().expect("a mapped slot holds its lane");
            if look_at_debts && lane.has_debt() {
                let held = lane.stored();
                for tally in &mut lane.tallies {
                    tally.others_stored = held - tally.stored;
                    tally.open_debt();
                }
                if !lane.has_debt() {
                    *indebted -= 1;
                }
            }
            if lane.idle() {
                slots[slot] = None;
                vacant.push(slot);
                false
            } else {
                true
            }
        });
    }

    /// The lane in `slot`, which a place in it keeps alive.
    fn lane(&mut self, slot: usize) -> &mut Lane {
        self.slots[slot]
            .as_mut()
            .expect("a lane lives while a place in it does")
    }

    /// The lane of a pair, if it has one.
    fn find(&self, name: &str, field: &str) -> Option<&Lane> {
        let slot = *self
            .map
            .get(&self.probe(name, field) as &dyn NameAndField)?;
        self.slots[slot].as_ref()
    }

    /// Runs `change` on a tally of the lane in `slot`, keeping the count of indebted lanes.
    fn change_tally<R>(
        &mut self,
        slot: usize,
        side: Side,
        change: impl FnOnce(&mut Tally) -> R,
    ) -> R {
        let lane = self.lane(slot);
        let had_debt = lane.has_debt();
        let held_before = lane.stored();
        let others_stored = held_before - lane.tallies[side.0].stored;
        let tally = &mut lane.tallies[side.0];
        tally.others_stored = others_stored;
        let result = change(tally);
        if let Some(lease) = tally.lowered_lease.take()
            && held_before > 0
            && lane.stored() == 0
        {
            // The lane's last hold went: the other side's unseen count, kept alive by this
            // side's renewals until now, lives one lease more.
            for (other, tally) in lane.tallies.iter_mut().enumerate() {
                if other != side.0
                    && let Some(debt) = &mut tally.debt
                {
                    debt.lease = debt.lease.max(lease);
                    debt.lapses = debt.lapses.max(Instant::now() + debt.lease);
                }
            }
        }
        match (had_debt, lane.has_debt()) {
            (false, true) => self.indebted += 1,
            (true, false) => self.indebted -= 1,
            _ => {}
        }
        result
    }
}

impl Lane {
    /// Nothing in line, nothing held, nothing owed: the lane can go at the next sweep.
    fn idle(&self) -> bool {
        self.line.is_empty() && self.tallies.iter().all(Tally::is_empty)
    }

    fn has_debt(&self) -> bool {
        self.tallies.iter().any(|tally| tally.debt.is_some())
    }

    /// The owner's holds on the store, both sides together.
    fn stored(&self) -> u32 {
        self.tallies.iter().map(|tally| tally.stored).sum()
    }
}

/// What one side of a lane counts.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    /// The owner's holds on the store after every call that has ended in this line: granted
    /// and not yet released (a dropped guard's hold counts until its release has run).
    pub stored: u32,
    /// The owner's guards alive in this process (a dropped guard no longer counts).
    pub live: u32,
    /// Set when the store may hold more than `stored` (a call of unknown outcome whose cleanup
    /// failed): the next call in line sets the count to `stored` first.
    pub debt: Option<Debt>,
    /// The holds of the lane's other side, as the lane had them when this tally was handed
    /// out: the sides of a read-write lock share one hash on the store, so the other side's
    /// renewals keep this side's unseen count alive too.
    others_stored: u32,
    /// The lease of the last hold given back through [`Self::lower_to`] in this change: when it
    /// was the lane's last, the other side's debt lives one such lease more.
    lowered_lease: Option<Duration>,
}

impl Tally {
    fn is_empty(&self) -> bool {
        self.stored == 0 && self.live == 0 && self.debt.is_none()
    }

    /// Records that the store may hold more than `stored`, for at most `lease` from now unless
    /// a hold of the owner keeps it alive.
    pub fn note_debt(&mut self, lease: Duration) {
        let lapses = Instant::now() + lease;
        let debt = self.debt.get_or_insert(Debt {
            lapses,
            lease,
            rearmed: false,
        });
        debt.lapses = debt.lapses.max(lapses);
        debt.lease = debt.lease.max(lease);
        // A new unseen call: the first failed cleanup after it may move the lapse again.
        debt.rearmed = false;
    }

    /// The first cleanup of the debt since it was noted failed now. That cleanup was sent
    /// after every call of the owner issued before it (a composite's cleanup waits for the
    /// node calls still running, which outlive the attempt that issued them and may have set
    /// the unseen grant's lease just now): the lapse moves to one lease from now, once, so a
    /// node that stays down does not keep the debt for ever.
    pub fn rearm_debt(&mut self) {
        if let Some(debt) = &mut self.debt
            && !debt.rearmed
        {
            debt.lapses = debt.lapses.max(Instant::now() + debt.lease);
            debt.rearmed = true;
        }
    }

    /// The open debt, if any: one whose unseen grant has surely expired on the store (past its
    /// lapse, and no hold of the owner left on either side to keep it alive by renewals) is
    /// dropped here.
    pub fn open_debt(&mut self) -> Option<Debt> {
        if let Some(debt) = self.debt
            && self.stored == 0
            && self.others_stored == 0
            && debt.lapses <= Instant::now()
        {
            self.debt = None;
        }
        self.debt
    }

    /// One hold fewer on the store; the holds left. When none is left and a debt is open, its
    /// lapse moves to one lease (`lease`, the hold's) from now: the hold's renewals kept the
    /// unseen count alive until now.
    pub fn give_back(&mut self, lease: Duration) -> u32 {
        self.lower_to(self.stored.saturating_sub(1), lease);
        self.stored
    }

    /// Lowers the count to at most `holds` (never raises it), with the debt's lapse as in
    /// [`Self::give_back`].
    pub fn lower_to(&mut self, holds: u32, lease: Duration) {
        self.stored = self.stored.min(holds);
        self.lowered_lease = Some(self.lowered_lease.map_or(lease, |seen| seen.max(lease)));
        if self.stored == 0
            && let Some(debt) = &mut self.debt
        {
            debt.lease = debt.lease.max(lease);
            debt.lapses = debt.lapses.max(Instant::now() + debt.lease);
        }
    }
}

/// An unsettled cleanup of one side of a lane.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Debt {
    /// When the store has surely expired the unseen grant, if no hold of the owner outlives it.
    lapses: Instant,
    /// The lease the unseen grant (or a later hold's last renewal) may have set.
    lease: Duration,
    /// The lapse was moved once by a failed cleanup ([`Tally::rearm_debt`]).
    rearmed: bool,
}

/// A lane's key: the lock name followed by the owner field, in one buffer, and its hash.
struct LaneKey {
    /// [`Lanes::probe`]'s hash of the pair, made once when the lane is.
    hash: u64,
    text: Box<str>,
    name_len: usize,
}

/// A borrowed (lock name, owner field) pair with its hash, to search the lanes with.
struct Probe<'a> {
    hash: u64,
    name: &'a str,
    field: &'a str,
}

/// A (lock name, owner field) pair however it is stored, so the lanes, keyed by [`LaneKey`],
/// can be searched with two borrowed strings (no allocation for a lane that exists).
trait NameAndField {
    fn name(&self) -> &str;
    fn field(&self) -> &str;
    /// The pair's hash, made once per call by [`Lanes::probe`] (a call's place keeps it).
    fn pair_hash(&self) -> u64;
}

impl NameAndField for Probe<'_> {
    fn name(&self) -> &str {
        self.name
    }
    fn field(&self) -> &str {
        self.field
    }
    fn pair_hash(&self) -> u64 {
        self.hash
    }
}

impl NameAndField for Arc<LaneKey> {
    fn name(&self) -> &str {
        &self.text[..self.name_len]
    }
    fn field(&self) -> &str {
        &self.text[self.name_len..]
    }
    fn pair_hash(&self) -> u64 {
        self.hash
    }
}

/// The map's hasher: it passes on the hash a key carries. A call hashes its name and owner
/// field once, on entering its line; every later lookup of its lane (its turn, its tally, its
/// leaving) reuses that hash instead of hashing both strings again. A lock used once per name
/// (a job id, say) makes a lane per call, so this is on the common path.
#[derive(Default)]
struct KeyHash(u64);

impl Hasher for KeyHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (see the `Hash` impls below); mixed in all the same.
        for &byte in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl Hash for dyn NameAndField + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.pair_hash());
    }
}

impl PartialEq for dyn NameAndField + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name() && self.field() == other.field()
    }
}

impl Eq for dyn NameAndField + '_ {}

// Hashing and equality of the key go through `dyn NameAndField`, so they agree with the
// borrowed form, as `Borrow` requires.
impl Hash for LaneKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialEq for LaneKey {
    fn eq(&self, other: &Self) -> bool {
        self.name_len == other.name_len && self.text == other.text
    }
}

impl Eq for LaneKey {}

impl<'a> Borrow<dyn NameAndField + 'a> for Arc<LaneKey> {
    fn borrow(&self) -> &(dyn NameAndField + 'a) {
        self
    }
}

impl OrderBook {
    pub fn new() -> Arc<Self> {
        Arc::new(OrderBook {
            lanes: Mutex::new(Lanes {
                map: HashMap::default(),
                slots: Vec::new(),
                vacant: Vec::new(),
                hasher: RandomState::default(),
                sweep_at: KEEP_LANES,
                indebted: 0,
            }),
        })
    }

    fn lanes(&self) -> MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the next place in the line of (`name`, `field`), at once: the call it is for runs
    /// after every call that took a place before it. `on_entry` changes a tally in the same
    /// step (a release forgets its guard there, so no reader sees the guard gone before its
    /// release is in line).
    pub fn enter_with(
        self: &Arc<Self>,
        name: &str,
        field: &str,
        side: Side,
        on_entry: impl FnOnce(&mut Tally),
    ) -> Place {
        let mut lanes = self.lanes();
        let borrowed = lanes.probe(name, field);
        let found = lanes.map.get(&borrowed as &dyn NameAndField).copied();
        let slot = if let Some(slot) = found {
            slot
        } else {
            if lanes.map.len() >= lanes.sweep_at {
                lanes.sweep();
                lanes.sweep_at = KEEP_LANES.max(lanes.map.len() * 2);
            }
            let mut text = String::with_capacity(name.len() + field.len());
            text.push_str(name);
            text.push_str(field);
            let key = Arc::new(LaneKey {
                hash: borrowed.hash,
                text: text.into_boxed_str(),
                name_len: name.len(),
            });
            let lane = Lane {
                key: key.clone(),
                line: VecDeque::new(),
                next_ticket: 0,
                tallies: [Tally::default(); SIDES],
            };
            let slot = match lanes.vacant.pop() {
                Some(slot) => {
                    lanes.slots[slot] = Some(lane);
                    slot
                }
                None => {
                    lanes.slots.push(Some(lane));
                    lanes.slots.len() - 1
                }
            };
            lanes.map.insert(key, slot);
            slot
        };
        let lane = lanes.lane(slot);
        let ticket = lane.next_ticket;
        lane.next_ticket += 1;
        // First in line: its turn has come, and `turn` need not look.
        let front = lane.line.is_empty();
        lane.line.push_back(Waiting {
            ticket,
            waker: None,
        });
        on_entry(&mut lane.tallies[side.0]);
        Place {
            book: self.clone(),
            key: lane.key.clone(),
            slot,
            ticket,
            side,
            front: AtomicBool::new(front),
            left: false,
        }
    }

    /// As [`Self::enter_with`], changing nothing else.
    pub fn enter(self: &Arc<Self>, name: &str, field: &str, side: Side) -> Place {
        self.enter_with(name, field, side, |_| {})
    }

    /// Whether `field` owes a cleanup on `name` on `side` (a cheap look, out of turn).
    pub fn owes(&self, name: &str, field: &str, side: Side) -> bool {
        self.lanes()
            .find(name, field)
            .is_some_and(|lane| lane.tallies[side.0].debt.is_some())
    }

    /// The guards of `field` on `name` alive on `side` in this process.
    pub fn live(&self, name: &str, field: &str, side: Side) -> u32 {
        self.lanes()
            .find(name, field)
            .map_or(0, |lane| lane.tallies[side.0].live)
    }

    /// Whether every lane is idle: nothing in line, held or owed.
    #[cfg(test)]
    pub fn is_idle(&self) -> bool {
        self.lanes().slots.iter().flatten().all(Lane::idle)
    }

    /// Whether any lane carries a debt.
    #[cfg(test)]
    pub fn has_debts(&self) -> bool {
        self.lanes().slots.iter().flatten().any(Lane::has_debt)
    }

    /// How many lanes are kept.
    #[cfg(test)]
    pub fn lane_count(&self) -> usize {
        self.lanes().map.len()
    }
}

/// A place in the line of one (name, owner field): the call it was taken for runs once
/// [`Place::turn`] resolves, and the next place's call only after this one is dropped.
///
/// Dropping a place, served or not, gives it up: a caller that goes away while waiting leaves
/// the line, and one whose call is under way must first hand the place to whatever finishes
/// that call (see `crate::shared`).
pub(crate) struct Place {
    book: Arc<OrderBook>,
    key: Arc<LaneKey>,
    /// Where its lane is kept (see [`Lanes`]).
    slot: usize,
    ticket: u64,
    side: Side,
    /// Known to be at the front of its line (set once it is: a place never moves back).
    front: AtomicBool,
    /// Already out of its line ([`Place::leave_with`]).
    left: bool,
}

impl std::fmt::Debug for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Place")
            .field("name", &self.name())
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

impl Place {
    /// The lock name.
    pub fn name(&self) -> &str {
        self.key.name()
    }

    /// The owner field.
    pub fn field(&self) -> &str {
        self.key.field()
    }

    /// Resolves when every call in line before this one has ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the place stays taken until it is dropped.
    pub fn turn(&self) -> impl Future<Output = ()> + Send + '_ {
        std::future::poll_fn(move |cx| {
            if self.front.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            let mut lanes = self.book.lanes();
            let lane = lanes.lane(self.slot);
            let front = lane.line.front().map(|waiting| waiting.ticket);
            if front == Some(self.ticket) {
                self.front.store(true, Ordering::Release);
                return Poll::Ready(());
            }
            if let Some(waiting) = lane.line.iter_mut().find(|w| w.ticket == self.ticket) {
                match &mut waiting.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    slot => *slot = Some(cx.waker().clone()),
                }
            }
            Poll::Pending
        })
    }

    /// Reads or changes this side's tally. Meant for the place's turn: only then is `stored`
    /// the store's count.
    pub fn tally<R>(&self, change: impl FnOnce(&mut Tally) -> R) -> R {
        self.book.lanes().change_tally(self.slot, self.side, change)
    }

    /// Changes this side's tally and gives the place up, in one step.
    pub fn leave_with(mut self, change: impl FnOnce(&mut Tally)) {
        let next = {
            let mut lanes = self.book.lanes();
            lanes.change_tally(self.slot, self.side, change);
            self.leave(&mut lanes)
        };
        self.left = true;
        if let Some(waker) = next {
            waker.wake();
        }
    }

    /// Takes the place out of its line; returns the next place's waker if this one was in
    /// front, to be woken once the lanes are unlocked (a waker may run code that takes them).
    #[must_use]
    fn leave(&self, lanes: &mut Lanes) -> Option<Waker> {
        let lane = lanes.slots[self.slot].as_mut()?;
        let at = lane.line.iter().position(|w| w.ticket == self.ticket)?;
        lane.line.remove(at);
        if at == 0 {
            lane.line.front_mut().and_then(|next| next.waker.take())
        } else {
            None
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.left {
            return;
        }
        let next = self.leave(&mut self.book.lanes());
        if let Some(waker) = next {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[tokio::test]
    async fn places_are_served_in_the_order_they_were_taken() {
        let book = OrderBook::new();
        let first = book.enter("n", "f", Side::FIRST);
        let second = book.enter("n", "f", Side::FIRST);
        let served = Arc::new(AtomicBool::new(false));
        let waiter = tokio::spawn({
            let served = served.clone();
            async move {
                second.turn().await;
                served.store(true, Ordering::SeqCst);
            }
        });
        first.turn().await;
        tokio::task::yield_now().await;
        assert!(
            !served.load(Ordering::SeqCst),
            "the second waits for the first"
        );
        drop(first);
        waiter.await.unwrap();
        assert!(served.load(Ordering::SeqCst));
        assert!(book.is_idle());
    }

    #[tokio::test]
    async fn a_place_given_up_before_its_turn_lets_the_next_one_through() {
        let book = OrderBook::new();
        let first = book.enter("n", "f", Side::FIRST);
        let second = book.enter("n", "f", Side::FIRST);
        let third = book.enter("n", "f", Side::FIRST);
        drop(second);
        drop(first);
        third.turn().await;
        drop(third);
        assert!(book.is_idle());
    }

    #[tokio::test]
    async fn other_names_and_owners_do_not_wait() {
        let book = OrderBook::new();
        let _held = book.enter("n", "f", Side::FIRST);
        book.enter("n", "g", Side::FIRST).turn().await;
        book.enter("m", "f", Side::FIRST).turn().await;
    }

    #[tokio::test(start_paused = true)]
    async fn idle_lanes_and_lapsed_debts_are_swept_as_the_lanes_grow() {
        let book = OrderBook::new();
        let place = book.enter("n", "f", Side::FIRST);
        place.tally(|tally| tally.note_debt(Duration::from_millis(100)));
        drop(place);
        assert!(book.has_debts(), "kept past the call");
        tokio::time::sleep(Duration::from_millis(150)).await;
        let held = book.enter("held", "f", Side::FIRST);
        for n in 0..KEEP_LANES {
            drop(book.enter(&format!("name {n}"), "f", Side::FIRST));
        }
        assert!(!book.has_debts(), "the lapsed debt went with its lane");
        assert!(
            book.lane_count() < KEEP_LANES,
            "idle lanes went: {}",
            book.lane_count()
        );
        held.turn().await;
        drop(held);
    }

    /// The sides of a read-write lock share one hash on the store, and a read hold's renewals
    /// keep it alive: a write side's unseen hold (a debt) must not lapse while the owner still
    /// holds the read side, only one lease after the last of the lane's holds is given back.
    #[tokio::test(start_paused = true)]
    async fn a_debt_outlives_its_lapse_while_the_other_side_holds() {
        let lease = Duration::from_millis(100);
        let book = OrderBook::new();
        let read = book.enter("n", "f", Side::FIRST);
        read.tally(|tally| tally.stored = 1);
        drop(read);
        let write = book.enter("n", "f", Side::SECOND);
        write.tally(|tally| tally.note_debt(lease));
        drop(write);
        tokio::time::sleep(lease * 3).await;
        let write = book.enter("n", "f", Side::SECOND);
        assert!(
            write.tally(|tally| tally.open_debt().is_some()),
            "dropped while a read hold kept the hash alive"
        );
        drop(write);
        // The read hold goes: the unseen write hold lives one lease more, then is gone.
        let read = book.enter("n", "f", Side::FIRST);
        read.tally(|tally| tally.lower_to(0, lease));
        drop(read);
        tokio::time::sleep(lease / 2).await;
        let write = book.enter("n", "f", Side::SECOND);
        assert!(
            write.tally(|tally| tally.open_debt().is_some()),
            "lapsed early"
        );
        drop(write);
        tokio::time::sleep(lease).await;
        let write = book.enter("n", "f", Side::SECOND);
        assert!(
            write.tally(|tally| tally.open_debt().is_none()),
            "never lapsed"
        );
        drop(write);
    }

    #[tokio::test]
    async fn leaving_with_a_change_lets_the_next_place_through() {
        let book = OrderBook::new();
        let first = book.enter("n", "f", Side::FIRST);
        let second = book.enter("n", "f", Side::FIRST);
        first.turn().await;
        first.leave_with(|tally| tally.stored += 1);
        second.turn().await;
        assert_eq!(second.tally(|tally| tally.stored), 1);
        second.leave_with(|tally| tally.stored -= 1);
        assert!(book.is_idle());
    }
}

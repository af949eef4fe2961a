//! The hierarchical timing wheel: pure, single-threaded data that maps absolute deadlines (in
//! ticks) to values. No clock, no threads, no atomics: the driver owns it and calls it with
//! `&mut self`; what a tick is worth in time is the caller's business.
//!
//! # Layout
//!
//! Eleven levels of 64 slots. A slot of level `l` spans `64^l` ticks, so level 0 has one tick
//! per slot and the 11 levels cover 66 bits: every `u64` deadline up to `u64::MAX` has a place,
//! and no overflow list is needed (the top level uses 16 of its 64 slots). Each level keeps a
//! `u64` bitmap of its non-empty slots. Entries live in one slab (chunks that never move, so it
//! grows without copying: `nodes.rs`) and each slot is an
//! intrusive doubly linked list through it, linked by `u32` indices.
//!
//! # Ground rules
//!
//! - `now` is the tick the wheel has been polled to. It only moves forward, in
//!   [`poll_expired`](Wheel::poll_expired) and its bounded form.
//! - `cursor` is the tick slot positions are counted from: `now`, or earlier while a bounded
//!   poll has not finished (the ground rules of `poll.rs` say how it trails `now`).
//! - An entry with `deadline <= now` (inserted late) waits in the *due list* and comes out at the
//!   next poll.
//! - Every other entry is linked at level `level_for(cursor, deadline)` (the highest 6-bit digit
//!   in which its deadline differs from `cursor`), slot `slot_for(deadline, level)`. Its deadline
//!   shares all higher digits with `cursor`, and its digit at that level is greater than
//!   `cursor`'s. The first node of every list carries that list's id (its back link's head
//!   mark, `slab.rs`), so `remove` is an O(1) unlink whatever the cursor has done since the
//!   insert: a node inside a list is unlinked from its neighbours alone, a head from the list
//!   its mark names.
//! - Consequently the earliest non-empty slot is the first occupied one of the lowest non-empty
//!   level, and every entry in it is due at or after that slot's first tick. Polling jumps the
//!   cursor from one such slot to the next (bitmap look-ups, never tick by tick) and *cascades*
//!   the slot: each entry is either due (moved to the output) or relinked at a strictly lower
//!   level. An entry thus moves at most 10 times in its life and is never lost or duplicated.
//! - A cascade may be done ahead of time, a bounded step at a time ([`Wheel::stage_ahead`],
//!   `stage.rs`): each level has a spare set of slot lists that the next coarser level's
//!   upcoming slot is staged into, made live in O(1) when that slot comes. The two sets' slots
//!   are distinct lists with distinct ids.

// Private to the crate unless the `bench-wheel` feature exposes it (hidden) to its benchmark:
// the items are `pub` for that build, and some are only used by it or by the tests.
#![cfg_attr(not(feature = "bench-wheel"), allow(unreachable_pub, dead_code))]

//! # Memory
//!
//! One entry costs one slab node: 16 bytes of bookkeeping (a deadline and two links) plus
//! `Option<T>`, rounded up to 8. That is **24 bytes** for
//! `T = ()` or a thin pointer with a niche such as `Arc<Task>`, and **32 bytes** for a fat one
//! such as the pool's `TaskRef` ([`Wheel::ENTRY_SIZE`]), plus the growth slack of the slab's
//! chunks, which double in size as a `Vec` does: room for at most twice the peak number of
//! entries plus 62 (2.95x at 65 entries, 2.0x at a million) until
//! [`shrink_to_fit`](Wheel::shrink_to_fit). The levels and their spares add a fixed 5.8 KB,
//! the table of chunks half a kilobyte. One wheel holds some 4.29 billion entries at most.

mod bits;
mod key;
mod level;
mod nodes;
mod poll;
mod slab;
mod stage;

use std::fmt;
use std::mem;

use bits::{level_for, slot_for, NUM_LEVELS};
use level::Level;
use slab::{Links, List, Slab, NIL};

pub use key::Key;

/// Storage of an empty wheel, taken out by [`Wheel::take_storage_if_empty`]: it holds no
/// entry, and dropping it frees the memory.
///
/// Boxed: the storage's table of chunks is half a kilobyte, and a shard's cancel returns an
/// `Option<Storage>` every time (almost always `None`), which would copy it.
pub struct Storage<T>(Box<nodes::Nodes<T>>);

impl<T> fmt::Debug for Storage<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Storage({} nodes)", self.0.room())
    }
}

/// A hierarchical timing wheel holding values of type `T` until their deadline tick.
///
/// Insert and remove are O(1). [`poll_expired`](Wheel::poll_expired) advances time and hands out
/// exactly the entries whose deadline has passed; it costs O(1) per entry it yields or cascades
/// plus a few bitmap operations per non-empty slot it passes, however far time jumps.
/// [`next_expiration`](Wheel::next_expiration) says when polling next has work to do, so an idle
/// wheel needs no ticking.
///
/// The wheel is plain data: `Send`/`Sync` exactly when `T` is, and every method takes `&self` or
/// `&mut self`.
///
/// # Examples
///
/// ```
/// use wheelpool::wheel::Wheel;
///
/// let mut wheel = Wheel::new();
/// wheel.insert(5, "five");
/// let ten = wheel.insert(10, "ten");
/// wheel.insert(1_000_000, "a million");
/// assert_eq!(wheel.len(), 3);
///
/// let mut due = Vec::new();
/// wheel.poll_expired(7, &mut due);
/// assert_eq!(due, ["five"]);
/// assert_eq!(wheel.now(), 7);
///
/// assert_eq!(wheel.remove(ten, |v| *v == "ten"), Some("ten"));
/// due.clear();
/// wheel.poll_expired(u64::MAX, &mut due);
/// assert_eq!(due, ["a million"]);
/// assert!(wheel.is_empty());
/// ```
pub struct Wheel<T> {
    /// The tick the wheel has been polled to: time as its user sees it.
    now: u64,
    /// The tick slot positions are relative to: `now`, or earlier while a bounded poll has
    /// not caught up (see the ground rules).
    cursor: u64,
    /// Entries ready to come out: inserted with `deadline <= now`.
    due: List,
    /// A slot taken out of its level and not yet fully cascaded.
    cascading: Cascade,
    /// The levels, finest first, each twice: the *live* one (bit `l` of `live` says which)
    /// and a *spare* that staging fills (see `stage.rs`). Boxed: 5.8 KB would make every move
    /// of a `Wheel` costly.
    levels: Box<[[Level; 2]; NUM_LEVELS]>,
    /// Bit `l`: which of `levels[l]` is live.
    live: u16,
    /// `stage[l]` (for `l >= 1`): the slot of level `l` whose entries are being staged into
    /// the spare of level `l - 1`, or [`NO_STAGE`] (see `stage.rs`).
    stage: [u8; NUM_LEVELS],
    /// Storage for every entry.
    slab: Slab<T>,
}

/// The slot a bounded poll is cascading: its remaining entries (list [`CASCADING_LIST`]), and
/// the level and slot they were linked at.
///
/// `back` ([`BACK_LIST`]): the entries that were staged (see `stage.rs`) into the cursor's own
/// slot of the level below, which is slot 0 there (the cursor stands at the slot's first tick).
/// They belong finer still and are cascaded with the slot, a budget at a time, where they are.
#[derive(Clone, Copy)]
struct Cascade {
    list: List,
    /// Where the slot was: only the invariant checks read it (a head mark finds the list).
    #[cfg_attr(not(all(test, not(wheelpool_loom))), allow(dead_code))]
    level: usize,
    #[cfg_attr(not(all(test, not(wheelpool_loom))), allow(dead_code))]
    slot: usize,
    back: List,
}

impl Cascade {
    const NONE: Cascade = Cascade {
        list: List::EMPTY,
        level: usize::MAX,
        slot: usize::MAX,
        back: List::EMPTY,
    };

    /// True while entries of the slot wait to be cascaded.
    fn is_empty(&self) -> bool {
        self.list.is_empty() && self.back.is_empty()
    }
}

/// The ids of the wheel's lists, carried by each list's first node (see `slab.rs`): the due
/// list, the slot being cascaded, its sent-back entries, then every slot of both sets of every
/// level ([`level_base`]).
const DUE_LIST: u32 = 0;
const CASCADING_LIST: u32 = 1;
const BACK_LIST: u32 = 2;
const FIRST_SLOT_LIST: u32 = 3;

// Every id fits in a head mark.
const _: () = assert!(
    FIRST_SLOT_LIST as usize + 2 * NUM_LEVELS * bits::SLOTS <= slab::MAX_LIST_ID as usize + 1
);

/// The list id of slot 0 of `levels[level][buffer]`; slot `s` is that plus `s`.
fn level_base(level: usize, buffer: usize) -> u32 {
    debug_assert!(level < NUM_LEVELS && buffer < 2);
    FIRST_SLOT_LIST + ((level * 2 + buffer) * bits::SLOTS) as u32
}

/// `(level, buffer, slot)` of a slot list's id.
fn slot_of(id: u32) -> (usize, usize, usize) {
    let n = (id - FIRST_SLOT_LIST) as usize;
    let (sets, slot) = (n / bits::SLOTS, n % bits::SLOTS);
    (sets / 2, sets % 2, slot)
}

/// `stage[l]` when level `l` stages no slot.
const NO_STAGE: u8 = u8::MAX;

impl<T> Wheel<T> {
    /// Bytes of slab storage per entry, the value included (see the module docs on memory).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use wheelpool::wheel::Wheel;
    ///
    /// if cfg!(target_pointer_width = "64") {
    ///     assert_eq!(Wheel::<()>::ENTRY_SIZE, 24);
    ///     assert_eq!(Wheel::<Arc<String>>::ENTRY_SIZE, 24);
    ///     assert_eq!(Wheel::<Arc<dyn Send + Sync>>::ENTRY_SIZE, 32);
    /// }
    /// ```
    pub const ENTRY_SIZE: usize = Slab::<T>::NODE_SIZE;

    /// An empty wheel standing at tick 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let wheel: Wheel<u32> = Wheel::new();
    /// assert_eq!(wheel.now(), 0);
    /// assert!(wheel.is_empty());
    /// assert_eq!(wheel.next_expiration(), None);
    /// ```
    #[must_use]
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty wheel standing at tick 0 with room for `capacity` entries before its slab
    /// allocates again.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let wheel: Wheel<u32> = Wheel::with_capacity(100);
    /// assert!(wheel.capacity() >= 100);
    /// ```
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        Wheel {
            now: 0,
            cursor: 0,
            due: List::EMPTY,
            cascading: Cascade::NONE,
            levels: Box::new([const { [Level::EMPTY, Level::EMPTY] }; NUM_LEVELS]),
            live: 0,
            stage: [NO_STAGE; NUM_LEVELS],
            slab: Slab::with_capacity(capacity),
        }
    }

    /// The tick the wheel has been advanced to: the largest `now` ever passed to
    /// [`poll_expired`](Wheel::poll_expired), or 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel: Wheel<()> = Wheel::new();
    /// wheel.poll_expired(42, &mut Vec::new());
    /// wheel.poll_expired(7, &mut Vec::new()); // time never goes back
    /// assert_eq!(wheel.now(), 42);
    /// ```
    #[must_use]
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Number of entries in the wheel.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// wheel.insert(3, 'a');
    /// assert_eq!(wheel.len(), 1);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether the wheel holds no entry.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// assert!(wheel.is_empty());
    /// let key = wheel.insert(3, 'a');
    /// assert!(!wheel.is_empty());
    /// wheel.remove(key, |_| true);
    /// assert!(wheel.is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of entries the wheel can hold before its slab allocates again (a chunk twice the
    /// size of the last: nothing is copied).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// for tick in 0..1000 {
    ///     wheel.insert(tick, ());
    /// }
    /// assert!(wheel.capacity() >= 1000);
    /// ```
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.slab.capacity()
    }

    /// Adds `value`, due at the absolute tick `deadline`, and returns the key that removes it.
    ///
    /// Every `deadline` up to `u64::MAX` is accepted. A deadline at or before
    /// [`now`](Wheel::now) is due at once: the next [`poll_expired`](Wheel::poll_expired) yields
    /// it. O(1); reuses the node of a removed or fired entry when there is one.
    ///
    /// # Panics
    ///
    /// Panics if the wheel already holds `u32::MAX - 4095` entries.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// wheel.poll_expired(100, &mut Vec::new());
    /// wheel.insert(50, "late");
    /// wheel.insert(u64::MAX, "never, in practice");
    /// let mut due = Vec::new();
    /// wheel.poll_expired(100, &mut due);
    /// assert_eq!(due, ["late"]);
    /// ```
    #[inline]
    pub fn insert(&mut self, deadline: u64, value: T) -> Key {
        let index = self.slab.insert(deadline, value);
        if deadline <= self.now {
            self.push_due(index);
        } else {
            self.link(index, deadline);
        }
        Key { index }
    }

    /// The key the next [`insert`](Self::insert) will return, so that a value which holds its
    /// own key can learn it before it moves into the wheel.
    pub(crate) fn vacant_key(&self) -> Key {
        Key {
            index: self.slab.vacant(),
        }
    }

    /// Removes the entry of `key` and returns its value, if `key` names an entry and
    /// `is_entry` recognises its value; otherwise `None`, and nothing changes.
    ///
    /// A key outlives its entry (it fired or was removed) and then names whatever entry holds
    /// its node next, if any: `is_entry` is how the caller tells its own entry from that one
    /// (an identity check, or a comparison with a value known to be unique).
    ///
    /// O(1): an unlink. The value is moved out, so it is dropped as soon as the caller drops it;
    /// the wheel keeps nothing of it.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// let key = wheel.insert(10, String::from("payload"));
    /// assert_eq!(wheel.remove(key, |v| v == "payload").as_deref(), Some("payload"));
    /// assert_eq!(wheel.remove(key, |v| v == "payload"), None);
    /// let other = wheel.insert(10, String::from("reuses the node"));
    /// assert_eq!(other, key, "the node is reused");
    /// assert_eq!(wheel.remove(key, |v| v == "payload"), None, "never another entry");
    /// assert_eq!(wheel.len(), 1);
    /// ```
    pub fn remove(&mut self, key: Key, is_entry: impl FnOnce(&T) -> bool) -> Option<T> {
        let (value, links) = self.slab.vacate_if(key.index, is_entry)?;
        self.unlink_links(key.index, links);
        Some(value)
    }

    /// The earliest tick at which [`poll_expired`](Wheel::poll_expired) has work to do, or
    /// `None` when the wheel is empty.
    ///
    /// The answer is never before [`now`](Wheel::now) and never after the earliest deadline in
    /// the wheel, so sleeping until it can never make an entry late. It is **exact** (polling
    /// at it yields an entry) when the earliest entry is due within the aligned 64-tick block
    /// of `now`, and whenever an entry was inserted at or before `now` (the answer is then
    /// `now`).
    /// Otherwise the earliest entries share a coarser slot, and the answer is that slot's first
    /// tick: polling there cascades the slot to finer levels and yields only entries due
    /// exactly then, and the next answer is strictly later and finer. At most 10 such
    /// cascade-only stops precede any yield; at a 1 ms tick a 30 s timer costs about 2. A
    /// driver that sleeps until the answer, polls, then asks again handles both cases alike.
    ///
    /// Why not always exact: the exact minimum of a coarse slot needs a scan of that slot (or an
    /// ordered structure), and timers cancelled in deadline order (RPC timeouts) would make that
    /// scan repeat on every call. A stop at a slot boundary costs a bitmap look-up instead.
    ///
    /// O(1): a zero test per empty level, then one rotate and one `trailing_zeros`; no slot
    /// scan.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// wheel.insert(40, 'a');
    /// assert_eq!(wheel.next_expiration(), Some(40)); // within 64 ticks: exact
    ///
    /// let mut wheel = Wheel::new();
    /// wheel.insert(1000, 'b'); // slot [960, 1024) of level 1
    /// assert_eq!(wheel.next_expiration(), Some(960));
    /// let mut due = Vec::new();
    /// wheel.poll_expired(960, &mut due); // cascades, nothing is due yet
    /// assert!(due.is_empty());
    /// assert_eq!(wheel.next_expiration(), Some(1000));
    /// ```
    #[must_use]
    pub fn next_expiration(&self) -> Option<u64> {
        if !self.due.is_empty() || !self.cascading.is_empty() {
            return Some(self.now);
        }
        // A bounded poll may have left slots behind `now`: they are work for the next poll.
        self.next_slot().map(|(_, _, start)| start.max(self.now))
    }

    /// Advances the wheel to tick `now` and pushes onto `out` the value of every entry whose
    /// deadline is at or before it, and no other.
    ///
    /// A `now` before [`now()`](Wheel::now) is clamped to it: time never goes back (entries
    /// inserted as already due still come out). Entries come out slot by slot, so roughly in
    /// deadline order, in no particular order within a slot. Jumps of any size are cheap: the
    /// wheel hops between non-empty slots with bitmap look-ups and never steps tick by tick.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// for deadline in [3, 30, 300, 3_000_000, u64::MAX] {
    ///     wheel.insert(deadline, deadline);
    /// }
    /// let mut due = Vec::new();
    /// wheel.poll_expired(300, &mut due);
    /// assert_eq!(due, [3, 30, 300]);
    /// wheel.poll_expired(u64::MAX, &mut due);
    /// assert_eq!(due, [3, 30, 300, 3_000_000, u64::MAX]);
    /// assert_eq!(wheel.now(), u64::MAX);
    /// ```
    pub fn poll_expired(&mut self, now: u64, out: &mut Vec<T>) {
        self.poll_expired_bounded(now, usize::MAX, out);
    }

    /// Removes every entry and pushes its value onto `out`, roughly in deadline order; `now` is
    /// kept. Keys to the drained entries name nothing afterwards.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// let key = wheel.insert(10, 'x');
    /// wheel.insert(u64::MAX, 'y');
    /// let mut all = Vec::new();
    /// wheel.drain(&mut all);
    /// assert_eq!(all, ['x', 'y']);
    /// assert!(wheel.is_empty());
    /// assert_eq!(wheel.remove(key, |_| true), None);
    /// ```
    pub fn drain(&mut self, out: &mut Vec<T>) {
        out.reserve(self.len());
        let due = mem::replace(&mut self.due, List::EMPTY);
        self.vacate_list(due, out);
        let cascading = mem::replace(&mut self.cascading, Cascade::NONE);
        self.vacate_list(cascading.list, out);
        self.vacate_list(cascading.back, out);
        for level in 0..NUM_LEVELS {
            for buffer in 0..2 {
                while let Some(slot) = self.levels[level][buffer].next_occupied(0) {
                    let list = self.levels[level][buffer].take_slot(slot);
                    self.vacate_list(list, out);
                }
            }
        }
        self.stage = [NO_STAGE; NUM_LEVELS];
        debug_assert!(self.is_empty());
    }

    /// Gives slab memory back to the allocator after many entries went away: forgets the unused
    /// nodes at the end of the slab and frees the chunks past the last node left. Live keys stay
    /// valid. O(capacity).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// let keys: Vec<_> = (0..10_000).map(|t| wheel.insert(t, t)).collect();
    /// for &key in &keys[10..] {
    ///     wheel.remove(key, |_| true);
    /// }
    /// wheel.shrink_to_fit();
    /// assert!(wheel.capacity() < 100);
    /// assert_eq!(wheel.remove(keys[5], |&v| v == 5), Some(5));
    /// ```
    pub fn shrink_to_fit(&mut self) {
        if self.is_empty() {
            drop(self.slab.take_storage_beyond(0)); // O(1): nothing to keep
        } else {
            self.slab.shrink_to_fit();
        }
    }

    /// An empty wheel's storage past the first `room` entries' room, taken out in O(1) (the
    /// wheel keeps working: it reuses the room it kept, then grows again); `None` if the wheel
    /// holds entries or has no more room than that. Dropping what it returns frees the memory:
    /// a caller under a lock drops it after unlocking.
    ///
    /// The room kept is whole chunks of the wheel's storage (64 entries, then 128, 256 and so
    /// on): as many as fit in `room` entries.
    pub fn take_storage_if_empty(&mut self, room: usize) -> Option<Storage<T>> {
        (self.is_empty() && self.capacity() > room)
            .then(|| Storage(Box::new(self.slab.take_storage_beyond(room))))
    }

    /// Links the occupied node `index`, due at `deadline > now` (so past the cursor), into its
    /// slot.
    #[inline]
    fn link(&mut self, index: u32, deadline: u64) {
        debug_assert!(deadline > self.cursor);
        let level = level_for(self.cursor, deadline);
        let buffer = self.live_buffer(level);
        let base = level_base(level, buffer);
        self.levels[level][buffer].push(&mut self.slab, base, slot_for(deadline, level), index);
    }

    /// Which of `levels[level]` is live.
    fn live_buffer(&self, level: usize) -> usize {
        usize::from(self.live >> level & 1 == 1)
    }

    /// The live lists of `level`.
    fn live_level(&self, level: usize) -> &Level {
        &self.levels[level][self.live_buffer(level)]
    }

    /// Puts the occupied node `index` on the due list.
    fn push_due(&mut self, index: u32) {
        self.slab.push_front(&mut self.due, DUE_LIST, index);
    }

    /// Takes the occupied node `index` out of whichever list holds it: a node inside a list
    /// from its neighbours alone, a list's first node from the list its head mark names.
    fn unlink(&mut self, index: u32) {
        let links = self.slab.links(index);
        self.unlink_links(index, links);
    }

    /// Takes node `index`, whose links are `links` (read before a `vacate_if`, or now), out of
    /// whichever list holds it.
    fn unlink_links(&mut self, index: u32, links: Links) {
        match links.head_of() {
            None => {
                // Not a head: its list is not touched.
                let mut unused = List::EMPTY;
                self.slab.unlink_links(&mut unused, index, links);
            }
            Some(DUE_LIST) => self.slab.unlink_links(&mut self.due, index, links),
            Some(CASCADING_LIST) => self
                .slab
                .unlink_links(&mut self.cascading.list, index, links),
            Some(BACK_LIST) => self
                .slab
                .unlink_links(&mut self.cascading.back, index, links),
            Some(id) => {
                let (level, buffer, slot) = slot_of(id);
                self.levels[level][buffer].unlink_links(&mut self.slab, slot, index, links);
            }
        }
    }

    /// The earliest non-empty slot as `(level, slot, first tick)`. A slot whose entries are
    /// (partly) staged counts as non-empty while the spare holds any of them.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        for level in 0..NUM_LEVELS {
            let occupied = self.live_level(level).occupied() | self.staged_bit(level);
            if occupied == 0 {
                continue;
            }
            let current = slot_for(self.cursor, level);
            let slot = bits::next_occupied(occupied, current)?;
            // Entries at a level are after the cursor's slot there (ground rules): no
            // wrap-around.
            debug_assert!(slot > current, "wheel: entry at or before the current slot");
            return Some((level, slot, bits::slot_start(self.cursor, level, slot)));
        }
        None
    }

    /// Vacates every node of the detached `list`, pushing the values onto `out`.
    fn vacate_list(&mut self, list: List, out: &mut Vec<T>) {
        let mut at = list.head();
        while at != NIL {
            let next = self.slab.next(at);
            out.push(self.slab.vacate(at));
            at = next;
        }
    }
}

impl<T> Default for Wheel<T> {
    /// Same as [`Wheel::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Wheel<T> {
    /// Shows the wheel's position and size, not its values (so `T` need not be `Debug`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wheel")
            .field("now", &self.now)
            .field("len", &self.len())
            .field("next_expiration", &self.next_expiration())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests;

/// The wheel against a reference model, on random operation sequences (proptest).
#[cfg(all(test, not(wheelpool_loom)))]
mod model_tests;

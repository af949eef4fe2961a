//! Staging: cascading a coarse slot *before* its time comes, so that a due entry never waits
//! behind the cascade of its slot's neighbours.
//!
//! When the cursor reaches the first tick of a slot of level `l >= 1`, that slot's entries must
//! be relinked at finer levels before any of them can come out, and they come out in no order.
//! With a fine tick a coarse slot holds many entries (100 000 timers spread over a second put
//! 26 000 in one 262 ms slot at a 1 us tick): cascading them took 0.3-0.8 ms in one go, and the
//! first entries due in the slot waited for all of it. Staging does that work ahead of time, a
//! bounded step at a time, while the wheel has nothing due.
//!
//! # Ground rules
//!
//! - Every level has two lists of slots: the *live* one (where `link` puts entries) and a
//!   *spare*. `stage[l]` names at most one slot `s` of level `l`; [`Wheel::stage_ahead`] moves
//!   that slot's entries into the spare of level `l - 1`, each in the slot of its digit there.
//!   A staged node is in a spare's slot list like any other, so `remove` finds it in O(1).
//! - A slot counts as occupied while its live list or its staged entries are non-empty
//!   (`staged_bit`), so `next_slot` and `next_expiration` see staged entries where they were.
//! - When a poll reaches the staged slot (it is then the earliest: every finer level is empty,
//!   live and staged alike), [`Wheel::unstage`] makes the spare live: the staged entries are
//!   already in the right slots of level `l - 1` counted from the slot's first tick, which is
//!   where the cursor now stands. Except those whose digit at `l - 1` is 0, the cursor's own: they
//!   belong finer still, so the poll cascades them, detached from that slot as they are, along
//!   with the slot's remaining live entries (inserted after the staging began, or not yet
//!   staged), a budget at a time. The flip is O(1); the cascade is 1/64 of the slot on average
//!   instead of the whole slot (all of it when the entries share a deadline on a 64-tick
//!   boundary, but then in bounded steps).
//! - The spare of `l - 1` is only ever filled for `stage[l]`, and is empty whenever it is made
//!   live or `stage[l]` changes slot: staging never mixes two slots' entries.

use super::bits::{self, NUM_LEVELS};
use super::slab::{List, NIL};
use super::{level_base, Level, Wheel, NO_STAGE};

impl<T> Wheel<T> {
    /// Moves at most `budget` entries of coarse slots that start within `horizon` ticks of
    /// [`now`](Wheel::now) to the finer levels they will be cascaded to when their time comes,
    /// and returns how many it moved: fewer than `budget` means nothing is left to stage now.
    /// Does nothing while a bounded poll is unfinished. O(`budget`) plus a bitmap look-up per
    /// level.
    ///
    /// Called with spare budget after a poll, this takes the cascade of a crowded slot off the
    /// moment its first entries come due (see the module docs). The horizon keeps it from
    /// moving entries that will most likely be removed before their slot comes (a 30 s RPC
    /// timeout is usually cancelled within milliseconds).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// for i in 0..1_000u64 {
    ///     wheel.insert(300_000 + i * 97, i); // one slot of level 3
    /// }
    /// while wheel.stage_ahead(100, 1_000_000) > 0 {}
    /// let mut due = Vec::new();
    /// wheel.poll_expired(300_000, &mut due);
    /// assert_eq!(due, [0]);
    /// assert_eq!(wheel.len(), 999);
    /// ```
    pub fn stage_ahead(&mut self, budget: usize, horizon: u64) -> usize {
        self.stage_ahead_from(1, budget, horizon)
    }

    /// [`stage_ahead`](Self::stage_ahead) for the slots of levels `from` and above only (`from`
    /// at least 1): a slot of a low level spans few ticks, so it collects few entries and its
    /// cascade when it comes is short, while staging it would cost each of its entries one more
    /// move (the timer stages from level 2 or 3 up; see `Staging` in `timer/shard.rs`).
    pub fn stage_ahead_from(&mut self, from: usize, budget: usize, horizon: u64) -> usize {
        if !self.due.is_empty() || !self.cascading.is_empty() {
            return 0; // a poll is unfinished: its cascade comes first
        }
        let mut moved = 0;
        for level in from.max(1)..NUM_LEVELS {
            if moved == budget {
                break;
            }
            moved += self.stage_level(level, budget - moved, horizon);
        }
        moved
    }

    /// One level's share of [`stage_ahead`](Self::stage_ahead): picks the level's first slot
    /// if it stages none and that slot starts within `horizon`, then moves up to `budget` of
    /// its live entries to the spare below.
    fn stage_level(&mut self, level: usize, budget: usize, horizon: u64) -> usize {
        let finer = level - 1;
        let live = self.live_buffer(level);
        let spare = 1 - self.live_buffer(finer);
        let mut slot = usize::from(self.stage[level]);
        if self.stage[level] == NO_STAGE
            || (self.levels[level][live].head(slot) == NIL && self.levels[finer][spare].is_empty())
        {
            // Nothing staged (or a stale pick that has since emptied): start on the first slot.
            let current = bits::slot_for(self.cursor, level);
            self.stage[level] = NO_STAGE;
            let Some(first) = self.levels[level][live].next_occupied(current) else {
                return 0;
            };
            if bits::slot_start(self.cursor, level, first) > self.now.saturating_add(horizon) {
                return 0; // not yet: it may well be removed before it comes
            }
            slot = first;
            self.stage[level] = slot as u8;
        }
        let mut moved = 0;
        while moved < budget {
            let index = self.levels[level][live].head(slot);
            if index == NIL {
                break;
            }
            self.levels[level][live].unlink(&mut self.slab, slot, index);
            let deadline = self.slab.deadline(index);
            let to = bits::slot_for(deadline, finer);
            self.levels[finer][spare].push(&mut self.slab, level_base(finer, spare), to, index);
            moved += 1;
        }
        moved
    }

    /// Bit `s` if slot `s` of `level` has staged entries (0 otherwise).
    pub(super) fn staged_bit(&self, level: usize) -> u64 {
        if level == 0 || self.stage[level] == NO_STAGE || self.spare_level(level - 1).is_empty() {
            return 0;
        }
        1 << self.stage[level]
    }

    /// The spare lists of `level`.
    fn spare_level(&self, level: usize) -> &Level {
        &self.levels[level][1 - self.live_buffer(level)]
    }

    /// A poll reached `slot` of `level`, the earliest slot, with the cursor at its first tick:
    /// if that slot is staged, the spare below becomes live, and the entries staged in its slot
    /// 0 (the cursor's own there) are returned, detached, for the poll to cascade with the slot
    /// a budget at a time (`Cascade::back`; see the module docs). O(1): relinking them here
    /// would be the whole slot in one step when its entries share a deadline.
    pub(super) fn unstage(&mut self, level: usize, slot: usize) -> List {
        if level == 0 || usize::from(self.stage[level]) != slot {
            return List::EMPTY;
        }
        self.stage[level] = NO_STAGE;
        let finer = level - 1;
        if self.spare_level(finer).is_empty() {
            return List::EMPTY;
        }
        debug_assert!(
            self.live_level(finer).is_empty(),
            "a finer level was not empty"
        );
        self.live ^= 1 << finer;
        // The finer level's own pick referred to the old live lists (its spare is empty: the
        // level was empty, staged entries included, or this slot would not be the earliest).
        self.stage[finer] = NO_STAGE;
        let buffer = self.live_buffer(finer);
        debug_assert_eq!(bits::slot_for(self.cursor, finer), 0);
        self.levels[finer][buffer].take_slot(0)
    }
}

//! Polling in bounded steps, and scans over the entries.
//!
//! A poll that meets a million entries in one slot (a storm of equal deadlines) must not do a
//! million moves in one go: its caller holds a lock and other threads wait for it. So
//! [`Wheel::poll_expired_bounded`] does at most `budget` moves (an entry out, or an entry
//! cascaded one level down) and then stops where it is. The wheel stays consistent between
//! steps, and every method may be called there:
//!
//! - `now` is already the target of the poll, so an insert at or before it goes to the due list
//!   and is never yielded late.
//! - `cursor` is where slot positions are counted from. It trails `now` while a poll is
//!   unfinished: the slot being cascaded starts at `cursor`, and the slots behind `now` that
//!   the poll has not reached yet are still linked relative to `cursor`, exactly as before.
//! - The slot being cascaded is detached from its level (its bitmap bit is clear) and kept in
//!   `cascading`; its head is marked as that list's, so `remove` finds its entries there. No
//!   other entry can be linked at that level and slot while the cursor stands at the slot's
//!   first tick (a later deadline inside the slot lands on a finer level).
//! - A staged slot's entries sent back by the flip (`stage.rs`) wait in `cascading.back` and are
//!   cascaded first, within the same budget.
//! - [`Wheel::next_expiration`] answers `now` while a poll is unfinished: there is more to do.

use super::{Cascade, Wheel, BACK_LIST, CASCADING_LIST};

impl<T> Wheel<T> {
    /// Like [`poll_expired`](Wheel::poll_expired), but does at most `budget` units of work
    /// (an entry handed out, or an entry moved to a finer level) and returns whether the poll
    /// finished: `false` means entries due by `now` may still be in the wheel, and the next call
    /// (with the same or a later `now`) goes on where this one stopped.
    ///
    /// This bounds the time a caller holding a lock spends in one call, whatever the wheel
    /// holds: a million entries due at the same tick come out `budget` at a time. Between calls
    /// the wheel is fully usable: inserts, removes and [`next_expiration`](Wheel::next_expiration)
    /// (which answers [`now`](Wheel::now) until the poll has finished).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// for i in 0..10 {
    ///     wheel.insert(5_000, i); // ten entries in one coarse slot
    /// }
    /// let mut due = Vec::new();
    /// let mut calls = 1;
    /// while !wheel.poll_expired_bounded(5_000, 3, &mut due) {
    ///     assert!(due.len() <= 3 * calls);
    ///     assert_eq!(wheel.next_expiration(), Some(5_000), "more to do now");
    ///     calls += 1;
    /// }
    /// assert_eq!(due.len(), 10);
    /// assert!(calls >= 4);
    /// assert!(wheel.is_empty());
    /// ```
    pub fn poll_expired_bounded(&mut self, now: u64, budget: usize, out: &mut Vec<T>) -> bool {
        self.now = self.now.max(now);
        let target = self.now;
        let mut budget = budget;
        loop {
            while !self.due.is_empty() {
                if budget == 0 {
                    return false;
                }
                budget -= 1;
                let index = self.due.head();
                self.slab.unlink(&mut self.due, index);
                out.push(self.slab.vacate(index));
            }
            while !self.cascading.is_empty() {
                if budget == 0 {
                    return false;
                }
                budget -= 1;
                let cascading = &mut self.cascading;
                let list = if cascading.back.is_empty() {
                    &mut cascading.list
                } else {
                    &mut cascading.back
                };
                let index = list.head();
                self.slab.unlink(list, index);
                let deadline = self.slab.deadline(index);
                if deadline <= target {
                    out.push(self.slab.vacate(index));
                } else {
                    // Strictly finer than the slot it came from: it shares that slot's digits.
                    self.link(index, deadline);
                }
            }
            match self.next_slot() {
                Some((level, slot, start)) if start <= target => {
                    // Nothing is due before `start`, so the cursor may stand there.
                    self.cursor = start;
                    let back = self.unstage(level, slot);
                    let buffer = self.live_buffer(level);
                    let list = self.levels[level][buffer].take_slot(slot);
                    // The two lists are known by new ids now (see `Wheel::unlink`).
                    self.slab.mark_head(list, CASCADING_LIST);
                    self.slab.mark_head(back, BACK_LIST);
                    self.cascading = Cascade {
                        list,
                        level,
                        slot,
                        back,
                    };
                }
                _ => break,
            }
        }
        self.cascading = Cascade::NONE;
        // Every entry left sits in a slot that starts after `target`, inside the blocks of
        // `target` too, so it is still at the right level and slot counted from `target`.
        self.cursor = target;
        true
    }

    /// Removes the entries picked by `pick` among the slab positions `from .. from + budget`,
    /// pushing their values onto `out`; returns the position to continue from, or `None` once
    /// the scan has passed the last entry. O(`budget`) per call, so a scan of a large wheel can
    /// be cut into steps (entries inserted meanwhile may or may not be visited).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// for i in 0..100u64 {
    ///     wheel.insert(1_000 + i, i);
    /// }
    /// let mut odd = Vec::new();
    /// let mut from = Some(0);
    /// while let Some(at) = from {
    ///     from = wheel.extract_some(at, 16, |&v| v % 2 == 1, &mut odd);
    /// }
    /// assert_eq!(odd.len(), 50);
    /// assert_eq!(wheel.len(), 50);
    /// let mut rest = Vec::new();
    /// wheel.poll_expired(u64::MAX, &mut rest);
    /// assert!(rest.iter().all(|v| v % 2 == 0));
    /// ```
    pub fn extract_some(
        &mut self,
        from: usize,
        budget: usize,
        mut pick: impl FnMut(&T) -> bool,
        out: &mut Vec<T>,
    ) -> Option<usize> {
        let end = from.saturating_add(budget).min(self.slab.node_count());
        for index in from..end {
            let index = index as u32; // the slab holds fewer than u32::MAX nodes
            if self.slab.value(index).is_some_and(&mut pick) {
                self.unlink(index);
                out.push(self.slab.vacate(index));
            }
        }
        (end < self.slab.node_count()).then_some(end)
    }

    /// Checks the ground rules of the module docs (tests only).
    #[cfg(all(test, not(wheelpool_loom)))]
    pub(super) fn check_cascade_rules(&self) {
        assert!(self.cursor <= self.now);
        if !self.cascading.back.is_empty() {
            let finer = self.cascading.level - 1;
            assert!(
                !self.live_level(finer).is_occupied(0),
                "sent-back slot still linked"
            );
            assert_eq!(super::bits::slot_for(self.cursor, finer), 0);
        }
        if !self.cascading.list.is_empty() {
            let (level, slot) = (self.cascading.level, self.cascading.slot);
            assert!(
                !self.live_level(level).is_occupied(slot),
                "cascading slot still linked"
            );
            assert_eq!(super::bits::slot_for(self.cursor, level), slot);
        }
    }
}

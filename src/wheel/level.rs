//! One level of the wheel: 64 slot lists and the bitmap saying which of them are non-empty.
//!
//! Ground rule: bit `s` of `occupied` is set exactly when `slots[s]` is non-empty. Every change to
//! a slot list goes through this type so the two never disagree.

use super::bits::{self, SLOTS};
use super::slab::{Links, List, Slab};

/// One level: 64 slots, each the head of an intrusive list of slab nodes.
pub(super) struct Level {
    /// Bit `s` set when `slots[s]` has at least one node.
    occupied: u64,
    /// The slot lists.
    slots: [List; SLOTS],
}

impl Level {
    /// A level with every slot empty.
    pub(super) const EMPTY: Level = Level {
        occupied: 0,
        slots: [List::EMPTY; SLOTS],
    };

    /// Whether no slot holds a node.
    pub(super) fn is_empty(&self) -> bool {
        self.occupied == 0
    }

    /// The bitmap of non-empty slots.
    pub(super) fn occupied(&self) -> u64 {
        self.occupied
    }

    /// The first node of `slot`, or `NIL`.
    pub(super) fn head(&self, slot: usize) -> u32 {
        self.slots[slot].head()
    }

    /// Puts node `index` in `slot`; `base` is the list id of this level's slot 0 (the wheel's
    /// numbering of its lists). O(1).
    pub(super) fn push<T>(&mut self, slab: &mut Slab<T>, base: u32, slot: usize, index: u32) {
        slab.push_front(&mut self.slots[slot], base + slot as u32, index);
        self.occupied |= 1 << slot;
    }

    /// Takes node `index` out of `slot`, which must hold it. O(1).
    pub(super) fn unlink<T>(&mut self, slab: &mut Slab<T>, slot: usize, index: u32) {
        let links = slab.links(index);
        self.unlink_links(slab, slot, index, links);
    }

    /// Takes node `index`, whose links are `links` (see [`Slab::unlink_links`]), out of `slot`,
    /// which must hold it. O(1).
    pub(super) fn unlink_links<T>(
        &mut self,
        slab: &mut Slab<T>,
        slot: usize,
        index: u32,
        links: Links,
    ) {
        slab.unlink_links(&mut self.slots[slot], index, links);
        self.emptied(slot);
    }

    /// Clears the occupancy bit of `slot` if its list is empty now.
    fn emptied(&mut self, slot: usize) {
        if self.slots[slot].is_empty() {
            self.occupied &= !(1 << slot);
        }
    }

    /// Detaches the whole list of `slot` and returns it; the slot is empty afterwards. The nodes
    /// keep their links, so the caller can walk the returned list while relinking each node.
    pub(super) fn take_slot(&mut self, slot: usize) -> List {
        self.occupied &= !(1 << slot);
        std::mem::replace(&mut self.slots[slot], List::EMPTY)
    }

    /// The first non-empty slot at or after `from` (wrapping), if any.
    pub(super) fn next_occupied(&self, from: usize) -> Option<usize> {
        bits::next_occupied(self.occupied, from)
    }

    /// The list of `slot`, for invariant checks in tests.
    #[cfg(all(test, not(wheelpool_loom)))]
    pub(super) fn slot(&self, slot: usize) -> List {
        self.slots[slot]
    }

    /// Whether the bitmap marks `slot` non-empty, for invariant checks in tests.
    #[cfg(all(test, not(wheelpool_loom)))]
    pub(super) fn is_occupied(&self, slot: usize) -> bool {
        self.occupied & (1 << slot) != 0
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn bitmap_follows_the_slot_lists() {
        let mut slab = Slab::with_capacity(3);
        let mut level = Level::EMPTY;
        assert!(level.is_empty());
        assert_eq!(level.next_occupied(0), None);
        let a = slab.insert(0, ());
        let b = slab.insert(0, ());
        let c = slab.insert(0, ());
        level.push(&mut slab, 0, 9, a);
        level.push(&mut slab, 0, 9, b);
        level.push(&mut slab, 0, 40, c);
        assert_eq!(level.occupied, (1 << 9) | (1 << 40));
        assert_eq!(level.next_occupied(0), Some(9));
        assert_eq!(level.next_occupied(10), Some(40));
        assert_eq!(level.next_occupied(41), Some(9), "wraps");
        level.unlink(&mut slab, 9, a);
        assert_eq!(level.occupied, (1 << 9) | (1 << 40), "slot 9 still holds b");
        level.unlink(&mut slab, 9, b);
        assert_eq!(level.occupied, 1 << 40);
        let list = level.take_slot(40);
        assert_eq!(list.head(), c);
        assert!(level.is_empty());
        assert!(level.slots.iter().all(|l| l.is_empty()));
    }
}

//! Slab storage for wheel entries and the intrusive doubly linked lists threaded through it.
//!
//! Ground rules:
//! - Every entry is one [`Node`] in one `Vec`; lists link nodes by `u32` index, so there are no
//!   pointers, no `unsafe` and no allocation per entry. [`NIL`] (`u32::MAX`) is "no node".
//! - A node is *occupied* while `value` is `Some`. It is then in exactly one [`List`]; the node
//!   records which (its `place`, set by the wheel), so it can be unlinked in O(1).
//! - A *vacant* node is on the free list, linked through `next`; its back link is unused.
//!   Freeing a node drops nothing itself: the value is moved out to the caller, who drops it at
//!   once or keeps it.
//! - An index names a node, not an entry: once an entry leaves, its index may be given to the
//!   next one. Whoever keeps an index past its entry's life tells its entry from a newer one
//!   by the value (the wheel's `remove` asks it to), so a node keeps no generation.
//! - The back link and the place share one `u32`: the previous node's index in the low
//!   [`INDEX_BITS`] bits, the place in the high ones. So a slab holds at most [`MAX_NODES`]
//!   nodes, and a node is 16 bytes plus `Option<T>`.

use std::mem;

/// "No node": the end of a list, or an empty list.
pub(super) const NIL: u32 = u32::MAX;

/// Bits of a node's back link that hold the previous node's index.
const INDEX_BITS: u32 = 27;

/// The back link's "no previous node" (the node heads its list).
const NO_PREV: u32 = (1 << INDEX_BITS) - 1;

/// The most nodes one slab holds: indices run below [`NO_PREV`]. 134 million entries in one
/// wheel, some 4 GB of nodes alone at 32 bytes each.
pub(super) const MAX_NODES: usize = NO_PREV as usize;

/// The largest place a node can record (the high bits of its back link).
pub(super) const MAX_PLACE: u8 = (u32::MAX >> INDEX_BITS) as u8;

/// One entry's storage: a deadline and two links (16 bytes) plus `Option<T>`, rounded up to 8.
/// That is 24 bytes for `T = ()` or a thin pointer with a niche (`Arc<T>`, `Box<T>`), 32 for a
/// fat one (`Arc<dyn Trait>`); see the size test below.
pub(super) struct Node<T> {
    /// Absolute tick at which the entry is due.
    deadline: u64,
    /// The previous node in this node's list ([`NO_PREV`] at the head) in the low
    /// [`INDEX_BITS`] bits; the place (which list holds the node, set by the wheel) above them.
    back: u32,
    /// Next node in this node's list (or in the free list when vacant), or [`NIL`].
    next: u32,
    /// `Some` exactly while the node is occupied.
    value: Option<T>,
}

impl<T> Node<T> {
    /// The previous node in the list, or [`NIL`] at its head.
    fn prev(&self) -> u32 {
        match self.back & NO_PREV {
            NO_PREV => NIL,
            prev => prev,
        }
    }

    /// Sets the previous node ([`NIL`]: none), keeping the place.
    fn set_prev(&mut self, prev: u32) {
        let prev = if prev == NIL { NO_PREV } else { prev };
        self.back = (self.back & !NO_PREV) | prev;
    }

    fn place(&self) -> u8 {
        (self.back >> INDEX_BITS) as u8
    }
}

/// The head of an intrusive list of slab nodes.
///
/// A list never owns nodes: it is a cursor into the slab. Order inside a list carries no meaning
/// (the wheel keeps no order within a slot), so nodes are pushed at the front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct List {
    head: u32,
}

impl List {
    /// A list with no nodes.
    pub(super) const EMPTY: List = List { head: NIL };

    /// Whether the list has no nodes.
    pub(super) fn is_empty(self) -> bool {
        self.head == NIL
    }

    /// The first node, or [`NIL`].
    pub(super) fn head(self) -> u32 {
        self.head
    }
}

/// Every node of the wheel, occupied or vacant.
pub(super) struct Slab<T> {
    nodes: Vec<Node<T>>,
    /// Head of the free list of vacant nodes.
    free: u32,
    /// Number of occupied nodes.
    len: usize,
}

impl<T> Slab<T> {
    /// An empty slab with room for `capacity` nodes before it reallocates.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Slab {
            nodes: Vec::with_capacity(capacity),
            free: NIL,
            len: 0,
        }
    }

    /// Number of occupied nodes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Number of nodes the slab can hold without reallocating.
    pub(super) fn capacity(&self) -> usize {
        self.nodes.capacity()
    }

    /// Stores `value` in a vacant node (reusing the free list first) and returns its index.
    /// The node is in no list yet.
    ///
    /// Panics if the slab already holds [`MAX_NODES`] nodes.
    #[inline]
    pub(super) fn insert(&mut self, deadline: u64, value: T) -> u32 {
        let index = if self.free != NIL {
            let index = self.free;
            let node = &mut self.nodes[index as usize];
            self.free = node.next;
            node.deadline = deadline;
            node.back = NO_PREV;
            node.next = NIL;
            node.value = Some(value);
            index
        } else {
            self.push_node(deadline, value)
        };
        self.len += 1;
        index
    }

    /// The index the next [`Slab::insert`] will return.
    pub(super) fn vacant(&self) -> u32 {
        if self.free != NIL {
            self.free
        } else {
            // `push_node`'s index (it panics past `MAX_NODES` nodes).
            self.nodes.len() as u32
        }
    }

    /// Appends a new node; the slow path of [`Slab::insert`] once the free list is empty.
    #[cold]
    fn push_node(&mut self, deadline: u64, value: T) -> u32 {
        let index = self.nodes.len();
        assert!(
            index < MAX_NODES,
            "wheel: more than {MAX_NODES} entries in one wheel"
        );
        self.nodes.push(Node {
            deadline,
            back: NO_PREV,
            next: NIL,
            value: Some(value),
        });
        index as u32
    }

    /// The deadline of node `index` if it is occupied by a value `is_entry` recognises.
    pub(super) fn live_deadline(
        &self,
        index: u32,
        is_entry: impl FnOnce(&T) -> bool,
    ) -> Option<u64> {
        let node = self.nodes.get(index as usize)?;
        node.value
            .as_ref()
            .is_some_and(is_entry)
            .then_some(node.deadline)
    }

    /// The deadline of node `index`.
    pub(super) fn deadline(&self, index: u32) -> u64 {
        self.nodes[index as usize].deadline
    }

    /// Which list holds node `index` (see [`Node::back`]).
    pub(super) fn place(&self, index: u32) -> u8 {
        self.nodes[index as usize].place()
    }

    /// Records which list holds node `index`; at most [`MAX_PLACE`].
    pub(super) fn set_place(&mut self, index: u32, place: u8) {
        debug_assert!(place <= MAX_PLACE);
        let node = &mut self.nodes[index as usize];
        node.back = (node.back & NO_PREV) | u32::from(place) << INDEX_BITS;
    }

    /// The value of node `index` if it is occupied (for scans over the slab).
    pub(super) fn value(&self, index: u32) -> Option<&T> {
        self.nodes.get(index as usize)?.value.as_ref()
    }

    /// Number of nodes, occupied or vacant: the range of indices a scan covers.
    pub(super) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Forgets every node and releases the storage, in O(1) plus the allocator's free. Only for
    /// an empty slab.
    pub(super) fn release(&mut self) {
        debug_assert_eq!(self.len, 0);
        self.nodes = Vec::new();
        self.free = NIL;
    }

    /// The node after `index` in its list.
    pub(super) fn next(&self, index: u32) -> u32 {
        self.nodes[index as usize].next
    }

    /// Vacates the occupied node `index` and hands its value back. The node must already be
    /// unlinked from (or detached with) its list: its `next` now links the free list.
    pub(super) fn vacate(&mut self, index: u32) -> T {
        let node = &mut self.nodes[index as usize];
        let value = node.value.take().expect("wheel: vacating a vacant node");
        node.next = self.free;
        self.free = index;
        self.len -= 1;
        value
    }

    /// Pushes the occupied node `index` at the front of `list`.
    pub(super) fn push_front(&mut self, list: &mut List, index: u32) {
        let old_head = list.head;
        if old_head != NIL {
            self.nodes[old_head as usize].set_prev(index);
        }
        let node = &mut self.nodes[index as usize];
        node.set_prev(NIL);
        node.next = old_head;
        list.head = index;
    }

    /// Unlinks node `index` from `list`, which must be the list it is in. O(1).
    pub(super) fn unlink(&mut self, list: &mut List, index: u32) {
        let node = &self.nodes[index as usize];
        let (prev, next) = (node.prev(), node.next);
        if prev == NIL {
            debug_assert_eq!(list.head, index, "wheel: unlinking from the wrong list");
            list.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next != NIL {
            self.nodes[next as usize].set_prev(prev);
        }
    }

    /// Gives memory back: drops trailing vacant nodes, shrinks the allocation to fit and rebuilds
    /// the free list so the lowest indices are reused first. O(capacity).
    pub(super) fn shrink_to_fit(&mut self) {
        while let Some(last) = self.nodes.last() {
            if last.value.is_some() {
                break;
            }
            self.nodes.pop();
        }
        self.nodes.shrink_to_fit();
        self.free = NIL;
        for (index, node) in self.nodes.iter_mut().enumerate().rev() {
            if node.value.is_none() {
                node.next = self.free;
                self.free = index as u32;
            }
        }
    }

    /// Bytes of slab storage one entry takes, value included.
    pub(super) const NODE_SIZE: usize = mem::size_of::<Node<T>>();
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    fn collect<T>(slab: &Slab<T>, list: List) -> Vec<u32> {
        let mut out = Vec::new();
        let mut at = list.head();
        while at != NIL {
            out.push(at);
            at = slab.next(at);
        }
        out
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn node_size_without_value_is_small() {
        // 8 (deadline) + 2 * 4 (links, the place in the back link) + Option<()> tag, padded.
        assert_eq!(Slab::<()>::NODE_SIZE, 24);
        // A thin pointer with a niche (Arc, Box) fills those 8 bytes.
        assert_eq!(Slab::<Box<u8>>::NODE_SIZE, 24);
        assert_eq!(Slab::<std::sync::Arc<u8>>::NODE_SIZE, 24);
        // A fat one (a pool's `Arc<dyn RawTask>`) takes 8 more.
        assert_eq!(Slab::<std::sync::Arc<dyn Send>>::NODE_SIZE, 32);
        // A value without a niche pays for `Option`'s tag: u32 + tag fill 8 bytes.
        assert_eq!(Slab::<u32>::NODE_SIZE, 24);
    }

    #[test]
    fn insert_reuses_freed_nodes_and_values_tell_entries_apart() {
        let mut slab = Slab::with_capacity(0);
        let a = slab.insert(5, "a");
        let b = slab.insert(6, "b");
        assert_eq!((a, b), (0, 1));
        assert_eq!(slab.len(), 2);
        assert_eq!(slab.vacate(a), "a");
        assert_eq!(slab.live_deadline(a, |_| true), None, "vacant");
        let c = slab.insert(7, "c");
        assert_eq!(c, a, "the free node is reused");
        assert_eq!(slab.live_deadline(c, |v| *v == "c"), Some(7));
        assert_eq!(slab.live_deadline(c, |v| *v == "a"), None, "another entry");
        assert_eq!(slab.live_deadline(99, |_| true), None, "out of range");
        assert_eq!(slab.len(), 2);
    }

    #[test]
    fn the_place_and_the_back_link_share_a_word_without_mixing() {
        let mut slab = Slab::with_capacity(3);
        let mut list = List::EMPTY;
        let ids: Vec<u32> = (0..3).map(|i| slab.insert(i, i)).collect();
        for (&id, place) in ids.iter().zip([0, 17, MAX_PLACE]) {
            slab.set_place(id, place);
            slab.push_front(&mut list, id);
        }
        assert_eq!(collect(&slab, list), [2, 1, 0]);
        assert_eq!(
            ids.iter().map(|&id| slab.place(id)).collect::<Vec<_>>(),
            [0, 17, MAX_PLACE],
            "linking keeps the places"
        );
        slab.set_place(1, 3);
        slab.unlink(&mut list, 1);
        assert_eq!(
            collect(&slab, list),
            [2, 0],
            "a place change keeps the links"
        );
        slab.unlink(&mut list, 2);
        assert_eq!(collect(&slab, list), [0]);
        assert_eq!(slab.place(0), 0);
        assert_eq!(slab.place(2), MAX_PLACE);
    }

    #[test]
    fn lists_push_and_unlink_anywhere() {
        let mut slab = Slab::with_capacity(4);
        let mut list = List::EMPTY;
        let ids: Vec<u32> = (0..4).map(|i| slab.insert(i, i)).collect();
        for &id in &ids {
            slab.push_front(&mut list, id);
        }
        assert_eq!(collect(&slab, list), [3, 2, 1, 0]);
        slab.unlink(&mut list, 2); // middle
        assert_eq!(collect(&slab, list), [3, 1, 0]);
        slab.unlink(&mut list, 3); // head
        assert_eq!(collect(&slab, list), [1, 0]);
        slab.unlink(&mut list, 0); // tail
        assert_eq!(collect(&slab, list), [1]);
        slab.unlink(&mut list, 1); // last one
        assert!(list.is_empty());
        // Relinking after unlinking works, in another list too.
        let mut other = List::EMPTY;
        slab.push_front(&mut other, 2);
        slab.push_front(&mut other, 0);
        assert_eq!(collect(&slab, other), [0, 2]);
    }

    #[test]
    fn shrink_to_fit_truncates_and_reuses_the_lowest_holes_first() {
        let mut slab = Slab::with_capacity(0);
        let keys: Vec<u32> = (0..1000).map(|i| slab.insert(i, i)).collect();
        for &index in &keys[10..] {
            slab.vacate(index);
        }
        slab.vacate(keys[3]); // a hole below the live tail
        slab.shrink_to_fit();
        assert_eq!(slab.len(), 9);
        assert!(slab.capacity() < 1000);
        assert_eq!(slab.node_count(), 10);
        // The hole is reused first, then the slab grows back.
        assert_eq!(slab.insert(0, 5000), 3);
        assert_eq!(slab.insert(0, 5001), 10);
        assert_eq!(slab.live_deadline(keys[4], |v| *v == 4), Some(4));
        assert_eq!(slab.live_deadline(keys[3], |v| *v == 3), None);
    }

    #[test]
    fn vacating_hands_the_value_back_without_dropping_it() {
        let shared = std::rc::Rc::new(());
        let mut slab = Slab::with_capacity(1);
        let index = slab.insert(1, shared.clone());
        assert_eq!(std::rc::Rc::strong_count(&shared), 2);
        let value = slab.vacate(index);
        assert_eq!(std::rc::Rc::strong_count(&shared), 2);
        drop(value);
        assert_eq!(
            std::rc::Rc::strong_count(&shared),
            1,
            "the slab keeps no copy"
        );
    }
}

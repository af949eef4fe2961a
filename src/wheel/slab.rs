//! Slab storage for wheel entries and the intrusive doubly linked lists threaded through it.
//!
//! Ground rules:
//! - Every entry is one [`Node`] in one `Vec`; lists link nodes by `u32` index, so there are no
//!   pointers, no `unsafe` and no allocation per entry. [`NIL`] (`u32::MAX`) is "no node", which is
//!   why the slab holds at most `u32::MAX - 1` nodes.
//! - A node is *occupied* while `value` is `Some`. It is then in exactly one [`List`], whose
//!   owner (a wheel slot or the due list) is known from its deadline, so a node need not store it.
//! - A *vacant* node is on the free list, linked through `next`; `prev` is unused. Freeing a node
//!   drops nothing itself: the value is moved out to the caller, who drops it at once or keeps it.
//! - `generation` changes every time a node is vacated, so a key (index + generation) taken
//!   before names nothing afterwards. Generations are never 0, which keeps `Key::to_u64() != 0`.
//!   A stale key could only match again after 2^32 - 1 reuses of the same node.

use std::mem;

/// "No node": the end of a list, or an empty list.
pub(super) const NIL: u32 = u32::MAX;

/// One entry's storage: 21 bytes of bookkeeping plus `Option<T>`, rounded up to 8. That is 24
/// bytes for `T = ()` and 32 for a pointer-sized `T` with a niche (`Arc`, `Box`); see the size
/// test below.
pub(super) struct Node<T> {
    /// Absolute tick at which the entry is due.
    deadline: u64,
    /// Which list holds the node: the wheel level it was linked at, or the wheel's own marker
    /// for its due list. Set by the wheel; it fills padding, so it costs no byte.
    place: u8,
    /// Previous node in this node's list, or [`NIL`] at the head.
    prev: u32,
    /// Next node in this node's list (or in the free list when vacant), or [`NIL`].
    next: u32,
    /// Bumped whenever the node is vacated; keys carry the value they were issued with.
    generation: u32,
    /// `Some` exactly while the node is occupied.
    value: Option<T>,
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
    /// Generation given to nodes created from now on; stays above every generation a truncated
    /// node had, so keys to truncated nodes stay stale when the slab grows back.
    fresh_generation: u32,
    /// The highest generation any node has had, so `release` can keep old keys stale.
    max_generation: u32,
}

impl<T> Slab<T> {
    /// An empty slab with room for `capacity` nodes before it reallocates.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Slab {
            nodes: Vec::with_capacity(capacity),
            free: NIL,
            len: 0,
            fresh_generation: 1,
            max_generation: 1,
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

    /// Stores `value` in a vacant node (reusing the free list first) and returns its index and
    /// generation. The node is in no list yet.
    ///
    /// Panics if the slab already holds `u32::MAX - 1` nodes.
    #[inline]
    pub(super) fn insert(&mut self, deadline: u64, value: T) -> (u32, u32) {
        let index = if self.free != NIL {
            let index = self.free;
            let node = &mut self.nodes[index as usize];
            self.free = node.next;
            node.deadline = deadline;
            node.place = 0;
            node.prev = NIL;
            node.next = NIL;
            node.value = Some(value);
            index
        } else {
            self.push_node(deadline, value)
        };
        self.len += 1;
        (index, self.nodes[index as usize].generation)
    }

    /// The index and generation the next [`Slab::insert`] will return.
    pub(super) fn vacant(&self) -> (u32, u32) {
        if self.free != NIL {
            (self.free, self.nodes[self.free as usize].generation)
        } else {
            // `push_node`'s index and generation (it panics past `NIL - 1` nodes).
            (self.nodes.len() as u32, self.fresh_generation)
        }
    }

    /// Appends a new node; the slow path of [`Slab::insert`] once the free list is empty.
    #[cold]
    fn push_node(&mut self, deadline: u64, value: T) -> u32 {
        let index = self.nodes.len();
        assert!(
            index < NIL as usize,
            "wheel: more than u32::MAX - 1 entries"
        );
        self.max_generation = self.max_generation.max(self.fresh_generation);
        self.nodes.push(Node {
            deadline,
            place: 0,
            prev: NIL,
            next: NIL,
            generation: self.fresh_generation,
            value: Some(value),
        });
        index as u32
    }

    /// The deadline of the occupied node `index` if `generation` is still its generation.
    pub(super) fn live_deadline(&self, index: u32, generation: u32) -> Option<u64> {
        let node = self.nodes.get(index as usize)?;
        (node.value.is_some() && node.generation == generation).then_some(node.deadline)
    }

    /// The deadline of node `index`.
    pub(super) fn deadline(&self, index: u32) -> u64 {
        self.nodes[index as usize].deadline
    }

    /// Which list holds node `index` (see [`Node::place`]).
    pub(super) fn place(&self, index: u32) -> u8 {
        self.nodes[index as usize].place
    }

    /// Records which list holds node `index`.
    pub(super) fn set_place(&mut self, index: u32, place: u8) {
        self.nodes[index as usize].place = place;
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
    /// an empty slab. Keys issued before stay stale: indices past the new end are refused, and
    /// reused ones get generations above every one issued so far.
    pub(super) fn release(&mut self) {
        debug_assert_eq!(self.len, 0);
        self.fresh_generation = bump(self.max_generation);
        self.max_generation = self.fresh_generation;
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
        node.generation = bump(node.generation);
        self.max_generation = self.max_generation.max(node.generation);
        node.next = self.free;
        self.free = index;
        self.len -= 1;
        value
    }

    /// Pushes the occupied node `index` at the front of `list`.
    pub(super) fn push_front(&mut self, list: &mut List, index: u32) {
        let old_head = list.head;
        if old_head != NIL {
            self.nodes[old_head as usize].prev = index;
        }
        let node = &mut self.nodes[index as usize];
        node.prev = NIL;
        node.next = old_head;
        list.head = index;
    }

    /// Unlinks node `index` from `list`, which must be the list it is in. O(1).
    pub(super) fn unlink(&mut self, list: &mut List, index: u32) {
        let Node { prev, next, .. } = self.nodes[index as usize];
        if prev == NIL {
            debug_assert_eq!(list.head, index, "wheel: unlinking from the wrong list");
            list.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        }
    }

    /// Gives memory back: drops trailing vacant nodes, shrinks the allocation to fit and rebuilds
    /// the free list so the lowest indices are reused first. O(capacity).
    pub(super) fn shrink_to_fit(&mut self) {
        while let Some(last) = self.nodes.last() {
            if last.value.is_some() {
                break;
            }
            self.fresh_generation = self.fresh_generation.max(last.generation);
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

/// The generation after `generation`, skipping 0.
fn bump(generation: u32) -> u32 {
    match generation.wrapping_add(1) {
        0 => 1,
        next => next,
    }
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
        // 8 (deadline) + 3 * 4 (links, generation) + place + Option<()> tag, padded to 8.
        assert_eq!(Slab::<()>::NODE_SIZE, 24);
        // A pointer-sized value with a niche (Arc, Box) fits in 8 more bytes.
        assert_eq!(Slab::<Box<u8>>::NODE_SIZE, 32);
        assert_eq!(Slab::<std::sync::Arc<u8>>::NODE_SIZE, 32);
        // A value without a niche pays for `Option`'s tag: u32 + tag fill 8 bytes.
        assert_eq!(Slab::<u32>::NODE_SIZE, 32);
    }

    #[test]
    fn insert_reuses_freed_nodes_with_a_new_generation() {
        let mut slab = Slab::with_capacity(0);
        let (a, ga) = slab.insert(5, "a");
        let (b, _) = slab.insert(6, "b");
        assert_eq!((a, b), (0, 1));
        assert_eq!(slab.len(), 2);
        assert_eq!(slab.vacate(a), "a");
        assert_eq!(slab.live_deadline(a, ga), None);
        let (c, gc) = slab.insert(7, "c");
        assert_eq!(c, a, "the free node is reused");
        assert_ne!(gc, ga);
        assert_eq!(slab.live_deadline(c, gc), Some(7));
        assert_eq!(slab.live_deadline(c, ga), None, "stale generation");
        assert_eq!(slab.live_deadline(99, gc), None, "out of range");
        assert_eq!(slab.len(), 2);
    }

    #[test]
    fn generations_are_never_zero() {
        assert_eq!(bump(1), 2);
        assert_eq!(bump(u32::MAX), 1);
        let mut slab = Slab::with_capacity(1);
        for i in 0..100 {
            let (index, generation) = slab.insert(i, ());
            assert_ne!(generation, 0);
            slab.vacate(index);
        }
    }

    #[test]
    fn lists_push_and_unlink_anywhere() {
        let mut slab = Slab::with_capacity(4);
        let mut list = List::EMPTY;
        let ids: Vec<u32> = (0..4).map(|i| slab.insert(i, i).0).collect();
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
    fn shrink_to_fit_truncates_and_keeps_old_keys_stale() {
        let mut slab = Slab::with_capacity(0);
        let keys: Vec<(u32, u32)> = (0..1000).map(|i| slab.insert(i, i)).collect();
        for &(index, _) in &keys[10..] {
            slab.vacate(index);
        }
        slab.vacate(keys[3].0); // a hole below the live tail
        slab.shrink_to_fit();
        assert_eq!(slab.len(), 9);
        assert!(slab.capacity() < 1000);
        // The hole is reused first, then the slab grows back past the old keys' indices.
        assert_eq!(slab.insert(0, 0).0, 3);
        for _ in 0..1000 {
            slab.insert(0, 0);
        }
        for &(index, generation) in &keys[10..] {
            assert_eq!(slab.live_deadline(index, generation), None);
        }
        assert_eq!(slab.live_deadline(keys[3].0, keys[3].1), None);
        assert_eq!(slab.live_deadline(keys[4].0, keys[4].1), Some(4));
    }

    #[test]
    fn vacating_hands_the_value_back_without_dropping_it() {
        let shared = std::rc::Rc::new(());
        let mut slab = Slab::with_capacity(1);
        let (index, _) = slab.insert(1, shared.clone());
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

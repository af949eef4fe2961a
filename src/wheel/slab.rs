//! Slab storage for wheel entries and the intrusive doubly linked lists threaded through it.
//!
//! Ground rules:
//! - Every entry is one [`Node`] in the slab's storage ([`Nodes`]: chunks that never move, so
//!   growing copies nothing); lists link nodes by `u32` index, so there are no pointers, no
//!   `unsafe` and no allocation per entry. [`NIL`] (`u32::MAX`) is "no node".
//! - A node is *occupied* while `value` is `Some`. It is then in exactly one [`List`].
//! - A node's back link is the index of the node before it in its list; the list's first node
//!   keeps there instead a *head mark*, [`HEAD`] plus the list's id (given by the wheel), so
//!   the node's list can be found in O(1) without a field of its own: only unlinking a head
//!   changes a list. Whoever moves a whole list (the wheel taking a slot to cascade it) marks
//!   its head again ([`Slab::mark_head`]).
//! - A *vacant* node is on the free list, linked through `next`; its back link is unused.
//!   Freeing a node drops nothing itself: the value is moved out to the caller, who drops it at
//!   once or keeps it.
//! - An index names a node, not an entry: once an entry leaves, its index may be given to the
//!   next one. Whoever keeps an index past its entry's life tells its entry from a newer one
//!   by the value (the wheel's `remove` asks it to), so a node keeps no generation.
//! - Indices stay below [`HEAD`], so a slab holds at most [`MAX_NODES`] nodes.

use std::mem;

use super::nodes::Nodes;

/// "No node": the end of a list, or an empty list.
pub(super) const NIL: u32 = u32::MAX;

/// The first head mark: a back link at or above it is `HEAD + id` of the node's list.
const HEAD: u32 = u32::MAX - MAX_LIST_ID;

/// The largest list id a head mark can carry.
pub(super) const MAX_LIST_ID: u32 = 4095;

/// The most nodes one slab holds: indices run below [`HEAD`] (some 4.29 billion).
pub(super) const MAX_NODES: usize = HEAD as usize;

/// One entry's storage: a deadline and two links (16 bytes) plus `Option<T>`, rounded up to 8.
/// That is 24 bytes for `T = ()` or a thin pointer with a niche (`Arc<T>`, `Box<T>`), 32 for a
/// fat one (`Arc<dyn Trait>`); see the size test below.
pub(super) struct Node<T> {
    /// Absolute tick at which the entry is due.
    deadline: u64,
    /// The previous node in this node's list, or the head mark of the list if this node is its
    /// first (see the ground rules).
    back: u32,
    /// Next node in this node's list (or in the free list when vacant), or [`NIL`].
    next: u32,
    /// `Some` exactly while the node is occupied.
    value: Option<T>,
}

impl<T> Node<T> {
    /// A node holding `value`, due at `deadline`, in no list.
    pub(super) fn new(deadline: u64, value: T) -> Self {
        Node {
            deadline,
            back: NIL,
            next: NIL,
            value: Some(value),
        }
    }

    /// The node's deadline.
    #[cfg(all(test, not(wheelpool_loom)))]
    pub(super) fn deadline(&self) -> u64 {
        self.deadline
    }

    /// Sets the node's deadline.
    #[cfg(all(test, not(wheelpool_loom)))]
    pub(super) fn set_deadline(&mut self, deadline: u64) {
        self.deadline = deadline;
    }
}

/// Where a node sits in its list (or sat, when [`Slab::vacate_if`] vacated it): its back link (the
/// node before it, or its list's head mark) and the node after it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Links {
    back: u32,
    next: u32,
}

impl Links {
    /// The id of the list the node headed, or `None` if it was inside its list.
    pub(super) fn head_of(self) -> Option<u32> {
        (self.back >= HEAD).then(|| self.back - HEAD)
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
    /// Nodes `0..nodes.len()`, in chunks that never move (`nodes.rs`).
    nodes: Nodes<T>,
    /// Head of the free list of vacant nodes.
    free: u32,
    /// Number of occupied nodes.
    len: usize,
}

impl<T> Slab<T> {
    /// An empty slab with room for `capacity` nodes before it allocates again.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Slab {
            nodes: Nodes::with_capacity(capacity),
            free: NIL,
            len: 0,
        }
    }

    /// Number of occupied nodes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Number of nodes the slab can hold before it allocates another chunk.
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
            let node = &mut self.nodes[index];
            self.free = node.next;
            node.deadline = deadline;
            node.back = NIL;
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
        self.nodes.push(Node::new(deadline, value));
        index as u32
    }

    /// Whether node `index` is occupied by a value `is_entry` recognises (tests).
    #[cfg(all(test, not(wheelpool_loom)))]
    pub(super) fn holds(&self, index: u32, is_entry: impl FnOnce(&T) -> bool) -> bool {
        self.nodes
            .get(index)
            .and_then(|node| node.value.as_ref())
            .is_some_and(is_entry)
    }

    /// The deadline of node `index`.
    pub(super) fn deadline(&self, index: u32) -> u64 {
        self.nodes[index].deadline
    }

    /// The id of the list the occupied node `index` heads, or `None` if it is not a head (tests).
    #[cfg(all(test, not(wheelpool_loom)))]
    pub(super) fn head_of(&self, index: u32) -> Option<u32> {
        self.links(index).head_of()
    }

    /// The node before `index` in its list (tests only; not meaningful for a head).
    #[cfg(all(test, not(wheelpool_loom)))]
    pub(super) fn prev(&self, index: u32) -> u32 {
        self.nodes[index].back
    }

    /// Marks the head of `list` (if any) as the head of the list with id `id`: the list was
    /// moved, and is now known by that id.
    pub(super) fn mark_head(&mut self, list: List, id: u32) {
        debug_assert!(id <= MAX_LIST_ID);
        if list.head != NIL {
            self.nodes[list.head].back = HEAD + id;
        }
    }

    /// The value of node `index` if it is occupied (for scans over the slab).
    pub(super) fn value(&self, index: u32) -> Option<&T> {
        self.nodes.get(index)?.value.as_ref()
    }

    /// Number of nodes, occupied or vacant: the range of indices a scan covers.
    pub(super) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Forgets every node and hands back the storage past the first `room` nodes' room, in
    /// O(1), for the caller to free when it likes (a shard frees it after unlocking). Only for
    /// an empty slab: every node is vacant, so forgetting them drops no value.
    pub(super) fn take_storage_beyond(&mut self, room: usize) -> Nodes<T> {
        debug_assert_eq!(self.len, 0);
        self.free = NIL;
        self.nodes.forget_all_keeping(room)
    }

    /// The node after `index` in its list.
    pub(super) fn next(&self, index: u32) -> u32 {
        self.nodes[index].next
    }

    /// Vacates node `index` if it is occupied by a value `is_entry` recognises, and hands back
    /// that value with the links the node had. Its neighbours (or its list's head) still point
    /// at it: the caller takes it out of its list with [`Slab::unlink_links`] before anything
    /// else touches that list. One look-up of the node, where a check, an unlink and a vacate
    /// looked it up four times (a cancel's hot path).
    #[inline]
    pub(super) fn vacate_if(
        &mut self,
        index: u32,
        is_entry: impl FnOnce(&T) -> bool,
    ) -> Option<(T, Links)> {
        let free = self.free;
        let node = self.nodes.get_mut(index)?;
        if !node.value.as_ref().is_some_and(is_entry) {
            return None;
        }
        let value = node.value.take()?;
        let links = Links {
            back: node.back,
            next: node.next,
        };
        node.next = free;
        self.free = index;
        self.len -= 1;
        Some((value, links))
    }

    /// Vacates the occupied node `index` and hands its value back. The node must already be
    /// unlinked from (or detached with) its list: its `next` now links the free list.
    pub(super) fn vacate(&mut self, index: u32) -> T {
        let (value, _) = self
            .vacate_if(index, |_| true)
            .expect("wheel: vacating a vacant node");
        value
    }

    /// Pushes the occupied node `index` at the front of `list`, whose id is `id`.
    pub(super) fn push_front(&mut self, list: &mut List, id: u32, index: u32) {
        debug_assert!(id <= MAX_LIST_ID);
        let old_head = list.head;
        if old_head != NIL {
            self.nodes[old_head].back = index;
        }
        let node = &mut self.nodes[index];
        node.back = HEAD + id;
        node.next = old_head;
        list.head = index;
    }

    /// Unlinks node `index` from its list, which must be `list` if the node heads it (any list
    /// otherwise: it is not touched). O(1).
    pub(super) fn unlink(&mut self, list: &mut List, index: u32) {
        let links = self.links(index);
        self.unlink_links(list, index, links);
    }

    /// The links of node `index`: what [`Slab::unlink_links`] needs.
    #[inline]
    pub(super) fn links(&self, index: u32) -> Links {
        let Node { back, next, .. } = self.nodes[index];
        Links { back, next }
    }

    /// Makes the neighbours of node `index`, whose links are `links`, skip it: as
    /// [`Slab::unlink`], for a node whose links were read before (a node [`Slab::vacate_if`]
    /// just vacated, whose `next` links the free list now). O(1).
    #[inline]
    pub(super) fn unlink_links(&mut self, list: &mut List, index: u32, links: Links) {
        let Links { back, next } = links;
        if back >= HEAD {
            debug_assert_eq!(list.head, index, "wheel: unlinking from the wrong list");
            list.head = next;
        } else {
            self.nodes[back].next = next;
        }
        if next != NIL {
            // The next node takes this one's back link: its previous node, or the head mark.
            self.nodes[next].back = back;
        }
    }

    /// Gives memory back: drops trailing vacant nodes, frees the chunks past the last node left
    /// and rebuilds the free list so the lowest indices are reused first. O(nodes).
    pub(super) fn shrink_to_fit(&mut self) {
        while let Some(last) = self.nodes.last() {
            if last.value.is_some() {
                break;
            }
            self.nodes.pop();
        }
        self.nodes.free_unused();
        self.free = NIL;
        for index in (0..self.nodes.len() as u32).rev() {
            let node = &mut self.nodes[index];
            if node.value.is_none() {
                node.next = self.free;
                self.free = index;
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
        // 8 (deadline) + 2 * 4 (links) + Option<()> tag, padded.
        assert_eq!(Slab::<()>::NODE_SIZE, 24);
        // A thin pointer with a niche (Arc, Box) fills those 8 bytes.
        assert_eq!(Slab::<Box<u8>>::NODE_SIZE, 24);
        assert_eq!(Slab::<std::sync::Arc<u8>>::NODE_SIZE, 24);
        // A fat one (a pool's `TaskRef`, a pointer and a vtable) takes 8 more.
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
        assert!(!slab.holds(a, |_| true), "vacant");
        let c = slab.insert(7, "c");
        assert_eq!(c, a, "the free node is reused");
        assert!(slab.holds(c, |v| *v == "c"));
        assert_eq!(slab.deadline(c), 7);
        assert!(!slab.holds(c, |v| *v == "a"), "another entry");
        assert!(!slab.holds(99, |_| true), "out of range");
        assert_eq!(slab.len(), 2);
    }

    #[test]
    fn a_head_carries_its_lists_id_and_passes_it_on() {
        let mut slab = Slab::with_capacity(3);
        let mut list = List::EMPTY;
        let ids: Vec<u32> = (0..3).map(|i| slab.insert(i, i)).collect();
        for &id in &ids {
            slab.push_front(&mut list, MAX_LIST_ID, id);
        }
        assert_eq!(collect(&slab, list), [2, 1, 0]);
        assert_eq!(slab.head_of(2), Some(MAX_LIST_ID));
        assert_eq!((slab.head_of(1), slab.head_of(0)), (None, None));
        slab.unlink(&mut list, 1); // not the head: the list is not touched
        assert_eq!(collect(&slab, list), [2, 0]);
        slab.unlink(&mut list, 2); // the head: the next node inherits the mark
        assert_eq!(collect(&slab, list), [0]);
        assert_eq!(slab.head_of(0), Some(MAX_LIST_ID));
        // A moved list is marked again.
        slab.mark_head(list, 7);
        assert_eq!(slab.head_of(0), Some(7));
        slab.unlink(&mut list, 0);
        assert!(list.is_empty());
    }

    #[test]
    fn lists_push_and_unlink_anywhere() {
        let mut slab = Slab::with_capacity(4);
        let mut list = List::EMPTY;
        let ids: Vec<u32> = (0..4).map(|i| slab.insert(i, i)).collect();
        for &id in &ids {
            slab.push_front(&mut list, 0, id);
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
        slab.push_front(&mut other, 1, 2);
        slab.push_front(&mut other, 1, 0);
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
        assert!(slab.holds(keys[4], |v| *v == 4));
        assert!(!slab.holds(keys[3], |v| *v == 3));
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

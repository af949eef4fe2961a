//! [`Nodes`]: the slab's node storage, in chunks that never move, so that growing it is one
//! allocation and never a copy.
//!
//! Why not one `Vec`: the insert that doubles a `Vec` moves every node (a `memcpy`, or an
//! `mremap` of every page once it is large), and the slab grows under a timer shard's lock. At
//! 8 M pending timers on one shard that was one schedule of 710 us, with every other schedule
//! and the due timers of that shard waiting behind it (BENCHMARKS.md). DESIGN.md bounds every
//! locked section to a constant amount of work.
//!
//! Why `unsafe`: every safe layout tried cost the steady state. Fixed segments, a `Vec` with
//! segments past it, and a `Vec` per chunk each put a second bounds check or a multiply on every
//! node access, and a schedule + cancel pair makes about nine: W2 lost 3-6% (callgrind: 6% more
//! instructions for the `Vec` per chunk). Here an access is the `Vec`'s own bounds check plus two
//! instructions (an add and a bit scan), and the wheel's code is the same safe index code as
//! before. The `unsafe` is this module's only, and Miri runs its tests and the slab's.
//!
//! # Ground rules
//!
//! - Chunk `c` holds `FIRST << c` nodes: indices `FIRST * (2^c - 1)` up to (not including)
//!   `FIRST * (2^(c+1) - 1)`. So node `i` is in the chunk whose number is the top bit of
//!   `i + FIRST` less `LOG_FIRST`; the chunks' sizes double as a `Vec`'s capacity would.
//! - Each chunk is one allocation of its full size, made when the node before it is the last
//!   the chunks so far can hold, and never reallocated: a node never moves, and growing is one
//!   allocation (for a large chunk, an `mmap` whose pages fault in as nodes are pushed, as a
//!   `Vec`'s would). Chunks are allocated in order and freed from the end: the allocated ones
//!   are chunks `0..allocated`.
//! - The nodes are indices `0..len`, pushed in index order and popped from the end: a node is
//!   initialised exactly when its index is below `len`, and `len` is at most the allocated
//!   room. Every access checks `index < len` (a panic, as a slice's, past it), so no index, a
//!   stale or a wrong one included, reaches memory that is not an initialised node: the
//!   wheel's logic decides which node an index names, never whether the access is sound.
//! - Node `i` is at `bias[t] + i`, where `t` is the top bit of `i + FIRST` and `bias[t]` is its
//!   chunk's address moved back by the chunk's first index (wrapping arithmetic: a pointer
//!   outside the chunk, never read, only added to).

#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};
use std::ptr;

use super::slab::Node;

/// log2 of the first chunk's size.
const LOG_FIRST: u32 = 6;

/// Nodes in the first chunk (64 nodes, 2 KB of 32-byte ones).
const FIRST: usize = 1 << LOG_FIRST;

/// Entries of the bias table: one per bit of a `usize`, so that indexing it by a top bit needs no
/// bounds check. Only the entries from [`LOG_FIRST`] to 31 are ever used: the top bit of
/// `index + FIRST` is below 32 for every index the slab gives out (they stay below
/// `u32::MAX - 4095`).
const TOPS: usize = usize::BITS as usize;

/// The top bit of the slab's last chunk.
const LAST_TOP: usize = 31;

/// Chunk `chunk` holds this many nodes.
fn chunk_len(chunk: usize) -> usize {
    FIRST << chunk
}

/// The first index of chunk `chunk`.
fn chunk_start(chunk: usize) -> usize {
    (FIRST << chunk) - FIRST
}

/// The layout of chunk `chunk`: an array of its nodes.
fn chunk_layout<T>(chunk: usize) -> Layout {
    Layout::array::<Node<T>>(chunk_len(chunk)).expect("wheel: node storage exhausted")
}

/// The top bit of `index + FIRST`: the bias table's entry for node `index` ([`chunk_top`] of
/// its chunk).
#[inline(always)]
fn top_bit(index: u32) -> usize {
    let shifted = index as usize + FIRST;
    (usize::BITS - 1 - shifted.leading_zeros()) as usize
}

/// The chunk node `index` is in.
fn chunk_of(index: u32) -> usize {
    top_bit(index) - LOG_FIRST as usize
}

/// The bias table's entry for chunk `chunk`: the top bit of `index + FIRST` of its nodes.
fn chunk_top(chunk: usize) -> usize {
    chunk + LOG_FIRST as usize
}

/// The slab's nodes, `0..len`, in chunks that never move (see the module's ground rules).
pub(super) struct Nodes<T> {
    /// `bias[top]`: the address of the chunk whose nodes have `index + FIRST` with top bit
    /// `top`, moved back by that chunk's first index (wrapping: it points outside the chunk),
    /// so that node `index` is at `bias[top_bit(index)].wrapping_add(index)`. One load and an
    /// add per node access, where a `Vec` of chunks would take a bounds check, a multiply and a
    /// second load. Null for chunks not allocated.
    bias: [*mut Node<T>; TOPS],
    /// Number of nodes, occupied or vacant: nodes `0..len` are initialised.
    len: usize,
    /// Chunks `0..allocated` are allocated.
    allocated: usize,
    /// The nodes (and their values) belong to this storage.
    owns: PhantomData<Node<T>>,
}

// SAFETY: `Nodes<T>` owns its nodes as a `Vec<Node<T>>` would, and hands out references to them
// only through `&self` and `&mut self`; the raw pointers are not shared with anything.
unsafe impl<T: Send> Send for Nodes<T> {}
// SAFETY: as above: `&Nodes<T>` gives only `&Node<T>`.
unsafe impl<T: Sync> Sync for Nodes<T> {}

impl<T> Default for Nodes<T> {
    fn default() -> Self {
        Nodes {
            bias: [ptr::null_mut(); TOPS],
            len: 0,
            allocated: 0,
            owns: PhantomData,
        }
    }
}

impl<T> Nodes<T> {
    /// Storage with room for at least `capacity` nodes before it allocates again.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        let mut nodes = Nodes::default();
        while nodes.capacity() < capacity {
            nodes.allocate();
        }
        nodes
    }

    /// Number of nodes, occupied or vacant.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Number of nodes the allocated chunks hold.
    #[inline]
    pub(super) fn capacity(&self) -> usize {
        chunk_start(self.allocated)
    }

    /// The address of node `index`, which must be below `len`.
    #[inline(always)]
    fn at(&self, index: u32) -> *mut Node<T> {
        debug_assert!((index as usize) < self.len);
        self.bias[top_bit(index)].wrapping_add(index as usize)
    }

    /// Node `index`, if it exists.
    #[inline(always)]
    pub(super) fn get(&self, index: u32) -> Option<&Node<T>> {
        // SAFETY: `index < len`, so the node is initialised, in an allocated chunk, at `at`'s
        // address (ground rules); the reference borrows `self`, which owns the node.
        ((index as usize) < self.len).then(|| unsafe { &*self.at(index) })
    }

    /// Node `index`, if it exists.
    #[inline(always)]
    pub(super) fn get_mut(&mut self, index: u32) -> Option<&mut Node<T>> {
        // SAFETY: as in `get`; the reference borrows `self` mutably, so it is the only one.
        ((index as usize) < self.len).then(|| unsafe { &mut *self.at(index) })
    }

    /// The last node, if any.
    pub(super) fn last(&self) -> Option<&Node<T>> {
        let last = self.len.checked_sub(1)?;
        // `len` is at most `u32::MAX` (the slab's indices are `u32`).
        self.get(last as u32)
    }

    /// Appends `node`; its index is the old [`len`](Nodes::len). Allocates the next chunk
    /// first if the last one is full: one allocation, no node moves.
    #[inline]
    pub(super) fn push(&mut self, node: Node<T>) {
        if self.len == self.capacity() {
            self.allocate();
        }
        // The slab keeps its indices below `u32::MAX - 4095` (it checks before it pushes).
        let index = self.len as u32;
        self.len += 1;
        // SAFETY: `index` is below the capacity, so its place is in an allocated chunk; it is
        // not initialised yet (it was `len`), so writing does not overwrite a node.
        unsafe { self.at(index).write(node) };
    }

    /// Removes the last node and returns it.
    pub(super) fn pop(&mut self) -> Option<Node<T>> {
        let last = self.len.checked_sub(1)?;
        let at = self.at(last as u32);
        self.len = last;
        // SAFETY: node `last` was initialised (it was below `len`) and is no longer counted, so
        // it is moved out exactly once.
        Some(unsafe { at.read() })
    }

    /// Frees the chunks past the last node's.
    pub(super) fn free_unused(&mut self) {
        let keep = match self.len.checked_sub(1) {
            Some(last) => chunk_of(last as u32) + 1,
            None => 0,
        };
        drop(self.split_off(keep));
    }

    /// Forgets every node without dropping it (they must hold nothing that needs dropping: the
    /// slab's vacant nodes hold `None`), keeps the room of the chunks that fit in
    /// `room` nodes and hands the other chunks back, for the caller to free when it likes.
    /// O(chunks): no node is visited.
    pub(super) fn forget_all_keeping(&mut self, room: usize) -> Nodes<T> {
        self.len = 0;
        let mut keep = 0;
        while keep < self.allocated && chunk_start(keep + 1) <= room {
            keep += 1;
        }
        self.split_off(keep)
    }

    /// Moves chunks `keep..` (which hold no node) into storage of their own, which frees them
    /// when dropped; this one keeps chunks `..keep`.
    fn split_off(&mut self, keep: usize) -> Nodes<T> {
        debug_assert!(self.len <= chunk_start(keep.min(self.allocated)));
        let mut rest = Nodes::default();
        for chunk in keep..self.allocated {
            let top = chunk_top(chunk);
            rest.bias[top] = std::mem::replace(&mut self.bias[top], ptr::null_mut());
        }
        rest.allocated = self.allocated;
        self.allocated = self.allocated.min(keep);
        rest
    }

    /// Number of nodes the chunks this storage holds have room for (chunks `..allocated`
    /// that were split off are not counted).
    pub(super) fn room(&self) -> usize {
        (0..self.allocated)
            .filter(|&chunk| !self.bias[chunk_top(chunk)].is_null())
            .map(chunk_len)
            .sum()
    }

    /// Allocates the next chunk: one allocation, under the shard's lock, of a size that
    /// doubles each time, as a `Vec`'s growth would (but nothing is copied).
    #[cold]
    fn allocate(&mut self) {
        let chunk = self.allocated;
        let top = chunk_top(chunk);
        assert!(top <= LAST_TOP, "wheel: node storage exhausted");
        let layout = chunk_layout::<T>(chunk);
        // SAFETY: the layout's size is not zero (a node has a deadline and links).
        let base = unsafe { alloc::alloc(layout) }.cast::<Node<T>>();
        if base.is_null() {
            alloc::handle_alloc_error(layout);
        }
        self.bias[top] = base.wrapping_sub(chunk_start(chunk));
        self.allocated += 1;
    }

    /// Drops every node and frees every chunk, the last chunk first. Each chunk is taken out of
    /// the storage before its nodes are dropped, and freed even if one of their drops panics, so
    /// a panic leaves the storage consistent for [`Drop`]'s guard to go on with.
    fn drop_all(&mut self) {
        /// Frees one chunk when dropped: after its nodes, or while a panic in one of their
        /// drops unwinds.
        struct Free(*mut u8, Layout);
        impl Drop for Free {
            fn drop(&mut self) {
                // SAFETY: `drop_all` made this from a chunk it took out of the storage: the
                // address and layout `allocate` used, freed only here.
                unsafe { alloc::dealloc(self.0, self.1) };
            }
        }
        while self.allocated > 0 {
            self.allocated -= 1;
            let chunk = self.allocated;
            let bias = std::mem::replace(&mut self.bias[chunk_top(chunk)], ptr::null_mut());
            let start = chunk_start(chunk);
            let nodes = self.len.saturating_sub(start).min(chunk_len(chunk));
            self.len = self.len.min(start);
            if bias.is_null() {
                continue; // split off (`split_off`)
            }
            let base = bias.wrapping_add(start);
            let _free = Free(base.cast(), chunk_layout::<T>(chunk));
            // SAFETY: the first `nodes` nodes of the chunk were the initialised ones below
            // `len`; the chunk is out of the storage now, so they are dropped once, here (a
            // slice's drop goes on past a panicking element, as a `Vec`'s does).
            unsafe { ptr::drop_in_place(ptr::slice_from_raw_parts_mut(base, nodes)) };
        }
    }
}

impl<T> Drop for Nodes<T> {
    fn drop(&mut self) {
        /// Goes on with the remaining chunks if a node's drop panics, so every node is dropped
        /// and every chunk freed, as a `Vec` does (a second panic aborts, as it does there).
        struct Guard<'a, T>(&'a mut Nodes<T>);
        impl<T> Drop for Guard<'_, T> {
            fn drop(&mut self) {
                self.0.drop_all();
            }
        }
        let guard = Guard(self);
        guard.0.drop_all();
        std::mem::forget(guard);
    }
}

impl<T> Index<u32> for Nodes<T> {
    type Output = Node<T>;

    /// Node `index`. Panics if it does not exist, as a slice does.
    #[inline(always)]
    fn index(&self, index: u32) -> &Node<T> {
        match self.get(index) {
            Some(node) => node,
            None => out_of_range(index, self.len),
        }
    }
}

impl<T> IndexMut<u32> for Nodes<T> {
    /// Node `index`. Panics if it does not exist, as a slice does.
    #[inline(always)]
    fn index_mut(&mut self, index: u32) -> &mut Node<T> {
        let len = self.len;
        match self.get_mut(index) {
            Some(node) => node,
            None => out_of_range(index, len),
        }
    }
}

/// The panic of an index past the last node.
#[cold]
#[inline(never)]
#[track_caller]
fn out_of_range(index: u32, len: usize) -> ! {
    panic!("wheel: node {index} out of range ({len} nodes)")
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use std::rc::Rc;

    fn node(deadline: u64, value: Rc<u64>) -> Node<Rc<u64>> {
        Node::new(deadline, value)
    }

    #[test]
    fn chunks_double_and_tile_the_indices() {
        assert_eq!((chunk_of(0), chunk_of(63)), (0, 0));
        assert_eq!((chunk_of(64), chunk_of(191)), (1, 1));
        assert_eq!(chunk_of(192), 2);
        for chunk in 0..26 {
            let start = chunk_start(chunk) as u32;
            assert_eq!(chunk_of(start), chunk);
            assert_eq!(chunk_of(start + (chunk_len(chunk) as u32 - 1)), chunk);
        }
        // The slab's largest index still has an entry in the bias table.
        let largest = super::super::slab::MAX_NODES as u32 - 1;
        assert_eq!(top_bit(largest), LAST_TOP);
    }

    #[test]
    fn nodes_never_move_as_the_storage_grows_and_come_back_in_order() {
        let shared = Rc::new(7);
        let mut nodes = Nodes::default();
        assert_eq!(nodes.capacity(), 0);
        nodes.push(node(0, shared.clone()));
        assert_eq!(nodes.capacity(), 64);
        let first = ptr::from_ref(&nodes[0]);
        for deadline in 1..10_000 {
            nodes.push(node(deadline, shared.clone()));
            // The slack bound the wheel's docs state (2.95x at 65 nodes).
            assert!(nodes.capacity() <= 2 * nodes.len() + 62);
        }
        assert_eq!(nodes.len(), 10_000);
        assert_eq!(nodes.capacity(), 16_320, "chunks of 64, 128, ... 8192");
        assert_eq!(ptr::from_ref(&nodes[0]), first, "node 0 did not move");
        for index in 0..10_000u32 {
            assert_eq!(nodes[index].deadline(), u64::from(index));
        }
        assert!(nodes.get(10_000).is_none() && nodes.get(u32::MAX).is_none());
        assert_eq!(Rc::strong_count(&shared), 10_001);
        // Pop back to one chunk and a bit, then free the rest.
        while nodes.len() > 100 {
            let popped = nodes.pop().expect("a node");
            assert_eq!(popped.deadline(), nodes.len() as u64);
        }
        assert_eq!(
            Rc::strong_count(&shared),
            101,
            "popped nodes were handed back"
        );
        nodes.free_unused();
        assert_eq!(nodes.capacity(), 192);
        assert_eq!(ptr::from_ref(&nodes[0]), first);
        nodes[99].set_deadline(5);
        assert_eq!(nodes.get_mut(99).map(|node| node.deadline()), Some(5));
        drop(nodes);
        assert_eq!(
            Rc::strong_count(&shared),
            1,
            "dropping drops every node once"
        );
    }

    #[test]
    fn with_capacity_allocates_ahead_and_empty_storage_frees_all() {
        let mut nodes: Nodes<Rc<u64>> = Nodes::with_capacity(1000);
        assert_eq!(nodes.capacity(), 1984);
        nodes.free_unused();
        assert_eq!(nodes.capacity(), 0);
        assert!(nodes.last().is_none() && nodes.pop().is_none());
    }

    /// A value whose drop panics: every other value is still dropped, once, and every chunk
    /// freed (Miri reports a chunk left allocated), as a `Vec` would.
    #[test]
    fn a_panicking_drop_still_drops_every_other_value_and_frees_every_chunk() {
        use std::cell::Cell;
        use std::panic::{catch_unwind, AssertUnwindSafe};

        struct Counted<'a> {
            index: usize,
            panic_at: usize,
            drops: &'a [Cell<u32>],
        }
        impl Drop for Counted<'_> {
            fn drop(&mut self) {
                self.drops[self.index].set(self.drops[self.index].get() + 1);
                if self.index == self.panic_at {
                    panic!("value {} panics", self.index);
                }
            }
        }

        let count = 300;
        for panic_at in [0, 63, 64, 100, 299] {
            let drops: Vec<Cell<u32>> = (0..count).map(|_| Cell::new(0)).collect();
            let mut nodes = Nodes::default();
            for index in 0..count {
                let value = Counted {
                    index,
                    panic_at,
                    drops: &drops,
                };
                nodes.push(Node::new(index as u64, value));
            }
            let panicked = catch_unwind(AssertUnwindSafe(|| drop(nodes)));
            assert!(panicked.is_err(), "the value's panic comes through");
            assert!(
                drops.iter().all(|d| d.get() == 1),
                "panic at {panic_at}: every value dropped once"
            );
        }
    }

    #[test]
    #[should_panic(expected = "node 3 out of range (3 nodes)")]
    fn an_index_past_the_last_node_panics() {
        let mut nodes = Nodes::default();
        for deadline in 0..3 {
            nodes.push(node(deadline, Rc::new(0)));
        }
        let _ = &nodes[3];
    }
}

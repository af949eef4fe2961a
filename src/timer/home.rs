//! Which pool and which shard a thread belongs to: the calling thread's *home* index (a worker's
//! own index; other threads are dealt one round-robin, counting down from the top), which picks
//! its timer shard and its counter cell, and [`PoolId`], by which a thread knows the pool it
//! works for.
//!
//! Workers take `0, 1, 2, ..` and outside threads `!0, !1, !2, ..` (masked by the shard count:
//! the last shard, then the one before, ..), so an outside producer meets a worker on a shard
//! and a counter cell only once there are more threads than shards. Sharing a cell with a busy
//! worker costs a producer a cache-line transfer per task (the worker counts every run there):
//! dealing outside threads from 0 put the first one on worker 0's cell, and W4's lone submitter
//! ran about 10% slower for it (6.09 against 6.73 M tasks/s, medians of 10 alternating runs).

use crate::sync::plain::{AtomicU64, AtomicUsize, Ordering};
use std::cell::Cell;

/// A pool's identity, unique for the life of the process: how a thread that works for a pool
/// (a worker, the timer thread) tells its own pool from another one. A number, not an address:
/// an address can be reused by the next allocation once a pool is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolId(u64);

impl PoolId {
    /// A new id, never handed out before.
    pub(crate) fn new() -> Self {
        /// The next id; 0 is never handed out, so it can stand for "no pool" in a thread-local.
        static NEXT: AtomicU64 = AtomicU64::new(1);
        // Relaxed: a counter, not a protocol; ids only need to differ.
        PoolId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Homes dealt to threads that are not workers so far (each gets the complement of the count).
static NEXT: AtomicUsize = AtomicUsize::new(0);

crate::sync::thread_local! {
    static HOME: Cell<Option<usize>> = const { Cell::new(None) };
    static SPREAD: Cell<usize> = const { Cell::new(0) };
}

/// The calling thread's home index (any value: the timer masks it).
#[inline]
pub(crate) fn index() -> usize {
    HOME.with(|h| {
        if let Some(home) = h.get() {
            return home;
        }
        // Relaxed: a counter, not a protocol. Under loom, threads must choose
        // deterministically, so they all start at 0 unless a model sets them.
        let home = if cfg!(wheelpool_loom) {
            0
        } else {
            !NEXT.fetch_add(1, Ordering::Relaxed)
        };
        h.set(Some(home));
        home
    })
}

/// Sets the calling thread's home (a worker takes its own index).
pub(crate) fn set(index: usize) {
    HOME.with(|h| h.set(Some(index)));
}

/// A per-thread count of periodic tasks dealt (see `Timer::spread_shard`).
pub(crate) fn next_spread() -> usize {
    SPREAD.with(|s| {
        let n = s.get();
        s.set(n.wrapping_add(1));
        n
    })
}

//! [`TaskPtr`]: the shared pointer to a task cell, with its reference count in the cell's
//! [`Header`] rather than in a block of its own in front of the cell (where `Arc` keeps two).
//!
//! Why not `Arc<dyn RawTask>`, measured (W1, 1 M pending; see BENCHMARKS.md):
//! - A new task is born holding both of its first references, the caller's future's and the
//!   pool's (wheel or ready queue). With `Arc` the second was a clone: one locked add in every
//!   schedule, on a cache line whose first stores were still draining.
//! - The count is 4 bytes in padding the header had anyway, and there is no weak count: 16
//!   bytes less per task, so a one-shot capturing a word fits the allocator's 64-byte chunk
//!   where it took 80.
//!
//! # Ground rules
//!
//! - The count is the number of live `TaskPtr`s to the cell. The cell was boxed by [`pair`] or
//!   [`single`], which set the count before the first pointer exists; only `TaskPtr` changes
//!   it afterwards.
//! - [`RawTask::header`] returns a field of the task itself (`TaskCell` is the only
//!   implementation), so every pointer to one cell reaches the same count.
//! - Clone adds `Relaxed`: a new pointer is made from one the caller holds, so the count is
//!   at least one and nothing is freed meanwhile (as `Arc` argues).
//! - Drop decides *before* it subtracts, while its own share keeps the cell alive, and never
//!   reads the cell after a subtraction: once it has let go, another pointer may free the
//!   cell at any moment. It reads the count: if this is the last pointer (one), nobody else
//!   can clone, drop or use the cell, so it frees it without subtracting; otherwise a
//!   compare-and-swap subtracts one (`Release`) and it returns (a clone or drop elsewhere in
//!   between makes it read again). Before a free it fences `Acquire`, pairing with every other
//!   pointer's `Release` subtraction, so every use of the cell through another pointer happens
//!   before the free. (A first version subtracted, then read the header: a drop from two to
//!   one could read a cell the other pointer had just freed. Miri with preemption caught it.)
//! - **A share given up.** The cancel that takes a waiting task out of its wheel holds a
//!   pointer of its own, so dropping the wheel's would be a subtraction that never frees. It
//!   *orphans* it instead ([`TaskPtr::orphan`]): under the shard's lock it marks the header's
//!   wheel key `ORPHANED` (`Release`) and forgets the pointer. The count keeps that share for
//!   good, and a drop that reads two with the mark there is the last pointer: it frees the
//!   cell, with no locked instruction at all. Why that is exact:
//!   - The mark is stored once and never overwritten: only `Timer::cancelled` orphans, only
//!     the cancel that won `SCHEDULED` reaches it, and after that unlink the task is in no
//!     wheel and has ended, so nothing writes its key again (`unlink` treats the mark as "not
//!     in the wheel"; insert and reset check `SCHEDULED` under the lock first; the key clears
//!     of a poll or sweep touch only entries they took out of the wheel themselves, which no
//!     cancel can then unlink). It stands for exactly one share, so with the mark the count
//!     never goes below one, and two is this pointer and the orphan.
//!   - Whoever reads the mark holds a share, so the cell is alive. The mark is read
//!     `Acquire` and the count read again after it: the canceller made its own pointer (a
//!     clone, or the future it was born with) before it stored the mark, so a first read of
//!     two that was older than that clone is corrected by the second.
//!   - **The rule that makes it exact, kept by the pool, not by this type:** pool pointers
//!     (the wheel's, a ready queue's, a worker's) are cloned only from pool pointers, and user
//!     pointers (futures, cancel handles, which alone cancel) only from user pointers; a task
//!     that has ended never enters a wheel again. So when a drop reads two, itself and one
//!     other: if the other is a pool pointer, any canceller must come from this pointer, before
//!     this drop; if it is a user pointer, no wheel pointer will exist again. Either way no
//!     orphaning can start while this drop decides. Code that broke the rule (say, cloning a
//!     user pointer into a wheel while keeping it) could make the compare-and-swap from two to
//!     one meet a fresh orphan's share (a leak), and is not allowed.
//! - Counts above [`MAX_REFS`] abort the process (leaked pointers; as `Arc` does past
//!   `isize::MAX`), so the count never wraps to a free while pointers remain. The limit is
//!   2^31, far below `Arc`'s: safe code reaches it only by leaking, e.g. `mem::forget` of
//!   2^31 clones of one `CancelHandle` (its docs say so); the pool itself holds only a few.
//!
//! The loom models build every task through [`pair`] or [`single`], so loom explores the count
//! with the protocols that move tasks (its fence and atomics are loom's); the unit tests below
//! and the cell tests run under Miri, which checks the frees.
#![allow(unsafe_code)]

use super::{RawTask, TaskResult};
use crate::sync::{fence, Ordering};
use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::NonNull;

/// More live pointers to one task than this is a leak: the process aborts.
const MAX_REFS: u32 = u32::MAX / 2;

/// A counted pointer to a task cell, seen as `D` (`dyn RawTask` for the pool, `dyn
/// TaskResult<T>` for the future). See the module's ground rules.
pub(crate) struct TaskPtr<D: ?Sized + RawTask> {
    ptr: NonNull<D>,
    /// This pointer owns a share of a `D` (drop check, variance).
    owns: PhantomData<D>,
}

// SAFETY: a `TaskPtr` hands out only `&D` and its count is atomic, as `Arc<D>` does; `RawTask`
// is `Send + Sync`, so sharing and sending the cell across threads is sound.
unsafe impl<D: ?Sized + RawTask> Send for TaskPtr<D> {}
// SAFETY: as above.
unsafe impl<D: ?Sized + RawTask> Sync for TaskPtr<D> {}

// The pointer moves, never the cell: pinning a `TaskPtr` promises nothing about `D` (as `Arc`).
impl<D: ?Sized + RawTask> Unpin for TaskPtr<D> {}

/// A new task's first two pointers, the typed one for its future and the pool's: the count
/// starts at two, with no clone.
pub(crate) fn pair<C, T>(cell: C) -> (TaskPtr<dyn TaskResult<T>>, TaskPtr<dyn RawTask>)
where
    C: TaskResult<T> + 'static,
{
    let ptr = boxed(cell, 2);
    (TaskPtr::own(ptr), TaskPtr::own(ptr))
}

/// A new task's only pointer (`execute`: no future).
pub(crate) fn single<C: RawTask + 'static>(cell: C) -> TaskPtr<dyn RawTask> {
    TaskPtr::own(boxed(cell, 1))
}

/// Boxes `cell` with its count set to `refs`, and lets go of the box.
fn boxed<C: RawTask>(cell: C, refs: u32) -> NonNull<C> {
    // Relaxed: no other thread can see the cell yet; the queue or wheel that publishes it
    // synchronises.
    cell.header().refs.store(refs, Ordering::Relaxed);
    NonNull::from(Box::leak(Box::new(cell)))
}

impl<D: ?Sized + RawTask> TaskPtr<D> {
    /// Takes one of the count's shares of the cell at `ptr`.
    fn own(ptr: NonNull<D>) -> Self {
        TaskPtr {
            ptr,
            owns: PhantomData,
        }
    }

    /// Gives this pointer's share up without subtracting it: see "A share given up" in the
    /// ground rules. Only for the wheel's pointer, by the cancel that unlinked it, under the
    /// shard's lock (the wheel key is that lock's), while the canceller holds a pointer too.
    #[inline]
    pub(crate) fn orphan(self) {
        self.header().mark_orphaned();
        std::mem::forget(self);
    }

    /// The cell's address, to compare identities.
    #[inline]
    pub(crate) fn as_ptr(&self) -> *const D {
        self.ptr.as_ptr()
    }

    /// True if both point to the same task (tests).
    #[cfg(all(test, not(wheelpool_loom)))]
    pub(crate) fn ptr_eq(a: &Self, b: &Self) -> bool {
        std::ptr::addr_eq(a.as_ptr(), b.as_ptr())
    }

    /// How many pointers to this task live now (tests).
    #[cfg(all(test, not(wheelpool_loom)))]
    pub(crate) fn count(this: &Self) -> u32 {
        this.header().refs.load(Ordering::Relaxed)
    }
}

impl<T> TaskPtr<dyn TaskResult<T>> {
    /// One more pointer to the same task, seen as the pool sees it.
    pub(crate) fn to_raw(&self) -> TaskPtr<dyn RawTask> {
        let typed = std::mem::ManuallyDrop::new(self.clone());
        // Trait upcasting: the same cell, its `RawTask` vtable; the new share moves over.
        let ptr: NonNull<dyn RawTask> = typed.ptr;
        TaskPtr::own(ptr)
    }
}

impl<D: ?Sized + RawTask> Deref for TaskPtr<D> {
    type Target = D;

    #[inline]
    fn deref(&self) -> &D {
        // SAFETY: this pointer holds a share of the count, so the cell is alive until it is
        // dropped (ground rules); only shared references to it are ever made.
        unsafe { self.ptr.as_ref() }
    }
}

impl<D: ?Sized + RawTask> Clone for TaskPtr<D> {
    #[inline]
    fn clone(&self) -> Self {
        // Relaxed: see the ground rules.
        let before = self.header().refs.fetch_add(1, Ordering::Relaxed);
        if before > MAX_REFS {
            std::process::abort();
        }
        TaskPtr::own(self.ptr)
    }
}

impl<D: ?Sized + RawTask> Drop for TaskPtr<D> {
    #[inline]
    fn drop(&mut self) {
        let header = self.header();
        let mut refs = header.refs.load(Ordering::Relaxed);
        // Decide while this pointer's share still keeps the cell alive: after a subtraction
        // that was not the last, another pointer may free it, so nothing here reads the cell
        // once a compare-and-swap has succeeded.
        loop {
            if refs == 1
                || refs == 2 && {
                    // Pairs with the Release of the canceller's subtraction (ground rules).
                    fence(Ordering::Acquire);
                    // The mark, then the count again: a clone made before the mark was stored
                    // shows here even if the first read was older (ground rules).
                    header.is_orphaned() && header.refs.load(Ordering::Relaxed) == 2
                }
            {
                break;
            }
            // Strong, not weak: the same instruction on x86, and loom need not explore a
            // spurious failure at every attempt.
            match header
                .refs
                .compare_exchange(refs, refs - 1, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => refs = now,
            }
        }
        // The last pointer (or the last besides a share given up): no other pointer is left to
        // clone, drop or use the cell. This Acquire fence pairs with every other pointer's
        // Release subtraction, whose last use of the cell came before it.
        fence(Ordering::Acquire);
        // SAFETY: this was the last pointer and no reference into the cell remains (above).
        // `ptr` came from `Box::leak` in `boxed`, and `D`'s metadata (the vtable of the boxed
        // type) gives the box's own layout and drop.
        drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
    }
}

impl std::fmt::Debug for TaskPtr<dyn RawTask> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use crate::task::{OneShot, TaskCell};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as StdOrdering};
    use std::sync::Arc;

    /// Counts its drops: the closure a cell holds until it is freed.
    struct Tally(Arc<AtomicUsize>);

    impl Drop for Tally {
        fn drop(&mut self) {
            self.0.fetch_add(1, StdOrdering::SeqCst);
        }
    }

    fn cell(dropped: &Arc<AtomicUsize>) -> TaskCell<OneShot<impl FnOnce() -> u32 + Send>> {
        let tally = Tally(dropped.clone());
        TaskCell::new(
            OneShot::new(move || {
                let _keep = &tally;
                7
            }),
            0,
            0,
        )
    }

    #[test]
    fn a_pair_is_born_with_two_and_the_last_drop_frees() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let (typed, raw) = pair::<_, u32>(cell(&dropped));
        assert_eq!(TaskPtr::count(&raw), 2);
        assert!(std::ptr::addr_eq(typed.as_ptr(), raw.as_ptr()));
        let again = typed.to_raw();
        assert_eq!(TaskPtr::count(&raw), 3);
        assert!(TaskPtr::ptr_eq(&again, &raw));
        drop(typed);
        drop(again);
        assert_eq!(dropped.load(StdOrdering::SeqCst), 0, "one pointer is left");
        assert_eq!(TaskPtr::count(&raw), 1);
        drop(raw);
        assert_eq!(dropped.load(StdOrdering::SeqCst), 1, "the cell was freed");
    }

    #[test]
    fn a_single_is_freed_with_its_pointer() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let raw = single(cell(&dropped));
        let clone = raw.clone();
        assert_eq!(TaskPtr::count(&clone), 2);
        drop(raw);
        assert_eq!(dropped.load(StdOrdering::SeqCst), 0);
        drop(clone);
        assert_eq!(dropped.load(StdOrdering::SeqCst), 1);
    }

    #[test]
    fn a_share_given_up_leaves_the_cell_to_the_last_other_pointer() {
        // The future's pointer goes first or last; a handle's is the canceller's.
        for future_last in [false, true] {
            let dropped = Arc::new(AtomicUsize::new(0));
            let (typed, wheel) = pair::<_, u32>(cell(&dropped));
            let handle = typed.to_raw();
            wheel.orphan();
            assert_eq!(TaskPtr::count(&handle), 3, "the orphan keeps its share");
            assert!(handle.header().is_orphaned());
            let (first, last) = if future_last {
                (handle, typed.to_raw())
            } else {
                (typed.to_raw(), handle)
            };
            drop(typed);
            drop(first);
            assert_eq!(dropped.load(StdOrdering::SeqCst), 0, "one pointer is left");
            drop(last);
            assert_eq!(
                dropped.load(StdOrdering::SeqCst),
                1,
                "freed with the orphan's share"
            );
        }
    }

    #[test]
    fn a_drop_to_one_without_the_mark_frees_nothing() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let (typed, wheel) = pair::<_, u32>(cell(&dropped));
        drop(typed);
        assert_eq!(
            dropped.load(StdOrdering::SeqCst),
            0,
            "the wheel still holds it"
        );
        assert_eq!(TaskPtr::count(&wheel), 1);
        drop(wheel);
        assert_eq!(dropped.load(StdOrdering::SeqCst), 1);
    }

    /// A canceller orphans the wheel's share while other threads drop theirs: freed exactly
    /// once, after the last of them (Miri checks the frees).
    #[test]
    fn a_share_given_up_while_others_drop_on_other_threads_frees_once() {
        let threads = if cfg!(miri) { 2 } else { 3 };
        let rounds = if cfg!(miri) { 4 } else { 500 };
        for _ in 0..rounds {
            let dropped = Arc::new(AtomicUsize::new(0));
            let (typed, wheel) = pair::<_, u32>(cell(&dropped));
            let canceller = {
                let mine = typed.to_raw();
                std::thread::spawn(move || {
                    wheel.orphan();
                    std::hint::black_box(mine.header().id());
                })
            };
            let droppers: Vec<_> = (0..threads)
                .map(|_| {
                    let mine = typed.to_raw();
                    std::thread::spawn(move || drop(mine.clone()))
                })
                .collect();
            drop(typed);
            canceller.join().unwrap();
            for dropper in droppers {
                dropper.join().unwrap();
            }
            assert_eq!(dropped.load(StdOrdering::SeqCst), 1);
        }
    }

    /// The last two pointers dropped at once on two threads: freed once, and neither drop
    /// touches the cell after the other may have freed it (Miri reported the read of a first
    /// version, which looked at the header after its subtraction, as a race with the free).
    #[test]
    fn the_last_two_pointers_dropped_at_once_free_the_cell_once() {
        let rounds = if cfg!(miri) { 40 } else { 2_000 };
        for _ in 0..rounds {
            let dropped = Arc::new(AtomicUsize::new(0));
            let (typed, raw) = pair::<_, u32>(cell(&dropped));
            let other = std::thread::spawn(move || drop(raw));
            drop(typed);
            other.join().unwrap();
            assert_eq!(dropped.load(StdOrdering::SeqCst), 1);
        }
    }

    /// Against the pool's rule (ground rules), a pointer's holder clones a second one and
    /// orphans it while the other pointer drops: that drop may read a count of two older than
    /// the clone together with the fresh mark. It must read the count again and not free the
    /// cell under the holder. Helper review: Miri flagged a free here on every seed tried before
    /// the second read of the count.
    #[test]
    fn a_stale_count_of_two_with_a_fresh_mark_frees_nothing_early() {
        fn wait_for(flag: &AtomicBool) {
            while !flag.load(StdOrdering::Relaxed) {
                std::thread::yield_now();
            }
        }
        let rounds = if cfg!(miri) { 10 } else { 2_000 };
        for _ in 0..rounds {
            let dropped = Arc::new(AtomicUsize::new(0));
            let (dropper, holder) = pair::<_, u32>(cell(&dropped));
            let orphaned = Arc::new(AtomicBool::new(false));
            let dropped_first = Arc::new(AtomicBool::new(false));
            let other = {
                let (orphaned, dropped_first) = (orphaned.clone(), dropped_first.clone());
                std::thread::spawn(move || {
                    holder.clone().orphan();
                    orphaned.store(true, StdOrdering::Relaxed);
                    wait_for(&dropped_first);
                    std::hint::black_box(holder.header().id());
                    drop(holder);
                })
            };
            wait_for(&orphaned);
            drop(dropper);
            dropped_first.store(true, StdOrdering::Relaxed);
            other.join().unwrap();
            assert_eq!(dropped.load(StdOrdering::SeqCst), 1);
        }
    }

    /// Threads clone and drop pointers to one task at once; the cell is freed exactly once,
    /// after the last of them (Miri checks the frees).
    #[test]
    fn clones_dropped_on_many_threads_free_the_cell_once() {
        let threads = if cfg!(miri) { 3 } else { 4 };
        let rounds = if cfg!(miri) { 4 } else { 500 };
        for _ in 0..rounds {
            let dropped = Arc::new(AtomicUsize::new(0));
            let (typed, raw) = pair::<_, u32>(cell(&dropped));
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let mine = raw.clone();
                    std::thread::spawn(move || {
                        let more: Vec<_> = (0..i + 1).map(|_| mine.clone()).collect();
                        assert!(more.iter().all(|p| TaskPtr::ptr_eq(p, &mine)));
                        std::hint::black_box(mine.header().id());
                    })
                })
                .collect();
            drop(raw);
            for handle in handles {
                handle.join().unwrap();
            }
            assert_eq!(
                dropped.load(StdOrdering::SeqCst),
                0,
                "the future still holds it"
            );
            drop(typed);
            assert_eq!(dropped.load(StdOrdering::SeqCst), 1);
        }
    }
}

//! [`Guarded<T>`]: a value behind a lock that lives somewhere else. With the locks of `spin.rs`
//! and the task pointer of `task/ptr.rs`, the crate's only `unsafe` code.
//!
//! A task's body (its closure or result, and who waits on it) is behind a lock. As a
//! `Mutex<Body>`, the lock's byte sat in a word of its own: a word every pending timer paid for
//! (W1's bytes per timer). Then it was a byte of the task's header beside the state byte, and
//! a cancel or the start of a run paid two locked instructions: the state's compare-and-swap,
//! then the lock's. Now the lock is the top bit of the state byte itself (`task/state.rs`), so
//! one compare-and-swap both wins the task and locks its body; the body here is a bare cell
//! reached only by a holder of that bit.
//!
//! # Ground rules
//!
//! - A `Guarded<T>` is paired for life with one lock: every [`Guarded::with_held`] on it is made
//!   while the caller holds that lock (the caller promises it; a task's cell passes the proof
//!   of its own state's lock, `state::Held`, and checks it is its own).
//! - While the closure of `with_held` runs, no other reference to the value exists: this is a
//!   mutex whose lock is stored apart from its data.
//! - The closure runs no user code (the lock is held for a few stores).
//!
//! Under loom the state byte is a loom atomic and the cell is loom's `UnsafeCell`, which checks
//! every access against the lock's happens-before edges; the loom models of the task
//! (`loom/task.rs`, `loom/future.rs`, ...) drive every path here. The cell tests also run under
//! Miri.
#![allow(unsafe_code)]

#[cfg(not(wheelpool_loom))]
mod imp {
    pub(crate) use std::cell::UnsafeCell;

    /// Runs `f` on the cell's value as `&mut T`.
    ///
    /// # Safety
    /// No other reference to the value exists while `f` runs.
    #[inline]
    pub(crate) unsafe fn with_mut<T, R>(cell: &UnsafeCell<T>, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: exclusive for the duration of `f` (this function's contract).
        f(unsafe { &mut *cell.get() })
    }
}

#[cfg(wheelpool_loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;

    /// Runs `f` on the cell's value as `&mut T`; loom checks that no other access overlaps.
    ///
    /// # Safety
    /// No other reference to the value exists while `f` runs.
    pub(crate) unsafe fn with_mut<T, R>(cell: &UnsafeCell<T>, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: exclusive for the duration of `f` (this function's contract).
        cell.with_mut(|ptr| f(unsafe { &mut *ptr }))
    }
}

/// A value reached only under a lock kept elsewhere (see the ground rules).
pub(crate) struct Guarded<T> {
    value: imp::UnsafeCell<T>,
}

// SAFETY: as for `Mutex<T>`: a `&Guarded<T>` lends the value to one thread at a time, under the
// lock, so sharing it needs `T: Send` only (the value may be used, and dropped, on any thread).
unsafe impl<T: Send> Sync for Guarded<T> {}

impl<T> Guarded<T> {
    pub(crate) fn new(value: T) -> Self {
        Guarded {
            value: imp::UnsafeCell::new(value),
        }
    }

    /// Runs `f` on the value; the caller holds its lock.
    ///
    /// # Safety
    /// The caller holds the lock paired with this `Guarded` (see the ground rules) until `f`
    /// returns.
    #[inline]
    pub(crate) unsafe fn with_held<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: every access to this value holds its lock, which the caller holds until `f`
        // returns (this function's contract): nothing else reaches the value meanwhile.
        unsafe { imp::with_mut(&self.value, f) }
    }
}

impl<T> std::fmt::Debug for Guarded<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guarded")
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A value and the lock kept beside it.
    struct Pair {
        lock: Mutex<()>,
        value: Guarded<Vec<u64>>,
    }

    impl Pair {
        fn with<R>(&self, f: impl FnOnce(&mut Vec<u64>) -> R) -> R {
            let _held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: `value` is only ever reached with `lock` held, as here.
            unsafe { self.value.with_held(f) }
        }
    }

    #[test]
    fn threads_take_turns_and_nothing_is_lost() {
        let pair = Arc::new(Pair {
            lock: Mutex::new(()),
            value: Guarded::new(Vec::new()),
        });
        let threads = if cfg!(miri) { 3 } else { 4 };
        let per = if cfg!(miri) { 20 } else { 10_000 };
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let pair = Arc::clone(&pair);
                std::thread::spawn(move || {
                    for i in 0..per {
                        pair.with(|v| v.push(t * per + i));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let mut all = pair.with(std::mem::take);
        all.sort_unstable();
        assert_eq!(all, (0..threads * per).collect::<Vec<_>>());
    }
}

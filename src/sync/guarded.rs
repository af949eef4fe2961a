//! [`Guarded<T>`]: a value behind a [`ByteLock`] that lives somewhere else. With the lock itself
//! (`spin.rs`), the crate's only `unsafe` code.
//!
//! A task's body (its closure or result, and who waits on it) is behind a lock. As a
//! `Mutex<Body>`, the lock's byte sat in a word of its own: a word every pending timer paid for
//! (W1's bytes per timer). Here the lock is one byte of the task's header word, beside the
//! state, shard and id bytes, and the body is a bare cell that is reached only through the lock.
//!
//! # Ground rules
//!
//! - A `Guarded<T>` is paired for life with one `ByteLock`: every [`Guarded::with`] on it passes
//!   that lock (the caller promises it; a task's cell passes its own header's lock, and nothing
//!   else can name its body).
//! - `with` takes the lock, lends the value as `&mut T` to its closure, and unlocks when the
//!   closure returns or unwinds. So while the closure runs no other reference to the value
//!   exists: this is a mutex whose byte is stored apart from its data.
//! - The closure must not call `with` on the same pair again (it would wait for itself, as with
//!   a `Mutex`), and runs no user code (it is held for a few stores).
//!
//! The lock is a [`RawSpinLock`] (`spin.rs`): one byte, and an unlock that is a plain release
//! store. Under loom its byte is a loom atomic, and the cell is loom's `UnsafeCell`, which
//! checks every access against the lock's happens-before edges; the loom models of the task
//! (`loom/task.rs`, `loom/future.rs`, ...) drive every path here. The cell tests also run under
//! Miri.
#![allow(unsafe_code)]

use super::spin::RawSpinLock;

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

/// A one-byte lock for a [`Guarded`] value kept elsewhere (see the ground rules).
pub(crate) struct ByteLock(RawSpinLock);

impl ByteLock {
    #[allow(clippy::new_without_default)] // a lock has no meaningful default pairing
    pub(crate) fn new() -> Self {
        ByteLock(RawSpinLock::new())
    }
}

impl std::fmt::Debug for ByteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ByteLock")
    }
}

/// Unlocks on drop, so a panic inside [`Guarded::with`] leaves the lock free.
struct Unlock<'a>(&'a ByteLock);

impl Drop for Unlock<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: an `Unlock` is made only right after `lock()` returned in `Guarded::with`,
        // and dropped once, when that call ends: the lock is held by this context.
        unsafe { self.0 .0.unlock() };
    }
}

/// A value reached only through its [`ByteLock`] (see the ground rules).
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

    /// Runs `f` on the value with `lock` held; unlocks when `f` returns or unwinds.
    ///
    /// # Safety
    /// Every call on this `Guarded` passes the same `lock` (see the ground rules).
    #[inline]
    pub(crate) unsafe fn with<R>(&self, lock: &ByteLock, f: impl FnOnce(&mut T) -> R) -> R {
        lock.0.lock();
        let _unlock = Unlock(lock);
        // SAFETY: `lock` is held until `_unlock` drops, after `f` returns, and every access to
        // this value holds the same lock (this function's contract): nothing else reaches the
        // value meanwhile.
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
    use std::sync::Arc;

    struct Pair {
        lock: ByteLock,
        value: Guarded<Vec<u64>>,
    }

    impl Pair {
        fn with<R>(&self, f: impl FnOnce(&mut Vec<u64>) -> R) -> R {
            // SAFETY: `value` is only ever reached with `lock`.
            unsafe { self.value.with(&self.lock, f) }
        }
    }

    #[test]
    fn the_lock_is_one_byte() {
        assert_eq!(std::mem::size_of::<ByteLock>(), 1);
    }

    #[test]
    fn threads_take_turns_and_nothing_is_lost() {
        let pair = Arc::new(Pair {
            lock: ByteLock::new(),
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

    #[test]
    fn a_panic_inside_leaves_the_lock_free() {
        let pair = Pair {
            lock: ByteLock::new(),
            value: Guarded::new(vec![1]),
        };
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pair.with(|v| {
                v.push(2);
                panic!("inside");
            })
        }));
        assert!(caught.is_err());
        assert_eq!(pair.with(|v| v.clone()), [1, 2]);
    }
}

//! [`RawSpinLock`]: a one-byte lock whose unlock is a plain release store, and [`SpinMutex`], a
//! mutex over it. For the two locks every schedule and cancel takes: a task's body lock (a byte
//! of its header, `guarded.rs`) and a timer shard's lock.
//!
//! # Why not `parking_lot`'s mutex
//!
//! A lock that can park a waiter must learn, as it unlocks, whether anyone parked: `parking_lot`
//! unlocks with a compare-and-swap, a locked instruction (about 20 cycles on this project's
//! 2-core machine; and it waits for every store before it to drain, so after a wheel insert or
//! unlink it costs more than the stores it guards). A W2 pair (schedule a timeout, cancel the
//! oldest) took three such unlocks. This lock never parks, so unlocking is a store: in 11
//! alternating runs of W2, 4.81 M pairs/s against 4.42 M with `parking_lot` (medians; round by
//! round 1.10x, BENCHMARKS.md).
//!
//! # Ground rules
//!
//! - `lock` wins the byte with an Acquire compare-and-swap from free to held; `unlock` stores
//!   free with Release. The pair orders everything one holder did before the next holder's
//!   critical section, as a mutex does.
//! - What these locks guard is short and runs no user code: a task's body lock is held for a
//!   few stores; a shard's lock for an O(1) insert, unlink or reset, or for the driver's poll of
//!   at most `CHUNK` entries (tens of microseconds).
//! - A waiter never parks, so it must not burn a CPU that the holder needs: it spins with
//!   exponential backoff, then yields its time slice, and once that has gone on for a while (the
//!   holder was preempted: on a busy machine it may wait for a CPU for milliseconds) it sleeps
//!   `NAP` between tries, so a lock holder that lost its CPU is not held off it by waiters.
//! - Under loom the byte is a loom atomic and a waiter yields to loom's scheduler, so the models
//!   that take a task's body lock explore this very protocol; a shard's lock is loom's mutex
//!   there (`sync/mod.rs`).
#![allow(unsafe_code)]

use super::{AtomicBool, Ordering};
#[cfg(not(wheelpool_loom))]
use parking_lot::lock_api;

/// How long a waiter sleeps between tries once spinning and yielding have not got it the lock:
/// the holder has most likely lost its CPU, and a sleeping waiter leaves that CPU to it.
#[cfg(not(wheelpool_loom))]
const NAP: std::time::Duration = std::time::Duration::from_micros(20);

/// A one-byte lock; see the module's ground rules.
pub(crate) struct RawSpinLock {
    held: AtomicBool,
}

impl RawSpinLock {
    /// A free lock.
    #[cfg(not(wheelpool_loom))]
    pub(crate) const fn new() -> Self {
        RawSpinLock {
            held: AtomicBool::new(false),
        }
    }

    /// A free lock (loom's atomics are not `const`).
    #[cfg(wheelpool_loom)]
    pub(crate) fn new() -> Self {
        RawSpinLock {
            held: AtomicBool::new(false),
        }
    }

    /// Takes the lock, waiting (never parking) while another context holds it.
    #[inline]
    pub(crate) fn lock(&self) {
        if !self.try_lock() {
            self.lock_contended();
        }
    }

    /// Takes the lock if it is free; true if it did.
    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        // Acquire: pairs with the Release store of the previous `unlock`.
        self.held
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The lock is held, by this context.
    #[inline]
    pub(crate) unsafe fn unlock(&self) {
        // Release: pairs with the Acquire compare-and-swap of the next `lock`.
        self.held.store(false, Ordering::Release);
    }

    /// The wait: reads (not writes) the byte until it is free, backing off, then tries again.
    #[cold]
    #[cfg(not(wheelpool_loom))]
    fn lock_contended(&self) {
        let backoff = crossbeam_utils::Backoff::new();
        loop {
            // Relaxed: only a hint to try; the compare-and-swap below is what acquires.
            while self.held.load(Ordering::Relaxed) {
                if backoff.is_completed() {
                    std::thread::sleep(NAP);
                } else {
                    backoff.snooze();
                }
            }
            if self.try_lock() {
                return;
            }
        }
    }

    /// Under loom: yield to the model's scheduler until the byte is won.
    #[cold]
    #[cfg(wheelpool_loom)]
    fn lock_contended(&self) {
        while !self.try_lock() {
            loom::thread::yield_now();
        }
    }
}

// SAFETY: `try_lock`'s Acquire compare-and-swap lets one context at a time hold the byte, and
// `unlock`'s Release store hands what it did to the next holder: a mutex's promise. `unlock` is
// called only by the holder (lock_api's guard, and `RawMutex::unlock`'s own contract).
#[cfg(not(wheelpool_loom))]
unsafe impl lock_api::RawMutex for RawSpinLock {
    #[allow(clippy::declare_interior_mutable_const)] // lock_api's way to make a free lock
    const INIT: Self = RawSpinLock::new();
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        RawSpinLock::lock(self);
    }

    #[inline]
    fn try_lock(&self) -> bool {
        RawSpinLock::try_lock(self)
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock (this method's contract).
        unsafe { RawSpinLock::unlock(self) };
    }
}

/// A mutex over a [`RawSpinLock`] (`lock`, `try_lock`, a guard that unlocks on drop).
#[cfg(not(wheelpool_loom))]
pub(crate) type SpinMutex<T> = lock_api::Mutex<RawSpinLock, T>;

/// Its guard.
#[cfg(not(wheelpool_loom))]
pub(crate) type SpinMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawSpinLock, T>;

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn the_lock_is_one_byte() {
        assert_eq!(std::mem::size_of::<RawSpinLock>(), 1);
    }

    #[test]
    fn try_lock_fails_while_held_and_succeeds_after_unlock() {
        let m = SpinMutex::new(5);
        let guard = m.lock();
        assert!(m.try_lock().is_none());
        drop(guard);
        assert_eq!(*m.try_lock().expect("free after the guard dropped"), 5);
    }

    /// Threads (more than the machine's cores) add to plain counters under the lock: every
    /// increment is there at the end, and the two counters never differ when read under it.
    #[test]
    fn threads_take_turns_and_nothing_is_lost() {
        let threads = if cfg!(miri) { 3 } else { 6 };
        let per: u64 = if cfg!(miri) { 20 } else { 20_000 };
        let m = Arc::new(SpinMutex::new((0u64, 0u64)));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..per {
                        let mut g = m.lock();
                        assert_eq!(g.0, g.1, "two holders at once");
                        g.0 += 1;
                        g.1 += 1;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*m.lock(), (threads * per, threads * per));
    }

    /// A holder that keeps the lock for a long time (as a preempted one does) is waited for,
    /// through the spinning, yielding and sleeping stages, and the waiter then gets the lock.
    #[test]
    fn a_long_holder_is_waited_for() {
        let m = Arc::new(SpinMutex::new(0u32));
        let guard = m.lock();
        let waiter = {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                *m.lock() += 1;
            })
        };
        std::thread::sleep(Duration::from_millis(if cfg!(miri) { 1 } else { 20 }));
        drop(guard);
        waiter.join().unwrap();
        assert_eq!(*m.lock(), 1);
    }
}

//! Locks whose unlock is a plain release store, for the two locks every schedule and cancel
//! takes: [`RawSpinLock`], a task's body lock (a byte of its header, `guarded.rs`), and
//! [`RawShardLock`] under [`SpinMutex`], a timer shard's lock, by which the timer thread goes
//! first ([`lock_urgent`]).
//!
//! # Why not `parking_lot`'s mutex
//!
//! A lock that can park a waiter must learn, as it unlocks, whether anyone parked: `parking_lot`
//! unlocks with a compare-and-swap, a locked instruction (about 20 cycles on this project's
//! 2-core machine; and it waits for every store before it to drain, so after a wheel insert or
//! unlink it costs more than the stores it guards). A W2 pair (schedule a timeout, cancel the
//! oldest) took three such unlocks, two of them a shard's. These locks never park, so
//! unlocking is a store: in batches of 11 alternating runs of W2, round by round 1.10-1.12x the
//! pairs/s with `parking_lot` (1.02x with the body lock alone; BENCHMARKS.md).
//!
//! # Ground rules
//!
//! - `lock` wins the `held` byte with an Acquire compare-and-swap from free to held; `unlock`
//!   stores free with Release. The pair orders everything one holder did before the next
//!   holder's critical section, as a mutex does.
//! - What these locks guard is short and runs no user code: a task's body lock is held for a
//!   few stores; a shard's lock for an O(1) insert, unlink or reset (a slab that doubles copies
//!   its entries), or for the timer thread's poll of at most `CHUNK` entries (tens of
//!   microseconds). The one nesting is a reset's re-base: the body lock under the shard's lock,
//!   never the other way.
//! - A waiter never parks, so it must not burn a CPU that the holder needs: it spins with
//!   exponential backoff, then yields, then sleeps between tries, each nap twice the last from
//!   `NAP` up to `MAX_NAP` (a holder that waits that long has lost its CPU; on a busy machine it
//!   may wait for one for milliseconds, and napping waiters leave it the CPU).
//! - The timer thread is never passed over for good: a barging lock lets a thread that unlocks
//!   and locks again in a tight loop (a producer on its shard) win every time against a waiter
//!   that only sees the lock free now and then. The timer thread, whose wait
//!   holds up due timers, locks a shard with [`lock_urgent`]: it raises the shard's `urgent`
//!   byte, and `lock` does not take a lock whose `urgent` byte is up, so the timer thread waits
//!   for the current holder only. It never naps longer than `NAP`. Producers among themselves
//!   barge, as they did on `parking_lot`'s mutex between its fair unlocks.
//! - Under loom a body lock's byte is a loom atomic and a waiter yields to loom's scheduler, so
//!   the models that take a task's body lock explore its lock/unlock pair; a shard's lock is
//!   loom's mutex there (`sync/mod.rs`), and `lock_urgent` its plain `lock`. The waiting code
//!   (backoff, naps, `urgent`) runs in this file's unit tests, also under Miri.
#![allow(unsafe_code)]

use super::{AtomicBool, Ordering};
#[cfg(not(wheelpool_loom))]
use parking_lot::lock_api;
#[cfg(not(wheelpool_loom))]
use std::time::Duration;

/// The first nap of a waiter that spinning and yielding did not get the lock (see the ground
/// rules), and the longest nap of the timer thread's urgent wait.
#[cfg(not(wheelpool_loom))]
const NAP: Duration = Duration::from_micros(20);

/// The longest nap of an ordinary waiter: a holder off its CPU for longer costs its waiters at
/// most this much more, and a waiter wakes at most about a thousand times a second.
#[cfg(not(wheelpool_loom))]
const MAX_NAP: Duration = Duration::from_millis(1);

/// A one-byte lock (a task's body lock); see the module's ground rules.
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
        take(&self.held)
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The lock is held, by this context.
    #[inline]
    pub(crate) unsafe fn unlock(&self) {
        // Release: pairs with the Acquire compare-and-swap of the next `take`.
        self.held.store(false, Ordering::Release);
    }

    #[cold]
    fn lock_contended(&self) {
        self.lock_waiting(MaxNap::Growing, || false);
    }

    /// The wait of every contended lock: back off until the byte reads free and `blocked` says
    /// no (a shard's `urgent` byte, for an ordinary shard locker), then try; again until won.
    fn lock_waiting(&self, max: MaxNap, blocked: impl Fn() -> bool) {
        let mut wait = Wait::new(max);
        loop {
            wait.until_free(&self.held, &blocked);
            if take(&self.held) {
                return;
            }
        }
    }
}

/// Wins `held` from free to held; true if this call did.
#[inline]
fn take(held: &AtomicBool) -> bool {
    // Acquire: pairs with the Release store of the previous holder's `unlock`.
    held.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// How long a waiter's naps may grow (see the ground rules).
#[derive(Clone, Copy)]
enum MaxNap {
    /// An ordinary waiter: from `NAP` up to `MAX_NAP`.
    Growing,
    /// The timer thread: `NAP` at most (a shard's lock; under loom that is loom's mutex).
    #[cfg_attr(wheelpool_loom, allow(dead_code))]
    Short,
}

/// One waiter's backoff: spin, yield, then nap (outside loom); yield to loom's scheduler (under
/// loom).
struct Wait {
    #[cfg(not(wheelpool_loom))]
    backoff: crossbeam_utils::Backoff,
    #[cfg(not(wheelpool_loom))]
    nap: Duration,
    #[cfg(not(wheelpool_loom))]
    max: Duration,
}

impl Wait {
    fn new(max: MaxNap) -> Self {
        #[cfg(wheelpool_loom)]
        let _ = max;
        Wait {
            #[cfg(not(wheelpool_loom))]
            backoff: crossbeam_utils::Backoff::new(),
            #[cfg(not(wheelpool_loom))]
            nap: NAP,
            #[cfg(not(wheelpool_loom))]
            max: match max {
                MaxNap::Growing => MAX_NAP,
                MaxNap::Short => NAP,
            },
        }
    }

    /// Waits until `held` reads free and `blocked` says no (the `urgent` byte for an ordinary
    /// shard locker), reading and never writing, so waiters do not fight over the line.
    #[cfg(not(wheelpool_loom))]
    fn until_free(&mut self, held: &AtomicBool, blocked: &impl Fn() -> bool) {
        // Relaxed: only a hint to try; the caller's compare-and-swap is what acquires.
        while held.load(Ordering::Relaxed) || blocked() {
            if self.backoff.is_completed() {
                std::thread::sleep(self.nap);
                self.nap = (self.nap * 2).min(self.max);
            } else {
                self.backoff.snooze();
            }
        }
    }

    /// Under loom: let another thread run (the lock's holder among them).
    #[cfg(wheelpool_loom)]
    fn until_free(&mut self, _held: &AtomicBool, _blocked: &impl Fn() -> bool) {
        loom::thread::yield_now();
    }
}

/// A timer shard's lock: a [`RawSpinLock`], and an `urgent` byte by which the timer thread
/// goes before the producers (see the ground rules).
#[cfg(not(wheelpool_loom))]
pub(crate) struct RawShardLock {
    lock: RawSpinLock,
    urgent: AtomicBool,
}

#[cfg(not(wheelpool_loom))]
impl RawShardLock {
    #[cold]
    fn lock_contended(&self) {
        // Relaxed: `urgent` only steers who tries; the held byte decides.
        let urgent = || self.urgent.load(Ordering::Relaxed);
        self.lock.lock_waiting(MaxNap::Growing, urgent);
    }

    /// The timer thread's lock: producers stop taking the lock until it has it.
    fn lock_urgent(&self) {
        if self.lock.try_lock() {
            return;
        }
        // Relaxed: a hint to the other lockers; the held byte decides who holds the lock.
        self.urgent.store(true, Ordering::Relaxed);
        self.lock.lock_waiting(MaxNap::Short, || false);
        self.urgent.store(false, Ordering::Relaxed);
    }
}

// SAFETY: `take`'s Acquire compare-and-swap lets one context at a time hold the byte, and
// `unlock`'s Release store hands what it did to the next holder: a mutex's promise. `unlock`
// is called only by the holder (lock_api's guard, and `RawMutex::unlock`'s own contract).
#[cfg(not(wheelpool_loom))]
unsafe impl lock_api::RawMutex for RawShardLock {
    #[allow(clippy::declare_interior_mutable_const)] // lock_api's way to make a free lock
    const INIT: Self = RawShardLock {
        lock: RawSpinLock::new(),
        urgent: AtomicBool::new(false),
    };
    // As `parking_lot`'s and loom's: a guard stays on the thread that locked.
    type GuardMarker = lock_api::GuardNoSend;

    #[inline]
    fn lock(&self) {
        // Relaxed: a hint; a stale reading only lets this call barge once more.
        if self.urgent.load(Ordering::Relaxed) || !self.lock.try_lock() {
            self.lock_contended();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.lock.try_lock()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock (this method's contract), so its byte is held.
        unsafe { self.lock.unlock() };
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Relaxed: a snapshot, as lock_api documents it (the default would lock to find out).
        self.lock.held.load(Ordering::Relaxed)
    }
}

/// A mutex over a [`RawShardLock`] (`lock`, `try_lock`, a guard that unlocks on drop).
#[cfg(not(wheelpool_loom))]
pub(crate) type SpinMutex<T> = lock_api::Mutex<RawShardLock, T>;

/// Its guard.
#[cfg(not(wheelpool_loom))]
pub(crate) type SpinMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawShardLock, T>;

/// Locks `mutex` for the timer thread: it waits for the current holder only, not for producers
/// that would take the lock after it (see the ground rules).
#[cfg(not(wheelpool_loom))]
pub(crate) fn lock_urgent<T>(mutex: &SpinMutex<T>) -> SpinMutexGuard<'_, T> {
    // SAFETY: `raw()` is used only to take the lock here, and the lock is held when
    // `make_guard_unchecked` makes the guard that will release it.
    unsafe {
        mutex.raw().lock_urgent();
        mutex.make_guard_unchecked()
    }
}

/// Under loom a shard's lock is loom's mutex: no priority to model.
#[cfg(wheelpool_loom)]
pub(crate) fn lock_urgent<T>(mutex: &super::Mutex<T>) -> super::MutexGuard<'_, T> {
    mutex.lock()
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Whether a shard lock's `urgent` byte is up.
    fn urgent_raised<T>(m: &SpinMutex<T>) -> bool {
        // SAFETY: the raw lock is only read here, never locked or unlocked through.
        unsafe { m.raw() }.urgent.load(Ordering::Relaxed)
    }

    #[test]
    fn the_body_lock_is_one_byte() {
        assert_eq!(std::mem::size_of::<RawSpinLock>(), 1);
    }

    #[test]
    fn try_lock_fails_while_held_and_succeeds_after_unlock() {
        let m = SpinMutex::new(5);
        let guard = m.lock();
        assert!(m.try_lock().is_none());
        assert!(m.is_locked());
        drop(guard);
        assert!(!m.is_locked());
        assert_eq!(*m.try_lock().expect("free after the guard dropped"), 5);
        let body = RawSpinLock::new();
        body.lock();
        assert!(!body.try_lock());
        // SAFETY: locked just above, by this thread.
        unsafe { body.unlock() };
        assert!(body.try_lock());
    }

    /// Threads (more than the machine's cores) add to plain counters under the lock, one of
    /// them as the timer thread does: every increment is there at the end, and the two counters
    /// never differ when read under the lock.
    #[test]
    fn threads_take_turns_and_nothing_is_lost() {
        let threads = if cfg!(miri) { 3 } else { 6 };
        let per: u64 = if cfg!(miri) { 20 } else { 20_000 };
        let m = Arc::new(SpinMutex::new((0u64, 0u64)));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..per {
                        let mut g = if t == 0 { lock_urgent(&m) } else { m.lock() };
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

    /// The same for the body lock.
    #[test]
    fn body_lock_holders_take_turns() {
        struct Shared {
            lock: RawSpinLock,
            a: AtomicU64,
            b: AtomicU64,
        }
        let threads = if cfg!(miri) { 3 } else { 6 };
        let per: u64 = if cfg!(miri) { 20 } else { 20_000 };
        let s = Arc::new(Shared {
            lock: RawSpinLock::new(),
            a: AtomicU64::new(0),
            b: AtomicU64::new(0),
        });
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    for _ in 0..per {
                        s.lock.lock();
                        // Two Relaxed read-then-writes: only the lock keeps them from mixing.
                        let a = s.a.load(Ordering::Relaxed);
                        assert_eq!(a, s.b.load(Ordering::Relaxed), "two holders at once");
                        s.a.store(a + 1, Ordering::Relaxed);
                        s.b.store(a + 1, Ordering::Relaxed);
                        // SAFETY: locked above, by this thread.
                        unsafe { s.lock.unlock() };
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(s.a.load(Ordering::Relaxed), threads * per);
    }

    /// A holder that keeps the lock for a long time (as a preempted one does) is waited for,
    /// through the spinning, yielding and napping stages, by an ordinary and an urgent waiter.
    #[test]
    fn a_long_holder_is_waited_for() {
        let m = Arc::new(SpinMutex::new(0u32));
        let guard = m.lock();
        let waiters: Vec<_> = [false, true]
            .into_iter()
            .map(|urgent| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    let mut g = if urgent { lock_urgent(&m) } else { m.lock() };
                    *g += 1;
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(if cfg!(miri) { 1 } else { 20 }));
        drop(guard);
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(*m.lock(), 2);
        assert!(!urgent_raised(&m), "urgent is lowered");
    }

    /// While the timer thread waits, producers that come later do not take the lock: with the
    /// lock held and `urgent` raised, an ordinary `lock` waits until the urgent locker is done.
    #[test]
    fn an_urgent_waiter_goes_before_later_lockers() {
        let m = Arc::new(SpinMutex::new(Vec::new()));
        let guard = m.lock();
        let urgent = {
            let m = Arc::clone(&m);
            std::thread::spawn(move || lock_urgent(&m).push("urgent"))
        };
        // Bounded poll for the urgent waiter to raise its flag (it may take a while to run).
        let raised = std::time::Instant::now();
        while !urgent_raised(&m) {
            assert!(
                raised.elapsed() < Duration::from_secs(60),
                "urgent never raised"
            );
            std::thread::yield_now();
        }
        let later = {
            let m = Arc::clone(&m);
            std::thread::spawn(move || m.lock().push("later"))
        };
        drop(guard);
        urgent.join().unwrap();
        later.join().unwrap();
        assert_eq!(*m.lock(), ["urgent", "later"]);
    }
}

//! Locks whose unlock is a plain release store. [`RawShardLock`] under [`SpinMutex`] is a timer
//! shard's lock, which every schedule and cancel takes and by which the timer thread goes first
//! ([`lock_urgent`]); its byte is a [`RawSpinLock`]. A task's body lock is the top bit of the
//! task's state byte (`task/state.rs`); it waits as these do, through [`backoff_until`].
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
//! - Under loom a shard's lock is loom's mutex (`sync/mod.rs`), and `lock_urgent` its plain
//!   `lock`; a body lock's waiter blocks on a loom mutex and condvar beside the state byte
//!   (`task/state.rs`), so the models that take a task's body lock explore its byte protocol
//!   without spinning. The waiting code (backoff, naps, `urgent`) runs in this file's unit
//!   tests, also under Miri.
#![allow(unsafe_code)]

#[cfg(not(wheelpool_loom))]
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

/// A one-byte lock (a shard lock's byte); see the module's ground rules.
#[cfg(not(wheelpool_loom))]
pub(crate) struct RawSpinLock {
    held: AtomicBool,
}

#[cfg(not(wheelpool_loom))]
impl RawSpinLock {
    /// A free lock.
    pub(crate) const fn new() -> Self {
        RawSpinLock {
            held: AtomicBool::new(false),
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

    /// The wait of every contended lock: back off until the byte reads free and `blocked` says
    /// no (a shard's `urgent` byte, for an ordinary shard locker), then try; again until won.
    fn lock_waiting(&self, max: MaxNap, blocked: impl Fn() -> bool) {
        let mut wait = Wait::new(max);
        loop {
            // Relaxed: only a hint to try; the compare-and-swap in `take` is what acquires.
            wait.until(|| !self.held.load(Ordering::Relaxed) && !blocked());
            if take(&self.held) {
                return;
            }
        }
    }
}

/// Wins `held` from free to held; true if this call did.
#[cfg(not(wheelpool_loom))]
#[inline]
fn take(held: &AtomicBool) -> bool {
    // Acquire: pairs with the Release store of the previous holder's `unlock`.
    held.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

/// How long a waiter's naps may grow (see the ground rules).
#[cfg(not(wheelpool_loom))]
#[derive(Clone, Copy)]
enum MaxNap {
    /// An ordinary waiter: from `NAP` up to `MAX_NAP`.
    Growing,
    /// The timer thread: `NAP` at most.
    Short,
}

/// One waiter's backoff: spin, yield, then nap (see the ground rules).
#[cfg(not(wheelpool_loom))]
struct Wait {
    backoff: crossbeam_utils::Backoff,
    nap: Duration,
    max: Duration,
}

#[cfg(not(wheelpool_loom))]
impl Wait {
    fn new(max: MaxNap) -> Self {
        Wait {
            backoff: crossbeam_utils::Backoff::new(),
            nap: NAP,
            max: match max {
                MaxNap::Growing => MAX_NAP,
                MaxNap::Short => NAP,
            },
        }
    }

    /// Waits until `ready` says yes (a lock byte reads free and, for an ordinary shard
    /// locker, the `urgent` byte is down), reading and never writing, so waiters do not fight
    /// over the line: a spin or a yield while the backoff lasts, then naps, each twice the last
    /// (up to the cap). A waiter that keeps its `Wait` across failed tries keeps its nap.
    fn until(&mut self, ready: impl Fn() -> bool) {
        while !ready() {
            if self.backoff.is_completed() {
                std::thread::sleep(self.nap);
                self.nap = (self.nap * 2).min(self.max);
            } else {
                self.backoff.snooze();
            }
        }
    }
}

/// Waits, as a lock's waiter does (spin, yield, then nap), until `ready` says yes: for a
/// lock kept elsewhere, such as the body lock in a task's state byte (`task/state.rs`).
/// `ready` only reads; the caller's compare-and-swap, tried after, is what acquires.
#[cfg(not(wheelpool_loom))]
pub(crate) fn backoff_until(ready: impl Fn() -> bool) {
    Wait::new(MaxNap::Growing).until(ready);
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
    use std::sync::Arc;

    /// Whether a shard lock's `urgent` byte is up.
    fn urgent_raised<T>(m: &SpinMutex<T>) -> bool {
        // SAFETY: the raw lock is only read here, never locked or unlocked through.
        unsafe { m.raw() }.urgent.load(Ordering::Relaxed)
    }

    #[test]
    fn the_lock_byte_is_one_byte() {
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

    /// `backoff_until` returns once its condition holds, through spinning, yielding and
    /// napping, and at once if it already does.
    #[test]
    fn backoff_until_waits_for_its_condition() {
        backoff_until(|| true);
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let flag = Arc::clone(&flag);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(if cfg!(miri) { 1 } else { 20 }));
                flag.store(true, Ordering::Release);
            })
        };
        backoff_until(|| flag.load(Ordering::Acquire));
        assert!(flag.load(Ordering::Relaxed));
        setter.join().unwrap();
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

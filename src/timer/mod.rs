//! The timer side: the clock, the submission and cancel queues, and the timer thread (driver)
//! that owns the wheel.
//!
//! # Ground rules (driver sleep vs. new deadlines)
//!
//! - `sleep_until` holds the tick the driver will sleep until, or `AWAKE` while it works. Only the
//!   driver stores a sleep tick; anyone may swap it to `AWAKE` (and then must unpark the driver).
//! - A producer pushes a task on `submissions`, then `fence(SeqCst)`, then reads `sleep_until`:
//!   if its deadline tick is earlier, it CASes `sleep_until` to `AWAKE` and unparks the driver.
//!   Only the CAS winner unparks: a burst of early deadlines costs one wake-up.
//! - The driver stores its sleep tick, then `fence(SeqCst)`, then re-checks `submissions`; if
//!   anything is there it does not park. With the two fences, either the driver sees the push or
//!   the producer sees the sleep tick: a deadline submitted while the driver goes to sleep is
//!   never slept through.
//! - The parker keeps one token, so an unpark that lands before the park is not lost.
//! - Cancels go to `cancels`; every `CANCEL_BATCH`-th one wakes the driver to unlink them, so the
//!   memory of cancelled timers never waits for their deadlines.

mod clock;
pub(crate) mod driver;

pub use clock::ManualClock;
pub(crate) use clock::{duration_nanos, mark_pool_thread, Clock, ClockListener, TimeBase};

use crate::sync::{fence, AtomicU64, AtomicUsize, Condvar, Injector, Mutex, Ordering, Parker};
use crate::task::TaskRef;

/// `sleep_until` while the driver is awake: no deadline tick is earlier, so nobody wakes it.
const AWAKE: u64 = 0;

/// How many cancelled timers may wait before the driver is woken to unlink them. Each holds only
/// the task's header and a wheel entry (the closure is already dropped), so 1024 of them are a
/// few tens of KiB; a larger batch wakes the driver less often under churn.
const CANCEL_BATCH: usize = 1024;

/// What producers share with the timer thread.
#[derive(Debug)]
pub(crate) struct Timer {
    pub(crate) time: TimeBase,
    submissions: Injector<TaskRef>,
    cancels: Injector<TaskRef>,
    cancels_queued: AtomicUsize,
    sleep_until: AtomicU64,
    parker: Parker,
    /// Only with a manual clock: how `ManualClock::advance` waits for the pool to settle.
    pub(crate) settle: Option<Settle>,
}

impl Timer {
    pub(crate) fn new(time: TimeBase) -> Self {
        let settle = time.clock.is_manual().then(Settle::new);
        Timer {
            time,
            submissions: Injector::new(),
            cancels: Injector::new(),
            cancels_queued: AtomicUsize::new(0),
            sleep_until: AtomicU64::new(AWAKE),
            parker: Parker::new(),
            settle,
        }
    }

    /// Hands a `SCHEDULED` task to the timer thread for the deadline in its header.
    pub(crate) fn submit(&self, task: TaskRef) {
        let tick = self.time.tick_ceil(task.header().deadline());
        self.submissions.push(task);
        if let Some(s) = &self.settle {
            // Counted after the push: a driver that has seen the count has seen the task.
            s.submitted.fetch_add(1, Ordering::SeqCst);
        }
        // SeqCst fence: pairs with the one in `Driver::prepare_sleep` (see the ground rules).
        fence(Ordering::SeqCst);
        self.wake_if_before(tick);
    }

    /// Wakes the driver if it sleeps past `tick`.
    fn wake_if_before(&self, tick: u64) {
        let mut sleeping = self.sleep_until.load(Ordering::Relaxed);
        while tick < sleeping {
            match self.sleep_until.compare_exchange_weak(
                sleeping,
                AWAKE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return self.parker.unpark(),
                Err(now) => sleeping = now,
            }
        }
    }

    /// Wakes the driver unconditionally (shutdown, manual clock, cancel batches).
    pub(crate) fn wake(&self) {
        self.sleep_until.store(AWAKE, Ordering::Relaxed);
        self.parker.unpark();
    }

    /// A waiting task was cancelled: its wheel entry should be unlinked soon.
    pub(crate) fn cancelled(&self, task: TaskRef) {
        // Count before the push: the driver subtracts what it drained, so a task it can drain
        // must already be counted, or the counter wraps below zero (loom_periodic found it).
        let queued = self.cancels_queued.fetch_add(1, Ordering::Relaxed) + 1;
        self.cancels.push(task);
        if queued % CANCEL_BATCH == 0 {
            self.wake();
        }
    }
}

/// The manual clock's view of a pool: has everything due run, and what is next?
#[derive(Debug)]
pub(crate) struct Settle {
    status: Mutex<SettleStatus>,
    changed: Condvar,
    /// Tasks handed to the workers and not yet finished (re-arm included).
    in_pool: AtomicUsize,
    /// Submissions pushed so far.
    submitted: AtomicU64,
}

#[derive(Debug, Default)]
struct SettleStatus {
    /// Settle requests made / the latest one a finished driver pass had seen.
    requested: u64,
    completed: u64,
    /// Of the latest finished pass: tasks it dispatched, submissions it had drained, next deadline.
    dispatched: usize,
    drained: u64,
    next: Option<u64>,
}

impl Settle {
    fn new() -> Self {
        Settle {
            status: Mutex::new(SettleStatus::default()),
            changed: Condvar::new(),
            in_pool: AtomicUsize::new(0),
            submitted: AtomicU64::new(0),
        }
    }

    /// `n` tasks are about to be handed to the workers.
    pub(crate) fn entering_pool(&self, n: usize) {
        self.in_pool.fetch_add(n, Ordering::SeqCst);
    }

    /// A task handed to the workers has finished (after any re-arm was submitted).
    pub(crate) fn left_pool(&self) {
        if self.in_pool.fetch_sub(1, Ordering::SeqCst) == 1 {
            let _status = self.status.lock();
            self.changed.notify_all();
        }
    }
}

impl ClockListener for crate::pool::Core {
    fn settle(&self) -> Option<std::time::Instant> {
        let timer = &self.timer;
        let s = timer.settle.as_ref()?;
        loop {
            let req = {
                let mut st = s.status.lock();
                st.requested += 1;
                st.requested
            };
            timer.wake();
            let mut st = s.status.lock();
            while (st.completed < req || s.in_pool.load(Ordering::SeqCst) != 0)
                && !self.driver_gone()
            {
                st = crate::sync::wait_until(&s.changed, st, None);
            }
            if self.driver_gone() {
                return None;
            }
            if st.dispatched == 0 && st.drained == s.submitted.load(Ordering::SeqCst) {
                return st.next.map(|n| timer.time.instant_of(n));
            }
        }
    }

    fn time_moved(&self) {
        self.timer.wake();
    }
}

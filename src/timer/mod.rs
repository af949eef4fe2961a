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
//! - The direct path: the wheel sits under a lock that the driver holds only for the
//!   bookkeeping part of a pass, and the driver announces its sleep tick *under that lock*. A
//!   producer that wins `try_lock` inserts into the wheel itself, unlocks, then reads
//!   `sleep_until`. Either the driver's next locked section comes after ours (it sees the entry
//!   when it computes its next expiration), or its last one came before (then the lock orders
//!   its announced tick before our read, and we wake it if our deadline is earlier). A producer
//!   that loses `try_lock` uses the queue protocol above. A cancel unlinks directly the same
//!   way, so the canceller, not the timer thread, drops the last reference (memory freed on the
//!   thread that allocated it). Producers never block on the lock.
//! - The direct path is closed (under the lock) with a manual clock and once a shutdown begins:
//!   then every insert goes through the queue, where `settle` counts it and the driver stops
//!   late periodic re-arms.
//! - Cancels that lose `try_lock` go to `cancels`; every `CANCEL_BATCH`-th one wakes the driver
//!   to unlink them, so the memory of cancelled timers never waits for their deadlines.

mod clock;
pub(crate) mod driver;

pub use clock::ManualClock;
pub(crate) use clock::{duration_nanos, mark_pool_thread, Clock, ClockListener, TimeBase};

use crate::sync::{
    fence, AtomicBool, AtomicU64, AtomicUsize, Condvar, Injector, Mutex, Ordering, Parker,
};
use crate::task::TaskRef;
use crate::wheel::{Key, Wheel};

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
    /// The wheel. The timer thread holds the lock for the bookkeeping part of its pass (never
    /// while it dispatches or sleeps); producers only `try_lock` it, to insert or unlink without
    /// involving the timer thread, and fall back to the queues when it is busy.
    pub(crate) wheel: Mutex<Wheel<TaskRef>>,
    /// True while producers may insert into the wheel directly. False with a manual clock (so
    /// `settle` sees every submission go through the counted queue) and from a shutdown on (so
    /// the timer thread sees every late re-arm). Read and written only under `wheel`'s lock.
    direct: AtomicBool,
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
        let direct = settle.is_none();
        Timer {
            time,
            wheel: Mutex::new(Wheel::new()),
            direct: AtomicBool::new(direct),
            submissions: Injector::new(),
            cancels: Injector::new(),
            cancels_queued: AtomicUsize::new(0),
            sleep_until: AtomicU64::new(AWAKE),
            parker: Parker::new(),
            settle,
        }
    }

    /// Puts a `SCHEDULED` task in the wheel for the deadline in its header: directly if the
    /// wheel's lock is free, else through the submission queue.
    pub(crate) fn submit(&self, task: &TaskRef) {
        let tick = self.time.tick_ceil(task.header().deadline());
        if let Some(mut wheel) = self.wheel.try_lock() {
            // Relaxed: `direct` is only touched under the wheel's lock.
            if self.direct.load(Ordering::Relaxed) {
                insert_unless_cancelled(&mut wheel, tick, task);
                drop(wheel);
                // After the unlock: the driver announces its sleep tick under the lock, so this
                // read sees the tick of any pass that did not see our entry (ground rules).
                self.wake_if_before(tick);
                return;
            }
        }
        self.submissions.push(task.clone());
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

    /// Closes the direct path: from now on producers go through the queues. The timer thread
    /// calls it, holding the wheel's lock, when the pool starts shutting down.
    pub(crate) fn close_direct(&self, _wheel: &mut Wheel<TaskRef>) {
        self.direct.store(false, Ordering::Relaxed);
    }

    /// A waiting task was cancelled: its wheel entry is unlinked now if the wheel's lock is
    /// free (so the canceller, not the timer thread, drops the last reference and frees the
    /// memory it allocated), else soon, through the cancel queue.
    pub(crate) fn cancelled(&self, task: TaskRef) {
        if let Some(mut wheel) = self.wheel.try_lock() {
            let removed = unlink(&mut wheel, &task);
            drop(wheel);
            drop(removed);
            return;
        }
        // Count before the push: the driver subtracts what it drained, so a task it can drain
        // must already be counted, or the counter wraps below zero (loom_periodic found it).
        let queued = self.cancels_queued.fetch_add(1, Ordering::Relaxed) + 1;
        self.cancels.push(task);
        if queued % CANCEL_BATCH == 0 {
            self.wake();
        }
    }
}

impl Timer {
    /// Moves a waiting task's next run to `deadline` (nanoseconds since the origin): true if it
    /// was in the wheel and now waits for the new deadline; false (nothing changed) if it is not
    /// in the wheel (running, finished, cancelled, already handed to the workers, or still in
    /// the submission queue).
    ///
    /// Under the wheel's lock, a `SCHEDULED` task with a live key cannot be dispatched (the
    /// driver expires entries under this lock) nor unlinked by a cancel (that takes the lock
    /// too, or queues an unlink by key for the driver, who takes it later and finds the new
    /// key). A cancel that wins the state between our check and the re-insert makes
    /// `insert_unless_cancelled` refuse it: the entry is gone, as the cancel wanted.
    pub(crate) fn reset(&self, task: &TaskRef, deadline: u64) -> bool {
        let tick = self.time.tick_ceil(deadline);
        let mut wheel = self.wheel.lock();
        let header = task.header();
        if header.state.load() != crate::task::state::SCHEDULED {
            return false;
        }
        let key = header.wheel_key();
        if key == crate::task::NO_KEY {
            return false; // not in the wheel
        }
        // Not `unlink`: it would shrink a wheel this entry leaves empty, for nothing.
        let Some(old) = wheel.remove(Key::from_u64(key)) else {
            return false; // a stale key: the entry is gone
        };
        header.set_wheel_key(crate::task::NO_KEY);
        header.set_deadline(deadline);
        task.rebase(deadline);
        let placed = insert_unless_cancelled(&mut wheel, tick, task);
        drop(wheel);
        drop(old);
        if placed {
            if let Some(s) = &self.settle {
                // Counted like a submission, after the move: a settling `ManualClock` whose
                // last pass started before this count takes another pass (its `next` may be
                // stale, e.g. when a task resets another while the driver polls). SeqCst:
                // pairs with the loads in `Driver::settle_submitted` and `settle`, as in `submit`.
                s.submitted.fetch_add(1, Ordering::SeqCst);
            }
            // After the unlock, as in `submit`'s direct path: the driver announces its sleep
            // tick under the lock, so this read sees the tick of any pass that missed the move.
            self.wake_if_before(tick);
        }
        placed
    }
}

/// Inserts `task` for `tick` and records its key, unless a cancel won it first. Called under the
/// wheel's lock. A cancel that wins after the state check unlinks the entry by the key recorded
/// here: directly (it takes the lock after us) or through the cancel queue (it pushes after its
/// CAS, and the driver drains cancels after this insert).
pub(crate) fn insert_unless_cancelled(
    wheel: &mut Wheel<TaskRef>,
    tick: u64,
    task: &TaskRef,
) -> bool {
    if task.header().state.load() != crate::task::state::SCHEDULED {
        return false; // cancelled in transit: the canceller has accounted for it
    }
    let key = wheel.insert(tick, task.clone());
    task.header().set_wheel_key(key.to_u64());
    true
}

/// Removes `task`'s wheel entry, if it has a live one; returns the wheel's reference so the
/// caller drops it after unlocking. Called under the wheel's lock.
pub(crate) fn unlink(wheel: &mut Wheel<TaskRef>, task: &TaskRef) -> Option<TaskRef> {
    let key = task.header().wheel_key();
    if key == crate::task::NO_KEY {
        return None; // still in the submission queue, or already dispatched
    }
    task.header().set_wheel_key(crate::task::NO_KEY);
    // A stale key (the entry fired, the slot was reused) is refused by its generation.
    let removed = wheel.remove(Key::from_u64(key));
    if removed.is_some() && wheel.is_empty() {
        wheel.shrink_to_fit();
    }
    removed
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
            // SeqCst: pairs with `entering_pool`/`left_pool`; the decrement to zero notifies
            // under `status`' lock, so this check under the same lock loses no wake-up.
            while (st.completed < req || s.in_pool.load(Ordering::SeqCst) != 0)
                && !self.driver_gone()
            {
                st = crate::sync::wait_until(&s.changed, st, None);
            }
            if self.driver_gone() {
                return None;
            }
            // SeqCst: pairs with the increment after the push in `Timer::submit`.
            if st.dispatched == 0 && st.drained == s.submitted.load(Ordering::SeqCst) {
                return st.next.map(|n| timer.time.instant_of(n));
            }
        }
    }

    fn time_moved(&self) {
        self.timer.wake();
    }
}

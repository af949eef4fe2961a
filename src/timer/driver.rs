//! The timer thread: owns the wheel, turns submissions into wheel entries, unlinks cancelled
//! ones, and hands due tasks to the workers in batches. It never runs user code.
//!
//! One pass of the loop: drain submissions, drain cancels, poll the wheel at "now", dispatch what
//! is due, then sleep until the wheel's next expiration (see the ground rules in `timer/mod.rs`).
//! An empty wheel sleeps without a time limit: an idle pool makes no periodic wake-ups.

use super::{Timer, AWAKE, CANCEL_BATCH};
use crate::pool::{Core, Lifecycle};
use crate::sync::{fence, steal_retrying, Arc, MutexGuard, Ordering};
use crate::task::{state, PendingTask, TaskRef};
use crate::wheel::Wheel;

/// The timer thread's own state. The wheel itself lives in `Timer::wheel`, under a lock the
/// driver holds for the bookkeeping part of each pass.
pub(crate) struct Driver {
    core: Arc<Core>,
    /// Scratch space for due tasks, reused across passes.
    due: Vec<TaskRef>,
    /// Periodic tasks in the wheel have been stopped for a graceful shutdown.
    swept_for_shutdown: bool,
}

#[cfg(not(loom))]
std::thread_local! {
    /// On a timer thread: the address of its pool's `Core` (0 elsewhere).
    static TIMER_OF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
#[cfg(loom)]
loom::thread_local! {
    static TIMER_OF: std::cell::Cell<usize> = std::cell::Cell::new(0);
}

/// True on `core`'s own timer thread.
pub(crate) fn on_timer_thread_of(core: &Core) -> bool {
    TIMER_OF.with(|t| t.get() == core as *const Core as usize)
}

/// The timer thread's body.
pub(crate) fn run(core: Arc<Core>) {
    super::mark_pool_thread();
    TIMER_OF.with(|t| t.set(Arc::as_ptr(&core) as usize));
    Driver::new(core).run();
}

impl Driver {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Driver {
            core,
            due: Vec::new(),
            swept_for_shutdown: false,
        }
    }

    fn timer(&self) -> &Timer {
        &self.core.timer
    }

    /// The wheel, locked (for the loom models, which step a pass by hand).
    #[cfg_attr(not(loom), allow(dead_code))]
    pub(crate) fn wheel(&self) -> MutexGuard<'_, Wheel<TaskRef>> {
        self.core.timer.wheel.lock()
    }

    fn run(&mut self) {
        loop {
            self.mark_awake();
            let settle_req = self.settle_requested();
            let life = self.core.lifecycle();
            if life == Lifecycle::Stop {
                self.stop_now();
                break;
            }
            let drained = self.settle_submitted();
            let next = self.bookkeeping(life);
            let dispatched = self.dispatch();
            if life == Lifecycle::Shutdown && self.core.outstanding() == 0 {
                break;
            }
            self.settle_report(settle_req, dispatched, drained, next);
            self.sleep(next);
        }
    }

    /// The locked part of a pass: queues into the wheel, expired entries out, and the sleep tick
    /// announced before the lock is released. Returns the wheel's next expiration.
    pub(crate) fn bookkeeping(&mut self, life: Lifecycle) -> Option<u64> {
        let core = self.core.clone();
        let mut wheel = core.timer.wheel.lock();
        self.drain_into(&mut wheel, life);
        if life == Lifecycle::Shutdown && !self.swept_for_shutdown {
            self.sweep_periodic(&mut wheel);
        }
        let now = core.timer.time.tick_floor(core.timer.time.now_nanos());
        wheel.poll_expired(now, &mut self.due);
        // These left the wheel: their keys are stale now. The generation check would refuse
        // them, but a slot reused 2^32 times could match again; a cleared key never does.
        for task in &self.due {
            task.header().set_wheel_key(crate::task::NO_KEY);
        }
        let next = wheel.next_expiration();
        // Under the lock: a producer that inserts directly after we unlock reads this tick and
        // wakes us if its deadline is earlier (ground rules in timer/mod.rs).
        self.announce(next);
        next
    }

    /// Starts a pass: the driver is awake, so no producer needs to wake it.
    pub(crate) fn mark_awake(&self) {
        self.timer().sleep_until.store(AWAKE, Ordering::Relaxed);
    }

    /// Publishes the tick the driver will sleep until.
    pub(crate) fn announce(&self, next: Option<u64>) {
        // A next tick of 0 would read as AWAKE; it cannot happen after polling at now >= 0, but
        // clamp so a producer's comparison stays meaningful.
        let tick = next.unwrap_or(u64::MAX).max(AWAKE + 1);
        self.timer().sleep_until.store(tick, Ordering::Relaxed);
    }

    /// Parks until the wheel tick `next` (`None`: no time limit), a wake-up, or an earlier
    /// submission; returns at once if `prepare_sleep` finds work already queued.
    pub(crate) fn sleep(&self, next: Option<u64>) {
        if self.prepare_sleep(next) {
            let deadline = match (&self.timer().settle, next) {
                (None, Some(tick)) => {
                    let time = &self.timer().time;
                    Some(time.instant_of(time.nanos_of_tick(tick)))
                }
                _ => None,
            };
            self.timer().parker.park(deadline);
        }
    }

    /// Announces the sleep tick and re-checks the queues; false if the driver must not park.
    fn prepare_sleep(&self, next: Option<u64>) -> bool {
        let timer = self.timer();
        self.announce(next);
        // SeqCst fence: pairs with the fence in `Timer::submit` (ground rules in timer/mod.rs).
        fence(Ordering::SeqCst);
        timer.submissions.is_empty() && timer.cancels_queued.load(Ordering::Relaxed) < CANCEL_BATCH
    }

    /// Submissions into the wheel, then cancels out of it.
    fn drain_into(&mut self, wheel: &mut Wheel<TaskRef>, life: Lifecycle) {
        let core = self.core.clone();
        if life != Lifecycle::Running {
            core.timer.close_direct(wheel);
        }
        // At most a batch per pass: while the driver holds the lock every producer queues, and an
        // unbounded drain could keep it from ever polling the wheel. What is left keeps the
        // driver from parking (`prepare_sleep`), so the next pass takes it.
        drain_queue_up_to(&core.timer.submissions, DRAIN_BATCH, |task| {
            self.place(wheel, task, life)
        });
        let mut drained = 0;
        drain_queue(&core.timer.cancels, |task| {
            drained += 1;
            drop(super::unlink(wheel, &task));
        });
        if drained > 0 {
            core.timer
                .cancels_queued
                .fetch_sub(drained, Ordering::Relaxed);
        }
    }

    /// Puts a submitted task in the wheel, unless it was cancelled on its way here or it is a
    /// periodic task arriving after a shutdown.
    fn place(&mut self, wheel: &mut Wheel<TaskRef>, task: TaskRef, life: Lifecycle) {
        let header = task.header();
        if life == Lifecycle::Shutdown && header.is_periodic() {
            // A worker stops it (`Core::run_task`): stopping drops the closure and wakes the
            // future, which is user code, and the timer thread runs none (least of all here,
            // under the wheel's lock).
            self.due.push(task);
            return;
        }
        let tick = self.timer().time.tick_ceil(header.deadline());
        super::insert_unless_cancelled(wheel, tick, &task);
    }

    /// Graceful shutdown: periodic tasks waiting in the wheel go to the workers to be stopped;
    /// one-shots stay.
    fn sweep_periodic(&mut self, wheel: &mut Wheel<TaskRef>) {
        self.swept_for_shutdown = true;
        let mut all = Vec::new();
        wheel.drain(&mut all);
        for task in all {
            if task.header().is_periodic() {
                self.due.push(task); // stopped by a worker, as in `place`
            } else {
                let tick = self.timer().time.tick_ceil(task.header().deadline());
                super::insert_unless_cancelled(wheel, tick, &task);
            }
        }
    }

    /// Hands due tasks to the workers; returns how many.
    fn dispatch(&mut self) -> usize {
        self.due
            .retain(|t| t.header().state.load() == state::SCHEDULED);
        let n = self.due.len();
        if n > 0 {
            self.core.push_batch(&mut self.due);
        }
        n
    }

    /// `shutdown_now`: every task still with the timer is stopped and handed back.
    fn stop_now(&mut self) {
        let mut all = Vec::new();
        {
            let core = self.core.clone();
            let mut wheel = core.timer.wheel.lock();
            core.timer.close_direct(&mut wheel);
            wheel.drain(&mut all);
            wheel.shrink_to_fit();
            for task in &all {
                task.header().set_wheel_key(crate::task::NO_KEY);
            }
        }
        drain_queue(&self.timer().submissions, |t| all.push(t));
        drain_queue(&self.timer().cancels, drop);
        let pending: Vec<PendingTask> = all.iter().filter_map(|t| self.core.take_back(t)).collect();
        self.core.hand_back(pending);
    }

    fn settle_requested(&self) -> u64 {
        self.timer()
            .settle
            .as_ref()
            .map_or(0, |s| s.status.lock().requested)
    }

    fn settle_submitted(&self) -> u64 {
        self.timer()
            .settle
            .as_ref()
            // SeqCst: pairs with the increment after the push in `Timer::submit`.
            .map_or(0, |s| s.submitted.load(Ordering::SeqCst))
    }

    /// Manual clock: publish what this pass did for `ClockListener::settle`.
    fn settle_report(&self, req: u64, dispatched: usize, drained: u64, next: Option<u64>) {
        if let Some(s) = &self.timer().settle {
            let time = &self.timer().time;
            let mut st = s.status.lock();
            st.completed = st.completed.max(req);
            st.dispatched = dispatched;
            st.drained = drained;
            st.next = next.map(|tick| time.nanos_of_tick(tick));
            drop(st);
            s.changed.notify_all();
        }
    }
}

/// Submissions the driver moves into the wheel in one locked pass.
const DRAIN_BATCH: usize = 64 * 1024;

/// Takes everything off `queue`, oldest first.
pub(crate) fn drain_queue<T>(queue: &crate::sync::Injector<T>, each: impl FnMut(T)) {
    drain_queue_up_to(queue, usize::MAX, each);
}

/// Takes up to `limit` items off `queue`, oldest first.
fn drain_queue_up_to<T>(queue: &crate::sync::Injector<T>, limit: usize, mut each: impl FnMut(T)) {
    for _ in 0..limit {
        match steal_retrying(|| queue.steal()) {
            Some(item) => each(item),
            None => break,
        }
    }
}

/// Wakes a manual clock's `settle` waiters (the driver is gone).
pub(crate) fn release_settle(timer: &Timer) {
    if let Some(s) = &timer.settle {
        let _st = s.status.lock();
        s.changed.notify_all();
    }
}

//! `Core`: the state a pool's threads, handles and futures share.
//!
//! # Ground rules (shutdown vs. submit)
//!
//! - `outstanding` counts tasks admitted and not yet in a terminal state (waiting anywhere,
//!   or running). A submitter increments it *before* it reads `lifecycle` (both SeqCst); the
//!   shutdown path stores `lifecycle` before the driver reads `outstanding`. So either the
//!   submitter sees the shutdown and backs out, or the driver sees the task and waits for it.
//! - A task for later goes into its timer shard's wheel, whose gate the timer thread closes
//!   under the shard's lock when a shutdown starts (see `timer/mod.rs`): the insert either
//!   lands before the timer's sweep of that shard (which stops it or hands it back) or is
//!   refused, and then the submitter stops the task itself and the schedule fails with
//!   `Shutdown`.
//! - A task due now goes to a run queue. After `shutdown_now`'s sweep nobody drains the run
//!   queues, so that push is followed by `fence(SeqCst)` (the one in `Sleep::notify`) and a
//!   second look at `lifecycle`: if it reads `Stop`, the pusher tries to stop the task itself.
//!   The task's CAS out of `SCHEDULED` decides who owns it: the sweep (returned by
//!   `shutdown_now`), the pusher (the schedule fails with `Shutdown`), or a worker that had
//!   already taken it (it runs). Exactly one of them.
//! - Nothing starts after `shutdown_now` returns: before its sweep it waits for every worker
//!   that holds a task it took to decide that task's fate (the `taking` flags and their fence
//!   pair, in `worker.rs`'s ground rules), so a worker's winning CAS comes before the return.
//! - Whoever moves a task to a terminal state calls `task_ended` once; the last one after a
//!   shutdown wakes the driver so it can see `outstanding == 0` and let the pool terminate.

use super::counters::Counters;
use super::worker::{self, WorkerSet};
use super::PoolStats;
use crate::error::ScheduleError;
use crate::sync::{fence, Arc, AtomicU8, CachePadded, Condvar, Mutex, OnceLock, Ordering, Weak};
use crate::task::state::End;
use crate::task::{
    drop_user, Cancelled, MissedTicks, PendingTask, RunEnv, RunOutcome, Stop, Stopped, TaskRef,
};
pub(crate) use crate::timer::Lifecycle;
use crate::timer::{ClockListener, Host, Timer};
use std::any::Any;
use std::time::Instant;

/// The user's panic handler.
pub(crate) type PanicHandler = Box<dyn Fn(Box<dyn Any + Send>) + Send + Sync>;

const RUNNING: u8 = 0;
const SHUTDOWN: u8 = 1;
const STOP: u8 = 2;

/// What the timer thread hands back to `shutdown_now`.
#[derive(Debug, Default)]
struct Handoff {
    driver_done: bool,
    tasks: Vec<PendingTask>,
}

/// What a future (or cancel handle) holds to reach its pool: one of these per timer shard,
/// owned by the pool, so the reference counts that futures made on different threads bump are
/// on different cache lines (an `Arc<Core>` per future would make every producer write one).
/// Padded: the count sits at the start of its allocation, and unpadded these small allocations
/// come out of the allocator side by side, two or more to a line, so neighbouring shards' counts
/// shared a line again (W7 at T = 4 ran at 8 M pairs/s or 12 M depending on where the heap
/// happened to start).
#[derive(Debug)]
pub(crate) struct CoreRef(CachePadded<Arc<Core>>);

impl std::ops::Deref for CoreRef {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.0
    }
}

/// Shared by the pool, its handles, its futures, its workers and its timer thread.
pub(crate) struct Core {
    pub(crate) timer: Timer,
    pub(crate) workers: WorkerSet,
    lifecycle: AtomicU8,
    /// Written by every submit, run and task end, each thread in its own cell.
    counters: Counters,
    /// Per timer shard, the reference a future keeps to this core (`CoreRef`): weak here, owned
    /// by the pool, so futures made on different threads bump different counts.
    refs: OnceLock<Box<[Weak<CoreRef>]>>,
    max_pending: Option<usize>,
    panic_handler: Option<PanicHandler>,
    /// The pool's default for fixed-rate tasks that do not choose their own.
    pub(crate) missed_ticks: MissedTicks,
    handoff: Mutex<Handoff>,
    handoff_ready: Condvar,
    /// Pool threads still alive; `terminated` is signalled when it reaches zero.
    live_threads: Mutex<usize>,
    terminated: Condvar,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("lifecycle", &self.lifecycle())
            .field("outstanding", &self.outstanding())
            .finish_non_exhaustive()
    }
}

impl Core {
    pub(crate) fn new(
        timer: Timer,
        workers: WorkerSet,
        threads: usize,
        max_pending: Option<usize>,
        panic_handler: Option<PanicHandler>,
        missed_ticks: MissedTicks,
    ) -> Self {
        Core {
            counters: Counters::new(timer.shard_count()),
            refs: OnceLock::new(),
            timer,
            workers,
            lifecycle: AtomicU8::new(RUNNING),
            max_pending,
            panic_handler,
            missed_ticks,
            handoff: Mutex::new(Handoff::default()),
            handoff_ready: Condvar::new(),
            live_threads: Mutex::new(threads),
            terminated: Condvar::new(),
        }
    }

    pub(crate) fn lifecycle(&self) -> Lifecycle {
        // SeqCst: one total order with the stores in `shutdown`/`shutdown_now` and the
        // `outstanding` updates (ground rules above).
        match self.lifecycle.load(Ordering::SeqCst) {
            RUNNING => Lifecycle::Running,
            SHUTDOWN => Lifecycle::Shutdown,
            _ => Lifecycle::Stop,
        }
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.counters.outstanding()
    }

    /// Creates the per-shard references futures keep to `core` and returns them for the pool
    /// to own (the core keeps only weak ones, so no cycle keeps it alive).
    pub(crate) fn attach(core: &Arc<Core>) -> Box<[Arc<CoreRef>]> {
        let owned: Box<[Arc<CoreRef>]> = (0..core.timer.shard_count())
            .map(|_| Arc::new(CoreRef(CachePadded::new(core.clone()))))
            .collect();
        let weak = owned.iter().map(Arc::downgrade).collect();
        if core.refs.set(weak).is_err() {
            crate::task::broken_invariant("a pool core attached twice");
        }
        owned
    }

    /// The reference a future made on this thread keeps; `None` once the pool is gone.
    pub(crate) fn core_ref(&self, shard: u16) -> Option<Arc<CoreRef>> {
        self.refs.get()?.get(usize::from(shard))?.upgrade()
    }

    pub(crate) fn driver_gone(&self) -> bool {
        self.timer.driver_gone()
    }

    // ---- submission -------------------------------------------------------------------------

    /// Admits and routes a new task (deadline in its header). On error nothing is queued and
    /// the task (with its closure) is dropped by the caller.
    /// `now` is the clock reading the task's deadline was computed from.
    pub(crate) fn submit(&self, task: &TaskRef, now: u64) -> Result<(), ScheduleError> {
        self.admit()?;
        self.route(task, now)
    }

    /// Counts the task in, or refuses it (shutdown, saturation) without a trace.
    pub(crate) fn admit(&self) -> Result<(), ScheduleError> {
        // SeqCst increment before the SeqCst lifecycle read: see the ground rules.
        self.counters.admitted();
        if self.lifecycle.load(Ordering::SeqCst) != RUNNING {
            self.task_ended();
            return Err(ScheduleError::Shutdown);
        }
        if let Some(max) = self.max_pending {
            // Those admitted before us, less those running. Of two admissions at once the later
            // sum sees both increments (SeqCst), so the bound is never overshot.
            let before = self.counters.outstanding().wrapping_sub(1);
            let pending = before.saturating_sub(self.counters.running());
            if pending >= max {
                self.task_ended();
                return Err(ScheduleError::Saturated { max_pending: max });
            }
        }
        Ok(())
    }

    /// Due now: straight to a run queue (skipping the wheel), then a second look at the
    /// lifecycle. Later: into its shard's wheel.
    fn route(&self, task: &TaskRef, now: u64) -> Result<(), ScheduleError> {
        if task.header().deadline() <= now {
            self.push_ready(task.clone());
            self.recheck_stop(task)
        } else {
            self.insert(task)
        }
    }

    /// Into its shard's wheel, unless the shard is closed to it by a shutdown; then the task is
    /// stopped here and the schedule fails. No second look at the lifecycle is needed: the
    /// shard's gate and lock order the insert against the timer thread's stop (ground rules).
    pub(crate) fn insert(&self, task: &TaskRef) -> Result<(), ScheduleError> {
        if self.timer.submit(task).is_err() {
            self.stop_for_shutdown(task);
            return Err(ScheduleError::Shutdown);
        }
        Ok(())
    }

    /// After a run-queue push: if `shutdown_now` may have swept already, take the task back.
    fn recheck_stop(&self, task: &TaskRef) -> Result<(), ScheduleError> {
        // A run-queue push (`push_ready`) ends with the SeqCst fence in `Sleep::notify`, so this
        // SeqCst load is ordered after the push: it pairs with the SeqCst lifecycle store in
        // `shutdown_now` (ground rules).
        if self.lifecycle.load(Ordering::SeqCst) == STOP && self.stop_for_shutdown(task) {
            return Err(ScheduleError::Shutdown);
        }
        Ok(())
    }

    /// A task is due: onto this worker's deque (if called from a worker) or the injector.
    pub(crate) fn push_ready(&self, task: TaskRef) {
        if let Some(s) = &self.timer.settle {
            s.entering_pool(1);
        }
        self.enqueue(task);
        self.workers.sleep.notify(1);
    }

    /// Onto the calling worker's own deque (if called from one of ours), else the injector.
    fn enqueue(&self, task: TaskRef) {
        if let Err(task) = worker::push_local(self, task) {
            self.workers.injector.push(task);
        }
    }

    /// The timer thread's batch of due tasks.
    pub(crate) fn push_batch(&self, batch: &mut Vec<TaskRef>) {
        let n = batch.len();
        if let Some(s) = &self.timer.settle {
            s.entering_pool(n);
        }
        for task in batch.drain(..) {
            self.workers.injector.push(task);
        }
        self.workers.sleep.notify(n);
    }

    /// The watcher's due tasks (`worker::poll_due`), onto the calling worker's deque: it runs
    /// them itself, and wakes a sleeper only for more than one.
    pub(crate) fn push_due(&self, due: &mut Vec<TaskRef>) {
        let n = due.len();
        for task in due.drain(..) {
            self.enqueue(task);
        }
        if n > 1 {
            self.workers.sleep.notify(n - 1);
        }
    }

    /// True if an idle worker may watch the timer's next tick: a real clock (a manual one is
    /// settled by the timer thread alone) and a running pool.
    pub(crate) fn may_watch(&self) -> bool {
        self.timer.settle.is_none() && self.lifecycle() == Lifecycle::Running
    }

    // ---- running ----------------------------------------------------------------------------

    /// Runs one task on the calling thread and does the bookkeeping for what became of it (the
    /// loom models' one-step worker; real workers use `run_task_in` with their own env).
    #[cfg_attr(not(wheelpool_loom), allow(dead_code))]
    pub(crate) fn run_task(&self, task: &TaskRef) {
        self.run_task_in(task, self);
    }

    /// `run_task` with `env` as the run's environment (a worker's, which also hears when the
    /// task's fate is settled: `RunEnv::claim_settled`).
    pub(crate) fn run_task_in(&self, task: &TaskRef, env: &dyn RunEnv) {
        if task.header().is_periodic() && self.lifecycle() == Lifecycle::Shutdown {
            // Graceful shutdown while queued: a periodic task that had not started does not
            // start. Not under `Stop`: there a task this worker took before `shutdown_now`'s
            // sweep runs (it was not there to be handed back; `shutdown_now` waits for its
            // start), and `run` then ends it. The task cannot start on this path (the stop
            // wins, or it is already ended), so `shutdown_now` need not wait for the drop.
            env.claim_settled();
            if self.stop_for_shutdown(task) || !task.header().state.is_scheduled() {
                self.settle_left_pool();
                return;
            }
        }
        self.counters.run_started();
        match task.run(env) {
            RunOutcome::NotStarted => {
                self.counters.run_over();
            }
            // `run_ending` has done the bookkeeping, before the future completed.
            RunOutcome::Finished(_) => {}
            RunOutcome::Rearm { panicked, now } => {
                if !panicked {
                    self.counters.completed();
                }
                self.counters.run_over();
                // `now` was read before the re-arm: an older reading can only send a task that
                // just came due through the wheel, never run one early. Err: a shutdown stopped
                // it after its run; `stop_for_shutdown` did the accounting.
                let _ = self.route(task, now);
            }
        }
        self.settle_left_pool();
    }

    fn settle_left_pool(&self) {
        if let Some(s) = &self.timer.settle {
            s.left_pool();
        }
    }

    /// Counts a task that ended cancelled or stopped by a shutdown (its future says Cancelled
    /// or Shutdown). Runs are counted apart: `completed` per normal return, `panicked` per panic.
    fn count_end(&self, end: End) {
        if matches!(end, End::Cancelled | End::ShutDown) {
            self.counters.cancelled();
        }
    }

    /// One admitted task reached a terminal state.
    pub(crate) fn task_ended(&self) {
        self.counters.ended();
        // SeqCst: pairs with the lifecycle store in `shutdown` (ground rules).
        if self.lifecycle.load(Ordering::SeqCst) != RUNNING {
            // SeqCst fence: pairs with the one of any other task ending now, so the later of
            // two sums sees both decrements and the last task out wakes the driver (counters.rs).
            fence(Ordering::SeqCst);
            if self.counters.outstanding() == 0 {
                self.timer.wake();
            }
        }
    }

    // ---- cancel and stop --------------------------------------------------------------------

    /// The user cancelled `task` through its future or a `CancelHandle`.
    pub(crate) fn on_cancel(&self, task: &TaskRef, outcome: Cancelled) {
        if outcome == Cancelled::Waiting {
            self.counters.cancelled();
            self.task_ended();
            self.timer.cancelled(task);
        }
    }

    /// The user reset `task`'s next run to `deadline` (nanoseconds since the origin); true if
    /// it was waiting and moved.
    /// Moves a waiting task to `deadline`; one in the past means now, and a periodic plan
    /// re-bases there (not in the past, where a fixed-rate grid would replay missed slots).
    pub(crate) fn reset(&self, task: &TaskRef, deadline: u64) -> bool {
        let deadline = deadline.max(self.timer.time.now_nanos());
        self.timer.reset(task, deadline, || task.rebase(deadline))
    }

    /// Stops a waiting task for `shutdown_now`; its closure, if this call won it.
    pub(crate) fn take_back(&self, task: &TaskRef) -> Option<PendingTask> {
        match self.stop(task, Stop::Now) {
            Stopped::HandedBack(pending) => Some(pending),
            Stopped::NotWaiting | Stopped::Ended => None,
        }
    }

    /// Stops a waiting task because the pool is shutting down; true if this call won it.
    pub(crate) fn stop_for_shutdown(&self, task: &TaskRef) -> bool {
        !matches!(self.stop(task, Stop::Shutdown), Stopped::NotWaiting)
    }

    fn stop(&self, task: &TaskRef, why: Stop) -> Stopped {
        let stopped = task.stop(why);
        if !matches!(stopped, Stopped::NotWaiting) {
            self.count_end(End::Cancelled); // it never ran (again): counted with the cancelled
            self.task_ended();
        }
        stopped
    }

    // ---- shutdown ---------------------------------------------------------------------------

    /// No new tasks; what is waiting still runs, periodic tasks stop.
    pub(crate) fn shutdown(&self) {
        let _ =
            self.lifecycle
                .compare_exchange(RUNNING, SHUTDOWN, Ordering::SeqCst, Ordering::SeqCst);
        self.timer.wake();
    }

    /// Nothing new starts; everything not started is stopped and returned.
    pub(crate) fn shutdown_now(&self) -> Vec<PendingTask> {
        self.lifecycle.store(STOP, Ordering::SeqCst);
        self.timer.wake();
        self.workers.sleep.wake_all();
        // First the timer thread: until it has seen the stop it may still dispatch due tasks
        // into the run queues, so those are swept only after it has handed back its own.
        let mut taken = {
            let mut handoff = self.handoff.lock();
            // On the timer thread itself (executor code it ran, a waker, dropped the last pool
            // reference) waiting would wait for ourselves: the driver sees the stop when that
            // code returns, and what it held is dropped with the pool, not handed back.
            let me = self as *const Core as *const ();
            let waiting_is_possible = !crate::timer::driver::on_timer_thread_of(me);
            while !handoff.driver_done && waiting_is_possible {
                handoff = crate::sync::wait_until(&self.handoff_ready, handoff, None);
            }
            std::mem::take(&mut handoff.tasks)
        };
        // Then the run queues, once no worker holds a task whose fate is undecided (nor a
        // batch half way from the injector into its deque): see `WorkerSet::quiesce`.
        self.workers.quiesce(self);
        let mut sweep = |task: TaskRef| taken.extend(self.take_back(&task));
        while let Some(task) = crate::sync::steal_retrying(|| self.workers.injector.steal()) {
            sweep(task);
        }
        for stealer in &self.workers.stealers {
            while let Some(task) = crate::sync::steal_retrying(|| stealer.steal()) {
                sweep(task);
            }
        }
        taken
    }

    /// The timer thread is exiting (normally or not).
    pub(crate) fn driver_exited(&self) {
        self.timer.driver_exited();
        self.handoff.lock().driver_done = true;
        self.handoff_ready.notify_all();
        self.workers.sleep.wake_all();
    }

    /// True when an idle worker should leave: stopped, or shut down with nothing left.
    pub(crate) fn worker_should_exit(&self) -> bool {
        match self.lifecycle() {
            Lifecycle::Running => false,
            Lifecycle::Stop => true,
            Lifecycle::Shutdown => self.driver_gone() && !self.workers.has_work(),
        }
    }

    /// A pool thread is exiting.
    pub(crate) fn thread_exited(&self) {
        let mut live = self.live_threads.lock();
        *live -= 1;
        if *live == 0 {
            self.terminated.notify_all();
        }
    }

    /// Waits until every pool thread has exited, or `deadline` passes.
    pub(crate) fn await_termination(&self, deadline: Option<Instant>) -> bool {
        let mut live = self.live_threads.lock();
        while *live > 0 {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            live = crate::sync::wait_until(&self.terminated, live, deadline);
        }
        true
    }

    pub(crate) fn is_terminated(&self) -> bool {
        *self.live_threads.lock() == 0
    }

    pub(crate) fn is_shutdown(&self) -> bool {
        self.lifecycle() != Lifecycle::Running
    }

    pub(crate) fn stats(&self) -> PoolStats {
        self.counters.stats()
    }
}

impl Host for Core {
    fn timer(&self) -> &Timer {
        &self.timer
    }

    fn lifecycle(&self) -> Lifecycle {
        Core::lifecycle(self)
    }

    fn dispatch(&self, due: &mut Vec<TaskRef>) {
        self.push_batch(due);
    }

    fn hand_back(&self, tasks: Vec<TaskRef>) {
        let taken: Vec<PendingTask> = tasks.iter().filter_map(|t| self.take_back(t)).collect();
        self.handoff.lock().tasks.extend(taken);
    }

    fn drained(&self) -> bool {
        self.outstanding() == 0
    }

    fn nudge_watcher(&self) -> bool {
        self.workers.sleep.nudge()
    }
}

impl ClockListener for Core {
    fn settle(&self) -> Option<Instant> {
        self.timer.settle_wait()
    }

    fn time_moved(&self) {
        self.timer.wake();
    }

    fn activity(&self) -> u64 {
        self.timer.settle.as_ref().map_or(0, |s| s.activity())
    }
}

impl RunEnv for Core {
    fn now_nanos(&self) -> u64 {
        self.timer.time.now_nanos()
    }

    fn stopping(&self) -> bool {
        // SeqCst: pairs with the lifecycle stores in `shutdown`/`shutdown_now`.
        self.lifecycle.load(Ordering::SeqCst) != RUNNING
    }

    fn run_ending(&self, end: End, ran_ok: bool) {
        if ran_ok {
            self.counters.completed();
        }
        self.count_end(end);
        self.counters.run_over();
        self.task_ended();
    }

    fn report_panic(&self, payload: Box<dyn Any + Send>) -> String {
        self.counters.panicked();
        let message = panic_message(&*payload);
        if let Some(handler) = &self.panic_handler {
            // A panicking handler must not take the worker down with it.
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(payload)));
            if let Err(inner) = outcome {
                drop_user(inner);
            }
        } else {
            // Dropping a payload can itself panic; keep it from unwinding out of here.
            drop_user(payload);
        }
        message
    }
}

impl Core {
    /// A worker's stop hook panicked: the payload goes to the panic handler (not counted as a
    /// task panic in the stats), or is dropped without one.
    pub(crate) fn report_hook_panic(&self, payload: Box<dyn Any + Send>) {
        match &self.panic_handler {
            Some(handler) => {
                let outcome =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(payload)));
                if let Err(inner) = outcome {
                    drop_user(inner);
                }
            }
            None => drop_user(payload),
        }
    }
}

/// The text of a panic payload (`panic!("...")` gives `&str` or `String`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

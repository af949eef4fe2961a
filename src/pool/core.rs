//! `Core`: what a pool's handles, futures and threads share, and the bookkeeping of a task's
//! way through it: schedule (admit, then insert into a wheel or push to a ready queue), cancel,
//! reset, stop, shut down. A run's bookkeeping is `run.rs`, above it. The parts it is made of
//! each live in a file of their own below it: the ready queues (`queues.rs`), the lifecycle
//! (`lifecycle.rs`), the counters (`counters.rs`) and the hand-back and termination state
//! (`shutdown.rs`).
//!
//! # Ground rules (shutdown vs. schedule)
//!
//! - `outstanding` counts tasks admitted and not yet in a terminal state (waiting anywhere,
//!   or running). A scheduler increments it *before* it reads `lifecycle` (both SeqCst); the
//!   shutdown path stores `lifecycle` before the driver reads `outstanding`. So either the
//!   scheduler sees the shutdown and backs out, or the driver sees the task and waits for it.
//! - A task for later goes into its timer shard's wheel, whose gate the timer thread closes
//!   under the shard's lock when a shutdown starts (see `timer/mod.rs`): the insert either
//!   lands before the timer's sweep of that shard (which stops it or hands it back) or is
//!   refused, and then the scheduler stops the task itself and the schedule fails with
//!   `Shutdown`.
//! - A task due now is pushed to a ready queue. After `shutdown_now`'s sweep nobody drains the
//!   ready queues, so that push is followed by `fence(SeqCst)` (the one in `Sleep::notify`) and
//!   a second look at `lifecycle`: if it reads `ShutdownNow`, the pusher tries to stop the task
//!   itself. The task's CAS out of `SCHEDULED` decides who owns it: the sweep (returned by
//!   `shutdown_now`), the pusher (the schedule fails with `Shutdown`), or a worker that had
//!   already taken it (it runs). Exactly one of them.
//! - Nothing starts after `shutdown_now` returns: before its sweep it waits for every worker
//!   that holds a task it took to decide that task's fate (the `taking` flags and their fence
//!   pair, in the ground rules of `queues.rs`), so a worker's winning CAS comes before the
//!   return.
//! - Whoever moves a task to a terminal state calls `task_ended` once; the last one after a
//!   shutdown wakes the driver so it can see `outstanding == 0` and let the pool terminate.

use super::config::Config;
use super::counters::{Counters, PoolStats};
use super::lateness::Lateness;
use super::lifecycle::{AtomicLifecycle, Lifecycle};
use super::queues::ReadyQueues;
use super::shutdown::Termination;
use crate::error::{ResetError, ScheduleError};
use crate::panic::PanicReporter;
use crate::sync::{fence, Arc, CachePadded, OnceLock, Ordering, Weak, Worker};
use crate::task::{Cancelled, MissedTicks, PendingTask, RawTask, Stop, Stopped, TaskRef};
use crate::timer::{ClockListener, Host, Keep, NotInserted, PoolId, TimeBase, Timer};

/// Where a task that goes into a wheel or a ready queue comes from; it decides how a refusal
/// by a shutdown is counted (`PoolStats` stays exact: a refused schedule is not a cancel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// A new task: refused, its schedule fails with `Shutdown` and it was never accepted.
    New,
    /// A periodic task's next run after a run: refused, the task ends `Shutdown`, counted
    /// with the cancelled.
    Rearm,
}

/// Whether a stopped task counts in `PoolStats::cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    Not,
    Cancelled,
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
    id: PoolId,
    pub(crate) timer: Timer,
    pub(crate) queues: ReadyQueues,
    lifecycle: AtomicLifecycle,
    /// Written by every schedule, run and task end, each thread in its own cell.
    pub(crate) counters: Counters,
    /// How late runs start, per worker.
    pub(crate) lateness: Lateness,
    /// Per timer shard, the reference a future keeps to this core (`CoreRef`): weak here, owned
    /// by the pool, so futures made on different threads bump different counts.
    refs: OnceLock<Box<[Weak<CoreRef>]>>,
    max_pending: Option<usize>,
    /// Where panics of user code go (a task's: counted first in `run.rs`; a stop hook's).
    pub(crate) panics: PanicReporter,
    /// The pool's default for fixed-rate tasks that do not choose their own.
    pub(crate) missed_ticks: MissedTicks,
    /// Which waiting tasks a graceful shutdown keeps (the builder's policy).
    pub(crate) keep: Keep,
    /// Hand-back and live threads (`await_termination`).
    pub(crate) termination: Termination,
}

/// A new core and what its owner keeps of it (see [`Core::new`]).
pub(crate) struct Parts {
    pub(crate) core: Arc<Core>,
    /// The per-shard references futures keep (`CoreRef`): the pool owns them.
    pub(crate) refs: Box<[Arc<CoreRef>]>,
    /// One local deque per worker, for the worker threads to take.
    pub(crate) deques: Vec<Worker<TaskRef>>,
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
    /// The one place a core is wired, for the builder and the loom harness alike: its timer,
    /// ready queues and counters, registered with a manual clock if it runs on one, with the
    /// per-shard references its futures keep (the core holds only weak ones, so no cycle keeps
    /// it alive). No thread is started.
    // Returns the `Arc`'d core with the parts its owner keeps: a core exists only shared.
    #[allow(clippy::new_ret_no_self)]
    pub(crate) fn new(config: Config) -> Parts {
        let id = PoolId::new();
        let timer = Timer::new(TimeBase::new(config.clock, config.tick), config.workers);
        let (queues, deques) = ReadyQueues::new(id, config.workers);
        let core = Arc::new(Core {
            id,
            counters: Counters::new(timer.shard_count(), config.workers),
            lateness: Lateness::new(config.workers),
            refs: OnceLock::new(),
            timer,
            queues,
            lifecycle: AtomicLifecycle::new(),
            max_pending: config.max_pending,
            panics: PanicReporter::new(config.panic_handler),
            missed_ticks: config.missed_ticks,
            keep: config.keep_at_shutdown,
            termination: Termination::new(config.workers + 1),
        });
        if let Some(clock) = core.timer.time.clock.manual() {
            let listener: Arc<dyn ClockListener> = core.clone();
            clock.register(Arc::downgrade(&listener));
        }
        let refs: Box<[Arc<CoreRef>]> = (0..core.timer.shard_count())
            .map(|_| Arc::new(CoreRef(CachePadded::new(core.clone()))))
            .collect();
        if core
            .refs
            .set(refs.iter().map(Arc::downgrade).collect())
            .is_err()
        {
            crate::panic::broken_invariant("a pool core wired twice");
        }
        Parts { core, refs, deques }
    }

    pub(crate) fn lifecycle(&self) -> Lifecycle {
        self.lifecycle.load()
    }

    /// The lifecycle itself, for the ready queues' `taking` protocol to read after its fence.
    pub(crate) fn lifecycle_cell(&self) -> &AtomicLifecycle {
        &self.lifecycle
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.counters.outstanding()
    }

    /// The counters, the lateness distribution and the queue depths (`PoolStats`' docs).
    pub(crate) fn stats(&self) -> PoolStats {
        let mut stats = self.counters.stats();
        let late = self.lateness.summary();
        stats.lateness_count = late.count;
        stats.lateness_p50 = late.p50;
        stats.lateness_p99 = late.p99;
        stats.lateness_max = late.max;
        // One shard lock at a time, each held for a read of a length.
        stats.waiting_in_wheels = (self.timer.shards.iter())
            .map(|cell| cell.lock().wheel.len())
            .sum();
        stats.ready_in_queues = self.queues.ready();
        stats
    }

    /// The reference a future made on this thread keeps; `None` once the pool is gone.
    pub(crate) fn core_ref(&self, shard: u16) -> Option<Arc<CoreRef>> {
        self.refs.get()?.get(usize::from(shard))?.upgrade()
    }

    // ---- schedule ---------------------------------------------------------------------------

    /// Counts a new task in, or refuses it (shutdown, saturation) without a trace. A schedule
    /// call admits before it builds the task cell, so that a refused one allocates nothing, and
    /// the locked increment comes before the cell's stores rather than waiting for them to drain;
    /// then [`schedule_admitted`](Self::schedule_admitted) queues the task. On an error from
    /// either, nothing is queued and the caller's other reference (its future) is the last.
    #[inline]
    pub(crate) fn admit(&self) -> Result<(), ScheduleError> {
        // SeqCst increment before the SeqCst lifecycle read: see the ground rules.
        self.counters.admitted();
        if !self.lifecycle.is_running() {
            self.task_ended(false);
            return Err(ScheduleError::Shutdown);
        }
        if let Some(max) = self.max_pending {
            // Those admitted before us, less those running. Of two admissions at once the later
            // sum sees both increments (SeqCst). A third task that is admitted and ends on two
            // different cells while this sum runs can make it read one low for that instant
            // (`pending_or_running`): only such a task, already gone, lets us past the bound.
            let before = self.counters.pending_or_running().saturating_sub(1);
            let pending = before.saturating_sub(self.counters.running());
            if pending >= max {
                self.task_ended(false);
                return Err(ScheduleError::Saturated { max_pending: max });
            }
        }
        Ok(())
    }

    /// Due now: pushed straight to a ready queue (skipping the wheel), then a second look at
    /// the lifecycle. Later: inserted into its shard's wheel.
    /// `arrival`: a new task or a periodic task's re-arm (who counts a refusal: see
    /// [`Arrival`]).
    pub(crate) fn schedule_admitted(
        &self,
        task: TaskRef,
        now: u64,
        arrival: Arrival,
    ) -> Result<(), ScheduleError> {
        if task.header().deadline() <= now {
            self.push_and_recheck(task, arrival)
        } else {
            self.insert(task, arrival)
        }
    }

    /// A due task onto a ready queue, then the re-check against a racing `shutdown_now`.
    fn push_and_recheck(&self, task: TaskRef, arrival: Arrival) -> Result<(), ScheduleError> {
        self.push(task.clone(), arrival);
        self.recheck_shutdown_now(&task, arrival)
    }

    /// Into its shard's wheel, unless the shard is closed to it by a shutdown; then the task is
    /// stopped here and the schedule fails. No second look at the lifecycle is needed: the
    /// shard's gate and lock order the insert against the timer thread's stop (ground rules).
    /// A re-arm's `now` may be the reading from before its run: one whose deadline the run
    /// overran goes to the workers now, not through the wheel (see `Timer::insert`).
    pub(crate) fn insert(&self, task: TaskRef, arrival: Arrival) -> Result<(), ScheduleError> {
        match self.timer.insert(task, arrival == Arrival::Rearm) {
            Ok(()) => Ok(()),
            Err(NotInserted::Due(task)) => self.push_and_recheck(task, arrival),
            Err(NotInserted::Refused(task)) => {
                self.stop_refused(&task, arrival);
                Err(ScheduleError::Shutdown)
            }
        }
    }

    /// A task is due. A new one: onto this worker's deque (if called from a worker) or the
    /// injector. A re-arm already late for its next run (a fixed-rate task catching up): onto
    /// the injector, with the due timers, since on this worker's deque a chain of local work
    /// would bury it under its continuations (ground rules of `queues.rs`: fairness in time).
    fn push(&self, task: TaskRef, arrival: Arrival) {
        if let Some(s) = &self.timer.settle {
            s.entering_pool(1);
        }
        let _ = match arrival {
            Arrival::New => self.queues.push(task),
            Arrival::Rearm => self.queues.push_due(task),
        };
    }

    /// After a push: if `shutdown_now` may have swept already, take the task back.
    fn recheck_shutdown_now(&self, task: &TaskRef, arrival: Arrival) -> Result<(), ScheduleError> {
        // A push ends with the SeqCst fence in `Sleep::notify`, so this SeqCst load is ordered
        // after the push: it pairs with the SeqCst lifecycle store in `shutdown_now` (ground
        // rules).
        if self.lifecycle() == Lifecycle::ShutdownNow && self.stop_refused(task, arrival) {
            return Err(ScheduleError::Shutdown);
        }
        Ok(())
    }

    /// A shutdown refused `task` on its way in (its shard's gate, or the re-check after a
    /// push): stops it, true if this call won it. A new task was never accepted (its schedule
    /// fails and nobody sees its future), so it is not counted as cancelled; a re-arm is a
    /// periodic task stopped by the shutdown, and is.
    fn stop_refused(&self, task: &TaskRef, arrival: Arrival) -> bool {
        let counted = match arrival {
            Arrival::New => Counted::Not,
            Arrival::Rearm => Counted::Cancelled,
        };
        !matches!(
            self.stop(task, Stop::Shutdown, counted),
            Stopped::NotWaiting
        )
    }

    /// True if an idle worker may watch the timer's next tick: a real clock (a manual one is
    /// settled by the timer thread alone) and a running pool.
    pub(crate) fn may_watch(&self) -> bool {
        self.timer.settle.is_none() && self.lifecycle() == Lifecycle::Running
    }

    /// One admitted task reached a terminal state. `cancelled`: it ended cancelled or stopped
    /// by a shutdown (its future says Cancelled or Shutdown), and counts in
    /// `PoolStats::cancelled`. Runs are counted apart: `completed` per normal return,
    /// `panicked` per panic.
    pub(crate) fn task_ended(&self, cancelled: bool) {
        if cancelled {
            self.counters.ended_cancelled();
        } else {
            self.counters.ended();
        }
        // SeqCst (in `is_running`): pairs with the lifecycle store in `shutdown` (ground rules).
        if !self.lifecycle.is_running() {
            // SeqCst fence: pairs with the one of any other task ending now, so the later of
            // two sums sees both decrements and the last task out wakes the driver (counters.rs).
            fence(Ordering::SeqCst);
            if self.counters.outstanding() == 0 {
                self.timer.wake();
            }
        }
    }

    // ---- cancel, reset and stop -------------------------------------------------------------

    /// The user cancelled `task` through its future or a `CancelHandle`.
    pub(crate) fn on_cancel(&self, task: &dyn RawTask, outcome: Cancelled) {
        if outcome == Cancelled::Waiting {
            self.task_ended(true);
            self.timer.cancelled(task);
        }
    }

    /// Moves a waiting task to `deadline` (nanoseconds since the origin), or says why not. One
    /// in the past means now, and a periodic plan re-bases there (not in the past, where a
    /// fixed-rate grid would replay missed slots).
    pub(crate) fn reset(&self, task: &dyn RawTask, deadline: u64) -> Result<(), ResetError> {
        let deadline = deadline.max(self.timer.time.now_nanos());
        self.timer.reset(task, deadline, || task.rebase(deadline))
    }

    /// Stops a waiting task for `shutdown_now` (`Stop::ShutdownNow`) or for a graceful
    /// shutdown that hands it back (`Stop::HandBackAtShutdown`); its closure, if this call won
    /// it.
    fn take_back(&self, task: &TaskRef, why: Stop) -> Option<PendingTask> {
        match self.stop(task, why, Counted::Cancelled) {
            Stopped::HandedBack(pending) => {
                Some(pending.place(|nanos| self.timer.time.instant_of(nanos)))
            }
            Stopped::NotWaiting | Stopped::Ended => None,
        }
    }

    /// True if a periodic task stops at a graceful shutdown (the default), rather than going on
    /// until it is cancelled or `shutdown_now` is called.
    pub(crate) fn periodic_stops_at_shutdown(&self) -> bool {
        !self.keep.periodic
    }

    /// Stops a waiting task because the pool is shutting down; true if this call won it.
    pub(super) fn stop_for_shutdown(&self, task: &TaskRef) -> bool {
        !matches!(
            self.stop(task, Stop::Shutdown, Counted::Cancelled),
            Stopped::NotWaiting
        )
    }

    fn stop(&self, task: &TaskRef, why: Stop, counted: Counted) -> Stopped {
        let stopped = task.stop(why);
        if !matches!(stopped, Stopped::NotWaiting) {
            // It never ran (again): counted with the cancelled, unless it never was a task.
            self.task_ended(counted == Counted::Cancelled);
        }
        stopped
    }

    // ---- shutdown ---------------------------------------------------------------------------

    /// No new tasks; waiting one-shots run or are handed back, periodic tasks stop or go on,
    /// as the builder chose (`keep`).
    pub(crate) fn shutdown(&self) {
        crate::trace::shutdown(self.keep.one_shots, self.keep.periodic);
        self.lifecycle.shutdown();
        self.timer.wake();
    }

    /// Nothing new starts; everything not started is stopped and returned.
    pub(crate) fn shutdown_now(&self) -> Vec<PendingTask> {
        self.lifecycle.shutdown_now();
        self.timer.wake();
        self.queues.sleep.wake_all();
        // First the timer thread: until it has seen the stop it may still push due tasks to the
        // ready queues, so those are swept only after it has handed back its own. On the timer
        // thread itself (executor code it ran, a waker, dropped the last pool reference)
        // waiting would wait for ourselves: the driver sees the stop when that code returns,
        // and what it held is dropped with the pool, not handed back.
        let may_wait = !crate::timer::driver::on_timer_thread_of(self.id);
        let mut taken = self.termination.take_handed_back(may_wait);
        // Then the ready queues, once no worker holds a task whose fate is undecided (nor a
        // batch half way from the injector into its deque): see `ReadyQueues::quiesce`.
        self.queues.quiesce();
        self.queues
            .drain(|task| taken.extend(self.take_back(&task, Stop::ShutdownNow)));
        crate::trace::shutdown_now(taken.len());
        trace_handed_back(&taken);
        taken
    }

    /// What a graceful shutdown has handed back so far (`take_handed_back`).
    pub(crate) fn take_handed_back(&self) -> Vec<PendingTask> {
        let taken = self.termination.take_handed_back_now();
        trace_handed_back(&taken);
        taken
    }

    /// The timer thread is exiting (normally or not).
    pub(crate) fn driver_exited(&self) {
        self.timer.driver_exited();
        self.termination.driver_done();
        self.queues.sleep.wake_all();
    }

    /// True when an idle worker should leave: stopped, or shut down with nothing left.
    pub(crate) fn worker_should_exit(&self) -> bool {
        match self.lifecycle() {
            Lifecycle::Running => false,
            Lifecycle::ShutdownNow => true,
            Lifecycle::Shutdown => self.timer.driver_gone() && !self.queues.has_work(),
        }
    }

    pub(crate) fn is_shutdown(&self) -> bool {
        !self.lifecycle.is_running()
    }
}

/// One `task handed back` event per task leaving the pool for the caller (see `trace.rs`);
/// without the `tracing` feature the event is an empty inlined call and the loop goes with it.
fn trace_handed_back(tasks: &[PendingTask]) {
    for t in tasks {
        crate::trace::handed_back(t.id(), t.name(), t.kind().label(), t.state_label());
    }
}

/// The timer side's view of the pool (its `ClockListener` comes with it: `timer/mod.rs`).
impl Host for Core {
    fn id(&self) -> PoolId {
        self.id
    }

    fn timer(&self) -> &Timer {
        &self.timer
    }

    fn lifecycle(&self) -> Lifecycle {
        Core::lifecycle(self)
    }

    fn push_due(&self, due: &mut Vec<TaskRef>) {
        if let Some(s) = &self.timer.settle {
            s.entering_pool(due.len());
        }
        self.queues.push_from_timer(due);
    }

    fn hand_back(&self, tasks: Vec<TaskRef>) {
        let taken = tasks
            .iter()
            .filter_map(|t| self.take_back(t, Stop::ShutdownNow));
        self.termination.hand_back(taken.collect());
    }

    fn keep_at_shutdown(&self) -> Keep {
        self.keep
    }

    fn hand_back_at_shutdown(&self, tasks: Vec<TaskRef>) {
        if tasks.is_empty() {
            return;
        }
        let taken = tasks
            .iter()
            .filter_map(|t| self.take_back(t, Stop::HandBackAtShutdown));
        self.termination.hand_back(taken.collect());
    }

    fn drained(&self) -> bool {
        self.outstanding() == 0
    }

    fn nudge_watcher(&self) -> bool {
        self.queues.sleep.nudge()
    }

    fn wake_helpers(&self, n: usize) {
        if self.queues.has_work() {
            self.queues.sleep.notify(n);
        }
    }
}

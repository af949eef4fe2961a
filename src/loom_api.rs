//! Loom-only facade: thin wrappers over the crate's internals for the models in
//! `tests/loom_*.rs`. Compiled only under `--cfg loom`; not part of the API.
//!
//! Integration tests see only the public API, so this module hands them the real internal
//! pieces (task cells, the pool core, the driver's steps, the workers' loop) with as little code
//! of its own as possible: every protocol step a model exercises is the crate's own function.
//!
//! Time: a [`LoomPool`] uses the system clock with a one-hour tick, so a deadline given in ticks
//! is deterministic (`0` is due at once and skips the wheel; anything else is far in the future
//! and never comes due while a model runs). Loom needs every execution of a model to take the
//! same branches for the same schedule, so nothing a model checks may depend on real time.

use crate::error::{ScheduleError, TaskError};
use crate::future::ScheduledFuture;
use crate::pool::worker::{self, WorkerSet};
use crate::pool::{Core, Lifecycle};
use crate::sync::{Arc, Steal, Worker};
use crate::task::periodic::{Periodic, Plan};
use crate::task::{
    state, Cancelled, MissedTicks, OneShot, PendingTask, RawTask, RunEnv, RunOutcome, Stop,
    TaskCell, TaskRef, TaskResult,
};
use crate::timer::driver::Driver;
use crate::timer::{Clock, TimeBase, Timer};
use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// One tick of a [`LoomPool`]: an hour, so that "later" deadlines never come due in a model.
pub const TICK: Duration = Duration::from_secs(3600);
const TICK_NANOS: u64 = 3_600_000_000_000;

/// What a task's `run` did (the crate's `RunOutcome`, flattened).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// Someone else (a cancel or a stop) won the task before it started.
    NotStarted,
    /// Ran and finished with a value.
    Completed,
    /// Ran, but a cancel came in during the run: the future says `Cancelled`.
    Cancelled,
    /// Ran and panicked.
    Panicked,
    /// A periodic task ran and stopped because the pool is stopping.
    ShutDown,
    /// A periodic task ran and is `SCHEDULED` again.
    Rearmed,
}

fn ran(outcome: RunOutcome) -> Ran {
    match outcome {
        RunOutcome::NotStarted => Ran::NotStarted,
        RunOutcome::Rearm { .. } => Ran::Rearmed,
        RunOutcome::Finished(state::COMPLETED) => Ran::Completed,
        RunOutcome::Finished(state::CANCELLED) => Ran::Cancelled,
        RunOutcome::Finished(state::PANICKED) => Ran::Panicked,
        RunOutcome::Finished(state::SHUT_DOWN) => Ran::ShutDown,
        RunOutcome::Finished(other) => panic!("run ended in non-terminal state {other}"),
    }
}

/// What a task's `cancel` did (the crate's `Cancelled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Already finished or cancelled.
    No,
    /// It was waiting: closure dropped, future completed.
    Waiting,
    /// It was running: that run finishes, the task ends cancelled.
    Running,
}

fn cancel_outcome(c: Cancelled) -> CancelOutcome {
    match c {
        Cancelled::No => CancelOutcome::No,
        Cancelled::Waiting => CancelOutcome::Waiting,
        Cancelled::Running => CancelOutcome::Running,
    }
}

/// The `RunEnv` of a bare task run outside any pool: time stands at 0.
struct ModelEnv {
    stopping: bool,
}

impl RunEnv for ModelEnv {
    fn now_nanos(&self) -> u64 {
        0
    }
    fn stopping(&self) -> bool {
        self.stopping
    }
    fn report_panic(&self, _payload: Box<dyn Any + Send>) -> String {
        "panicked".to_owned()
    }
    fn run_ending(&self, _end: u8, _ran_ok: bool) {}
}

type OneShotFn<T> = Box<dyn FnOnce() -> T + Send>;
type PeriodicFn = Box<dyn FnMut() + Send>;

/// A bare one-shot task cell (no pool): run, cancel, stop and wait on it from model threads.
pub struct OneShotTask<T: Send + 'static>(Arc<TaskCell<OneShot<OneShotFn<T>>>>);

impl<T: Send + 'static> Clone for OneShotTask<T> {
    fn clone(&self) -> Self {
        OneShotTask(self.0.clone())
    }
}

impl<T: Send + 'static> fmt::Debug for OneShotTask<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Send + 'static> OneShotTask<T> {
    /// A `SCHEDULED` task that will run `f`.
    pub fn new(f: impl FnOnce() -> T + Send + 'static) -> Self {
        OneShotTask(Arc::new(TaskCell::new(
            OneShot::new(Box::new(f) as OneShotFn<T>),
            0,
        )))
    }

    /// A worker runs it (`RawTask::run`).
    pub fn run(&self) -> Ran {
        ran(self.0.run(&ModelEnv { stopping: false }))
    }

    /// The user's cancel (`RawTask::cancel`).
    pub fn cancel(&self) -> CancelOutcome {
        cancel_outcome(self.0.cancel())
    }

    /// `shutdown_now`'s stop: `None` if this call lost the task, else its closure (if any).
    pub fn stop_now(&self) -> Option<Option<PendingTask>> {
        self.0.stop(Stop::Now)
    }

    /// Blocks until the task is finished, then takes its result (`TaskResult::wait`).
    pub fn join(&self) -> Result<T, TaskError> {
        match self.0.wait(None) {
            Some(result) => result,
            None => unreachable!("an untimed wait returns only with a result"),
        }
    }

    /// A future over this task's result (`TaskResult::poll_result`).
    pub fn future(&self) -> TaskFuture<T> {
        TaskFuture(self.0.clone())
    }

    /// True once the task is in a terminal state.
    pub fn is_done(&self) -> bool {
        state::is_terminal(self.0.header().state.load())
    }
}

/// The result of a [`OneShotTask`] as a `Future`, polled through the task's own waker slot.
pub struct TaskFuture<T: Send + 'static>(Arc<TaskCell<OneShot<OneShotFn<T>>>>);

impl<T: Send + 'static> fmt::Debug for TaskFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Send + 'static> Future for TaskFuture<T> {
    type Output = Result<T, TaskError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll_result(cx)
    }
}

/// A bare periodic (fixed-delay) task cell, no pool: `run` re-arms it in place (the pool would
/// then resubmit it), so a model can run it again at once.
pub struct PeriodicTask(Arc<TaskCell<Periodic<PeriodicFn>>>);

impl Clone for PeriodicTask {
    fn clone(&self) -> Self {
        PeriodicTask(self.0.clone())
    }
}

impl fmt::Debug for PeriodicTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PeriodicTask {
    /// A `SCHEDULED` fixed-delay task (delay 0) that runs `f`.
    pub fn new(f: impl FnMut() + Send + 'static) -> Self {
        let job = Periodic::new(Box::new(f) as PeriodicFn, Plan::Delay { delay: 0 }, false);
        PeriodicTask(Arc::new(TaskCell::new(job, 0)))
    }

    /// A worker runs it once (`RawTask::run`); `Ran::Rearmed` when it is `SCHEDULED` again.
    pub fn run(&self, stopping: bool) -> Ran {
        ran(self.0.run(&ModelEnv { stopping }))
    }

    /// The user's cancel (`RawTask::cancel`).
    pub fn cancel(&self) -> CancelOutcome {
        cancel_outcome(self.0.cancel())
    }

    /// Blocks until the task is finished, then takes its result.
    pub fn join(&self) -> Result<(), TaskError> {
        match self.0.wait(None) {
            Some(result) => result,
            None => unreachable!("an untimed wait returns only with a result"),
        }
    }
}

/// A pool core with no threads of its own: models run its workers, its driver and its callers
/// on loom threads. See the module docs for time.
pub struct LoomPool {
    core: Arc<Core>,
    /// Worker deques not yet handed to `run_worker`.
    locals: std::sync::Mutex<Vec<Option<Worker<TaskRef>>>>,
}

impl fmt::Debug for LoomPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.fmt(f)
    }
}

impl LoomPool {
    /// A core for `workers` workers (their loops run only when a model calls `run_worker`).
    pub fn new(workers: usize) -> Self {
        let timer = Timer::new(TimeBase::new(Clock::System, TICK));
        let (set, locals) = WorkerSet::new(workers);
        let core = Core::new(timer, set, workers + 1, None, None, MissedTicks::Burst);
        LoomPool {
            core: Arc::new(core),
            locals: std::sync::Mutex::new(locals.into_iter().map(Some).collect()),
        }
    }

    /// `schedule` of a one-shot due at tick `at` (0: now, straight to a run queue).
    pub fn schedule<T, F>(&self, f: F, at: u64) -> Result<ScheduledFuture<T>, ScheduleError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let when = crate::pool::submit::When {
            deadline: at.saturating_mul(TICK_NANOS),
            now: self.core.timer.time.now_nanos(),
        };
        crate::pool::submit::one_shot(&self.core, f, when)
    }

    /// A fixed-delay task first due at tick `first`, re-armed `every` ticks after each run
    /// (0: re-armed straight onto a run queue).
    pub fn schedule_periodic<F>(
        &self,
        f: F,
        first: u64,
        every: u64,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() + Send + 'static,
    {
        let plan = Plan::Delay {
            delay: every.saturating_mul(TICK_NANOS),
        };
        let job = Periodic::new(Box::new(f) as PeriodicFn, plan, false);
        let when = crate::pool::submit::When {
            deadline: first.saturating_mul(TICK_NANOS),
            now: self.core.timer.time.now_nanos(),
        };
        crate::pool::submit::submit_job(&self.core, job, when)
    }

    /// The body of worker thread `index` (`worker::run`); returns once the pool stops.
    pub fn run_worker(&self, index: usize) {
        let deque = self.locals.lock().unwrap()[index]
            .take()
            .expect("run_worker called twice for one index");
        worker::run(self.core.clone(), index, deque);
    }

    /// One step of a worker without its loop: take a task from the injector and run it with the
    /// pool's bookkeeping (`Core::run_task`). False if the injector was empty.
    pub fn run_one(&self) -> bool {
        match self.core.workers.injector.steal() {
            Steal::Success(task) => {
                self.core.run_task(&task);
                crate::task::drop_user(task);
                true
            }
            _ => false,
        }
    }

    /// The two steps of `Core::push_ready` from a thread that is not a worker (push on the
    /// injector, `notify(1)`) for a task nobody runs; returns how many sleepers it woke.
    pub fn push_counting_wakes(&self) -> usize {
        let task = OneShotTask::new(|| ());
        let task: TaskRef = task.0;
        self.core.workers.injector.push(task);
        self.core.workers.sleep.notify(1)
    }

    /// Takes one task off the injector without running it (it is dropped); false if empty.
    pub fn take_one(&self) -> bool {
        matches!(self.core.workers.injector.steal(), Steal::Success(_))
    }

    /// An idle worker's sleep, exactly as `worker::run` calls it.
    pub fn sleep(&self, index: usize) {
        let core = &self.core;
        core.workers.sleep.sleep(index, || {
            core.workers.has_work() || core.worker_should_exit()
        });
    }

    /// True when an idle worker should leave (`Core::worker_should_exit`).
    pub fn worker_should_exit(&self) -> bool {
        self.core.worker_should_exit()
    }

    /// The timer thread's body (`driver::run`), then its exit bookkeeping.
    pub fn run_driver(&self) {
        crate::timer::driver::run(self.core.clone());
        self.core.driver_exited();
    }

    /// The driver's exit bookkeeping without a driver (so `shutdown_now` need not wait for one).
    pub fn driver_exited(&self) {
        self.core.driver_exited();
    }

    /// The timer thread's state, stepped by hand.
    pub fn driver(&self) -> ModelDriver {
        ModelDriver {
            driver: Driver::new(self.core.clone()),
            core: self.core.clone(),
        }
    }

    /// `shutdown_now`.
    pub fn shutdown_now(&self) -> Vec<PendingTask> {
        self.core.shutdown_now()
    }

    /// Tasks admitted and not yet in a terminal state.
    pub fn outstanding(&self) -> usize {
        self.core.outstanding()
    }

    /// Tasks queued for the workers (injector and local deques).
    pub fn has_work(&self) -> bool {
        self.core.workers.has_work()
    }
}

/// The timer thread's state, stepped by a model: the real `Driver` functions, in the order of
/// one pass of `Driver::run`.
pub struct ModelDriver {
    driver: Driver,
    core: Arc<Core>,
}

impl fmt::Debug for ModelDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelDriver")
            .field("wheel", &*self.driver.wheel())
            .finish_non_exhaustive()
    }
}

impl ModelDriver {
    /// The start of a pass: `sleep_until = AWAKE`.
    pub fn mark_awake(&self) {
        self.driver.mark_awake();
    }

    /// The locked part of a pass (`Driver::bookkeeping`): submissions into the wheel
    /// (`place`), cancelled entries out, due entries polled at the real (hour-tick) time, and
    /// the next expiration announced as the sleep tick under the wheel's lock. Returns it.
    pub fn drain(&mut self) -> Option<u64> {
        self.driver.bookkeeping(Lifecycle::Running)
    }

    /// Polls the wheel at tick `now` and hands what is due to the workers.
    pub fn expire(&mut self, now: u64) -> usize {
        let mut due = Vec::new();
        self.driver.wheel().poll_expired(now, &mut due);
        due.retain(|t| t.header().state.load() == state::SCHEDULED);
        let n = due.len();
        self.core.push_batch(&mut due);
        n
    }

    /// Goes to sleep until tick `next`, as returned by the pass's `drain` (`Driver::sleep`:
    /// `prepare_sleep`, then park unless it found work). Under loom the park has no time limit:
    /// only an unpark (or a token left by one) ends it.
    pub fn sleep(&self, next: Option<u64>) {
        self.driver.sleep(next);
    }

    /// The wheel's next expiration tick (`Wheel::next_expiration`).
    pub fn next_expiration(&self) -> Option<u64> {
        self.driver.wheel().next_expiration()
    }

    /// Entries in the wheel.
    pub fn wheel_len(&self) -> usize {
        self.driver.wheel().len()
    }
}

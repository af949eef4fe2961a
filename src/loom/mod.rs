//! Loom models: the crate's own code, run on loom's primitives, as unit tests of the crate.
//!
//! Built only under `RUSTFLAGS="--cfg wheelpool_loom"` (see `.ci/run`): `crate::sync` then hands
//! out loom's atomics, locks and queues, so every protocol step a model exercises is the crate's
//! own function. The models live here, next to the internals they reach (tokio keeps its own at
//! `src/runtime/tests/loom_*.rs`), and use the crate's types directly: `RunOutcome`, `Cancelled`,
//! the `Driver` and its steps.
//!
//! One file per protocol: `counters` (a cell's two figures read as one), `task` (the state
//! machine), `future` (completion vs waker), `sleep` (worker sleep and wake), `inject` (the
//! injector's `injected` flag: fairness in time), `periodic` (re-arm vs cancel), `ptr` (the task
//! pointer's count vs the free), `shutdown` (schedule vs shutdown), `driver` (the timer thread's
//! sleep vs new deadlines), `timer` (the sharded wheels' insert, cancel, reset and shutdown
//! gates) and `helpers` (the watcher leaving the driver to wake helpers for its due tasks).
//!
//! Set-up that is the same in every model lives here (the pool harness, spawning a pool thread,
//! closures that count their runs and drops, `block_on`). What each model races stays spelled
//! out in the model, in the order it happens, even where two models start alike: those threads
//! and checks are what the model *is*, and a reader checks an interleaving against them line by
//! line.
//!
//! Time: a [`ModelPool`] uses the system clock with a one-hour [`TICK`], so a deadline given in
//! ticks is deterministic: tick 0 is due at once, anything later never comes due while a model
//! runs. Loom needs every execution of a model to take the same branches for the same schedule,
//! so nothing a model checks may depend on real time.

mod counters;
mod driver;
mod future;
mod helpers;
mod inject;
mod periodic;
mod ptr;
mod shutdown;
mod sleep;
mod task;
mod timer;
mod watch;

use crate::error::ScheduleError;
use crate::pool::model::{self, Config, Core, Parts};
use crate::sync::{Arc, Worker};
use crate::task::periodic::{Periodic, Plan};
use crate::task::state::End;
use crate::task::{pair, OneShot, RunEnv, TaskCell, TaskInfo, TaskPtr, TaskRef, TaskResult};
use crate::timer::driver::Driver;
use crate::timer::Clock;
use crate::ScheduledFuture;
use loom::thread;
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Runs `f` under loom with the preemption bound of `LOOM_MAX_PREEMPTIONS` (2 if unset: the
/// bound CI uses), and prints how many executions it explored and how long that took.
pub(super) fn model<F>(name: &str, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    run(builder, name, f);
}

/// As [`model`], but with the preemption bound `bound` unless `WHEELPOOL_LOOM_FULL` is set
/// (then as [`model`]). For a model whose full exploration takes far longer than CI allows;
/// each caller says what the lower bound still covers and which models cover the rest.
pub(super) fn model_bounded<F>(name: &str, bound: usize, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    if std::env::var_os("WHEELPOOL_LOOM_FULL").is_some() {
        return model(name, f);
    }
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    run(builder, name, f);
}

/// Explores `f` with `builder`, then prints the count of executions and the time taken.
fn run<F>(builder: loom::model::Builder, name: &str, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let executions = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = executions.clone();
    let start = Instant::now();
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f()
    });
    eprintln!(
        "loom model {name}: {} executions in {:.2?} (preemption bound {:?})",
        executions.load(Ordering::Relaxed),
        start.elapsed(),
        builder.preemption_bound
    );
}

/// Counts events (runs, drops) seen by model threads. A plain std atomic on purpose: loom runs
/// its threads one at a time, so a SeqCst std atomic reads what happened earlier in the schedule
/// being explored. It records the interleaving; it is not part of any protocol.
#[derive(Clone, Debug, Default)]
pub(super) struct Count(std::sync::Arc<AtomicUsize>);

impl Count {
    pub(super) fn new() -> Self {
        Self::default()
    }
    pub(super) fn add(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    pub(super) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
    /// A value that bumps this count when dropped.
    pub(super) fn token(&self) -> DropToken {
        DropToken(self.clone())
    }

    /// A one-shot closure that counts its run here and holds a drop token of `drops`, dropped
    /// when the run ends.
    pub(super) fn once(&self, drops: &Count) -> impl FnOnce() + Send + 'static {
        let (ran, token) = (self.clone(), drops.token());
        move || {
            let _token = token;
            ran.add();
        }
    }

    /// A periodic closure that counts each run here and holds a drop token of `drops` for as
    /// long as the closure lives.
    pub(super) fn each(&self, drops: &Count) -> impl FnMut() + Send + 'static {
        let (ran, token) = (self.clone(), drops.token());
        move || {
            let _token = &token;
            ran.add();
        }
    }
}

/// The closing check of a model whose closure holds a token of `drops`.
pub(super) fn assert_dropped_once(drops: &Count) {
    assert_eq!(drops.get(), 1, "closure dropped exactly once");
}

/// Bumps its `Count` when dropped: captured by closures to count drops.
#[derive(Debug)]
pub(super) struct DropToken(Count);

impl Drop for DropToken {
    fn drop(&mut self) {
        self.0.add();
    }
}

/// A loom-aware `block_on`: polls `f`, and between polls waits on a loom condvar until its
/// waker is woken. A wake-up that never comes leaves this thread blocked, which loom reports as
/// a deadlock once every other thread is done. Returns the output and how many wakes it saw.
pub(super) fn block_on<F: std::future::Future>(f: F) -> (F::Output, usize) {
    use std::task::{Context, Poll, Wake, Waker};

    struct Signal {
        woken: loom::sync::Mutex<bool>,
        cv: loom::sync::Condvar,
        wakes: AtomicUsize,
    }
    impl Wake for Signal {
        fn wake(self: std::sync::Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
            *self.woken.lock().unwrap() = true;
            self.cv.notify_one();
        }
    }

    let signal = std::sync::Arc::new(Signal {
        woken: loom::sync::Mutex::new(false),
        cv: loom::sync::Condvar::new(),
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return (out, signal.wakes.load(Ordering::SeqCst));
        }
        let mut woken = signal.woken.lock().unwrap();
        while !*woken {
            woken = signal.cv.wait(woken).unwrap();
        }
        *woken = false;
    }
}

/// The `RunEnv` of a bare task run outside any pool: time stands at 0.
pub(super) struct BareEnv {
    pub(super) stopping: bool,
}

impl RunEnv for BareEnv {
    fn now_nanos(&self) -> u64 {
        0
    }
    fn stopping(&self) -> bool {
        self.stopping
    }
    fn report_panic(&self, _task: TaskInfo, _payload: Box<dyn Any + Send>) -> String {
        "panicked".to_owned()
    }
    fn run_ending(&self, _end: End, _ran_ok: bool) {}
}

pub(super) type OneShotFn<T> = Box<dyn FnOnce() -> T + Send>;
pub(super) type PeriodicFn = Box<dyn FnMut() + Send>;

/// A bare one-shot task cell (no pool), `SCHEDULED`, that will run `f`: its future's pointer
/// (the pool's is dropped at once), so the models count its references as the pool does.
pub(super) fn bare_one_shot<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> TaskPtr<dyn TaskResult<T>> {
    let cell = TaskCell::new(OneShot::new(Box::new(f) as OneShotFn<T>), 0, 0);
    pair(cell).0
}

/// A bare fixed-delay task cell (delay 0, no pool): its `run` re-arms it in place (the pool
/// would then schedule it again), so a model can run it again at once.
pub(super) fn bare_periodic(f: impl FnMut() + Send + 'static) -> TaskPtr<dyn TaskResult<()>> {
    let job = Periodic::new(Box::new(f) as PeriodicFn, Plan::Delay { delay: 0 }, false);
    pair(TaskCell::new(job, 0, 0)).0
}

/// One tick of a [`ModelPool`]: an hour, so that "later" deadlines never come due in a model.
pub(super) const TICK: Duration = Duration::from_secs(3600);
const TICK_NANOS: u64 = 3_600_000_000_000;

/// A pool core with no threads of its own: models run its workers, its driver and its callers
/// on loom threads. See the module docs for time.
pub(super) struct ModelPool {
    pub(super) core: Arc<Core>,
    /// Worker deques not yet handed to `run_worker`.
    locals: std::sync::Mutex<Vec<Option<Worker<TaskRef>>>>,
    /// What the pool owns so its futures can reach the core (`Core::new`).
    _refs: Box<[Arc<crate::pool::CoreRef>]>,
}

impl ModelPool {
    /// A core for `workers` workers (their loops run only when a model calls `run_worker`).
    pub(super) fn new(workers: usize) -> Self {
        Self::with_config(Config::new(workers, Clock::System, TICK))
    }

    /// The same, with a graceful shutdown that keeps `keep` (the builder's policy).
    pub(super) fn keeping(workers: usize, keep: crate::timer::Keep) -> Self {
        Self::with_config(Config {
            keep_at_shutdown: keep,
            ..Config::new(workers, Clock::System, TICK)
        })
    }

    fn with_config(config: Config) -> Self {
        let Parts { core, refs, deques } = Core::new(config);
        ModelPool {
            _refs: refs,
            core,
            locals: std::sync::Mutex::new(deques.into_iter().map(Some).collect()),
        }
    }

    fn when(&self, at: u64) -> model::When {
        model::When {
            deadline: at.saturating_mul(TICK_NANOS),
            now: self.core.timer.time.now_nanos(),
        }
    }

    /// `schedule` of a one-shot due at tick `at` (0: now, straight to a run queue), from the
    /// calling thread's home shard.
    pub(super) fn schedule<T, F>(&self, f: F, at: u64) -> Result<ScheduledFuture<T>, ScheduleError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        model::one_shot(&self.core, f, self.when(at), Default::default())
    }

    /// A fixed-delay task first due at tick `first`, re-armed `every` ticks after each run
    /// (0: re-armed straight onto a run queue).
    pub(super) fn schedule_periodic<F>(
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
        model::schedule_job(&self.core, job, self.when(first), None)
    }

    /// A one-shot task cell due at tick `at` in `shard`, and its future, not scheduled yet: a
    /// model hands the task to [`schedule_prepared`](Self::schedule_prepared) or [`insert`](Self::insert) on one
    /// thread while another cancels it through the future.
    pub(super) fn prepare<T, F>(&self, f: F, at: u64, shard: u16) -> (TaskRef, ScheduledFuture<T>)
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let job = OneShot::new(Box::new(f) as OneShotFn<T>);
        let (cell, raw) = pair(TaskCell::new(job, at.saturating_mul(TICK_NANOS), shard));
        let owner = self
            .core
            .core_ref(shard)
            .expect("the model pool owns its core refs");
        (raw, ScheduledFuture::new(cell, owner))
    }

    /// A prepared task scheduled as every schedule call does it: admit, then insert or push and
    /// recheck (`Core::schedule_admitted`).
    pub(super) fn schedule_prepared(&self, task: &TaskRef) -> Result<(), ScheduleError> {
        self.core.admit()?;
        let now = self.core.timer.time.now_nanos();
        self.core
            .schedule_admitted(task.clone(), now, model::Arrival::New)
    }

    /// A prepared task scheduled as if its deadline were later than now: admit, then into its
    /// shard's wheel (`Core::insert`, the wheel path of `Core::schedule_admitted`).
    /// How a task due at tick 0 gets into a wheel (`schedule_prepared` would skip the wheel), so a driver
    /// pass finds it due.
    pub(super) fn insert(&self, task: &TaskRef) -> Result<(), ScheduleError> {
        self.core.admit()?;
        self.core.insert(task.clone(), model::Arrival::New)
    }

    /// [`run_driver`](Self::run_driver) on a loom thread of its own.
    pub(super) fn spawn_driver(self: &Arc<Self>) -> thread::JoinHandle<()> {
        let pool = self.clone();
        thread::spawn(move || pool.run_driver())
    }

    /// [`run_worker`](Self::run_worker) on a loom thread of its own.
    pub(super) fn spawn_worker(self: &Arc<Self>, index: usize) -> thread::JoinHandle<()> {
        let pool = self.clone();
        thread::spawn(move || pool.run_worker(index))
    }

    /// [`run_one`](Self::run_one) on a loom thread of its own.
    pub(super) fn spawn_run_one(self: &Arc<Self>) -> thread::JoinHandle<bool> {
        let pool = self.clone();
        thread::spawn(move || pool.run_one())
    }

    /// The body of worker thread `index` (`worker::run`); returns once the pool stops.
    pub(super) fn run_worker(&self, index: usize) {
        let deque = self.locals.lock().unwrap()[index]
            .take()
            .expect("run_worker called twice for one index");
        model::run_worker(self.core.clone(), index, deque);
    }

    /// One step of a worker without its loop: take a task from the injector and run it with the
    /// pool's bookkeeping (`run::run_task`, holding no `taking` flag), counted as worker 0's.
    /// False if the injector was empty. Models call it from one thread at a time and never
    /// beside a worker 0 thread: a worker's run counts have one writer (`counters.rs`).
    pub(super) fn run_one(&self) -> bool {
        match self.core.queues.steal_injected() {
            Some(task) => {
                model::run_task(&self.core, 0, &task, None);
                crate::panic::drop_user(task);
                true
            }
            None => false,
        }
    }

    /// Takes one task off the injector without running it (it is dropped); false if empty.
    pub(super) fn take_one(&self) -> bool {
        self.core.queues.steal_injected().is_some()
    }

    /// `ReadyQueues::push` from a thread that is not a worker (onto the injector, `notify(1)`)
    /// of a task nobody runs; returns how many sleepers it woke.
    pub(super) fn push_counting_wakes(&self) -> usize {
        let task: TaskRef = bare_one_shot(|| ()).to_raw();
        self.core.queues.push(task)
    }

    /// Worker `index`'s end of a watcher's poll that took `n` due tasks (nobody runs them): onto
    /// its deque, and helpers woken or left to the driver, as `worker::poll_due` does
    /// (`push_polled`). The deque is bound to the calling thread for the push only; the tasks
    /// stay there for thieves and `shutdown_now`.
    pub(super) fn watcher_pushes(&self, index: usize, n: usize) {
        let deque = self.locals.lock().unwrap()[index]
            .take()
            .expect("worker deque already handed out");
        self.core.queues.bind(index, deque);
        let mut due: Vec<TaskRef> = (0..n).map(|_| bare_one_shot(|| ()).to_raw()).collect();
        model::push_polled(&self.core, &mut due);
        self.core.queues.unbind();
    }

    /// An idle worker's sleep, as `worker::run` calls it when it does not watch the timer.
    pub(super) fn sleep(&self, index: usize) {
        let core = &self.core;
        core.queues.sleep.sleep(
            index,
            || core.queues.has_work() || core.worker_should_exit(),
            None,
        );
    }

    /// The timer thread's body (`driver::run`), then its exit bookkeeping, as the builder's
    /// timer thread does.
    pub(super) fn run_driver(&self) {
        crate::timer::driver::run(self.core.clone());
        self.core.driver_exited();
    }

    /// The timer thread's state, for a model to step by hand.
    pub(super) fn driver(&self) -> Driver {
        Driver::new(self.core.clone())
    }

    /// Entries in every shard's wheel together.
    pub(super) fn wheel_len(&self) -> usize {
        self.core
            .timer
            .shards
            .iter()
            .map(|s| s.lock().wheel.len())
            .sum()
    }

    /// The next expiration tick of shard `i`'s wheel.
    pub(super) fn next_expiration(&self, i: usize) -> Option<u64> {
        self.core.timer.shards[i].lock().wheel.next_expiration()
    }
}

//! The workers: each owns a LIFO deque, steals from the shared injector and from its siblings,
//! runs tasks, and sleeps through `Sleep` when there is nothing to do.
//!
//! # Ground rules
//!
//! **Fairness.** A worker pops its own deque from the LIFO end (the task it just pushed is
//! cache-warm), so a task that keeps `execute`-ing its own continuation would keep that end
//! busy forever. Every [`FAIR_INTERVAL`] runs the worker therefore looks first at the work that
//! has waited longest, alternating between two sources: the shared injector (due timers, tasks
//! submitted from outside the pool) and the FIFO end of its own deque (older tasks that a
//! chain keeps burying). Whichever source comes second on a fairness turn is still tried before
//! the LIFO end. So whatever the deques hold, a task at the head of the injector waits for at
//! most `2 * FAIR_INTERVAL` runs of each worker, and a task in a worker's deque reaches its
//! FIFO end and is taken within `2 * FAIR_INTERVAL` runs per task ahead of it.
//!
//! **Taking a task vs. `shutdown_now`** ("nothing starts after `shutdown_now` returns"). Each
//! worker has a `taking` flag. A worker that looks for a task:
//!
//! 1. raises its flag (`Relaxed`), then `fence(SeqCst)`, then reads the lifecycle; on `Stop` it
//!    lowers the flag and exits without touching a queue;
//! 2. otherwise pops or steals a task; the flag stays raised while it holds the task;
//! 3. lowers the flag (`Release`) once the task's fate is decided: its `SCHEDULED -> RUNNING`
//!    CAS won and the closure is about to be called (lowered right before the call, via
//!    `RunEnv::claim_settled`), or the task will never start (someone else won that CAS, or
//!    the run path is stopping it). Nothing between 1 and 3 runs user code or waits on
//!    anything but the task's own short body lock, so `shutdown_now` waits a bounded time.
//!
//! `shutdown_now` stores `Stop`, then `fence(SeqCst)`, then waits (`Acquire`) for every flag it
//! sees raised to be lowered ([`WorkerSet::quiesce`]), and only then sweeps the queues. The two
//! fences make a Dekker pair: either the worker's lifecycle read sees `Stop` (it takes nothing),
//! or `shutdown_now` sees the raised flag and waits for step 3. In the second case the worker's
//! CAS happens before `shutdown_now` returns (the `Release`/`Acquire` pair on the flag), so the
//! task either started before the return or never starts. A flag read as lowered before it was
//! raised puts `shutdown_now`'s fence first, so that worker's step 1 sees `Stop`. Hence every
//! task is exactly one of: started before `shutdown_now` returned, won by the sweep (returned),
//! or won by its pusher's re-check (the schedule fails); none starts after the return. The same
//! flag covers the moment a batch moves from the injector into a deque, when it is in neither.
//! A `shutdown_now` called from a worker of the same pool (a task, or a `Drop` the worker runs)
//! skips that worker's own flag: the worker is busy in that call, not taking anything.

use super::core::{Core, Lifecycle};
use super::sleep::{Sleep, Watch, Woke};
use crate::sync::{
    fence, steal_retrying, Arc, AtomicBool, Injector, Ordering, Steal, Stealer, Worker,
};
use crate::task::{RunEnv, TaskRef};
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::time::Instant;

/// Rounds of looking for work before a worker announces itself as a sleeper. Each round spins a
/// little longer (127 spin hints in all, a few microseconds). Short: an idle pool must not burn
/// CPU. No round yields: on a machine whose CPUs are all busy a `yield_now` gives the CPU away
/// until the scheduler's next tick (4 ms on the 2-core machine), and a searching worker is one
/// that pushes count on to find their task (`Sleep::notify`), so a due timer waited behind it
/// (seen in traces of issue 10's cancel storm).
#[cfg(not(wheelpool_loom))]
const SPIN_ROUNDS: u32 = 7;
#[cfg(wheelpool_loom)]
const SPIN_ROUNDS: u32 = 0;

/// Every this many runs a worker serves the longest-waiting work before its LIFO end (ground
/// rules). Go's scheduler and tokio check their global queue every 61 runs; we alternate two
/// sources (injector, own FIFO end), so each gets the first pick every 64 runs, about the same
/// spacing. A power of two makes the test a mask. A fairness turn with nothing waiting costs an
/// emptiness check of the injector and one failed steal: noise at one run in 32, while a 20 us
/// chain lets a due timer wait about 64 * 20 us = 1.3 ms, about one default tick.
const FAIR_INTERVAL: u32 = 32;

/// A flag on its own cache line: each worker writes its own on every task.
#[derive(Debug)]
#[repr(align(128))]
struct Padded(AtomicBool);

/// The queues all workers share.
#[derive(Debug)]
pub(crate) struct WorkerSet {
    pub(crate) injector: Injector<TaskRef>,
    pub(crate) stealers: Vec<Stealer<TaskRef>>,
    pub(crate) sleep: Sleep,
    /// One flag per worker, raised while it takes a task until that task's fate is decided
    /// (ground rules): `shutdown_now` waits for raised flags before it sweeps the queues.
    taking: Box<[Padded]>,
}

impl WorkerSet {
    /// The shared queues and one local deque per worker (handed to the worker threads).
    pub(crate) fn new(workers: usize) -> (Self, Vec<Worker<TaskRef>>) {
        let locals: Vec<Worker<TaskRef>> = (0..workers).map(|_| Worker::new_lifo()).collect();
        let set = WorkerSet {
            injector: Injector::new(),
            stealers: locals.iter().map(Worker::stealer).collect(),
            sleep: Sleep::new(workers),
            taking: (0..workers)
                .map(|_| Padded(AtomicBool::new(false)))
                .collect(),
        };
        (set, locals)
    }

    /// Waits until no worker holds a task whose fate is undecided (called after `Stop` is
    /// stored, before the sweep). Skips the calling thread if it is one of `core`'s workers.
    pub(crate) fn quiesce(&self, core: &Core) {
        // SeqCst fence: pairs with the fence in `find_task` (ground rules). `Stop` was stored
        // before it.
        fence(Ordering::SeqCst);
        let me = current_worker_of(core);
        for (index, flag) in self.taking.iter().enumerate() {
            if Some(index) == me {
                continue;
            }
            // Acquire: pairs with the Release in `WorkerEnv::settle`, so the worker's CAS on
            // the task it held happens before `shutdown_now` returns.
            while flag.0.load(Ordering::Acquire) {
                crate::sync::thread::yield_now();
            }
        }
    }

    /// True if any queue holds a task (a racy snapshot, used before parking).
    pub(crate) fn has_work(&self) -> bool {
        !self.injector.is_empty() || self.stealers.iter().any(|s| !s.is_empty())
    }
}

/// The current thread's worker deque, if it is a worker.
struct Local {
    /// Address of the `Core` that owns this worker: a task scheduling from a worker of another
    /// pool must not push onto this one.
    owner: usize,
    index: usize,
    deque: Worker<TaskRef>,
}

#[cfg(not(wheelpool_loom))]
std::thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}
#[cfg(wheelpool_loom)]
loom::thread_local! {
    static LOCAL: RefCell<Option<Local>> = RefCell::new(None);
}

/// Pushes `task` onto the current worker's deque if this thread is a worker of `core`;
/// otherwise hands the task back.
pub(crate) fn push_local(core: &Core, task: TaskRef) -> Result<(), TaskRef> {
    let owner = core as *const Core as usize;
    LOCAL.with(|l| match l.try_borrow() {
        Ok(local) => match &*local {
            Some(local) if local.owner == owner => {
                local.deque.push(task);
                Ok(())
            }
            _ => Err(task),
        },
        Err(_) => Err(task),
    })
}

/// The index of the calling thread if it is a worker of `core`.
fn current_worker_of(core: &Core) -> Option<usize> {
    let owner = core as *const Core as usize;
    LOCAL.with(|l| {
        let local = l.try_borrow().ok()?;
        local.as_ref().filter(|l| l.owner == owner).map(|l| l.index)
    })
}

/// What a look for work found.
enum Found<'a> {
    /// A task, with the worker's `taking` flag raised.
    Task(Claim<'a>),
    /// Nothing in any queue (flag lowered).
    Nothing,
    /// The pool is stopping: take nothing more, exit (flag lowered).
    Stop,
}

/// A task this worker took, whose fate is not decided yet.
struct Claim<'a> {
    task: TaskRef,
    flag: &'a AtomicBool,
}

/// A worker thread's body.
pub(crate) fn run(core: Arc<Core>, index: usize, deque: Worker<TaskRef>) {
    crate::timer::mark_pool_thread(&core.timer.time.clock);
    crate::timer::home::set(index); // workers spread over the timer shards
    let owner = Arc::as_ptr(&core) as usize;
    LOCAL.with(|l| {
        *l.borrow_mut() = Some(Local {
            owner,
            index,
            deque,
        })
    });
    let mut runs: u32 = 0;
    loop {
        match find_task(&core, index, runs) {
            Found::Task(claim) => {
                runs = runs.wrapping_add(1);
                run_claimed(&core, claim);
                continue;
            }
            Found::Stop => break,
            Found::Nothing => {}
        }
        if core.worker_should_exit() {
            break;
        }
        let sleep = &core.workers.sleep;
        sleep.start_searching();
        let found = spin_for_work(&core, index, runs);
        let last_searcher = sleep.stop_searching();
        match found {
            Found::Task(claim) => {
                if last_searcher {
                    sleep.notify(1); // pushes may have skipped waking anyone while we searched
                }
                runs = runs.wrapping_add(1);
                run_claimed(&core, claim);
                continue;
            }
            Found::Stop => break,
            Found::Nothing => {}
        }
        let watch = TimerWatch(&core);
        let watching = core.may_watch().then_some(&watch as &dyn Watch);
        let woke = core.workers.sleep.sleep(
            index,
            || core.workers.has_work() || core.worker_should_exit(),
            watching,
        );
        if woke == Woke::Due {
            poll_due(&core, index);
        }
    }
    // Anything left in the local deque stays reachable through its stealer for shutdown_now.
    LOCAL.with(|l| l.borrow_mut().take());
}

/// The watcher's view of the timer (see "The watcher" in `timer/mod.rs`).
struct TimerWatch<'a>(&'a Core);

impl Watch for TimerWatch<'_> {
    fn until(&self) -> Option<Instant> {
        let time = &self.0.timer.time;
        let tick = self.0.timer.watch_tick()?;
        Some(time.instant_of(time.nanos_of_tick(tick)))
    }

    fn unwatch(&self) {
        self.0.timer.unwatch();
    }
}

/// The watcher's tick came: take what is due out of the wheels that nobody holds and queue it
/// for the workers, this one first. Under the `taking` flag, like any take (ground rules), so
/// `shutdown_now` either finds the pool stopped before we poll or waits for our pushes and
/// sweeps them.
fn poll_due(core: &Core, index: usize) {
    let (flag, life) = raise_taking(core, index);
    if life == Lifecycle::Running {
        let mut due = Vec::new();
        core.timer.help_poll(&mut due);
        core.push_due(&mut due);
    }
    // Release: pairs with the Acquire in `WorkerSet::quiesce`, publishing our pushes to the
    // sweep that follows it.
    flag.store(false, Ordering::Release);
}

/// Runs a task this worker took, then lets go of the worker's reference. If that was the last
/// one, the task's unread result or closure is dropped here, where a panicking `Drop` cannot
/// unwind the worker.
fn run_claimed(core: &Core, claim: Claim<'_>) {
    let Claim { task, flag } = claim;
    let env = WorkerEnv {
        core,
        flag,
        raised: Cell::new(true),
    };
    core.run_task_in(&task, &env);
    env.claim_settled(); // the task did not start (cancelled, stopped): lower the flag now
    crate::task::drop_user(task);
}

/// Looks for work a few more times before sleeping.
fn spin_for_work<'a>(core: &'a Core, index: usize, runs: u32) -> Found<'a> {
    for round in 0..SPIN_ROUNDS {
        for _ in 0..(1u32 << round) {
            std::hint::spin_loop();
        }
        match find_task(core, index, runs) {
            Found::Nothing => {}
            found => return found,
        }
    }
    Found::Nothing
}

/// Step 1 of a take (ground rules): raises worker `index`'s `taking` flag, then reads the
/// lifecycle after the fence. Returns the flag (for the caller to lower) and what it read.
fn raise_taking(core: &Core, index: usize) -> (&AtomicBool, Lifecycle) {
    let flag = &core.workers.taking[index].0;
    flag.store(true, Ordering::Relaxed);
    // SeqCst fence: pairs with the fence in `WorkerSet::quiesce` (ground rules): either
    // `shutdown_now` sees the raised flag, or the lifecycle read after it sees `Stop`.
    fence(Ordering::SeqCst);
    (flag, core.lifecycle())
}

/// Takes a task under the `taking` flag (ground rules), unless the pool is stopping.
fn find_task(core: &Core, index: usize, runs: u32) -> Found<'_> {
    let (flag, life) = raise_taking(core, index);
    if life == Lifecycle::Stop {
        flag.store(false, Ordering::Relaxed); // nothing taken: no CAS to publish
        return Found::Stop;
    }
    let task = LOCAL.with(|l| {
        let local = l.borrow();
        let local = local.as_ref()?;
        take_from_queues(core, index, &local.deque, runs)
    });
    match task {
        Some(task) => Found::Task(Claim { task, flag }),
        None => {
            flag.store(false, Ordering::Relaxed); // nothing taken: no CAS to publish
            Found::Nothing
        }
    }
}

/// Own deque's LIFO end first (cache-warm), then the injector, then siblings; on a fairness
/// turn the injector and the own deque's FIFO end come first (ground rules).
fn take_from_queues(
    core: &Core,
    index: usize,
    deque: &Worker<TaskRef>,
    runs: u32,
) -> Option<TaskRef> {
    let set = &core.workers;
    if runs % FAIR_INTERVAL == 0 {
        let own_oldest = || steal_retrying(|| set.stealers[index].steal());
        let fair = if (runs / FAIR_INTERVAL) % 2 == 0 {
            from_injector(set, deque).or_else(own_oldest)
        } else {
            own_oldest().or_else(|| from_injector(set, deque))
        };
        if fair.is_some() {
            return fair;
        }
    }
    if let Some(task) = deque.pop() {
        return Some(task);
    }
    steal_anywhere(set, index, deque)
}

/// The injector, then each sibling, once per round. A queue that answers `Retry` (another
/// thread was moving its ends) is not spun on: the others are tried first, and only a round
/// in which some queue said `Retry` goes round again.
fn steal_anywhere(set: &WorkerSet, index: usize, deque: &Worker<TaskRef>) -> Option<TaskRef> {
    let n = set.stealers.len();
    loop {
        let mut retry = false;
        match set.injector.steal_batch_and_pop(deque) {
            Steal::Success(task) => {
                if !set.injector.is_empty() {
                    set.sleep.notify(1); // more behind it: let a sleeper help
                }
                return Some(task);
            }
            Steal::Retry => retry = true,
            Steal::Empty => {}
        }
        for k in 1..n {
            match set.stealers[(index + k) % n].steal() {
                Steal::Success(task) => return Some(task),
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
        }
        if !retry {
            return None;
        }
    }
}

/// A batch from the injector into `deque`, one of it popped; wakes a helper if more waits.
fn from_injector(set: &WorkerSet, deque: &Worker<TaskRef>) -> Option<TaskRef> {
    let stolen = steal_retrying(|| set.injector.steal_batch_and_pop(deque))?;
    if !set.injector.is_empty() {
        set.sleep.notify(1); // more behind it: let a sleeper help
    }
    Some(stolen)
}

/// The pool's `RunEnv`, plus lowering this worker's `taking` flag once the task's fate is
/// decided.
struct WorkerEnv<'a> {
    core: &'a Core,
    flag: &'a AtomicBool,
    raised: Cell<bool>,
}

impl RunEnv for WorkerEnv<'_> {
    fn now_nanos(&self) -> u64 {
        self.core.now_nanos()
    }
    fn stopping(&self) -> bool {
        self.core.stopping()
    }
    fn report_panic(&self, payload: Box<dyn Any + Send>) -> String {
        self.core.report_panic(payload)
    }
    fn run_ending(&self, end: crate::task::state::End, ran_ok: bool) {
        self.core.run_ending(end, ran_ok)
    }
    fn claim_settled(&self) {
        if self.raised.replace(false) {
            // Release: pairs with the Acquire in `WorkerSet::quiesce`, publishing the task's
            // CAS (started, or stopped) to `shutdown_now` before it returns.
            self.flag.store(false, Ordering::Release);
        }
    }
}

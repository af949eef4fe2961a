//! The ready queues: the shared injector, one LIFO deque per worker, and how workers sleep on
//! them (`Sleep`). Below both the core (which pushes) and the workers (which take): it knows
//! neither, only tasks, the lifecycle and the thread's own deque.
//!
//! # Ground rules
//!
//! **Fairness.** A worker pops its own deque from the LIFO end (the task it just pushed is
//! cache-warm), so a task that keeps `execute`-ing its own continuation would keep that end
//! busy forever. Every [`FAIR_INTERVAL`] runs the worker therefore looks first at the work that
//! has waited longest, alternating between two sources: the shared injector (due timers, tasks
//! scheduled from outside the pool) and the FIFO end of its own deque (older tasks that a
//! chain keeps burying). Whichever source comes second on a fairness turn is still tried before
//! the LIFO end. So whatever the deques hold, a task at the head of the injector waits for at
//! most `2 * FAIR_INTERVAL` runs of each worker, and a task in a worker's deque reaches its
//! FIFO end and is taken within `2 * FAIR_INTERVAL` runs per task ahead of it.
//!
//! **Taking a task vs. `shutdown_now`** ("nothing starts after `shutdown_now` returns"). Each
//! worker has a `taking` flag. A worker that looks for a task:
//!
//! 1. raises its flag (`Relaxed`), then `fence(SeqCst)`, then reads the lifecycle
//!    ([`ReadyQueues::raise_taking`]); on `ShutdownNow` it lowers the flag and exits without
//!    touching a queue;
//! 2. otherwise pops or steals a task; the flag stays raised while it holds the task;
//! 3. lowers the flag (`Release`, [`Taking::lower`]) once the task's fate is decided: its
//!    `SCHEDULED -> RUNNING` CAS won and the closure is about to be called (lowered right before
//!    the call, via `RunEnv::claim_decided`), or the task will never start (someone else won
//!    that CAS, or the run path is stopping it). Nothing between 1 and 3 runs user code or
//!    waits on anything but the task's own short body lock, so `shutdown_now` waits a bounded
//!    time.
//!
//! `shutdown_now` stores `ShutdownNow`, then `fence(SeqCst)`, then waits (`Acquire`) for every
//! flag it sees raised to be lowered ([`ReadyQueues::quiesce`]), and only then sweeps the queues.
//! The two fences make a Dekker pair: either the worker's lifecycle read sees `ShutdownNow` (it
//! takes nothing), or `shutdown_now` sees the raised flag and waits for step 3. In the second
//! case the worker's CAS happens before `shutdown_now` returns (the `Release`/`Acquire` pair on
//! the flag), so the task either started before the return or never starts. A flag read as
//! lowered before it was raised puts `shutdown_now`'s fence first, so that worker's step 1 sees
//! `ShutdownNow`. Hence every task is exactly one of: started before `shutdown_now` returned,
//! won by the sweep (returned), or won by its pusher's re-check (the schedule fails); none
//! starts after the return. The same flag covers the moment a batch moves from the injector
//! into a deque, when it is in neither, and the watcher's poll of the wheels (`worker.rs`).
//! A `shutdown_now` called from a worker of the same pool (a task, or a `Drop` the worker runs)
//! skips that worker's own flag: the worker is busy in that call, not taking anything.

use super::lifecycle::{AtomicLifecycle, Lifecycle};
use super::sleep::Sleep;
use crate::sync::{
    fence, steal_retrying, AtomicBool, CachePadded, Injector, Ordering, Steal, Stealer, Worker,
};
use crate::task::TaskRef;
use crate::timer::PoolId;
use std::cell::{Cell, RefCell};

/// Every this many runs a worker serves the longest-waiting work before its LIFO end (ground
/// rules). Go's scheduler and tokio check their global queue every 61 runs; we alternate two
/// sources (injector, own FIFO end), so each gets the first pick every 64 runs, about the same
/// spacing. A power of two makes the test a mask. A fairness turn with nothing waiting costs an
/// emptiness check of the injector and one failed steal: noise at one run in 32, while a 20 us
/// chain lets a due timer wait about 64 * 20 us = 1.3 ms, about one default tick.
const FAIR_INTERVAL: u32 = 32;

/// The queues all workers share, and how they sleep on them.
#[derive(Debug)]
pub(crate) struct ReadyQueues {
    /// The pool these queues belong to: a task pushed from a worker of another pool must not
    /// land on that worker's deque.
    pool: PoolId,
    injector: Injector<TaskRef>,
    stealers: Box<[Stealer<TaskRef>]>,
    pub(crate) sleep: Sleep,
    /// One flag per worker, each on its own cache line (each worker writes its own on every
    /// task), raised while it takes a task until that task's fate is decided (ground rules):
    /// `shutdown_now` waits for raised flags before it sweeps the queues.
    taking: Box<[CachePadded<AtomicBool>]>,
}

/// The current thread's worker deque, if it is a worker.
struct Local {
    pool: PoolId,
    index: usize,
    deque: Worker<TaskRef>,
}

crate::sync::thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// A worker's raised `taking` flag (ground rules): lowered once the fate of the task it took is
/// decided, by the run (`RunEnv::claim_decided`) or after it.
#[derive(Debug)]
pub(crate) struct Taking<'a> {
    flag: &'a AtomicBool,
    raised: Cell<bool>,
}

impl Taking<'_> {
    /// Step 3 of a take: lowers the flag, if still raised. May be called more than once.
    pub(crate) fn lower(&self) {
        if self.raised.replace(false) {
            // Release: pairs with the Acquire in `ReadyQueues::quiesce`, publishing the task's
            // CAS (started, or stopped) and any pushes to `shutdown_now` before it sweeps.
            self.flag.store(false, Ordering::Release);
        }
    }

    /// Lowers a flag under which nothing was taken: there is no CAS to publish.
    fn lower_untouched(self) {
        self.flag.store(false, Ordering::Relaxed);
    }
}

/// What a look for work found.
pub(crate) enum Found<'a> {
    /// A task, with the worker's `taking` flag raised.
    Task(TaskRef, Taking<'a>),
    /// Nothing in any queue (flag lowered).
    Nothing,
    /// The pool is stopping: take nothing more, exit (flag lowered).
    ShutdownNow,
}

impl ReadyQueues {
    /// The shared queues of pool `pool` and one local deque per worker (handed to the worker
    /// threads, which [`bind`](Self::bind) them).
    pub(crate) fn new(pool: PoolId, workers: usize) -> (Self, Vec<Worker<TaskRef>>) {
        let locals: Vec<Worker<TaskRef>> = (0..workers).map(|_| Worker::new_lifo()).collect();
        let queues = ReadyQueues {
            pool,
            injector: Injector::new(),
            stealers: locals.iter().map(Worker::stealer).collect(),
            sleep: Sleep::new(workers),
            taking: (0..workers)
                .map(|_| CachePadded::new(AtomicBool::new(false)))
                .collect(),
        };
        (queues, locals)
    }

    /// Makes the calling thread worker `index`, owning `deque`, until [`unbind`](Self::unbind).
    pub(crate) fn bind(&self, index: usize, deque: Worker<TaskRef>) {
        let pool = self.pool;
        LOCAL.with(|l| *l.borrow_mut() = Some(Local { pool, index, deque }));
    }

    /// The calling worker leaves. Anything left in its deque stays reachable through its
    /// stealer for `shutdown_now`.
    pub(crate) fn unbind(&self) {
        LOCAL.with(|l| l.borrow_mut().take());
    }

    // ---- push -------------------------------------------------------------------------------

    /// A task is due: onto the calling worker's deque (if it is one of ours), else the
    /// injector; then wake a sleeper. Ends with the SeqCst fence in `Sleep::notify`. Returns how
    /// many sleepers it woke.
    pub(crate) fn push(&self, task: TaskRef) -> usize {
        self.push_quietly(task);
        self.sleep.notify(1)
    }

    /// The timer thread's batch of due tasks, onto the injector.
    pub(crate) fn push_from_timer(&self, batch: &mut Vec<TaskRef>) {
        let n = batch.len();
        for task in batch.drain(..) {
            self.injector.push(task);
        }
        self.sleep.notify(n);
    }

    /// The watcher's due tasks, onto the calling worker's deque: it runs them itself, and wakes
    /// a sleeper only for more than one.
    pub(crate) fn push_from_watcher(&self, due: &mut Vec<TaskRef>) {
        let n = due.len();
        for task in due.drain(..) {
            self.push_quietly(task);
        }
        if n > 1 {
            self.sleep.notify(n - 1);
        }
    }

    /// Onto the calling worker's own deque (if it is one of ours), else the injector; no wake.
    fn push_quietly(&self, task: TaskRef) {
        let task = LOCAL.with(|l| match l.try_borrow() {
            Ok(local) => match &*local {
                Some(local) if local.pool == self.pool => {
                    local.deque.push(task);
                    None
                }
                _ => Some(task),
            },
            Err(_) => Some(task),
        });
        if let Some(task) = task {
            self.injector.push(task);
        }
    }

    // ---- take -------------------------------------------------------------------------------

    /// Step 1 of a take (ground rules): raises worker `index`'s `taking` flag, then reads the
    /// lifecycle after the fence. Returns the raised flag and what it read.
    pub(crate) fn raise_taking(
        &self,
        index: usize,
        lifecycle: &AtomicLifecycle,
    ) -> (Taking<'_>, Lifecycle) {
        let flag = &*self.taking[index];
        flag.store(true, Ordering::Relaxed);
        // SeqCst fence: pairs with the fence in `quiesce` (ground rules): either `shutdown_now`
        // sees the raised flag, or the lifecycle read after it sees `ShutdownNow`.
        fence(Ordering::SeqCst);
        let taking = Taking {
            flag,
            raised: Cell::new(true),
        };
        (taking, lifecycle.load())
    }

    /// Takes a task for the calling worker `index` under its `taking` flag (ground rules),
    /// unless the pool is stopping. `runs`: how many tasks the worker has run (fairness turns).
    pub(crate) fn take(&self, index: usize, runs: u32, lifecycle: &AtomicLifecycle) -> Found<'_> {
        let (taking, life) = self.raise_taking(index, lifecycle);
        if life == Lifecycle::ShutdownNow {
            taking.lower_untouched();
            return Found::ShutdownNow;
        }
        let task = LOCAL.with(|l| {
            let local = l.borrow();
            let local = local.as_ref()?;
            self.take_from_queues(index, &local.deque, runs)
        });
        match task {
            Some(task) => Found::Task(task, taking),
            None => {
                taking.lower_untouched();
                Found::Nothing
            }
        }
    }

    /// Own deque's LIFO end first (cache-warm), then the injector, then siblings; on a fairness
    /// turn the injector and the own deque's FIFO end come first (ground rules).
    fn take_from_queues(
        &self,
        index: usize,
        deque: &Worker<TaskRef>,
        runs: u32,
    ) -> Option<TaskRef> {
        if runs % FAIR_INTERVAL == 0 {
            let own_oldest = || steal_retrying(|| self.stealers[index].steal());
            let fair = if (runs / FAIR_INTERVAL) % 2 == 0 {
                self.take_injector_batch(deque).or_else(own_oldest)
            } else {
                own_oldest().or_else(|| self.take_injector_batch(deque))
            };
            if fair.is_some() {
                return fair;
            }
        }
        if let Some(task) = deque.pop() {
            return Some(task);
        }
        self.steal_anywhere(index, deque)
    }

    /// The injector, then each sibling, once per round. A queue that answers `Retry` (another
    /// thread was moving its ends) is not spun on: the others are tried first, and only a round
    /// in which some queue said `Retry` goes round again.
    fn steal_anywhere(&self, index: usize, deque: &Worker<TaskRef>) -> Option<TaskRef> {
        let n = self.stealers.len();
        loop {
            let mut retry = false;
            match self.injector.steal_batch_and_pop(deque) {
                Steal::Success(task) => {
                    self.more_behind();
                    return Some(task);
                }
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
            for k in 1..n {
                match self.stealers[(index + k) % n].steal() {
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

    /// A batch from the injector into `deque`, one of it popped.
    fn take_injector_batch(&self, deque: &Worker<TaskRef>) -> Option<TaskRef> {
        let stolen = steal_retrying(|| self.injector.steal_batch_and_pop(deque))?;
        self.more_behind();
        Some(stolen)
    }

    /// After a take from the injector: if more waits behind it, let a sleeper help.
    fn more_behind(&self) {
        if !self.injector.is_empty() {
            self.sleep.notify(1);
        }
    }

    /// True if any queue holds a task (a racy snapshot, used before parking).
    pub(crate) fn has_work(&self) -> bool {
        !self.injector.is_empty() || self.stealers.iter().any(|s| !s.is_empty())
    }

    // ---- shutdown_now -----------------------------------------------------------------------

    /// Waits until no worker holds a task whose fate is undecided (called after `ShutdownNow` is
    /// stored, before the sweep). Skips the calling thread if it is one of our workers.
    pub(crate) fn quiesce(&self) {
        // SeqCst fence: pairs with the fence in `raise_taking` (ground rules). `ShutdownNow` was
        // stored before it.
        fence(Ordering::SeqCst);
        let me = self.current_worker();
        for (index, flag) in self.taking.iter().enumerate() {
            if Some(index) == me {
                continue;
            }
            // Acquire: pairs with the Release in `Taking::lower`, so the worker's CAS on the
            // task it held happens before `shutdown_now` returns.
            while flag.load(Ordering::Acquire) {
                crate::sync::thread::yield_now();
            }
        }
    }

    /// Empties every queue into `each` (`shutdown_now`'s sweep, after `quiesce`).
    pub(crate) fn drain(&self, mut each: impl FnMut(TaskRef)) {
        while let Some(task) = steal_retrying(|| self.injector.steal()) {
            each(task);
        }
        for stealer in self.stealers.iter() {
            while let Some(task) = steal_retrying(|| stealer.steal()) {
                each(task);
            }
        }
    }

    /// One task off the injector (a loom model's bare worker step).
    #[cfg(all(test, wheelpool_loom))]
    pub(crate) fn steal_injected(&self) -> Option<TaskRef> {
        steal_retrying(|| self.injector.steal())
    }

    /// The index of the calling thread if it is one of our workers.
    fn current_worker(&self) -> Option<usize> {
        LOCAL.with(|l| {
            let local = l.try_borrow().ok()?;
            local
                .as_ref()
                .filter(|l| l.pool == self.pool)
                .map(|l| l.index)
        })
    }
}

//! The ready queues: the shared injector, one LIFO deque per worker, and how workers sleep on
//! them (`Sleep`). Below both the core (which pushes) and the workers (which take): it knows
//! neither, only tasks, the lifecycle and the thread's own deque.
//!
//! # Ground rules
//!
//! **Fairness in time: the injector.** A worker pops its own deque from the LIFO end (the task
//! it just pushed is cache-warm), so a task that keeps `execute`-ing its own continuation would
//! keep that end busy forever, while due timers and tasks from outside the pool wait on the
//! shared injector. A count of runs cannot bound that wait in time (64 runs of 1 ms links held a
//! 1 ms timer 62 ms), and a clock read per task costs too much, so the injector says when it
//! has work: `injected`, on its own cache line, is raised by whoever pushes onto the injector
//! (the timer thread's due tasks, a schedule from outside, a periodic task's re-arm that is
//! already due: a late fixed-rate run catching up), after the push and its SeqCst fence
//! (the one in `Sleep::notify`), and only if it reads lowered (no write while it is up). A
//! worker reads it (Relaxed: one load of a line that changes only when work arrives) before
//! each take; if it is up, the worker lowers it, `fence(SeqCst)`, and takes one task from the
//! injector before its own deque (a batch only if its deque is empty, so nothing it moves there
//! is buried under its chain), raising it again if more waits. So a task pushed onto the
//! injector waits for the run in progress on a worker, not for its local work: fair in time,
//! about one task's length, however long tasks run. Local work is not starved by a stream of
//! injected tasks either: after [`INJECTOR_STREAK`] injector-first takes in a row, a worker's
//! next take serves its own deque first. (A late fixed-rate task's catch-up runs go through the
//! injector too, so they run back to back, as `MissedTicks::Burst` promises, up to that streak.)
//! A batch taken off the injector into an empty deque (at most 32 tasks) is popped before the
//! injector is looked at again: those tasks were ahead of whatever came after them, and a
//! steal from the shared injector for every task, its head contended by every worker, had
//! cost W4's outside submitters about 35% of their rate. A task pushed meanwhile waits for the
//! rest of that batch, which it queued behind anyway.
//!
//! No lowering hides a pushed task: the pusher's fence comes before its read of `injected`, the
//! worker's fence after its lowering. If the pusher's read saw a value from before that lowering,
//! its fence is first in the SeqCst order, and the worker's look at the injector sees the push;
//! otherwise the pusher saw the flag lowered (and raised it) or raised again by someone after
//! the lowering. Either way, after each push the flag is up or a worker's look comes after it.
//! A stale read of a raised flag costs at most one task's length. A manual clock changes
//! nothing here: no clock is read.
//!
//! **Fairness in runs: buried tasks.** Every [`FAIR_INTERVAL`] runs the worker also looks first at
//! the work that has waited longest, alternating between two sources: the injector and the FIFO
//! end of its own deque (older tasks that a chain keeps burying). Whichever source comes second on
//! a fairness turn is still tried before the LIFO end. So a task in a worker's deque reaches its
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

/// The most due tasks past its first that a watcher's poll leaves the timer thread to find
/// helpers for ("Helpers for the watcher's due tasks" in `timer/mod.rs`); more is a burst that
/// wants helpers at once. 20 000 one-second heartbeats took 1.56 s of CPU over 4 s with 3 or
/// more, 1.68 s with 1, 1.93 s with none; with no limit W5 (ten thousand 10 ms tasks) took 22%
/// more CPU, with up to 31 none more. W3's median lateness: 16.6 us at 7, 18.1 us at 3.
const LEAVE_AT_MOST: usize = 7;

/// Every this many runs a worker serves the longest-waiting work before its LIFO end (ground
/// rules: fairness in runs). Go's scheduler and tokio check their global queue every 61 runs; we
/// alternate two sources (injector, own FIFO end), so each gets the first pick every 64 runs,
/// about the same spacing. A power of two makes the test a mask. A fairness turn with nothing
/// waiting costs an emptiness check of the injector and one failed steal: noise at one run in
/// 32. Due timers do not wait for it: `injected` serves them within about one task's length.
const FAIR_INTERVAL: u32 = 32;

/// Most takes in a row that serve the injector ahead of a worker's own deque because
/// `injected` is up (ground rules: fairness in time); then one take serves the deque first. As
/// many as a fairness turn's interval: local work waits at most as many runs behind injected
/// work as injected work used to wait behind local work, and a burst of catch-up runs of a
/// late fixed-rate task goes through mostly in one piece.
const INJECTOR_STREAK: u32 = FAIR_INTERVAL;

/// A worker's fairness state (ground rules): how many tasks it has run (turns in runs), and
/// how many takes in a row served the injector ahead of its own deque (turns in time).
#[derive(Debug, Default)]
pub(crate) struct Turns {
    runs: u32,
    injector_streak: u32,
    /// Tasks left in the own deque from the last batch taken off the injector: the next takes
    /// pop them first (ground rules: fairness in time).
    batch_left: u32,
}

impl Turns {
    /// The worker ran a task it took.
    pub(crate) fn ran(&mut self) {
        self.runs = self.runs.wrapping_add(1);
    }
}

/// The queues all workers share, and how they sleep on them.
#[derive(Debug)]
pub(crate) struct ReadyQueues {
    /// The pool these queues belong to: a task pushed from a worker of another pool must not
    /// land on that worker's deque.
    pool: PoolId,
    injector: Injector<TaskRef>,
    stealers: Box<[Stealer<TaskRef>]>,
    pub(crate) sleep: Sleep,
    /// Raised when a task lands on the injector; a worker that sees it serves the injector
    /// before its own deque (ground rules: fairness in time).
    injected: CachePadded<AtomicBool>,
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
            injected: CachePadded::new(AtomicBool::new(false)),
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
        let injected = self.push_quietly(task);
        let woken = self.sleep.notify(1);
        if injected {
            self.mark_injected();
        }
        woken
    }

    /// A due task onto the injector, wherever the caller is (a periodic task's late re-arm on a
    /// worker); then wake a sleeper. Returns how many sleepers it woke.
    pub(crate) fn push_due(&self, task: TaskRef) -> usize {
        self.injector.push(task);
        let woken = self.sleep.notify(1);
        self.mark_injected();
        woken
    }

    /// The timer thread's batch of due tasks, onto the injector.
    pub(crate) fn push_from_timer(&self, batch: &mut Vec<TaskRef>) {
        let n = batch.len();
        if n == 0 {
            return;
        }
        for task in batch.drain(..) {
            self.injector.push(task);
        }
        self.sleep.notify(n);
        self.mark_injected();
    }

    /// After a push onto the injector and the SeqCst fence in `Sleep::notify`: raises
    /// `injected` (ground rules: fairness in time).
    fn mark_injected(&self) {
        // Relaxed: ordered after the push by the fence in `notify`, which pairs with the fence
        // in `take_injected`. Written only if lowered: while work keeps arriving the line stays
        // shared by the workers that read it.
        if !self.injected.load(Ordering::Relaxed) {
            self.injected.store(true, Ordering::Relaxed);
        }
    }

    /// The watcher's due tasks, onto the calling worker's deque: it runs them itself. For the
    /// ones past the first it wakes sleepers, unless there are at most [`LEAVE_AT_MOST`] and
    /// `leave` (`Timer::leave_helpers`) takes the waking over: then the timer thread wakes them
    /// on its next pass if they still wait ("Helpers for the watcher's due tasks" in
    /// `timer/mod.rs`).
    pub(crate) fn push_from_watcher(
        &self,
        due: &mut Vec<TaskRef>,
        leave: impl FnOnce(usize) -> bool,
    ) {
        let n = due.len();
        for task in due.drain(..) {
            self.push_quietly(task);
        }
        let others = n.saturating_sub(1);
        if others > LEAVE_AT_MOST {
            self.sleep.notify(others); // a burst: helpers at once, wherever the kernel puts them
        } else if others > 0 && !leave(others) {
            self.sleep.notify_away(others);
        }
    }

    /// Onto the calling worker's own deque (if it is one of ours), else the injector; no wake.
    /// True if it went onto the injector.
    fn push_quietly(&self, task: TaskRef) -> bool {
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
        match task {
            Some(task) => {
                self.injector.push(task);
                true
            }
            None => false,
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
    /// unless the pool is stopping. `turns`: the worker's fairness state.
    pub(crate) fn take(
        &self,
        index: usize,
        turns: &mut Turns,
        lifecycle: &AtomicLifecycle,
    ) -> Found<'_> {
        let (taking, life) = self.raise_taking(index, lifecycle);
        if life == Lifecycle::ShutdownNow {
            taking.lower_untouched();
            return Found::ShutdownNow;
        }
        let task = LOCAL.with(|l| {
            let local = l.borrow();
            let local = local.as_ref()?;
            self.take_from_queues(index, &local.deque, turns)
        });
        match task {
            Some(task) => Found::Task(task, taking),
            None => {
                taking.lower_untouched();
                Found::Nothing
            }
        }
    }

    /// The rest of a batch the last take moved into the own deque first (ground rules:
    /// fairness in time), then [`take_in_order`](Self::take_in_order).
    fn take_from_queues(
        &self,
        index: usize,
        deque: &Worker<TaskRef>,
        turns: &mut Turns,
    ) -> Option<TaskRef> {
        if turns.batch_left > 0 {
            turns.batch_left -= 1;
            if let Some(task) = deque.pop() {
                return Some(task);
            }
            turns.batch_left = 0;
        }
        let before = deque.len();
        let task = self.take_in_order(index, deque, turns);
        // What the take moved into the deque beyond the task it returned: a batch off the
        // injector, on top of the deque, served by the next takes.
        turns.batch_left = u32::try_from(deque.len().saturating_sub(before)).unwrap_or(u32::MAX);
        task
    }

    /// Own deque's LIFO end first (cache-warm), then the injector, then siblings; the injector
    /// first when `injected` is up (up to a streak), and on a fairness turn the
    /// injector and the own deque's FIFO end first (ground rules).
    fn take_in_order(
        &self,
        index: usize,
        deque: &Worker<TaskRef>,
        turns: &mut Turns,
    ) -> Option<TaskRef> {
        if turns.injector_streak < INJECTOR_STREAK {
            if let Some(task) = self.take_injected(deque) {
                turns.injector_streak += 1;
                return Some(task);
            }
        }
        turns.injector_streak = 0;
        let runs = turns.runs;
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

    /// If `injected` is up: lowers it and takes from the injector, raising it again if more
    /// waits (ground rules: fairness in time). One task if `deque` holds work (a batch moved
    /// there would be buried under the worker's own chain), a batch if it is empty.
    pub(crate) fn take_injected(&self, deque: &Worker<TaskRef>) -> Option<TaskRef> {
        // Relaxed: a hint; the fences below and in `Sleep::notify` make it reliable.
        if !self.injected.load(Ordering::Relaxed) {
            return None;
        }
        let batch = deque.is_empty();
        let steal = || {
            if batch {
                steal_retrying(|| self.injector.steal_batch_and_pop(deque))
            } else {
                steal_retrying(|| self.injector.steal())
            }
        };
        let mut task = steal();
        if !self.injector.is_empty() {
            // More waits: the flag stays up and unwritten, so while work keeps arriving its
            // line stays shared by the pushers that read it.
            if batch {
                self.sleep.notify(1); // a sleeper may help with what waits behind
            }
            return task;
        }
        self.injected.store(false, Ordering::Relaxed);
        // SeqCst fence: pairs with the one in `Sleep::notify` that precedes a pusher's read of
        // `injected` (ground rules): the look below sees that push, or that pusher raises the
        // flag.
        fence(Ordering::SeqCst);
        if !self.injector.is_empty() {
            self.injected.store(true, Ordering::Relaxed);
            if task.is_none() {
                task = steal();
            }
            self.sleep.notify(1);
        }
        task
    }

    /// True if `injected` is up (a loom model's check).
    #[cfg(all(test, wheelpool_loom))]
    pub(crate) fn injected(&self) -> bool {
        self.injected.load(Ordering::Relaxed)
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

    /// Tasks in the injector and every worker's deque (a racy snapshot, for `stats()`).
    pub(crate) fn ready(&self) -> usize {
        self.injector.len() + self.stealers.iter().map(Stealer::len).sum::<usize>()
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

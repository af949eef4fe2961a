//! The workers: each owns a LIFO deque, steals from the shared injector and from its siblings,
//! runs tasks, and sleeps through `Sleep` when there is nothing to do.

use super::core::{Core, Lifecycle};
use super::sleep::Sleep;
use crate::sync::{steal_retrying, Arc, AtomicBool, Injector, Ordering, Stealer, Worker};
use crate::task::TaskRef;
use std::cell::RefCell;

/// Rounds of looking for work before a worker announces itself as a sleeper. Each round spins a
/// little longer; the last few yield the CPU. Short: an idle pool must not burn CPU.
#[cfg(not(wheelpool_loom))]
const SPIN_ROUNDS: u32 = 10;
#[cfg(wheelpool_loom)]
const SPIN_ROUNDS: u32 = 0;

/// The queues all workers share.
#[derive(Debug)]
pub(crate) struct WorkerSet {
    pub(crate) injector: Injector<TaskRef>,
    pub(crate) stealers: Vec<Stealer<TaskRef>>,
    pub(crate) sleep: Sleep,
    /// One flag per worker, set while it moves a batch from the injector into its deque: for
    /// that moment the batch is in neither, so `shutdown_now` waits for the flags to clear
    /// before it sweeps the queues.
    batching: Box<[AtomicBool]>,
}

impl WorkerSet {
    /// The shared queues and one local deque per worker (handed to the worker threads).
    pub(crate) fn new(workers: usize) -> (Self, Vec<Worker<TaskRef>>) {
        let locals: Vec<Worker<TaskRef>> = (0..workers).map(|_| Worker::new_lifo()).collect();
        let set = WorkerSet {
            injector: Injector::new(),
            stealers: locals.iter().map(Worker::stealer).collect(),
            sleep: Sleep::new(workers),
            batching: (0..workers).map(|_| AtomicBool::new(false)).collect(),
        };
        (set, locals)
    }

    /// Steals a batch from the injector into `dest` and pops one, unless the pool is stopping.
    ///
    /// Protocol with `quiesce_batches`: the flag store and the lifecycle load here, and the
    /// lifecycle store and flag loads in `shutdown_now`, are all SeqCst. So either this worker
    /// sees `Stop` and moves nothing, or `shutdown_now` sees the flag and waits until the batch
    /// is in the deque, where its stealer finds it.
    fn steal_batch(&self, core: &Core, index: usize, dest: &Worker<TaskRef>) -> Option<TaskRef> {
        let flag = &self.batching[index];
        flag.store(true, Ordering::SeqCst);
        let stolen = if core.lifecycle() == Lifecycle::Stop {
            None
        } else {
            steal_retrying(|| self.injector.steal_batch_and_pop(dest))
        };
        // SeqCst (at least Release): pairs with the load in `quiesce_batches`, publishing the
        // pushes into `dest` before the flag reads clear.
        flag.store(false, Ordering::SeqCst);
        stolen
    }

    /// Waits until no worker is moving a batch (called after `Stop` is stored).
    pub(crate) fn quiesce_batches(&self) {
        for flag in self.batching.iter() {
            while flag.load(Ordering::SeqCst) {
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

/// A worker thread's body.
pub(crate) fn run(core: Arc<Core>, index: usize, deque: Worker<TaskRef>) {
    crate::timer::mark_pool_thread();
    crate::timer::home::set(index); // workers spread over the timer shards
    let owner = Arc::as_ptr(&core) as usize;
    LOCAL.with(|l| *l.borrow_mut() = Some(Local { owner, deque }));
    loop {
        // shutdown_now: nothing new starts. A task this worker took off a queue before it saw
        // the stop was not there for shutdown_now's sweep, so it runs: every task ends either
        // run or returned, never both, never neither.
        if core.lifecycle() == Lifecycle::Stop {
            break;
        }
        if let Some(task) = find_task(&core, index) {
            run_and_release(&core, task);
            continue;
        }
        if core.worker_should_exit() {
            break;
        }
        let sleep = &core.workers.sleep;
        sleep.start_searching();
        let found = spin_for_work(&core, index);
        let last_searcher = sleep.stop_searching();
        if let Some(task) = found {
            if last_searcher {
                sleep.notify(1); // pushes may have skipped waking anyone while we searched
            }
            run_and_release(&core, task);
            continue;
        }
        core.workers.sleep.sleep(index, || {
            core.workers.has_work() || core.worker_should_exit()
        });
    }
    // Anything left in the local deque stays reachable through its stealer for shutdown_now.
    LOCAL.with(|l| l.borrow_mut().take());
}

/// Runs `task`, then lets go of the worker's reference. If that was the last one, the task's
/// unread result or closure is dropped here, where a panicking `Drop` cannot unwind the worker.
fn run_and_release(core: &Core, task: TaskRef) {
    core.run_task(&task);
    crate::task::drop_user(task);
}

/// Looks for work a few more times before sleeping.
fn spin_for_work(core: &Core, index: usize) -> Option<TaskRef> {
    for round in 0..SPIN_ROUNDS {
        if round + 3 < SPIN_ROUNDS {
            for _ in 0..(1u32 << round) {
                std::hint::spin_loop();
            }
        } else {
            crate::sync::thread::yield_now();
        }
        if let Some(task) = find_task(core, index) {
            return Some(task);
        }
    }
    None
}

/// Own deque first (LIFO: cache-warm), then the injector, then siblings.
fn find_task(core: &Core, index: usize) -> Option<TaskRef> {
    let from_local = LOCAL.with(|l| l.borrow().as_ref().and_then(|local| local.deque.pop()));
    if from_local.is_some() {
        return from_local;
    }
    let set = &core.workers;
    let stolen = LOCAL.with(|l| {
        let local = l.borrow();
        let local = local.as_ref()?;
        set.steal_batch(core, index, &local.deque)
    });
    if stolen.is_some() {
        if !set.injector.is_empty() {
            set.sleep.notify(1); // more behind it: let a sleeper help
        }
        return stolen;
    }
    let n = set.stealers.len();
    (1..n).find_map(|k| steal_retrying(|| set.stealers[(index + k) % n].steal()))
}

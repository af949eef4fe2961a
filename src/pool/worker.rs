//! The workers: each owns a LIFO deque, steals from the shared injector and from its siblings,
//! runs tasks, and sleeps through `Sleep` when there is nothing to do.

use super::core::{Core, Lifecycle};
use super::sleep::Sleep;
use crate::sync::{Arc, Injector, Steal, Stealer, Worker};
use crate::task::TaskRef;
use std::cell::RefCell;

/// Rounds of looking for work before a worker announces itself as a sleeper. Each round spins a
/// little longer; the last few yield the CPU. Short: an idle pool must not burn CPU.
#[cfg(not(loom))]
const SPIN_ROUNDS: u32 = 10;
#[cfg(loom)]
const SPIN_ROUNDS: u32 = 0;

/// The queues all workers share.
#[derive(Debug)]
pub(crate) struct WorkerSet {
    pub(crate) injector: Injector<TaskRef>,
    pub(crate) stealers: Vec<Stealer<TaskRef>>,
    pub(crate) sleep: Sleep,
}

impl WorkerSet {
    /// The shared queues and one local deque per worker (handed to the worker threads).
    pub(crate) fn new(workers: usize) -> (Self, Vec<Worker<TaskRef>>) {
        let locals: Vec<Worker<TaskRef>> = (0..workers).map(|_| Worker::new_lifo()).collect();
        let set = WorkerSet {
            injector: Injector::new(),
            stealers: locals.iter().map(Worker::stealer).collect(),
            sleep: Sleep::new(workers),
        };
        (set, locals)
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

#[cfg(not(loom))]
std::thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}
#[cfg(loom)]
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
            core.run_task(task);
            continue;
        }
        if core.worker_should_exit() {
            break;
        }
        if let Some(task) = spin_for_work(&core, index) {
            core.run_task(task);
            continue;
        }
        core.workers.sleep.sleep(index, || core.workers.has_work() || core.worker_should_exit());
    }
    // Anything left in the local deque stays reachable through its stealer for shutdown_now.
    LOCAL.with(|l| l.borrow_mut().take());
}

/// Looks for work a few more times before sleeping.
fn spin_for_work(core: &Core, index: usize) -> Option<TaskRef> {
    for round in 0..SPIN_ROUNDS {
        if round < SPIN_ROUNDS - 3 {
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
        retry(|| set.injector.steal_batch_and_pop(&local.deque))
    });
    if stolen.is_some() {
        if !set.injector.is_empty() {
            set.sleep.notify(1); // more behind it: let a sleeper help
        }
        return stolen;
    }
    let n = set.stealers.len();
    (1..n).find_map(|k| retry(|| set.stealers[(index + k) % n].steal()))
}

/// Repeats a steal while it says `Retry`.
fn retry(mut steal: impl FnMut() -> Steal<TaskRef>) -> Option<TaskRef> {
    loop {
        match steal() {
            Steal::Success(task) => return Some(task),
            Steal::Empty => return None,
            Steal::Retry => continue,
        }
    }
}

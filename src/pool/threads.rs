//! Starting a pool's threads: the timer thread, then the workers with their hooks
//! (`Builder::on_thread_start` / `on_thread_stop`), the latch through which `build` learns
//! that every worker has run its start hook, and each thread's exit bookkeeping.
//!
//! A worker runs its start hook before it takes any task and its stop hook after it has left
//! the work loop, before it counts itself out of the pool (so `await_termination` returning
//! true means every stop hook has run). The timer thread runs no hook: it never runs user code.

use super::core::Core;
use crate::error::BuildError;
use crate::sync::{Arc, Condvar, Mutex, Worker};
use crate::task::TaskRef;
use crate::timer::driver;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;

/// A hook as the builder keeps it.
pub(crate) type Hook = Arc<dyn Fn() + Send + Sync>;

/// The hooks every worker runs.
#[derive(Clone, Default)]
pub(crate) struct ThreadHooks {
    pub(crate) start: Option<Hook>,
    pub(crate) stop: Option<Hook>,
}

/// Counts workers through their start hooks; keeps the first panic message.
#[derive(Debug)]
pub(crate) struct StartLatch {
    status: Mutex<StartStatus>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct StartStatus {
    started: usize,
    panic: Option<String>,
}

impl StartLatch {
    fn new() -> Arc<Self> {
        Arc::new(StartLatch {
            status: Mutex::new(StartStatus::default()),
            changed: Condvar::new(),
        })
    }

    /// One worker is through its start hook; `panic`: the hook's panic message.
    fn arrive(&self, panic: Option<String>) {
        let mut st = self.status.lock();
        st.started += 1;
        if st.panic.is_none() {
            st.panic = panic;
        }
        drop(st);
        self.changed.notify_all();
    }

    /// Waits until `workers` workers have run their start hooks; the first panic message, if
    /// a hook panicked.
    fn wait(&self, workers: usize) -> Option<String> {
        let mut st = self.status.lock();
        while st.started < workers {
            st = crate::sync::wait_until(&self.changed, st, None);
        }
        st.panic.take()
    }
}

/// A worker thread's body with its hooks around the work loop.
fn run_worker(
    core: Arc<Core>,
    index: usize,
    deque: Worker<TaskRef>,
    hooks: ThreadHooks,
    latch: Arc<StartLatch>,
) {
    let panic = hooks.start.as_ref().and_then(|start| {
        catch_unwind(AssertUnwindSafe(|| start()))
            .err()
            .map(|payload| {
                let message = crate::panic::panic_message(&*payload);
                crate::panic::drop_payload(payload);
                message
            })
    });
    let started = panic.is_none();
    latch.arrive(panic);
    drop(latch);
    if !started {
        // `build` stops the pool and reports the panic; this worker takes no task and, its
        // setup having failed, runs no stop hook.
        return;
    }
    super::worker::run(core.clone(), index, deque);
    if let Some(stop) = &hooks.stop {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| stop())) {
            core.panics.report(payload); // not counted as a task panic
        }
    }
}

/// Spawns the timer thread, then the workers; on failure stops and joins what started.
pub(crate) fn start(
    core: &Arc<Core>,
    name: &str,
    deques: Vec<Worker<TaskRef>>,
    hooks: &ThreadHooks,
) -> Result<Vec<JoinHandle<()>>, BuildError> {
    let workers = deques.len();
    let total = workers + 1;
    let latch = StartLatch::new();
    let mut handles = Vec::with_capacity(total);
    match spawn(core, format!("{name}-timer"), true, |c| driver::run(c)) {
        Ok(h) => handles.push(h),
        Err(e) => {
            core.driver_exited();
            (0..total).for_each(|_| core.termination.thread_exited());
            return Err(BuildError::spawn(e));
        }
    }
    for (index, deque) in deques.into_iter().enumerate() {
        let (hooks, latch) = (hooks.clone(), latch.clone());
        let body = move |c| run_worker(c, index, deque, hooks, latch);
        let spawned = spawn(core, format!("{name}-{index}"), false, body);
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                (handles.len()..total).for_each(|_| core.termination.thread_exited());
                stop_and_join(core, handles);
                return Err(BuildError::spawn(e));
            }
        }
    }
    if let Some(message) = latch.wait(workers) {
        stop_and_join(core, handles);
        return Err(BuildError::thread_start_panicked(message));
    }
    Ok(handles)
}

/// Spawns the pool thread `name` running `body`, with its exit bookkeeping ([`ExitGuard`])
/// around it; `driver`: it is the timer thread.
fn spawn(
    core: &Arc<Core>,
    name: String,
    driver: bool,
    body: impl FnOnce(Arc<Core>) + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    let c = core.clone();
    std::thread::Builder::new().name(name).spawn(move || {
        let _exit = ExitGuard { core: &c, driver };
        body(c.clone());
    })
}

/// Stops a pool that failed to start and joins the threads it had.
fn stop_and_join(core: &Arc<Core>, handles: Vec<JoinHandle<()>>) {
    drop(core.shutdown_now());
    for h in handles {
        let _ = h.join();
    }
}

/// Runs a pool thread's exit bookkeeping even if the thread unwinds.
struct ExitGuard<'a> {
    core: &'a Arc<Core>,
    driver: bool,
}

impl Drop for ExitGuard<'_> {
    fn drop(&mut self) {
        if self.driver {
            self.core.driver_exited();
        }
        self.core.termination.thread_exited();
    }
}

impl std::fmt::Debug for ThreadHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadHooks")
            .field("start", &self.start.is_some())
            .field("stop", &self.stop.is_some())
            .finish()
    }
}

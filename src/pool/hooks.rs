//! Worker thread hooks (`Builder::on_thread_start` / `on_thread_stop`) and the latch through
//! which `build` learns that every worker has run its start hook.
//!
//! A worker runs its start hook before it takes any task and its stop hook after it has left
//! the work loop, before it counts itself out of the pool (so `await_termination` returning
//! true means every stop hook has run). The timer thread runs no hook: it never runs user code.

use super::core::Core;
use crate::sync::{Arc, Condvar, Mutex};
use crate::task::TaskRef;
use std::panic::{catch_unwind, AssertUnwindSafe};

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
    pub(crate) fn new() -> Arc<Self> {
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
    pub(crate) fn wait(&self, workers: usize) -> Option<String> {
        let mut st = self.status.lock();
        while st.started < workers {
            st = crate::sync::wait_until(&self.changed, st, None);
        }
        st.panic.take()
    }
}

/// A worker thread's body with its hooks around the work loop.
pub(crate) fn run_worker(
    core: Arc<Core>,
    index: usize,
    deque: crate::sync::Worker<TaskRef>,
    hooks: ThreadHooks,
    latch: Arc<StartLatch>,
) {
    let panic = hooks.start.as_ref().and_then(|start| {
        catch_unwind(AssertUnwindSafe(|| start()))
            .err()
            .map(|payload| {
                let message = super::core::panic_message(&*payload);
                crate::task::drop_user(payload);
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
            core.report_hook_panic(payload);
        }
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

//! Running a task on the calling worker, with the pool's bookkeeping for what became of it
//! (counted, re-armed through the core, stopped by a graceful shutdown), and the one `RunEnv`
//! the task sees: the core's clock, lifecycle, counters and panic handler, plus the worker's
//! `taking` flag to lower once the task's fate is decided (ground rules in `queues.rs`).

use super::core::{Arrival, Core};
use super::counters::RunCounts;
use super::lifecycle::Lifecycle;
use super::queues::Taking;
use crate::panic::panic_message;
use crate::task::state::End;
use crate::task::{Header, RunEnv, RunOutcome, Start, TaskInfo, TaskRef};
use std::any::Any;

/// Runs one task on the calling thread, worker `worker`, and does the bookkeeping for what
/// became of it. `taking`: the worker's raised `taking` flag, lowered as soon as the task's fate
/// is decided (`None`: a loom model's bare step, which holds no flag).
pub(crate) fn run_task(core: &Core, worker: usize, task: &TaskRef, taking: Option<&Taking<'_>>) {
    let counts = core.counters.worker(worker);
    let run = Run {
        core,
        counts,
        taking,
    };
    if task.header().is_periodic()
        && core.periodic_stops_at_shutdown()
        && core.lifecycle() == Lifecycle::Shutdown
    {
        // Graceful shutdown while queued: a periodic task that had not started does not
        // start. Not under `ShutdownNow`: there a task this worker took before
        // `shutdown_now`'s sweep runs (it was not there to be handed back; `shutdown_now`
        // waits for its start), and `run` then ends it. The task cannot start on this path
        // (the stop wins, or it is already ended), so `shutdown_now` need not wait for the
        // drop.
        run.claim_decided();
        if core.stop_for_shutdown(task) || !task.header().state.is_scheduled() {
            left_pool(core);
            return;
        }
    }
    counts.run_started();
    match task.run(&run) {
        RunOutcome::NotStarted => {
            counts.run_over();
        }
        // `run_ending` has done the bookkeeping, before the future completed.
        RunOutcome::Finished(_) => {}
        RunOutcome::Rearm { ran_ok, now } => {
            if ran_ok {
                counts.completed();
            }
            counts.run_over();
            // `now` was read before the re-arm, perhaps as the run started
            // (`Job::plans_from_end`): an older reading never runs a task early, and a deadline
            // the run overran is found by `Timer::insert`, which hands it straight back.
            // Err: a shutdown stopped it after its run; `stop_for_shutdown` did the accounting.
            let _ = core.schedule_admitted(task.clone(), now, Arrival::Rearm);
        }
    }
    left_pool(core);
}

/// A manual clock's settle counts tasks in the pool: one has left it (run, or not started).
fn left_pool(core: &Core) {
    if let Some(s) = &core.timer.settle {
        s.left_pool();
    }
}

/// A task's run as the pool sees it: the core's bookkeeping, the running worker's own counts,
/// and its `taking` flag to lower once the task's fate is decided.
struct Run<'a> {
    core: &'a Core,
    counts: &'a RunCounts,
    taking: Option<&'a Taking<'a>>,
}

impl RunEnv for Run<'_> {
    fn now_nanos(&self) -> u64 {
        self.core.timer.time.now_nanos()
    }

    fn stopping(&self) -> bool {
        // SeqCst (in `load`): pairs with the lifecycle stores in `shutdown` and `shutdown_now`.
        match self.core.lifecycle() {
            Lifecycle::Running => false,
            Lifecycle::Shutdown => self.core.periodic_stops_at_shutdown(),
            Lifecycle::ShutdownNow => true,
        }
    }

    fn run_ending(&self, end: End, ran_ok: bool) {
        let core = self.core;
        if ran_ok {
            self.counts.completed();
        }
        self.counts.run_over();
        core.task_ended(matches!(end, End::Cancelled | End::Shutdown));
    }

    fn report_panic(&self, task: TaskInfo, payload: Box<dyn Any + Send>) -> String {
        self.counts.panicked();
        let message = panic_message(&*payload);
        crate::trace::panicked(task.id(), task.name(), task.kind().label(), &message);
        // The handler reads the task with `TaskInfo::panicking` (its signature stays one
        // argument); the name is cloned on this path only, never for a run that returns.
        task.while_panicking(|| self.core.panics.report(payload));
        message
    }

    fn run_starts(&self, task: &Header) -> Option<Start> {
        let start = task.start(|| self.now_nanos())?;
        self.core.lateness.record(start.late);
        Some(start)
    }

    fn plan_time(&self, start: Option<Start>) -> u64 {
        // A manual clock may have been advanced by the run itself; reading it costs nothing.
        match start {
            Some(start) if !self.core.timer.time.clock.is_manual() => start.at,
            _ => self.now_nanos(),
        }
    }

    fn claim_decided(&self) {
        if let Some(taking) = self.taking {
            taking.lower();
        }
    }
}

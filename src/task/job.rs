//! What a task runs: a one-shot closure or a periodic one (see `periodic.rs`).

use super::PendingTask;

/// The closure inside a task, with what the task needs to know about re-running it.
pub(crate) trait Job: Send + 'static {
    /// What one run produces for the future.
    type Output: Send + 'static;

    /// Runs once. A one-shot job is not called again after this.
    fn call(&mut self) -> Self::Output;

    /// For a periodic job: plans the next run after one that finished at `now` (nanoseconds since
    /// the pool's origin) and returns its deadline. `None` for one-shot jobs.
    fn plan_next(&mut self, now: u64) -> Option<u64>;

    /// True if a panicking run should not stop the task (periodic opt-in).
    fn survives_panic(&self) -> bool {
        false
    }

    /// True once the job has said it wants no further run (a dynamic job's closure returned
    /// `None`): the task then completes with its run's value instead of re-arming.
    fn ended(&self) -> bool {
        false
    }

    /// False when the last `call` did not run the user's closure but only looked at the
    /// clock (a calendar job woken before its occurrence, to re-read the wall clock): the pool
    /// then does not count it as a completed run.
    fn counts_as_run(&self) -> bool {
        true
    }

    /// The next run was moved to `deadline` (a reset): plans that count from the planned start
    /// of a run (fixed rate, dynamic rate) count from here now. Others ignore it.
    fn rebase(&mut self, _deadline: u64) {}

    /// True for periodic jobs: a type-level fact, copied once into the task's header (which is
    /// where everything else asks).
    const PERIODIC: bool;

    /// Turns the job into a closure `shutdown_now` hands back (runs it once).
    fn into_pending(self) -> PendingTask;
}

/// A closure that runs once and yields a value.
pub(crate) struct OneShot<F>(Option<F>);

impl<F> OneShot<F> {
    pub(crate) fn new(f: F) -> Self {
        OneShot(Some(f))
    }
}

impl<F, T> Job for OneShot<F>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    type Output = T;

    fn call(&mut self) -> T {
        match self.0.take() {
            Some(f) => f(),
            None => crate::panic::broken_invariant("a one-shot job ran twice"),
        }
    }

    fn plan_next(&mut self, _now: u64) -> Option<u64> {
        None
    }

    const PERIODIC: bool = false;

    fn into_pending(self) -> PendingTask {
        match self.0 {
            Some(f) => PendingTask::new(false, Box::new(move || drop(f()))),
            None => crate::panic::broken_invariant("a run one-shot job was handed back"),
        }
    }
}

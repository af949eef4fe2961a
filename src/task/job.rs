//! What a task runs: a one-shot closure or a periodic one (see `periodic.rs`).

use super::TaskKind;

/// The closure inside a task, with what the task needs to know about re-running it.
pub(crate) trait Job: Send + 'static {
    /// What one run produces for the future.
    type Output: Send + 'static;

    /// Runs once. `Some`: the task's value, it ends (a one-shot; a dynamic job that said so).
    /// `None`: a periodic job wants another run. A one-shot job is not called again after this.
    fn call(&mut self) -> Option<Self::Output>;

    /// For a periodic job: plans the next run after one that finished at `now` (nanoseconds since
    /// the pool's origin) and returns its deadline. `None` for one-shot jobs, and for a periodic
    /// job with no run left (a calendar with no occurrence left): the task then ends with
    /// [`value_at_end`](Self::value_at_end).
    fn plan_next(&mut self, now: u64) -> Option<u64>;

    /// True if [`plan_next`](Self::plan_next) needs the time the run ended (a fixed delay counts
    /// from it; a policy for missed runs looks at it). False if the time the run started plans
    /// the same next run: a fixed rate that replays missed runs (`MissedTicks::Burst`) and a
    /// dynamic rate plan from the grid, and the pool then reads its clock once per run, not
    /// twice. An older reading is safe for the re-arm: it never runs a task early, and a run
    /// that overran its next deadline is found by `Timer::insert` (a deadline that would be
    /// its shard's earliest is checked against a fresh reading), so the missed slot runs next.
    fn plans_from_end(&self) -> bool {
        true
    }

    /// The task's value when [`plan_next`](Self::plan_next) found no run left; `None` for jobs
    /// that always plan one (a one-shot is never asked).
    fn value_at_end(&mut self) -> Option<Self::Output> {
        None
    }

    /// True if a panicking run should not stop the task (periodic opt-in).
    fn survives_panic(&self) -> bool {
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

    /// True for periodic jobs: a type-level fact (its shard is chosen by it); the header keeps
    /// the task's [`kind`](Self::kind), which is where everything else asks.
    const PERIODIC: bool;

    /// Which kind of task this job makes (copied once into the task's header).
    fn kind(&self) -> TaskKind;

    /// Turns the job into the closure `shutdown_now` hands back (runs it once).
    fn into_run(self) -> Box<dyn FnOnce() + Send>;
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

    fn call(&mut self) -> Option<T> {
        match self.0.take() {
            Some(f) => Some(f()),
            None => crate::panic::broken_invariant("a one-shot job ran twice"),
        }
    }

    fn plan_next(&mut self, _now: u64) -> Option<u64> {
        None
    }

    const PERIODIC: bool = false;

    fn kind(&self) -> TaskKind {
        TaskKind::OneShot
    }

    fn into_run(self) -> Box<dyn FnOnce() + Send> {
        match self.0 {
            Some(f) => Box::new(move || drop(f())),
            None => crate::panic::broken_invariant("a run one-shot job was handed back"),
        }
    }
}

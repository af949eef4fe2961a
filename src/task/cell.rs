//! `TaskCell<J>`: the one allocation behind a task and its future (and, once someone waits on
//! it, a boxed waker).

use super::state::{End, Snapshot};
use super::{
    Cancelled, Header, Job, Name, NameSlot, PendingTask, RawTask, RunEnv, RunOutcome, Stop,
    Stopped, TaskResult,
};
use crate::error::TaskError;
use crate::panic::{broken_invariant, call_user, drop_user};
use crate::sync::Mutex;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// Where the closure or its result is. Guarded by `TaskCell::body`.
///
/// An error is kept as a [`Failure`] (a word and a tag), not as the `TaskError` it becomes when
/// taken (a `String`'s three words): a task's cell is sized for its largest stage, and every
/// waiting timer pays for it (W1's bytes per pending timer).
enum Stage<J: Job> {
    /// Waiting to run: the closure is here.
    Waiting(J),
    /// A worker has the closure.
    Running,
    /// Finished with a value; the future has not taken it yet.
    Done(J::Output),
    /// Finished without a value; the future has not taken the error yet.
    Failed(Failure),
    /// The future took the result.
    Taken,
}

/// A finished task's error as its cell keeps it.
enum Failure {
    Cancelled,
    Shutdown,
    /// The panic message, behind one pointer (only a panicking run pays the second allocation).
    /// A thin `Box<String>`, not a `Box<str>`: the fat one would add a word to every cell.
    #[allow(clippy::box_collection)]
    Panicked(Box<String>),
}

impl<J: Job> Stage<J> {
    /// The stage that keeps `result` for the future.
    fn finished(result: Result<J::Output, TaskError>) -> Self {
        match result {
            Ok(value) => Stage::Done(value),
            Err(TaskError::Cancelled) => Stage::Failed(Failure::Cancelled),
            Err(TaskError::Shutdown) => Stage::Failed(Failure::Shutdown),
            Err(TaskError::Panicked(message)) => {
                Stage::Failed(Failure::Panicked(Box::new(message)))
            }
            Err(TaskError::Taken) => broken_invariant("a task finished with `Taken`"),
        }
    }
}

struct Body<J: Job> {
    stage: Stage<J>,
    /// The waker of the task that last polled the future (or of a thread blocked in `join`).
    /// Boxed: most timers are never waited on (they are cancelled, or detached), and a task
    /// nobody waits on keeps one word for it instead of two.
    waker: Option<Box<Waker>>,
}

/// A task: header, its name if it has one (`N`: `()` or a [`Name`]), and closure-or-result
/// (with the waker of whoever waits: a future's task, or a thread blocked in `join`).
pub(crate) struct TaskCell<J: Job, N: NameSlot = ()> {
    header: Header,
    name: N,
    body: Mutex<Body<J>>,
}

impl<J: Job, N: NameSlot> std::fmt::Debug for TaskCell<J, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskCell")
            .field("task", &(self as &dyn RawTask))
            .finish_non_exhaustive()
    }
}

impl<J: Job> TaskCell<J> {
    /// A new task without a name, `SCHEDULED` for `deadline` (nanoseconds since the pool's
    /// origin), kept by timer shard `shard` while it waits.
    pub(crate) fn new(job: J, deadline: u64, shard: u16) -> Self {
        TaskCell::with_name(job, deadline, shard, ())
    }
}

impl<J: Job> TaskCell<J, Name> {
    /// The same, called `name` (shown in `PendingTask`, `Debug`, to the panic handler).
    pub(crate) fn named(job: J, deadline: u64, shard: u16, name: Name) -> Self {
        TaskCell::with_name(job, deadline, shard, name)
    }
}

impl<J: Job, N: NameSlot> TaskCell<J, N> {
    /// The same task, with no planned time (`execute`): its runs' lateness is not measured.
    pub(crate) fn unplanned(mut self) -> Self {
        self.header.set_unplanned();
        self
    }

    fn with_name(job: J, deadline: u64, shard: u16, name: N) -> Self {
        TaskCell {
            header: Header::new(deadline, job.kind(), shard),
            name,
            body: Mutex::new(Body {
                stage: Stage::Waiting(job),
                waker: None,
            }),
        }
    }

    /// Stores the final result, then wakes the future. The caller has already moved the state to
    /// a terminal value and dropped every user value it had to drop, so a joiner that returns
    /// finds the closure's captures gone.
    fn complete(&self, result: Result<J::Output, TaskError>) {
        let mut body = self.body.lock();
        body.stage = Stage::finished(result);
        let waker = body.waker.take();
        drop(body);
        wake(waker);
    }

    /// For a task that just left `SCHEDULED` without running (a cancel or a stop won it): takes
    /// the closure out and stores `failure`, in one critical section. Returns the closure and the
    /// waiter's waker: the caller drops (or hands back) the closure, then wakes, so a joiner
    /// that wakes finds the captures gone.
    fn finish_waiting(&self, failure: Failure) -> (J, Option<Box<Waker>>) {
        let mut body = self.body.lock();
        let job = match std::mem::replace(&mut body.stage, Stage::Failed(failure)) {
            Stage::Waiting(job) => job,
            _ => broken_invariant("a task left SCHEDULED but its closure was gone"),
        };
        let waker = body.waker.take();
        (job, waker)
    }

    /// Takes the closure out of a task that just left `SCHEDULED` (a run, a cancel or a stop won
    /// it, so it must be here).
    fn take_job(&self) -> J {
        let mut body = self.body.lock();
        match std::mem::replace(&mut body.stage, Stage::Running) {
            Stage::Waiting(job) => job,
            _ => broken_invariant("a task left SCHEDULED but its closure was gone"),
        }
    }

    /// After a periodic run: put the closure back and become `SCHEDULED` for `next`, unless a
    /// cancel came in during the run. `ran_ok`: that run counts as completed.
    fn rearm(&self, env: &dyn RunEnv, job: J, next: u64, ran_ok: bool, now: u64) -> RunOutcome {
        self.header.set_deadline(next);
        let mut body = self.body.lock();
        body.stage = Stage::Waiting(job);
        // The closure is back in the body before the task can be seen as SCHEDULED again, so a
        // canceller that wins SCHEDULED -> CANCELLED finds it there.
        if self.header.state.rearm() {
            return RunOutcome::Rearm { ran_ok, now };
        }
        // RunningCancelled: the cancel returned true; no run may follow.
        let job = std::mem::replace(&mut body.stage, Stage::Running);
        drop(body);
        drop_user(job);
        self.header.state.finish_cancelled_run();
        env.run_ending(End::Cancelled, ran_ok);
        self.complete(Err(TaskError::Cancelled));
        RunOutcome::Finished(End::Cancelled)
    }

    /// After a run that ends the task: store `result` as `to`, or `Cancelled` if a cancel came in.
    /// `ran_ok`: the run that just ended returned normally (did not panic).
    fn finish_run(
        &self,
        env: &dyn RunEnv,
        job: J,
        to: End,
        result: Result<J::Output, TaskError>,
        ran_ok: bool,
    ) -> RunOutcome {
        drop_user(job);
        // Only this worker leaves RUNNING (a canceller may only mark it RUNNING_CANCELLED), and
        // the stage stays `Running` until `complete`, so joiners wait for the result below.
        if self.header.state.end_run(to) {
            env.run_ending(to, ran_ok);
            self.complete(result);
            return RunOutcome::Finished(to);
        }
        // RunningCancelled: the run's value (if any) is dropped before the future says Cancelled.
        drop_user(result);
        self.header.state.finish_cancelled_run();
        env.run_ending(End::Cancelled, ran_ok);
        self.complete(Err(TaskError::Cancelled));
        RunOutcome::Finished(End::Cancelled)
    }
}

impl<J: Job, N: NameSlot> RawTask for TaskCell<J, N> {
    fn header(&self) -> &Header {
        &self.header
    }

    fn name(&self) -> Option<&Name> {
        self.name.name()
    }

    fn run(&self, env: &dyn RunEnv) -> RunOutcome {
        if !self.header.state.start() {
            return RunOutcome::NotStarted;
        }
        let mut job = self.take_job();
        let start = env.run_starts(&self.header);
        let (id, name, kind) = (self.header.id(), self.name(), self.header.kind().label());
        let _span = crate::trace::run(id, name.map(|n| n.as_str()), kind, start.map(|s| s.late));
        env.claim_decided(); // the last thing before user code: the run starts now
        let result = catch_unwind(AssertUnwindSafe(|| job.call()))
            .map_err(|p| env.report_panic(self.info(), p));
        // A run that returned normally counts as completed; a calendar job's look at the
        // clock does not.
        let ran_ok = result.is_ok() && job.counts_as_run();
        let panic = match result {
            // A one-shot's value, or a dynamic job that ended itself: the task is done.
            Ok(Some(value)) => return self.finish_run(env, job, End::Completed, Ok(value), ran_ok),
            Ok(None) => None,
            Err(msg) if !(J::PERIODIC && job.survives_panic()) => {
                let err = Err(TaskError::Panicked(msg));
                return self.finish_run(env, job, End::Panicked, err, false);
            }
            Err(msg) => Some(msg),
        };
        // A periodic job goes on.
        if env.stopping() {
            return self.finish_run(env, job, End::Shutdown, Err(TaskError::Shutdown), ran_ok);
        }
        let now = if job.plans_from_end() {
            env.now_nanos()
        } else {
            env.plan_time(start)
        };
        if let Some(next) = job.plan_next(now) {
            return self.rearm(env, job, next, ran_ok, now);
        }
        // No run left (a calendar with no occurrence left).
        match (panic, job.value_at_end()) {
            (Some(msg), _) => {
                let err = Err(TaskError::Panicked(msg));
                self.finish_run(env, job, End::Panicked, err, false)
            }
            (None, Some(value)) => self.finish_run(env, job, End::Completed, Ok(value), ran_ok),
            (None, None) => broken_invariant("a periodic job planned no run and has no value"),
        }
    }

    fn cancel(&self) -> Cancelled {
        loop {
            match self.header.state.load() {
                Snapshot::Scheduled => {
                    if self.header.state.end_waiting(End::Cancelled) {
                        // The closure and what it captured go now, not at the deadline.
                        let (job, waker) = self.finish_waiting(Failure::Cancelled);
                        drop_user(job);
                        wake(waker);
                        return Cancelled::Waiting;
                    }
                }
                Snapshot::Running => {
                    if self.header.state.cancel_running() {
                        return Cancelled::Running;
                    }
                }
                _ => return Cancelled::No,
            }
        }
    }

    fn stop(&self, why: Stop) -> Stopped {
        let (to, err) = match why {
            Stop::ShutdownNow => (End::Cancelled, Failure::Cancelled),
            Stop::Shutdown | Stop::HandBackAtShutdown => (End::Shutdown, Failure::Shutdown),
        };
        if !self.header.state.end_waiting(to) {
            return Stopped::NotWaiting;
        }
        let (job, waker) = self.finish_waiting(err);
        let stopped =
            match why {
                Stop::ShutdownNow | Stop::HandBackAtShutdown => Stopped::HandedBack(
                    PendingTask::new(self.info(), to, self.header.deadline(), job.into_run()),
                ),
                Stop::Shutdown => {
                    drop_user(job);
                    Stopped::Ended
                }
            };
        wake(waker);
        stopped
    }

    fn rebase(&self, deadline: u64) {
        if let Stage::Waiting(job) = &mut self.body.lock().stage {
            job.rebase(deadline);
        }
    }
}

impl<J: Job, N: NameSlot> TaskResult<J::Output> for TaskCell<J, N> {
    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<J::Output, TaskError>> {
        // Waker clones and drops are executor code: none of it runs under the body lock, where a
        // waker that cancelled this very task would deadlock.
        let mut body = self.body.lock();
        if let Some(result) = take_done(&mut body) {
            return Poll::Ready(result);
        }
        if body.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return Poll::Pending;
        }
        drop(body);
        let new = Box::new(cx.waker().clone());
        let mut body = self.body.lock();
        if let Some(result) = take_done(&mut body) {
            drop(body);
            drop(new);
            return Poll::Ready(result);
        }
        let old = body.waker.replace(new);
        drop(body);
        drop(old);
        Poll::Pending
    }

    fn wait(&self, deadline: Option<Instant>) -> Option<Result<J::Output, TaskError>> {
        // A blocking join is a poll with a waker that unparks this thread.
        let waker = crate::sync::current_thread_waker();
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(result) = self.poll_result(&mut cx) {
                return Some(result);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                // Timed out: leave no waker behind that would unpark this thread later.
                let mut body = self.body.lock();
                let ours = body.waker.as_ref().is_some_and(|w| w.will_wake(&waker));
                let stale = if ours { body.waker.take() } else { None };
                drop(body);
                drop(stale);
                return None;
            }
            crate::sync::park_until(deadline);
        }
    }
}

/// Wakes whoever waits on a task. An executor's wake is not ours to trust: a panic in it must
/// not unwind a worker or the timer thread half way through their bookkeeping.
#[inline]
fn wake(waker: Option<Box<Waker>>) {
    if let Some(w) = waker {
        // The payload too is the executor's: its `Drop` may panic (`drop_payload`).
        call_user(move || (*w).wake());
    }
}

/// Takes a finished result out of the body; `Err(Taken)` if it was already taken (a future
/// polled again after it returned `Ready`, a `join_timeout` after one that returned `Some`).
fn take_done<J: Job>(body: &mut Body<J>) -> Option<Result<J::Output, TaskError>> {
    match body.stage {
        Stage::Done(_) | Stage::Failed(_) => {
            match std::mem::replace(&mut body.stage, Stage::Taken) {
                Stage::Done(value) => Some(Ok(value)),
                Stage::Failed(failure) => Some(Err(match failure {
                    Failure::Cancelled => TaskError::Cancelled,
                    Failure::Shutdown => TaskError::Shutdown,
                    Failure::Panicked(message) => TaskError::Panicked(*message),
                })),
                _ => unreachable!(),
            }
        }
        Stage::Taken => Some(Err(TaskError::Taken)),
        _ => None,
    }
}

#[cfg(all(test, not(wheelpool_loom), target_pointer_width = "64"))]
mod size_tests {
    use super::*;
    use crate::task::OneShot;

    /// A pending timer's task is one allocation: the `Arc`'s two counts plus this cell. Keep it
    /// from growing unnoticed (W1 measures memory per pending timer).
    #[test]
    fn a_capture_less_task_cell_stays_small() {
        // State, kind, shard and a 40-bit id in one word, then the deadline and the wheel key:
        // as small as before tasks had ids and names. An unnamed task keeps no name at all; a
        // named one a thin pointer more.
        assert_eq!(std::mem::size_of::<Header>(), 24);
        // The lock (a byte, padded to a word), the stage (a word and a tag: an error is a
        // `Failure`) and the boxed waker: with the `Arc`'s counts 72 bytes, the 80-byte malloc
        // chunk (it was 88 bytes and the 96-byte chunk with the waker inline and a `TaskError`
        // in the stage).
        assert!(std::mem::size_of::<TaskCell<OneShot<fn()>>>() <= 56);
        assert_eq!(
            std::mem::size_of::<TaskCell<OneShot<fn()>, Name>>(),
            std::mem::size_of::<TaskCell<OneShot<fn()>>>() + 8
        );
        // Each pending task also holds one wheel entry (a fat `Arc<dyn RawTask>` plus links).
        assert_eq!(crate::wheel::Wheel::<crate::task::TaskRef>::ENTRY_SIZE, 32);
    }
}

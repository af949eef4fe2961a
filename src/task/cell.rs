//! `TaskCell<J>`: the one allocation behind a task and its future (and, once someone waits on
//! it, a boxed waker).

use super::state::{End, Held, Snapshot};
use super::{
    Cancelled, Header, Job, Name, NameSlot, PendingTask, RawTask, RunEnv, RunOutcome, Stop,
    Stopped, TaskResult,
};
use crate::error::TaskError;
use crate::panic::{broken_invariant, call_user, drop_user};
use crate::sync::Guarded;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// Where the closure or its result is. Guarded by the lock in the task's state byte.
///
/// Every variant but `Waiting` and `Done` is data-less and a failure is only its kind (a panic's
/// message waits in the `Extra` box): a task's cell is sized for its largest stage, and every
/// waiting timer pays for it (W1's bytes per pending timer). With a closure that captures
/// nothing, the stage is two bytes.
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

/// How a task that finished without a value failed, as its cell keeps it.
#[derive(Clone, Copy)]
enum Failure {
    Cancelled,
    Shutdown,
    /// The message is in the body's `Extra`.
    Panicked,
}

impl<J: Job> Stage<J> {
    /// The stage that keeps `result` for the future, and the panic message the body's `Extra`
    /// keeps beside it.
    fn finished(result: Result<J::Output, TaskError>) -> (Self, Option<String>) {
        match result {
            Ok(value) => (Stage::Done(value), None),
            Err(TaskError::Cancelled) => (Stage::Failed(Failure::Cancelled), None),
            Err(TaskError::Shutdown) => (Stage::Failed(Failure::Shutdown), None),
            Err(TaskError::Panicked(message)) => (Stage::Failed(Failure::Panicked), Some(message)),
            Err(TaskError::Taken) => broken_invariant("a task finished with `Taken`"),
        }
    }
}

/// What only some tasks need, in a box of its own: the waker of whoever waits (a future's
/// task, or a thread blocked in `join`), and a panicked task's message until the future takes
/// it. Most timers are cancelled or detached and never allocate it.
struct Extra {
    waker: Option<Waker>,
    message: Option<String>,
}

struct Body<J: Job> {
    stage: Stage<J>,
    extra: Option<Box<Extra>>,
}

impl<J: Job> Body<J> {
    /// Takes the waiter's waker out, if someone waits.
    fn take_waker(&mut self) -> Option<Waker> {
        self.extra.as_mut().and_then(|extra| extra.waker.take())
    }
}

/// A task: header, its name if it has one (`N`: `()` or a [`Name`]), and closure-or-result
/// (with the waker of whoever waits). The body's lock is the top bit of the header's state.
pub(crate) struct TaskCell<J: Job, N: NameSlot = ()> {
    header: Header,
    name: N,
    body: Guarded<Body<J>>,
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
            body: Guarded::new(Body {
                stage: Stage::Waiting(job),
                extra: None,
            }),
        }
    }

    /// Runs `f` on the body under `held`, this task's body lock (taken by a transition such
    /// as `start`, or by `State::lock`). `f` stores and takes values; every user value it takes
    /// out (a closure, a waker) is dropped or called after the lock is released.
    ///
    /// The crate's one `unsafe` call outside `sync/` (`guarded.rs`, `spin.rs`): the promise that
    /// pairs a body with its lock.
    #[inline]
    #[allow(unsafe_code)]
    fn body_held<R>(&self, held: &Held<'_>, f: impl FnOnce(&mut Body<J>) -> R) -> R {
        // A pointer comparison: what the promise below rests on.
        assert!(
            held.guards(&self.header.state),
            "a task's body reached with another task's lock"
        );
        // SAFETY: `held` is this cell's own state's lock (checked above), held until `f`
        // returns (it is borrowed for the call), and every access to the body holds it.
        unsafe { self.body.with_held(f) }
    }

    /// Takes the body lock and runs `f` on the body (see [`body_held`](Self::body_held)).
    #[inline]
    fn body<R>(&self, f: impl FnOnce(&mut Body<J>) -> R) -> R {
        let held = self.header.state.lock();
        self.body_held(&held, f)
    }

    /// Stores the final result as the lock `held` (which leaves a terminal state) is released,
    /// then wakes the future. The caller has already dropped every user value it had to drop,
    /// so a joiner that returns finds the closure's captures gone.
    fn complete(&self, held: Held<'_>, outcome: Outcome<J>) {
        let Outcome { stage, mut spare } = outcome;
        let waker = self.body_held(&held, |body| {
            body.stage = stage;
            if let Some(new) = spare.as_mut() {
                match body.extra.as_mut() {
                    Some(extra) => extra.message = new.message.take(),
                    None => body.extra = spare.take(),
                }
            }
            body.take_waker()
        });
        drop(held);
        drop(spare);
        wake(waker);
    }

    /// For a task that just left `SCHEDULED` without running (a cancel or a stop won it, and
    /// with it the lock `held`): takes the closure out and stores `failure`, in one critical
    /// section. Returns the closure and the waiter's waker: the caller drops (or hands back) the
    /// closure, then wakes, so a joiner that wakes finds the captures gone.
    fn finish_waiting(&self, held: Held<'_>, failure: Failure) -> (J, Option<Waker>) {
        self.body_held(&held, |body| {
            let job = match std::mem::replace(&mut body.stage, Stage::Failed(failure)) {
                Stage::Waiting(job) => job,
                _ => broken_invariant("a task left SCHEDULED but its closure was gone"),
            };
            (job, body.take_waker())
        })
    }

    /// Takes the closure out of a task whose run just won `SCHEDULED -> RUNNING` (and with it
    /// the lock `held`), so it must be here.
    fn take_job(&self, held: Held<'_>) -> J {
        self.body_held(&held, |body| {
            match std::mem::replace(&mut body.stage, Stage::Running) {
                Stage::Waiting(job) => job,
                _ => broken_invariant("a task left SCHEDULED but its closure was gone"),
            }
        })
    }

    /// After a periodic run: put the closure back and become `SCHEDULED` for `next`, unless a
    /// cancel came in during the run. `ran_ok`: that run counts as completed.
    fn rearm(&self, env: &dyn RunEnv, job: J, next: u64, ran_ok: bool, now: u64) -> RunOutcome {
        self.header.set_deadline(next);
        let mut held = self.header.state.lock();
        if held.snapshot() == Snapshot::Running {
            // One unlock publishes the closure and SCHEDULED together, so a canceller that
            // wins SCHEDULED -> CANCELLED finds the closure there.
            self.body_held(&held, |body| body.stage = Stage::Waiting(job));
            held.rearm();
            return RunOutcome::Rearm { ran_ok, now };
        }
        // RunningCancelled: the cancel returned true; no run may follow.
        drop(held);
        drop_user(job);
        self.end_cancelled_run(env, ran_ok)
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
        let outcome = Outcome::new(result);
        // Only this worker leaves RUNNING (a canceller may only mark it RUNNING_CANCELLED, and
        // not while this lock is held), so one critical section ends the task and stores its
        // result. The pool counts the end under the lock too: its counters agree by the time
        // a joiner sees the result.
        let mut held = self.header.state.lock();
        if held.snapshot() == Snapshot::Running {
            held.end_run(to);
            env.run_ending(to, ran_ok);
            self.complete(held, outcome);
            return RunOutcome::Finished(to);
        }
        // RunningCancelled: the run's value (if any) is dropped, outside the lock, before the
        // future says Cancelled.
        drop(held);
        drop_user(outcome);
        self.end_cancelled_run(env, ran_ok)
    }

    /// The end of a run during which the task was cancelled (`RUNNING_CANCELLED`): the task
    /// ends `Cancelled`, counted and stored under one lock.
    fn end_cancelled_run(&self, env: &dyn RunEnv, ran_ok: bool) -> RunOutcome {
        let outcome = Outcome::new(Err(TaskError::Cancelled));
        let mut held = self.header.state.lock();
        held.end_run(End::Cancelled);
        env.run_ending(End::Cancelled, ran_ok);
        self.complete(held, outcome);
        RunOutcome::Finished(End::Cancelled)
    }
}

/// A final result ready to store: its stage, and the `Extra` box for a panic's message, made
/// before the lock is taken.
struct Outcome<J: Job> {
    stage: Stage<J>,
    spare: Option<Box<Extra>>,
}

impl<J: Job> Outcome<J> {
    fn new(result: Result<J::Output, TaskError>) -> Self {
        let (stage, message) = Stage::<J>::finished(result);
        let spare = message.map(|message| {
            Box::new(Extra {
                waker: None,
                message: Some(message),
            })
        });
        Outcome { stage, spare }
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
        let Some(held) = self.header.state.start() else {
            return RunOutcome::NotStarted;
        };
        let mut job = self.take_job(held);
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
                    if let Some(held) = self.header.state.end_waiting(End::Cancelled) {
                        // The closure and what it captured go now, not at the deadline.
                        let (job, waker) = self.finish_waiting(held, Failure::Cancelled);
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
        let Some(held) = self.header.state.end_waiting(to) else {
            return Stopped::NotWaiting;
        };
        let (job, waker) = self.finish_waiting(held, err);
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
        self.body(|body| {
            if let Stage::Waiting(job) = &mut body.stage {
                job.rebase(deadline);
            }
        });
    }
}

/// What a poll found under the lock.
enum Found<T> {
    Ready(Result<T, TaskError>),
    /// Not finished, and the registered waker already wakes this poller.
    Registered,
    Pending,
}

impl<J: Job, N: NameSlot> TaskResult<J::Output> for TaskCell<J, N> {
    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<J::Output, TaskError>> {
        // Waker clones and drops are executor code: none of it runs under the body lock, where a
        // waker that cancelled this very task would deadlock.
        let found = self.body(|body| {
            if let Some(result) = take_done(body) {
                return Found::Ready(result);
            }
            let registered = body.extra.as_ref().and_then(|extra| extra.waker.as_ref());
            if registered.is_some_and(|w| w.will_wake(cx.waker())) {
                Found::Registered
            } else {
                Found::Pending
            }
        });
        match found {
            Found::Ready(result) => return Poll::Ready(result),
            Found::Registered => return Poll::Pending,
            Found::Pending => {}
        }
        let mut new = Some(Box::new(Extra {
            waker: Some(cx.waker().clone()),
            message: None,
        }));
        let (ready, old) = self.body(|body| {
            if let Some(result) = take_done(body) {
                return (Some(result), None);
            }
            let old = match body.extra.as_mut() {
                Some(extra) => std::mem::replace(
                    &mut extra.waker,
                    new.as_mut().and_then(|new| new.waker.take()),
                ),
                None => {
                    body.extra = new.take();
                    None
                }
            };
            (None, old)
        });
        drop(new);
        drop(old);
        match ready {
            Some(result) => Poll::Ready(result),
            None => Poll::Pending,
        }
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
                let stale = self.body(|body| {
                    let extra = body.extra.as_mut()?;
                    let ours = extra.waker.as_ref().is_some_and(|w| w.will_wake(&waker));
                    if ours {
                        extra.waker.take()
                    } else {
                        None
                    }
                });
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
fn wake(waker: Option<Waker>) {
    if let Some(w) = waker {
        // The payload too is the executor's: its `Drop` may panic (`drop_payload`).
        call_user(move || w.wake());
    }
}

/// Takes a finished result out of the body; `Err(Taken)` if it was already taken (a future
/// polled again after it returned `Ready`, a `join_timeout` after one that returned `Some`).
fn take_done<J: Job>(body: &mut Body<J>) -> Option<Result<J::Output, TaskError>> {
    match body.stage {
        Stage::Done(_) | Stage::Failed(_) => {
            match std::mem::replace(&mut body.stage, Stage::Taken) {
                Stage::Done(value) => Some(Ok(value)),
                Stage::Failed(Failure::Cancelled) => Some(Err(TaskError::Cancelled)),
                Stage::Failed(Failure::Shutdown) => Some(Err(TaskError::Shutdown)),
                Stage::Failed(Failure::Panicked) => {
                    let message = body.extra.as_mut().and_then(|extra| extra.message.take());
                    let message = message
                        .unwrap_or_else(|| broken_invariant("a panicked task kept no message"));
                    Some(Err(TaskError::Panicked(message)))
                }
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

    /// The cell of a one-shot task running `_f`.
    fn cell_size<F: FnOnce() + Send + 'static>(_f: F) -> usize {
        std::mem::size_of::<TaskCell<OneShot<F>>>()
    }

    /// A pending timer's task is one allocation: this cell, its count of pointers in the header.
    /// Keep it from growing unnoticed (W1 measures memory per pending timer).
    #[test]
    fn a_capture_less_task_cell_stays_small() {
        // State (the body lock its top bit), kind, shard and a 40-bit id in one word, then the
        // deadline, then the wheel key and the count of pointers to the task. An unnamed task
        // keeps no name at all; a named one a thin pointer more.
        assert_eq!(std::mem::size_of::<Header>(), 24);
        // The stage (two bytes for a closure that captures nothing) and the `Extra` box: 40
        // bytes with the count of pointers in the header, glibc's 48-byte chunk (it was the
        // 64-byte one with an `Arc`'s two counts in front, and the 80-byte one with the lock in
        // a word of its own and a boxed message in the stage).
        assert_eq!(cell_size(|| ()), 40);
        // A pointer-sized capture needs the stage's tag beside it: one word more (the 64-byte
        // chunk; 80 with an `Arc`'s counts).
        let captured = std::sync::Arc::new(());
        assert_eq!(cell_size(move || drop(captured)), 48);
        assert_eq!(
            std::mem::size_of::<TaskCell<OneShot<fn()>, Name>>(),
            std::mem::size_of::<TaskCell<OneShot<fn()>>>() + 8
        );
        // Each pending task also holds one wheel entry (a fat `TaskRef` plus links).
        assert_eq!(crate::wheel::Wheel::<crate::task::TaskRef>::ENTRY_SIZE, 32);
    }
}

/// The body's paths (result, panic message, waker, cancel) across threads; small enough for
/// Miri, which checks the lock-byte cell (`sync/guarded.rs`) on each of them.
#[cfg(all(test, not(wheelpool_loom)))]
mod body_tests {
    use super::*;
    use crate::task::{OneShot, TaskInfo};
    use std::any::Any;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Env;

    impl RunEnv for Env {
        fn now_nanos(&self) -> u64 {
            0
        }
        fn stopping(&self) -> bool {
            false
        }
        fn report_panic(&self, _task: TaskInfo, payload: Box<dyn Any + Send>) -> String {
            payload
                .downcast_ref::<&str>()
                .map_or_else(|| "?".to_owned(), |m| (*m).to_owned())
        }
        fn run_ending(&self, _end: End, _ran_ok: bool) {}
    }

    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Through the pool's own pointer (`ptr.rs`), so that Miri also checks the frees of a cell
    /// whose pointers are dropped on several threads.
    type Task<T> = crate::task::TaskPtr<dyn TaskResult<T>>;

    fn one_shot<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Task<T> {
        crate::task::pair(TaskCell::new(OneShot::new(Box::new(f) as Box<_>), 0, 0)).0
    }

    /// Polls until ready with a waker that counts its wakes.
    fn poll_once<T: 'static>(
        task: &dyn TaskResult<T>,
        waker: &Arc<Counter>,
    ) -> Poll<Result<T, TaskError>> {
        let waker = Waker::from(Arc::clone(waker));
        task.poll_result(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_waiter_gets_the_value_whichever_side_comes_first() {
        for _ in 0..if cfg!(miri) { 3 } else { 50 } {
            let task = one_shot(|| 7u32);
            let runner = {
                let task = task.clone();
                std::thread::spawn(move || task.run(&Env))
            };
            assert_eq!(task.wait(None), Some(Ok(7)));
            assert_eq!(runner.join().unwrap(), RunOutcome::Finished(End::Completed));
            assert_eq!(task.wait(None), Some(Err(TaskError::Taken)));
        }
    }

    #[test]
    fn a_panic_message_reaches_a_waiter_registered_before_or_after() {
        // Registered before: the message joins the waiter's `Extra` box.
        let task = one_shot(|| -> u32 { std::panic::resume_unwind(Box::new("boom")) });
        let counter = Arc::new(Counter::default());
        assert!(poll_once(&*task, &counter).is_pending());
        assert_eq!(task.run(&Env), RunOutcome::Finished(End::Panicked));
        assert_eq!(counter.0.load(Ordering::SeqCst), 1, "woken once");
        assert_eq!(
            poll_once(&*task, &counter),
            Poll::Ready(Err(TaskError::Panicked("boom".into())))
        );
        // Nobody waited: the message has a box of its own.
        let task = one_shot(|| -> u32 { std::panic::resume_unwind(Box::new("late")) });
        assert_eq!(task.run(&Env), RunOutcome::Finished(End::Panicked));
        assert_eq!(
            task.wait(None),
            Some(Err(TaskError::Panicked("late".into())))
        );
    }

    #[test]
    fn a_new_waker_replaces_the_old_and_only_it_is_woken() {
        let task = one_shot(|| 1u8);
        let (first, second) = (Arc::new(Counter::default()), Arc::new(Counter::default()));
        assert!(poll_once(&*task, &first).is_pending());
        assert!(poll_once(&*task, &first).is_pending(), "same waker: kept");
        assert!(poll_once(&*task, &second).is_pending());
        assert_eq!(Arc::strong_count(&first), 1, "the old waker was dropped");
        assert_eq!(task.cancel(), Cancelled::Waiting);
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert_eq!(
            poll_once(&*task, &second),
            Poll::Ready(Err(TaskError::Cancelled))
        );
        assert_eq!(
            Arc::strong_count(&second),
            1,
            "the task keeps no waker once done"
        );
    }

    /// A run (half of them panic) races a cancel, polls with a new waker each time and timed
    /// joins: the result agrees with who won, is taken once, and no waker is left behind.
    #[test]
    fn a_run_a_cancel_and_changing_wakers_race() {
        for round in 0..if cfg!(miri) { 6 } else { 2000 } {
            let panics = round % 2 == 0;
            let task = one_shot(move || -> u32 {
                if panics {
                    std::panic::resume_unwind(Box::new("boom"))
                }
                9
            });
            let runner = {
                let task = task.clone();
                std::thread::spawn(move || task.run(&Env))
            };
            let canceller = {
                let task = task.clone();
                std::thread::spawn(move || task.cancel())
            };
            let mut wakers = Vec::new();
            let result = loop {
                let counter = Arc::new(Counter::default());
                if let Poll::Ready(r) = poll_once(&*task, &counter) {
                    break r;
                }
                wakers.push(counter);
                if let Some(r) = task.wait(Some(Instant::now())) {
                    break r;
                }
                std::thread::yield_now();
            };
            let ran = runner.join().unwrap();
            let cancelled = canceller.join().unwrap();
            match (&result, cancelled) {
                (Err(TaskError::Cancelled), Cancelled::Waiting) => {
                    assert_eq!(ran, RunOutcome::NotStarted)
                }
                (Err(TaskError::Cancelled), Cancelled::Running) => {}
                (Ok(9), Cancelled::No) => assert!(!panics),
                (Err(TaskError::Panicked(m)), Cancelled::No) => {
                    assert!(panics);
                    assert_eq!(m, "boom");
                }
                other => panic!("round {round}: {other:?} ran {ran:?}"),
            }
            assert_eq!(task.wait(None), Some(Err(TaskError::Taken)));
            // Only the last registered waker could have been woken, at most once; all but the
            // task's own references are gone.
            let woken: usize = wakers.iter().map(|w| w.0.load(Ordering::SeqCst)).sum();
            assert!(woken <= 1);
            for w in &wakers {
                assert_eq!(Arc::strong_count(w), 1, "a waker leaked");
            }
        }
    }

    #[test]
    fn a_timed_out_join_leaves_no_waker_behind() {
        let task = Arc::new(TaskCell::new(OneShot::new(|| 1u8), 0, 0));
        let soon = Instant::now() + std::time::Duration::from_millis(1);
        assert_eq!(task.wait(Some(soon)), None);
        let registered = task.body(|body| {
            body.extra
                .as_ref()
                .is_some_and(|extra| extra.waker.is_some())
        });
        // `will_wake` is best-effort: under Miri a vtable's address may differ between uses, and
        // the waker left behind would only unpark this thread once, spuriously.
        assert!(!registered || cfg!(miri));
        let canceller = {
            let task = task.clone();
            std::thread::spawn(move || task.cancel())
        };
        assert_eq!(task.wait(None), Some(Err(TaskError::Cancelled)));
        assert_eq!(canceller.join().unwrap(), Cancelled::Waiting);
    }
}

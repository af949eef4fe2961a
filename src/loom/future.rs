//! Future completion vs waker registration (`src/task/cell.rs`: `poll_result`, `wait`,
//! `complete`).
//!
//! `.await` (and the blocking `join`) never hangs after the task completed: the completing side
//! stores the result and takes the waker under the body lock, the polling side checks for a
//! result and stores its waker under the same lock. A lost wake-up leaves `block_on` (or the
//! condvar wait) blocked with every other thread finished, which loom reports as a deadlock.

use super::{bare_one_shot, block_on, model, BareEnv, Count};
use crate::error::TaskError;
use crate::task::state::End;
use crate::task::{Cancelled, RunOutcome, TaskPtr, TaskResult};
use loom::thread;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

type Task = TaskPtr<dyn TaskResult<u32>>;

/// The task's result as a `Future`, polled through the task's own waker slot (what
/// `ScheduledFuture`'s `poll` does).
struct Awaiting(Task);

impl Future for Awaiting {
    type Output = Result<u32, TaskError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll_result(cx)
    }
}

fn spawn_run(task: &Task) -> thread::JoinHandle<RunOutcome> {
    let task = task.clone();
    thread::spawn(move || task.run(&BareEnv { stopping: false }))
}

#[test]
fn await_races_completing_run() {
    model("await_races_completing_run", || {
        let task = bare_one_shot(|| 7u32);
        let runner = spawn_run(&task);
        let (result, wakes) = block_on(Awaiting(task));
        assert_eq!(result, Ok(7));
        assert!(wakes <= 1, "one completion wakes the future at most once");
        assert_eq!(runner.join().unwrap(), RunOutcome::Finished(End::Completed));
    });
}

#[test]
fn blocking_join_races_completing_run() {
    model("blocking_join_races_completing_run", || {
        let task = bare_one_shot(|| 7u32);
        let runner = spawn_run(&task);
        assert_eq!(task.wait(None), Some(Ok(7)));
        assert_eq!(runner.join().unwrap(), RunOutcome::Finished(End::Completed));
    });
}

#[test]
fn await_races_run_and_cancel() {
    model("await_races_run_and_cancel", || {
        let calls = Count::new();
        let c = calls.clone();
        let task = bare_one_shot(move || {
            c.add();
            7u32
        });
        let runner = spawn_run(&task);
        let canceller = {
            let task = task.clone();
            thread::spawn(move || task.cancel())
        };
        let (result, wakes) = block_on(Awaiting(task));
        assert!(wakes <= 1);
        let ran = runner.join().unwrap();
        let cancel = canceller.join().unwrap();
        match cancel {
            Cancelled::No => {
                assert_eq!(ran, RunOutcome::Finished(End::Completed));
                assert_eq!(result, Ok(7));
            }
            Cancelled::Waiting | Cancelled::Running => {
                assert_eq!(result, Err(TaskError::Cancelled));
                assert_eq!(calls.get(), usize::from(cancel == Cancelled::Running));
            }
        }
    });
}

/// A panic's message and the waiter's waker share the body's `Extra` box, which either side
/// may allocate first: the future must get the message, and be woken, whichever does.
#[test]
fn await_races_a_panicking_run() {
    model("await_races_a_panicking_run", || {
        // `resume_unwind`: a panic that skips the hook, so loom's many runs print nothing.
        let task = bare_one_shot(|| -> u32 { std::panic::resume_unwind(Box::new("boom")) });
        let runner = spawn_run(&task);
        let (result, wakes) = block_on(Awaiting(task.clone()));
        match result {
            // `BareEnv::report_panic`'s message.
            Err(TaskError::Panicked(message)) => assert_eq!(message, "panicked"),
            other => panic!("expected the panic, got {other:?}"),
        }
        assert!(wakes <= 1);
        assert_eq!(runner.join().unwrap(), RunOutcome::Finished(End::Panicked));
        // Taken once: the message went to the future, and a second poll says so.
        assert_eq!(task.wait(None), Some(Err(TaskError::Taken)));
    });
}

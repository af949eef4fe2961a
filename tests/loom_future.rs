//! Loom model 6: future completion vs waker registration (`src/task/cell.rs`: `poll_result`,
//! `wait`, `complete`).
//!
//! `.await` (and the blocking `join`) never hangs after the task completed: the completing side
//! stores the result and takes the waker under the body lock, the polling side checks for a
//! result and stores its waker under the same lock. A lost wake-up leaves `block_on` (or the
//! condvar wait) blocked with every other thread finished, which loom reports as a deadlock.

#![cfg(wheelpool_loom)]

mod loom_common;

use loom::thread;
use loom_common::{block_on, model, Count};
use wheelpool::loom_api::{CancelOutcome, OneShotTask, Ran};
use wheelpool::TaskError;

#[test]
fn await_races_completing_run() {
    model("await_races_completing_run", || {
        let task = OneShotTask::new(|| 7u32);
        let runner = {
            let task = task.clone();
            thread::spawn(move || task.run())
        };
        let (result, wakes) = block_on(task.future());
        assert_eq!(result, Ok(7));
        assert!(wakes <= 1, "one completion wakes the future at most once");
        assert_eq!(runner.join().unwrap(), Ran::Completed);
    });
}

#[test]
fn blocking_join_races_completing_run() {
    model("blocking_join_races_completing_run", || {
        let task = OneShotTask::new(|| 7u32);
        let runner = {
            let task = task.clone();
            thread::spawn(move || task.run())
        };
        assert_eq!(task.join(), Ok(7));
        assert_eq!(runner.join().unwrap(), Ran::Completed);
    });
}

#[test]
fn await_races_run_and_cancel() {
    model("await_races_run_and_cancel", || {
        let calls = Count::new();
        let c = calls.clone();
        let task = OneShotTask::new(move || {
            c.add();
            7u32
        });
        let runner = {
            let task = task.clone();
            thread::spawn(move || task.run())
        };
        let canceller = {
            let task = task.clone();
            thread::spawn(move || task.cancel())
        };
        let (result, wakes) = block_on(task.future());
        assert!(wakes <= 1);
        let ran = runner.join().unwrap();
        let cancel = canceller.join().unwrap();
        match cancel {
            CancelOutcome::No => {
                assert_eq!(ran, Ran::Completed);
                assert_eq!(result, Ok(7));
            }
            CancelOutcome::Waiting | CancelOutcome::Running => {
                assert_eq!(result, Err(TaskError::Cancelled));
                assert_eq!(calls.get(), usize::from(cancel == CancelOutcome::Running));
            }
        }
    });
}

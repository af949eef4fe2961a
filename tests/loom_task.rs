//! Loom model 1: the task state machine (`src/task/state.rs`, `src/task/cell.rs`).
//!
//! A one-shot task's cancel races its run (and `shutdown_now`'s stop): exactly one of them wins
//! the CAS out of `SCHEDULED`, the loser sees the right state, the closure is dropped exactly
//! once, and the future's result is exactly one of value / `Cancelled`.

#![cfg(wheelpool_loom)]

mod loom_common;

use loom::thread;
use loom_common::{model, Count};
use wheelpool::loom_api::{CancelOutcome, OneShotTask, Ran};
use wheelpool::TaskError;

/// A task whose closure holds a drop token (counts closure drops), counts its calls, and
/// returns a value that holds another drop token (counts value drops).
fn counted_task(
    calls: &Count,
    closure_drops: &Count,
    value_drops: &Count,
) -> OneShotTask<loom_common::DropToken> {
    let captured = closure_drops.token();
    let calls = calls.clone();
    let value = value_drops.clone();
    OneShotTask::new(move || {
        let _captured = captured; // dropped when the call ends
        calls.add();
        value.token()
    })
}

#[test]
fn one_shot_cancel_races_run() {
    model("one_shot_cancel_races_run", || {
        let (calls, closure_drops, value_drops) = (Count::new(), Count::new(), Count::new());
        let task = counted_task(&calls, &closure_drops, &value_drops);
        let runner = {
            let task = task.clone();
            thread::spawn(move || task.run())
        };
        let cancel = task.cancel();
        let ran = runner.join().unwrap();
        assert!(task.is_done());
        let result = task.join();
        match (cancel, ran) {
            // The cancel won SCHEDULED -> CANCELLED: the run never started.
            (CancelOutcome::Waiting, Ran::NotStarted) => {
                assert_eq!(calls.get(), 0);
                assert!(matches!(result, Err(TaskError::Cancelled)));
            }
            // The run won, the cancel marked it RUNNING_CANCELLED: its value is dropped.
            (CancelOutcome::Running, Ran::Cancelled) => {
                assert_eq!(calls.get(), 1);
                assert!(matches!(result, Err(TaskError::Cancelled)));
                assert_eq!(value_drops.get(), 1, "the cancelled run's value is dropped");
            }
            // The run finished first: the cancel changes nothing.
            (CancelOutcome::No, Ran::Completed) => {
                assert_eq!(calls.get(), 1);
                assert!(result.is_ok());
                assert_eq!(value_drops.get(), 0);
            }
            other => panic!("impossible outcome pair {other:?}"),
        }
        drop(result);
        assert_eq!(closure_drops.get(), 1, "closure dropped exactly once");
        drop(task);
        assert_eq!(closure_drops.get(), 1);
        assert_eq!(
            value_drops.get(),
            calls.get(),
            "every value produced is dropped once"
        );
    });
}

#[test]
fn one_shot_run_cancel_and_stop_three_way() {
    model("one_shot_run_cancel_and_stop_three_way", || {
        let (calls, closure_drops, value_drops) = (Count::new(), Count::new(), Count::new());
        let task = counted_task(&calls, &closure_drops, &value_drops);
        let runner = {
            let task = task.clone();
            thread::spawn(move || task.run())
        };
        let stopper = {
            let task = task.clone();
            thread::spawn(move || {
                // shutdown_now's sweep: returns the closure if it won.
                task.stop_now().map(|pending| pending.is_some())
            })
        };
        let cancel = task.cancel();
        let ran = runner.join().unwrap();
        let stopped = stopper.join().unwrap();

        let run_won = ran != Ran::NotStarted;
        let cancel_won = cancel == CancelOutcome::Waiting;
        let stop_won = stopped.is_some();
        assert_eq!(
            [run_won, cancel_won, stop_won]
                .iter()
                .filter(|&&w| w)
                .count(),
            1,
            "exactly one wins the task: ran {ran:?}, cancel {cancel:?}, stop {stopped:?}"
        );
        assert_eq!(calls.get(), usize::from(run_won));
        if stop_won {
            assert_eq!(
                stopped,
                Some(true),
                "the stop that won gets the closure back"
            );
        }
        match ran {
            Ran::NotStarted => assert_ne!(cancel, CancelOutcome::Running),
            Ran::Completed => assert_eq!(cancel, CancelOutcome::No),
            Ran::Cancelled => assert_eq!(cancel, CancelOutcome::Running),
            other => panic!("a one-shot cannot end {other:?}"),
        }
        let result = task.join();
        match ran {
            Ran::Completed => assert!(result.is_ok()),
            _ => assert!(matches!(result, Err(TaskError::Cancelled))),
        }
        drop(result);
        drop(task);
        assert_eq!(closure_drops.get(), 1, "closure dropped exactly once");
        assert_eq!(value_drops.get(), calls.get());
    });
}

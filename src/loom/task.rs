//! The task state machine (`src/task/state.rs`, `src/task/cell.rs`).
//!
//! A one-shot task's cancel races its run (and `shutdown_now`'s stop): exactly one of them wins
//! the CAS out of `SCHEDULED`, the loser sees the right state, the closure is dropped exactly
//! once, and the future's result is exactly one of value / `Cancelled`.

use super::{bare_one_shot, model, BareEnv, Count, DropToken};
use crate::error::TaskError;
use crate::task::state::End;
use crate::task::{Cancelled, RunOutcome, Stop, Stopped, TaskPtr, TaskResult};
use loom::thread;

type Task = TaskPtr<dyn TaskResult<DropToken>>;

/// A task whose closure holds a drop token (counts closure drops), counts its calls, and
/// returns a value that holds another drop token (counts value drops).
fn counted_task(calls: &Count, closure_drops: &Count, value_drops: &Count) -> Task {
    let captured = closure_drops.token();
    let calls = calls.clone();
    let value = value_drops.clone();
    bare_one_shot(move || {
        let _captured = captured; // dropped when the call ends
        calls.add();
        value.token()
    })
}

fn run(task: &Task) -> RunOutcome {
    task.run(&BareEnv { stopping: false })
}

fn join(task: &Task) -> Result<DropToken, TaskError> {
    task.wait(None)
        .expect("an untimed wait returns only with a result")
}

#[test]
fn one_shot_cancel_races_run() {
    model("one_shot_cancel_races_run", || {
        let (calls, closure_drops, value_drops) = (Count::new(), Count::new(), Count::new());
        let task = counted_task(&calls, &closure_drops, &value_drops);
        let runner = {
            let task = task.clone();
            thread::spawn(move || run(&task))
        };
        let cancel = task.cancel();
        let ran = runner.join().unwrap();
        assert!(task.header().state.load().is_terminal());
        let result = join(&task);
        match (cancel, ran) {
            // The cancel won SCHEDULED -> CANCELLED: the run never started.
            (Cancelled::Waiting, RunOutcome::NotStarted) => {
                assert_eq!(calls.get(), 0);
                assert!(matches!(result, Err(TaskError::Cancelled)));
            }
            // The run won, the cancel marked it RUNNING_CANCELLED: its value is dropped.
            (Cancelled::Running, RunOutcome::Finished(End::Cancelled)) => {
                assert_eq!(calls.get(), 1);
                assert!(matches!(result, Err(TaskError::Cancelled)));
                assert_eq!(value_drops.get(), 1, "the cancelled run's value is dropped");
            }
            // The run finished first: the cancel changes nothing.
            (Cancelled::No, RunOutcome::Finished(End::Completed)) => {
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
            thread::spawn(move || run(&task))
        };
        let stopper = {
            let task = task.clone();
            // shutdown_now's sweep: returns the closure if it won.
            thread::spawn(move || match task.stop(Stop::ShutdownNow) {
                Stopped::NotWaiting => None,
                Stopped::HandedBack(_) => Some(true),
                Stopped::Ended => Some(false),
            })
        };
        let cancel = task.cancel();
        let ran = runner.join().unwrap();
        let stopped = stopper.join().unwrap();

        let run_won = ran != RunOutcome::NotStarted;
        let cancel_won = cancel == Cancelled::Waiting;
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
            RunOutcome::NotStarted => assert_ne!(cancel, Cancelled::Running),
            RunOutcome::Finished(End::Completed) => assert_eq!(cancel, Cancelled::No),
            RunOutcome::Finished(End::Cancelled) => assert_eq!(cancel, Cancelled::Running),
            other => panic!("a one-shot cannot end {other:?}"),
        }
        let result = join(&task);
        match ran {
            RunOutcome::Finished(End::Completed) => assert!(result.is_ok()),
            _ => assert!(matches!(result, Err(TaskError::Cancelled))),
        }
        drop(result);
        drop(task);
        assert_eq!(closure_drops.get(), 1, "closure dropped exactly once");
        assert_eq!(value_drops.get(), calls.get());
    });
}

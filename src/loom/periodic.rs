//! Periodic re-arm racing cancel (`src/task/cell.rs` `rearm`, `src/pool/run.rs`
//! `run_task`, `src/pool/core.rs` `on_cancel`, `src/timer/mod.rs` `insert`/`cancelled`).
//!
//! - After a cancel that returned true, no run starts.
//! - No re-arm leaks a wheel entry: once everything quiesces, no wheel holds an entry of a
//!   cancelled task. The race to beat is the re-arm's insert checking the state under the shard
//!   lock while a cancel wins its CAS and then takes the same lock to unlink by the recorded key.

use super::{bare_periodic, model, BareEnv, Count, ModelPool};
use crate::error::TaskError;
use crate::sync::Arc;
use crate::task::state::End;
use crate::task::{Cancelled, RunOutcome};
use loom::thread;
use std::sync::atomic::{AtomicU8, Ordering};

/// The canceller's progress, as the closure sees it at the start of a run.
const NOT_YET: u8 = 0;
const RETURNED_WAITING: u8 = 1;
const RETURNED_RUNNING: u8 = 2;

#[test]
fn no_run_starts_after_a_true_cancel() {
    model("no_run_starts_after_a_true_cancel", || {
        let (calls, closure_drops) = (Count::new(), Count::new());
        // What each run saw of the cancel when it started (records the interleaving).
        let cancel_seen = std::sync::Arc::new(AtomicU8::new(NOT_YET));
        let starts_after_waiting = Count::new();
        let starts_after_running = Count::new();
        let task = {
            let (calls, seen) = (calls.clone(), cancel_seen.clone());
            let (after_waiting, after_running) =
                (starts_after_waiting.clone(), starts_after_running.clone());
            let captured = closure_drops.token();
            bare_periodic(move || {
                let _captured = &captured;
                match seen.load(Ordering::SeqCst) {
                    RETURNED_WAITING => after_waiting.add(),
                    RETURNED_RUNNING => after_running.add(),
                    _ => {}
                }
                calls.add();
            })
        };
        let worker = {
            let task = task.clone();
            thread::spawn(move || {
                // Up to three runs back to back (each re-arm makes it due again at once).
                let mut outcomes = Vec::new();
                for _ in 0..3 {
                    let ran = task.run(&BareEnv { stopping: false });
                    outcomes.push(ran);
                    if !matches!(ran, RunOutcome::Rearm { .. }) {
                        break;
                    }
                }
                outcomes
            })
        };
        let cancel = task.cancel();
        cancel_seen.store(
            match cancel {
                Cancelled::Waiting => RETURNED_WAITING,
                Cancelled::Running => RETURNED_RUNNING,
                Cancelled::No => NOT_YET,
            },
            Ordering::SeqCst,
        );
        let outcomes = worker.join().unwrap();
        let last = *outcomes.last().unwrap();

        assert_eq!(
            starts_after_waiting.get(),
            0,
            "a run started after cancel returned (waiting)"
        );
        assert!(
            starts_after_running.get() <= 1,
            "a second run started after cancel returned (running)"
        );
        match cancel {
            Cancelled::Waiting => {
                // Either the worker lost the CAS, or it ran three times and stopped on its own.
                assert!(
                    last == RunOutcome::NotStarted
                        || (matches!(last, RunOutcome::Rearm { .. }) && outcomes.len() == 3)
                );
            }
            Cancelled::Running => {
                assert_eq!(last, RunOutcome::Finished(End::Cancelled), "{outcomes:?}")
            }
            Cancelled::No => panic!("a periodic task cannot finish by itself here"),
        }
        if starts_after_running.get() == 1 {
            assert_eq!(
                last,
                RunOutcome::Finished(End::Cancelled),
                "the run in flight at the cancel is the last one"
            );
        }
        assert_eq!(
            calls.get(),
            outcomes
                .iter()
                .filter(|&&r| r != RunOutcome::NotStarted)
                .count()
        );
        assert_eq!(task.wait(None), Some(Err(TaskError::Cancelled)));
        drop(task);
        assert_eq!(closure_drops.get(), 1, "closure dropped exactly once");
    });
}

/// The whole path through the pool: a worker runs the task and re-arms it into its shard's
/// wheel (`run::run_task` -> `Core::schedule_admitted` -> `Timer::insert`), the user cancels
/// (`ScheduledFuture::cancel` -> `Core::on_cancel` -> `Timer::cancelled`), and the driver polls
/// every shard meanwhile (`poll_step`, `announce_and_check`: it holds each shard lock in turn).
#[test]
fn rearm_racing_cancel_leaks_no_wheel_entry() {
    model("rearm_racing_cancel_leaks_no_wheel_entry", || {
        let (calls, closure_drops) = (Count::new(), Count::new());
        let pool = Arc::new(ModelPool::new(1));
        let mut driver = pool.driver();
        let future = {
            let (calls, captured) = (calls.clone(), closure_drops.token());
            // Due now (onto the injector, as if the driver had dispatched it), then every 1000
            // ticks: each re-arm goes into the wheel.
            pool.schedule_periodic(
                move || {
                    let _captured = &captured;
                    calls.add();
                },
                0,
                1000,
            )
            .unwrap()
        };
        let worker = pool.spawn_run_one();
        let driver_thread = thread::spawn(move || {
            driver.mark_awake();
            let (more, dispatched) = driver.poll_step();
            assert!(!more && dispatched == 0, "nothing is due at tick 0");
            let _ = driver.announce_and_check();
        });
        let cancelled = future.cancel();
        assert!(
            cancelled,
            "a periodic task is never finished when cancelled here"
        );
        assert!(worker.join().unwrap(), "the worker found the task");
        driver_thread.join().unwrap();

        assert_eq!(
            pool.wheel_len(),
            0,
            "a cancelled task left an entry in a wheel"
        );
        assert_eq!(pool.core.outstanding(), 0);
        assert!(future.is_cancelled() && future.is_done());
        assert!(calls.get() <= 1);
        assert!(matches!(future.join(), Err(TaskError::Cancelled)));
        drop(pool);
        assert_eq!(closure_drops.get(), 1, "closure dropped exactly once");
    });
}

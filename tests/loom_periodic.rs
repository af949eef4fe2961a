//! Loom model 2: periodic re-arm racing cancel (`src/task/cell.rs` `rearm`, `src/pool/core.rs`
//! `run_task`/`on_cancel`, `src/timer/driver.rs` `place`/`drain_cancels`).
//!
//! - After a cancel that returned true, no run starts.
//! - No re-arm leaks a wheel entry: once everything quiesces, the wheel holds no entry of a
//!   cancelled task. The race to beat is the driver's `place` checking the state, then a cancel
//!   winning, then the driver inserting: the cancel is queued after its CAS, so the next
//!   `drain_cancels` finds the key that `place` stored.

#![cfg(wheelpool_loom)]

mod loom_common;

use loom::thread;
use loom_common::{model, Count};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use wheelpool::loom_api::{CancelOutcome, LoomPool, PeriodicTask, Ran};
use wheelpool::TaskError;

/// The canceller's progress, as the closure sees it at the start of a run.
const NOT_YET: u8 = 0;
const RETURNED_WAITING: u8 = 1;
const RETURNED_RUNNING: u8 = 2;

#[test]
fn no_run_starts_after_a_true_cancel() {
    model("no_run_starts_after_a_true_cancel", || {
        let (calls, closure_drops) = (Count::new(), Count::new());
        // What each run saw of the cancel when it started (records the interleaving).
        let cancel_seen = Arc::new(AtomicU8::new(NOT_YET));
        let starts_after_waiting = Count::new();
        let starts_after_running = Count::new();
        let task = {
            let (calls, seen) = (calls.clone(), cancel_seen.clone());
            let (after_waiting, after_running) =
                (starts_after_waiting.clone(), starts_after_running.clone());
            let captured = closure_drops.token();
            PeriodicTask::new(move || {
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
                    let ran = task.run(false);
                    outcomes.push(ran);
                    if ran != Ran::Rearmed {
                        break;
                    }
                }
                outcomes
            })
        };
        let cancel = task.cancel();
        cancel_seen.store(
            match cancel {
                CancelOutcome::Waiting => RETURNED_WAITING,
                CancelOutcome::Running => RETURNED_RUNNING,
                CancelOutcome::No => NOT_YET,
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
            CancelOutcome::Waiting => {
                // Either the worker lost the CAS, or it ran three times and stopped on its own.
                assert!(last == Ran::NotStarted || (last == Ran::Rearmed && outcomes.len() == 3));
            }
            CancelOutcome::Running => assert_eq!(last, Ran::Cancelled, "{outcomes:?}"),
            CancelOutcome::No => panic!("a periodic task cannot finish by itself here"),
        }
        if starts_after_running.get() == 1 {
            assert_eq!(
                last,
                Ran::Cancelled,
                "the run in flight at the cancel is the last one"
            );
        }
        assert_eq!(
            calls.get(),
            outcomes.iter().filter(|&&r| r != Ran::NotStarted).count()
        );
        assert_eq!(task.join(), Err(TaskError::Cancelled));
        drop(task);
        assert_eq!(closure_drops.get(), 1, "closure dropped exactly once");
    });
}

/// The whole path through the pool: a worker runs the task and re-arms it (`Core::run_task` ->
/// `route` -> `Timer::submit`), the user cancels (`ScheduledFuture::cancel` -> `Core::on_cancel`
/// -> `Timer::cancelled`), and the driver makes two passes (`drain_submissions` with `place`,
/// then `drain_cancels`) meanwhile. A final pass stands for every later one.
#[test]
fn rearm_racing_cancel_leaks_no_wheel_entry() {
    model("rearm_racing_cancel_leaks_no_wheel_entry", || {
        let (calls, closure_drops) = (Count::new(), Count::new());
        let pool = Arc::new(LoomPool::new(1));
        let mut driver = pool.driver();
        let future = {
            let (calls, captured) = (calls.clone(), closure_drops.token());
            // First due at tick 1000, then every 1000 ticks (always via the wheel).
            pool.schedule_periodic(
                move || {
                    let _captured = &captured;
                    calls.add();
                },
                1000,
                1000,
            )
            .unwrap()
        };
        // Setup, single-threaded: the driver places it, it comes due, it is dispatched. Its
        // wheel key is now stale, as for every periodic task that has fired.
        driver.drain();
        assert_eq!(driver.wheel_len(), 1);
        assert_eq!(driver.expire(1000), 1);
        assert_eq!(driver.wheel_len(), 0);

        let worker = {
            let pool = pool.clone();
            thread::spawn(move || pool.run_one())
        };
        let driver_thread = thread::spawn(move || {
            driver.drain();
            driver.drain();
            driver
        });
        let cancelled = future.cancel();
        assert!(
            worker.join().unwrap(),
            "the worker found the dispatched task"
        );
        let mut driver = driver_thread.join().unwrap();
        driver.drain(); // every later pass of the driver

        if cancelled {
            assert_eq!(
                driver.wheel_len(),
                0,
                "a cancelled task left an entry in the wheel"
            );
            assert_eq!(pool.outstanding(), 0);
            assert!(future.is_cancelled() && future.is_done());
        } else {
            unreachable!("a periodic task is never finished when cancelled here");
        }
        assert!(calls.get() <= 1);
        assert!(matches!(future.join(), Err(TaskError::Cancelled)));
        drop(driver);
        drop(pool);
        assert_eq!(closure_drops.get(), 1, "closure dropped exactly once");
    });
}

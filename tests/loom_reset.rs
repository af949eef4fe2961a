//! Loom model: `reset` racing the timer thread's expiry, a cancel, and `shutdown_now`
//! (`src/timer/mod.rs` `Timer::reset`, `src/task/cell.rs` `rebase`).
//!
//! - Against firing: the task either fires at its old deadline (and the reset returns false)
//!   or moves (true) and does not fire at the old one; never both, never neither, never two
//!   wheel entries.
//! - Against cancel: a cancel always wins a waiting task; afterwards the wheel holds no entry of
//!   it, whichever way the reset went (the moved entry is unlinked by the key the reset stored).
//! - Against `shutdown_now`: the task is handed back exactly once, wherever the reset put it.
//!
//! Ticks are an hour long (`loom_api::TICK`), so the system clock never makes a task due by
//! itself: the models decide when time passes.

#![cfg(loom)]

mod loom_common;

use loom::thread;
use loom_common::model;
use std::sync::Arc;
use std::time::Duration;
use wheelpool::loom_api::{LoomPool, TICK};
use wheelpool::TaskError;

#[test]
fn reset_races_firing() {
    model("reset_races_firing", || {
        let pool = Arc::new(LoomPool::new(1));
        let f = pool.schedule(|| (), 1).unwrap();
        let mut driver = pool.driver();
        assert_eq!(
            driver.drain(),
            Some(1),
            "the task is in the wheel for tick 1"
        );
        let timer = thread::spawn(move || driver.expire(1));
        let moved = f.reset(TICK * 5);
        let fired = timer.join().unwrap();
        let driver = pool.driver();
        if moved {
            assert_eq!(fired, 0, "a moved task fired at its old deadline");
            assert_eq!(driver.wheel_len(), 1);
            assert!(!pool.has_work());
            assert!(f.delay() > TICK * 4, "it waits for the new deadline");
        } else {
            assert_eq!(fired, 1, "the reset refused a task that had not fired");
            assert_eq!(driver.wheel_len(), 0, "a fired task left an entry behind");
            assert!(pool.has_work());
        }
        assert!(f.cancel());
    });
}

#[test]
fn reset_races_cancel() {
    model("reset_races_cancel", || {
        let pool = Arc::new(LoomPool::new(1));
        let f = pool.schedule(|| (), 1).unwrap();
        let mut driver = pool.driver();
        assert_eq!(driver.drain(), Some(1));
        let handle = f.cancel_handle();
        let canceller = thread::spawn(move || handle.cancel());
        let moved = f.reset(Duration::ZERO);
        assert!(
            canceller.join().unwrap(),
            "a waiting task is always cancelled"
        );
        assert!(!f.reset(TICK), "a cancelled task cannot be reset");
        driver.drain(); // unlinks what the cancel had to queue
        assert_eq!(
            driver.wheel_len(),
            0,
            "reset {moved}: an entry outlived the cancel"
        );
        assert_eq!(
            driver.expire(u64::MAX >> 20),
            0,
            "a cancelled task was dispatched"
        );
        assert_eq!(pool.outstanding(), 0);
        assert_eq!(f.join(), Err(TaskError::Cancelled));
    });
}

#[test]
fn reset_races_shutdown_now() {
    model("reset_races_shutdown_now", || {
        let pool = Arc::new(LoomPool::new(1));
        let f = pool.schedule(|| (), 1).unwrap();
        let driver = {
            let pool = pool.clone();
            thread::spawn(move || pool.run_driver())
        };
        let handle = f.cancel_handle();
        // A reset to now: the task may come due and be dispatched, or stay in the wheel.
        let resetter = thread::spawn(move || handle.reset(Duration::ZERO));
        let pending = pool.shutdown_now();
        let _moved = resetter.join().unwrap();
        driver.join().unwrap();
        assert_eq!(
            pending.len(),
            1,
            "the waiting task is handed back exactly once"
        );
        assert!(!f.reset(TICK));
        assert_eq!(pool.outstanding(), 0);
        assert_eq!(f.join(), Err(TaskError::Cancelled));
    });
}

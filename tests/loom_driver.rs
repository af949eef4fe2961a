//! Loom model 4: the driver's sleep vs a new earlier deadline (`src/timer/mod.rs`
//! `Timer::submit`/`wake_if_before`, `src/timer/driver.rs` `mark_awake`/`sleep`/`prepare_sleep`).
//!
//! The driver never sleeps past a deadline submitted while it was going to sleep. Under loom the
//! parker's timed wait never times out, so "sleeps past it" means: parks with the submission
//! unseen and no unpark token. Nothing else would ever wake it, so loom reports a deadlock.
//!
//! The driver thread runs the passes of `Driver::run` that matter here: `mark_awake` (the
//! `sleep_until = AWAKE` at the top of a pass), the locked bookkeeping (drain the submissions
//! into the wheel, compute the next expiration and announce it under the wheel's lock), and
//! `sleep` until that expiration. Producers use both paths: a direct insert when they win the
//! wheel's `try_lock`, the submission queue when the driver holds the lock. It stops once the earliest submitted deadline is
//! the wheel's next expiration: from then on its real (timed) park would wake in time for every
//! other entry, submitted or not yet drained, whose deadline is later.

#![cfg(wheelpool_loom)]

mod loom_common;

use loom::thread;
use loom_common::model;
use std::sync::Arc;
use wheelpool::loom_api::{LoomPool, ModelDriver};

/// Passes of the driver until the wheel's next expiration is tick `earliest`; returns how many
/// passes it took.
fn drive_until(mut driver: ModelDriver, earliest: u64) -> usize {
    for pass in 1..=4 {
        driver.mark_awake();
        let next = driver.drain();
        if next == Some(earliest) {
            return pass;
        }
        driver.sleep(next);
    }
    panic!("the driver made 4 passes without seeing the submission");
}

#[test]
fn earlier_deadline_wakes_a_driver_with_an_empty_wheel() {
    model(
        "earlier_deadline_wakes_a_driver_with_an_empty_wheel",
        || {
            let pool = Arc::new(LoomPool::new(1));
            let driver = pool.driver();
            let d = thread::spawn(move || drive_until(driver, 5));
            // The driver sleeps without a time limit (empty wheel); tick 5 is earlier.
            let _f = pool.schedule(|| (), 5).unwrap();
            d.join().unwrap();
        },
    );
}

#[test]
fn earlier_deadline_wakes_a_driver_sleeping_until_a_later_one() {
    model(
        "earlier_deadline_wakes_a_driver_sleeping_until_a_later_one",
        || {
            let pool = Arc::new(LoomPool::new(1));
            let mut driver = pool.driver();
            let _late = pool.schedule(|| (), 1000).unwrap();
            driver.drain(); // the wheel's next expiration is now tick 960 (a level-1 slot)
            let d = thread::spawn(move || drive_until(driver, 5));
            let _early = pool.schedule(|| (), 5).unwrap();
            d.join().unwrap();
        },
    );
}

/// Two producers with earlier deadlines: only the one that wins the CAS of `sleep_until`
/// unparks the driver, and the driver still does not sleep past the earlier one. (If it sees
/// tick 6 first and sleeps until 6, tick 5 must wake it; if it sees 5 first, its timed park
/// would wake in time for 6.)
#[test]
fn burst_of_earlier_deadlines_is_seen_with_one_wake_up() {
    model(
        "burst_of_earlier_deadlines_is_seen_with_one_wake_up",
        || {
            let pool = Arc::new(LoomPool::new(1));
            let driver = pool.driver();
            let d = thread::spawn(move || drive_until(driver, 5));
            let producer = {
                let pool = pool.clone();
                thread::spawn(move || drop(pool.schedule(|| (), 6).unwrap()))
            };
            let _f = pool.schedule(|| (), 5).unwrap();
            producer.join().unwrap();
            d.join().unwrap();
        },
    );
}

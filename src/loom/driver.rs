//! The driver's sleep vs a new earlier deadline (`src/timer/mod.rs` `Timer::insert`/
//! `wake_if_before`, `src/timer/driver.rs` `mark_awake`/`poll_step`/`announce_and_check`/`park`).
//!
//! The driver never sleeps past a deadline inserted while it was going to sleep. Under loom the
//! parker's timed wait never times out, so "sleeps past it" means: parks with the entry unseen
//! and no unpark token. Nothing else would ever wake it, so loom reports a deadlock.
//!
//! The driver thread runs the steps of `Driver::pass` for a running pool: `mark_awake` (the
//! `sleep_until = AWAKE` at the top of a pass), `poll_step` (reads every shard's hint, locks the
//! ones with something due, notes each next expiration), `announce_and_check` (store the sleep
//! tick, fence, re-read every hint) and `park` until that tick. It stops once it has seen the
//! earliest inserted deadline: from then on its real (timed) park would wake in time for every
//! later entry. A producer that lowers a hint fences, then reads the sleep tick.
//!
//! The producers insert into different shards (`home::set`), so the driver's re-read of one
//! shard's hint can come before one producer's insert and after another's. Taking out either
//! fence of the pair makes every model here deadlock (tried).

use super::{model, ModelPool};
use crate::sync::Arc;
use crate::timer::driver::Driver;
use crate::timer::home;
use loom::thread;

/// Passes of the driver until it has seen tick `earliest`; returns how many it took.
fn drive_until(mut driver: Driver, earliest: u64) -> usize {
    for pass in 1..=4 {
        driver.mark_awake();
        let (more, dispatched) = driver.poll_step();
        assert!(!more && dispatched == 0, "nothing is due at tick 0");
        match driver.announce_and_check() {
            Ok(Some(next)) if next == earliest => return pass,
            Ok(next) => driver.park(next),
            Err(_) => {} // something earlier came in: go round again
        }
    }
    panic!("the driver made 4 passes without seeing the new deadline");
}

/// Schedules a one-shot due at tick `at` from shard `shard`.
fn produce(pool: &ModelPool, shard: usize, at: u64) {
    home::set(shard);
    drop(pool.schedule(|| (), at).unwrap());
}

#[test]
fn earlier_deadline_wakes_a_driver_with_an_empty_wheel() {
    model(
        "earlier_deadline_wakes_a_driver_with_an_empty_wheel",
        || {
            let pool = Arc::new(ModelPool::new(1));
            let driver = pool.driver();
            let d = thread::spawn(move || drive_until(driver, 5));
            // The driver sleeps without a time limit (every wheel empty); tick 5 is earlier.
            produce(&pool, 1, 5);
            d.join().unwrap();
        },
    );
}

#[test]
fn earlier_deadline_in_another_shard_wakes_a_driver_sleeping_until_a_later_one() {
    model(
        "earlier_deadline_in_another_shard_wakes_a_driver_sleeping_until_a_later_one",
        || {
            let pool = Arc::new(ModelPool::new(1));
            let driver = pool.driver();
            produce(&pool, 0, 1000); // shard 0's next expiration: tick 960 (a level-1 slot)
            let d = thread::spawn(move || drive_until(driver, 5));
            produce(&pool, 1, 5);
            d.join().unwrap();
        },
    );
}

/// Two producers with earlier deadlines in two shards (the earliest in shard 1, which the
/// driver re-checks after shard 0): only the one that wins the CAS of
/// `sleep_until` unparks the driver, and the driver still does not sleep past the earlier one.
/// (If it sees tick 6 first and sleeps until 6, tick 5 must wake it; if it sees 5 first, its
/// timed park would wake in time for 6.)
#[test]
fn burst_of_earlier_deadlines_in_two_shards_is_seen() {
    model("burst_of_earlier_deadlines_in_two_shards_is_seen", || {
        let pool = Arc::new(ModelPool::new(1));
        let driver = pool.driver();
        let d = thread::spawn(move || drive_until(driver, 5));
        let producer = {
            let pool = pool.clone();
            thread::spawn(move || produce(&pool, 0, 6))
        };
        produce(&pool, 1, 5);
        producer.join().unwrap();
        d.join().unwrap();
    });
}

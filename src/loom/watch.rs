//! The watcher's registration vs the driver's announcement (`src/pool/sleep.rs`
//! `become_watcher`, `src/timer/mod.rs` `watch_tick`/`watcher_is_late`, `src/timer/driver.rs`
//! `announce_and_check`/`nudge_watcher_if_late`; "The watcher" in `timer/mod.rs`).
//!
//! An idle worker that becomes the watcher parks until the tick it reads from `sleep_until`
//! (`None`: without a time limit). The driver, about to sleep until tick `T`, nudges the watcher
//! if it may watch a later tick. Loom's parks never time out, so the models check the protocol's
//! promise directly: once both sides are done, the watcher read `T`, or it was nudged (and a
//! nudged watcher reads the tick again). A missed nudge would leave the watcher parked past the
//! deadline: not a lost task (the driver still dispatches it), but the second wake-up in a row
//! that the watcher exists to save. Taking out either fence lets a model fail (the watcher reads
//! the stale tick, the driver reads a stale `watch`).

use super::{model, ModelPool};
use crate::sync::Arc;
use crate::timer::driver::Driver;
use crate::timer::home;
use loom::thread;

/// The worker's side: register as watcher 0 and read the tick to park until.
fn watcher(pool: &ModelPool) -> Option<u64> {
    assert!(pool.core.queues.sleep.become_watcher(0));
    pool.core.timer.watch_tick()
}

/// The driver's pass up to its park (tick 5 is the earliest), while the watcher `w` registers;
/// then the protocol's promise: the watcher read tick 5, or the driver nudged it.
fn announce_5_and_check(driver: &mut Driver, w: thread::JoinHandle<Option<u64>>) {
    driver.mark_awake();
    driver.poll_step();
    let next = driver
        .announce_and_check()
        .expect("nothing earlier comes in");
    assert_eq!(next, Some(5));
    let nudged = driver.nudge_watcher_if_late(next);
    let watched = w.join().unwrap();
    assert!(
        watched == Some(5) || nudged,
        "the watcher watches {watched:?} and was not nudged"
    );
}

#[test]
fn a_watcher_registering_while_the_driver_works_sees_its_tick_or_is_nudged() {
    model(
        "a_watcher_registering_while_the_driver_works_sees_its_tick_or_is_nudged",
        || {
            let pool = Arc::new(ModelPool::new(1));
            home::set(0);
            drop(pool.schedule(|| (), 5).unwrap());
            let mut driver = pool.driver();
            let w = {
                let pool = pool.clone();
                thread::spawn(move || watcher(&pool))
            };
            announce_5_and_check(&mut driver, w);
        },
    );
}

/// The watcher may read the tick of the driver's previous sleep (1000), which a producer's
/// earlier deadline (5) has since made stale: the driver's next announcement must nudge it.
#[test]
fn a_watcher_that_read_a_stale_tick_is_nudged() {
    model("a_watcher_that_read_a_stale_tick_is_nudged", || {
        let pool = Arc::new(ModelPool::new(1));
        home::set(0);
        drop(pool.schedule(|| (), 1000).unwrap());
        let mut driver = pool.driver();
        driver.mark_awake();
        driver.poll_step();
        assert_eq!(driver.announce_and_check(), Ok(Some(1000)));
        let w = {
            let pool = pool.clone();
            thread::spawn(move || watcher(&pool))
        };
        home::set(1);
        drop(pool.schedule(|| (), 5).unwrap()); // lowers shard 1's hint: the driver is woken
        announce_5_and_check(&mut driver, w);
    });
}

//! The watcher's registration vs the driver's announcement (`src/pool/sleep.rs`
//! `become_watcher`, `src/timer/mod.rs` `watch_tick`/`watcher_is_late`, `src/timer/driver.rs`
//! `announce_and_check`/`nudge_watcher_if_late`; "The watcher" in `timer/mod.rs`).
//!
//! An idle worker that becomes the watcher parks until the tick it reads from `sleep_until`
//! (`None`: without a time limit). The driver, about to sleep until tick `T`, nudges the watcher
//! if it may watch a later tick. Loom's parks never time out, so the models check the protocol's
//! promise directly: once both sides are done, the watcher read `T`, or it was nudged (and a
//! nudged watcher reads the tick again). A missed nudge would leave the watcher parked past the
//! deadline: not a lost task (the driver still dispatches it, at most `BACKSTOP` after its tick
//! while a watcher watches), but the second wake-up in a row that the watcher exists to save.
//! Taking out either fence lets a model fail (the watcher reads the stale tick, the driver reads
//! a stale `watch`).
//!
//! Not modelled: the driver's `BACKSTOP` (its park past a watched tick, and its passes leaving
//! the last 50 us of due entries to the watcher). Those add no atomic protocol (the driver reads
//! `watch` as a hint), and what they rest on is that every park of the driver has a time limit
//! while anything is pending, which loom cannot check (its parks never time out, and at the
//! models' one-hour tick a 50 us shift changes no tick).

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

/// The driver's tick (5) has come and the watcher took its entry itself (the shard's hint is
/// now at most 1000: the start of the wheel slot that holds it); the driver, awake for it, has
/// not announced its next tick yet. A watcher that registers now watches the earliest hint
/// instead of waiting for a nudge, while a producer adds an earlier deadline (7) in another
/// shard. The promise is unchanged: once the driver has announced its next tick (again, if the
/// producer woke it), the watcher watches that tick (or an earlier one, which only wakes it
/// early), or the driver's last announcement nudged it.
#[test]
fn a_watcher_past_the_drivers_tick_watches_the_earliest_hint_or_is_nudged() {
    model(
        "a_watcher_past_the_drivers_tick_watches_the_earliest_hint_or_is_nudged",
        || {
            let pool = Arc::new(ModelPool::new(1));
            home::set(0);
            drop(pool.schedule(|| (), 5).unwrap());
            drop(pool.schedule(|| (), 1000).unwrap());
            let mut driver = pool.driver();
            driver.mark_awake();
            driver.poll_step();
            assert_eq!(driver.announce_and_check(), Ok(Some(5)));
            let timer = &pool.core.timer;
            // Tick 5 comes, and the watcher's poll takes its entry.
            let mut due = Vec::new();
            let cell = &timer.shards[0];
            cell.poll_chunk(&mut cell.lock(), 5, timer.staging(), &mut due);
            assert_eq!(due.len(), 1);
            let just_past_5 = timer.time.nanos_of_tick(5) + 1;
            let w = {
                let pool = pool.clone();
                thread::spawn(move || {
                    assert!(pool.core.queues.sleep.become_watcher(0));
                    pool.core.timer.watch_tick_at(|| just_past_5)
                })
            };
            let p = {
                let pool = pool.clone();
                thread::spawn(move || {
                    home::set(1);
                    drop(pool.schedule(|| (), 7).unwrap());
                })
            };
            // The driver, up for tick 5: passes until one ends in an announcement.
            let pass = |driver: &mut Driver| loop {
                driver.mark_awake();
                driver.poll_step();
                if let Ok(next) = driver.announce_and_check() {
                    return (next, driver.nudge_watcher_if_late(next));
                }
            };
            let (mut next, mut nudged) = pass(&mut driver);
            let watched = w.join().unwrap();
            p.join().unwrap();
            if timer.driver_awake() {
                // The producer's deadline came before the announced tick: it woke the driver.
                (next, nudged) = pass(&mut driver);
            }
            assert_eq!(
                next,
                Some(7),
                "the driver sleeps until the earliest deadline"
            );
            assert!(
                watched.is_none_or(|t| t >= 7),
                "the watcher watches {watched:?}: a tick no deadline has"
            );
            assert!(
                timer.watched() <= 7 || nudged,
                "the watcher watches {} and was not nudged",
                timer.watched()
            );
        },
    );
}

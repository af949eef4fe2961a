//! The watcher leaving the driver to wake helpers for its due tasks (`src/pool/queues.rs`
//! `push_from_watcher`, `src/timer/mod.rs` `leave_helpers`/`take_owed_helpers`,
//! `src/timer/driver.rs` `announce_and_check`/`wake_owed_helpers`; "Helpers for the watcher's
//! due tasks" in `timer/mod.rs`).
//!
//! A watcher whose poll took several due tasks pushes them onto its own deque and, for the ones
//! past the first, either wakes sleepers itself or, when the driver is in a pass (or sleeps
//! until a tick that has come), leaves the waking to the driver's next pass. The promise: a
//! sleeper is woken for them, by one side or the other. Loom's parks never time out, so a
//! sleeper nobody wakes stays parked, and the model's join of it never returns: loom reports
//! the deadlock. Taking out either fence (the watcher's in `leave_helpers`, the driver's in
//! `announce_and_check`) lets the model fail: the watcher reads `AWAKE` and leaves the waking
//! to a driver whose read of the count came first.
//!
//! Not modelled: a driver asleep until a tick that has come. It wakes within `MAX_BACKSTOP`
//! of that tick on its own, which loom cannot check (its parks never time out, and at the
//! models' one-hour tick no tick comes while a model runs); `tests/pool/timer/watcher_helpers.rs`
//! drives that case in real time.

use super::{model, ModelPool};
use crate::sync::Arc;
use crate::timer::home;
use loom::thread;

/// The driver passes (and announces tick 1000, far away) while worker 0, the watcher, pushes
/// two due tasks and worker 1 goes to sleep: worker 1 is woken for the task past the first,
/// by the watcher or by the driver.
#[test]
fn a_watchers_due_tasks_get_a_helper_from_the_watcher_or_the_driver() {
    model(
        "a_watchers_due_tasks_get_a_helper_from_the_watcher_or_the_driver",
        || {
            let pool = Arc::new(ModelPool::new(2));
            home::set(0);
            drop(pool.schedule(|| (), 1000).unwrap());
            let mut driver = pool.driver();
            let sleeper = {
                let pool = pool.clone();
                thread::spawn(move || pool.sleep(1))
            };
            let watcher = {
                let pool = pool.clone();
                thread::spawn(move || pool.watcher_pushes(0, 2))
            };
            driver.mark_awake();
            driver.poll_step();
            assert_eq!(driver.announce_and_check(), Ok(Some(1000)));
            driver.wake_owed_helpers();
            watcher.join().unwrap();
            // Returns once worker 1 was woken, or saw the tasks before it parked.
            sleeper.join().unwrap();
            pool.core.driver_exited();
            drop(pool.core.shutdown_now());
        },
    );
}

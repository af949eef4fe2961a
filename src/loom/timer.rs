//! The sharded wheels' protocols (`src/timer/mod.rs` ground rules): insert vs cancel under the
//! shard lock, the driver's poll and dispatch, the `Closing`/`Stopped` gates of a shutdown, and
//! `Timer::reset`. Every model ends by checking that no wheel keeps an entry it should not.

use super::shutdown::check_fate;
use super::{assert_dropped_once, model, Count, ModelPool, TICK};
use crate::error::{ResetError, TaskError};
use crate::sync::Arc;
use crate::timer::home;
use loom::thread;
use std::sync::atomic::{AtomicBool, Ordering};

/// Runs what the driver handed to the workers, one worker step at a time; returns how many.
fn run_queued(pool: &ModelPool) -> usize {
    let mut n = 0;
    while pool.run_one() {
        n += 1;
    }
    n
}

/// (a) Insert vs cancel on one shard. A task is cancelled while `Core::schedule_admitted` puts it
/// into its shard's wheel (`Timer::insert`: the `SCHEDULED` check under the shard lock) and the
/// cancel unlinks by the recorded key under the same lock (`Timer::cancelled`). Proves: whichever
/// takes the lock first, no wheel keeps an entry for the cancelled task, the closure is dropped
/// exactly once, and the pool counts the task as ended.
#[test]
fn insert_racing_cancel_leaves_no_entry() {
    model("insert_racing_cancel_leaves_no_entry", || {
        let pool = Arc::new(ModelPool::new(1));
        let drops = Count::new();
        let token = drops.token();
        let (task, future) = pool.prepare(move || drop(token), 5, 0);
        let inserter = {
            let pool = pool.clone();
            thread::spawn(move || pool.schedule_prepared(&task))
        };
        assert!(future.cancel(), "nothing runs the task: the cancel wins it");
        assert_eq!(inserter.join().unwrap(), Ok(()));
        assert_eq!(
            pool.wheel_len(),
            0,
            "a cancelled task left an entry in a wheel"
        );
        assert_eq!(drops.get(), 1, "the cancel dropped the closure");
        assert_eq!(pool.core.outstanding(), 0);
        assert_eq!(future.join(), Err(TaskError::Cancelled));
        drop(pool);
        assert_dropped_once(&drops);
    });
}

/// (b) Insert vs the driver's poll and dispatch vs cancel. A task due at tick 0 goes into its
/// wheel while the timer thread polls every shard and hands what is due to the injector, which
/// a worker then runs (the second thread does the driver's pass, then a worker's step: the
/// worker could not take the task before the dispatch anyway); the user cancels meanwhile. A
/// final driver pass and worker step stand for every later one. Proves: the task either ran
/// exactly once or was cancelled (cancel true), never both, never neither; no entry is left.
#[test]
fn insert_racing_poll_and_cancel_ends_one_way() {
    model("insert_racing_poll_and_cancel_ends_one_way", || {
        let pool = Arc::new(ModelPool::new(1));
        let (ran, drops) = (Count::new(), Count::new());
        let (task, future) = pool.prepare(ran.once(&drops), 0, 0);
        let inserter = {
            let pool = pool.clone();
            thread::spawn(move || pool.insert(&task))
        };
        let timer_then_worker = {
            let pool = pool.clone();
            thread::spawn(move || {
                let mut driver = pool.driver();
                driver.mark_awake();
                driver.poll_step();
                run_queued(&pool);
                driver
            })
        };
        let cancelled = future.cancel();
        assert_eq!(inserter.join().unwrap(), Ok(()));
        let mut driver = timer_then_worker.join().unwrap();
        driver.poll_step();
        run_queued(&pool);

        assert_eq!(
            ran.get() + usize::from(cancelled),
            1,
            "ran {} times, cancel returned {cancelled}",
            ran.get()
        );
        assert_eq!(pool.wheel_len(), 0, "an entry was left in a wheel");
        assert_eq!(pool.core.outstanding(), 0);
        // A cancel that found the task running returns false; the run finishes and the future
        // says Cancelled (`ScheduledFuture::cancel`'s contract).
        let cancelled_while_running = !cancelled && future.is_cancelled();
        let result = future.join();
        if cancelled || cancelled_while_running {
            assert_eq!(result, Err(TaskError::Cancelled));
        } else {
            assert_eq!(result, Ok(()));
        }
        drop(driver);
        drop(pool);
        assert_dropped_once(&drops);
    });
}

/// (c) Insert vs `shutdown_now`, with the real timer thread (`driver::run`: its `stop_now`
/// closes each shard with the `Stopped` gate and swaps its wheel out under the lock). A task
/// for tick 5 is scheduled from shard 1 meanwhile. Proves: the admitted task ends exactly one
/// way (ran, handed back by `shutdown_now`, or its schedule returned `Err(Shutdown)`; nothing is
/// due, so it never runs), no insert slips in behind the swap, and every wheel ends empty.
#[test]
fn insert_racing_shutdown_now_ends_one_way() {
    model("insert_racing_shutdown_now_ends_one_way", || {
        let (ran, drops) = (Count::new(), Count::new());
        let pool = Arc::new(ModelPool::new(1));
        let driver = pool.spawn_driver();
        let scheduler = {
            let (pool, task) = (pool.clone(), ran.once(&drops));
            thread::spawn(move || {
                home::set(1);
                pool.schedule(task, 5)
            })
        };
        let returned = pool.core.shutdown_now();
        let scheduled = scheduler.join().unwrap();
        driver.join().unwrap();
        assert_eq!(ran.get(), 0, "nothing is due");
        assert_eq!(pool.wheel_len(), 0, "an insert slipped in behind the stop");
        assert_eq!(pool.core.outstanding(), 0);
        check_fate(scheduled, &ran, returned.len());
        drop(returned);
        drop(pool);
        assert_dropped_once(&drops);
    });
}

/// (d) Graceful shutdown: a periodic task's re-arm races the driver's sweep (the `Closing`
/// gate). The task is due now; a worker (`worker::run`) runs it and re-arms it for tick 1000
/// into its wheel while `shutdown` is called and the real timer thread (`driver::run`) closes
/// each shard to periodic tasks and sends the periodic tasks it holds to the workers to be
/// stopped. Proves: the task always ends (stopped: its future says `Shutdown`), it ran at most
/// once, the pool's outstanding count reaches 0 (the driver exits, so the worker does), and no
/// periodic entry is left in a wheel.
#[test]
fn periodic_rearm_racing_graceful_sweep() {
    model("periodic_rearm_racing_graceful_sweep", || {
        let (ran, drops) = (Count::new(), Count::new());
        let pool = Arc::new(ModelPool::new(1));
        let future = pool.schedule_periodic(ran.each(&drops), 0, 1000).unwrap();
        let worker = pool.spawn_worker(0);
        let driver = pool.spawn_driver();
        pool.core.shutdown();
        driver.join().unwrap();
        worker.join().unwrap();
        assert!(ran.get() <= 1);
        assert_eq!(pool.core.outstanding(), 0);
        assert_eq!(pool.wheel_len(), 0, "a periodic entry was left in a wheel");
        assert!(future.is_done());
        assert_eq!(future.join(), Err(TaskError::Shutdown));
        assert_dropped_once(&drops);
    });
}

/// The deadline `Timer::reset` moves the task to, in ticks: never due while a model runs.
const RESET_TO: u64 = 5;

/// (e1) `Timer::reset` vs the driver's poll. A task due at tick 0 waits in its wheel; one thread
/// resets it to tick 5 (its `rebase` closure runs under the shard lock) while the timer thread
/// polls and dispatches; a worker step then runs what was dispatched. Proves: reset returns true
/// only if the task was still in the wheel (then it was not dispatched, did not run, and waits
/// at its new tick: a further poll at tick 0 dispatches nothing), and `rebase` ran exactly when
/// reset returned true; otherwise it ran exactly once; no entry leaks.
#[test]
fn reset_racing_poll() {
    model("reset_racing_poll", || {
        let pool = Arc::new(ModelPool::new(1));
        let (ran, rebased) = (Count::new(), Count::new());
        let (task, future) = {
            let ran = ran.clone();
            pool.prepare(move || ran.add(), 0, 0)
        };
        pool.insert(&task).unwrap();
        let mut driver = pool.driver();
        let timer_thread = thread::spawn(move || {
            driver.mark_awake();
            let (_, dispatched) = driver.poll_step();
            (driver, dispatched)
        });
        let reset = {
            let rebased = rebased.clone();
            let deadline = RESET_TO * TICK.as_nanos() as u64;
            pool.core
                .timer
                .reset(&*task, deadline, move || rebased.add())
        };
        if let Err(why) = reset {
            // Not yet run (the run below is the first): the poll handed it out, it is firing.
            assert_eq!(why, ResetError::Running, "a refused reset says why");
        }
        let reset = reset.is_ok();
        let (mut driver, dispatched) = timer_thread.join().unwrap();
        assert_eq!(
            rebased.get(),
            usize::from(reset),
            "rebase runs exactly on a true reset"
        );
        let (_, later) = driver.poll_step();
        run_queued(&pool);
        if reset {
            assert_eq!(
                (dispatched, later),
                (0, 0),
                "dispatched before its new deadline"
            );
            assert_eq!(ran.get(), 0);
            assert_eq!(pool.next_expiration(0), Some(RESET_TO));
            assert_eq!(pool.wheel_len(), 1);
            assert!(future.cancel());
            assert_eq!(future.join(), Err(TaskError::Cancelled));
        } else {
            assert_eq!(dispatched, 1, "a false reset: the poll had taken it");
            assert_eq!(ran.get(), 1, "the dispatched task ran exactly once");
            assert_eq!(future.join(), Ok(()));
        }
        assert_eq!(pool.wheel_len(), 0, "an entry leaked");
        assert_eq!(pool.core.outstanding(), 0);
    });
}

/// (e2) `Timer::reset` vs the driver's poll vs a cancel. As (e1), with the user cancelling the
/// task meanwhile. Proves: a reset that returns true ran its `rebase` before the cancel
/// returned (once the cancel has won, reset returns false), the cancel always wins (nothing
/// runs the task before it), the task never runs, and no entry is left in any wheel.
#[test]
fn reset_racing_poll_and_cancel() {
    model("reset_racing_poll_and_cancel", || {
        let pool = Arc::new(ModelPool::new(1));
        let (ran, drops, rebased) = (Count::new(), Count::new(), Count::new());
        let (task, future) = pool.prepare(ran.once(&drops), 0, 0);
        pool.insert(&task).unwrap();
        // Set once cancel has returned (records the interleaving; not part of any protocol).
        let cancel_returned = std::sync::Arc::new(AtomicBool::new(false));
        let mut driver = pool.driver();
        let timer_thread = thread::spawn(move || {
            driver.mark_awake();
            driver.poll_step();
            driver
        });
        let resetter = {
            let (pool, rebased, seen) = (pool.clone(), rebased.clone(), cancel_returned.clone());
            thread::spawn(move || {
                let deadline = RESET_TO * TICK.as_nanos() as u64;
                pool.core.timer.reset(&*task, deadline, move || {
                    assert!(!seen.load(Ordering::SeqCst), "reset moved a cancelled task");
                    rebased.add();
                })
            })
        };
        let cancelled = future.cancel();
        cancel_returned.store(true, Ordering::SeqCst);
        let reset = resetter.join().unwrap();
        if let Err(why) = reset {
            // The cancel won first, or the poll handed the task out first (firing; the cancel
            // then won it from the queue): never Done, it never ran.
            assert!(
                matches!(why, ResetError::Cancelled | ResetError::Running),
                "{why:?}"
            );
        }
        let reset = reset.is_ok();
        let mut driver = timer_thread.join().unwrap();
        driver.poll_step();
        run_queued(&pool);
        assert!(cancelled, "nothing ran the task before the cancel");
        assert_eq!(rebased.get(), usize::from(reset));
        assert_eq!(ran.get(), 0);
        assert_eq!(pool.wheel_len(), 0, "an entry leaked");
        assert_eq!(pool.core.outstanding(), 0);
        assert_eq!(drops.get(), 1);
        assert_eq!(future.join(), Err(TaskError::Cancelled));
    });
}

/// (c2) A due task's insert vs the driver's dispatch vs `shutdown_now`. The task is due at tick
/// 0 and goes into its wheel while the real timer thread polls and hands it to the injector,
/// and `shutdown_now` stops the driver (the `Stopped` gate, the wheels swapped out and handed
/// back), then sweeps the run queues. No worker runs. Proves: the task is handed back exactly
/// once or its schedule fails with `Shutdown`, wherever it was (wheel, the driver's hands, the
/// injector) when the stop came; nothing is left in a wheel or a run queue.
#[test]
fn due_insert_racing_dispatch_and_shutdown_now() {
    model("due_insert_racing_dispatch_and_shutdown_now", || {
        let (ran, drops) = (Count::new(), Count::new());
        let pool = Arc::new(ModelPool::new(1));
        let (task, future) = pool.prepare(ran.once(&drops), 0, 1);
        let driver = pool.spawn_driver();
        let inserter = {
            let pool = pool.clone();
            thread::spawn(move || pool.insert(&task))
        };
        let returned = pool.core.shutdown_now();
        let inserted = inserter.join().unwrap();
        driver.join().unwrap();
        assert_eq!(pool.wheel_len(), 0, "an entry was left in a wheel");
        assert!(
            !pool.core.queues.has_work(),
            "a task was left in a run queue"
        );
        assert_eq!(pool.core.outstanding(), 0);
        check_fate(inserted.map(|()| future), &ran, returned.len());
        drop(returned);
        drop(pool);
        assert_dropped_once(&drops);
    });
}

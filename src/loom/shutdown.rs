//! Shutdown racing schedule (`src/pool/core.rs` `admit`/`schedule`/`insert`/`recheck_shutdown_now`/`shutdown_now`,
//! with the real worker loop and the real timer thread).
//!
//! Every task is exactly one of: rejected with `Shutdown`, run, or returned by `shutdown_now`
//! (or, under a graceful shutdown that hands waiting one-shots back, handed back).
//! None is both, none is neither: a task left queued after `shutdown_now` with its schedule
//! accepted would never finish, and its future's `join` would block (loom: deadlock).

use super::{assert_dropped_once, model, Count, ModelPool};
use crate::error::{ScheduleError, TaskError};
use crate::sync::Arc;
use crate::timer::{home, Keep};
use crate::ScheduledFuture;
use loom::thread;

/// Checks the fate of one one-shot task scheduled while `shutdown_now` ran.
pub(super) fn check_fate(
    scheduled: Result<ScheduledFuture<()>, ScheduleError>,
    ran: &Count,
    returned: usize,
) {
    let rejected = usize::from(scheduled.is_err());
    assert_eq!(
        ran.get() + returned + rejected,
        1,
        "ran {} + returned {returned} + rejected {rejected}",
        ran.get()
    );
    match scheduled {
        Err(e) => assert_eq!(e, ScheduleError::Shutdown),
        Ok(future) if ran.get() == 1 => assert_eq!(future.join(), Ok(())),
        Ok(future) => assert_eq!(future.join(), Err(TaskError::Cancelled)),
    }
}

/// A task due now (straight to the injector) vs `shutdown_now`, with a worker running.
#[test]
fn schedule_due_now_racing_shutdown_now() {
    model("schedule_due_now_racing_shutdown_now", || {
        let (ran, drops) = (Count::new(), Count::new());
        let pool = Arc::new(ModelPool::new(1));
        pool.core.driver_exited(); // no timer thread: nothing to hand back
        let worker = pool.spawn_worker(0);
        let scheduler = {
            let (pool, task) = (pool.clone(), ran.once(&drops));
            thread::spawn(move || pool.schedule(task, 0))
        };
        let returned = pool.core.shutdown_now();
        let scheduled = scheduler.join().unwrap();
        worker.join().unwrap();
        check_fate(scheduled, &ran, returned.len());
        drop(returned);
        drop(pool);
        assert_dropped_once(&drops);
    });
}

/// A periodic task that a worker runs and re-arms (straight back onto the injector) while
/// `shutdown_now` sweeps: afterwards the task is finished (returned, or stopped by the re-arm's
/// own recheck), nothing of it is left queued, and it ran at most once more.
#[test]
fn periodic_rearm_racing_shutdown_now() {
    model("periodic_rearm_racing_shutdown_now", || {
        let (ran, drops) = (Count::new(), Count::new());
        let pool = Arc::new(ModelPool::new(1));
        pool.core.driver_exited();
        let future = pool.schedule_periodic(ran.each(&drops), 0, 0).unwrap();
        let worker = pool.spawn_run_one();
        let returned = pool.core.shutdown_now();
        worker.join().unwrap();
        assert!(returned.len() <= 1);
        assert!(ran.get() <= 1);
        assert!(future.is_done(), "the task is finished, not left queued");
        assert_eq!(pool.core.outstanding(), 0);
        let result = future.join();
        if returned.len() == 1 {
            assert_eq!(result, Err(TaskError::Cancelled));
        } else {
            assert_eq!(ran.get(), 1, "not returned: it ran, then stopped");
            assert!(
                matches!(result, Err(TaskError::Cancelled | TaskError::Shutdown)),
                "{result:?}"
            );
        }
        drop(returned);
        drop(pool);
        assert_dropped_once(&drops);
    });
}

/// Nothing starts after `shutdown_now` returns (`src/pool/queues.rs`: the `taking` flags that
/// `ReadyQueues::quiesce` waits for). A task due now sits in the injector while a worker looks for
/// work. Once `shutdown_now` has returned, the task has either started (its `SCHEDULED ->
/// RUNNING` CAS came first, so a cancel now finds it running and returns false) or been handed
/// back (a cancel finds it ended): a cancel that still finds it waiting, and returns true, means
/// a worker could start it after the return.
#[test]
fn nothing_starts_after_shutdown_now_returns() {
    model("nothing_starts_after_shutdown_now_returns", || {
        let ran = Count::new();
        let pool = Arc::new(ModelPool::new(1));
        pool.core.driver_exited(); // no timer thread: nothing to hand back
        let task = {
            let ran = ran.clone();
            pool.schedule(move || ran.add(), 0).unwrap()
        };
        let worker = pool.spawn_worker(0);
        let returned = pool.core.shutdown_now();
        assert!(
            !task.cancel(),
            "after shutdown_now returned, the task was still waiting to be started"
        );
        worker.join().unwrap();
        assert_eq!(
            ran.get() + returned.len(),
            1,
            "run or handed back, exactly once"
        );
    });
}

/// A graceful shutdown that hands waiting one-shots back (`Keep { one_shots: false, .. }`, the
/// builder's `execute_delayed_after_shutdown(false)`): a one-shot for tick 5 is scheduled from
/// shard 1 while `shutdown` is called and the real timer thread (`driver::run`) closes each
/// shard's gate to one-shots (`Closing`), sweeps them out and hands them back. Proves: the task
/// ends exactly one way (handed back once, its future saying `Shutdown`; or its schedule failed
/// with `Shutdown`), never runs, leaves no wheel entry, and the driver exits (nothing is left
/// outstanding), so `await_termination` is not held up by it.
#[test]
fn schedule_racing_graceful_hand_back() {
    model("schedule_racing_graceful_hand_back", || {
        let (ran, drops) = (Count::new(), Count::new());
        let keep = Keep {
            one_shots: false,
            periodic: false,
        };
        let pool = Arc::new(ModelPool::keeping(1, keep));
        let driver = pool.spawn_driver();
        let scheduler = {
            let (pool, task) = (pool.clone(), ran.once(&drops));
            thread::spawn(move || {
                home::set(1);
                pool.schedule(task, 5)
            })
        };
        pool.core.shutdown();
        let scheduled = scheduler.join().unwrap();
        driver.join().unwrap();
        let handed = pool.core.termination.take_handed_back_now();
        assert_eq!(ran.get(), 0, "nothing is due");
        assert_eq!(pool.wheel_len(), 0, "a one-shot was left in a wheel");
        assert_eq!(pool.core.outstanding(), 0);
        assert_eq!(handed.len() + usize::from(scheduled.is_err()), 1);
        match scheduled {
            Ok(future) => assert_eq!(future.join(), Err(TaskError::Shutdown)),
            Err(e) => assert_eq!(e, ScheduleError::Shutdown),
        }
        drop(handed);
        drop(pool);
        assert_dropped_once(&drops);
    });
}

//! Shutdown: `shutdown`, `shutdown_now`, termination, dropping the pool, handles after the pool,
//! and the accounting identity under concurrent scheduling.
#![cfg(not(wheelpool_loom))]

use crate::common::{block_worker, wait_until, DropCounter, Latch, HOUR, LONG};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use wheelpool::{ScheduleError, ScheduledThreadPool, TaskError};

fn pool(threads: usize) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(threads)
        .build()
        .expect("build a pool")
}

#[test]
fn schedules_fail_after_shutdown_and_drop_their_closures() {
    let pool = pool(1);
    let handle = pool.handle();
    assert!(!pool.is_shutdown());
    pool.shutdown();
    assert!(pool.is_shutdown());
    let drops = DropCounter::new();
    let (t1, t2, t3, t4, t5) = (
        drops.token(),
        drops.token(),
        drops.token(),
        drops.token(),
        drops.token(),
    );
    assert_eq!(pool.execute(move || drop(t1)), Err(ScheduleError::Shutdown));
    assert_eq!(
        pool.schedule(move || drop(t2), Duration::ZERO).unwrap_err(),
        ScheduleError::Shutdown
    );
    assert_eq!(
        pool.schedule_at(move || drop(t3), std::time::Instant::now())
            .unwrap_err(),
        ScheduleError::Shutdown
    );
    assert_eq!(
        pool.schedule_at_fixed_rate(
            move || {
                let _keep = &t4;
            },
            Duration::ZERO,
            Duration::from_millis(1)
        )
        .unwrap_err(),
        ScheduleError::Shutdown
    );
    assert_eq!(
        handle.schedule(move || drop(t5), HOUR).unwrap_err(),
        ScheduleError::Shutdown
    );
    assert_eq!(
        drops.dropped(),
        5,
        "every refused closure was dropped at once"
    );
    assert!(ScheduleError::Shutdown.to_string().contains("shut down"));
    assert!(pool.await_termination(LONG));
}

#[test]
fn delayed_one_shots_still_run_after_shutdown() {
    let pool = pool(2);
    let futures: Vec<_> = (0..20u64)
        .map(|i| {
            pool.schedule(move || i, Duration::from_millis(10 + i * 2))
                .unwrap()
        })
        .collect();
    let due_now: Vec<_> = (0..20u64)
        .map(|i| pool.schedule(move || i + 100, Duration::ZERO).unwrap())
        .collect();
    pool.shutdown();
    pool.shutdown(); // idempotent
    for (i, f) in futures.into_iter().enumerate() {
        assert_eq!(f.join(), Ok(i as u64), "delayed task {i} still ran");
    }
    for (i, f) in due_now.into_iter().enumerate() {
        assert_eq!(f.join(), Ok(i as u64 + 100));
    }
    assert!(pool.await_termination(LONG));
    assert!(pool.is_terminated());
    let s = pool.stats();
    assert_eq!((s.completed, s.pending, s.running), (40, 0, 0), "{s:?}");
}

#[test]
fn await_termination_before_shutdown_and_while_work_remains() {
    let pool = pool(1);
    assert!(
        !pool.await_termination(Duration::from_millis(5)),
        "a live pool does not terminate"
    );
    assert!(!pool.is_terminated());
    let (release, blocked) = block_worker(&pool);
    pool.shutdown();
    assert!(
        !pool.await_termination(Duration::from_millis(5)),
        "a task is still running"
    );
    assert!(!pool.is_terminated());
    release.open();
    assert!(pool.await_termination(LONG));
    assert!(pool.is_terminated());
    assert_eq!(blocked.join(), Ok(true));
}

#[test]
fn a_delayed_task_keeps_a_shut_down_pool_alive_until_shutdown_now() {
    let pool = pool(1);
    let f = pool.schedule(|| (), HOUR).unwrap();
    pool.shutdown();
    assert!(
        !pool.await_termination(Duration::from_millis(10)),
        "an hour-away one-shot still waits to run"
    );
    let returned = pool.shutdown_now();
    assert_eq!(returned.len(), 1);
    assert!(pool.await_termination(LONG));
    assert_eq!(f.join(), Err(TaskError::Cancelled));
}

#[test]
fn an_idle_pool_terminates_on_either_shutdown() {
    let a = pool(2);
    a.shutdown();
    assert!(a.await_termination(LONG) && a.is_terminated());
    let b = pool(2);
    assert!(b.shutdown_now().is_empty());
    assert!(b.await_termination(LONG) && b.is_terminated());
    assert!(
        b.shutdown_now().is_empty(),
        "a second shutdown_now finds nothing"
    );
}

#[test]
fn shutdown_now_returns_exactly_the_tasks_not_started() {
    let pool = pool(1);
    let (release, blocked) = block_worker(&pool);
    let runs = Arc::new(AtomicUsize::new(0));
    let mut futures = Vec::new();
    for i in 0..10u64 {
        let runs = runs.clone();
        // Half are due (queued behind the blocked worker), half wait in the wheel.
        let delay = if i % 2 == 0 { Duration::ZERO } else { HOUR };
        futures.push(
            pool.schedule(move || runs.fetch_add(1, Ordering::SeqCst), delay)
                .unwrap(),
        );
    }
    let returned = pool.shutdown_now();
    assert!(pool.is_shutdown());
    assert_eq!(returned.len(), 10, "every not-started task is handed back");
    assert!(returned.iter().all(|t| !t.is_periodic()));
    assert!(format!("{:?}", returned[0]).contains("PendingTask"));
    for f in &futures {
        assert!(f.is_cancelled() && f.is_done());
    }
    assert_eq!(pool.execute(|| ()), Err(ScheduleError::Shutdown));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    for task in returned {
        task.run();
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        10,
        "PendingTask::run runs the closure on the caller"
    );
    for f in futures {
        assert_eq!(f.join(), Err(TaskError::Cancelled));
    }
    // The running task was not interrupted.
    release.open();
    assert_eq!(blocked.join(), Ok(true));
    assert!(pool.await_termination(LONG));
    let s = pool.stats();
    assert_eq!(
        (s.completed, s.cancelled, s.pending, s.running),
        (1, 10, 0, 0),
        "{s:?}"
    );
}

#[test]
fn dropping_the_pool_is_shutdown_now_plus_joining_the_threads() {
    let pool = pool(2);
    let handle = pool.handle();
    let drops = DropCounter::new();
    let waiting: Vec<_> = (0..100)
        .map(|_| {
            let t = drops.token();
            pool.schedule(move || drop(t), HOUR).unwrap()
        })
        .collect();
    // Each worker parks a thread-local guard that flags when its thread exits.
    let exited = Arc::new(AtomicUsize::new(0));
    assert!(mark_worker_exits(&pool, 2, &exited));
    let (release, blocked) = block_worker(&pool);

    let dropper = std::thread::spawn(move || drop(pool));
    // The drop has stopped the pool (shutdown_now) ...
    assert!(wait_until(LONG, || handle.execute(|| ())
        == Err(ScheduleError::Shutdown)));
    assert!(
        wait_until(LONG, || waiting.iter().all(|f| f.is_cancelled())),
        "not-started tasks are cancelled"
    );
    // ... but cannot return while a task still runs: it joins the threads.
    assert!(
        !dropper.is_finished(),
        "drop returned while a worker was still running a task"
    );
    release.open();
    dropper.join().unwrap();
    assert_eq!(
        exited.load(Ordering::SeqCst),
        2,
        "both worker threads exited before drop returned"
    );
    assert_eq!(
        drops.dropped(),
        100,
        "the returned closures were dropped with the pool"
    );
    assert_eq!(
        blocked.join(),
        Ok(true),
        "the running task finished normally"
    );
    for f in waiting {
        assert_eq!(f.join(), Err(TaskError::Cancelled));
    }
}

/// Runs one task on each of `threads` workers (at the same time) that leaves a thread-local guard
/// bumping `exited` when that worker thread exits.
fn mark_worker_exits(
    pool: &ScheduledThreadPool,
    threads: usize,
    exited: &Arc<AtomicUsize>,
) -> bool {
    struct ExitFlag(Arc<AtomicUsize>);
    impl Drop for ExitFlag {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    thread_local! {
        static GUARD: std::cell::RefCell<Option<ExitFlag>> = const { std::cell::RefCell::new(None) };
    }
    let arrived = Arc::new(AtomicUsize::new(0));
    let futures: Vec<_> = (0..threads)
        .map(|_| {
            let (arrived, exited) = (arrived.clone(), exited.clone());
            pool.schedule(
                move || {
                    GUARD.with(|g| *g.borrow_mut() = Some(ExitFlag(exited)));
                    arrived.fetch_add(1, Ordering::SeqCst);
                    wait_until(LONG, || arrived.load(Ordering::SeqCst) >= threads)
                },
                Duration::ZERO,
            )
            .unwrap()
        })
        .collect();
    futures
        .into_iter()
        .all(|mut f| f.join_timeout(LONG) == Some(Ok(true)))
}

#[test]
fn a_handle_outlives_its_pool_and_gets_shutdown() {
    let pool = pool(1);
    let handle = pool.handle();
    assert_eq!(handle.schedule(|| 1, Duration::ZERO).unwrap().join(), Ok(1));
    let clone = handle.clone();
    drop(pool);
    let drops = DropCounter::new();
    let t = drops.token();
    assert_eq!(
        handle.execute(move || drop(t)),
        Err(ScheduleError::Shutdown)
    );
    assert_eq!(drops.dropped(), 1);
    assert_eq!(
        clone.schedule(|| 1, Duration::ZERO).unwrap_err(),
        ScheduleError::Shutdown
    );
    assert_eq!(
        clone
            .schedule_at(|| 1, std::time::Instant::now())
            .unwrap_err(),
        ScheduleError::Shutdown
    );
    assert_eq!(
        clone
            .schedule_at_fixed_rate(|| (), Duration::ZERO, Duration::from_secs(1))
            .unwrap_err(),
        ScheduleError::Shutdown
    );
    assert_eq!(
        clone
            .schedule_with_fixed_delay(|| (), Duration::ZERO, Duration::from_secs(1))
            .unwrap_err(),
        ScheduleError::Shutdown
    );
    assert!(format!("{handle:?}").contains("Handle"));
}

#[test]
fn a_handle_does_not_keep_the_pool_alive() {
    let pool = pool(1);
    let handle = pool.handle();
    // A task holding a handle (like a follow-up scheduler) must not keep the threads running.
    let f = pool.schedule(move || drop(handle), HOUR).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(pool);
        tx.send(()).unwrap();
    });
    assert_eq!(rx.recv_timeout(LONG), Ok(()), "dropping the pool returned");
    assert!(f.is_cancelled());
}

#[test]
fn a_task_scheduling_after_shutdown_gets_shutdown() {
    let pool = pool(1);
    let handle = pool.handle();
    let (release, blocked) = block_worker(&pool);
    let f = pool
        .schedule(
            move || handle.schedule(|| (), Duration::ZERO).map(|_| ()),
            Duration::ZERO,
        )
        .unwrap();
    pool.shutdown();
    release.open();
    assert_eq!(blocked.join(), Ok(true));
    assert_eq!(f.join(), Ok(Err(ScheduleError::Shutdown)));
    assert!(pool.await_termination(LONG));
}

// ---- the accounting identity ---------------------------------------------------------------

thread_local! {
    /// Set on the test thread while it runs the tasks `shutdown_now` handed back.
    static RUNNING_RETURNED: Cell<bool> = const { Cell::new(false) };
}

/// What became of one task, recorded by whoever ended it.
#[derive(Default)]
struct Fate {
    ran_in_pool: AtomicU32,
    ran_returned: AtomicU32,
    cancelled_by_user: AtomicBool,
    rejected: AtomicBool,
    closure_dropped: AtomicU32,
    /// The delay it was scheduled with, in microseconds (for the failure message).
    delay_micros: AtomicU64,
}

struct Tracked {
    fate: Arc<Fate>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.fate.closure_dropped.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn every_task_ends_exactly_once_when_shutdown_now_races_schedulers() {
    for round in 0..3u64 {
        accounting_round(round);
    }
}

fn accounting_round(seed: u64) {
    const SCHEDULERS: usize = 4;
    let pool = Arc::new(pool(2));
    let go = Latch::new();
    let scheduled = Arc::new(AtomicUsize::new(0));
    // Schedulers that have 200 tasks in: shutdown_now waits until every one is under way.
    let warmed_up = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..SCHEDULERS)
        .map(|t| {
            let (pool, go, scheduled, warmed_up) = (
                pool.clone(),
                go.clone(),
                scheduled.clone(),
                warmed_up.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed * 100 + t as u64);
                let mut mine = Vec::new();
                let mut refused_in_a_row = 0;
                assert!(go.wait(LONG));
                loop {
                    let fate = Arc::new(Fate::default());
                    let tracked = Tracked { fate: fate.clone() };
                    let delay = match rng.gen_range(0..10) {
                        0..=3 => Duration::ZERO,
                        4..=7 => Duration::from_micros(rng.gen_range(0..3_000)),
                        _ => HOUR,
                    };
                    let id = mine.len();
                    fate.delay_micros
                        .store(delay.as_micros() as u64, Ordering::SeqCst);
                    let result = pool.schedule(
                        move || {
                            let fate = &tracked.fate;
                            if RUNNING_RETURNED.with(Cell::get) {
                                fate.ran_returned.fetch_add(1, Ordering::SeqCst);
                            } else {
                                fate.ran_in_pool.fetch_add(1, Ordering::SeqCst);
                            }
                            id
                        },
                        delay,
                    );
                    match result {
                        Ok(f) => {
                            // Cancel some of the far ones: they cannot be running, so a true
                            // cancel means the task never ran.
                            if delay == HOUR && rng.gen_bool(0.5) && f.cancel() {
                                fate.cancelled_by_user.store(true, Ordering::SeqCst);
                            }
                            mine.push((fate, Some(f)));
                            refused_in_a_row = 0;
                            if mine.len() == 200 {
                                warmed_up.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(e) => {
                            assert_eq!(e, ScheduleError::Shutdown);
                            fate.rejected.store(true, Ordering::SeqCst);
                            mine.push((fate, None));
                            // Keep going a little: later schedules must be refused too.
                            refused_in_a_row += 1;
                            if refused_in_a_row == 20 {
                                break;
                            }
                        }
                    }
                    scheduled.fetch_add(1, Ordering::SeqCst);
                }
                mine
            })
        })
        .collect();

    go.open();
    assert!(
        wait_until(LONG, || scheduled.load(Ordering::SeqCst) >= 3_000
            && warmed_up.load(Ordering::SeqCst) == SCHEDULERS),
        "schedulers made progress"
    );
    let returned = pool.shutdown_now();
    let returned_count = returned.len();
    RUNNING_RETURNED.with(|r| r.set(true));
    for task in returned {
        task.run();
    }
    RUNNING_RETURNED.with(|r| r.set(false));
    let per_thread: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let all: Vec<_> = per_thread.into_iter().flatten().collect();
    assert!(pool.await_termination(LONG), "the pool terminated");

    let (mut ran, mut user, mut back, mut rejected) = (0u64, 0u64, 0usize, 0usize);
    let mut problems = Vec::new();
    for (i, (fate, future)) in all.iter().enumerate() {
        let in_pool = fate.ran_in_pool.load(Ordering::SeqCst);
        let by_caller = fate.ran_returned.load(Ordering::SeqCst);
        let cancelled = fate.cancelled_by_user.load(Ordering::SeqCst);
        let refused = fate.rejected.load(Ordering::SeqCst);
        let ends = in_pool + by_caller + cancelled as u32 + refused as u32;
        let dropped = fate.closure_dropped.load(Ordering::SeqCst);
        if ends != 1 || dropped != 1 {
            problems.push(format!(
                "task {i} (delay {} us): ran in pool {in_pool}, ran by shutdown_now's caller {by_caller}, \
                 cancelled {cancelled}, rejected {refused}, closure dropped {dropped}, done {:?}",
                fate.delay_micros.load(Ordering::SeqCst),
                future.as_ref().map(|f| f.is_done())
            ));
        }
        ran += u64::from(in_pool);
        user += u64::from(cancelled);
        back += by_caller as usize;
        rejected += refused as usize;
        if let Some(f) = future {
            if !f.is_done() {
                problems.push(format!("task {i}: its future is not done after termination (ran in pool {in_pool}, returned {by_caller})"));
            } else if f.is_cancelled() != (in_pool == 0) {
                problems.push(format!(
                    "task {i}: ran in pool {in_pool} but is_cancelled() = {}",
                    f.is_cancelled()
                ));
            }
        }
    }
    eprintln!(
        "accounting round {seed}: {} tasks: ran {ran}, cancelled by user {user}, returned {back}, rejected {rejected}",
        all.len()
    );
    assert!(
        problems.is_empty(),
        "{} of {} tasks broke the identity:\n{}",
        problems.len(),
        all.len(),
        problems[..problems.len().min(20)].join("\n")
    );
    assert_eq!(
        back, returned_count,
        "every returned task was one of ours, run once"
    );
    assert!(
        rejected >= 20 * SCHEDULERS,
        "every scheduler saw the shutdown"
    );
    let s = pool.stats();
    assert_eq!((s.pending, s.running), (0, 0), "{s:?}");
    assert_eq!(s.completed, ran, "{s:?}");
    assert!(
        s.cancelled >= user + back as u64,
        "{s:?}: user {user}, returned {back}"
    );
    // Futures: a run gives the value, anything else Cancelled.
    for (fate, future) in all {
        if let Some(f) = future {
            let outcome = f.join();
            if fate.ran_in_pool.load(Ordering::SeqCst) == 1 {
                assert!(outcome.is_ok(), "{outcome:?}");
            } else {
                assert_eq!(outcome, Err(TaskError::Cancelled));
            }
        }
    }
}

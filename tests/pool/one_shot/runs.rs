//! One-shot tasks: values, deadlines (never early), edge-case delays, handles, worker-local
//! scheduling, builder errors, thread names and stats.
#![cfg(not(wheelpool_loom))]

use crate::common;
use crate::common::{block_worker, wait_until, DropCounter, HOUR, LONG};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use wheelpool::{ScheduleError, ScheduledFuture, ScheduledThreadPool, TaskError};

fn pool(threads: usize) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(threads)
        .build()
        .expect("build a pool")
}

#[test]
fn values_come_back_through_join() {
    let pool = pool(2);
    let int = pool.schedule(|| 6 * 7, Duration::from_millis(5)).unwrap();
    let text = pool
        .schedule(|| String::from("reply"), Duration::ZERO)
        .unwrap();
    let vec = pool
        .schedule(|| vec![1u8, 2, 3], Duration::from_millis(1))
        .unwrap();
    let unit = pool.schedule(|| (), Duration::from_millis(2)).unwrap();
    assert_eq!(int.join(), Ok(42));
    assert_eq!(text.join(), Ok("reply".to_owned()));
    assert_eq!(vec.join(), Ok(vec![1, 2, 3]));
    assert_eq!(unit.join(), Ok(()));
}

#[test]
fn never_early_with_many_random_delays() {
    let pool = pool(2);
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut tasks = Vec::new();
    for i in 0..2_000u32 {
        let delay = Duration::from_micros(rng.gen_range(0..=50_000));
        // The earliest the task may start: computed before the schedule call.
        let not_before = Instant::now() + delay;
        let f = if i % 2 == 0 {
            pool.schedule(Instant::now, delay).unwrap()
        } else {
            pool.schedule_at(Instant::now, not_before).unwrap()
        };
        tasks.push((not_before, delay, f));
    }
    let mut early = Vec::new();
    for (i, (not_before, delay, f)) in tasks.into_iter().enumerate() {
        let ran_at = f.join().expect("the task ran");
        if ran_at < not_before {
            early.push((i, delay, not_before - ran_at));
        }
    }
    assert!(
        early.is_empty(),
        "{} tasks ran early (index, delay, how early): {:?}",
        early.len(),
        &early[..early.len().min(10)]
    );
}

#[test]
fn zero_delay_and_execute_run() {
    let pool = pool(1);
    let start = Instant::now();
    let f = pool
        .schedule(move || start.elapsed(), Duration::ZERO)
        .unwrap();
    assert!(f.join().is_ok());
    let (tx, rx) = mpsc::channel();
    for i in 0..100 {
        let tx = tx.clone();
        pool.execute(move || tx.send(i).unwrap()).unwrap();
    }
    let mut got: Vec<i32> = (0..100)
        .map(|_| rx.recv_timeout(LONG).expect("every execute runs"))
        .collect();
    got.sort_unstable();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

#[test]
fn schedule_at_a_past_instant_runs_at_once() {
    let pool = pool(1);
    let past = Instant::now()
        .checked_sub(Duration::from_secs(1))
        .unwrap_or_else(Instant::now);
    let mut f = pool.schedule_at(|| "ran", past).unwrap();
    assert_eq!(f.delay(), Duration::ZERO, "a past deadline is due now");
    // Far earlier than any sensible deadline: it must not wait for the wheel to come round.
    assert_eq!(f.join_timeout(LONG), Some(Ok("ran")));

    // An instant from long before the pool existed is also just "due".
    let ancient = Instant::now()
        .checked_sub(Duration::from_secs(3600))
        .unwrap_or(past);
    assert_eq!(pool.schedule_at(|| 1, ancient).unwrap().join(), Ok(1));
}

#[test]
fn schedule_at_a_future_instant_is_not_early() {
    let pool = pool(1);
    let at = Instant::now() + Duration::from_millis(30);
    let f = pool.schedule_at(Instant::now, at).unwrap();
    assert!(f.delay() <= Duration::from_millis(30));
    assert!(f.join().unwrap() >= at);
}

#[test]
fn duration_max_delay_is_accepted_and_never_comes() {
    let pool = pool(1);
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let mut f = pool
        .schedule(move || r.fetch_add(1, Ordering::SeqCst), Duration::MAX)
        .unwrap();
    let century = Duration::from_secs(100 * 365 * 24 * 3600);
    assert!(
        f.delay() > century,
        "delay() = {:?} for Duration::MAX",
        f.delay()
    );
    assert_eq!(f.join_timeout(Duration::from_millis(20)), None);
    assert!(!f.is_done() && !f.is_cancelled());
    // Another far deadline given as an Instant.
    let far = Instant::now() + century;
    let g = pool.schedule_at(|| (), far).unwrap();
    assert!(g.delay() > century - Duration::from_secs(3600));
    // The pool still runs ordinary tasks around them.
    assert_eq!(
        pool.schedule(|| 5, Duration::from_millis(1))
            .unwrap()
            .join(),
        Ok(5)
    );
    assert!(f.cancel());
    assert!(g.cancel());
    assert_eq!(f.join(), Err(TaskError::Cancelled));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(pool.stats().pending, 0);
}

#[test]
fn delay_counts_down_and_is_zero_when_running_or_done() {
    let pool = pool(1);
    let far = pool.schedule(|| (), HOUR).unwrap();
    let d = far.delay();
    assert!(
        d <= HOUR && d > HOUR - Duration::from_secs(60),
        "delay() = {d:?}"
    );
    assert!(!far.is_done() && !far.is_cancelled());

    let (release, mut running) = block_worker(&pool);
    assert_eq!(
        running.delay(),
        Duration::ZERO,
        "a running task is not waiting"
    );
    assert!(!running.is_done() && !running.is_cancelled());
    assert_eq!(running.join_timeout(Duration::from_millis(1)), None);
    release.open();
    assert_eq!(running.join_timeout(LONG), Some(Ok(true)));
    assert!(running.is_done());
    assert_eq!(running.delay(), Duration::ZERO);
    assert!(far.cancel());
    assert_eq!(
        far.delay(),
        Duration::ZERO,
        "a cancelled task has no next run"
    );
}

#[test]
fn handle_schedules_a_follow_up_from_inside_a_task() {
    let pool = pool(2);
    let handle = pool.handle();
    let outer: ScheduledFuture<ScheduledFuture<&str>> = pool
        .schedule(
            move || {
                handle
                    .schedule(|| "follow-up", Duration::from_millis(5))
                    .expect("the pool is alive")
            },
            Duration::from_millis(1),
        )
        .unwrap();
    let inner = outer.join().expect("outer ran");
    assert_eq!(inner.join(), Ok("follow-up"));
}

#[test]
fn tasks_scheduled_from_a_worker_run() {
    // One worker: a zero-delay task scheduled from it goes to its own deque.
    let pool = pool(1);
    let handle = pool.handle();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    pool.execute(move || {
        for _ in 0..1_000 {
            let c = c.clone();
            handle
                .execute(move || {
                    c.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
        }
    })
    .unwrap();
    assert!(
        wait_until(LONG, || count.load(Ordering::SeqCst) == 1_000),
        "ran {} of 1000",
        count.load(Ordering::SeqCst)
    );
}

#[test]
fn a_local_task_is_stolen_while_its_worker_blocks() {
    // The outer task pushes the inner one onto its own worker's deque, then blocks on it: only
    // the other worker stealing it lets the outer one finish.
    let pool = pool(2);
    let handle = pool.handle();
    let outer = pool
        .schedule(
            move || {
                let mut inner = handle.schedule(|| 7, Duration::ZERO).unwrap();
                inner.join_timeout(LONG)
            },
            Duration::ZERO,
        )
        .unwrap();
    assert_eq!(
        outer.join(),
        Ok(Some(Ok(7))),
        "the sibling worker stole and ran the local task"
    );
}

#[test]
fn builder_refuses_bad_settings() {
    let zero_threads = ScheduledThreadPool::builder()
        .threads(0)
        .build()
        .unwrap_err();
    let zero_tick = ScheduledThreadPool::builder()
        .tick(Duration::ZERO)
        .build()
        .unwrap_err();
    let zero_max = ScheduledThreadPool::builder()
        .threads(1)
        .max_pending(0)
        .build()
        .unwrap_err();
    for err in [&zero_threads, &zero_tick, &zero_max] {
        assert!(err.is_invalid_config(), "{err}");
        assert!(!err.is_spawn_failure(), "{err}");
        assert!(std::error::Error::source(err).is_none());
    }
    assert!(
        zero_threads.to_string().contains("threads"),
        "{zero_threads}"
    );
    assert!(zero_tick.to_string().contains("tick"), "{zero_tick}");
    assert!(zero_max.to_string().contains("max_pending"), "{zero_max}");
    // The smallest valid settings work.
    let pool = ScheduledThreadPool::builder()
        .threads(1)
        .tick(Duration::from_nanos(1))
        .max_pending(1)
        .build()
        .unwrap();
    assert_eq!(
        pool.schedule(|| 1, Duration::from_micros(10))
            .unwrap()
            .join(),
        Ok(1)
    );
}

#[test]
fn worker_threads_carry_the_name_prefix() {
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .thread_name("x")
        .build()
        .unwrap();
    let names: Vec<String> = (0..20)
        .map(|i| {
            pool.schedule(
                || std::thread::current().name().map(str::to_owned),
                Duration::from_millis(i % 3),
            )
            .unwrap()
        })
        .map(|f| f.join().unwrap().expect("worker threads are named"))
        .collect();
    for name in &names {
        assert!(name.starts_with("x-"), "{name}");
        assert_ne!(name, "x-timer", "user code never runs on the timer thread");
    }
    let default = pool_default_name();
    assert!(default.starts_with("wheelpool-worker-"), "{default}");
}

fn pool_default_name() -> String {
    let pool = pool(1);
    pool.schedule(
        || std::thread::current().name().map(str::to_owned),
        Duration::ZERO,
    )
    .unwrap()
    .join()
    .unwrap()
    .unwrap()
}

#[test]
fn stats_count_each_outcome() {
    common::quiet_pool_panics();
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .thread_name(common::QUIET)
        .build()
        .unwrap();
    assert_eq!(pool.stats(), Default::default());
    for i in 0..5u64 {
        assert_eq!(
            pool.schedule(move || i, Duration::from_millis(i))
                .unwrap()
                .join(),
            Ok(i)
        );
    }
    let waiting: Vec<_> = (0..3)
        .map(|_| pool.schedule(|| (), HOUR).unwrap())
        .collect();
    let boom = pool
        .schedule(|| -> () { panic!("counted") }, Duration::ZERO)
        .unwrap();
    assert!(matches!(boom.join(), Err(TaskError::Panicked(_))));
    assert!(waiting[0].cancel() && waiting[1].cancel());

    let expect = |s: wheelpool::PoolStats| {
        s.completed == 5 && s.cancelled == 2 && s.panicked == 1 && s.pending == 1 && s.running == 0
    };
    assert!(
        wait_until(LONG, || expect(pool.stats())),
        "stats: {:?}",
        pool.stats()
    );
    drop(waiting);
    assert!(format!("{pool:?}").contains("ScheduledThreadPool"));
}

#[test]
fn a_refused_schedule_drops_its_closure() {
    let pool = pool(1);
    pool.shutdown();
    let drops = DropCounter::new();
    let token = drops.token();
    let err = pool
        .schedule(move || drop(token), Duration::ZERO)
        .unwrap_err();
    assert_eq!(err, ScheduleError::Shutdown);
    assert_eq!(
        drops.dropped(),
        1,
        "the refused closure was dropped, not kept"
    );
}

#[test]
fn a_thread_name_with_a_nul_byte_is_a_typed_build_error() {
    let err = ScheduledThreadPool::builder()
        .threads(1)
        .thread_name("bad\0name")
        .build()
        .unwrap_err();
    assert!(err.is_invalid_config());
    assert!(!err.is_spawn_failure());
    assert!(err.to_string().contains("NUL"));
}

//! Cancel: before, while and after a run; memory freed at once; from other threads; under races.
#![cfg(not(wheelpool_loom))]

use crate::common::{block_worker, wait_until, DropCounter, Latch, Token, HOUR, LONG};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wheelpool::{ScheduledThreadPool, TaskError};

fn pool(threads: usize) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(threads)
        .build()
        .expect("build a pool")
}

#[test]
fn cancel_before_the_run() {
    let pool = pool(1);
    // The only worker is held until the cancel has happened: a busy machine may stall this
    // thread past the 20 ms deadline, and then the task must still be waiting (due, queued),
    // not started, when the cancel comes.
    let (release, blocker) = block_worker(&pool);
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let f = pool
        .schedule(
            move || r.fetch_add(1, Ordering::SeqCst),
            Duration::from_millis(20),
        )
        .unwrap();
    assert!(!f.is_cancelled() && !f.is_done());
    assert!(f.cancel(), "the first cancel stops a waiting task");
    assert!(!f.cancel(), "a second cancel changes nothing");
    assert!(f.is_cancelled() && f.is_done());
    assert_eq!(f.delay(), Duration::ZERO);
    release.open();
    assert_eq!(blocker.join(), Ok(true));
    // A later task on the same worker runs after the cancelled deadline has passed.
    assert_eq!(
        pool.schedule(|| (), Duration::from_millis(40))
            .unwrap()
            .join(),
        Ok(())
    );
    assert_eq!(f.join(), Err(TaskError::Cancelled));
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a cancelled task never starts"
    );
}

#[test]
fn cancel_while_running_lets_the_run_finish_and_reports_cancelled() {
    let pool = pool(1);
    let started = Latch::new();
    let release = Latch::new();
    let finished = Arc::new(AtomicUsize::new(0));
    let result_drops = DropCounter::new();
    let (s, r, fin, drops) = (
        started.clone(),
        release.clone(),
        finished.clone(),
        result_drops.clone(),
    );
    let f = pool
        .schedule(
            move || {
                s.open();
                let released = r.wait(LONG);
                fin.fetch_add(1, Ordering::SeqCst);
                (released, drops.token())
            },
            Duration::ZERO,
        )
        .unwrap();
    assert!(started.wait(LONG), "the task started");
    assert!(
        !f.cancel(),
        "cancel returns true only if it stopped a run that had not started; this one had"
    );
    assert!(!f.cancel());
    assert!(
        f.is_cancelled(),
        "the running one-shot is marked: its result will be dropped"
    );
    assert!(!f.is_done(), "the run is still in progress");
    release.open();
    let outcome = f.join();
    assert!(
        matches!(outcome, Err(TaskError::Cancelled)),
        "join after cancel-while-running: {:?}",
        outcome.map(|v| v.0)
    );
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "the run went to its end"
    );
    // The worker drops the run's value before it completes the future.
    assert_eq!(
        result_drops.dropped(),
        1,
        "the run's value was dropped by the time join returned"
    );
    assert!(
        wait_until(LONG, || pool.stats().cancelled == 1
            && pool.stats().running == 0),
        "{:?}",
        pool.stats()
    );
    assert_eq!(
        pool.stats().completed,
        1,
        "the run itself returned normally"
    );
    assert_eq!(
        result_drops.dropped(),
        1,
        "the run's value was dropped exactly once"
    );
}

#[test]
fn cancel_after_the_run_changes_nothing() {
    let pool = pool(1);
    let mut f = pool.schedule(|| 9, Duration::ZERO).unwrap();
    let handle = f.cancel_handle();
    assert_eq!(f.join_timeout(LONG), Some(Ok(9)));
    assert!(!f.cancel());
    assert!(!handle.cancel());
    assert!(!f.is_cancelled() && !handle.is_cancelled());
    assert!(f.is_done());
    assert!(wait_until(LONG, || pool.stats().completed == 1));
    assert_eq!(pool.stats().cancelled, 0);
}

#[test]
fn cancel_frees_captured_memory_at_once() {
    let pool = pool(1);
    let captured = Arc::new(vec![0u8; 1 << 20]);
    let c = captured.clone();
    let f = pool.schedule(move || c.len(), HOUR).unwrap();
    assert_eq!(Arc::strong_count(&captured), 2);
    assert!(f.cancel());
    // Right after cancel returns: no polling, no waiting for the deadline an hour away.
    assert_eq!(
        Arc::strong_count(&captured),
        1,
        "the closure's capture was dropped by cancel"
    );
    drop(f);
}

#[test]
fn cancel_from_another_thread_through_a_handle() {
    let pool = pool(1);
    let drops = DropCounter::new();
    let token = drops.token();
    let f = pool.schedule(move || drop(token), HOUR).unwrap();
    let handle = f.cancel_handle();
    let again = handle.clone();
    let won = std::thread::spawn(move || handle.cancel()).join().unwrap();
    assert!(won);
    assert_eq!(
        drops.dropped(),
        1,
        "cancelled on another thread: the capture is gone already"
    );
    assert!(
        !std::thread::spawn(move || again.cancel()).join().unwrap(),
        "the clone sees it done"
    );
    assert!(f.is_cancelled());
    assert_eq!(f.join(), Err(TaskError::Cancelled));
}

#[test]
fn cancelling_ten_thousand_timers_frees_them_all_and_the_pool_goes_on() {
    let pool = pool(2);
    let drops = DropCounter::new();
    let futures: Vec<_> = (0..10_000u64)
        .map(|i| {
            let token = drops.token();
            pool.schedule(move || drop(token), HOUR + Duration::from_millis(i))
                .unwrap()
        })
        .collect();
    assert_eq!(pool.stats().pending, 10_000);
    assert!(futures.iter().all(|f| f.cancel()));
    assert_eq!(
        drops.dropped(),
        10_000,
        "every capture dropped by its cancel"
    );
    let s = pool.stats();
    assert_eq!((s.pending, s.cancelled), (0, 10_000), "{s:?}");
    assert_eq!(
        pool.schedule(|| "alive", Duration::from_millis(2))
            .unwrap()
            .join(),
        Ok("alive")
    );
    for f in futures {
        assert_eq!(f.join(), Err(TaskError::Cancelled));
    }
}

#[test]
fn cancel_racing_the_run_has_one_winner() {
    // Tasks come due while another thread cancels them. For each: a cancel that returned true
    // stopped a run that had not started (the closure never ran, the future says Cancelled);
    // one that returned false either lost (the value came through) or landed during the run
    // (the closure ran, its value was dropped, the future says Cancelled). The closure is
    // dropped exactly once either way.
    let pool = pool(2);
    const N: usize = 5_000;
    let drops = DropCounter::new();
    let ran: Arc<Vec<AtomicUsize>> = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect());
    let futures: Vec<_> = (0..N)
        .map(|i| {
            let token: Token = drops.token();
            let ran = ran.clone();
            let delay = Duration::from_micros((i % 5) as u64 * 500);
            pool.schedule(
                move || {
                    ran[i].fetch_add(1, Ordering::SeqCst);
                    drop(token);
                    i
                },
                delay,
            )
            .unwrap()
        })
        .collect();
    let handles: Vec<_> = futures.iter().map(|f| f.cancel_handle()).collect();
    let canceller =
        std::thread::spawn(move || handles.iter().map(|h| h.cancel()).collect::<Vec<bool>>());
    let won = canceller.join().unwrap();
    let (mut values, mut ended_cancelled) = (0, 0);
    for (i, (f, won)) in futures.into_iter().zip(won).enumerate() {
        let runs = || ran[i].load(Ordering::SeqCst);
        match f.join() {
            Ok(v) => {
                assert!(
                    !won,
                    "task {i}: cancel returned true but the value came through"
                );
                assert_eq!(v, i);
                assert_eq!(runs(), 1);
                values += 1;
            }
            Err(TaskError::Cancelled) => {
                if won {
                    assert_eq!(runs(), 0, "task {i}: ran after a cancel that returned true");
                } else {
                    assert_eq!(
                        runs(),
                        1,
                        "task {i}: Cancelled without a true cancel or a run"
                    );
                }
                ended_cancelled += 1;
            }
            Err(e) => panic!("task {i}: {e}"),
        }
    }
    assert_eq!(drops.dropped(), N, "each closure dropped exactly once");
    let total_runs: usize = (0..N).map(|i| ran[i].load(Ordering::SeqCst)).sum();
    assert!(wait_until(LONG, || pool.stats().pending == 0
        && pool.stats().running == 0));
    assert_eq!(pool.stats().cancelled, ended_cancelled as u64);
    assert_eq!(
        pool.stats().completed,
        total_runs as u64,
        "every run returned normally"
    );
    assert!(values <= total_runs);
}

#[test]
fn cancel_from_many_threads_has_exactly_one_winner() {
    let pool = pool(1);
    for _ in 0..200 {
        let f = pool.schedule(|| (), HOUR).unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let h = f.cancel_handle();
                let b = barrier.clone();
                std::thread::spawn(move || {
                    b.wait();
                    h.cancel()
                })
            })
            .collect();
        let winners = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|&w| w)
            .count();
        assert_eq!(winners, 1);
        assert_eq!(f.join(), Err(TaskError::Cancelled));
    }
    assert_eq!(pool.stats().cancelled, 200);
}

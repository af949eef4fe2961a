//! Panics: caught per run, reported through the future and the handler, never fatal to a worker.
#![cfg(not(wheelpool_loom))]

mod common;

use common::{all_workers_alive, quiet_pool_panics, wait_until, LONG, QUIET};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wheelpool::{ScheduledThreadPool, TaskError};

fn counting_pool(threads: usize, count: Arc<AtomicUsize>) -> ScheduledThreadPool {
    quiet_pool_panics();
    ScheduledThreadPool::builder()
        .threads(threads)
        .thread_name(QUIET)
        .panic_handler(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap()
}

#[test]
fn join_reports_the_panic_message() {
    let pool = common::quiet_pool(1);
    let literal = pool
        .schedule(|| -> u8 { panic!("literal message") }, Duration::ZERO)
        .unwrap();
    let formatted = pool
        .schedule(
            || -> u8 { panic!("formatted {}", 42) },
            Duration::from_millis(1),
        )
        .unwrap();
    let other = pool
        .schedule(|| -> u8 { std::panic::panic_any(17u32) }, Duration::ZERO)
        .unwrap();
    assert_eq!(
        literal.join(),
        Err(TaskError::Panicked("literal message".into()))
    );
    assert_eq!(
        formatted.join(),
        Err(TaskError::Panicked("formatted 42".into()))
    );
    match other.join() {
        Err(TaskError::Panicked(msg)) => {
            assert!(!msg.is_empty(), "a placeholder for a non-string payload")
        }
        other => panic!("expected Panicked, got {other:?}"),
    }
    let err = TaskError::Panicked("literal message".into());
    assert!(err.to_string().contains("literal message"), "{err}");
}

#[test]
fn the_handler_sees_the_payload() {
    quiet_pool_panics();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let pool = ScheduledThreadPool::builder()
        .threads(1)
        .thread_name(QUIET)
        .panic_handler(move |payload| {
            let text = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            s.lock().unwrap().push(text);
        })
        .build()
        .unwrap();
    let f = pool
        .schedule(|| -> () { panic!("to the handler") }, Duration::ZERO)
        .unwrap();
    assert!(matches!(f.join(), Err(TaskError::Panicked(_))));
    assert!(wait_until(LONG, || seen.lock().unwrap().len() == 1));
    assert_eq!(seen.lock().unwrap()[0], "to the handler");
}

#[test]
fn an_execute_panic_goes_to_the_handler_and_the_stats() {
    let count = Arc::new(AtomicUsize::new(0));
    let pool = counting_pool(1, count.clone());
    pool.execute(|| panic!("nobody joins this")).unwrap();
    assert!(wait_until(LONG, || count.load(Ordering::SeqCst) == 1));
    assert!(wait_until(LONG, || pool.stats().panicked == 1
        && pool.stats().pending == 0));
    assert_eq!(pool.stats().completed, 0);
    assert_eq!(pool.schedule(|| 1, Duration::ZERO).unwrap().join(), Ok(1));
}

#[test]
fn ten_thousand_panics_interleaved_leave_the_pool_working() {
    const N: usize = 10_000;
    let count = Arc::new(AtomicUsize::new(0));
    let pool = counting_pool(2, count.clone());
    let futures: Vec<_> = (0..2 * N)
        .map(|i| {
            let delay = Duration::from_micros((i % 7) as u64 * 300);
            pool.schedule(
                move || {
                    if i % 2 == 1 {
                        panic!("task {i}");
                    }
                    i
                },
                delay,
            )
            .unwrap()
        })
        .collect();
    for (i, f) in futures.into_iter().enumerate() {
        if i % 2 == 1 {
            assert_eq!(f.join(), Err(TaskError::Panicked(format!("task {i}"))));
        } else {
            assert_eq!(f.join(), Ok(i));
        }
    }
    assert_eq!(
        count.load(Ordering::SeqCst),
        N,
        "the handler saw every panic, once"
    );
    assert!(
        wait_until(LONG, || {
            let s = pool.stats();
            s.panicked == N as u64 && s.completed == N as u64 && s.pending == 0 && s.running == 0
        }),
        "{:?}",
        pool.stats()
    );
    assert!(
        all_workers_alive(&pool, 2),
        "both workers survived the panics"
    );
    let after: Vec<_> = (0..100)
        .map(|i| {
            pool.schedule(move || i, Duration::from_millis(i % 3))
                .unwrap()
        })
        .collect();
    for (i, f) in after.into_iter().enumerate() {
        assert_eq!(f.join(), Ok(i as u64));
    }
    assert_eq!(count.load(Ordering::SeqCst), N);
}

#[test]
fn a_panicking_panic_handler_does_not_kill_workers() {
    quiet_pool_panics();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .thread_name(QUIET)
        .panic_handler(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            panic!("the handler itself panics");
        })
        .build()
        .unwrap();
    let futures: Vec<_> = (0..200)
        .map(|i| {
            pool.schedule(
                move || -> () { panic!("task {i}") },
                Duration::from_micros(i % 4 * 250),
            )
            .unwrap()
        })
        .collect();
    for (i, f) in futures.into_iter().enumerate() {
        assert_eq!(f.join(), Err(TaskError::Panicked(format!("task {i}"))));
    }
    for i in 0..50 {
        pool.execute(move || panic!("execute {i}")).unwrap();
    }
    assert!(
        wait_until(LONG, || calls.load(Ordering::SeqCst) == 250),
        "handler calls: {}",
        calls.load(Ordering::SeqCst)
    );
    assert!(
        all_workers_alive(&pool, 2),
        "both workers survived the handler's panics"
    );
    assert!(wait_until(LONG, || pool.stats().panicked == 250));
}

#[test]
fn a_payload_that_panics_on_drop_does_not_kill_workers() {
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("payload dropped");
            }
        }
    }
    let count = Arc::new(AtomicUsize::new(0));
    let pool = counting_pool(1, count.clone());
    let mut f = pool
        .schedule(|| -> () { std::panic::panic_any(Bomb) }, Duration::ZERO)
        .unwrap();
    // The message is a placeholder; what matters is the worker survives dropping the payload.
    let outcome = f.join_timeout(LONG);
    assert!(
        matches!(outcome, Some(Err(TaskError::Panicked(_)))),
        "{outcome:?}"
    );
    assert!(wait_until(LONG, || count.load(Ordering::SeqCst) == 1));
    assert!(all_workers_alive(&pool, 1));
}

#[test]
fn a_payload_that_panics_on_drop_without_a_handler_does_not_kill_workers() {
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("payload dropped");
            }
        }
    }
    let pool = common::quiet_pool(1);
    let mut f = pool
        .schedule(|| -> () { std::panic::panic_any(Bomb) }, Duration::ZERO)
        .unwrap();
    // 10 s: far more than a healthy run needs, and a broken one fails without holding up the suite.
    let outcome = f.join_timeout(Duration::from_secs(10));
    assert!(
        matches!(outcome, Some(Err(TaskError::Panicked(_)))),
        "{outcome:?}"
    );
    assert!(
        all_workers_alive(&pool, 1),
        "the only worker survived dropping the payload"
    );
}

#[test]
fn panics_without_a_handler_are_still_caught() {
    let pool = common::quiet_pool(2);
    let futures: Vec<_> = (0..500)
        .map(|i| {
            pool.schedule(move || -> () { panic!("p{i}") }, Duration::ZERO)
                .unwrap()
        })
        .collect();
    for f in futures {
        assert!(matches!(f.join(), Err(TaskError::Panicked(_))));
    }
    assert!(all_workers_alive(&pool, 2));
    assert!(wait_until(LONG, || pool.stats().panicked == 500));
}

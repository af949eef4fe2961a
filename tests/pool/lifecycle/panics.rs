//! Panics: caught per run, reported through the future and the handler, never fatal to a worker.
#![cfg(not(wheelpool_loom))]

use crate::common;
use crate::common::{all_workers_alive, quiet_pool_panics, wait_until, LONG, QUIET};
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

/// A panic payload whose own `Drop` panics: whoever catches the waker's panic below must drop
/// this inside `catch_unwind` too.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("the waker's panic payload panicked on drop");
        }
    }
}

/// An executor's waker that panics with a [`PanicsOnDrop`] payload; counts its wakes.
#[derive(Default)]
struct BombWaker(AtomicUsize);

impl std::task::Wake for BombWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        std::panic::panic_any(PanicsOnDrop);
    }
}

/// Polls `f` once with a fresh [`BombWaker`], which the task then keeps as its waiter.
fn arm_bomb<T: Send + 'static>(f: &mut wheelpool::ScheduledFuture<T>) -> Arc<BombWaker> {
    let bomb = Arc::new(BombWaker::default());
    let waker = std::task::Waker::from(bomb.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(std::pin::Pin::new(f).poll(&mut cx).is_pending());
    bomb
}

/// Runs `f` on a thread named `QUIET` (the panic hook stays silent for the panics it provokes)
/// and returns its value; a panic that escapes `f` fails the test.
fn quietly<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    quiet_pool_panics();
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name(format!("{QUIET}-caller"))
            .spawn_scoped(s, f)
            .unwrap()
            .join()
            .expect("a waker's panic unwound out of the pool's call")
    })
}

use std::future::Future as _;

#[test]
fn a_waker_whose_panic_payload_panics_on_drop_does_not_kill_the_completing_worker() {
    let pool = common::quiet_pool(2);
    let release = common::Latch::new();
    let r = release.clone();
    let mut f = pool.schedule(move || r.wait(LONG), Duration::ZERO).unwrap();
    let bomb = arm_bomb(&mut f);
    release.open(); // the run returns on a worker, which completes the future and wakes us
    assert!(wait_until(LONG, || bomb.0.load(Ordering::SeqCst) == 1));
    assert_eq!(f.join_timeout(LONG), Some(Ok(true)));
    assert!(
        all_workers_alive(&pool, 2),
        "both workers run tasks at once after the waker's panic"
    );
    assert_eq!(pool.stats().completed, 3);
}

#[test]
fn shutdown_now_hands_back_every_task_whose_waker_panics() {
    let pool = common::quiet_pool(2);
    let drops = common::DropCounter::new();
    let ran = Arc::new(AtomicUsize::new(0));
    let mut bombs = Vec::new();
    let mut futures = Vec::new();
    for _ in 0..51 {
        let (token, ran) = (drops.token(), ran.clone());
        let mut f = pool
            .schedule(
                move || {
                    let _token = token;
                    ran.fetch_add(1, Ordering::SeqCst);
                },
                common::HOUR,
            )
            .unwrap();
        bombs.push(arm_bomb(&mut f));
        futures.push(f);
    }
    let pending = quietly(|| pool.shutdown_now());
    assert_eq!(pending.len(), 51, "every waiting task is handed back");
    assert_eq!(
        drops.dropped(),
        0,
        "their closures are handed back, not dropped"
    );
    assert!(bombs.iter().all(|b| b.0.load(Ordering::SeqCst) == 1));
    for task in pending {
        task.run();
    }
    assert_eq!(ran.load(Ordering::SeqCst), 51);
    for f in &mut futures {
        assert_eq!(f.join_timeout(LONG), Some(Err(TaskError::Cancelled)));
    }
    assert_eq!(pool.stats().cancelled, 51);
    assert!(pool.await_termination(LONG));
}

#[test]
fn a_graceful_shutdown_ends_a_periodic_task_whose_waker_panics() {
    let pool = common::quiet_pool(2);
    let hour = common::HOUR;
    let mut f = pool.schedule_at_fixed_rate(|| (), hour, hour).unwrap();
    let bomb = arm_bomb(&mut f);
    quietly(|| pool.shutdown());
    assert!(
        pool.await_termination(LONG),
        "the pool terminates after the stopped task's waker panicked"
    );
    assert_eq!(bomb.0.load(Ordering::SeqCst), 1);
    assert_eq!(f.join_timeout(LONG), Some(Err(TaskError::Shutdown)));
    assert_eq!(pool.stats().cancelled, 1);
}

#[test]
fn cancel_keeps_its_bookkeeping_when_the_waker_panics() {
    let pool = common::quiet_pool(2);
    let drops = common::DropCounter::new();
    let token = drops.token();
    let mut f = pool.schedule(move || drop(token), common::HOUR).unwrap();
    let bomb = arm_bomb(&mut f);
    let cancel = f.cancel_handle();
    assert!(quietly(move || cancel.cancel()), "the cancel stopped it");
    assert_eq!(bomb.0.load(Ordering::SeqCst), 1);
    assert_eq!(drops.dropped(), 1, "the closure is freed at once");
    assert!(f.is_cancelled());
    let stats = pool.stats();
    assert_eq!((stats.cancelled, stats.pending), (1, 0), "{stats:?}");
    assert_eq!(f.join_timeout(LONG), Some(Err(TaskError::Cancelled)));
    pool.shutdown();
    assert!(pool.await_termination(LONG), "nothing is left counted in");
}

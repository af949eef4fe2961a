//! Dropping the pool contains a panic in a pending task's captured value's `Drop`, as `cancel`
//! does, and still joins the pool's threads, also when the pool is dropped while its thread is
//! already unwinding from another panic (where an escaping panic would abort the process).

use crate::common::{wait_until, DropCounter, HOUR, LONG};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use wheelpool::ScheduledThreadPool;

/// A captured value whose `Drop` panics.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("quiet: a capture's Drop panicked");
    }
}

/// Keeps the expected panics of these tests (from `PanicsOnDrop` and the outer panic) off the
/// output; any other panic, including a failing assertion, prints as usual.
fn quiet_expected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let quiet = info
                .payload()
                .downcast_ref::<&str>()
                .is_some_and(|m| m.starts_with("quiet:"));
            if !quiet {
                previous(info);
            }
        }));
    });
}

/// A pool with pending tasks whose captures panic in `Drop` (and one well-behaved capture per
/// task, counted), plus a way to see its worker threads exit.
fn loaded_pool(threads: usize) -> (ScheduledThreadPool, DropCounter, Arc<AtomicUsize>) {
    quiet_expected_panics();
    let pool = ScheduledThreadPool::builder()
        .threads(threads)
        .build()
        .unwrap();
    let exited = Arc::new(AtomicUsize::new(0));
    mark_worker_exits(&pool, threads, &exited);
    let drops = DropCounter::new();
    for _ in 0..10 {
        // Field order: the token drops even though the other capture panics first.
        let (token, bomb) = (drops.token(), PanicsOnDrop);
        let pending = pool
            .schedule(
                move || {
                    let _ = (&bomb, &token);
                },
                HOUR,
            )
            .unwrap();
        drop(pending); // dropping a future does not cancel its task
    }
    (pool, drops, exited)
}

#[test]
fn dropping_the_pool_contains_a_panicking_capture_and_joins_the_threads() {
    let (pool, drops, exited) = loaded_pool(2);
    let handle = pool.handle();
    drop(pool); // before the fix: the capture's panic escaped here
    assert_eq!(exited.load(Ordering::SeqCst), 2, "both workers were joined");
    assert_eq!(drops.dropped(), 10, "every pending closure was dropped");
    assert!(handle.execute(|| ()).is_err());
}

#[test]
fn dropping_the_pool_while_unwinding_does_not_abort() {
    let (pool, drops, exited) = loaded_pool(1);
    // Before the fix the capture's panic escaped a Drop run by the unwinder: abort.
    let outcome = catch_unwind(AssertUnwindSafe(move || {
        let _pool = pool;
        panic!("quiet: the outer panic");
    }));
    let payload = outcome.unwrap_err();
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"quiet: the outer panic")
    );
    assert_eq!(exited.load(Ordering::SeqCst), 1, "the worker was joined");
    assert_eq!(drops.dropped(), 10);
}

/// Leaves a thread-local guard on each of `threads` workers (all at once) that bumps `exited`
/// when that worker thread exits.
fn mark_worker_exits(pool: &ScheduledThreadPool, threads: usize, exited: &Arc<AtomicUsize>) {
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
                std::time::Duration::ZERO,
            )
            .unwrap()
        })
        .collect();
    for mut f in futures {
        assert_eq!(
            f.join_timeout(LONG),
            Some(Ok(true)),
            "a worker took its guard"
        );
    }
}

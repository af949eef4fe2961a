//! `ScheduledFuture`: `.await`, `join_timeout`, wake-ups on completion and on cancel, detaching.
#![cfg(not(wheelpool_loom))]

use crate::common;
use crate::common::{Latch, HOUR, LONG};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use wheelpool::{CancelHandle, ScheduledFuture, ScheduledThreadPool, TaskError};

fn pool(threads: usize) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(threads)
        .build()
        .expect("build a pool")
}

/// Awaits `f`, opening `polled` after the first poll that returned `Pending` (so a test knows
/// the waker is registered before it completes or cancels the task).
async fn await_signalling<T: Send + 'static>(
    mut f: ScheduledFuture<T>,
    polled: Latch,
) -> Result<T, TaskError> {
    poll_fn(|cx| {
        let r = Pin::new(&mut f).poll(cx);
        if r.is_pending() {
            polled.open();
        }
        r
    })
    .await
}

#[test]
fn futures_are_send_sync_unpin_and_handles_clone() {
    fn check<X: Send + Sync + Unpin>() {}
    fn cloneable<X: Clone + Send + Sync>() {}
    check::<ScheduledFuture<u32>>();
    check::<ScheduledFuture<String>>();
    cloneable::<CancelHandle>();
}

#[test]
fn values_come_back_through_await() {
    let pool = pool(2);
    let a = pool.schedule(|| 40, Duration::from_millis(10)).unwrap();
    let b = pool.schedule(|| 2, Duration::ZERO).unwrap();
    let sum = pollster::block_on(async { a.await.unwrap() + b.await.unwrap() });
    assert_eq!(sum, 42);
}

#[test]
fn awaiting_many_futures_in_one_task() {
    let pool = pool(2);
    let futures: Vec<_> = (0..1_000u64)
        .map(|i| {
            pool.schedule(move || i * 2, Duration::from_millis(i % 20))
                .unwrap()
        })
        .collect();
    let total = pollster::block_on(async {
        let mut total = 0;
        for f in futures {
            total += f.await.unwrap();
        }
        total
    });
    assert_eq!(total, (0..1_000u64).map(|i| i * 2).sum::<u64>());
}

#[test]
fn completion_wakes_a_pending_await() {
    let pool = pool(1);
    let release = Latch::new();
    let r = release.clone();
    let f = pool
        .schedule(move || r.wait(LONG).then_some("woken"), Duration::ZERO)
        .unwrap();
    let polled = Latch::new();
    let p = polled.clone();
    let opener = std::thread::spawn(move || {
        assert!(p.wait(LONG), "the future was polled");
        release.open();
    });
    let got = pollster::block_on(await_signalling(f, polled));
    opener.join().unwrap();
    assert_eq!(got, Ok(Some("woken")));
}

#[test]
fn cancel_wakes_a_pending_await() {
    let pool = pool(1);
    let f = pool.schedule(|| 1, HOUR).unwrap();
    let handle = f.cancel_handle();
    let polled = Latch::new();
    let p = polled.clone();
    let canceller = std::thread::spawn(move || {
        assert!(p.wait(LONG), "the future was polled");
        handle.cancel()
    });
    let got = pollster::block_on(await_signalling(f, polled));
    assert!(
        canceller.join().unwrap(),
        "the cancel stopped a waiting task"
    );
    assert_eq!(got, Err(TaskError::Cancelled));
}

#[test]
fn a_panic_comes_back_through_await() {
    common::quiet_pool_panics();
    let pool = ScheduledThreadPool::builder()
        .threads(1)
        .thread_name(common::QUIET)
        .build()
        .unwrap();
    let f = pool
        .schedule(
            || -> u8 { panic!("awaited boom") },
            Duration::from_millis(1),
        )
        .unwrap();
    assert_eq!(
        pollster::block_on(f),
        Err(TaskError::Panicked("awaited boom".into()))
    );
}

#[test]
fn join_timeout_gives_none_then_some() {
    let pool = pool(1);
    let release = Latch::new();
    let r = release.clone();
    let mut f = pool.schedule(move || r.wait(LONG), Duration::ZERO).unwrap();
    assert_eq!(
        f.join_timeout(Duration::from_millis(10)),
        None,
        "blocked on the latch: not done"
    );
    assert_eq!(
        f.join_timeout(Duration::ZERO),
        None,
        "a zero timeout only looks"
    );
    assert!(!f.is_done());
    release.open();
    assert_eq!(f.join_timeout(LONG), Some(Ok(true)));
    assert!(f.is_done());
}

#[test]
fn join_timeout_then_await_then_join_on_other_futures() {
    let pool = pool(1);
    let release = Latch::new();
    let r = release.clone();
    let mut f = pool
        .schedule(move || r.wait(LONG).then_some(3), Duration::ZERO)
        .unwrap();
    assert_eq!(f.join_timeout(Duration::from_millis(5)), None);
    release.open();
    // After a timed-out join the future is still whole: await it to the end.
    assert_eq!(pollster::block_on(f), Ok(Some(3)));
}

#[test]
fn join_timeout_on_a_far_task_then_cancel() {
    let pool = pool(1);
    let mut f = pool.schedule(|| 7, HOUR).unwrap();
    assert_eq!(f.join_timeout(Duration::from_millis(5)), None);
    assert!(f.cancel());
    assert_eq!(
        f.join_timeout(Duration::ZERO),
        Some(Err(TaskError::Cancelled))
    );
}

#[test]
fn dropping_the_future_detaches_the_task() {
    let pool = pool(1);
    let (tx, rx) = mpsc::channel();
    let f = pool
        .schedule(
            move || tx.send("still ran").unwrap(),
            Duration::from_millis(5),
        )
        .unwrap();
    drop(f);
    assert_eq!(rx.recv_timeout(LONG), Ok("still ran"));
    // A detached task still counts as completed once it ran.
    assert!(common::wait_until(LONG, || pool.stats().completed == 1
        && pool.stats().pending == 0));
}

#[test]
fn dropping_the_future_keeps_a_cancel_handle_working() {
    let pool = pool(1);
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let f = pool
        .schedule(move || r.fetch_add(1, Ordering::SeqCst), HOUR)
        .unwrap();
    let handle = f.cancel_handle();
    drop(f);
    assert!(!handle.is_cancelled());
    assert!(handle.cancel());
    assert!(handle.is_cancelled());
    assert_eq!(pool.stats().pending, 0);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[test]
fn debug_output_names_the_types() {
    let pool = pool(1);
    let f = pool.schedule(|| (), HOUR).unwrap();
    assert!(format!("{f:?}").contains("ScheduledFuture"));
    assert!(format!("{:?}", f.cancel_handle()).contains("CancelHandle"));
    assert!(f.cancel());
}

/// An executor whose waker panics must not take down the worker that completes the task.
#[test]
fn a_panicking_waker_does_not_kill_the_worker() {
    use std::task::{Context, Poll, Wake, Waker};
    struct Exploding;
    impl Wake for Exploding {
        fn wake(self: Arc<Self>) {
            panic!("waker exploded (expected by the test)");
        }
    }
    let pool = common::quiet_pool(1);
    let gate = Latch::new();
    let g = gate.clone();
    let mut f = pool.schedule(move || g.wait(LONG), Duration::ZERO).unwrap();
    let waker = Waker::from(Arc::new(Exploding));
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
    gate.open(); // the one worker completes the task and calls the exploding waker
                 // The same (only) worker must still run the next task.
    let mut next = pool.schedule(|| 7, Duration::ZERO).unwrap();
    assert_eq!(next.join_timeout(LONG), Some(Ok(7)));
    assert!(matches!(
        Pin::new(&mut f).poll(&mut cx),
        Poll::Ready(Ok(true))
    ));
}

// ---- habits: detach, abort-on-drop, a result taken twice -----------------------------------

#[test]
fn detach_lets_the_task_run_and_a_handle_still_cancels() {
    let pool = pool(2);
    let (tx, rx) = mpsc::channel();
    pool.schedule(move || tx.send("ran").unwrap(), Duration::from_millis(1))
        .unwrap()
        .detach();
    assert_eq!(rx.recv_timeout(LONG), Ok("ran"));

    let f = pool.schedule(|| (), HOUR).unwrap();
    let handle = f.cancel_handle();
    f.detach();
    assert!(!handle.is_cancelled(), "detaching cancels nothing");
    assert!(handle.cancel());
}

#[test]
fn a_dropped_future_detaches_under_tokio_timeout() {
    let pool = pool(2);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let latch = Latch::new();
    let gate = latch.clone();
    let (tx, rx) = mpsc::channel();
    let f = pool
        .schedule(
            move || {
                assert!(gate.wait(LONG), "the test opens the gate");
                tx.send("still ran").unwrap();
            },
            Duration::ZERO,
        )
        .unwrap();
    let handle = f.cancel_handle();
    let timed_out = rt.block_on(async { tokio::time::timeout(Duration::from_millis(1), f).await });
    assert!(timed_out.is_err(), "the task waits for the gate");
    assert!(
        !handle.is_cancelled(),
        "the timeout dropped the future: detached"
    );
    latch.open();
    assert_eq!(rx.recv_timeout(LONG), Ok("still ran"));
}

#[test]
fn abort_on_drop_cancels_under_tokio_timeout() {
    let pool = pool(2);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let f = pool
        .schedule(move || r.fetch_add(1, Ordering::SeqCst), HOUR)
        .unwrap();
    let handle = f.cancel_handle();
    let guarded = f.abort_on_drop();
    assert!(format!("{guarded:?}").contains("AbortOnDrop"));
    let timed_out =
        rt.block_on(async { tokio::time::timeout(Duration::from_millis(1), guarded).await });
    assert!(timed_out.is_err());
    assert!(
        handle.is_cancelled(),
        "dropping the guard cancelled the task"
    );
    assert!(!handle.cancel(), "already cancelled");
    assert_eq!(pool.stats().cancelled, 1);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[test]
fn abort_on_drop_gives_the_result_and_then_cancels_nothing() {
    let pool = pool(2);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let f = pool.schedule(|| 42, Duration::from_millis(1)).unwrap();
    let handle = f.cancel_handle();
    let out = rt.block_on(async move {
        let guarded = f.abort_on_drop();
        assert!(
            guarded.delay() <= Duration::from_millis(1),
            "derefs to the future"
        );
        tokio::time::timeout(LONG, guarded).await
    });
    assert_eq!(out.expect("finished in time"), Ok(42));
    assert!(!handle.is_cancelled(), "a finished task is left alone");
    assert_eq!(pool.stats().cancelled, 0);

    // Periodic: the guard stops every later run.
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let beat = pool
        .schedule_at_fixed_rate(
            move || {
                r.fetch_add(1, Ordering::SeqCst);
            },
            Duration::ZERO,
            Duration::from_millis(1),
        )
        .unwrap()
        .abort_on_drop();
    let handle = beat.cancel_handle();
    assert!(common::wait_until(LONG, || runs.load(Ordering::SeqCst) >= 2));
    drop(beat);
    assert!(handle.is_cancelled());
    let at_drop = runs.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(20));
    // Runs never overlap: at most the one in progress at the drop finishes after it.
    assert!(
        runs.load(Ordering::SeqCst) <= at_drop + 1,
        "no run starts after the drop"
    );
}

#[test]
fn join_timeout_after_the_result_was_taken_is_an_error_not_a_panic() {
    let pool = pool(1);
    let mut f = pool.schedule(|| 7, Duration::ZERO).unwrap();
    assert_eq!(f.join_timeout(LONG), Some(Ok(7)));
    assert_eq!(f.join_timeout(LONG), Some(Err(TaskError::Taken)));
    assert_eq!(f.join_timeout(Duration::ZERO), Some(Err(TaskError::Taken)));
    assert_eq!(f.join(), Err(TaskError::Taken));

    // After `.await` took it, too; and a poll after Ready.
    let mut f = pool.schedule(|| 8, Duration::ZERO).unwrap();
    assert_eq!(pollster::block_on(&mut f), Ok(8));
    assert_eq!(pollster::block_on(&mut f), Err(TaskError::Taken));
    assert_eq!(f.join_timeout(LONG), Some(Err(TaskError::Taken)));

    // An error result is taken once as well.
    let mut f = pool.schedule(|| (), HOUR).unwrap();
    f.cancel();
    assert_eq!(f.join_timeout(LONG), Some(Err(TaskError::Cancelled)));
    assert_eq!(f.join_timeout(LONG), Some(Err(TaskError::Taken)));
    assert_eq!(TaskError::Taken.to_string(), "task result already taken");
}

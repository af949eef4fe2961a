//! Graceful shutdown vs shutdown_now, with the tasks that never ran handed back.
//!
//! Run: `cargo run --example shutdown`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wheelpool::{ScheduledThreadPool, TaskError};

fn main() {
    // 1. Graceful: delayed one-shots still run; periodic tasks stop after their current run.
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .build()
        .expect("pool");
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let late = pool
        .schedule(
            move || r.fetch_add(1, Ordering::SeqCst),
            Duration::from_millis(50),
        )
        .expect("schedule");
    let beats = Arc::new(AtomicUsize::new(0));
    let b = beats.clone();
    let beat = pool
        .schedule_at_fixed_rate(
            move || {
                b.fetch_add(1, Ordering::SeqCst);
            },
            Duration::ZERO,
            Duration::from_millis(10),
        )
        .expect("schedule");
    // Let the heartbeat run a few times before shutting down.
    while beats.load(Ordering::SeqCst) < 3 {
        std::thread::yield_now();
    }
    pool.shutdown();
    println!(
        "graceful: new work refused: {:?}",
        pool.execute(|| ()).unwrap_err()
    );
    println!("graceful: delayed one-shot still ran: {:?}", late.join());
    // Join first: a beat may still be running, and the count is only final once it ended.
    let ended = beat.join();
    println!(
        "graceful: periodic task stopped after {} beats: {ended:?}",
        beats.load(Ordering::SeqCst)
    );
    assert!(pool.await_termination(Duration::from_secs(5)));
    println!("graceful: terminated, stats {:?}\n", pool.stats());
    assert_eq!(ran.load(Ordering::SeqCst), 1);

    // 2. Now: nothing new starts; what never started comes back to the caller.
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .build()
        .expect("pool");
    let hits = Arc::new(AtomicUsize::new(0));
    let futures: Vec<_> = (0..5)
        .map(|i| {
            let h = hits.clone();
            pool.schedule(
                move || h.fetch_add(1, Ordering::SeqCst),
                Duration::from_secs(60 * (i + 1)),
            )
            .expect("schedule")
        })
        .collect();
    let pending = pool.shutdown_now();
    println!(
        "now: {} tasks never started and were handed back",
        pending.len()
    );
    for f in futures {
        assert_eq!(f.join(), Err(TaskError::Cancelled));
    }
    // The caller decides: run them here, log them, or drop them.
    for task in pending {
        task.run();
    }
    println!(
        "now: ran the handed-back tasks on this thread: {} runs",
        hits.load(Ordering::SeqCst)
    );
    assert!(pool.await_termination(Duration::from_secs(5)));
    println!("now: terminated, stats {:?}", pool.stats());
}

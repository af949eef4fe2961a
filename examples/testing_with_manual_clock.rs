//! How to test your own retry loop deterministically: build the pool on a `ManualClock`, then
//! move time by hand. `advance` returns only when everything due has run, so you can assert
//! right after it; no sleeps, no flakes, and an hour of backoff takes microseconds.
//!
//! Run: `cargo run --example testing_with_manual_clock`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wheelpool::{ManualClock, ScheduledThreadPool};

/// The code under test: polls a job every `interval` (fixed delay) until `is_ready` says yes.
fn poll_until_ready(
    pool: &ScheduledThreadPool,
    interval: Duration,
    is_ready: impl Fn() -> bool + Send + 'static,
    log: Arc<Mutex<Vec<Instant>>>,
    clock: ManualClock,
) -> wheelpool::ScheduledFuture<()> {
    let me = Arc::new(Mutex::new(None::<wheelpool::CancelHandle>));
    let me2 = me.clone();
    let f = pool
        .schedule_with_fixed_delay(
            move || {
                log.lock().unwrap().push(clock.now());
                if is_ready() {
                    if let Some(h) = me2.lock().unwrap().as_ref() {
                        h.cancel(); // done: no more polls
                    }
                }
            },
            interval,
            interval,
        )
        .expect("schedule");
    *me.lock().unwrap() = Some(f.cancel_handle());
    f
}

fn main() {
    let clock = ManualClock::new();
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .clock(clock.clone())
        .build()
        .expect("pool");
    let t0 = clock.now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let c = clock.clone();
    let ready_at = t0 + Duration::from_secs(25);
    let poller = poll_until_ready(
        &pool,
        Duration::from_secs(10),
        move || c.now() >= ready_at,
        log.clone(),
        clock.clone(),
    );

    clock.advance(Duration::from_secs(9));
    assert!(
        log.lock().unwrap().is_empty(),
        "nothing before the first interval"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(log.lock().unwrap().len(), 1, "first poll at exactly 10 s");
    clock.advance(Duration::from_secs(3600)); // an hour passes in an instant
    let polls: Vec<u64> = log
        .lock()
        .unwrap()
        .iter()
        .map(|t| (*t - t0).as_secs())
        .collect();
    println!("polls at (virtual) seconds: {polls:?}");
    assert_eq!(
        polls,
        vec![10, 20, 30],
        "polled every 10 s until ready at 25 s, then stopped"
    );
    assert!(poller.is_cancelled());
    println!(
        "the poller stopped itself after it saw the job ready: {:?}",
        poller.join()
    );
}

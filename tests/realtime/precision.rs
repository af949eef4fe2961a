//! Deadlines at microsecond precision in real time: with the default 1 us tick and the adaptive
//! slack, no run may start before its deadline, whether the timers are sparse (no slack) or
//! dense (slack up to 1 ms), scheduled by delay or at an instant, from several threads. Nothing
//! here asserts lateness except a bound wide enough for a busy machine: precision is measured by
//! `benches/compare` (W3), not by timed tests.

#![cfg(not(wheelpool_loom))]

use crate::common::LONG;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::ScheduledThreadPool;

/// A small xorshift generator: reproducible delays without a dependency.
fn delays(seed: u64, n: usize, max_us: u64) -> Vec<Duration> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Any nanosecond count: deadlines between two microseconds round up, never down.
            Duration::from_nanos(x % (max_us * 1000))
        })
        .collect()
}

/// Schedules `delays` (by delay, and by instant for every other one) and checks each run
/// started at or after its deadline; returns the largest lateness seen.
fn run_all(pool: &ScheduledThreadPool, delays: &[Duration]) -> Duration {
    let mut futures = Vec::with_capacity(delays.len());
    for (i, &d) in delays.iter().enumerate() {
        let deadline = Instant::now() + d;
        let f = if i % 2 == 0 {
            pool.schedule(Instant::now, d).unwrap()
        } else {
            pool.schedule_at(Instant::now, deadline).unwrap()
        };
        futures.push((deadline, f));
    }
    let mut worst = Duration::ZERO;
    for (i, (deadline, mut f)) in futures.into_iter().enumerate() {
        let ran = f
            .join_timeout(LONG)
            .unwrap_or_else(|| panic!("timer {i} lost"))
            .unwrap();
        assert!(
            ran >= deadline,
            "timer {i} ({:?}) ran {:?} early",
            delays[i],
            deadline - ran
        );
        worst = worst.max(ran - deadline);
    }
    worst
}

/// Sparse timers, one at a time: each waits alone (zero slack), within microseconds.
#[test]
fn a_lone_timer_at_a_microsecond_deadline_is_never_early() {
    let _serial = crate::serial();
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    for d in delays(7, 300, 500) {
        run_all(&pool, &[d]);
    }
}

/// Dense timers from four threads at once: 20 000 deadlines within 20 ms (one per microsecond,
/// so the slack grows to its cap) and none starts early. Lateness stays within a bound wide
/// enough for a busy machine: the slack's 1 ms plus the wait for a CPU.
#[test]
fn dense_microsecond_deadlines_from_many_threads_are_never_early() {
    let _serial = crate::serial();
    let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
    let producers: Vec<_> = (0..4)
        .map(|t| {
            let pool = pool.clone();
            thread::spawn(move || run_all(&pool, &delays(100 + t, 5_000, 20_000)))
        })
        .collect();
    for p in producers {
        let worst = p.join().unwrap();
        assert!(worst < Duration::from_secs(2), "a timer ran {worst:?} late");
    }
}

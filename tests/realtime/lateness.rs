//! `PoolStats`' lateness in real time: bounds wide enough for a machine busy with other work
//! (the crate's tests are run with two CPU burners per core beside them).

use crate::common::*;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Far above any lateness a busy machine gives a timer; only a broken measure reaches it.
const WIDE: Duration = Duration::from_secs(5);

#[test]
fn lateness_agrees_with_what_the_tasks_saw() {
    let _serial = crate::serial();
    let pool = wheelpool::ScheduledThreadPool::builder()
        .threads(2)
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let n = 200u64;
    let futures: Vec<_> = (0..n)
        .map(|i| {
            let delay = Duration::from_millis(1 + i % 50);
            // Before the schedule call: no later than the pool's own planned time.
            let planned = Instant::now() + delay;
            let seen = seen.clone();
            pool.schedule(move || seen.lock().unwrap().push(planned.elapsed()), delay)
                .unwrap()
        })
        .collect();
    for mut f in futures {
        assert_eq!(f.join_timeout(LONG), Some(Ok(())));
    }
    let s = pool.stats();
    let seen = seen.lock().unwrap();
    let seen_max = *seen.iter().max().unwrap();
    assert_eq!(s.lateness_count, n);
    assert!(
        s.lateness_p50 <= s.lateness_p99 && s.lateness_p99 <= s.lateness_max,
        "{s:?}"
    );
    // The pool measures before the closure runs, from a planned time no earlier than the
    // task's: never more than what the tasks saw.
    assert!(s.lateness_max <= seen_max, "{s:?} against {seen_max:?}");
    assert!(s.lateness_p50 < WIDE, "{s:?}");
}

#[test]
fn a_blocked_worker_shows_in_the_maximum() {
    let _serial = crate::serial();
    let pool = wheelpool::ScheduledThreadPool::builder()
        .threads(1)
        .build()
        .unwrap();
    let start = Instant::now();
    let mut blocker = pool
        .schedule(
            || std::thread::sleep(Duration::from_millis(50)),
            Duration::ZERO,
        )
        .unwrap();
    let mut late = pool.schedule(|| (), Duration::from_millis(1)).unwrap();
    assert_eq!(late.join_timeout(LONG), Some(Ok(())));
    assert_eq!(blocker.join_timeout(LONG), Some(Ok(())));
    let s = pool.stats();
    assert_eq!(s.lateness_count, 2);
    // The second task was due at most 1 ms after `start` plus the schedule calls, and could
    // start only after the blocker's 50 ms: at least 49 ms late.
    assert!(s.lateness_max >= Duration::from_millis(49), "{s:?}");
    assert!(s.lateness_max <= start.elapsed(), "{s:?}");
    // Rank 2 of 2: the maximum's bucket, capped by the exact maximum.
    assert_eq!(s.lateness_p99, s.lateness_max);
}

//! Absurd builder input gets a typed `BuildError` whose message states the allowed range,
//! instead of a panic, an allocation abort, or a pool on which a 1 ms task never runs.

use crate::common::LONG;
use std::time::Duration;
use wheelpool::{BuildError, Builder, ScheduledThreadPool};

fn refused(builder: Builder) -> BuildError {
    let err = builder.build().unwrap_err();
    assert!(err.is_invalid_config(), "{err}");
    assert!(!err.is_spawn_failure(), "{err}");
    assert!(std::error::Error::source(&err).is_none());
    err
}

#[test]
fn thread_counts_outside_one_to_max_threads_are_refused_with_the_range() {
    // Before: usize::MAX panicked ("capacity overflow"), 1 << 40 aborted on allocation.
    for n in [0, Builder::MAX_THREADS + 1, 1 << 40, usize::MAX] {
        let err = refused(ScheduledThreadPool::builder().threads(n));
        let msg = err.to_string();
        assert!(
            msg.contains("threads must be at least 1 and at most 4096")
                && msg.contains(&format!("(got {n})")),
            "{msg}"
        );
    }
    assert_eq!(Builder::MAX_THREADS, 4096);
}

#[test]
fn ticks_outside_min_to_max_tick_are_refused_with_the_range() {
    let over = Builder::MAX_TICK + Duration::from_nanos(1);
    for tick in [
        Duration::ZERO,
        over,
        Duration::from_secs(3600),
        Duration::MAX,
    ] {
        let err = refused(ScheduledThreadPool::builder().threads(1).tick(tick));
        let msg = err.to_string();
        assert!(
            msg.contains("tick must be at least 1ns and at most 1s")
                && msg.contains(&format!("(got {tick:?})")),
            "{msg}"
        );
    }
}

/// The bounds themselves are valid, and a 1 ms task runs on either.
#[test]
fn the_extreme_valid_ticks_run_a_1_ms_task() {
    for tick in [Builder::MIN_TICK, Builder::MAX_TICK] {
        let pool = ScheduledThreadPool::builder()
            .threads(1)
            .tick(tick)
            .build()
            .unwrap();
        let mut f = pool.schedule(|| 1, Duration::from_millis(1)).unwrap();
        // At most one tick (1 s) late; LONG only bounds a broken run.
        assert_eq!(f.join_timeout(LONG), Some(Ok(1)), "tick {tick:?}");
    }
}

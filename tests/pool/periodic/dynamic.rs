#![cfg(not(wheelpool_loom))]
//! Dynamic delay and dynamic rate: each run returns when the next one comes (`Some`) or ends the
//! task (`None`, and `join` gives `Ok(())`). Exact run times under the `ManualClock` (a run
//! "takes time" by advancing the clock itself), cancel mid-chain, panics, shutdown, and runs that
//! never overlap on several workers.

use crate::manual_common::*;

/// A closure that records its start, takes `work` (moves the clock), then returns the next
/// entry of `delays` (`None` once they run out).
fn scripted(
    runs: &Runs,
    work: Duration,
    delays: &[u64],
) -> impl FnMut() -> Option<Duration> + Send + 'static {
    let r = runs.clone();
    let mut left: std::collections::VecDeque<u64> = delays.iter().copied().collect();
    move || {
        r.record();
        if !work.is_zero() {
            r.clock.advance(work);
        }
        left.pop_front().map(ms)
    }
}

#[test]
fn dynamic_delay_counts_each_delay_from_the_end_of_its_run() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let f = pool
            .schedule_with_dynamic_delay(scripted(&runs, ms(2), &[5, 10, 20]), Duration::ZERO)
            .unwrap();
        // The first run is due at once and may run while this thread is already advancing;
        // its own 2 ms would then move the target too. Let it run (and take its 2 ms) first.
        clock.advance(Duration::ZERO);
        assert_eq!(runs.times(), millis(&[0]));
        assert_eq!(runs.elapsed(), ms(2));
        clock.advance(ms(38));
        // 0 (ends 2) +5 -> 7 (ends 9) +10 -> 19 (ends 21) +20 -> 41
        assert_eq!(runs.times(), millis(&[0, 7, 19]));
        clock.advance(ms(1));
        assert_eq!(runs.times(), millis(&[0, 7, 19, 41]));
        assert_eq!(join_within(f), Ok(()), "the fourth run returned None");
        clock.advance(ms(100));
        assert_eq!(runs.count(), 4);
        assert_eq!(pool.stats().completed, 4);
        assert_eq!(pool.stats().pending, 0);
    });
}

#[test]
fn dynamic_rate_counts_each_delay_from_the_planned_start() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let f = pool
            .schedule_at_dynamic_rate(scripted(&runs, ms(3), &[10, 10, 7]), ms(10))
            .unwrap();
        clock.advance(ms(50));
        assert_eq!(runs.times(), millis(&[10, 20, 30, 37]));
        assert_eq!(join_within(f), Ok(()));
    });
}

#[test]
fn dynamic_rate_after_an_overrun_runs_at_once_but_never_overlaps() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 3);
        let runs = Runs::new(&clock);
        // Each run takes 15 ms and asks for the next 10 ms after its planned start.
        let f = pool
            .schedule_at_dynamic_rate(scripted(&runs, ms(15), &[10, 10]), ms(10))
            .unwrap();
        clock.advance(ms(100));
        // Planned 10, 20, 30; the 20 and 30 ms runs wait for the previous run to return.
        assert_eq!(runs.times(), millis(&[10, 25, 40]));
        assert_eq!(join_within(f), Ok(()));
    });
}

#[test]
fn none_from_the_first_run_ends_the_task_with_ok() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let runs = Runs::new(&clock);
        let a = pool
            .schedule_with_dynamic_delay(scripted(&runs, Duration::ZERO, &[]), ms(5))
            .unwrap();
        let b = pool
            .schedule_at_dynamic_rate(scripted(&runs, Duration::ZERO, &[]), ms(5))
            .unwrap();
        clock.advance(ms(5));
        assert_eq!(join_within(a), Ok(()));
        assert_eq!(join_within(b), Ok(()));
        assert_eq!(runs.times(), millis(&[5, 5]));
        let stats = pool.stats();
        assert_eq!((stats.completed, stats.cancelled, stats.pending), (2, 0, 0));
    });
}

#[test]
fn cancel_mid_chain_stops_every_later_run() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let f = pool
            .schedule_with_dynamic_delay(scripted(&runs, Duration::ZERO, &[10; 100]), ms(10))
            .unwrap();
        let handle = f.cancel_handle();
        clock.advance(ms(35));
        assert_eq!(runs.times(), millis(&[10, 20, 30]));
        assert!(handle.cancel());
        assert!(!handle.reset(ms(1)));
        clock.advance(ms(100));
        assert_eq!(runs.count(), 3, "no run after cancel");
        assert_eq!(join_within(f), Err(TaskError::Cancelled));
    });
}

#[test]
fn a_run_may_cancel_its_own_chain() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let (tx, rx) = mpsc::channel::<CancelHandle>();
        let runs = Runs::new(&clock);
        let r = runs.clone();
        let rx = Mutex::new(rx);
        let f = pool
            .schedule_at_dynamic_rate(
                move || {
                    if r.record() == 1 {
                        let me = rx.lock().unwrap().recv().unwrap();
                        assert!(me.cancel(), "stops the runs after this one");
                    }
                    Some(ms(10))
                },
                ms(10),
            )
            .unwrap();
        tx.send(f.cancel_handle()).unwrap();
        clock.advance(ms(100));
        assert_eq!(runs.times(), millis(&[10, 20]));
        assert_eq!(join_within(f), Err(TaskError::Cancelled));
    });
}

#[test]
fn a_panic_ends_the_task_unless_it_survives_panics() {
    bounded(|| {
        let clock = ManualClock::new();
        let log = PanicLog::default();
        let pool = log.pool(&clock, 2);
        let flaky = |runs: &Runs| {
            let r = runs.clone();
            move || {
                if r.record() == 1 {
                    panic!("probe failed");
                }
                Some(ms(10))
            }
        };
        let (fragile, tough) = (Runs::new(&clock), Runs::new(&clock));
        let f = pool
            .schedule_with_dynamic_delay(flaky(&fragile), ms(10))
            .unwrap();
        let t = pool
            .task()
            .survive_panics(true)
            .schedule_with_dynamic_delay(flaky(&tough), ms(10))
            .unwrap();
        clock.advance(ms(50));
        assert_eq!(fragile.times(), millis(&[10, 20]));
        assert_eq!(
            join_within(f),
            Err(TaskError::Panicked("probe failed".into()))
        );
        // The panicking 20 ms run returned no delay: the last one (10 ms) applies.
        assert_eq!(tough.times(), millis(&[10, 20, 30, 40, 50]));
        assert!(!t.is_done());
        assert_eq!(log.messages(), ["probe failed", "probe failed"]);
        assert!(t.cancel());
    });
}

#[test]
fn a_survived_panic_in_the_first_run_retries_after_the_initial_delay() {
    bounded(|| {
        let clock = ManualClock::new();
        let log = PanicLog::default();
        let pool = log.pool(&clock, 1);
        let runs = Runs::new(&clock);
        let r = runs.clone();
        let f = pool
            .task()
            .survive_panics(true)
            .schedule_at_dynamic_rate(
                move || {
                    if r.record() == 0 {
                        panic!("cold start");
                    }
                    None
                },
                ms(7),
            )
            .unwrap();
        clock.advance(ms(20));
        assert_eq!(runs.times(), millis(&[7, 14]));
        assert_eq!(join_within(f), Ok(()));
        assert_eq!(log.messages(), ["cold start"]);
    });
}

#[test]
fn shutdown_stops_a_dynamic_chain_and_shutdown_now_hands_it_back() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let runs = Runs::new(&clock);
        let f = pool
            .schedule_with_dynamic_delay(scripted(&runs, Duration::ZERO, &[10; 10]), ms(10))
            .unwrap();
        clock.advance(ms(10));
        pool.shutdown();
        assert!(pool.await_termination(JOIN_LIMIT));
        assert_eq!(join_within(f), Err(TaskError::Shutdown));
        assert_eq!(runs.count(), 1);

        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let runs = Runs::new(&clock);
        let f = pool
            .schedule_at_dynamic_rate(scripted(&runs, Duration::ZERO, &[10; 10]), ms(10))
            .unwrap();
        clock.advance(ms(10));
        let pending = pool.shutdown_now();
        assert_eq!(pending.len(), 1);
        assert!(pending[0].is_periodic());
        assert_eq!(join_within(f), Err(TaskError::Cancelled));
        for task in pending {
            task.run(); // one more run, on this thread
        }
        assert_eq!(runs.count(), 2);
    });
}

/// Zero delays re-arm straight onto the run queues; with four workers a second run of the same
/// task must still wait for the first to return.
#[test]
fn runs_never_overlap_on_several_workers() {
    bounded(|| {
        let pool = ScheduledThreadPool::builder().threads(4).build().unwrap();
        let mut futures = Vec::new();
        let overlaps = Arc::new(AtomicUsize::new(0));
        for rate in [false, true] {
            for _ in 0..4 {
                let busy = AtomicBool::new(false);
                let overlaps = overlaps.clone();
                let mut left = 300;
                let f = move || {
                    if busy.swap(true, SeqCst) {
                        overlaps.fetch_add(1, SeqCst);
                    }
                    for _ in 0..100 {
                        std::hint::spin_loop();
                    }
                    busy.store(false, SeqCst);
                    left -= 1;
                    (left > 0).then_some(Duration::ZERO)
                };
                futures.push(if rate {
                    pool.schedule_at_dynamic_rate(f, Duration::ZERO).unwrap()
                } else {
                    pool.schedule_with_dynamic_delay(f, Duration::ZERO).unwrap()
                });
            }
        }
        for f in futures {
            assert_eq!(join_within(f), Ok(()));
        }
        assert_eq!(overlaps.load(SeqCst), 0);
        assert_eq!(pool.stats().completed, 8 * 300);
    });
}

#[test]
fn a_handle_schedules_dynamic_tasks_too() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let handle = pool.handle();
        let runs = Runs::new(&clock);
        let a = handle
            .schedule_with_dynamic_delay(scripted(&runs, Duration::ZERO, &[1]), ms(1))
            .unwrap();
        let b = handle
            .task()
            .schedule_at_dynamic_rate(scripted(&runs, Duration::ZERO, &[]), ms(1))
            .unwrap();
        clock.advance(ms(2));
        assert_eq!(runs.times(), millis(&[1, 1, 2]));
        assert_eq!(join_within(a), Ok(()));
        assert_eq!(join_within(b), Ok(()));
        drop(pool);
        let err = handle
            .schedule_with_dynamic_delay(|| None, Duration::ZERO)
            .unwrap_err();
        assert_eq!(err, ScheduleError::Shutdown);
    });
}

// ---- loops that return: closures returning ControlFlow<T, Duration> -----------------------

use std::ops::ControlFlow::{self, Break, Continue};

/// A retry with doubling backoff (10 ms, 20 ms, ...) that gets `replies` one per try and
/// stops at the first `Ok` or after `limit` tries, returning the last reply.
fn retry(
    runs: &Runs,
    mut replies: Vec<Result<u32, String>>,
    limit: usize,
) -> impl FnMut() -> ControlFlow<Result<u32, String>, Duration> + Send + 'static {
    let r = runs.clone();
    replies.reverse();
    let mut backoff = ms(10);
    move || {
        let tries = r.record() + 1;
        let reply = replies.pop().expect("a reply for every try");
        match reply {
            Err(_) if tries < limit => {
                let wait = backoff;
                backoff *= 2;
                Continue(wait)
            }
            done => Break(done),
        }
    }
}

#[test]
fn a_retry_loop_returns_its_value() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let replies = vec![Err("busy".into()), Err("busy".into()), Ok(7)];
        let f: ScheduledFuture<Result<u32, String>> = pool
            .schedule_with_dynamic_delay(retry(&runs, replies, 5), ms(5))
            .unwrap();
        clock.advance(ms(34));
        assert_eq!(runs.times(), millis(&[5, 15]));
        assert!(!f.is_done());
        clock.advance(ms(1));
        // 5, +10 -> 15, +20 -> 35: the third try succeeds.
        assert_eq!(runs.times(), millis(&[5, 15, 35]));
        assert!(f.is_done());
        assert_eq!(join_within(f), Ok(Ok(7)));
        clock.advance(ms(1000));
        assert_eq!(runs.count(), 3, "no run after Break");
        assert_eq!(pool.stats().completed, 3);
        assert_eq!(pool.stats().pending, 0);
    });
}

#[test]
fn a_retry_loop_gives_up_with_its_last_error() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let replies = (1..=4).map(|n| Err(format!("refused ({n})"))).collect();
        let f = pool
            .schedule_with_dynamic_delay(retry(&runs, replies, 4), Duration::ZERO)
            .unwrap();
        clock.advance(Duration::ZERO);
        clock.advance(ms(70));
        // 0, +10 -> 10, +20 -> 30, +40 -> 70: the fourth try is the last.
        assert_eq!(runs.times(), millis(&[0, 10, 30, 70]));
        assert_eq!(join_within(f), Ok(Err("refused (4)".to_owned())));
        clock.advance(ms(1000));
        assert_eq!(runs.count(), 4);
    });
}

#[test]
fn a_dynamic_rate_loop_returns_its_value() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let runs = Runs::new(&clock);
        let r = runs.clone();
        let f = pool
            .schedule_at_dynamic_rate(
                move || {
                    let n = r.record();
                    r.clock.advance(ms(3)); // the work takes 3 ms
                    if n < 2 {
                        Continue(ms(10))
                    } else {
                        Break(format!("{} samples", n + 1))
                    }
                },
                ms(10),
            )
            .unwrap();
        clock.advance(ms(40));
        assert_eq!(
            runs.times(),
            millis(&[10, 20, 30]),
            "from the planned starts"
        );
        assert_eq!(join_within(f), Ok("3 samples".to_owned()));
    });
}

#[test]
fn a_loop_that_returns_is_cancelled_panics_and_stops_like_any_periodic_task() {
    bounded(|| {
        let clock = ManualClock::new();
        let log = PanicLog::default();
        let pool = log.pool(&clock, 2);
        let forever = || -> ControlFlow<u8, Duration> { Continue(ms(10)) };
        let cancelled = pool.schedule_with_dynamic_delay(forever, ms(10)).unwrap();
        let panicky = pool
            .schedule_at_dynamic_rate(
                || -> ControlFlow<u8, Duration> { panic!("bad loop") },
                ms(10),
            )
            .unwrap();
        let stopped = pool.schedule_at_dynamic_rate(forever, ms(10)).unwrap();
        clock.advance(ms(25));
        assert!(cancelled.cancel());
        assert_eq!(join_within(cancelled), Err(TaskError::Cancelled));
        assert_eq!(
            join_within(panicky),
            Err(TaskError::Panicked("bad loop".into()))
        );
        assert_eq!(log.messages(), ["bad loop"]);
        pool.shutdown();
        assert_eq!(join_within(stopped), Err(TaskError::Shutdown));
    });
}

#[test]
fn a_shutdown_now_hands_back_a_loop_that_returns() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let f = pool
            .task()
            .name("retry")
            .schedule_with_dynamic_delay(|| -> ControlFlow<u8, Duration> { Break(1) }, ms(10))
            .unwrap();
        let pending = pool.shutdown_now();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].name(), Some("retry"));
        assert_eq!(pending[0].kind(), wheelpool::TaskKind::DynamicDelay);
        assert_eq!(join_within(f), Err(TaskError::Cancelled));
    });
}

#![cfg(not(wheelpool_loom))]
//! Periodic tasks under the `ManualClock`: deterministic, no real sleeping.
//!
//! Every test builds its own clock and pool. A run "takes time" by calling `clock.advance` from
//! inside the task, which only moves the clock (it cannot wait for the pool it runs on); the
//! outer `advance` then carries on from there. Times are recorded as `clock.now() - t0`, where
//! `t0` is the clock's time when the pool was built (the pool's origin), so they compare
//! exactly with whole milliseconds.
//!
//! Every test body runs under a watchdog: a hang (an `advance` that never returns, a future
//! that never ends) fails the test instead of stalling the run.

use crate::manual_common::*;

// ---- exact run counts -------------------------------------------------------------------------

#[test]
fn fixed_rate_runs_once_per_period_exactly() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let r = runs.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    r.record();
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        clock.advance(ms(9));
        assert_eq!(runs.count(), 0, "nothing runs before the initial delay");
        clock.advance(ms(91));
        assert_eq!(
            runs.times(),
            millis(&[10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
        );
        clock.advance(ms(9));
        assert_eq!(runs.count(), 10, "the 110 ms run is not due at 109 ms");
        clock.advance(ms(1));
        assert_eq!(runs.count(), 11);
        assert!(!f.is_done());
        assert!(f.cancel());
        clock.advance(ms(100));
        assert_eq!(runs.count(), 11, "no run after cancel");
        assert_eq!(join_within(f), Err(TaskError::Cancelled));
    });
}

#[test]
fn fixed_rate_with_zero_initial_delay_runs_at_once() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let r = runs.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    r.record();
                },
                Duration::ZERO,
                ms(10),
            )
            .unwrap();
        clock.advance(Duration::ZERO); // settles: the due run has finished when this returns
        assert_eq!(runs.times(), millis(&[0]));
        clock.advance(ms(100));
        assert_eq!(
            runs.times(),
            millis(&[0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
        );
        assert!(f.cancel());
    });
}

#[test]
fn fixed_rate_counts_are_exact_whatever_the_advance_steps() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 3);
        let runs = Runs::new(&clock);
        let r = runs.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    r.record();
                },
                ms(5),
                ms(10),
            )
            .unwrap();
        // 1 ms steps, then odd steps: after each, exactly the runs with time <= now happened.
        let steps = [1u64, 1, 1, 1, 1, 1, 3, 7, 13, 4, 20, 0, 37, 9, 1, 50];
        for step in steps {
            clock.advance(ms(step));
            let now = runs.elapsed();
            let expected: Vec<Duration> = (0..)
                .map(|k| ms(5 + 10 * k))
                .take_while(|&t| t <= now)
                .collect();
            assert_eq!(runs.times(), expected, "after advancing to {now:?}");
        }
        assert!(f.cancel());
    });
}

#[test]
fn fixed_delay_counts_from_the_end_of_each_run() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let (r, c) = (runs.clone(), clock.clone());
        let f = pool
            .schedule_with_fixed_delay(
                move || {
                    r.record();
                    c.advance(ms(3)); // each run "takes" 3 ms
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        clock.advance(ms(100));
        // 10, then 13 ms after each start: 10 + 3 + 10 = 23, 36, ...; 88 ends at 91, next 101.
        assert_eq!(runs.times(), millis(&[10, 23, 36, 49, 62, 75, 88]));
        assert_eq!(runs.elapsed(), ms(100));
        clock.advance(ms(1));
        assert_eq!(runs.count(), 8);
        assert!(f.cancel());
    });
}

#[test]
fn fixed_delay_without_run_time_is_one_run_per_delay() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let runs = Runs::new(&clock);
        let r = runs.clone();
        let f = pool
            .schedule_with_fixed_delay(
                move || {
                    r.record();
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        clock.advance(ms(100));
        assert_eq!(runs.count(), 10);
        assert_eq!(
            runs.times(),
            millis(&[10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
        );
        assert!(f.cancel());
    });
}

// ---- missed ticks -----------------------------------------------------------------------------

/// Period 10 ms, first run at 10 ms "takes" `overrun` ms (later runs take no time); returns the
/// clock time of each run over `advance(100 ms)`.
fn overrun_sequence(
    pool_default: Option<MissedTicks>,
    task: Option<MissedTicks>,
    overrun: u64,
) -> Vec<Duration> {
    let clock = ManualClock::new();
    let mut builder = ScheduledThreadPool::builder()
        .threads(2)
        .clock(clock.clone());
    if let Some(policy) = pool_default {
        builder = builder.missed_ticks(policy);
    }
    let pool = builder.build().unwrap();
    let runs = Runs::new(&clock);
    let (r, c) = (runs.clone(), clock.clone());
    let mut opts = pool.task();
    if let Some(policy) = task {
        opts = opts.missed_ticks(policy);
    }
    let f = opts
        .schedule_at_fixed_rate(
            move || {
                if r.record() == 0 {
                    c.advance(ms(overrun));
                }
            },
            ms(10),
            ms(10),
        )
        .unwrap();
    clock.advance(ms(100));
    assert!(f.cancel());
    runs.times()
}

#[test]
fn missed_ticks_burst_replays_missed_runs_back_to_back() {
    bounded(|| {
        // Planned 10, 20, 30, 40, ...; the 10 ms run ends at 45: the 20, 30 and 40 ms slots run
        // at once (at 45), then the grid goes on at 50.
        let expected = millis(&[10, 45, 45, 45, 50, 60, 70, 80, 90, 100]);
        assert_eq!(
            overrun_sequence(None, Some(MissedTicks::Burst), 35),
            expected
        );
        assert_eq!(
            overrun_sequence(None, None, 35),
            expected,
            "Burst is the default"
        );
    });
}

#[test]
fn missed_ticks_skip_goes_to_the_next_grid_slot() {
    bounded(|| {
        assert_eq!(
            overrun_sequence(None, Some(MissedTicks::Skip), 35),
            millis(&[10, 50, 60, 70, 80, 90, 100])
        );
        // Ending exactly on a slot: that slot is not missed, it runs at once.
        assert_eq!(
            overrun_sequence(None, Some(MissedTicks::Skip), 30),
            millis(&[10, 40, 50, 60, 70, 80, 90, 100])
        );
    });
}

#[test]
fn missed_ticks_delay_rebases_the_grid_on_the_end_of_the_overrun() {
    bounded(|| {
        assert_eq!(
            overrun_sequence(None, Some(MissedTicks::Delay), 35),
            millis(&[10, 55, 65, 75, 85, 95])
        );
    });
}

#[test]
fn missed_ticks_burst_on_an_exact_slot_boundary() {
    bounded(|| {
        // Ends at 40: the 20 and 30 ms slots are missed, the 40 ms slot is due now.
        assert_eq!(
            overrun_sequence(None, Some(MissedTicks::Burst), 30),
            millis(&[10, 40, 40, 40, 50, 60, 70, 80, 90, 100])
        );
        assert_eq!(
            overrun_sequence(None, Some(MissedTicks::Delay), 30),
            millis(&[10, 50, 60, 70, 80, 90, 100])
        );
    });
}

#[test]
fn pool_default_policy_applies_and_the_task_option_overrides_it() {
    bounded(|| {
        assert_eq!(
            overrun_sequence(Some(MissedTicks::Skip), None, 35),
            millis(&[10, 50, 60, 70, 80, 90, 100]),
            "the pool's default is used when the task sets none"
        );
        assert_eq!(
            overrun_sequence(Some(MissedTicks::Skip), Some(MissedTicks::Delay), 35),
            millis(&[10, 55, 65, 75, 85, 95]),
            "the task's own policy wins"
        );
        assert_eq!(
            overrun_sequence(Some(MissedTicks::Delay), Some(MissedTicks::Burst), 35),
            millis(&[10, 45, 45, 45, 50, 60, 70, 80, 90, 100])
        );
    });
}

// ---- drift and overlap ------------------------------------------------------------------------

#[test]
fn no_drift_over_ten_thousand_periods() {
    // Ten thousand runs, each a hand-off between threads: the watchdog asks for progress (an
    // advance returning), not for all of them within a fixed time on a busy machine.
    bounded_with_progress(|progress| {
        const PERIODS: u64 = 10_000;
        const PERIOD_MS: u64 = 7;
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let (r, c) = (runs.clone(), clock.clone());
        // Each run "takes" 2 ms of a 7 ms period: the grid must not move by it.
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    r.record();
                    c.advance(ms(2));
                },
                ms(PERIOD_MS),
                ms(PERIOD_MS),
            )
            .unwrap();
        // Advance in irregular chunks up to exactly PERIODS * PERIOD_MS.
        let chunks = [1u64, 13, 50, 3, 333, 7, 1000, 29];
        let end = PERIODS * PERIOD_MS;
        let mut i = 0;
        while runs.elapsed() < ms(end) {
            let left = end - runs.elapsed().as_millis() as u64;
            clock.advance(ms(chunks[i % chunks.len()].min(left)));
            progress.step();
            i += 1;
        }
        let times = runs.times();
        assert_eq!(times.len() as u64, PERIODS);
        for (k, t) in times.iter().enumerate() {
            assert_eq!(*t, ms(PERIOD_MS * (k as u64 + 1)), "run {k} drifted");
        }
        assert!(f.cancel());
    });
}

/// Counts entries into a task body that are in progress at once; remembers the maximum.
#[derive(Clone, Default)]
struct OverlapProbe {
    inside: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
    runs: Arc<AtomicUsize>,
}

impl OverlapProbe {
    fn enter(&self) {
        let now = self.inside.fetch_add(1, SeqCst) + 1;
        self.max.fetch_max(now, SeqCst);
        self.runs.fetch_add(1, SeqCst);
    }

    fn leave(&self) {
        self.inside.fetch_sub(1, SeqCst);
    }
}

#[test]
fn runs_of_one_task_never_overlap_even_when_every_run_overruns() {
    // Every run yields 20 times to leave room for an overlapping copy: on a busy machine each
    // yield can cost a whole time slice, and there are hundreds of runs. The watchdog asks for
    // progress (a run starting), not for all of them within a fixed time.
    bounded_with_progress(|progress| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 4);
        let mut probes = Vec::new();
        let mut futures = Vec::new();
        for policy in [MissedTicks::Burst, MissedTicks::Skip, MissedTicks::Delay] {
            for _ in 0..2 {
                let probe = OverlapProbe::default();
                let (p, c, progress) = (probe.clone(), clock.clone(), progress.clone());
                let f = pool
                    .task()
                    .missed_ticks(policy)
                    .schedule_at_fixed_rate(
                        move || {
                            p.enter();
                            progress.step();
                            if p.runs.load(SeqCst) <= 20 {
                                // The first 20 runs overrun their 1 ms period by far. (Bounded:
                                // a Burst task that always overran would never catch up, and
                                // `advance` would rightly never return.)
                                c.advance(ms(3));
                            }
                            for _ in 0..20 {
                                thread::yield_now(); // leave room for a second copy to show up
                            }
                            p.leave();
                        },
                        ms(1),
                        ms(1),
                    )
                    .unwrap();
                probes.push(probe);
                futures.push(f);
            }
        }
        for _ in 0..50 {
            clock.advance(ms(2));
        }
        for f in &futures {
            assert!(f.cancel());
        }
        for p in &probes {
            assert!(p.runs.load(SeqCst) >= 10, "each task ran many times");
            assert_eq!(p.max.load(SeqCst), 1, "two runs of one task overlapped");
        }
    });
}

// ---- arguments and delay() --------------------------------------------------------------------

#[test]
fn zero_period_or_zero_delay_is_refused() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let handle = pool.handle();
        let zero = Duration::ZERO;
        assert_eq!(
            pool.schedule_at_fixed_rate(|| (), ms(1), zero).unwrap_err(),
            ScheduleError::ZeroPeriod
        );
        assert_eq!(
            pool.schedule_with_fixed_delay(|| (), ms(1), zero)
                .unwrap_err(),
            ScheduleError::ZeroPeriod
        );
        assert_eq!(
            pool.task()
                .name("zero")
                .schedule_at_fixed_rate(|| (), zero, zero)
                .unwrap_err(),
            ScheduleError::ZeroPeriod
        );
        assert_eq!(
            pool.task()
                .survive_panics(true)
                .schedule_with_fixed_delay(|| (), zero, zero)
                .unwrap_err(),
            ScheduleError::ZeroPeriod
        );
        assert_eq!(
            handle
                .schedule_at_fixed_rate(|| (), zero, zero)
                .unwrap_err(),
            ScheduleError::ZeroPeriod
        );
        assert_eq!(
            handle
                .schedule_with_fixed_delay(|| (), zero, zero)
                .unwrap_err(),
            ScheduleError::ZeroPeriod
        );
        assert_eq!(pool.stats().pending, 0, "nothing was admitted");
        let ok = pool
            .schedule_at_fixed_rate(|| (), zero, Duration::from_nanos(1))
            .unwrap();
        assert!(
            ok.cancel(),
            "a zero initial delay with a non-zero period is fine"
        );
    });
}

#[test]
fn delay_is_the_exact_time_to_the_next_planned_run() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let rate = pool.schedule_at_fixed_rate(|| (), ms(30), ms(10)).unwrap();
        let c = clock.clone();
        let delay = pool
            .schedule_with_fixed_delay(move || c.advance(ms(4)), ms(10), ms(10))
            .unwrap();
        assert_eq!(rate.delay(), ms(30));
        assert_eq!(delay.delay(), ms(10));
        clock.advance(ms(5));
        assert_eq!(rate.delay(), ms(25));
        assert_eq!(delay.delay(), ms(5));
        clock.advance(ms(5));
        // The fixed-delay run at 10 ms took 4 ms: now 14, next at 24.
        assert_eq!(delay.delay(), ms(10));
        assert_eq!(rate.delay(), ms(16));
        clock.advance(ms(16)); // to 30: rate ran at 30, delay ran at 24 (ended 28, next 38)
        assert_eq!(rate.delay(), ms(10));
        assert_eq!(delay.delay(), ms(8));
        clock.advance(ms(3));
        assert_eq!(rate.delay(), ms(7));
        assert!(rate.cancel());
        assert_eq!(
            rate.delay(),
            Duration::ZERO,
            "a cancelled task has no next run"
        );
        assert!(delay.cancel());
    });
}

#![cfg(not(loom))]
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

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use wheelpool::{
    CancelHandle, ManualClock, MissedTicks, PeriodicOptions, ScheduleError, ScheduledFuture,
    ScheduledThreadPool, TaskError,
};

/// How long any test body may take before the watchdog calls it hung.
const WATCHDOG: Duration = Duration::from_secs(60);
/// Generous bound for a future that must end soon (real time, only reached on a bug).
const JOIN_LIMIT: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs `body` on its own thread and fails if it panics or does not finish within `WATCHDOG`.
fn bounded(body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let worker = thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(()) => worker.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The body panicked: re-raise its panic in the test thread.
            if let Err(p) = worker.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("test body hung for {WATCHDOG:?}"),
    }
}

fn manual_pool(clock: &ManualClock, threads: usize) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(threads)
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// Records `clock.now() - t0` at each run.
#[derive(Clone)]
struct Runs {
    clock: ManualClock,
    t0: Instant,
    at: Arc<Mutex<Vec<Duration>>>,
}

impl Runs {
    fn new(clock: &ManualClock) -> Self {
        Runs {
            clock: clock.clone(),
            t0: clock.now(),
            at: Arc::default(),
        }
    }

    /// Records this run's time; returns its 0-based index.
    fn record(&self) -> usize {
        let mut at = self.at.lock().unwrap();
        at.push(self.clock.now() - self.t0);
        at.len() - 1
    }

    fn times(&self) -> Vec<Duration> {
        self.at.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.at.lock().unwrap().len()
    }

    fn elapsed(&self) -> Duration {
        self.clock.now() - self.t0
    }
}

fn millis(list: &[u64]) -> Vec<Duration> {
    list.iter().map(|&m| ms(m)).collect()
}

fn join_within<T: Send + 'static>(mut f: ScheduledFuture<T>) -> Result<T, TaskError> {
    f.join_timeout(JOIN_LIMIT)
        .expect("the future did not end in time")
}

/// A task that counts panics seen by the pool's handler, with their messages.
#[derive(Clone, Default)]
struct PanicLog(Arc<Mutex<Vec<String>>>);

impl PanicLog {
    fn pool(&self, clock: &ManualClock, threads: usize) -> ScheduledThreadPool {
        let log = self.0.clone();
        ScheduledThreadPool::builder()
            .threads(threads)
            .clock(clock.clone())
            .panic_handler(move |payload| {
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                log.lock().unwrap().push(msg);
            })
            .build()
            .unwrap()
    }

    fn messages(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

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
    let mut opts = PeriodicOptions::new();
    if let Some(policy) = task {
        opts = opts.missed_ticks(policy);
    }
    let f = pool
        .schedule_at_fixed_rate_with(
            move || {
                if r.record() == 0 {
                    c.advance(ms(overrun));
                }
            },
            ms(10),
            ms(10),
            opts,
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
    bounded(|| {
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
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 4);
        let mut probes = Vec::new();
        let mut futures = Vec::new();
        for policy in [MissedTicks::Burst, MissedTicks::Skip, MissedTicks::Delay] {
            for _ in 0..2 {
                let probe = OverlapProbe::default();
                let (p, c) = (probe.clone(), clock.clone());
                let opts = PeriodicOptions::new().missed_ticks(policy);
                let f = pool
                    .schedule_at_fixed_rate_with(
                        move || {
                            p.enter();
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
                        opts,
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

// ---- cancel -----------------------------------------------------------------------------------

#[test]
fn cancel_from_inside_the_task_stops_every_later_run() {
    bounded(|| {
        for fixed_delay in [false, true] {
            let clock = ManualClock::new();
            let pool = manual_pool(&clock, 2);
            let runs = Arc::new(AtomicUsize::new(0));
            let handle: Arc<OnceLock<CancelHandle>> = Arc::default();
            let cancel_result: Arc<Mutex<Option<bool>>> = Arc::default();
            let guard = Arc::new(()); // captured: its count shows when the closure is dropped
            let (r, h, res, g) = (
                runs.clone(),
                handle.clone(),
                cancel_result.clone(),
                guard.clone(),
            );
            let body = move || {
                let _keep = &g;
                if r.fetch_add(1, SeqCst) + 1 == 3 {
                    *res.lock().unwrap() =
                        Some(h.get().expect("handle set before any run").cancel());
                }
            };
            let f = if fixed_delay {
                pool.schedule_with_fixed_delay(body, ms(10), ms(10))
                    .unwrap()
            } else {
                pool.schedule_at_fixed_rate(body, ms(10), ms(10)).unwrap()
            };
            handle.set(f.cancel_handle()).unwrap();
            clock.advance(ms(100));
            assert_eq!(
                runs.load(SeqCst),
                3,
                "fixed_delay={fixed_delay}: no run after the cancel"
            );
            assert_eq!(
                *cancel_result.lock().unwrap(),
                Some(true),
                "a cancel during the run returns true"
            );
            assert!(f.is_cancelled() && f.is_done());
            assert_eq!(f.delay(), Duration::ZERO);
            assert!(!f.cancel(), "already cancelled");
            assert_eq!(pool.stats().cancelled, 1);
            assert_eq!(join_within(f), Err(TaskError::Cancelled));
            // The worker drops the closure right after completing the future: poll briefly.
            let limit = Instant::now() + JOIN_LIMIT;
            while Arc::strong_count(&guard) > 1 {
                assert!(
                    Instant::now() < limit,
                    "the cancelled task's closure was never freed"
                );
                thread::yield_now();
            }
            clock.advance(ms(1000));
            assert_eq!(runs.load(SeqCst), 3);
        }
    });
}

#[test]
fn cancel_of_a_waiting_periodic_task_frees_its_closure_at_once() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let guard = Arc::new(());
        let g = guard.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    let _ = &g;
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        clock.advance(ms(25));
        assert_eq!(Arc::strong_count(&guard), 2);
        assert!(f.cancel());
        assert_eq!(
            Arc::strong_count(&guard),
            1,
            "freed by cancel, not at the next deadline"
        );
        assert_eq!(join_within(f), Err(TaskError::Cancelled));
    });
}

/// Tiny deterministic generator for spin lengths.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// What one race iteration saw.
struct RaceOutcome {
    /// A run was in progress (or about to enter the body) when cancel returned.
    landed_during_run: bool,
}

/// Builds a race task's body from (runs started, "cancel returned true", runs that began
/// after that flag was set).
type MakeBody =
    dyn Fn(Arc<AtomicUsize>, Arc<AtomicBool>, Arc<AtomicUsize>) -> Box<dyn FnMut() + Send>;

/// The shared body of the cancel-vs-re-arm races: schedules a fixed-rate task with `make_body`,
/// lets it run `wait_runs` times, spins a little, cancels from this thread, and checks that no
/// run starts after `cancel` returned true.
///
/// A run that a worker had claimed before `cancel` returned may still enter the body after it:
/// that run is in `stats().running` (counted before the worker claims the task), so if
/// `running` reads 0 right after the cancel, no run at all may follow.
fn race_once(
    pool: &ScheduledThreadPool,
    wait_runs: usize,
    spin: u64,
    make_body: &MakeBody,
    finals: &mut Vec<(Arc<AtomicUsize>, usize)>,
) -> RaceOutcome {
    let started = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(AtomicBool::new(false));
    let seen_after = Arc::new(AtomicUsize::new(0));
    let body = make_body(started.clone(), cancelled.clone(), seen_after.clone());
    let f = pool
        .schedule_at_fixed_rate(body, Duration::ZERO, ms(1))
        .unwrap();
    let limit = Instant::now() + JOIN_LIMIT;
    while started.load(SeqCst) < wait_runs {
        assert!(
            Instant::now() < limit,
            "the task never reached {wait_runs} runs"
        );
        thread::yield_now(); // 2 shared cores: let the workers run
    }
    for _ in 0..spin {
        std::hint::spin_loop();
    }
    assert!(f.cancel(), "a live periodic task can always be cancelled");
    cancelled.store(true, SeqCst);
    let running = pool.stats().running;
    let snapshot = started.load(SeqCst);
    // Yield rather than block: a blocked joiner costs a wake-up per iteration on busy cores.
    while !f.is_done() {
        assert!(
            Instant::now() < limit + JOIN_LIMIT,
            "the cancelled task never finished"
        );
        thread::yield_now();
    }
    assert_eq!(join_within(f), Err(TaskError::Cancelled));
    let after_join = started.load(SeqCst);
    assert!(
        after_join <= snapshot + 1,
        "runs started after cancel returned true: {snapshot} at cancel, {after_join} later"
    );
    if running == 0 {
        assert_eq!(
            after_join, snapshot,
            "no run was in progress at cancel, yet one started after it"
        );
    }
    assert!(
        seen_after.load(SeqCst) <= 1,
        "more than one run began after the cancel"
    );
    finals.push((started, after_join));
    RaceOutcome {
        landed_during_run: running > 0 || after_join > snapshot,
    }
}

/// Checks, once the pool is quiet, that no task ran again after its join returned.
fn no_run_after_join(pool: ScheduledThreadPool, finals: &[(Arc<AtomicUsize>, usize)]) {
    pool.shutdown();
    assert!(pool.await_termination(JOIN_LIMIT));
    for (i, (started, at_join)) in finals.iter().enumerate() {
        assert_eq!(
            started.load(SeqCst),
            *at_join,
            "iteration {i}: a run after the future ended"
        );
    }
}

#[test]
fn cancel_racing_an_immediate_rearm_never_lets_a_run_start_after_it() {
    bounded(|| {
        // Each run advances the clock by one period, so every re-arm is already due and goes
        // straight back to a worker queue: the task re-arms back to back, as fast as it can,
        // while this thread cancels it.
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let c = clock.clone();
        let make_body =
            move |started: Arc<AtomicUsize>, flag: Arc<AtomicBool>, seen: Arc<AtomicUsize>| {
                let c = c.clone();
                Box::new(move || {
                    started.fetch_add(1, SeqCst);
                    if flag.load(SeqCst) {
                        seen.fetch_add(1, SeqCst);
                    }
                    c.advance(ms(1));
                }) as Box<dyn FnMut() + Send>
            };
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let mut finals = Vec::new();
        let (mut during, mut waiting) = (0, 0);
        for i in 0..10_000 {
            let spin = rng.next() % 200;
            let out = race_once(&pool, i % 4, spin, &make_body, &mut finals);
            if out.landed_during_run {
                during += 1;
            } else {
                waiting += 1;
            }
        }
        eprintln!("immediate re-arm race: cancel landed during a run {during} times, between runs {waiting} times");
        assert!(during > 0, "the race never hit a running task");
        no_run_after_join(pool, &finals);
    });
}

#[test]
fn cancel_racing_a_rearm_through_the_wheel_never_lets_a_run_start_after_it() {
    bounded(|| {
        // Runs take no time; another thread keeps advancing the clock 1 ms at a time, so every
        // re-arm goes through the timer thread and the wheel while this thread cancels.
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let stop = Arc::new(AtomicBool::new(false));
        let advancer = {
            let (clock, stop) = (clock.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(SeqCst) {
                    clock.advance(ms(1));
                }
            })
        };
        let make_body =
            |started: Arc<AtomicUsize>, flag: Arc<AtomicBool>, seen: Arc<AtomicUsize>| {
                Box::new(move || {
                    started.fetch_add(1, SeqCst);
                    if flag.load(SeqCst) {
                        seen.fetch_add(1, SeqCst);
                    }
                }) as Box<dyn FnMut() + Send>
            };
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        let mut finals = Vec::new();
        for i in 0..10_000 {
            let spin = rng.next() % 2_000;
            race_once(&pool, i % 3, spin, &make_body, &mut finals);
        }
        stop.store(true, SeqCst);
        advancer.join().unwrap();
        no_run_after_join(pool, &finals);
    });
}

#[test]
fn a_periodic_future_can_be_awaited_and_ends_cancelled() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    r.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let handle = f.cancel_handle();
        let c = clock.clone();
        let other = thread::spawn(move || {
            c.advance(ms(30));
            assert!(handle.cancel());
        });
        assert_eq!(pollster::block_on(f), Err(TaskError::Cancelled));
        other.join().unwrap();
        assert_eq!(runs.load(SeqCst), 3);
    });
}

#[test]
fn dropping_the_future_detaches_the_periodic_task() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        drop(
            pool.schedule_at_fixed_rate(
                move || {
                    r.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap(),
        );
        clock.advance(ms(100));
        assert_eq!(
            runs.load(SeqCst),
            10,
            "a dropped future does not cancel its task"
        );
        let pending = pool.shutdown_now();
        assert_eq!(pending.len(), 1);
        assert!(pending[0].is_periodic());
    });
}

// ---- panics -----------------------------------------------------------------------------------

#[test]
fn a_panic_stops_a_periodic_task_and_nothing_else() {
    bounded(|| {
        let clock = ManualClock::new();
        let log = PanicLog::default();
        let pool = log.pool(&clock, 2);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    let n = r.fetch_add(1, SeqCst) + 1;
                    if n == 3 {
                        panic!("boom on run {n}");
                    }
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let neighbour = Arc::new(AtomicUsize::new(0));
        let nb = neighbour.clone();
        let g = pool
            .schedule_with_fixed_delay(
                move || {
                    nb.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        clock.advance(ms(100));
        assert_eq!(runs.load(SeqCst), 3, "no run after the panic");
        assert_eq!(
            neighbour.load(SeqCst),
            10,
            "the other periodic task goes on"
        );
        assert!(f.is_done() && !f.is_cancelled());
        assert_eq!(f.delay(), Duration::ZERO);
        assert_eq!(
            join_within(f),
            Err(TaskError::Panicked("boom on run 3".into()))
        );
        assert_eq!(
            log.messages(),
            vec!["boom on run 3".to_owned()],
            "the handler saw it once"
        );
        assert_eq!(pool.stats().panicked, 1);
        let one_shot = pool.schedule(|| "pool still works", ms(5)).unwrap();
        clock.advance(ms(5));
        assert_eq!(join_within(one_shot), Ok("pool still works"));
        assert!(g.cancel());
    });
}

#[test]
fn survive_panics_keeps_the_task_going_and_reports_each_panic() {
    bounded(|| {
        for fixed_delay in [false, true] {
            let clock = ManualClock::new();
            let log = PanicLog::default();
            let pool = log.pool(&clock, 2);
            let runs = Arc::new(AtomicUsize::new(0));
            let r = runs.clone();
            let body = move || {
                let n = r.fetch_add(1, SeqCst) + 1;
                if n % 2 == 0 {
                    panic!("tick {n}");
                }
            };
            let opts = PeriodicOptions::new().survive_panics(true);
            let f = if fixed_delay {
                pool.schedule_with_fixed_delay_with(body, ms(10), ms(10), opts)
                    .unwrap()
            } else {
                pool.schedule_at_fixed_rate_with(body, ms(10), ms(10), opts)
                    .unwrap()
            };
            clock.advance(ms(100));
            assert_eq!(
                runs.load(SeqCst),
                10,
                "fixed_delay={fixed_delay}: panicking runs do not stop it"
            );
            let expected: Vec<String> = (1..=5).map(|k| format!("tick {}", 2 * k)).collect();
            assert_eq!(log.messages(), expected);
            assert_eq!(pool.stats().panicked, 5);
            assert!(!f.is_done());
            assert_eq!(f.delay(), ms(10), "re-armed after a panicking run too");
            assert!(f.cancel());
            assert_eq!(join_within(f), Err(TaskError::Cancelled));
        }
    });
}

// ---- shutdown ---------------------------------------------------------------------------------

#[test]
fn shutdown_stops_periodic_tasks_while_one_shots_still_run() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let rate_runs = Arc::new(AtomicUsize::new(0));
        let delay_runs = Arc::new(AtomicUsize::new(0));
        let (a, b) = (rate_runs.clone(), delay_runs.clone());
        let rate = pool
            .schedule_at_fixed_rate(
                move || {
                    a.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let delay = pool
            .schedule_with_fixed_delay(
                move || {
                    b.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let one_shot = pool.schedule(|| "delayed one-shot ran", ms(50)).unwrap();
        clock.advance(ms(20));
        assert_eq!((rate_runs.load(SeqCst), delay_runs.load(SeqCst)), (2, 2));
        pool.shutdown();
        // The code ends a periodic task stopped by shutdown with TaskError::Shutdown.
        assert_eq!(join_within(rate), Err(TaskError::Shutdown));
        assert_eq!(join_within(delay), Err(TaskError::Shutdown));
        assert_eq!(
            pool.schedule_at_fixed_rate(|| (), ms(1), ms(1))
                .unwrap_err(),
            ScheduleError::Shutdown
        );
        assert!(!pool.is_terminated(), "a delayed one-shot is still waiting");
        clock.advance(ms(100));
        assert_eq!(join_within(one_shot), Ok("delayed one-shot ran"));
        assert_eq!(
            (rate_runs.load(SeqCst), delay_runs.load(SeqCst)),
            (2, 2),
            "no periodic run after shutdown"
        );
        assert!(pool.await_termination(JOIN_LIMIT));
    });
}

#[test]
fn shutdown_during_a_periodic_run_lets_it_finish_then_stops_it() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Arc::new(AtomicUsize::new(0));
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let r = runs.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    r.fetch_add(1, SeqCst);
                    entered_tx.send(()).unwrap();
                    release_rx.lock().unwrap().recv_timeout(JOIN_LIMIT).unwrap();
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let c = clock.clone();
        let advancer = thread::spawn(move || c.advance(ms(100)));
        entered_rx
            .recv_timeout(JOIN_LIMIT)
            .expect("the first run started");
        pool.shutdown();
        assert!(!f.is_done(), "the current run is still going");
        release_tx.send(()).unwrap();
        assert_eq!(join_within(f), Err(TaskError::Shutdown));
        advancer.join().unwrap();
        assert_eq!(
            runs.load(SeqCst),
            1,
            "the run in progress finished; none followed"
        );
        assert!(pool.await_termination(JOIN_LIMIT));
    });
}

#[test]
fn shutdown_now_hands_back_waiting_periodic_tasks() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let rate_runs = Arc::new(AtomicUsize::new(0));
        let delay_runs = Arc::new(AtomicUsize::new(0));
        let (a, b) = (rate_runs.clone(), delay_runs.clone());
        let rate = pool
            .schedule_at_fixed_rate(
                move || {
                    a.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let delay = pool
            .schedule_with_fixed_delay(
                move || {
                    b.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let one_shot = pool.schedule(|| (), Duration::from_secs(3600)).unwrap();
        clock.advance(ms(25));
        let pending = pool.shutdown_now();
        assert_eq!(pending.len(), 3);
        assert_eq!(pending.iter().filter(|p| p.is_periodic()).count(), 2);
        assert_eq!(join_within(rate), Err(TaskError::Cancelled));
        assert_eq!(join_within(delay), Err(TaskError::Cancelled));
        assert_eq!(join_within(one_shot), Err(TaskError::Cancelled));
        assert_eq!((rate_runs.load(SeqCst), delay_runs.load(SeqCst)), (2, 2));
        for task in pending {
            task.run(); // a handed-back periodic task runs once on this thread
        }
        assert_eq!((rate_runs.load(SeqCst), delay_runs.load(SeqCst)), (3, 3));
        assert!(pool.await_termination(JOIN_LIMIT));
        clock.advance(ms(100));
        assert_eq!(
            (rate_runs.load(SeqCst), delay_runs.load(SeqCst)),
            (3, 3),
            "not re-armed"
        );
    });
}

// ---- arguments and delay() --------------------------------------------------------------------

#[test]
fn zero_period_or_zero_delay_is_refused() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let handle = pool.handle();
        let opts = PeriodicOptions::new();
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
            pool.schedule_at_fixed_rate_with(|| (), zero, zero, opts)
                .unwrap_err(),
            ScheduleError::ZeroPeriod
        );
        assert_eq!(
            pool.schedule_with_fixed_delay_with(|| (), zero, zero, opts)
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

#![cfg(not(wheelpool_loom))]
//! Cancelling periodic tasks under the `ManualClock`: from inside the task, while waiting,
//! and racing the re-arm; a cancel that returned true is never followed by a new run.
//!
//! Helpers and conventions: see `manual_common`.

use crate::manual_common::*;

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
    // Ten thousand races: minutes on a busy machine. Each wait inside a race is bounded by
    // `JOIN_LIMIT`; the watchdog only asks that the races keep coming.
    bounded_with_progress(|progress| {
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
            progress.step();
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
    // As above: the watchdog asks for progress, not for ten thousand races in a fixed time.
    bounded_with_progress(|progress| {
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
            progress.step();
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

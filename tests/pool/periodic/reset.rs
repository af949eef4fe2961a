#![cfg(not(wheelpool_loom))]
//! `reset` / `reset_at` on `ScheduledFuture` and `CancelHandle`: a waiting task's next run
//! moves (later, earlier, into the past), a fixed-rate grid re-bases, a fixed delay moves only
//! its next run, and a task that is running, finished or cancelled cannot be reset.
//!
//! Times under the `ManualClock` are exact: every deadline here is a whole number of 1 ms ticks.
//! With a manual clock every schedule reaches the wheel through the timer thread's queue, so
//! the tests let it settle (`advance(ZERO)` or any advance) before the first reset.

use crate::manual_common::*;

/// A one-shot that reports the clock time (since `t0`) it ran at.
fn report_now(
    pool: &ScheduledThreadPool,
    clock: &ManualClock,
    delay: Duration,
) -> ScheduledFuture<Duration> {
    let (c, t0) = (clock.clone(), clock.now());
    pool.schedule(move || c.now() - t0, delay).unwrap()
}

#[test]
fn reset_later_moves_a_one_shot_back() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let f = report_now(&pool, &clock, ms(10));
        clock.advance(ms(5));
        assert!(f.reset(ms(20)));
        assert_eq!(f.delay(), ms(20));
        clock.advance(ms(19));
        assert!(
            !f.is_done(),
            "due at 25 ms, now 24 ms: the old 10 ms deadline is gone"
        );
        clock.advance(ms(1));
        assert!(f.is_done());
        assert_eq!(join_within(f), Ok(ms(25)));
        assert_eq!(pool.stats().completed, 1);
    });
}

#[test]
fn reset_earlier_brings_a_one_shot_forward() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let f = report_now(&pool, &clock, Duration::from_secs(3600));
        clock.advance(ms(3));
        assert!(f.reset(ms(4)));
        clock.advance(ms(3));
        assert!(!f.is_done());
        clock.advance(ms(1));
        assert_eq!(join_within(f), Ok(ms(7)));
    });
}

#[test]
fn reset_to_zero_or_the_past_makes_the_task_due_now() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let t0 = clock.now();
        let a = report_now(&pool, &clock, ms(100));
        let b = report_now(&pool, &clock, ms(100));
        clock.advance(ms(10));
        assert!(a.reset(Duration::ZERO));
        assert!(b.reset_at(t0)); // 10 ms ago
        clock.advance(Duration::ZERO); // time stands still: they run now, at 10 ms
        assert_eq!(join_within(a), Ok(ms(10)));
        assert_eq!(join_within(b), Ok(ms(10)));
    });
}

#[test]
fn reset_at_takes_instants_on_the_clock_time_line() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let t0 = clock.now();
        let f = report_now(&pool, &clock, ms(50));
        clock.advance(Duration::ZERO);
        assert!(f.reset_at(t0 + ms(30)));
        assert!(
            f.reset_at(t0 + ms(70)),
            "a waiting task can be reset again and again"
        );
        clock.advance(ms(69));
        assert!(!f.is_done());
        clock.advance(ms(1));
        assert_eq!(join_within(f), Ok(ms(70)));
    });
}

#[test]
fn a_fixed_rate_grid_rebases_at_the_new_time() {
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
        clock.advance(ms(25));
        assert_eq!(runs.times(), millis(&[10, 20]));
        assert!(f.reset(ms(2))); // the 30 ms run moves to 27 ms, and the grid with it
        clock.advance(ms(25)); // to 50 ms
        assert_eq!(runs.times(), millis(&[10, 20, 27, 37, 47]));
        assert!(f.reset(ms(13))); // at 50 ms the 57 ms run moves to 63 ms
        clock.advance(ms(25)); // to 75 ms
        assert_eq!(runs.times(), millis(&[10, 20, 27, 37, 47, 63, 73]));
        assert!(f.cancel());
    });
}

#[test]
fn a_fixed_delay_task_moves_only_its_next_run() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let (r, c) = (runs.clone(), clock.clone());
        let work = move || {
            r.record();
            c.advance(ms(1)); // each run takes 1 ms
        };
        let f = pool
            .schedule_with_fixed_delay(work, ms(10), ms(10))
            .unwrap();
        clock.advance(ms(25)); // runs at 10 (ends 11) and 21 (ends 22); next at 32
        assert_eq!(runs.times(), millis(&[10, 21]));
        assert!(f.reset(ms(20))); // now 25: next at 45
        clock.advance(ms(40)); // to 65
        assert_eq!(runs.times(), millis(&[10, 21, 45, 56]));
        assert!(f.cancel());
    });
}

#[test]
fn a_dynamic_rate_counts_from_the_reset_time() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let runs = Runs::new(&clock);
        let r = runs.clone();
        let f = pool
            .schedule_at_dynamic_rate(
                move || {
                    r.record();
                    Some(ms(10))
                },
                ms(10),
            )
            .unwrap();
        clock.advance(ms(15));
        assert!(f.reset(ms(1))); // the 20 ms run moves to 16 ms; later ones count from there
        clock.advance(ms(25)); // to 40
        assert_eq!(runs.times(), millis(&[10, 16, 26, 36]));
        assert!(f.cancel());
    });
}

#[test]
fn a_cancelled_or_finished_task_cannot_be_reset() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let cancelled = report_now(&pool, &clock, ms(10));
        let finished = report_now(&pool, &clock, ms(10));
        clock.advance(Duration::ZERO);
        assert!(cancelled.cancel());
        assert!(!cancelled.reset(ms(1)));
        assert!(!cancelled.cancel_handle().reset_at(clock.now()));
        clock.advance(ms(10));
        assert!(finished.is_done());
        assert!(!finished.reset(ms(1)));
        assert!(!finished.reset(Duration::ZERO));
        clock.advance(ms(100));
        assert_eq!(join_within(cancelled), Err(TaskError::Cancelled));
        assert_eq!(
            join_within(finished),
            Ok(ms(10)),
            "it ran once, at its deadline"
        );
        assert_eq!(pool.stats().pending, 0);
    });
}

#[test]
fn a_reset_then_cancel_frees_the_task() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let tokens = Arc::new(());
        let t = tokens.clone();
        let f = pool.schedule(move || drop(t), ms(10)).unwrap();
        clock.advance(Duration::ZERO);
        assert!(f.reset(ms(500)));
        assert!(f.cancel());
        assert_eq!(
            Arc::strong_count(&tokens),
            1,
            "the closure was dropped by cancel"
        );
        clock.advance(ms(1000));
        assert_eq!(join_within(f), Err(TaskError::Cancelled));
        assert_eq!(pool.stats().pending, 0);
    });
}

#[test]
fn a_running_task_cannot_be_reset() {
    bounded(|| {
        let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
        for periodic in [false, true] {
            let (started_tx, started) = mpsc::channel();
            let (release, wait) = mpsc::channel::<()>();
            let wait = Mutex::new(wait);
            let run = move || {
                let _ = started_tx.send(());
                let _ = wait.lock().unwrap().recv_timeout(JOIN_LIMIT);
            };
            let f = if periodic {
                pool.schedule_at_fixed_rate(run, Duration::ZERO, Duration::from_secs(3600))
                    .unwrap()
            } else {
                pool.schedule(run, Duration::ZERO).unwrap()
            };
            started.recv_timeout(JOIN_LIMIT).unwrap();
            assert!(!f.reset(ms(1)), "running (periodic: {periodic})");
            assert!(!f.cancel_handle().reset(Duration::from_secs(10)));
            release.send(()).unwrap();
            if periodic {
                assert!(f.cancel());
            } else {
                assert_eq!(join_within(f), Ok(()));
            }
        }
    });
}

#[test]
fn reset_from_a_cancel_handle_on_another_thread() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let f = report_now(&pool, &clock, ms(10));
        clock.advance(Duration::ZERO);
        let handle = f.cancel_handle();
        assert!(thread::spawn(move || handle.reset(ms(40))).join().unwrap());
        clock.advance(ms(39));
        assert!(!f.is_done());
        clock.advance(ms(1));
        assert_eq!(join_within(f), Ok(ms(40)));
    });
}

/// A task resets another one: `advance` sees the move even though no submission came with it.
#[test]
fn a_reset_from_inside_a_task_is_seen_by_advance() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        for _ in 0..20 {
            let t0 = clock.now();
            let c = clock.clone();
            let victim = pool.schedule(move || c.now() - t0, ms(100)).unwrap();
            let handle = victim.cancel_handle();
            let pusher = pool.schedule(move || handle.reset(ms(5)), ms(10)).unwrap();
            clock.advance(ms(50));
            assert_eq!(join_within(pusher), Ok(true));
            assert_eq!(join_within(victim), Ok(ms(15)), "ran at its new deadline");
        }
    });
}

/// Many timeouts, each reset at random times to random new delays: each runs exactly once, at
/// its last deadline (never early, never at an old deadline).
#[test]
fn random_resets_never_fire_early_or_at_a_stale_deadline() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 3);
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut tasks: Vec<(ScheduledFuture<Duration>, Duration)> = (0..200)
            .map(|_| {
                let d = ms(1 + rand(50));
                (report_now(&pool, &clock, d), d)
            })
            .collect();
        clock.advance(Duration::ZERO);
        let t0 = clock.now();
        for _ in 0..100 {
            for (f, deadline) in tasks.iter_mut() {
                if rand(4) == 0 {
                    let d = ms(rand(60));
                    if f.reset(d) {
                        *deadline = clock.now() - t0 + d;
                    } else {
                        assert!(f.is_done(), "only a task that ran refuses a reset");
                    }
                }
            }
            clock.advance(ms(rand(5)));
        }
        clock.advance(ms(100));
        for (f, deadline) in tasks {
            assert_eq!(join_within(f), Ok(deadline));
        }
    });
}

/// With the system clock: moving a one-hour timer to 10 ms wakes the sleeping timer thread.
#[test]
fn reset_earlier_wakes_the_timer_thread() {
    bounded(|| {
        let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
        let mut f = pool
            .schedule(Instant::now, Duration::from_secs(3600))
            .unwrap();
        // The direct path usually puts it in the wheel at once; retry while it is in transit.
        let mut moved = false;
        for _ in 0..1000 {
            let asked = Instant::now();
            if f.reset(ms(10)) {
                moved = true;
                let ran = f
                    .join_timeout(JOIN_LIMIT)
                    .expect("ran soon after the reset")
                    .unwrap();
                assert!(ran >= asked + ms(10), "never before the new deadline");
                break;
            }
            thread::yield_now();
        }
        assert!(moved, "the task reached the wheel");
    });
}

// ---- try_reset: why a reset did not happen ----------------------------------------------------

use wheelpool::ResetError;

#[test]
fn try_reset_says_running_done_or_cancelled() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        // Running: the task resets itself from inside its run.
        let me: Arc<OnceLock<CancelHandle>> = Arc::default();
        let m = me.clone();
        let f = pool
            .schedule(move || m.get().unwrap().try_reset(ms(5)), ms(10))
            .unwrap();
        me.set(f.cancel_handle()).unwrap();
        clock.advance(Duration::ZERO);
        assert_eq!(f.try_reset(ms(10)), Ok(()));
        assert_eq!(f.cancel_handle().try_reset_at(clock.now() + ms(10)), Ok(()));
        clock.advance(ms(10));
        let h = f.cancel_handle();
        assert_eq!(join_within(f), Ok(Err(ResetError::Running)));
        assert_eq!(h.try_reset(ms(1)), Err(ResetError::Done));
        assert_eq!(h.try_reset_at(clock.now()), Err(ResetError::Done));

        // A periodic task resetting itself mid-run is Running too; between runs it moves.
        let me: Arc<OnceLock<CancelHandle>> = Arc::default();
        let seen: Arc<Mutex<Vec<Result<(), ResetError>>>> = Arc::default();
        let (m, s) = (me.clone(), seen.clone());
        let beat = pool
            .schedule_with_fixed_delay(
                move || s.lock().unwrap().push(m.get().unwrap().try_reset(ms(1))),
                ms(10),
                ms(10),
            )
            .unwrap();
        me.set(beat.cancel_handle()).unwrap();
        clock.advance(ms(10));
        assert_eq!(*seen.lock().unwrap(), [Err(ResetError::Running)]);
        assert_eq!(beat.try_reset(ms(1)), Ok(()), "waiting again: it moves");
        assert!(beat.cancel());
        assert_eq!(beat.try_reset(ms(1)), Err(ResetError::Cancelled));

        // A panicked task is done; one stopped by shutdown is cancelled.
        let log = PanicLog::default();
        let quiet = log.pool(&clock, 1);
        let boom = quiet.schedule(|| -> u8 { panic!("boom") }, ms(1)).unwrap();
        clock.advance(ms(1));
        assert_eq!(boom.try_reset(ms(1)), Err(ResetError::Done));
        let rate = quiet.schedule_at_fixed_rate(|| (), ms(5), ms(5)).unwrap();
        let h = rate.cancel_handle();
        quiet.shutdown();
        assert_eq!(join_within(rate), Err(TaskError::Shutdown));
        assert_eq!(h.try_reset(ms(1)), Err(ResetError::Cancelled));
    });
}

/// A small xorshift: reproducible choices without a dependency.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What one task saw, in the order the resetting thread saw it.
#[derive(Default)]
struct Seen {
    ok: usize,
    running: usize,
    done: usize,
    cancelled: usize,
}

/// `try_reset` racing the firing, on the real clock with two workers and two resetting
/// threads. Every attempt is exactly one of Ok / Running / Done / Cancelled, and it matches
/// what ran:
/// - a task that had run before the attempt never answers Ok (one-shots run once);
/// - Done only once the run is over (its closure's count is visible), Ok never after
///   Running or Done (no going back), Cancelled only after a cancel;
/// - every task that was not cancelled runs exactly once, never before the deadline its last
///   Ok reset set; a cancel that returned true means it never runs.
#[test]
fn try_reset_racing_the_firing_accounts_for_every_attempt() {
    const TASKS: usize = 200;
    // A fine tick, so that deadlines a few hundred microseconds apart differ.
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .tick(Duration::from_micros(50))
        .build()
        .unwrap();
    let totals: Vec<Seen> = thread::scope(|scope| {
        let resetters: Vec<_> = (0..2u64)
            .map(|who| {
                let pool = &pool;
                scope.spawn(move || {
                    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (who + 1));
                    let mut total = Seen::default();
                    for i in 0..TASKS {
                        let ran = Arc::new(AtomicUsize::new(0));
                        let ran_at: Arc<OnceLock<Instant>> = Arc::default();
                        let (r, at) = (ran.clone(), ran_at.clone());
                        let first = Duration::from_micros(rng.below(1500));
                        let f = pool
                            .schedule(
                                move || {
                                    at.set(Instant::now()).unwrap();
                                    r.fetch_add(1, SeqCst);
                                },
                                first,
                            )
                            .unwrap();
                        let handle = f.cancel_handle();
                        let cancel_at = (i % 4 == 0).then(|| rng.below(20));
                        let mut cancel_won = None;
                        let mut last_ok: Option<Instant> = None;
                        let mut gone = false; // saw Running or Done
                        for attempt in 0..40 {
                            if cancel_at == Some(attempt) {
                                cancel_won = Some(f.cancel());
                            }
                            // Space the attempts out, so that some come after the firing.
                            let pause = Instant::now() + Duration::from_micros(rng.below(300));
                            while Instant::now() < pause {
                                std::hint::spin_loop();
                            }
                            let ran_before = ran.load(SeqCst);
                            let delay = match rng.below(4) {
                                0 => Duration::ZERO, // due now: races the firing at once
                                _ => Duration::from_micros(rng.below(300)),
                            };
                            let before = Instant::now();
                            let result = if attempt % 2 == 0 {
                                f.try_reset(delay)
                            } else {
                                handle.try_reset(delay)
                            };
                            match result {
                                Ok(()) => {
                                    total.ok += 1;
                                    assert_eq!(ran_before, 0, "task {i}: Ok after it ran");
                                    assert!(!gone, "task {i}: Ok after Running or Done");
                                    assert_ne!(
                                        cancel_won,
                                        Some(true),
                                        "task {i}: Ok after a cancel"
                                    );
                                    last_ok = Some(before + delay);
                                }
                                Err(ResetError::Running) => {
                                    total.running += 1;
                                    assert_ne!(
                                        cancel_won,
                                        Some(true),
                                        "task {i}: Running after a cancel"
                                    );
                                    gone = true;
                                }
                                Err(ResetError::Done) => {
                                    total.done += 1;
                                    assert_eq!(
                                        ran.load(SeqCst),
                                        1,
                                        "task {i}: Done before its run was over"
                                    );
                                    assert_ne!(cancel_won, Some(true), "task {i}");
                                    gone = true;
                                }
                                Err(ResetError::Cancelled) => {
                                    total.cancelled += 1;
                                    assert!(
                                        cancel_won.is_some(),
                                        "task {i}: Cancelled, nobody cancelled"
                                    );
                                }
                                Err(other) => panic!("task {i}: unexpected {other:?}"),
                            }
                        }
                        let outcome = join_within(f);
                        match cancel_won {
                            Some(true) => {
                                assert_eq!(outcome, Err(TaskError::Cancelled));
                                assert_eq!(
                                    ran.load(SeqCst),
                                    0,
                                    "task {i}: ran after cancel returned true"
                                );
                            }
                            Some(false) => {
                                assert_eq!(
                                    ran.load(SeqCst),
                                    1,
                                    "task {i}: cancel false, so it ran"
                                );
                            }
                            None => {
                                assert_eq!(outcome, Ok(()), "task {i}");
                                assert_eq!(ran.load(SeqCst), 1, "task {i}: ran once");
                            }
                        }
                        if let (Some(deadline), Some(&at)) = (last_ok, ran_at.get()) {
                            assert!(at >= deadline, "task {i}: ran before its reset deadline");
                        }
                    }
                    total
                })
            })
            .collect();
        resetters.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let attempts: usize = totals
        .iter()
        .map(|t| t.ok + t.running + t.done + t.cancelled)
        .sum();
    assert_eq!(
        attempts,
        2 * TASKS * 40,
        "each attempt counted exactly once"
    );
    let sum = |f: fn(&Seen) -> usize| totals.iter().map(f).sum::<usize>();
    println!(
        "ok {} running {} done {} cancelled {}",
        sum(|t| t.ok),
        sum(|t| t.running),
        sum(|t| t.done),
        sum(|t| t.cancelled)
    );
    assert!(
        sum(|t| t.ok) > 0 && sum(|t| t.done) > 0,
        "both sides of the race were met"
    );
    pool.shutdown();
    assert!(pool.await_termination(JOIN_LIMIT));
}

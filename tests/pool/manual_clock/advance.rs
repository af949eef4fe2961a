#![cfg(not(wheelpool_loom))]
//! `ManualClock` semantics for one-shot tasks: `advance` runs exactly what is due and returns
//! when it has run, tasks see `now()` equal to their deadline, `schedule_at` takes instants on
//! the clock's time line, several pools share one clock, and `advance` with nothing pending
//! only moves time.
//!
//! Every test body runs under a watchdog so a hang fails the test instead of stalling the run.

use crate::manual_common::*;

/// A one-shot that reports the clock time (since `t0`) it ran at.
fn report_now(
    pool: &ScheduledThreadPool,
    clock: &ManualClock,
    t0: Instant,
    delay: Duration,
) -> ScheduledFuture<Duration> {
    let c = clock.clone();
    pool.schedule(move || c.now() - t0, delay).unwrap()
}

#[test]
fn advance_runs_exactly_what_is_due() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 3);
        let t0 = clock.now();
        let a = report_now(&pool, &clock, t0, ms(10));
        let b1 = report_now(&pool, &clock, t0, ms(20));
        let b2 = report_now(&pool, &clock, t0, ms(20));
        let c = report_now(&pool, &clock, t0, ms(31));
        clock.advance(ms(9));
        assert!(!a.is_done(), "due at 10 ms, now 9 ms");
        clock.advance(ms(6));
        assert!(a.is_done() && !b1.is_done() && !b2.is_done() && !c.is_done());
        clock.advance(ms(15)); // to 30 ms: a deadline equal to now is due
        assert!(b1.is_done() && b2.is_done());
        assert!(!c.is_done(), "due at 31 ms, now 30 ms");
        assert_eq!(c.delay(), ms(1));
        clock.advance(ms(1));
        assert!(c.is_done());
        assert_eq!(c.delay(), Duration::ZERO);
        assert_eq!(join_within(a), Ok(ms(10)));
        assert_eq!(join_within(b1), Ok(ms(20)));
        assert_eq!(join_within(b2), Ok(ms(20)));
        assert_eq!(join_within(c), Ok(ms(31)));
        assert_eq!(pool.stats().completed, 4);
    });
}

#[test]
fn many_tasks_random_steps_exactly_the_due_set_has_run_after_each_advance() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 4);
        let t0 = clock.now();
        let mut seed: u64 = 0x1234_5678_9ABC_DEF1;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let tasks: Vec<(u64, ScheduledFuture<Duration>)> = (0..600)
            .map(|_| {
                let d = next() % 500;
                (d, report_now(&pool, &clock, t0, ms(d)))
            })
            .collect();
        while clock.now() - t0 < ms(520) {
            clock.advance(ms(next() % 37));
            let now = clock.now() - t0;
            for (d, f) in &tasks {
                assert_eq!(f.is_done(), ms(*d) <= now, "deadline {d} ms at {now:?}");
            }
        }
        for (d, f) in tasks {
            assert_eq!(
                join_within(f),
                Ok(ms(d)),
                "a task sees now() == its deadline"
            );
        }
    });
}

#[test]
fn tasks_see_now_equal_to_their_deadline_and_run_in_deadline_order() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 4);
        let t0 = clock.now();
        let order = Arc::new(Mutex::new(Vec::new()));
        // Deadlines 1..=40 ms, scheduled out of order.
        let mut delays: Vec<u64> = (1..=40).collect();
        delays.reverse();
        delays.swap(3, 17);
        let futures: Vec<_> = delays
            .iter()
            .map(|&d| {
                let (c, o) = (clock.clone(), order.clone());
                pool.schedule(
                    move || {
                        let seen = c.now() - t0;
                        o.lock().unwrap().push(d);
                        seen
                    },
                    ms(d),
                )
                .unwrap()
            })
            .collect();
        clock.advance(ms(50)); // one call steps through every deadline
        for (d, f) in delays.iter().zip(futures) {
            assert_eq!(join_within(f), Ok(ms(*d)));
        }
        assert_eq!(*order.lock().unwrap(), (1..=40).collect::<Vec<u64>>());
        assert_eq!(clock.now() - t0, ms(50));
    });
}

#[test]
fn schedule_at_takes_instants_on_the_clock_time_line() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let t0 = clock.now();
        let at = clock.now() + ms(25);
        let c = clock.clone();
        let f = pool.schedule_at(move || c.now(), at).unwrap();
        assert_eq!(f.delay(), ms(25));
        clock.advance(ms(24));
        assert!(!f.is_done());
        assert_eq!(f.delay(), ms(1));
        clock.advance(ms(1));
        assert_eq!(join_within(f), Ok(at));
        // An instant equal to now, or in the past, is due at once.
        let c = clock.clone();
        let now_task = pool.schedule_at(move || c.now(), clock.now()).unwrap();
        let c = clock.clone();
        let past_task = pool.schedule_at(move || c.now(), t0 + ms(3)).unwrap();
        clock.advance(Duration::ZERO); // settles without moving time
        assert!(now_task.is_done() && past_task.is_done());
        assert_eq!(join_within(now_task), Ok(t0 + ms(25)));
        assert_eq!(join_within(past_task), Ok(t0 + ms(25)));
    });
}

#[test]
fn deadlines_between_ticks_round_up_and_never_run_early() {
    bounded(|| {
        for tick_ms in [1u64, 10] {
            let clock = ManualClock::new();
            let pool = ScheduledThreadPool::builder()
                .threads(2)
                .tick(ms(tick_ms))
                .clock(clock.clone())
                .build()
                .unwrap();
            let t0 = clock.now();
            let deadline = Duration::from_micros(1_500);
            let f = report_now(&pool, &clock, t0, deadline);
            clock.advance(ms(1));
            assert!(!f.is_done(), "tick {tick_ms} ms: not due at 1 ms");
            // Step 0.5 ms at a time up to the next tick boundary; record when it has run.
            let mut ran_by = None;
            while clock.now() - t0 < ms(tick_ms.max(2)) {
                clock.advance(Duration::from_micros(500));
                if f.is_done() {
                    ran_by = Some(clock.now() - t0);
                    break;
                }
            }
            let ran_by = ran_by.expect("ran by the first tick boundary after its deadline");
            let seen = join_within(f).unwrap();
            assert!(
                seen >= deadline,
                "tick {tick_ms} ms: ran at {seen:?}, before its deadline"
            );
            assert!(seen <= ran_by);
            assert_eq!(
                ran_by,
                ms(tick_ms.max(2)),
                "tick {tick_ms} ms: rounds up to the next tick"
            );
        }
    });
}

#[test]
fn several_pools_on_one_clock_step_through_their_deadlines_together() {
    bounded(|| {
        let clock = ManualClock::new();
        let t0 = clock.now();
        let a = manual_pool(&clock, 2);
        clock.advance(ms(7)); // pool b's origin is 7 ms later than a's
        let b = manual_pool(&clock, 1);
        let log = Arc::new(Mutex::new(Vec::new()));
        let note = |pool: &ScheduledThreadPool, name: &'static str, delay: u64| {
            let (c, l) = (clock.clone(), log.clone());
            pool.schedule(
                move || {
                    let seen = c.now() - t0;
                    l.lock().unwrap().push((name, seen));
                    seen
                },
                ms(delay),
            )
            .unwrap()
        };
        let a1 = note(&a, "a1", 3); // at 10
        let b1 = note(&b, "b1", 5); // at 12
        let b2 = note(&b, "b2", 13); // at 20
        let a2 = note(&a, "a2", 23); // at 30
        clock.advance(ms(33)); // to 40
        assert_eq!(
            *log.lock().unwrap(),
            vec![
                ("a1", ms(10)),
                ("b1", ms(12)),
                ("b2", ms(20)),
                ("a2", ms(30))
            ]
        );
        for (f, at) in [(a1, 10), (b1, 12), (b2, 20), (a2, 30)] {
            assert_eq!(join_within(f), Ok(ms(at)));
        }
        // A pool that is gone no longer takes part; the clock still drives the others.
        drop(a);
        let b3 = note(&b, "b3", 5);
        clock.advance(ms(5));
        assert_eq!(join_within(b3), Ok(ms(45)));
    });
}

#[test]
fn advance_with_nothing_pending_only_moves_time() {
    bounded(|| {
        // No pool at all.
        let clock = ManualClock::new();
        let t0 = clock.now();
        clock.advance(ms(5));
        assert_eq!(clock.now() - t0, ms(5));
        clock.advance(Duration::ZERO);
        assert_eq!(clock.now() - t0, ms(5));
        // A clone is the same clock.
        let twin = clock.clone();
        twin.advance(ms(1));
        assert_eq!(clock.now() - t0, ms(6));
        // An idle pool, then one whose only task is far away.
        let pool = manual_pool(&clock, 2);
        clock.advance(ms(100));
        assert_eq!(clock.now() - t0, ms(106));
        let far = report_now(&pool, &clock, t0, Duration::from_secs(3600));
        clock.advance(Duration::from_secs(60));
        assert!(!far.is_done());
        assert_eq!(clock.now() - t0, ms(106) + Duration::from_secs(60));
        assert_eq!(pool.stats().pending, 1);
        clock.advance(Duration::from_secs(3540));
        assert_eq!(join_within(far), Ok(ms(106) + Duration::from_secs(3600)));
    });
}

#[test]
fn advance_from_inside_a_task_only_moves_time_and_the_outer_advance_carries_on() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let t0 = clock.now();
        let c = clock.clone();
        let jumper = pool
            .schedule(
                move || {
                    c.advance(ms(5)); // returns at once: it cannot wait for its own pool
                    c.now() - t0
                },
                ms(10),
            )
            .unwrap();
        let overtaken = report_now(&pool, &clock, t0, ms(12));
        let later = report_now(&pool, &clock, t0, ms(18));
        clock.advance(ms(20));
        assert_eq!(join_within(jumper), Ok(ms(15)));
        assert_eq!(
            join_within(overtaken),
            Ok(ms(15)),
            "due at 12, time had jumped to 15"
        );
        assert_eq!(join_within(later), Ok(ms(18)));
        assert_eq!(clock.now() - t0, ms(20));

        // A jump past the outer target: everything due by the new time has run on return.
        let c = clock.clone();
        let far_jumper = pool.schedule(move || c.advance(ms(50)), ms(5)).unwrap(); // at 25 -> 75
        let swept = report_now(&pool, &clock, t0, ms(40)); // at 60
        let beyond = report_now(&pool, &clock, t0, ms(60)); // at 80
        clock.advance(ms(10)); // target 30, but time ends at 75
        assert_eq!(clock.now() - t0, ms(75));
        assert_eq!(join_within(far_jumper), Ok(()));
        assert!(swept.is_done(), "due at 60 ms, now 75 ms");
        assert_eq!(join_within(swept), Ok(ms(75)));
        assert!(!beyond.is_done());
        clock.advance(ms(5));
        assert_eq!(join_within(beyond), Ok(ms(80)));
    });
}

#[test]
fn follow_ups_scheduled_by_tasks_run_within_the_same_advance() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let t0 = clock.now();
        let seen = Arc::new(Mutex::new(Vec::new()));
        // A chain: each link records its time and schedules the next 1 ms later, 10 links.
        fn link(
            h: wheelpool::Handle,
            c: ManualClock,
            t0: Instant,
            seen: Arc<Mutex<Vec<Duration>>>,
            left: u32,
        ) {
            seen.lock().unwrap().push(c.now() - t0);
            if left > 1 {
                let h2 = h.clone();
                h.execute(move || ()).unwrap(); // an immediate follow-up, too
                let f = h
                    .schedule(move || link(h2, c, t0, seen, left - 1), ms(1))
                    .unwrap();
                drop(f);
            }
        }
        let (h, c, s) = (pool.handle(), clock.clone(), seen.clone());
        let first = pool
            .schedule(move || link(h, c, t0, s, 10), ms(10))
            .unwrap();
        clock.advance(ms(30));
        assert_eq!(join_within(first), Ok(()));
        let expected: Vec<Duration> = (10..20).map(ms).collect();
        assert_eq!(*seen.lock().unwrap(), expected);
        assert_eq!(
            pool.stats().completed,
            10 + 9,
            "the links and the immediate follow-ups all ran"
        );
    });
}

#[test]
fn concurrent_advances_add_up_and_run_every_deadline_once() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let t0 = clock.now();
        let runs = Arc::new(AtomicUsize::new(0));
        let twice = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let futures: Vec<_> = (1..=100u64)
            .map(|d| {
                let (r, c, s, t) = (runs.clone(), clock.clone(), seen.clone(), twice.clone());
                pool.schedule(
                    move || {
                        r.fetch_add(1, SeqCst);
                        let mut s = s.lock().unwrap();
                        if s.contains(&d) {
                            t.store(true, SeqCst);
                        }
                        s.push(d);
                        c.now() - t0
                    },
                    ms(d),
                )
                .unwrap()
            })
            .collect();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let c = clock.clone();
                thread::spawn(move || (0..50).for_each(|_| c.advance(ms(1))))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        // Whatever the interleaving: no deadline ran twice, and each that ran saw its own time.
        assert!(!twice.load(SeqCst), "a task ran twice");
        let now = clock.now() - t0;
        for (d, mut f) in (1..=100u64).zip(futures) {
            if ms(d) <= now {
                assert_eq!(f.join_timeout(JOIN_LIMIT), Some(Ok(ms(d))));
            } else {
                assert!(!f.is_done(), "ran before its deadline");
            }
        }
        // Each of the 100 calls moved time by 1 ms: time moved by 100 ms in all, and every
        // deadline up to 100 ms has run.
        assert_eq!(
            now,
            ms(100),
            "concurrent advance calls lost some of their time"
        );
        assert_eq!(runs.load(SeqCst), 100);
    });
}

#[test]
fn cancelled_one_shots_do_not_run_when_their_time_comes() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Arc::new(AtomicUsize::new(0));
        let futures: Vec<_> = (1..=20u64)
            .map(|d| {
                let r = runs.clone();
                pool.schedule(move || r.fetch_add(1, SeqCst), ms(d))
                    .unwrap()
            })
            .collect();
        for f in futures.iter().step_by(2) {
            assert!(f.cancel());
        }
        clock.advance(ms(20));
        assert_eq!(runs.load(SeqCst), 10);
        for (i, f) in futures.into_iter().enumerate() {
            let r = join_within(f);
            if i % 2 == 0 {
                assert_eq!(r, Err(TaskError::Cancelled));
            } else {
                assert!(r.is_ok());
            }
        }
    });
}

/// A deadline of `Duration::MAX` saturates to the end of time; advancing the clock by
/// `Duration::MAX` must still return (it once spun for ever), and the task never runs.
#[test]
fn advancing_to_the_end_of_time_returns() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let f = pool
            .schedule(move || r.store(true, SeqCst), Duration::MAX)
            .unwrap();
        clock.advance(Duration::MAX);
        clock.advance(Duration::from_secs(1));
        assert!(!ran.load(SeqCst), "a Duration::MAX deadline never comes");
        assert!(
            f.cancel(),
            "so the task is still waiting and can be cancelled"
        );
    });
}

/// Far more pending tasks than the timer moves in one locked step (once a bug: past 64 Ki queued
/// submissions, 32 766 tasks ran with the clock up to 32 s past their deadline). Submitted
/// latest first, after a cancelled 1 ms timer left the timer thread asleep "until tick 1";
/// `advance` must still stand the clock exactly at each deadline while its tasks run.
#[test]
fn advance_stays_exact_with_a_million_pending_tasks() {
    bounded(|| {
        const N: u64 = 1_000_000;
        const DEADLINES: u64 = 1_000;
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let t0 = clock.now();
        assert!(pool.schedule(|| (), ms(1)).unwrap().cancel());
        let wrong = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        for i in (0..N).rev() {
            let due = ms(2 + i % DEADLINES);
            let (c, wrong, ran) = (clock.clone(), wrong.clone(), ran.clone());
            let task = move || {
                if c.now() - t0 != due {
                    wrong.fetch_add(1, SeqCst);
                }
                ran.fetch_add(1, SeqCst);
            };
            // Detached: the counters say what happened.
            drop(pool.schedule(task, due).unwrap());
        }
        assert_eq!(pool.stats().pending, N as usize);
        clock.advance(ms(DEADLINES / 2));
        let half = ran.load(SeqCst) as u64;
        assert_eq!(
            half,
            N / DEADLINES * (DEADLINES / 2 - 1),
            "due by 500 ms: 2..=500"
        );
        clock.advance(ms(DEADLINES));
        assert_eq!(
            ran.load(SeqCst) as u64,
            N,
            "every task ran before advance returned"
        );
        assert_eq!(
            wrong.load(SeqCst),
            0,
            "a task ran with the clock off its deadline"
        );
        assert_eq!(pool.stats().pending, 0);
    });
}

/// The default tick is 1 us: a task due at 1 500 ns runs at 2 us, not before, and one due at
/// 3 us runs when the clock reaches exactly 3 us (and sees that time).
#[test]
fn the_default_tick_keeps_deadlines_to_the_microsecond() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let t0 = clock.now();
        let odd = report_now(&pool, &clock, t0, Duration::from_nanos(1_500));
        let whole = report_now(&pool, &clock, t0, Duration::from_micros(3));
        clock.advance(Duration::from_nanos(1_500));
        assert!(!odd.is_done(), "rounded up to 2 us, not run at 1.5 us");
        clock.advance(Duration::from_nanos(500));
        assert!(odd.is_done(), "due at the 2 us tick");
        clock.advance(Duration::from_nanos(999));
        assert!(!whole.is_done(), "not due 1 ns before 3 us");
        clock.advance(Duration::from_nanos(1));
        assert_eq!(join_within(whole).unwrap(), Duration::from_micros(3));
        assert_eq!(join_within(odd).unwrap(), Duration::from_micros(2));
    });
}

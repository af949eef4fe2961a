//! Adversarial edges of time and capacity: `Duration::MAX`, instants far in the past and exactly
//! now, ticks of 1 ns, 1 us and 1 s, deadlines on every wheel level with one huge advance, and
//! `max_pending` saturated by eight threads at once.

#![cfg(not(wheelpool_loom))]

use crate::manual_common::*;

const HOUR: Duration = Duration::from_secs(3600);

fn pool_with_tick(clock: &ManualClock, tick: Duration) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(2)
        .tick(tick)
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// `Duration::MAX` (one-shot, reset target, dynamic delay) is accepted and never comes, even
/// after the clock is advanced to the end of time; the pool still settles and cancels work.
#[test]
fn duration_max_never_comes_even_at_the_end_of_time() {
    bounded(|| {
        for tick in [ms(1), Duration::from_micros(1), Duration::from_secs(1)] {
            let clock = ManualClock::new();
            let pool = pool_with_tick(&clock, tick);
            let never = pool.schedule(|| "ran", Duration::MAX).unwrap();
            let moved = pool.schedule(|| "ran", ms(5)).unwrap();
            assert!(moved.reset(Duration::MAX), "tick {tick:?}");
            let soon = pool.schedule(|| "soon", ms(5)).unwrap();
            clock.advance(Duration::from_secs(3600 * 24 * 365 * 100));
            assert_eq!(soon.join(), Ok("soon"));
            assert!(!never.is_done() && !moved.is_done(), "tick {tick:?}");
            clock.advance(Duration::MAX);
            assert!(!never.is_done(), "Duration::MAX came with tick {tick:?}");
            assert!(
                !moved.is_done(),
                "a reset to Duration::MAX came with tick {tick:?}"
            );
            assert!(never.cancel() && moved.cancel());
            assert_eq!(pool.stats().pending, 0);
        }
    });
}

/// The same at a 1 ns tick, the finest the builder accepts (and at 255 ns): a deadline of
/// `Duration::MAX` must still never come when the clock is advanced to the end of time.
#[test]
fn duration_max_never_comes_at_a_nanosecond_tick() {
    bounded(|| {
        // 1 ns, and 255 ns (a divisor of u64::MAX, as 3, 5, 15, 17 ... ns are): any tick
        // that divides u64::MAX makes the saturated deadline land on a tick.
        for tick in [255, 1] {
            let clock = ManualClock::new();
            let pool = pool_with_tick(&clock, Duration::from_nanos(tick));
            let never = pool.schedule(|| "ran", Duration::MAX).unwrap();
            clock.advance(Duration::MAX);
            assert!(
                !never.is_done(),
                "Duration::MAX came at the end of time ({tick} ns tick)"
            );
            assert!(never.cancel());
        }
    });
}

/// A fixed-rate task (period 100 years) on a 1 ns tick, then `advance(Duration::MAX)`: its
/// planned runs saturate at the end of time. `advance` must return (bounded by the watchdog),
/// and the task must not run more than once per planned slot.
#[test]
fn fixed_rate_task_at_the_end_of_time_with_a_nanosecond_tick_lets_advance_return() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = pool_with_tick(&clock, Duration::from_nanos(1));
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let century = Duration::from_secs(3600 * 24 * 365 * 100);
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    // A bound on the test's own runaway: past it the test fails, not hangs.
                    assert!(r.fetch_add(1, SeqCst) < 1_000, "runs at the end of time");
                },
                century,
                century,
            )
            .unwrap();
        clock.advance(Duration::MAX);
        // 584 years: five whole centuries fit; the saturated slot at the end may or may not run.
        let n = runs.load(SeqCst);
        assert!((5..=6).contains(&n), "{n} runs");
        assert!(f.cancel() || f.is_done());
    });
}

/// Instants far in the past and exactly now run at once, on both clocks, never before the
/// instant; `reset_at` into the past makes a waiting task due at once.
#[test]
fn instants_in_the_past_and_exactly_now() {
    bounded(|| {
        let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
        let long_ago = (1..=40)
            .rev()
            .find_map(|k| Instant::now().checked_sub(Duration::from_secs(1 << k)))
            .unwrap_or_else(Instant::now);
        let past = pool.schedule_at(Instant::now, long_ago).unwrap();
        let at = Instant::now();
        let exact = pool.schedule_at(Instant::now, at).unwrap();
        let later = pool.schedule(Instant::now, HOUR).unwrap();
        assert!(later.reset_at(long_ago));
        let mut past = past;
        assert!(past.join_timeout(JOIN_LIMIT).unwrap().unwrap() >= long_ago);
        let mut exact = exact;
        assert!(exact.join_timeout(JOIN_LIMIT).unwrap().unwrap() >= at);
        let mut later = later;
        assert!(
            later.join_timeout(JOIN_LIMIT).is_some(),
            "reset into the past never ran"
        );

        // The same on a manual clock: all run without the clock moving.
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(10));
        let pool = manual_pool(&clock, 2);
        let now = clock.now();
        let c = clock.clone();
        let past = pool
            .schedule_at(move || c.now(), now - Duration::from_secs(10))
            .unwrap();
        let c = clock.clone();
        let exact = pool.schedule_at(move || c.now(), now).unwrap();
        let c = clock.clone();
        let later = pool.schedule(move || c.now(), HOUR).unwrap();
        clock.advance(Duration::ZERO);
        assert!(later.reset_at(now - Duration::from_secs(5)));
        clock.advance(Duration::ZERO);
        assert_eq!(past.join(), Ok(now));
        assert_eq!(exact.join(), Ok(now));
        assert_eq!(later.join(), Ok(now));
    });
}

/// A 1 us tick on the real clock: 20 000 timers at random microsecond delays all run, none
/// before its deadline.
#[test]
fn microsecond_tick_never_early() {
    bounded(|| {
        let pool = ScheduledThreadPool::builder()
            .threads(2)
            .tick(Duration::from_micros(1))
            .build()
            .unwrap();
        let mut all = Vec::new();
        for i in 0..20_000u64 {
            let deadline = Instant::now() + Duration::from_micros(i * 7 % 20_000);
            all.push((deadline, pool.schedule_at(Instant::now, deadline).unwrap()));
        }
        for (i, (deadline, mut f)) in all.into_iter().enumerate() {
            let ran = f.join_timeout(JOIN_LIMIT).expect("lost").unwrap();
            assert!(ran >= deadline, "task {i} early by {:?}", deadline - ran);
        }
    });
}

/// A 1 s tick: deadlines round up to whole seconds of the pool's own grid (which starts when
/// the pool is built, here half a second into the clock), never down.
#[test]
fn second_tick_rounds_up_on_the_pools_grid() {
    bounded(|| {
        let clock = ManualClock::new();
        let c0 = clock.now();
        clock.advance(ms(500)); // the pool's origin is at 0.5 s on the clock
        let pool = pool_with_tick(&clock, Duration::from_secs(1));
        let at = |d: Duration| {
            let c = clock.clone();
            pool.schedule(move || c.now() - c0, d).unwrap()
        };
        let cases = [
            (ms(1), ms(1500)),
            (ms(1000), ms(1500)),
            (ms(1001), ms(2500)),
            (ms(2999), ms(3500)),
        ];
        let fs: Vec<_> = cases.iter().map(|&(d, _)| at(d)).collect();
        clock.advance(ms(999));
        assert!(
            fs.iter().all(|f| !f.is_done()),
            "ran before its rounded deadline"
        );
        clock.advance(ms(3000));
        for (f, (d, want)) in fs.into_iter().zip(cases) {
            assert_eq!(f.join(), Ok(want), "delay {d:?}");
        }
    });
}

/// Deadlines on every level of the wheel (2^k ms and its neighbours, k up to 42: ~139 years)
/// and one advance across all of them: each task sees `now()` exactly at its deadline, and
/// they run in deadline order.
#[test]
fn one_huge_advance_across_every_wheel_level_is_exact() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let t0 = clock.now();
        let order: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let mut fs = Vec::new();
        for k in 0..43u32 {
            for delta in [-1i64, 0, 1] {
                let d = ((1u64 << k) as i64 + delta).max(1) as u64;
                let (c, o) = (clock.clone(), order.clone());
                let f = pool
                    .schedule(
                        move || {
                            let now = c.now() - t0;
                            o.lock().unwrap().push(now);
                            now
                        },
                        ms(d),
                    )
                    .unwrap();
                fs.push((ms(d), f));
            }
        }
        clock.advance(ms((1 << 42) + 10));
        for (d, f) in fs {
            assert_eq!(f.join(), Ok(d));
        }
        let order = order.lock().unwrap();
        assert!(order.windows(2).all(|w| w[0] <= w[1]), "out of order");
    });
}

/// Eight threads race to schedule on a pool with `max_pending(1000)`: never more than 1000
/// accepted, every refused closure dropped at once, and once the racers are done the pool
/// takes exactly as many more as it has room for. Cancelling them all frees every place.
#[test]
fn max_pending_saturated_by_eight_threads_at_once() {
    bounded(|| {
        let max = 1000;
        let pool = Arc::new(
            ScheduledThreadPool::builder()
                .threads(2)
                .max_pending(max)
                .build()
                .unwrap(),
        );
        let made = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let accepted: Arc<Mutex<Vec<ScheduledFuture<()>>>> = Arc::default();
        let attempt = |pool: &ScheduledThreadPool| {
            made.fetch_add(1, SeqCst);
            let d = Dropped(dropped.clone());
            pool.schedule(move || drop(d), HOUR)
        };
        thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..400 {
                        match attempt(&pool) {
                            Ok(f) => accepted.lock().unwrap().push(f),
                            Err(e) => {
                                assert_eq!(e, ScheduleError::Saturated { max_pending: max })
                            }
                        }
                        assert!(accepted.lock().unwrap().len() <= max);
                    }
                });
            }
        });
        let raced = accepted.lock().unwrap().len();
        assert!(raced <= max);
        assert_eq!(
            made.load(SeqCst) - dropped.load(SeqCst),
            raced,
            "refused closures kept"
        );
        // Fill what the race left (a refusal may be spurious while another is backing out).
        while let Ok(f) = attempt(&pool) {
            accepted.lock().unwrap().push(f);
        }
        assert_eq!(accepted.lock().unwrap().len(), max);
        assert_eq!(pool.stats().pending, max);
        for f in accepted.lock().unwrap().drain(..) {
            assert!(f.cancel());
        }
        assert_eq!(pool.stats().pending, 0);
        assert_eq!(made.load(SeqCst), dropped.load(SeqCst));
        // Every place is free again.
        let again: Vec<_> = (0..max).map(|_| attempt(&pool).unwrap()).collect();
        assert!(attempt(&pool).is_err());
        drop(again);
    });
}

/// Periodic tasks admitted up to `max_pending` keep re-arming while the pool is full (a re-arm
/// is never refused), and a one-shot racing them is refused.
#[test]
fn saturated_pool_still_rearms_its_periodic_tasks() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = ScheduledThreadPool::builder()
            .threads(2)
            .max_pending(4)
            .clock(clock.clone())
            .build()
            .unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let fs: Vec<_> = (0..4)
            .map(|_| {
                let r = runs.clone();
                pool.schedule_at_fixed_rate(
                    move || {
                        r.fetch_add(1, SeqCst);
                    },
                    ms(1),
                    ms(1),
                )
                .unwrap()
            })
            .collect();
        assert!(matches!(
            pool.schedule(|| (), ms(1)),
            Err(ScheduleError::Saturated { .. })
        ));
        clock.advance(ms(50));
        assert_eq!(runs.load(SeqCst), 200);
        for f in fs {
            assert!(f.cancel());
        }
    });
}

struct Dropped(Arc<AtomicUsize>);
impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

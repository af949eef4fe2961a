//! Adversarial ManualClock tests: two threads advancing in uneven steps through two hundred
//! thousand one-shots, periodic tasks and follow-ups, while a third thread cancels and resets;
//! tasks resetting and cancelling themselves and each other; dynamic delays of zero and
//! `Duration::MAX`; bursts after an overrun. Every check is exact virtual time.
//!
//! Seeds: `ADVERSARY_SEED=<u64>` replays one run; the seed is printed at the start.

#![cfg(not(wheelpool_loom))]

use crate::manual_common::*;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::AtomicU64;

fn seed() -> u64 {
    std::env::var("ADVERSARY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// "Not run yet" in a task's record of the clock offset it saw.
const NOT_RUN: u64 = u64::MAX;

/// One one-shot of the big test.
struct Shot {
    /// Planned deadline, nanoseconds after t0 (for a reset task: the last successful reset's).
    due: AtomicU64,
    /// What `clock.now() - t0` read when it ran.
    saw: AtomicU64,
    runs: AtomicUsize,
    cancelled: AtomicBool,
    /// A reset on it returned true: `due` is only a lower bound (the reset computed its
    /// deadline from a clock that another thread may have moved meanwhile).
    reset: AtomicBool,
}

/// A follow-up's expected clock offset, and the one it saw (`NOT_RUN` until it runs).
type FollowUp = (u64, Arc<AtomicU64>);

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// 200 000 one-shots at random whole-millisecond deadlines over 3 s, 40 fixed-rate tasks with
/// odd periods, and every 97th one-shot scheduling two follow-ups (due now, and 1 ms later).
/// Two threads advance in uneven steps (zero included) at the same time, while a third cancels
/// a random tenth of the one-shots and resets another tenth. Checks:
/// - every one-shot that was not reset saw `now()` exactly equal to its deadline, every reset
///   one saw at least its new deadline; each ran at most once, and exactly once unless a cancel
///   returned true;
/// - after each `advance(by)` returns, every one-shot due by (clock before the call + `by`) that
///   nobody touched has run;
/// - follow-ups saw exactly their parent's time and one millisecond after it;
/// - each periodic task ran exactly at `k * period` for k = 1, 2, ... up to the final time.
#[test]
fn two_advancers_through_200k_tasks_periodics_follow_ups_cancels_and_resets() {
    let seed = seed();
    eprintln!("two_advancers seed {seed}");
    bounded(move || big(seed, 200_000));
}

fn big(seed: u64, n: usize) {
    let clock = ManualClock::new();
    let t0 = clock.now();
    let pool = Arc::new(manual_pool(&clock, 4));
    let mut rng = StdRng::seed_from_u64(seed);
    let end = 3_000u64; // ms
    let shots: Arc<Vec<Shot>> = Arc::new(
        (0..n)
            .map(|_| Shot {
                due: AtomicU64::new(0),
                saw: AtomicU64::new(NOT_RUN),
                runs: AtomicUsize::new(0),
                cancelled: AtomicBool::new(false),
                reset: AtomicBool::new(false),
            })
            .collect(),
    );
    // (expected offset, observed offset) of each follow-up.
    let follow_ups: Arc<Mutex<Vec<FollowUp>>> = Arc::default();
    let mut futures = Vec::with_capacity(n);
    for i in 0..n {
        let due = ms(rng.gen_range(1..=end));
        shots[i].due.store(nanos(due), SeqCst);
        let (s, c, fu, p) = (
            shots.clone(),
            clock.clone(),
            follow_ups.clone(),
            pool.handle(),
        );
        let f = pool
            .schedule(
                move || {
                    let saw = nanos(c.now() - t0);
                    s[i].saw.store(saw, SeqCst);
                    s[i].runs.fetch_add(1, SeqCst);
                    if i % 97 == 0 {
                        for (delay, extra) in [(Duration::ZERO, 0), (ms(1), nanos(ms(1)))] {
                            let seen = Arc::new(AtomicU64::new(NOT_RUN));
                            let (seen2, c2) = (seen.clone(), c.clone());
                            fu.lock().unwrap().push((saw + extra, seen));
                            let _detached = p
                                .schedule(move || seen2.store(nanos(c2.now() - t0), SeqCst), delay)
                                .unwrap();
                        }
                    }
                },
                due,
            )
            .unwrap();
        futures.push(f);
    }
    let futures = Arc::new(futures);
    // Periodic tasks: period 3, 7, 11, ... ms, first run one period in.
    let mut periodics = Vec::new();
    for k in 0..40u64 {
        let period = ms(3 + 4 * k);
        let runs: Arc<Mutex<Vec<u64>>> = Arc::default();
        let (r, c) = (runs.clone(), clock.clone());
        let f = pool
            .schedule_at_fixed_rate(
                move || r.lock().unwrap().push(nanos(c.now() - t0)),
                period,
                period,
            )
            .unwrap();
        periodics.push((period, runs, f));
    }
    let done = Arc::new(AtomicBool::new(false));
    thread::scope(|s| {
        for a in 0..2u64 {
            let (clock, shots, futures) = (clock.clone(), shots.clone(), futures.clone());
            let mut rng = StdRng::seed_from_u64(seed ^ (a + 1));
            s.spawn(move || {
                while clock.now() - t0 < ms(end + 20) {
                    let by = match rng.gen_range(0..10) {
                        0 => Duration::ZERO,
                        1 => Duration::from_micros(rng.gen_range(1..1_000)),
                        _ => ms(rng.gen_range(1..40)),
                    };
                    let before = clock.now() - t0;
                    clock.advance(by);
                    let bound = nanos(before + by);
                    // Spot-check: everything untouched and due by `bound` has run.
                    for _ in 0..200 {
                        let i = rng.gen_range(0..n);
                        let shot = &shots[i];
                        if i % 10 < 2 || shot.due.load(SeqCst) > bound {
                            continue; // touched by the cancel/reset thread, or not due yet
                        }
                        assert!(
                            futures[i].is_done(),
                            "task {i} due at {:?} not run after advancing to {:?} (seed {seed})",
                            Duration::from_nanos(shot.due.load(SeqCst)),
                            Duration::from_nanos(bound)
                        );
                    }
                }
            });
        }
        let (clock, shots, futures, done) =
            (clock.clone(), shots.clone(), futures.clone(), done.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ 0xc0ffee);
        s.spawn(move || {
            let mut order: Vec<usize> = (0..n).filter(|i| i % 10 < 2).collect();
            for j in (1..order.len()).rev() {
                order.swap(j, rng.gen_range(0..=j));
            }
            for i in order {
                let shot = &shots[i];
                if i % 10 == 0 {
                    let ran_before = shot.runs.load(SeqCst) > 0;
                    if futures[i].cancel() {
                        assert!(!ran_before, "task {i}: cancel true after its run");
                        shot.cancelled.store(true, SeqCst);
                    }
                } else {
                    let delay = ms(rng.gen_range(0..50));
                    let floor = nanos(clock.now() - t0 + delay);
                    let old = shot.due.swap(floor, SeqCst);
                    let ran_before = shot.runs.load(SeqCst) > 0;
                    if futures[i].reset(delay) {
                        assert!(!ran_before, "task {i}: reset true after its run");
                        shot.reset.store(true, SeqCst);
                    } else {
                        shot.due.store(old, SeqCst);
                    }
                }
            }
            done.store(true, SeqCst);
        });
    });
    assert!(done.load(SeqCst));
    // Everything left due by now runs in one more settle (resets may have landed after the
    // advancers stopped, up to 50 ms on).
    clock.advance(ms(60));
    let final_nanos = nanos(clock.now() - t0);
    for (i, shot) in shots.iter().enumerate() {
        let runs = shot.runs.load(SeqCst);
        let (due, saw) = (shot.due.load(SeqCst), shot.saw.load(SeqCst));
        if shot.cancelled.load(SeqCst) {
            assert_eq!(runs, 0, "task {i} ran after a cancel returned true");
            continue;
        }
        assert_eq!(
            runs, 1,
            "task {i} (due {due} ns) ran {runs} times (seed {seed})"
        );
        if shot.reset.load(SeqCst) {
            assert!(
                saw >= due,
                "reset task {i} ran at {saw} ns, before {due} ns"
            );
        } else {
            assert_eq!(saw, due, "task {i} saw the wrong time (seed {seed})");
        }
    }
    let cancelled = shots.iter().filter(|s| s.cancelled.load(SeqCst)).count();
    let reset = shots.iter().filter(|s| s.reset.load(SeqCst)).count();
    eprintln!(
        "two_advancers: {cancelled} cancelled, {reset} reset, {} follow-ups, final {:?}",
        follow_ups.lock().unwrap().len(),
        Duration::from_nanos(final_nanos)
    );
    // The cancel/reset thread raced the advancers: some of each must have landed.
    assert!(cancelled > 0 && reset > 0);
    for (k, (expected, seen)) in follow_ups.lock().unwrap().iter().enumerate() {
        assert_eq!(seen.load(SeqCst), *expected, "follow-up {k} (seed {seed})");
    }
    for (period, runs, f) in &periodics {
        let runs = runs.lock().unwrap().clone();
        let want: Vec<u64> = (1..=final_nanos / nanos(*period))
            .map(|k| k * nanos(*period))
            .collect();
        assert_eq!(runs, want, "periodic every {period:?} (seed {seed})");
        assert!(f.cancel());
    }
    assert_eq!(pool.stats().pending, 0, "{:?}", pool.stats());
}

/// A periodic task whose closure resets itself: the reset returns false (it is running) and
/// changes nothing. Another task resets it while it waits: it moves, and the fixed-rate grid
/// re-bases at the new time. A one-shot that resets itself gets false; one that cancels itself
/// gets false and ends Cancelled; a periodic task that cancels itself gets true and never runs
/// again.
#[test]
fn tasks_resetting_and_cancelling_themselves_and_each_other() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let me: Arc<OnceLock<CancelHandle>> = Arc::default();
        let self_reset = Arc::new(Mutex::new(Vec::new()));
        let (r, m, sr) = (runs.clone(), me.clone(), self_reset.clone());
        let p = pool
            .schedule_at_fixed_rate(
                move || {
                    r.record();
                    let h = m.get().unwrap();
                    sr.lock().unwrap().push(h.reset(ms(1)));
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        me.set(p.cancel_handle()).unwrap();
        clock.advance(ms(25)); // runs at 10, 20
        assert_eq!(runs.times(), [ms(10), ms(20)]);
        assert_eq!(*self_reset.lock().unwrap(), [false, false]);
        // From another task at 27 ms: move the 30 ms run to 27 + 8 = 35 ms; grid 35, 45, ...
        let h = p.cancel_handle();
        clock.advance(ms(2));
        let mover = pool
            .schedule(move || h.reset(ms(8)), Duration::ZERO)
            .unwrap();
        clock.advance(Duration::ZERO);
        assert_eq!(mover.join(), Ok(true));
        clock.advance(ms(30)); // to 57 ms
        assert_eq!(runs.times(), [ms(10), ms(20), ms(35), ms(45), ms(55)]);

        // One-shots acting on themselves.
        let slot: Arc<OnceLock<CancelHandle>> = Arc::default();
        let s2 = slot.clone();
        let shot = pool
            .schedule(move || s2.get().unwrap().reset(ms(5)), ms(3))
            .unwrap();
        slot.set(shot.cancel_handle()).unwrap();
        let slot2: Arc<OnceLock<CancelHandle>> = Arc::default();
        let s3 = slot2.clone();
        let quitter = pool
            .schedule(move || s3.get().unwrap().cancel(), ms(3))
            .unwrap();
        slot2.set(quitter.cancel_handle()).unwrap();
        clock.advance(ms(3));
        assert_eq!(
            shot.join(),
            Ok(false),
            "a running one-shot cannot reset itself"
        );
        assert_eq!(quitter.join(), Err(TaskError::Cancelled));

        // A periodic task cancelling itself on its third run.
        let count = Arc::new(AtomicUsize::new(0));
        let hs: Arc<OnceLock<CancelHandle>> = Arc::default();
        let said = Arc::new(Mutex::new(None));
        let (c, h2, said2) = (count.clone(), hs.clone(), said.clone());
        let stopper = pool
            .schedule_with_fixed_delay(
                move || {
                    if c.fetch_add(1, SeqCst) == 2 {
                        *said2.lock().unwrap() = Some(h2.get().unwrap().cancel());
                    }
                },
                ms(1),
                ms(1),
            )
            .unwrap();
        hs.set(stopper.cancel_handle()).unwrap();
        clock.advance(ms(20));
        assert_eq!(count.load(SeqCst), 3);
        assert_eq!(*said.lock().unwrap(), Some(true));
        assert_eq!(stopper.join(), Err(TaskError::Cancelled));
        assert!(p.cancel());
        assert_eq!(pool.stats().pending, 0);
    });
}

/// Two one-shots due at the same instant, each trying to reset the other by 5 ms: whichever
/// runs first may win (true) only if the other had not been handed out yet; a reset that
/// returned true moves the other to exactly +5 ms, and each runs exactly once.
#[test]
fn two_tasks_due_together_resetting_each_other() {
    bounded(|| {
        for _ in 0..50 {
            let clock = ManualClock::new();
            let pool = manual_pool(&clock, 2);
            let t0 = clock.now();
            let hs: Arc<[OnceLock<CancelHandle>; 2]> = Arc::default();
            let mk = |me: usize| {
                let (hs, c) = (hs.clone(), clock.clone());
                pool.schedule(
                    move || {
                        let won = hs[1 - me].get().unwrap().reset(ms(5));
                        (c.now() - t0, won)
                    },
                    ms(10),
                )
                .unwrap()
            };
            let (a, b) = (mk(0), mk(1));
            hs[0].set(a.cancel_handle()).unwrap();
            hs[1].set(b.cancel_handle()).unwrap();
            clock.advance(ms(20));
            let (ra, rb) = (a.join().unwrap(), b.join().unwrap());
            assert!(!(ra.1 && rb.1), "both resets won: {ra:?} {rb:?}");
            let (at_a, at_b) = (ra.0, rb.0);
            match (ra.1, rb.1) {
                (true, false) => assert_eq!((at_a, at_b), (ms(10), ms(15))),
                (false, true) => assert_eq!((at_a, at_b), (ms(15), ms(10))),
                _ => assert_eq!((at_a, at_b), (ms(10), ms(10))),
            }
        }
    });
}

/// Dynamic delays at the edges: `Some(ZERO)` runs again at the same instant (all before
/// `advance` returns), `Some(Duration::MAX)` waits forever (an advance of ten years does not
/// run it; a cancel frees it), `None` ends the task. Both kinds (from the end of the run and
/// from its planned start).
#[test]
fn dynamic_delays_of_zero_max_and_none() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 3);
        for rate in [false, true] {
            let runs = Runs::new(&clock);
            let r = runs.clone();
            let task = move || match r.record() {
                0..=4 => Some(Duration::ZERO),
                5 => Some(ms(3)),
                _ => None,
            };
            let f = if rate {
                pool.schedule_at_dynamic_rate(task, ms(2)).unwrap()
            } else {
                pool.schedule_with_dynamic_delay(task, ms(2)).unwrap()
            };
            clock.advance(ms(2));
            assert_eq!(
                runs.count(),
                6,
                "five zero delays replay at once (rate {rate})"
            );
            assert!(runs.times().iter().all(|&t| t == ms(2)));
            clock.advance(ms(3));
            assert_eq!(runs.count(), 7);
            assert_eq!(f.join(), Ok(()));

            let never = Runs::new(&clock);
            let n2 = never.clone();
            let f = {
                let task = move || {
                    n2.record();
                    Some(Duration::MAX)
                };
                if rate {
                    pool.schedule_at_dynamic_rate(task, ms(1)).unwrap()
                } else {
                    pool.schedule_with_dynamic_delay(task, ms(1)).unwrap()
                }
            };
            clock.advance(ms(1));
            assert_eq!(never.count(), 1);
            clock.advance(Duration::from_secs(10 * 365 * 24 * 3600));
            assert_eq!(never.count(), 1, "Duration::MAX came (rate {rate})");
            assert!(f.cancel());
            assert_eq!(f.join(), Err(TaskError::Cancelled));
        }
        assert_eq!(pool.stats().pending, 0);
    });
}

/// A fixed-rate task (Burst) whose run moves the clock 35 ms from inside (an overrun) replays
/// the three missed slots back to back and then keeps the grid, with 200 such tasks on four
/// workers overrunning at once.
#[test]
fn burst_after_overrun_replays_every_missed_slot_once() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 4);
        let t0 = clock.now();
        let mut all = Vec::new();
        for k in 0..200usize {
            let runs: Arc<Mutex<Vec<Duration>>> = Arc::default();
            let (r, c) = (runs.clone(), clock.clone());
            let f = pool
                .schedule_at_fixed_rate(
                    move || {
                        let mut r = r.lock().unwrap();
                        r.push(c.now() - t0);
                        // The first run of task 0 overruns by 35 ms of virtual time.
                        if k == 0 && r.len() == 1 {
                            c.advance(ms(35));
                        }
                    },
                    ms(10),
                    ms(10),
                )
                .unwrap();
            all.push((runs, f));
        }
        clock.advance(ms(10)); // 10 ms: every task runs; task 0 moves the clock to 45 ms
        let now = clock.now() - t0;
        assert!(now >= ms(45), "{now:?}");
        clock.advance(ms(100) - now); // to 100 ms
        for (k, (runs, f)) in all.iter().enumerate() {
            let runs = runs.lock().unwrap().clone();
            // Planned slots 10..=100 ms, ten runs, none twice, never before its slot.
            assert_eq!(runs.len(), 10, "task {k}: {runs:?}");
            for (j, at) in runs.iter().enumerate() {
                assert!(
                    *at >= ms(10 * (j as u64 + 1)),
                    "task {k} run {j} early: {runs:?}"
                );
            }
            assert!(f.cancel());
        }
    });
}

/// Two pools on one clock, and a task of the second registered pool schedules follow-ups on
/// the first (1 ms later, and due now). The clock must still stop at the follow-up's deadline:
/// it sees `now()` exactly 11 ms, not the next deadline of the other pool (20 ms). Both
/// registration orders.
#[test]
fn follow_ups_handed_to_another_pool_on_the_same_clock_run_at_their_deadline() {
    bounded(|| {
        for b_first in [false, true] {
            let clock = ManualClock::new();
            let t0 = clock.now();
            let (a, b) = if b_first {
                let b = manual_pool(&clock, 1);
                (manual_pool(&clock, 1), b)
            } else {
                let a = manual_pool(&clock, 1);
                (a, manual_pool(&clock, 1))
            };
            let seen: Arc<Mutex<Vec<(&str, Duration)>>> = Arc::default();
            let (hb, c, s) = (b.handle(), clock.clone(), seen.clone());
            let _a1 = a
                .schedule(
                    move || {
                        for (name, delay) in [("b-now", Duration::ZERO), ("b+1", ms(1))] {
                            let (c, s) = (c.clone(), s.clone());
                            let _f = hb
                                .schedule(
                                    move || s.lock().unwrap().push((name, c.now() - t0)),
                                    delay,
                                )
                                .unwrap();
                        }
                    },
                    ms(10),
                )
                .unwrap();
            let (c, s) = (clock.clone(), seen.clone());
            let _a2 = a
                .schedule(
                    move || s.lock().unwrap().push(("a20", c.now() - t0)),
                    ms(20),
                )
                .unwrap();
            clock.advance(ms(30));
            let mut seen = seen.lock().unwrap().clone();
            seen.sort_by_key(|&(_, at)| at);
            assert_eq!(
                seen,
                [("b-now", ms(10)), ("b+1", ms(11)), ("a20", ms(20))],
                "pool b registered first: {b_first}"
            );
        }
    });
}

/// `reset_at` an instant in the past on a fixed-rate task makes it due now (the docs), and its
/// grid re-bases at the new time: one run now, then one period later. It must not replay, as
/// "missed", the slots between that past instant and now that were never planned (a Burst of
/// every period since the instant). Checked for each missed-run policy.
#[test]
fn fixed_rate_reset_into_the_past_runs_once_now_not_a_burst_of_phantom_slots() {
    bounded(|| {
        for policy in [MissedTicks::Burst, MissedTicks::Skip, MissedTicks::Delay] {
            let clock = ManualClock::new();
            let t0 = clock.now();
            let pool = manual_pool(&clock, 2);
            let runs = Runs::new(&clock);
            let r = runs.clone();
            let f = pool
                .task()
                .missed_ticks(policy)
                .schedule_at_fixed_rate(
                    move || {
                        r.record();
                    },
                    ms(100),
                    ms(10),
                )
                .unwrap();
            clock.advance(ms(50));
            assert!(f.reset_at(t0), "{policy:?}: it was waiting");
            clock.advance(Duration::ZERO);
            let at_50 = runs.count();
            clock.advance(ms(10));
            assert_eq!(
                (at_50, runs.times().last().copied()),
                (1, Some(ms(60))),
                "{policy:?}: runs {:?}",
                runs.times()
            );
            assert!(f.cancel());
        }
    });
}

/// The same for a dynamic-rate task (next delay counted from the planned start): `reset_at` an
/// instant 50 ms in the past makes it due now; it must run once now and then 10 ms later, not
/// replay the phantom starts 10, 20, 30, 40 and 50 ms at once.
#[test]
fn dynamic_rate_reset_into_the_past_runs_once_now() {
    bounded(|| {
        let clock = ManualClock::new();
        let t0 = clock.now();
        let pool = manual_pool(&clock, 2);
        let runs = Runs::new(&clock);
        let r = runs.clone();
        let f = pool
            .schedule_at_dynamic_rate(
                move || {
                    r.record();
                    Some(ms(10))
                },
                ms(100),
            )
            .unwrap();
        clock.advance(ms(50));
        assert!(f.reset_at(t0));
        clock.advance(ms(10));
        assert_eq!(runs.times(), [ms(50), ms(60)]);
        assert!(f.cancel());
    });
}

/// A pool is dropped (with periodic tasks and waiting one-shots) and another is built on the
/// same clock while two threads keep advancing it: no advance hangs, and the surviving pool's
/// tasks still run exactly at their deadlines.
#[test]
fn pools_come_and_go_while_two_threads_advance() {
    bounded(|| {
        let clock = ManualClock::new();
        let stop = Arc::new(AtomicBool::new(false));
        // The advancers stop even if an assertion below fails (else the scope never ends).
        struct StopOnDrop(Arc<AtomicBool>);
        impl Drop for StopOnDrop {
            fn drop(&mut self) {
                self.0.store(true, SeqCst);
            }
        }
        thread::scope(|s| {
            let _stop_advancers = StopOnDrop(stop.clone());
            for _ in 0..2 {
                let (clock, stop) = (clock.clone(), stop.clone());
                s.spawn(move || {
                    while !stop.load(SeqCst) {
                        clock.advance(Duration::from_micros(700));
                    }
                });
            }
            for round in 0..30u64 {
                let pool = manual_pool(&clock, 2);
                let runs = Arc::new(AtomicUsize::new(0));
                for k in 0..20u64 {
                    let r = runs.clone();
                    let _beat = pool
                        .schedule_at_fixed_rate(
                            move || {
                                r.fetch_add(1, SeqCst);
                            },
                            ms(1),
                            ms(1 + k % 3),
                        )
                        .unwrap();
                }
                let c = clock.clone();
                let start = clock.now();
                let one = pool.schedule(move || c.now(), ms(2)).unwrap();
                if round % 2 == 0 {
                    let mut one = one;
                    let at = one
                        .join_timeout(JOIN_LIMIT)
                        .expect("one-shot lost")
                        .unwrap();
                    assert!(at >= start + ms(2), "early");
                }
                drop(pool); // mid-advance, with periodic tasks armed
            }
        });
    });
}

/// `advance` called from a worker of a *different* pool (here one on the system clock, as a
/// test harness might use) is not "from inside a task of this clock's pools": it must still
/// wait until the manual pool has run what is due.
#[test]
fn advance_from_a_thread_of_an_unrelated_pool_still_settles() {
    bounded(|| {
        let clock = ManualClock::new();
        let manual = manual_pool(&clock, 1);
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let _t = manual
            .schedule(
                move || {
                    thread::sleep(ms(20)); // a task that takes a while
                    r.store(true, SeqCst);
                },
                ms(10),
            )
            .unwrap();
        let driver = ScheduledThreadPool::builder().threads(1).build().unwrap();
        let c = clock.clone();
        let r = ran.clone();
        let seen = driver
            .schedule(
                move || {
                    c.advance(ms(10));
                    r.load(SeqCst)
                },
                Duration::ZERO,
            )
            .unwrap();
        assert_eq!(
            seen.join(),
            Ok(true),
            "advance returned before the due task ran"
        );
    });
}

/// 20 000 tasks scheduled from one thread and 20 000 from another (two shards) all come due at
/// 10 ms. Each task of the first set resets (even i) or cancels (odd i) its partner in the
/// other set (mirrored: X i meets Y n-1-i) while the timer thread is still handing the due
/// ones out. Whatever won: a reset
/// that returned true moved the partner to exactly 15 ms, one that returned false found it
/// already handed out (it ran at 10 ms); a cancel that returned true means the partner never
/// ran, one that returned false means it ran at 10 ms.
#[test]
fn due_tasks_resetting_and_cancelling_due_partners_in_another_shard() {
    bounded(|| {
        let n = 20_000;
        let clock = ManualClock::new();
        let t0 = clock.now();
        let pool = Arc::new(manual_pool(&clock, 4));
        let ys: Arc<Vec<OnceLock<CancelHandle>>> =
            Arc::new((0..n).map(|_| OnceLock::new()).collect());
        let saw: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(NOT_RUN)).collect());
        let (p2, c2, saw2) = (pool.clone(), clock.clone(), saw.clone());
        let y_futures = thread::spawn(move || {
            (0..n)
                .map(|i| {
                    let (c, s) = (c2.clone(), saw2.clone());
                    p2.schedule(move || s[i].store(nanos(c.now() - t0), SeqCst), ms(10))
                        .unwrap()
                })
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        for (i, f) in y_futures.iter().enumerate() {
            ys[i].set(f.cancel_handle()).unwrap();
        }
        let (p1, ys1) = (pool.clone(), ys.clone());
        let x_futures = thread::spawn(move || {
            (0..n)
                .map(|i| {
                    let ys = ys1.clone();
                    p1.schedule(
                        move || {
                            // Partners are mirrored: the first X handed out meets the Y that
                            // comes out last (still in the wheel), the last X an early Y.
                            let y = ys[n - 1 - i].get().unwrap();
                            if i % 2 == 0 {
                                y.reset(ms(5))
                            } else {
                                y.cancel()
                            }
                        },
                        ms(10),
                    )
                    .unwrap()
                })
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        clock.advance(ms(20));
        let (mut moved, mut stopped) = (0, 0);
        for (i, (x, y)) in x_futures
            .into_iter()
            .zip(y_futures.into_iter().rev())
            .enumerate()
        {
            let won = x.join().unwrap();
            let seen = saw[n - 1 - i].load(SeqCst);
            let y_end = y.join();
            if i % 2 == 0 {
                let want = if won { 15 } else { 10 };
                moved += usize::from(won);
                assert_eq!(seen, nanos(ms(want)), "pair {i}: reset said {won}");
                assert_eq!(y_end, Ok(()), "pair {i}");
            } else if won {
                stopped += 1;
                assert_eq!(seen, NOT_RUN, "pair {i}: cancelled, yet it ran");
                assert_eq!(y_end, Err(TaskError::Cancelled));
            } else {
                assert_eq!(
                    seen,
                    nanos(ms(10)),
                    "pair {i}: cancel said false, yet it never ran"
                );
            }
        }
        eprintln!("due partners: {moved} moved by reset, {stopped} stopped by cancel");
        assert_eq!(pool.stats().pending, 0);
    });
}

/// A reset (to the future) of each periodic kind while it waits: the next run moves to the new
/// time, and the runs after it follow the kind's rule from there (fixed rate: the grid
/// re-bases; fixed delay: a delay after each run; dynamic rate: counted from the new start;
/// dynamic delay: from the end of the run). Period / delay 10 ms, first run at 10 ms, reset at
/// 15 ms to 2 ms later: runs at 10, 17, 27, 37 for every kind.
#[test]
fn reset_of_each_periodic_kind_moves_the_next_run_and_the_rule_follows() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        for kind in 0..4 {
            let runs = Runs::new(&clock);
            let r = runs.clone();
            let f = match kind {
                0 => pool.schedule_at_fixed_rate(
                    move || {
                        r.record();
                    },
                    ms(10),
                    ms(10),
                ),
                1 => pool.schedule_with_fixed_delay(
                    move || {
                        r.record();
                    },
                    ms(10),
                    ms(10),
                ),
                2 => pool.schedule_at_dynamic_rate(
                    move || {
                        r.record();
                        Some(ms(10))
                    },
                    ms(10),
                ),
                _ => pool.schedule_with_dynamic_delay(
                    move || {
                        r.record();
                        Some(ms(10))
                    },
                    ms(10),
                ),
            }
            .unwrap();
            clock.advance(ms(15));
            assert!(f.reset(ms(2)), "kind {kind}");
            clock.advance(ms(25)); // to 40 ms after this kind's start
            let want: Vec<Duration> = [10, 17, 27, 37].map(ms).to_vec();
            assert_eq!(runs.times(), want, "kind {kind}");
            assert!(f.cancel());
        }
    });
}

/// Two threads advance while some tasks advance the clock from inside (which only moves
/// time): nothing runs before its deadline, every one-shot runs exactly once, and no advance
/// hangs.
#[test]
fn in_task_advances_racing_two_outer_advancers() {
    let seed = seed();
    eprintln!("in_task_advances seed {seed}");
    bounded(move || {
        let clock = ManualClock::new();
        let t0 = clock.now();
        let pool = manual_pool(&clock, 3);
        let mut rng = StdRng::seed_from_u64(seed);
        let n = 20_000;
        let mut all = Vec::with_capacity(n);
        for i in 0..n {
            let due = ms(rng.gen_range(1..2_000));
            let c = clock.clone();
            let jump = (i % 500 == 0).then(|| Duration::from_micros(rng.gen_range(1..5_000)));
            let f = pool
                .schedule(
                    move || {
                        let at = c.now() - t0;
                        if let Some(j) = jump {
                            c.advance(j);
                        }
                        at
                    },
                    due,
                )
                .unwrap();
            all.push((due, f));
        }
        thread::scope(|s| {
            for a in 0..2u64 {
                let clock = clock.clone();
                let mut rng = StdRng::seed_from_u64(seed ^ (a + 7));
                s.spawn(move || {
                    while clock.now() - t0 < ms(2_050) {
                        clock.advance(Duration::from_micros(rng.gen_range(0..20_000)));
                    }
                });
            }
        });
        for (i, (due, mut f)) in all.into_iter().enumerate() {
            let at = f
                .join_timeout(JOIN_LIMIT)
                .unwrap_or_else(|| panic!("task {i} lost (seed {seed})"))
                .unwrap();
            assert!(
                at >= due,
                "task {i} ran at {at:?}, due {due:?} (seed {seed})"
            );
        }
        assert_eq!(pool.stats().pending, 0);
    });
}

//! The watcher against liveness: a timer must fire whatever the watcher was doing when it was
//! set (parked on another tick, parked without a limit after polling a timer itself, parked
//! on a tick an hour away), on both sides of the 50 ms `WATCH_AHEAD` boundary, with one worker
//! or many, in several pools at once; and a pool must end (gracefully, by `shutdown_now`, or by
//! being dropped) while a worker watches. Waits are bounded by generous timeouts: a lost timer
//! shows up as a failure, never as a timed assertion on lateness.

#![cfg(not(wheelpool_loom))]

use crate::common;
use crate::common::{DropCounter, LONG};
use crate::manual_common;
use crate::manual_common::bounded;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::{ManualClock, ScheduledThreadPool, TaskError};

fn pool(threads: usize) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(threads)
        .build()
        .unwrap()
}

/// Schedules a timer `delay` out and waits for it; fails if it is lost or early.
fn fire(pool: &ScheduledThreadPool, delay: Duration, what: &str) {
    let deadline = Instant::now() + delay;
    let mut f = pool.schedule(Instant::now, delay).unwrap();
    let ran = f
        .join_timeout(LONG)
        .unwrap_or_else(|| panic!("{what}: timer {delay:?} lost"))
        .unwrap();
    assert!(ran >= deadline, "{what}: early by {:?}", deadline - ran);
}

/// A lone timer at a time, 1 and 8 workers: each follows one the watcher (or the timer
/// thread) just took out, so the watcher is parked without a limit ("the tick has come") or
/// on a stale tick when the next is set. Delays of 0 to 3 ms, with and without a pause after
/// the previous run (so workers are mid-search or asleep when the next timer goes in).
#[test]
fn a_lone_timer_always_fires_after_the_previous_one() {
    let _serial = crate::serial();
    bounded(|| {
        for threads in [1, 8] {
            let pool = pool(threads);
            for i in 0..150u64 {
                if i % 3 == 0 {
                    thread::sleep(Duration::from_micros(i * 13 % 2_000));
                }
                let delay = Duration::from_micros(i * 211 % 3_000);
                fire(&pool, delay, &format!("{threads} workers, timer {i}"));
            }
        }
    });
}

/// Chains of timers, each scheduled by the task before it from its worker (into that worker's
/// home shard) 0-2 ms out: the worker that set it goes idle right after and becomes the
/// watcher of the tick it just set, or of a stale one. 1, 2 and 5 workers, three chains each.
#[test]
fn chains_of_timers_set_from_the_worker_that_then_watches() {
    let _serial = crate::serial();
    bounded(|| {
        for threads in [1, 2, 5] {
            let pool = Arc::new(pool(threads));
            let done = Arc::new(AtomicUsize::new(0));
            for chain in 0..3u64 {
                link(pool.handle(), done.clone(), chain, 0);
            }
            assert!(
                common::wait_until(LONG, || done.load(SeqCst) >= 3),
                "{threads} workers: a chain stopped ({} of 3 done)",
                done.load(SeqCst)
            );
            assert_eq!(done.load(SeqCst), 3, "{threads} workers: a link ran early");
        }
    });
}

/// Schedules link `i` of `chain`; the last link counts the chain done. A link that runs early
/// ends its chain and counts it done 1 000 times (so the wait ends and the check fails).
fn link(handle: wheelpool::Handle, done: Arc<AtomicUsize>, chain: u64, i: u64) {
    const LINKS: u64 = 200;
    let delay = Duration::from_micros((i * 397 + chain * 131) % 2_000);
    let deadline = Instant::now() + delay;
    let h = handle.clone();
    // Detached: dropping the future does not cancel the task.
    let _detached = handle
        .schedule(
            move || {
                if Instant::now() < deadline {
                    done.fetch_add(1_000, SeqCst);
                } else if i + 1 == LINKS {
                    done.fetch_add(1, SeqCst);
                } else {
                    link(h, done, chain, i + 1);
                }
            },
            delay,
        )
        .unwrap();
}

/// Both CPUs kept busy by spinning threads while four threads wait for lone short timers:
/// woken threads wait for a CPU, so the watcher often finds the tick it watched already come
/// (and parks until nudged) and the timer thread is late to re-announce. Every timer still
/// fires, none early.
#[test]
fn lone_timers_fire_while_every_cpu_is_busy() {
    let _serial = crate::serial();
    bounded(|| {
        let pool = Arc::new(pool(3));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        thread::scope(|s| {
            for _ in 0..2 {
                let stop = stop.clone();
                s.spawn(move || {
                    let end = Instant::now() + Duration::from_secs(5);
                    while !stop.load(SeqCst) && Instant::now() < end {
                        std::hint::spin_loop();
                    }
                });
            }
            let waiters: Vec<_> = (0..4u64)
                .map(|t| {
                    let pool = pool.clone();
                    s.spawn(move || {
                        for i in 0..60u64 {
                            let delay = Duration::from_micros((i * 211 + t * 89) % 3_000);
                            fire(&pool, delay, &format!("busy CPUs, thread {t}, timer {i}"));
                        }
                    })
                })
                .collect();
            for w in waiters {
                let ok = w.join();
                stop.store(true, SeqCst);
                ok.unwrap();
            }
        });
    });
}

/// Deadlines just inside, at and just outside `WATCH_AHEAD` (50 ms): inside, the timer thread
/// nudges the watcher at once; outside, it parks until 50 ms before the deadline and nudges
/// then. Also two at once: the far one set first, the near one after it, and the reverse.
#[test]
fn deadlines_around_the_watch_ahead_boundary_fire() {
    let _serial = crate::serial();
    bounded(|| {
        let us = Duration::from_micros;
        for threads in [1, 8] {
            let pool = Arc::new(pool(threads));
            // Warm up: the workers have been through one tick and one of them watches.
            fire(&pool, us(500), "warm-up");
            for delay in [49_000, 49_999, 50_000, 50_001, 51_000, 50_500] {
                fire(&pool, us(delay), &format!("{threads} workers"));
            }
            for (first, second) in [(51_000, 49_000), (49_000, 51_000), (50_001, 1_000)] {
                let a = pool.schedule(Instant::now, us(first)).unwrap();
                let b = pool.schedule(Instant::now, us(second)).unwrap();
                for (mut f, d) in [(a, first), (b, second)] {
                    let what = format!("{threads} workers, pair ({first}, {second}): {d} us");
                    let ran = f
                        .join_timeout(LONG)
                        .unwrap_or_else(|| panic!("{what} lost"));
                    assert!(ran.is_ok(), "{what}: {ran:?}");
                }
            }
        }
    });
}

/// A timer an hour away (the timer thread parks until 50 ms before it and the watcher, if it
/// read that tick, until the hour), then a 1 ms timer, a 60 ms timer, and the hour timer reset
/// to 2 ms: each must fire. Repeated, so the far deadline is also met by a watcher that has
/// just polled the previous short timer itself.
#[test]
fn short_timers_after_one_an_hour_away_fire() {
    let _serial = crate::serial();
    bounded(|| {
        for threads in [1, 2, 8] {
            let pool = pool(threads);
            for round in 0..8u64 {
                let hour = pool
                    .schedule(Instant::now, Duration::from_secs(3600))
                    .unwrap();
                // Let the timer thread park on the hour (or 50 ms before it) and the workers
                // go idle; no wait depends on this pause.
                thread::sleep(Duration::from_micros(500 + round * 700));
                let what = format!("{threads} workers, round {round}");
                fire(&pool, Duration::from_millis(1), &what);
                if round % 4 == 0 {
                    fire(&pool, Duration::from_millis(60), &what);
                }
                let deadline = Instant::now() + Duration::from_millis(2);
                assert!(
                    hour.reset(Duration::from_millis(2)),
                    "{what}: hour timer waiting"
                );
                let mut hour = hour;
                let ran = hour
                    .join_timeout(LONG)
                    .unwrap_or_else(|| panic!("{what}: hour timer reset to 2 ms lost"))
                    .unwrap();
                assert!(ran >= deadline, "{what}: reset timer early");
            }
        }
    });
}

/// Fixed-rate tasks at 1 ms on 1 and 3 workers for a while: they keep running (at least a
/// tenth of the expected count, a loose bound that only a stuck task misses), and never more
/// often than the clock allows (a run never starts early, so by the time the cancelled task's
/// future ends there have been at most `elapsed / period` runs). A run already under way when
/// `cancel` returns finishes first (a preempted worker may count it well after the cancel), so
/// the runs are counted once the future has ended, and none may follow.
#[test]
fn fixed_rate_at_one_millisecond_keeps_running_and_is_never_ahead() {
    let _serial = crate::serial();
    bounded(|| {
        for threads in [1, 3] {
            let pool = pool(threads);
            let start = Instant::now();
            let period = Duration::from_millis(1);
            let (runs, f) = common::counting_fixed_rate(&pool, period);
            assert!(
                common::wait_until(LONG, || runs.load(SeqCst) >= 30),
                "{threads} workers: stuck at {} runs",
                runs.load(SeqCst)
            );
            thread::sleep(Duration::from_millis(300));
            assert!(f.cancel());
            let mut f = f;
            assert_eq!(
                f.join_timeout(LONG),
                Some(Err(TaskError::Cancelled)),
                "{threads} workers: the cancelled task did not end"
            );
            let n = runs.load(SeqCst);
            let elapsed = start.elapsed();
            let most = (elapsed.as_micros() / period.as_micros()) as usize;
            assert!(n <= most, "{threads} workers: {n} runs in {elapsed:?}");
            assert!(n >= 30, "{threads} workers: {n} runs");
            // Several periods later (a sentinel timer, not a sleep): no run came after the end.
            let mut sentinel = pool.schedule(|| (), 5 * period).unwrap();
            assert_eq!(sentinel.join_timeout(LONG), Some(Ok(())));
            assert_eq!(runs.load(SeqCst), n, "{threads} workers: ran after cancel");
        }
    });
}

/// Graceful shutdown while a worker watches: one-shots due 10 to 80 ms later all still run,
/// periodic tasks stop, `await_termination` returns true, and every closure is dropped.
#[test]
fn graceful_shutdown_while_a_worker_watches() {
    let _serial = crate::serial();
    bounded(|| {
        for threads in [1, 2, 4] {
            let pool = pool(threads);
            let drops = DropCounter::new();
            let beats = Arc::new(AtomicUsize::new(0));
            let b = beats.clone();
            let token = drops.token();
            let beat = pool
                .schedule_at_fixed_rate(
                    move || {
                        let _keep = &token;
                        b.fetch_add(1, SeqCst);
                    },
                    Duration::from_millis(2),
                    Duration::from_millis(7),
                )
                .unwrap();
            assert!(common::wait_until(LONG, || beats.load(SeqCst) >= 2));
            let later: Vec<_> = (1..=8u64)
                .map(|i| {
                    let token = drops.token();
                    let delay = Duration::from_millis(10 * i);
                    let deadline = Instant::now() + delay;
                    let f = pool
                        .schedule(
                            move || {
                                let _keep = token;
                                Instant::now()
                            },
                            delay,
                        )
                        .unwrap();
                    (f, deadline)
                })
                .collect();
            pool.shutdown();
            assert!(pool.await_termination(LONG), "{threads} workers: no end");
            for (i, (f, deadline)) in later.into_iter().enumerate() {
                let ran = f.join().unwrap_or_else(|e| panic!("one-shot {i}: {e:?}"));
                assert!(ran >= deadline, "one-shot {i} early");
            }
            assert!(
                beat.is_done(),
                "{threads} workers: periodic task not stopped"
            );
            assert!(
                !beat.cancel(),
                "{threads} workers: periodic task still cancellable"
            );
            drop(beat);
            drop(pool);
            assert_eq!(drops.dropped(), 9, "{threads} workers: closures dropped");
        }
    });
}

/// `shutdown_now` and drop while a worker watches a tick 40 ms out (after a 1 ms timer the
/// watcher or the timer thread polled): both return, hand back or drop every waiting task once.
#[test]
fn shutdown_now_and_drop_while_a_worker_watches() {
    let _serial = crate::serial();
    bounded(|| {
        for round in 0..24usize {
            let threads = 1 + round % 4;
            let pool = pool(threads);
            let drops = DropCounter::new();
            fire(&pool, Duration::from_millis(1), "warm-up");
            let runs = Arc::new(AtomicUsize::new(0));
            let mut futures = Vec::new();
            for delay in [Duration::from_millis(40), common::HOUR] {
                let (token, r) = (drops.token(), runs.clone());
                let task = move || {
                    drop(token);
                    r.fetch_add(1, SeqCst);
                };
                futures.push(pool.schedule(task, delay).unwrap());
            }
            thread::sleep(Duration::from_micros(200 * round as u64));
            if round % 2 == 0 {
                let back = pool.shutdown_now();
                // The 40 ms timer runs first only on a machine stalled for 40 ms; it may then
                // still be running here: its count is read once the pool has terminated.
                assert!(pool.await_termination(LONG));
                let ran = runs.load(SeqCst);
                assert_eq!(back.len() + ran, 2, "round {round}: handed back or ran");
                drop(back);
            }
            drop(pool);
            assert_eq!(drops.dropped(), 2, "round {round}: closures dropped");
            let ran = runs.load(SeqCst);
            let cancelled = futures
                .into_iter()
                .map(|f| f.join())
                .filter(|r| *r == Err(TaskError::Cancelled))
                .count();
            assert_eq!(cancelled + ran, 2, "round {round}: futures");
        }
    });
}

/// Four pools at once, 1 to 4 workers each, two threads per pool each waiting for its own
/// short timers: every timer fires in its own pool (the pools' watchers and timer threads are
/// independent). One pool is dropped half way; the others carry on.
#[test]
fn several_pools_with_their_own_watchers() {
    let _serial = crate::serial();
    bounded(|| {
        let pools: Vec<Arc<ScheduledThreadPool>> = [1, 3, 4].map(|n| Arc::new(pool(n))).into();
        let doomed = Arc::new(pool(2));
        let wait_for_timers = |pool: Arc<ScheduledThreadPool>, p: usize, t: u64, n: u64| {
            move || {
                for i in 0..n {
                    let delay = Duration::from_micros((i * 173 + t * 59) % 2_500);
                    fire(&pool, delay, &format!("pool {p}, thread {t}, timer {i}"));
                }
            }
        };
        thread::scope(|s| {
            for (p, pool) in pools.iter().enumerate() {
                for t in 0..2u64 {
                    s.spawn(wait_for_timers(pool.clone(), p, t, 80));
                }
            }
            for t in 0..2u64 {
                s.spawn(wait_for_timers(doomed.clone(), 9, t, 30));
            }
            s.spawn(move || {
                // Dropped (threads joined) while the other pools' timers come and go.
                assert!(common::wait_until(LONG, || Arc::strong_count(&doomed) == 1));
                drop(doomed);
            });
        });
        drop(pools);
    });
}

/// A manual-clock pool has no watcher: time moves only when the clock is advanced, and every
/// task runs at exactly its deadline on the clock, never at a real-time tick a watcher would
/// have parked on.
#[test]
fn a_manual_clock_pool_stays_exact() {
    let _serial = crate::serial();
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_common::manual_pool(&clock, 3);
        let start = clock.now();
        let futures: Vec<_> = (1..=40u64)
            .map(|i| {
                let c = clock.clone();
                let delay = Duration::from_millis(i * 3);
                (
                    pool.schedule(move || c.now() - start, delay).unwrap(),
                    delay,
                )
            })
            .collect();
        // Real time passes well beyond the first deadlines: nothing may run.
        thread::sleep(Duration::from_millis(20));
        assert!(
            futures.iter().all(|(f, _)| !f.is_done()),
            "ran on real time"
        );
        for step in 1..=120u64 {
            clock.advance(Duration::from_millis(1));
            for (f, delay) in &futures {
                let due = *delay <= Duration::from_millis(step);
                assert_eq!(f.is_done(), due, "at {step} ms: task due at {delay:?}");
            }
        }
        for (f, delay) in futures {
            assert_eq!(f.join(), Ok(delay));
        }
    });
}

/// Graceful shutdown at a random moment while 1 ms periodic tasks re-arm and one-shots 0-3 ms
/// out come due, through the watcher and the timer thread, 40 rounds on 1-4 workers: the pool
/// always ends, every accepted one-shot ran exactly once, every periodic task ended, and every
/// closure was dropped once.
#[test]
fn graceful_shutdown_races_periodic_tasks_and_due_one_shots() {
    let _serial = crate::serial();
    bounded(|| {
        for round in 0..40u64 {
            let threads = 1 + (round % 4) as usize;
            let pool = pool(threads);
            let drops = DropCounter::new();
            let beats = Arc::new(AtomicUsize::new(0));
            let periodic: Vec<_> = (0..3)
                .map(|k| {
                    let (b, token) = (beats.clone(), drops.token());
                    pool.schedule_at_fixed_rate(
                        move || {
                            let _keep = &token;
                            b.fetch_add(1, SeqCst);
                        },
                        Duration::from_micros(300 * k),
                        Duration::from_millis(1),
                    )
                    .unwrap()
                })
                .collect();
            let ran = Arc::new(AtomicUsize::new(0));
            let shots: Vec<_> = (0..20u64)
                .map(|i| {
                    let (r, token) = (ran.clone(), drops.token());
                    let delay = Duration::from_micros((i * 149 + round * 37) % 3_000);
                    pool.schedule(
                        move || {
                            let _keep = token;
                            r.fetch_add(1, SeqCst);
                        },
                        delay,
                    )
                    .unwrap()
                })
                .collect();
            thread::sleep(Duration::from_micros(round * 61 % 2_500));
            pool.shutdown();
            assert!(pool.await_termination(LONG), "round {round}: no end");
            assert_eq!(
                ran.load(SeqCst),
                shots.len(),
                "round {round}: one-shots ran"
            );
            for (i, f) in shots.into_iter().enumerate() {
                assert_eq!(f.join(), Ok(()), "round {round}: one-shot {i}");
            }
            for (k, p) in periodic.iter().enumerate() {
                assert!(p.is_done(), "round {round}: periodic task {k} still alive");
            }
            drop(periodic);
            drop(pool);
            assert_eq!(drops.dropped(), 23, "round {round}: closures dropped");
        }
    });
}

//! Stress tests: many threads scheduling, cancelling and executing against a small pool, with
//! every task's fate and every captured value's drop counted; and a burst of one-shot timers
//! that all share one deadline.
//!
//! Sizes keep the default `cargo test` fast. `WHEELPOOL_STRESS_FULL=1` runs the large versions
//! (1M timers, a longer mixed run); build with `--release` for those.

#![cfg(not(wheelpool_loom))]

use rand::{Rng, SeedableRng};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::{ManualClock, ScheduleError, ScheduledFuture, ScheduledThreadPool, TaskError};

/// Upper bound for anything that should happen "soon": only decides how long a broken run
/// takes to fail.
const LONG: Duration = Duration::from_secs(60);

fn full() -> bool {
    std::env::var_os("WHEELPOOL_STRESS_FULL").is_some_and(|v| v != "0")
}

/// Polls `cond` until it holds (true) or `timeout` passes (false).
fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while !cond() {
        if Instant::now() >= end {
            return cond();
        }
        thread::yield_now();
    }
    true
}

// ---- mixed producers ----------------------------------------------------------------------

/// Everything that happened to one task.
#[derive(Default)]
struct Record {
    /// Runs by a pool worker.
    ran: AtomicUsize,
    /// Runs of the closure handed back by `shutdown_now` (run by the test itself).
    returned: AtomicUsize,
    /// `cancel()` calls that returned true.
    cancelled: AtomicUsize,
    /// `cancel()` calls that returned false on a task whose future then said `Cancelled`: it
    /// was running (a one-shot's run cannot be stopped, its value is dropped), or handed back.
    cancel_came_late: AtomicUsize,
    /// Schedules refused with `ScheduleError::Shutdown`.
    rejected: AtomicUsize,
    /// Drops of the value the closure captured.
    drops: AtomicUsize,
}

/// Captured by every closure: counts its own drop.
struct Captured(Arc<Record>);

impl Drop for Captured {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, Ordering::SeqCst);
    }
}

thread_local! {
    /// Set while the test runs closures that `shutdown_now` handed back.
    static RUNNING_RETURNED: Cell<bool> = const { Cell::new(false) };
}

fn closure_for(rec: &Arc<Record>) -> impl FnOnce() + Send + 'static {
    let captured = Captured(rec.clone());
    move || {
        let rec = &captured.0;
        if RUNNING_RETURNED.with(Cell::get) {
            rec.returned.fetch_add(1, Ordering::SeqCst);
        } else {
            rec.ran.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Counts of how the tasks ended, for the report and the sanity checks.
#[derive(Debug, Default)]
struct Fates {
    ran: usize,
    cancelled: usize,
    /// `cancel()` returned false because the run had begun; the pool counts it as cancelled
    /// (its future says so) as well as completed.
    cancelled_during_run: usize,
    returned: usize,
    rejected: usize,
}

/// One producer: schedules (delays 0-20 ms), executes and cancels at random until `until`;
/// producer 0 then calls `shutdown_now` while the others still go, and runs what it returns.
fn producer(
    pool: Arc<ScheduledThreadPool>,
    id: u64,
    until: Instant,
    stopped: Arc<AtomicBool>,
) -> Vec<Arc<Record>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5EED ^ id);
    let mut records = Vec::new();
    let mut live: Vec<(Arc<Record>, ScheduledFuture<()>)> = Vec::new();
    loop {
        if id == 0 && Instant::now() >= until {
            stopped.store(true, Ordering::SeqCst);
            let returned = pool.shutdown_now();
            RUNNING_RETURNED.with(|r| r.set(true));
            for task in returned {
                task.run();
            }
            RUNNING_RETURNED.with(|r| r.set(false));
            break;
        }
        if id != 0 && stopped.load(Ordering::SeqCst) && rng.gen_bool(0.05) {
            break; // a few more schedules after the stop, to race it; then leave
        }
        match rng.gen_range(0..10) {
            0..=3 => {
                let rec = Arc::new(Record::default());
                let delay = Duration::from_micros(rng.gen_range(0..=20_000));
                match pool.schedule(closure_for(&rec), delay) {
                    Ok(f) => live.push((rec.clone(), f)),
                    Err(e) => {
                        assert_eq!(e, ScheduleError::Shutdown);
                        rec.rejected.fetch_add(1, Ordering::SeqCst);
                    }
                }
                records.push(rec);
            }
            4..=5 => {
                let rec = Arc::new(Record::default());
                if let Err(e) = pool.execute(closure_for(&rec)) {
                    assert_eq!(e, ScheduleError::Shutdown);
                    rec.rejected.fetch_add(1, Ordering::SeqCst);
                }
                records.push(rec);
            }
            6..=8 if !live.is_empty() => {
                let (rec, f) = live.swap_remove(rng.gen_range(0..live.len()));
                if f.cancel() {
                    rec.cancelled.fetch_add(1, Ordering::SeqCst);
                    assert!(f.is_cancelled());
                    assert_eq!(f.join(), Err(TaskError::Cancelled));
                } else {
                    // Running, finished, or handed back by shutdown_now: it must say which.
                    let result = f.join();
                    assert!(
                        matches!(result, Ok(()) | Err(TaskError::Cancelled)),
                        "{result:?}"
                    );
                    if result.is_err() {
                        rec.cancel_came_late.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            _ => {
                // Detach a future: the task still runs.
                if !live.is_empty() && rng.gen_bool(0.3) {
                    drop(live.swap_remove(rng.gen_range(0..live.len())));
                }
            }
        }
    }
    drop(live);
    records
}

#[test]
fn producers_schedule_cancel_and_execute_then_shutdown_now() {
    let run_for = if full() {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(2)
    };
    let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
    let stopped = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + run_for;
    let started = Instant::now();
    let producers: Vec<_> = (0..4)
        .map(|id| {
            let (pool, stopped) = (pool.clone(), stopped.clone());
            thread::spawn(move || producer(pool, id, until, stopped))
        })
        .collect();
    let records: Vec<Arc<Record>> = producers
        .into_iter()
        .flat_map(|p| p.join().unwrap())
        .collect();
    assert!(
        pool.await_termination(LONG),
        "the pool terminates after shutdown_now"
    );
    // The pool's own counts, read once everything ended: each worker counts its runs in a cell
    // of its own (one writer, no locked instruction), which must still add up exactly.
    let stats = pool.stats();
    drop(Arc::try_unwrap(pool).expect("only the test holds the pool now"));

    let mut fates = Fates::default();
    for (i, rec) in records.iter().enumerate() {
        let ran = rec.ran.load(Ordering::SeqCst);
        let returned = rec.returned.load(Ordering::SeqCst);
        let cancelled = rec.cancelled.load(Ordering::SeqCst);
        let rejected = rec.rejected.load(Ordering::SeqCst);
        let late = rec.cancel_came_late.load(Ordering::SeqCst);
        let what = format!(
            "task {i}: ran {ran}, returned {returned}, cancelled {cancelled}, rejected {rejected}, \
             cancel came late {late}"
        );
        assert!(
            ran <= 1 && returned <= 1 && cancelled <= 1 && rejected <= 1,
            "{what}"
        );
        // Exactly one fate. These are one-shots: a cancel that returns true found the task
        // waiting, so it never runs; one that lands during the run returns false, the run
        // finishes and its value is dropped (the future says Cancelled).
        assert_eq!(ran + returned + cancelled + rejected, 1, "{what}");
        assert!(late == 0 || ran + returned == 1, "{what}");
        assert_eq!(
            rec.drops.load(Ordering::SeqCst),
            1,
            "{what}: captured value drops"
        );
        fates.ran += ran;
        fates.returned += returned;
        fates.rejected += rejected;
        fates.cancelled += cancelled;
        fates.cancelled_during_run += usize::from(late == 1 && ran == 1);
    }
    assert_eq!(
        (
            stats.completed,
            stats.running,
            stats.pending,
            stats.panicked
        ),
        (fates.ran as u64, 0, 0, 0),
        "every run a worker made returned normally and was counted once: {stats:?}, {fates:?}"
    );
    let cancelled = fates.cancelled + fates.cancelled_during_run + fates.returned;
    assert_eq!(
        stats.cancelled, cancelled as u64,
        "cancelled (before or during the run) or handed back: {stats:?}, {fates:?}"
    );
    eprintln!(
        "stress: {} tasks in {:.2?}: {fates:?}",
        records.len(),
        started.elapsed()
    );
    assert!(
        fates.ran > 0 && fates.cancelled > 0,
        "the mix exercised runs and cancels: {fates:?}"
    );
}

// ---- one deadline, many timers ------------------------------------------------------------

fn timer_count() -> usize {
    if full() {
        1_000_000
    } else {
        200_000
    }
}

/// Schedules `n` one-shots at `at` (through `schedule`), each bumping its own hit counter and
/// capturing a drop-counted value; returns the counters.
fn schedule_burst(
    pool: &ScheduledThreadPool,
    n: usize,
    at: Instant,
    drops: &Arc<AtomicUsize>,
) -> Arc<Vec<AtomicU8>> {
    struct Token(Arc<AtomicUsize>);
    impl Drop for Token {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let hits: Arc<Vec<AtomicU8>> = Arc::new((0..n).map(|_| AtomicU8::new(0)).collect());
    for i in 0..n {
        let (hits, token) = (hits.clone(), Token(drops.clone()));
        let f = pool
            .schedule_at(
                move || {
                    let _token = &token;
                    hits[i].fetch_add(1, Ordering::Relaxed);
                },
                at,
            )
            .unwrap();
        drop(f); // detached: it still runs
    }
    hits
}

fn assert_each_fired_once(hits: &[AtomicU8]) {
    let mut wrong = hits
        .iter()
        .enumerate()
        .filter(|(_, h)| h.load(Ordering::Relaxed) != 1);
    if let Some((i, h)) = wrong.next() {
        panic!("timer {i} fired {} times", h.load(Ordering::Relaxed));
    }
}

/// Every timer goes through the wheel (time stands still while they are scheduled), all into
/// the same slot; one `advance` fires them all.
#[test]
fn many_timers_with_one_deadline_fire_exactly_once_manual_clock() {
    let n = timer_count();
    let clock = ManualClock::new();
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .clock(clock.clone())
        .build()
        .unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let hits = schedule_burst(&pool, n, clock.now() + Duration::from_millis(10), &drops);
    let scheduled = started.elapsed();
    assert_eq!(pool.stats().pending, n);
    clock.advance(Duration::from_millis(10)); // returns once every due task has run
    let fired = started.elapsed();
    assert_each_fired_once(&hits);
    assert_eq!(pool.stats().completed, n as u64);
    assert_eq!(pool.stats().pending, 0);
    assert_eq!(
        drops.load(Ordering::Relaxed),
        n,
        "every closure dropped after its run"
    );
    eprintln!("stress: {n} timers, one deadline (manual clock): scheduled in {scheduled:.2?}, all fired after {fired:.2?}");
}

/// The same with the system clock and the timer thread's real timed sleep.
#[test]
fn many_timers_with_one_deadline_fire_exactly_once_system_clock() {
    let n = timer_count() / 4;
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let at = started + Duration::from_millis(200);
    let hits = schedule_burst(&pool, n, at, &drops);
    assert!(
        wait_until(LONG, || pool.stats().completed == n as u64),
        "fired: {:?}",
        pool.stats()
    );
    assert!(Instant::now() >= at);
    assert_each_fired_once(&hits);
    assert!(wait_until(LONG, || drops.load(Ordering::Relaxed) == n));
    eprintln!(
        "stress: {n} timers, one deadline (system clock): all fired after {:.2?}",
        started.elapsed()
    );
}

// ---- run counts under many producers ------------------------------------------------------

/// Four producers execute and schedule one-shots, one in seven of which panics, while a reader
/// takes `stats()` snapshots: each worker counts its runs in a cell of its own, so every
/// snapshot shows at most one run in progress per worker and counts that never go down, and
/// after a graceful shutdown the counts equal what the closures saw, exactly.
#[test]
fn runs_that_panic_or_return_from_many_producers_are_counted_exactly() {
    const WORKERS: usize = 2;
    let per_producer: usize = if full() { 200_000 } else { 20_000 };
    let pool = Arc::new(
        ScheduledThreadPool::builder()
            .threads(WORKERS)
            .panic_handler(|_| {}) // expected panics: keep the test's output quiet
            .build()
            .unwrap(),
    );
    let returned = Arc::new(AtomicUsize::new(0));
    let panicked = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (pool, done) = (pool.clone(), done.clone());
        thread::spawn(move || {
            let (mut completed, mut panics, mut snapshots) = (0, 0, 0u64);
            while !done.load(Ordering::SeqCst) {
                let s = pool.stats();
                assert!(s.running <= WORKERS, "more runs than workers: {s:?}");
                assert!(s.completed >= completed && s.panicked >= panics, "{s:?}");
                (completed, panics) = (s.completed, s.panicked);
                snapshots += 1;
            }
            snapshots
        })
    };
    let producers: Vec<_> = (0..4u64)
        .map(|id| {
            let (pool, returned, panicked) = (pool.clone(), returned.clone(), panicked.clone());
            thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(0xC0_07 ^ id);
                for i in 0..per_producer {
                    let (returned, panicked) = (returned.clone(), panicked.clone());
                    let body = move || {
                        if i % 7 == 0 {
                            panicked.fetch_add(1, Ordering::SeqCst);
                            panic!("expected");
                        }
                        returned.fetch_add(1, Ordering::SeqCst);
                    };
                    if rng.gen_bool(0.5) {
                        pool.execute(body).unwrap();
                    } else {
                        let delay = Duration::from_micros(rng.gen_range(0..=2_000));
                        pool.schedule(body, delay).unwrap().detach();
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    pool.shutdown(); // waiting one-shots still run
    assert!(pool.await_termination(LONG), "the pool terminates");
    done.store(true, Ordering::SeqCst);
    let snapshots = reader.join().unwrap();

    let s = pool.stats();
    let (returned, panicked) = (
        returned.load(Ordering::SeqCst),
        panicked.load(Ordering::SeqCst),
    );
    assert_eq!(returned + panicked, 4 * per_producer, "every task ran once");
    assert_eq!(
        (s.completed, s.panicked, s.cancelled, s.running, s.pending),
        (returned as u64, panicked as u64, 0, 0, 0),
        "{s:?}"
    );
    assert!(snapshots > 0);
}

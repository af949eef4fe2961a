//! The watcher (an idle worker that polls the due wheel shards itself at the timer thread's
//! tick) against exactness: no task lost, run twice, run early, or started after
//! `shutdown_now` returned, while the watcher and the timer thread both take due tasks out of
//! the wheels. Each test keeps workers idle between short timers, so a watcher is parked on the
//! very tick the timers come due.

#![cfg(not(wheelpool_loom))]

use crate::common;
use crate::common::LONG;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::{ScheduleError, ScheduledFuture, ScheduledThreadPool};

/// A tiny deterministic generator (no dependency), one per thread.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}

/// What became of one task.
#[derive(Default)]
struct Slot {
    runs: AtomicUsize,
    drops: AtomicUsize,
    ran_at: Mutex<Option<Instant>>,
}

/// Captured by a task: counts its own drop.
struct DropMark(Arc<Slot>);

impl Drop for DropMark {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, SeqCst);
    }
}

fn counted_task(slot: &Arc<Slot>) -> impl FnOnce() + Send + 'static {
    let mark = DropMark(slot.clone());
    move || {
        let now = Instant::now();
        let slot = &mark.0;
        *slot.ran_at.lock().unwrap() = Some(now);
        slot.runs.fetch_add(1, SeqCst);
    }
}

/// One task as its scheduling thread saw it.
struct Record {
    slot: Arc<Slot>,
    future: ScheduledFuture<()>,
    /// Earliest instant it may start (the deadline of its last successful schedule or reset).
    not_before: Instant,
    cancelled: bool,
}

/// Schedules a task `delay` from now; returns its record.
fn schedule(pool: &ScheduledThreadPool, delay: Duration) -> Record {
    let slot = Arc::new(Slot::default());
    let not_before = Instant::now() + delay;
    let future = pool.schedule(counted_task(&slot), delay).unwrap();
    Record {
        slot,
        future,
        not_before,
        cancelled: false,
    }
}

/// Six threads each schedule 400 timers 0-5 ms out on a pool with idle workers; each timer is
/// then left alone, cancelled at once, reset earlier or later (also to zero), or cancelled a
/// little later from a list of older ones. At the end every task ran exactly once or was
/// cancelled exactly once (the `cancel()` that returned true), never both; none ran before
/// the deadline of its last successful schedule or reset; every captured value was dropped
/// exactly once.
#[test]
fn churn_of_short_timers_runs_or_cancels_each_exactly_once() {
    for threads in [1, 3, 8] {
        churn_round(threads, 6, 400);
    }
}

fn churn_round(workers: usize, producers: u64, per_producer: u64) {
    let pool = shared_pool(workers);
    let records: Vec<Record> = thread::scope(|s| {
        let handles: Vec<_> = (0..producers)
            .map(|t| {
                let pool = pool.clone();
                s.spawn(move || churn_producer(&pool, t, per_producer))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    for r in &records {
        if !r.cancelled {
            let slot = &r.slot;
            assert!(
                common::wait_until(LONG, || slot.runs.load(SeqCst) > 0),
                "{workers} workers: a timer that was not cancelled never ran"
            );
        }
    }
    // The pool's own counts agree: nothing pending, one completion per run, one cancellation
    // per successful cancel (the watcher's takes must not be lost or counted twice), plus one
    // per cancel that met a run already under way: that cancel returned false and the run went
    // on (it counts as a run above), but the task ends Cancelled and the pool counts it so.
    let ran = records.iter().filter(|r| !r.cancelled).count() as u64;
    let cancelled_mid_run = records
        .iter()
        .filter(|r| !r.cancelled && r.future.is_cancelled())
        .count() as u64;
    let cancelled = records.len() as u64 - ran + cancelled_mid_run;
    // Waits for `cancelled` too: a run's end counts its completion before its cancellation.
    assert!(
        common::wait_until(LONG, || {
            let st = pool.stats();
            st.pending == 0 && st.running == 0 && st.completed == ran && st.cancelled == cancelled
        }),
        "{workers} workers: stats {:?}, expected {ran} completed, {cancelled} cancelled \
         ({cancelled_mid_run} of them while running)",
        pool.stats()
    );
    let st = pool.stats();
    assert_eq!(st.cancelled, cancelled, "{workers} workers: {st:?}");
    assert_eq!(st.panicked, 0);
    let Ok(pool) = Arc::try_unwrap(pool) else {
        panic!("the producers still hold the pool")
    };
    pool.shutdown();
    assert!(pool.await_termination(LONG), "{workers} workers: no end");
    for (i, r) in records.iter().enumerate() {
        let runs = r.slot.runs.load(SeqCst);
        let expected = usize::from(!r.cancelled);
        assert_eq!(runs, expected, "{workers} workers, task {i}: runs");
        assert!(r.future.is_done(), "{workers} workers, task {i}: not done");
        if let Some(at) = *r.slot.ran_at.lock().unwrap() {
            assert!(
                at >= r.not_before,
                "{workers} workers, task {i}: ran {:?} early",
                r.not_before - at
            );
        }
    }
    drop(pool);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.slot.drops.load(SeqCst), 1, "task {i}: drops of captures");
    }
}

fn churn_producer(pool: &ScheduledThreadPool, t: u64, n: u64) -> Vec<Record> {
    let mut rng = Lcg(t * 7919 + 17);
    let mut done = Vec::new();
    let mut older: Vec<Record> = Vec::new();
    for _ in 0..n {
        let delay = Duration::from_micros(rng.next(5_000));
        let mut r = schedule(pool, delay);
        match rng.next(6) {
            0 => r.cancelled = r.future.cancel(),
            1 | 2 => {
                let to = Duration::from_micros(rng.next(5_000));
                let not_before = Instant::now() + to;
                if r.future.reset(to) {
                    r.not_before = not_before;
                }
            }
            _ => {}
        }
        if rng.next(4) == 0 {
            older.push(r);
        } else {
            done.push(r);
        }
        if let Some(mut old) = take_if_any(&mut older, &mut rng) {
            let again = old.future.cancel();
            assert!(!(old.cancelled && again), "cancelled twice");
            old.cancelled |= again;
            done.push(old);
        }
        if rng.next(8) == 0 {
            // Let the workers go idle now and then, so one of them watches the next tick.
            thread::sleep(Duration::from_micros(rng.next(3_000)));
        }
    }
    done.append(&mut older);
    done
}

/// Now and then takes an older record out (to cancel it while it may be due).
fn take_if_any(older: &mut Vec<Record>, rng: &mut Lcg) -> Option<Record> {
    if older.is_empty() || rng.next(3) != 0 {
        return None;
    }
    let i = rng.next(older.len() as u64) as usize;
    Some(older.swap_remove(i))
}

/// Never early, on every tick size the builder takes, with resets that move a deadline
/// earlier and later while the watcher may already be parked on the old tick: each task
/// records when it started, and that is never before the deadline of its last successful
/// schedule or reset.
#[test]
fn never_early_with_resets_on_every_tick_size() {
    let ticks = [
        Duration::from_micros(1),
        Duration::from_micros(100),
        Duration::from_millis(1),
        Duration::from_secs(1),
    ];
    thread::scope(|s| {
        for tick in ticks {
            s.spawn(move || never_early_round(tick));
        }
    });
}

fn never_early_round(tick: Duration) {
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .tick(tick)
        .build()
        .unwrap();
    let mut rng = Lcg(tick.as_nanos() as u64);
    let mut records = Vec::new();
    // A warm-up timer: workers go idle after it and one watches the next tick.
    schedule(&pool, Duration::from_micros(300))
        .future
        .join_timeout(LONG)
        .expect("warm-up timer lost")
        .unwrap();
    for _ in 0..60 {
        let mut r = schedule(&pool, Duration::from_micros(rng.next(20_000)));
        if rng.next(2) == 0 {
            // Give the driver a chance to announce the old tick and the watcher to take it.
            thread::sleep(Duration::from_micros(rng.next(2_000)));
            let to = Duration::from_micros(rng.next(20_000));
            let not_before = Instant::now() + to;
            if r.future.reset(to) {
                r.not_before = not_before;
            }
        }
        records.push(r);
    }
    for (i, r) in records.iter_mut().enumerate() {
        r.future
            .join_timeout(LONG)
            .unwrap_or_else(|| panic!("tick {tick:?}, task {i}: lost"))
            .unwrap();
        let at = r.slot.ran_at.lock().unwrap().expect("ran");
        assert!(
            at >= r.not_before,
            "tick {tick:?}, task {i}: ran {:?} early",
            r.not_before - at
        );
        assert_eq!(r.slot.runs.load(SeqCst), 1, "tick {tick:?}, task {i}");
    }
}

/// What the `shutdown_now` rounds count.
#[derive(Default)]
struct Tally {
    ran_in_pool: AtomicUsize,
    periodic_runs: AtomicUsize,
}

impl Tally {
    fn one_shot(self: &Arc<Self>) -> impl FnOnce() + Send + 'static {
        let tally = self.clone();
        move || {
            tally.ran_in_pool.fetch_add(1, SeqCst);
        }
    }
}

/// When a round calls `shutdown_now`.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Once the first task of the burst has run, after spinning this many times.
    AfterFirstRun(u32),
    /// At this offset from the burst's deadline (microseconds, may be negative).
    At(i64),
}

/// `shutdown_now` lands while a burst of 10 000 tasks with one deadline comes due, a chunk at a
/// time, through the watcher and the timer thread at once, while another thread keeps
/// scheduling short timers (some of which are refused) and periodic tasks at 1 ms keep
/// re-arming. Pools of 1 to 8 workers (more workers than the machine's cores, so takers are
/// preempted mid-take). Every accepted one-shot is exactly one of: run in the pool or handed
/// back, and a `cancel()` right after the return fails on each (each had started or been
/// handed back by then: nothing is left to start later); every other schedule is refused;
/// periodic tasks end. (A closure's first instruction may still run after the return when its
/// task started before it, so starts are judged by `cancel()`, not by a flag the closure
/// reads: see `tests/shutdown_now_race.rs`.)
#[test]
fn shutdown_now_while_a_burst_comes_due_accounts_for_every_task() {
    /// Rounds that must stop mid-burst: a quarter of one pass over the plan below.
    const MIXED: usize = 15;
    let mut rng = Lcg(99);
    let mut mixed = 0;
    let mut rounds = 0;
    // Where the stop lands depends on how fast the workers drain the burst against how soon
    // this thread gets to `shutdown_now`: on a busy machine (or an optimised build) more
    // rounds find the burst already drained. Such a round still checks every identity, but
    // does not count: the plan runs again (at most five times) until MIXED rounds hit the race.
    for _pass in 0..5 {
        for workers in [1, 2, 3, 5, 8] {
            for round in 0..12 {
                let burst = if round % 2 == 0 { 10_000 } else { 2_000 };
                let stop = if round % 3 != 2 {
                    Stop::AfterFirstRun(rng.next(2_000) as u32)
                } else {
                    Stop::At(rng.next(1_000) as i64 - 300)
                };
                let (ran, back) = burst_round(workers, burst, stop);
                rounds += 1;
                mixed += usize::from(ran > 0 && back > 0);
            }
        }
        if mixed >= MIXED {
            break;
        }
    }
    eprintln!("{mixed} of {rounds} rounds stopped mid-burst");
    // Not a check of the pool: a check that the rounds hit the race they are meant to.
    assert!(
        mixed >= MIXED,
        "only {mixed} of {rounds} rounds stopped mid-burst"
    );
}

/// One round; returns (burst tasks ran in the pool, burst tasks handed back).
fn burst_round(workers: usize, burst: usize, stop: Stop) -> (usize, usize) {
    let pool = shared_pool(workers);
    let tally = Arc::new(Tally::default());
    let mut periodic = Vec::new();
    for _ in 0..workers {
        let tally = tally.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    tally.periodic_runs.fetch_add(1, SeqCst);
                },
                Duration::from_millis(1),
                Duration::from_millis(1),
            )
            .unwrap();
        periodic.push(f);
    }
    // Workers idle between the periodic tasks' ticks first, so a watcher is parked when the
    // burst goes in.
    assert!(common::wait_until(LONG, || tally
        .periodic_runs
        .load(SeqCst)
        >= 2 * workers));
    let burst_tally = Arc::new(Tally::default());
    let due = Instant::now() + Duration::from_millis(15);
    // From four threads, so the burst lies in four shards and a poll of them all (the
    // watcher's, one chunk each, pushed after the last) takes a while.
    let futures: Vec<_> = thread::scope(|s| {
        let parts: Vec<_> = (0..4)
            .map(|_| {
                let (pool, tally) = (&pool, &burst_tally);
                s.spawn(move || {
                    (0..burst / 4)
                        .map(|_| pool.schedule_at(tally.one_shot(), due).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts.into_iter().flat_map(|p| p.join().unwrap()).collect()
    });
    let side_tally = Arc::new(Tally::default());
    let (pending, side) = thread::scope(|s| {
        let producer = s.spawn(|| side_producer(&pool, &side_tally));
        wait_for_stop(stop, due, &burst_tally);
        let pending = pool.shutdown_now();
        (pending, producer.join().unwrap())
    });
    for (i, f) in futures.iter().chain(side.futures.iter()).enumerate() {
        assert!(
            !f.cancel(),
            "{workers} workers: task {i} neither started nor handed back"
        );
    }
    let periodic_back = pending.iter().filter(|p| p.is_periodic()).count();
    let one_shots_back = pending.len() - periodic_back;
    drop(pending);
    assert!(pool.await_termination(LONG), "{workers} workers: no end");
    let st = pool.stats();
    assert_eq!(
        (st.pending, st.running),
        (0, 0),
        "{workers} workers: {st:?}"
    );
    let ran = burst_tally.ran_in_pool.load(SeqCst);
    let side_ran = side_tally.ran_in_pool.load(SeqCst);
    assert_eq!(
        ran + side_ran + one_shots_back,
        burst + side.futures.len(),
        "{workers} workers, burst {burst}, {stop:?}: burst ran {ran}, others ran {side_ran}, \
         handed back {one_shots_back}, accepted {} + {burst}",
        side.futures.len()
    );
    assert!(periodic_back <= workers, "periodic tasks handed back twice");
    for p in &periodic {
        assert!(
            p.is_done(),
            "{workers} workers: a periodic task outlived shutdown_now"
        );
    }
    (ran, burst - ran)
}

fn wait_for_stop(stop: Stop, due: Instant, burst: &Tally) {
    match stop {
        Stop::AfterFirstRun(spins) => {
            assert!(
                common::wait_until(LONG, || burst.ran_in_pool.load(SeqCst) > 0),
                "the burst never came due"
            );
            for _ in 0..spins {
                std::hint::spin_loop();
            }
        }
        Stop::At(offset_us) => {
            let at = if offset_us >= 0 {
                due + Duration::from_micros(offset_us as u64)
            } else {
                due - Duration::from_micros(offset_us.unsigned_abs())
            };
            thread::sleep(at.saturating_duration_since(Instant::now()));
        }
    }
}

/// What the side producer got accepted.
struct Side {
    futures: Vec<ScheduledFuture<()>>,
}

/// Schedules 0-2 ms timers until the pool refuses (it is stopped), then a few more to be
/// sure every later one is refused too.
fn side_producer(pool: &ScheduledThreadPool, tally: &Arc<Tally>) -> Side {
    let mut rng = Lcg(5);
    let mut futures = Vec::new();
    let end = Instant::now() + LONG;
    loop {
        assert!(Instant::now() < end, "the pool never refused");
        let delay = Duration::from_micros(rng.next(2_000));
        match pool.schedule(tally.one_shot(), delay) {
            Ok(f) => futures.push(f),
            Err(e) => {
                assert_eq!(e, ScheduleError::Shutdown);
                break;
            }
        }
    }
    for _ in 0..10 {
        let refused = pool.schedule(tally.one_shot(), Duration::ZERO);
        assert_eq!(refused.err(), Some(ScheduleError::Shutdown));
    }
    Side { futures }
}

/// `shutdown_now` called by the first task of a burst, from inside the pool: with one worker
/// that task runs on the watcher (or the worker the timer thread's chunk woke) while the rest
/// of what was polled waits in that worker's own deque, which the call must sweep although
/// it skips the caller's own `taking` flag. Every task of the burst is exactly one of: run in
/// the pool (the caller included) or handed back, and a `cancel()` after the return fails on
/// each.
#[test]
fn shutdown_now_from_the_first_task_of_a_burst() {
    for _ in 0..3 {
        for workers in [1, 2, 3, 4, 8] {
            for burst in [2, 700, 3_000] {
                burst_stopped_from_inside(workers, burst);
            }
        }
    }
}

fn burst_stopped_from_inside(workers: usize, burst: usize) {
    let pool = shared_pool(workers);
    let tally = Arc::new(Tally::default());
    // The first task to start takes the pool out of here and stops it.
    let stopper: Arc<Mutex<Option<Arc<ScheduledThreadPool>>>> =
        Arc::new(Mutex::new(Some(pool.clone())));
    let handed_back = Arc::new(AtomicUsize::new(usize::MAX));
    // Opens once every task of the burst is in. On a busy machine the schedule loop can outlast
    // the 5 ms lead: the tasks that come due meanwhile wait here before one of them stops the
    // pool, so every schedule of the burst is accepted and the stop still lands mid-burst.
    let all_in = common::Latch::new();
    // Warm up: workers idle after a timer, one watches the next tick.
    pool.schedule(|| (), Duration::from_millis(1))
        .unwrap()
        .join_timeout(LONG)
        .expect("warm-up timer lost")
        .unwrap();
    let due = Instant::now() + Duration::from_millis(5);
    let futures: Vec<_> = (0..burst)
        .map(|_| {
            let (tally, stopper, back) = (tally.clone(), stopper.clone(), handed_back.clone());
            let all_in = all_in.clone();
            pool.schedule_at(
                move || {
                    tally.ran_in_pool.fetch_add(1, SeqCst);
                    // Bounded: if it ever times out, `stopper` is taken anyway and the counts
                    // below still have to add up.
                    all_in.wait(LONG);
                    let me = stopper.lock().unwrap().take();
                    if let Some(pool) = me {
                        let pending = pool.shutdown_now();
                        back.store(pending.len(), SeqCst);
                    }
                },
                due,
            )
            .unwrap()
        })
        .collect();
    all_in.open();
    assert!(
        common::wait_until(LONG, || handed_back.load(SeqCst) != usize::MAX),
        "{workers} workers, burst {burst}: the burst never came due"
    );
    assert!(pool.await_termination(LONG), "{workers} workers: no end");
    let back = handed_back.load(SeqCst);
    let ran = tally.ran_in_pool.load(SeqCst);
    let st = pool.stats();
    assert_eq!(
        (st.pending, st.running),
        (0, 0),
        "{workers} workers: {st:?}"
    );
    // One more completion: the warm-up timer.
    assert_eq!(st.completed, ran as u64 + 1, "{workers} workers: {st:?}");
    assert_eq!(st.cancelled, back as u64, "{workers} workers: {st:?}");
    assert_eq!(
        ran + back,
        burst,
        "{workers} workers, burst {burst}: ran {ran}, handed back {back}"
    );
    for (i, f) in futures.iter().enumerate() {
        assert!(!f.cancel(), "task {i} neither started nor handed back");
    }
}

/// The pool dropped by the first task of a burst (the task owns the only handle to it): the
/// drop's `shutdown_now` sweeps the rest of the burst, part of which the watcher may have
/// pushed onto the very worker running the drop. Every task either ran or ended `Cancelled`,
/// and every captured value is dropped exactly once.
#[test]
fn the_pool_dropped_by_the_first_task_of_a_burst() {
    for workers in [1, 1, 2, 3] {
        for burst in [2, 600] {
            pool_dropped_from_inside(workers, burst);
        }
    }
}

fn pool_dropped_from_inside(workers: usize, burst: usize) {
    let pool = ScheduledThreadPool::builder()
        .threads(workers)
        .build()
        .unwrap();
    let _ = pool
        .schedule(|| (), Duration::from_millis(1))
        .unwrap()
        .join_timeout(LONG)
        .expect("warm-up timer lost");
    let handle = pool.handle();
    let owner: Arc<Mutex<Option<ScheduledThreadPool>>> = Arc::new(Mutex::new(Some(pool)));
    let dropped = Arc::new(AtomicUsize::new(0));
    // Opens once every task of the burst is in: a task that comes due while a slow (busy)
    // machine is still scheduling the rest waits here, so the drop cannot refuse the rest of
    // the burst's schedules, and it still lands while the burst comes due.
    let all_in = common::Latch::new();
    let due = Instant::now() + Duration::from_millis(4);
    let slots: Vec<Arc<Slot>> = (0..burst).map(|_| Arc::new(Slot::default())).collect();
    let futures: Vec<_> = slots
        .iter()
        .map(|slot| {
            let (run, owner, dropped) = (counted_task(slot), owner.clone(), dropped.clone());
            let all_in = all_in.clone();
            handle
                .schedule_at(
                    move || {
                        run();
                        all_in.wait(LONG);
                        let pool = owner.lock().unwrap().take();
                        if let Some(pool) = pool {
                            drop(pool);
                            dropped.fetch_add(1, SeqCst);
                        }
                    },
                    due,
                )
                .unwrap()
        })
        .collect();
    drop(owner);
    all_in.open();
    assert!(
        common::wait_until(LONG, || dropped.load(SeqCst) == 1),
        "{workers} workers, burst {burst}: the pool was never dropped"
    );
    let mut ran = 0;
    for (i, f) in futures.into_iter().enumerate() {
        let runs = slots[i].runs.load(SeqCst);
        match f.join() {
            Ok(()) => assert_eq!(runs, 1, "task {i}: joined Ok"),
            Err(e) => {
                assert_eq!(e, wheelpool::TaskError::Cancelled, "task {i}");
                assert_eq!(runs, 0, "task {i}: cancelled but ran");
            }
        }
        ran += runs;
    }
    assert!(ran >= 1, "{workers} workers, burst {burst}");
    for (i, slot) in slots.iter().enumerate() {
        assert!(
            common::wait_until(LONG, || slot.drops.load(SeqCst) == 1),
            "{workers} workers, burst {burst}, task {i}: drops {}",
            slot.drops.load(SeqCst)
        );
    }
}

/// A pool of `workers` that tasks can hold (and stop or drop from inside).
fn shared_pool(workers: usize) -> Arc<ScheduledThreadPool> {
    Arc::new(
        ScheduledThreadPool::builder()
            .threads(workers)
            .build()
            .unwrap(),
    )
}

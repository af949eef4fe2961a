//! "Nothing starts after `shutdown_now` returns", tested by racing it against workers that are
//! busy taking tasks: from the injector, from their own deques (tasks scheduled from a worker)
//! and from each other. Right after `shutdown_now` returns, the main thread cancels every task
//! whose schedule had returned `Ok` by then: each must already be started or handed back, so
//! a `cancel()` that succeeds finds a task that was neither (the old bug: a worker held a task
//! it took before the sweep and started it later). Every task must also end in exactly one
//! way: ran in the pool, handed back and run by the caller, refused, or cancelled by that late
//! cancel (only a task whose schedule was still in progress at the return).
//!
//! The race window is short, so one round rarely hits it. Before the fix the default 1 500
//! rounds found 4 to 5 such tasks per run; `WHEELPOOL_RACE_ROUNDS` runs more.

use crate::common;
use crate::common::LONG;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wheelpool::{Handle, ScheduleError, ScheduledFuture, ScheduledThreadPool};

/// Closures whose first instruction ran after the main thread marked `shutdown_now` returned
/// (information only: see `nothing_starts_after_shutdown_now_returns`).
static LATE_CLOSURE_STARTS: AtomicUsize = AtomicUsize::new(0);

/// Task chains per round: each task `execute`s the next from its worker until the pool refuses.
const CHAINS: usize = 6;

thread_local! {
    /// Set while this thread runs the tasks `shutdown_now` handed back.
    static RUNNING_RETURNED: Cell<bool> = const { Cell::new(false) };
}

/// What happened to one task.
#[derive(Default)]
struct Fate {
    /// Its future, once its schedule call returned `Ok`.
    future: Mutex<Option<ScheduledFuture<()>>>,
    /// Its schedule call returned `Ok` before the main thread marked `shutdown_now` returned.
    accepted_before: AtomicBool,
    /// A `cancel()` after `shutdown_now` returned stopped it before it started.
    /// Runs in the pool before `shutdown_now` returned, and after.
    ran_before: AtomicU8,
    ran_after: AtomicU8,
    /// Runs by `shutdown_now`'s caller, from the list it returned.
    ran_by_caller: AtomicU8,
    /// Refused with `ScheduleError::Shutdown`.
    refused: AtomicU8,
    cancelled_after: AtomicU8,
}

/// One round's tasks.
#[derive(Default)]
struct Round {
    /// Every task's delay: zero (straight to a run queue) or a little (through the wheels).
    delay: Duration,
    returned: AtomicBool,
    fates: Mutex<Vec<Arc<Fate>>>,
}

impl Round {
    fn new_fate(&self) -> Arc<Fate> {
        let fate = Arc::new(Fate::default());
        self.fates.lock().unwrap().push(fate.clone());
        fate
    }

    /// Submits a chain task through `handle`, recording a refusal.
    fn submit(self: &Arc<Self>, handle: &Handle) {
        let fate = self.new_fate();
        let f = task(self.clone(), handle.clone(), fate.clone());
        match handle.schedule(f, self.delay) {
            Ok(future) => {
                let before = !self.returned.load(Ordering::SeqCst);
                fate.accepted_before.store(before, Ordering::SeqCst);
                *fate.future.lock().unwrap() = Some(future);
            }
            Err(e) => {
                assert_eq!(e, ScheduleError::Shutdown);
                fate.refused.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// A chain link: records how it started, then submits the next link from its worker (onto
/// that worker's deque).
fn task(round: Arc<Round>, handle: Handle, fate: Arc<Fate>) -> impl FnOnce() + Send {
    move || {
        // First thing: the closure starts here.
        let after = round.returned.load(Ordering::SeqCst);
        let slot = if RUNNING_RETURNED.with(Cell::get) {
            &fate.ran_by_caller
        } else if after {
            &fate.ran_after
        } else {
            &fate.ran_before
        };
        slot.fetch_add(1, Ordering::SeqCst);
        if !RUNNING_RETURNED.with(Cell::get) {
            round.submit(&handle);
        }
    }
}

/// One round: a pool with more workers than cores (so workers get preempted mid-take), chains
/// that keep every worker taking tasks, outside submissions into the injector, and
/// `shutdown_now` after `lead`. Returns the problems found.
fn round(lead: Duration) -> Vec<String> {
    let pool = ScheduledThreadPool::builder().threads(4).build().unwrap();
    let handle = pool.handle();
    let round = Arc::new(Round::default());
    for _ in 0..CHAINS {
        round.submit(&handle);
    }
    let end = Instant::now() + lead;
    while Instant::now() < end {
        round.submit(&handle); // outside: into the injector
    }
    finish(pool, &round)
}

/// A round through the wheels: a burst of tasks all due `delay` after it (so the timer thread
/// sleeps until then and an idle worker watches that instant), then `shutdown_now` at `lead`
/// after the burst, around the moment both of them take the tasks out of the wheels.
fn timer_round(delay: Duration, lead: Duration) -> Vec<String> {
    let pool = ScheduledThreadPool::builder().threads(4).build().unwrap();
    let handle = pool.handle();
    let round = Arc::new(Round {
        delay,
        ..Round::default()
    });
    let start = Instant::now();
    for _ in 0..BURST {
        round.submit(&handle);
    }
    std::thread::sleep((start + lead).saturating_duration_since(Instant::now()));
    finish(pool, &round)
}

/// Tasks a `timer_round` schedules at once.
const BURST: usize = 300;

/// `shutdown_now`, the late cancels, the handed-back runs and the checks of a round.
fn finish(pool: ScheduledThreadPool, round: &Arc<Round>) -> Vec<String> {
    let returned = pool.shutdown_now();
    round.returned.store(true, Ordering::SeqCst);
    // Exact check: a task accepted before the return is started or handed back by now, so
    // `cancel()` (true only for a task that has not started) must fail on it.
    let fates = round.fates.lock().unwrap().clone();
    for fate in &fates {
        if fate
            .future
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|f| f.cancel())
        {
            fate.cancelled_after.fetch_add(1, Ordering::SeqCst);
        }
    }
    let handed_back = returned.len();
    RUNNING_RETURNED.with(|r| r.set(true));
    for pending in returned {
        pending.run();
    }
    RUNNING_RETURNED.with(|r| r.set(false));
    assert!(pool.await_termination(LONG), "the pool terminated");
    drop(pool);
    check_round(round, handed_back)
}

/// Every task of `round` ended exactly one way, and none was left neither started nor handed
/// back when `shutdown_now` returned. Returns the problems found.
fn check_round(round: &Round, handed_back: usize) -> Vec<String> {
    let mut problems = Vec::new();
    let (mut by_caller, mut late) = (0, 0);
    for (id, fate) in round.fates.lock().unwrap().iter().enumerate() {
        let get = |a: &AtomicU8| a.load(Ordering::SeqCst);
        let (before, after) = (get(&fate.ran_before), get(&fate.ran_after));
        let (caller, refused) = (get(&fate.ran_by_caller), get(&fate.refused));
        let cancelled = get(&fate.cancelled_after);
        by_caller += usize::from(caller);
        late += usize::from(after);
        if cancelled != 0 && fate.accepted_before.load(Ordering::SeqCst) {
            problems.push(format!(
                "task {id} was neither started nor handed back when shutdown_now returned"
            ));
        }
        if before + after + caller + refused + cancelled != 1 {
            problems.push(format!(
                "task {id}: ran before {before}, after {after}, by the caller {caller}, \
                 refused {refused}, cancelled after the return {cancelled}"
            ));
        }
    }
    LATE_CLOSURE_STARTS.fetch_add(late, Ordering::SeqCst);
    if by_caller != handed_back {
        problems.push(format!(
            "{handed_back} tasks handed back but {by_caller} of ours ran from that list"
        ));
    }
    problems
}

#[test]
fn nothing_starts_after_shutdown_now_returns() {
    let rounds: u32 = std::env::var("WHEELPOOL_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_500);
    let mut problems = Vec::new();
    for r in 0..rounds {
        // Vary how far the burst gets before the stop: early (most tasks handed back) to late
        // (most ran).
        let lead = Duration::from_micros(u64::from(r * 37 % 300));
        let found = round(lead);
        problems.extend(found.into_iter().map(|p| format!("round {r}: {p}")));
    }
    // A worker marks a task started just before it calls the closure, and `shutdown_now`
    // waits for that mark; the closure's own first instruction comes a few instructions
    // later, so a preemption right there makes it read the main thread's "returned" flag as
    // set although the pool had started it in time. The exact check above (cancel after the
    // return) does not depend on that window; this count is printed, not asserted.
    eprintln!(
        "{rounds} rounds: {} closures began executing after the return (started in time)",
        LATE_CLOSURE_STARTS.load(Ordering::SeqCst)
    );
    assert!(
        problems.is_empty(),
        "{} problems in {rounds} rounds:\n{}",
        problems.len(),
        problems[..problems.len().min(20)].join("\n")
    );
}

/// The same race with every task going through the wheels, due a moment after its schedule
/// call: idle workers watch the timer's tick and poll the wheels themselves (the watcher, see
/// `timer/mod.rs`), the timer thread polls them too, and `shutdown_now` lands while both are
/// taking due tasks out. Each task still ends exactly one way, and none accepted before the
/// return is left neither started nor handed back.
#[test]
fn nothing_due_is_lost_or_started_late_when_shutdown_now_meets_the_watcher() {
    let rounds: u32 = std::env::var("WHEELPOOL_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(300, |r: u32| r / 5);
    let mut problems = Vec::new();
    for r in 0..rounds {
        // The burst is due in 3-5 ms; the stop comes 2 ms before to 2 ms after.
        let delay = Duration::from_micros(3000 + u64::from(r * 131 % 2000));
        let lead = (delay + Duration::from_micros(u64::from(r * 211 % 4000)))
            .saturating_sub(Duration::from_millis(2));
        let found = timer_round(delay, lead);
        problems.extend(found.into_iter().map(|p| format!("round {r}: {p}")));
    }
    assert!(
        problems.is_empty(),
        "{} problems in {rounds} rounds:\n{}",
        problems.len(),
        problems[..problems.len().min(20)].join("\n")
    );
}

/// A task that calls `shutdown_now` on its own pool (its worker is inside the call) neither
/// deadlocks nor lets anything start afterwards. As in the rounds above, starts are judged by
/// `cancel()` after the return (a flag the closures read would also catch a task started in
/// time whose worker was preempted before its first instruction), and every task ran in the
/// pool or was handed back, never both.
#[test]
fn shutdown_now_from_a_task_does_not_wait_for_its_own_worker() {
    let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
    let ran = Arc::new(AtomicUsize::new(0));
    let futures: Vec<_> = (0..200)
        .map(|_| {
            let r = ran.clone();
            pool.schedule(
                move || {
                    r.fetch_add(1, Ordering::SeqCst);
                },
                Duration::ZERO,
            )
            .unwrap()
        })
        .collect();
    let p = pool.clone();
    let mut stopper = pool
        .schedule(move || p.shutdown_now().len(), Duration::ZERO)
        .unwrap();
    let back = stopper
        .join_timeout(LONG)
        .expect("shutdown_now from a task deadlocked")
        .expect("the stopping task ran");
    for (i, f) in futures.iter().enumerate() {
        assert!(!f.cancel(), "task {i} neither started nor handed back");
    }
    assert!(pool.await_termination(LONG));
    assert_eq!(
        ran.load(Ordering::SeqCst) + back,
        200,
        "each task ran in the pool or was handed back"
    );
}

/// `PoolStats` stays exact when schedules race a shutdown: a schedule refused with
/// `Err(Shutdown)` (by the admission check, by its shard's closed gate, or by the re-check after
/// its push) is not a cancel. Three threads schedule one-shots (due now, in a millisecond or
/// two, or in an hour) until the pool refuses them, while the main thread calls `shutdown` or
/// `shutdown_now` at a varying moment. Once the pool has terminated, every accepted task ran
/// (`completed`) or was cancelled, and the cancelled ones are exactly those `shutdown_now`
/// handed back (none after a graceful `shutdown`, which runs what waits). Before the fix 8-12
/// of 60 rounds counted one or two refused schedules as cancels.
#[test]
fn stats_never_count_a_refused_schedule_as_a_cancel() {
    const PRODUCERS: usize = 3;
    let rounds: usize = std::env::var("WHEELPOOL_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let mut wrong = Vec::new();
    for round in 0..rounds {
        let now = round % 2 == 0;
        let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
        let accepted = AtomicUsize::new(0);
        let refused = AtomicUsize::new(0);
        let ran = Arc::new(AtomicUsize::new(0));
        let handed_back = std::thread::scope(|s| {
            for p in 0..PRODUCERS {
                let (pool, accepted, refused, ran) = (&pool, &accepted, &refused, &ran);
                s.spawn(move || {
                    for i in 0usize.. {
                        let delay = match (i + p) % 4 {
                            0 | 1 => Duration::ZERO,
                            2 => Duration::from_micros(1_000 + (i % 7) as u64 * 150),
                            // An hour only when `shutdown_now` hands it back; a graceful
                            // shutdown would run it, an hour later.
                            _ if now => common::HOUR,
                            _ => Duration::from_micros(300),
                        };
                        let ran = ran.clone();
                        let task = move || {
                            ran.fetch_add(1, Ordering::SeqCst);
                        };
                        match pool.schedule(task, delay) {
                            Ok(f) => {
                                drop(f); // detaches
                                accepted.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(ScheduleError::Shutdown) => {
                                refused.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                            Err(e) => panic!("unexpected refusal: {e}"),
                        }
                    }
                });
            }
            let start = 20 + (round * 7) % 200;
            assert!(common::wait_until(LONG, || accepted.load(Ordering::SeqCst) >= start));
            if now {
                pool.shutdown_now().len()
            } else {
                pool.shutdown();
                0
            }
        });
        assert!(pool.await_termination(LONG), "round {round}: terminated");
        let s = pool.stats();
        let accepted = accepted.load(Ordering::SeqCst) as u64;
        let ran = ran.load(Ordering::SeqCst) as u64;
        let (handed_back, kind) = (
            handed_back as u64,
            if now { "shutdown_now" } else { "shutdown" },
        );
        let exact = s.completed == ran
            && s.completed + s.cancelled == accepted
            && s.cancelled == handed_back
            && (s.pending, s.running, s.panicked) == (0, 0, 0);
        if !exact {
            wrong.push(format!(
                "round {round} ({kind}): accepted {accepted}, ran {ran}, handed back \
                 {handed_back}, refused {}: {s:?}",
                refused.load(Ordering::SeqCst)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {rounds} rounds off:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

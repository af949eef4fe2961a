//! Soak: several threads mix every operation on one pool for a configurable time, then
//! `shutdown_now` races them. At the end every task must have ended exactly one way, every
//! captured value must have been dropped exactly once (a cancelled task's at once), the pool's
//! counters must agree, and memory must have stayed bounded throughout.
//!
//! Off by default (it runs for minutes):
//!
//! ```text
//! WHEELPOOL_SOAK_SECS=600 cargo test --release --test pool soak -- --ignored --nocapture
//! ```
//!
//! `WHEELPOOL_SOAK_SECS` defaults to 30.

use crate::common;
use crate::common::LONG;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wheelpool::{PoolStats, ScheduleError, ScheduledFuture, ScheduledThreadPool, TaskError};

const WORKERS: usize = 4;
const PRODUCERS: usize = 4;
/// The pool's bound on pending tasks: what keeps producers from outrunning the workers.
const MAX_PENDING: usize = 600;
/// Futures each producer keeps to cancel or join later.
const KEPT: usize = 256;

thread_local! {
    /// Set while this thread runs the tasks `shutdown_now` handed back.
    static RUNNING_RETURNED: Cell<bool> = const { Cell::new(false) };
}

/// Everything counted across the run.
#[derive(Default)]
struct Counters {
    oneshots: AtomicU64,
    oneshot_ran: AtomicU64,
    oneshot_ran_by_caller: AtomicU64,
    oneshot_cancelled: AtomicU64,
    oneshot_rejected: AtomicU64,
    periodics: AtomicU64,
    periodic_rejected: AtomicU64,
    periodic_runs: AtomicU64,
    periodic_ran_by_caller: AtomicU64,
    /// `reset` calls that moved a waiting task.
    resets: AtomicU64,
    /// Runs in the pool that returned normally / panicked.
    pool_runs_ok: AtomicU64,
    pool_runs_panicked: AtomicU64,
    saturated: AtomicU64,
    captures_made: AtomicU64,
    captures_dropped: AtomicU64,
    /// Captures alive right now, and the most seen.
    live: AtomicUsize,
    live_max: AtomicUsize,
    /// `cancel()` returned true but the task's capture was still alive.
    late_drops: AtomicU64,
    /// A future ended in a way its kind cannot end.
    bad_outcomes: AtomicU64,
}

/// What every task captures: counts itself alive until dropped.
struct Capture {
    c: Arc<Counters>,
    dropped: Arc<AtomicBool>,
}

impl Capture {
    fn new(c: &Arc<Counters>) -> (Self, Arc<AtomicBool>) {
        c.captures_made.fetch_add(1, Ordering::Relaxed);
        let live = c.live.fetch_add(1, Ordering::Relaxed) + 1;
        c.live_max.fetch_max(live, Ordering::Relaxed);
        let dropped = Arc::new(AtomicBool::new(false));
        let cap = Capture {
            c: c.clone(),
            dropped: dropped.clone(),
        };
        (cap, dropped)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        assert!(!self.dropped.swap(true, Ordering::SeqCst), "dropped twice");
        self.c.captures_dropped.fetch_add(1, Ordering::Relaxed);
        self.c.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A one-shot body: counts where it ran; one in a hundred panics.
fn one_shot(cap: Capture, panics: bool) -> impl FnOnce() + Send {
    move || {
        let c = &cap.c;
        if RUNNING_RETURNED.with(Cell::get) {
            c.oneshot_ran_by_caller.fetch_add(1, Ordering::Relaxed);
            return;
        }
        c.oneshot_ran.fetch_add(1, Ordering::Relaxed);
        if panics {
            c.pool_runs_panicked.fetch_add(1, Ordering::Relaxed);
            panic!("soak: an expected panic");
        }
        c.pool_runs_ok.fetch_add(1, Ordering::Relaxed);
    }
}

/// A periodic body: counts its runs.
fn periodic(cap: Capture) -> impl FnMut() + Send {
    move || {
        let c = &cap.c;
        if RUNNING_RETURNED.with(Cell::get) {
            c.periodic_ran_by_caller.fetch_add(1, Ordering::Relaxed);
            return;
        }
        c.periodic_runs.fetch_add(1, Ordering::Relaxed);
        c.pool_runs_ok.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    OneShot,
    Periodic,
}

/// One producer thread's state.
struct Producer {
    pool: Arc<ScheduledThreadPool>,
    c: Arc<Counters>,
    rng: StdRng,
    kept: Vec<(Kind, ScheduledFuture<()>, Arc<AtomicBool>)>,
}

impl Producer {
    /// One random operation; false once the pool refuses with `Shutdown`.
    fn step(&mut self) -> bool {
        let ms = |n: u64| Duration::from_millis(n);
        let delay = ms(self.rng.gen_range(0..50));
        let r = match self.rng.gen_range(0..100) {
            0..=29 => self.oneshot(|p, f| p.execute(f).map(|()| None)),
            30..=49 => self.oneshot(move |p, f| p.schedule(f, delay).map(Some)),
            50..=59 => {
                let at = Instant::now() + delay;
                self.oneshot(move |p, f| p.schedule_at(f, at).map(Some))
            }
            60..=69 => self.oneshot(|p, f| p.schedule(f, common::HOUR).map(Some)),
            70..=74 => {
                let period = ms(self.rng.gen_range(1..5));
                self.periodic(move |p, f| p.schedule_at_fixed_rate(f, delay, period))
            }
            75..=77 => {
                let period = ms(self.rng.gen_range(1..5));
                self.periodic(move |p, f| p.schedule_with_fixed_delay(f, delay, period))
            }
            78..=79 => {
                let period = ms(self.rng.gen_range(1..5));
                self.periodic(move |p, mut f| {
                    let dynamic = move || {
                        f();
                        Some(period)
                    };
                    p.schedule_with_dynamic_delay(dynamic, delay)
                })
            }
            80..=91 => {
                self.cancel_one();
                Ok(())
            }
            92..=94 => {
                self.reset_one(delay);
                Ok(())
            }
            _ => {
                self.join_one();
                Ok(())
            }
        };
        if self.kept.len() > KEPT {
            self.cancel_one();
        }
        r != Err(ScheduleError::Shutdown)
    }

    fn oneshot(
        &mut self,
        submit: impl FnOnce(
            &ScheduledThreadPool,
            Box<dyn FnOnce() + Send>,
        ) -> Result<Option<ScheduledFuture<()>>, ScheduleError>,
    ) -> Result<(), ScheduleError> {
        let (cap, dropped) = Capture::new(&self.c);
        self.c.oneshots.fetch_add(1, Ordering::Relaxed);
        let panics = self.rng.gen_ratio(1, 100);
        match submit(&self.pool, Box::new(one_shot(cap, panics))) {
            Ok(Some(f)) => self.kept.push((Kind::OneShot, f, dropped)),
            Ok(None) => {}
            Err(e) => {
                self.c.oneshot_rejected.fetch_add(1, Ordering::Relaxed);
                self.rejected(e)?;
            }
        }
        Ok(())
    }

    fn periodic(
        &mut self,
        submit: impl FnOnce(
            &ScheduledThreadPool,
            Box<dyn FnMut() + Send>,
        ) -> Result<ScheduledFuture<()>, ScheduleError>,
    ) -> Result<(), ScheduleError> {
        let (cap, dropped) = Capture::new(&self.c);
        self.c.periodics.fetch_add(1, Ordering::Relaxed);
        match submit(&self.pool, Box::new(periodic(cap))) {
            Ok(f) => self.kept.push((Kind::Periodic, f, dropped)),
            Err(e) => {
                self.c.periodic_rejected.fetch_add(1, Ordering::Relaxed);
                self.rejected(e)?;
            }
        }
        Ok(())
    }

    fn rejected(&self, e: ScheduleError) -> Result<(), ScheduleError> {
        match e {
            ScheduleError::Saturated { .. } => {
                self.c.saturated.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            ScheduleError::Shutdown => Err(e),
            other => panic!("unexpected schedule error {other:?}"),
        }
    }

    fn take_random(&mut self) -> Option<(Kind, ScheduledFuture<()>, Arc<AtomicBool>)> {
        if self.kept.is_empty() {
            return None;
        }
        let i = self.rng.gen_range(0..self.kept.len());
        Some(self.kept.swap_remove(i))
    }

    /// Cancels a random kept task.
    /// Moves a kept task's next run (true only while it waits; either way it still ends one
    /// way, which the books check).
    fn reset_one(&mut self, delay: Duration) {
        if self.kept.is_empty() {
            return;
        }
        let i = self.rng.gen_range(0..self.kept.len());
        if self.kept[i].1.reset(delay) {
            self.c.resets.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn cancel_one(&mut self) {
        if let Some((kind, f, dropped)) = self.take_random() {
            self.cancel(kind, f, &dropped);
        }
    }

    /// Cancels `f`. A one-shot's true cancel must have dropped its capture already. A periodic
    /// task's cancel is true also while a run is in progress, whose end drops the capture: it
    /// is joined, and the capture must be gone by the time the join returns.
    fn cancel(&self, kind: Kind, f: ScheduledFuture<()>, dropped: &AtomicBool) {
        let stopped = f.cancel();
        if kind == Kind::OneShot && stopped {
            self.c.oneshot_cancelled.fetch_add(1, Ordering::Relaxed);
        }
        if kind == Kind::Periodic {
            self.check(kind, f.join_timeout_owned());
        }
        if stopped && !dropped.load(Ordering::SeqCst) {
            self.c.late_drops.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Joins a kept one-shot due within 50 ms; cancels anything else it picks.
    fn join_one(&mut self) {
        let Some((kind, f, dropped)) = self.take_random() else {
            return;
        };
        if kind == Kind::OneShot && f.delay() <= Duration::from_millis(50) {
            self.check(kind, f.join_timeout_owned());
        } else {
            self.cancel(kind, f, &dropped);
        }
    }

    /// A finished future's outcome must fit its kind.
    fn check(&self, kind: Kind, outcome: Option<Result<(), TaskError>>) {
        let fits = match (kind, outcome) {
            (_, None) => false,
            (_, Some(Err(TaskError::Cancelled))) => true,
            (Kind::OneShot, Some(Ok(()) | Err(TaskError::Panicked(_)))) => true,
            (Kind::Periodic, Some(Err(TaskError::Shutdown))) => true,
            _ => false,
        };
        if !fits {
            self.c.bad_outcomes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `join_timeout` on an owned future.
trait JoinOwned {
    fn join_timeout_owned(self) -> Option<Result<(), TaskError>>;
}

impl JoinOwned for ScheduledFuture<()> {
    fn join_timeout_owned(mut self) -> Option<Result<(), TaskError>> {
        self.join_timeout(LONG)
    }
}

/// Resident set size in MiB (Linux; 0 elsewhere).
fn rss_mib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096 / (1024 * 1024)
}

/// Memory samples (resident MiB) taken while the producers work.
#[derive(Debug, Default)]
struct Rss {
    start: u64,
    first_minute_max: u64,
    max: u64,
    at_end: u64,
}

/// Samples RSS every 200 ms until `secs` have passed since `started`.
fn sample_memory(started: Instant, secs: u64) -> Rss {
    let end = started + Duration::from_secs(secs);
    let early = Duration::from_secs(60).min(Duration::from_secs(secs) / 2);
    let mut rss = Rss {
        start: rss_mib(),
        ..Rss::default()
    };
    while Instant::now() < end {
        let left = end.saturating_duration_since(Instant::now());
        std::thread::sleep(Duration::from_millis(200).min(left));
        let now = rss_mib();
        rss.max = rss.max.max(now);
        if started.elapsed() < early {
            rss.first_minute_max = rss.first_minute_max.max(now);
        }
    }
    rss.at_end = rss_mib();
    rss
}

/// A producer thread: random operations until the pool refuses with `Shutdown`, then more
/// until `stop` (later schedules must be refused too), then it settles what it kept.
fn spawn_producer(mut p: Producer, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while p.step() {}
        while !stop.load(Ordering::SeqCst) {
            p.step();
        }
        for (kind, f, _) in std::mem::take(&mut p.kept) {
            p.check(kind, f.join_timeout_owned());
        }
    })
}

/// `shutdown_now`, then runs what it handed back on this thread; returns how many.
fn stop_and_run_returned(pool: &ScheduledThreadPool) -> usize {
    let returned = pool.shutdown_now();
    let handed_back = returned.len();
    RUNNING_RETURNED.with(|r| r.set(true));
    for task in returned {
        task.run();
    }
    RUNNING_RETURNED.with(|r| r.set(false));
    handed_back
}

#[test]
#[ignore = "soak: minutes long; run with --ignored (WHEELPOOL_SOAK_SECS sets the time)"]
fn soak_mixes_every_operation_and_keeps_the_books() {
    let secs: u64 = std::env::var("WHEELPOOL_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    common::quiet_pool_panics();
    let pool = Arc::new(
        ScheduledThreadPool::builder()
            .threads(WORKERS)
            .thread_name(common::QUIET)
            .max_pending(MAX_PENDING)
            .build()
            .unwrap(),
    );
    let c = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|i| {
            let p = Producer {
                pool: pool.clone(),
                c: c.clone(),
                rng: StdRng::seed_from_u64(i as u64),
                kept: Vec::new(),
            };
            spawn_producer(p, stop.clone())
        })
        .collect();
    let rss = sample_memory(started, secs);
    let handed_back = stop_and_run_returned(&pool);
    stop.store(true, Ordering::SeqCst);
    for p in producers {
        p.join().unwrap();
    }
    assert!(pool.await_termination(LONG), "the pool terminated");
    let stats = pool.stats();
    drop(pool);
    eprintln!("soak {secs} s: {}; RSS MiB {rss:?}; {stats:?}", c.summary());
    check_books(&c, handed_back, &stats, &rss);
}

impl Counters {
    fn summary(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::SeqCst);
        format!(
            "{} one-shots (ran {}, cancelled {}, handed back {}, refused {}); {} periodic tasks \
             ({} runs, {} refused, {} handed back); {} resets; {} saturated refusals; {} pool runs ok, {} \
             panicked; captures made {}, dropped {}, most alive at once {}; late drops {}; bad \
             outcomes {}",
            g(&self.oneshots),
            g(&self.oneshot_ran),
            g(&self.oneshot_cancelled),
            g(&self.oneshot_ran_by_caller),
            g(&self.oneshot_rejected),
            g(&self.periodics),
            g(&self.periodic_runs),
            g(&self.periodic_rejected),
            g(&self.periodic_ran_by_caller),
            g(&self.resets),
            g(&self.saturated),
            g(&self.pool_runs_ok),
            g(&self.pool_runs_panicked),
            g(&self.captures_made),
            g(&self.captures_dropped),
            self.live_max.load(Ordering::SeqCst),
            g(&self.late_drops),
            g(&self.bad_outcomes),
        )
    }
}

fn check_books(c: &Counters, handed_back: usize, stats: &PoolStats, rss: &Rss) {
    let g = |a: &AtomicU64| a.load(Ordering::SeqCst);
    let (ran, by_caller) = (g(&c.oneshot_ran), g(&c.oneshot_ran_by_caller));
    let (cancelled, rejected) = (g(&c.oneshot_cancelled), g(&c.oneshot_rejected));
    // Every one-shot ended exactly one way.
    assert_eq!(g(&c.oneshots), ran + by_caller + cancelled + rejected);
    let back = by_caller + g(&c.periodic_ran_by_caller);
    assert_eq!(back, handed_back as u64, "handed back = ours");
    // Every capture dropped exactly once (`Capture::drop` asserts "once"), a cancelled
    // task's before its cancel returned (a running periodic one's before its join returned).
    assert_eq!(g(&c.captures_made), g(&c.captures_dropped));
    assert_eq!(c.live.load(Ordering::SeqCst), 0);
    assert_eq!(
        g(&c.late_drops),
        0,
        "cancel returned before the capture was dropped"
    );
    assert_eq!(
        g(&c.bad_outcomes),
        0,
        "a future ended in a way its kind cannot"
    );
    // The pool's books agree with ours.
    assert_eq!((stats.pending, stats.running), (0, 0), "{stats:?}");
    assert_eq!(stats.completed, g(&c.pool_runs_ok), "{stats:?}");
    assert_eq!(stats.panicked, g(&c.pool_runs_panicked), "{stats:?}");
    // Bounded memory: live captures never exceed what the pool may hold (max_pending, plus
    // what is running, plus what producers hold between schedule and submit), and the
    // process does not grow after its first minute beyond allocator noise.
    let live_bound = MAX_PENDING + WORKERS + PRODUCERS * 2 + 64;
    let live_max = c.live_max.load(Ordering::SeqCst);
    assert!(
        live_max <= live_bound,
        "live captures peaked at {live_max} > {live_bound}"
    );
    assert!(
        rss.max <= rss.first_minute_max * 2 + 64,
        "RSS grew from {} MiB in the first minute to {} MiB (start {}, end {})",
        rss.first_minute_max,
        rss.max,
        rss.start,
        rss.at_end
    );
}

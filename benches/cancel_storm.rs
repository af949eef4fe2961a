//! A benchmark: how late a 30 ms timer fires while 2-4 threads cancel 4 M pending timers (the
//! budget is 5 ms).
//!
//! Each round schedules TIMERS one-shots an hour away (from CANCELLERS threads, a share each),
//! then lets CANCELLERS threads cancel them all as fast as they can. The instant the storm
//! starts, the main thread schedules one 30 ms probe timer that records how late it ran
//! (run instant - deadline, the deadline taken just before the schedule call). Each round prints
//! the probe's lateness, whether the storm was still going when the probe ran, and the cancel
//! throughput; the end prints the worst lateness against the 5 ms budget.
//!
//! ```text
//! cargo bench --bench cancel_storm                               # 4 M timers, 2 cancellers, 5 rounds
//! cargo bench --bench cancel_storm -- 400000 4 3                 # TIMERS CANCELLERS ROUNDS
//! CANCEL_STORM_TIMERS=400000 CANCEL_STORM_THREADS=3 cargo bench --bench cancel_storm
//! ```
//!
//! Arguments win over the environment variables `CANCEL_STORM_TIMERS`, `CANCEL_STORM_THREADS`
//! and `CANCEL_STORM_ROUNDS`. The exit status is 1 when the worst lateness is over the budget
//! (a noisy machine can do that too: look at the load average before trusting a failure).
//! 4 M pending timers hold a few hundred MB.

use std::process::ExitCode;
use std::sync::mpsc;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use wheelpool::{ScheduledFuture, ScheduledThreadPool};

/// Worker threads of the pool.
const WORKERS: usize = 2;
/// How far away the storm's timers are: none of them may fire during a round.
const FAR: Duration = Duration::from_secs(3600);
/// The probe's delay.
const PROBE: Duration = Duration::from_millis(30);
/// How late the probe may run.
const BUDGET: Duration = Duration::from_millis(5);
/// How long a round waits for the probe before it calls it lost.
const PROBE_LIMIT: Duration = Duration::from_secs(60);

/// What the run is asked to do.
#[derive(Clone, Copy, Debug)]
struct Config {
    timers: usize,
    cancellers: usize,
    rounds: usize,
}

/// What one round measured.
#[derive(Clone, Copy, Debug)]
struct Round {
    /// Probe run instant - probe deadline in ms, negative if it ran early (`None`: it never ran).
    late_ms: Option<f64>,
    /// How long the probe's own schedule call took (part of its lateness).
    probe_call: Duration,
    /// Whether the cancellers were still at work when the probe ran.
    during_storm: bool,
    /// From the start of the storm until the last canceller finished.
    storm: Duration,
    /// Cancels that returned true (must be every timer).
    cancelled: usize,
}

fn main() -> ExitCode {
    let config = match config() {
        Ok(config) => config,
        Err(message) => {
            eprintln!("cancel_storm: {message}");
            return ExitCode::FAILURE;
        }
    };
    let pool = ScheduledThreadPool::builder()
        .threads(WORKERS)
        .thread_name("storm")
        .build()
        .expect("start the pool");
    println!(
        "cancel_storm: {} timers at {FAR:?}, {} cancellers, {} rounds, pool of {WORKERS} workers",
        config.timers, config.cancellers, config.rounds
    );
    let mut worst = f64::NEG_INFINITY;
    // A probe that never ran or ran early fails the check whatever its lateness.
    let mut lost = false;
    for round in 1..=config.rounds {
        let r = run_round(&pool, config);
        let rate = config.timers as f64 / r.storm.as_secs_f64();
        match r.late_ms {
            Some(late) => {
                worst = worst.max(late);
                lost |= late < 0.0;
                let early = if late < 0.0 { " (EARLY)" } else { "" };
                print!("round {round}: probe {late:.3} ms late{early}");
            }
            None => {
                lost = true;
                print!("round {round}: probe did not run within {PROBE_LIMIT:?}");
            }
        }
        println!(
            " ({} the storm; its schedule call took {:.3} ms); storm {:.1} ms, {:.2} M cancels/s, {} of {} cancelled",
            if r.during_storm { "during" } else { "after" },
            ms(r.probe_call),
            ms(r.storm),
            rate / 1e6,
            r.cancelled,
            config.timers
        );
    }
    let ok = !lost && worst <= ms(BUDGET);
    println!(
        "max lateness {worst:.3} ms over {} rounds (budget {:.0} ms): {}",
        config.rounds,
        ms(BUDGET),
        if ok { "within" } else { "OVER" }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Fills the wheel, then runs the storm with the probe in it.
fn run_round(pool: &ScheduledThreadPool, config: Config) -> Round {
    let shares = fill(pool, config);
    let barrier = Barrier::new(config.cancellers + 1);
    let (tx, rx) = mpsc::channel::<Instant>();
    thread::scope(|scope| {
        let cancellers: Vec<_> = shares
            .into_iter()
            .map(|share| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    share.iter().filter(|f| f.cancel()).count()
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let call = Instant::now();
        let deadline = call + PROBE;
        let probe = pool
            .schedule(
                move || {
                    // The receiver waits for this; if it gave up, nobody needs the instant.
                    let _ = tx.send(Instant::now());
                },
                PROBE,
            )
            .expect("schedule the probe");
        let probe_call = call.elapsed();
        let cancelled = cancellers
            .into_iter()
            .map(|c| c.join().expect("a canceller panicked"))
            .sum();
        let storm_end = Instant::now();
        let ran = rx.recv_timeout(PROBE_LIMIT).ok();
        drop(probe);
        Round {
            late_ms: ran.map(|at| match at.checked_duration_since(deadline) {
                Some(late) => ms(late),
                None => -ms(deadline - at),
            }),
            probe_call,
            during_storm: ran.is_some_and(|at| at < storm_end),
            storm: storm_end - start,
            cancelled,
        }
    })
}

/// Schedules `config.timers` far-away no-ops, from `config.cancellers` threads at once; returns
/// one share of the futures per canceller.
fn fill(pool: &ScheduledThreadPool, config: Config) -> Vec<Vec<ScheduledFuture<()>>> {
    let per = config.timers.div_ceil(config.cancellers);
    thread::scope(|scope| {
        let fillers: Vec<_> = (0..config.cancellers)
            .map(|i| {
                let count = per.min(config.timers.saturating_sub(i * per));
                scope.spawn(move || {
                    (0..count)
                        .map(|_| pool.schedule(|| (), FAR).expect("schedule a timer"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        fillers
            .into_iter()
            .map(|f| f.join().expect("a filler panicked"))
            .collect()
    })
}

/// The run's settings: arguments `TIMERS CANCELLERS ROUNDS`, else the environment, else
/// 4 000 000, 2 and 5.
fn config() -> Result<Config, String> {
    // `cargo bench` passes `--bench` (and maybe other flags): only the other arguments count.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let setting = |index: usize, var: &str, default: usize| -> Result<usize, String> {
        let text = args.get(index).cloned().or_else(|| std::env::var(var).ok());
        match text {
            None => Ok(default),
            Some(t) => match t.trim().replace('_', "").parse::<usize>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(format!(
                    "{var} (argument {}) must be a positive integer, not {t:?}",
                    index + 1
                )),
            },
        }
    };
    Ok(Config {
        timers: setting(0, "CANCEL_STORM_TIMERS", 4_000_000)?,
        cancellers: setting(1, "CANCEL_STORM_THREADS", 2)?,
        rounds: setting(2, "CANCEL_STORM_ROUNDS", 5)?,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

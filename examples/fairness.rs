//! Fairness in time: a due timer is not starved by local work.
//!
//! Every worker runs a chain of CPU-heavy links (each spins for `LINK`, then `execute`s the next
//! link from its worker, onto that worker's own deque, so the deque is never empty). Meanwhile:
//!
//! 1. a probe: `PROBES` one-shots of `PROBE`, one after the other, each recording how late it ran
//!    (run instant minus deadline, the deadline taken just before the schedule call);
//! 2. a fixed-rate task every `PERIOD` for `RATE_FOR`, with `MissedTicks::Skip`, so a run that is
//!    late by more than a period loses the slots it missed: its share of slots says how often
//!    it got a worker in time.
//!
//! A due timer waits for the link in progress on a worker to end (about one `LINK`), not for
//! dozens of links.
//!
//! 3. then, the chains stopped, `ROUNDS` rounds of 3 to 6 timers due at one instant on the idle
//!    pool, the first to run spinning for `LONG`: a round counts as waited if another of its
//!    timers started only after the spinner ended, although the other worker was idle.
//!
//! ```text
//! cargo run --release --example fairness                # 1 ms links
//! cargo run --release --example fairness -- 200         # 200 us links
//! ```

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wheelpool::{Handle, MissedTicks, ScheduledThreadPool};

/// Worker threads of the pool: each runs a chain.
const WORKERS: usize = 2;
/// The probe's delay.
const PROBE: Duration = Duration::from_millis(1);
/// How many probes, one after the other.
const PROBES: usize = 300;
/// The fixed-rate task's period, and how long it runs.
const PERIOD: Duration = Duration::from_millis(1);
const RATE_FOR: Duration = Duration::from_secs(1);
/// Part 3: rounds of timers due at one instant, and how long the first of each round runs.
const ROUNDS: usize = 200;
const LONG: Duration = Duration::from_micros(500);

/// A self-continuing chain of links, each spinning for `link`, until `stop`.
fn chain(handle: Handle, link: Duration, stop: Arc<AtomicBool>) {
    let end = Instant::now() + link;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
    if !stop.load(Ordering::Relaxed) {
        let h = handle.clone();
        let _ = handle.execute(move || chain(h, link, stop));
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let link_us: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000);
    let link = Duration::from_micros(link_us);
    let pool = ScheduledThreadPool::builder()
        .threads(WORKERS)
        .build()
        .expect("build the pool");
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..WORKERS {
        let (h, s) = (pool.handle(), stop.clone());
        pool.execute(move || chain(h, link, s)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20)); // the chains settle on the workers

    let mut late: Vec<Duration> = (0..PROBES)
        .map(|_| {
            let deadline = Instant::now() + PROBE;
            let ran = pool.schedule(Instant::now, PROBE).unwrap().join().unwrap();
            ran.saturating_duration_since(deadline)
        })
        .collect();
    late.sort();

    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let started = Instant::now();
    let rate = pool
        .handle()
        .task()
        .missed_ticks(MissedTicks::Skip)
        .schedule_at_fixed_rate(
            move || {
                r.fetch_add(1, Ordering::Relaxed);
            },
            PERIOD,
            PERIOD,
        )
        .unwrap();
    std::thread::sleep(RATE_FOR);
    rate.cancel();
    let slots = (started.elapsed().as_nanos() / PERIOD.as_nanos()) as f64;
    let share = runs.load(Ordering::Relaxed) as f64 / slots;
    stop.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(20)); // the chains' last links end
    let waited = (0..ROUNDS)
        .filter(|&round| beside_a_long_one(&pool, 3 + round % 4))
        .count();

    println!(
        "{WORKERS} workers each running a chain of {link:?} links:\n  \
         {PROBE:?} probe lateness p50 {:?}, p99 {:?}, max {:?} ({PROBES} probes)\n  \
         {PERIOD:?} fixed-rate task (Skip): {:.1}% of its slots over {RATE_FOR:?}\n\
         idle pool, 3-6 timers due at once, the first running {LONG:?}: another waited for it \
         in {waited} of {ROUNDS} rounds",
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        late[late.len() - 1],
        share * 100.0
    );
    pool.shutdown();
    pool.await_termination(Duration::from_secs(10));
}

/// One round of part 3: `k` timers due at one instant, the first to start spinning for `LONG`;
/// true if another started only after it ended.
fn beside_a_long_one(pool: &ScheduledThreadPool, k: usize) -> bool {
    let first_end = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let at = Instant::now() + Duration::from_millis(1);
    let futures: Vec<_> = (0..k)
        .map(|_| {
            let first_end = first_end.clone();
            pool.schedule_at(
                move || {
                    let start = Instant::now();
                    let mut end = first_end.lock().unwrap();
                    if end.is_none() {
                        *end = Some(start + LONG);
                        drop(end);
                        while Instant::now() < start + LONG {
                            std::hint::spin_loop();
                        }
                        return false;
                    }
                    end.is_some_and(|end| start >= end)
                },
                at,
            )
            .unwrap()
        })
        .collect();
    let mut waited = false;
    for f in futures {
        waited |= f.join().unwrap(); // every one joined: the next round starts on an idle pool
    }
    waited
}

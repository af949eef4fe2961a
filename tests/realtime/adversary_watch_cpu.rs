//! The watcher must not spin. A watcher that re-parks on a tick that has already come, or a
//! timer thread that keeps nudging it, burns a CPU while the pool looks idle. These tests read
//! the CPU time and the context switches of the pool's own threads (found by thread name in
//! `/proc/self/task`) over a window and bound them generously: a busy loop costs about the
//! whole window (1 000+ ms per second), an idle pool a few milliseconds at most. They assert on
//! work done, not on latency. Linux only (they are skipped where `/proc` has no `schedstat`).

#![cfg(not(wheelpool_loom))]

use crate::common;
use crate::common::{HOUR, LONG};
use crate::manual_common::bounded;
use std::fs;
use std::sync::atomic::Ordering::SeqCst;
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::ScheduledThreadPool;

/// CPU time and context switches of the threads whose name starts with a prefix.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    cpu: Duration,
    switches: u64,
    threads: usize,
}

/// Sums `/proc/self/task/*/schedstat` (nanoseconds on a CPU) and the context switches in
/// `status` over the threads named `prefix...`; `None` if `/proc` does not say.
fn usage(prefix: &str) -> Option<Usage> {
    let mut total = Usage::default();
    for entry in fs::read_dir("/proc/self/task").ok()? {
        let dir = entry.ok()?.path();
        let Ok(comm) = fs::read_to_string(dir.join("comm")) else {
            continue; // the thread exited meanwhile
        };
        if !comm.trim_end().starts_with(prefix) {
            continue;
        }
        let Ok(sched) = fs::read_to_string(dir.join("schedstat")) else {
            continue;
        };
        let nanos: u64 = sched.split_whitespace().next()?.parse().ok()?;
        let status = fs::read_to_string(dir.join("status")).unwrap_or_default();
        let switches: u64 = status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        total.cpu += Duration::from_nanos(nanos);
        total.switches += switches;
        total.threads += 1;
    }
    Some(total)
}

/// The pool threads' usage over `window`, or `None` where `/proc` cannot tell.
fn usage_over(prefix: &str, expected_threads: usize, window: Duration) -> Option<Usage> {
    let before = usage(prefix)?;
    // Where `/proc` answers, it must see the pool's threads (else the bounds check nothing).
    assert_eq!(
        before.threads, expected_threads,
        "{prefix}: pool threads in /proc"
    );
    thread::sleep(window);
    let after = usage(prefix)?;
    assert_eq!(after.threads, expected_threads, "{prefix}: pool threads");
    Some(Usage {
        cpu: after.cpu.saturating_sub(before.cpu),
        switches: after.switches - before.switches,
        threads: expected_threads,
    })
}

/// Waits until the pool's threads used no CPU and made no context switch over one 20 ms
/// sample: what the last timer set off (a search, a re-park) is over, however late a busy
/// machine lets those threads finish it. Bounded: a pool that spins never settles, and then
/// the measurement that follows shows the spin.
fn settle(prefix: &str) {
    let sample = Duration::from_millis(20);
    let end = Instant::now() + LONG;
    let Some(mut last) = usage(prefix) else {
        return;
    };
    while Instant::now() < end {
        thread::sleep(sample);
        let Some(now) = usage(prefix) else {
            return;
        };
        if now.cpu == last.cpu && now.switches == last.switches {
            return;
        }
        last = now;
    }
}

fn named_pool(prefix: &str, threads: usize, tick: Duration) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(threads)
        .thread_name(prefix)
        .tick(tick)
        .build()
        .unwrap()
}

/// Runs one short timer through the pool and waits for it, so a worker has watched (and
/// perhaps polled) a tick that has now come, and the pool then has nothing due soon.
fn one_timer_through(pool: &ScheduledThreadPool) {
    let mut f = pool.schedule(|| (), Duration::from_millis(1)).unwrap();
    f.join_timeout(LONG).expect("timer lost").unwrap();
}

/// An idle pool holding one timer an hour away (or at `Duration::MAX`): after a short timer went through (the watcher
/// or the timer thread polled it), neither the watcher nor the timer thread wakes. With 1, 2
/// and 8 workers, ticks of 1 us, 1 ms and 1 s. Bounds: under 50 ms of CPU and 20 context
/// switches over 1.5 s for all the pool's threads (a spinning watcher: ~1 500 ms).
#[test]
fn an_idle_pool_with_a_timer_an_hour_away_stays_still() {
    let _serial = crate::serial();
    bounded(|| {
        let cases = [
            ("idle-a", 1, Duration::from_millis(1)),
            ("idle-b", 2, Duration::from_micros(1)),
            ("idle-c", 8, Duration::from_millis(1)),
            ("idle-d", 2, Duration::from_secs(1)),
        ];
        let never = [
            ("never-a", 1, Duration::from_millis(1)),
            ("never-b", 3, Duration::from_nanos(255)),
        ];
        thread::scope(|s| {
            for (prefix, threads, tick) in cases {
                s.spawn(move || idle_case(prefix, threads, tick, HOUR));
            }
            for (prefix, threads, tick) in never {
                s.spawn(move || idle_case(prefix, threads, tick, Duration::MAX));
            }
        });
    });
}

fn idle_case(prefix: &str, threads: usize, tick: Duration, far: Duration) {
    let pool = named_pool(prefix, threads, tick);
    let _far = pool.schedule(|| (), far).unwrap();
    if tick < Duration::from_secs(1) {
        one_timer_through(&pool);
    }
    // Let the threads finish what the timer started (searching, re-parking).
    settle(prefix);
    let Some(u) = usage_over(prefix, threads + 1, Duration::from_millis(1_500)) else {
        return;
    };
    eprintln!("{prefix}: {threads} workers, tick {tick:?}, idle: {u:?}");
    assert!(
        u.cpu < Duration::from_millis(50),
        "{prefix}: busy while idle: {u:?}"
    );
    assert!(u.switches <= 20, "{prefix}: woke while idle: {u:?}");
}

/// A pool with nothing at all after a short timer went through: nobody wakes either (the
/// watcher parked without a limit, the timer thread without a deadline).
#[test]
fn an_empty_pool_after_a_timer_stays_still() {
    let _serial = crate::serial();
    bounded(|| {
        for threads in [1, 4] {
            let prefix = format!("empty-{threads}");
            let pool = named_pool(&prefix, threads, Duration::from_millis(1));
            for _ in 0..5 {
                one_timer_through(&pool);
            }
            settle(&prefix);
            let Some(u) = usage_over(&prefix, threads + 1, Duration::from_millis(1_000)) else {
                return;
            };
            eprintln!("{prefix}: {u:?}");
            assert!(u.cpu < Duration::from_millis(50), "{prefix}: busy: {u:?}");
            assert!(u.switches <= 20, "{prefix}: woke: {u:?}");
        }
    });
}

/// A 20 ms fixed-rate task for 2 s on 1 and 4 workers: about 100 runs, each a wake-up of the
/// watcher and of the timer thread. Bound: under 150 ms of CPU for the pool's threads in a
/// debug build (a spinning watcher: ~2 000 ms), and the task ran (loosely) as often as it
/// should.
#[test]
fn a_twenty_millisecond_heartbeat_costs_little_cpu() {
    let _serial = crate::serial();
    bounded(|| {
        thread::scope(|s| {
            for threads in [1, 4] {
                s.spawn(move || heartbeat_case(threads));
            }
        });
    });
}

fn heartbeat_case(threads: usize) {
    let (n, u) = heartbeat(
        threads,
        Duration::from_millis(20),
        Duration::from_millis(2_000),
    );
    assert!(
        u.cpu < Duration::from_millis(150),
        "beat-{threads}: busy: {u:?}"
    );
    // Loose: a stuck heartbeat shows, a slow machine does not.
    assert!(n >= 20, "beat-{threads}: only {n} runs");
}

/// Runs a fixed-rate task at `period` on `threads` workers and measures the pool's threads
/// over `window`; returns the runs in the window and the usage. Checks that the runs were not
/// ahead of the clock.
fn heartbeat(threads: usize, period: Duration, window: Duration) -> (usize, Usage) {
    let prefix = format!("beat-{threads}-{}", period.as_millis());
    let pool = named_pool(&prefix, threads, Duration::from_millis(1));
    // Before the schedule call: run k (from 1) is planned k periods after a later instant.
    let scheduled = Instant::now();
    let (runs, beat) = common::counting_fixed_rate(&pool, period);
    assert!(common::wait_until(LONG, || runs.load(SeqCst) >= 2));
    let start = Instant::now();
    let before = runs.load(SeqCst);
    let u = usage_over(&prefix, threads + 1, window).unwrap_or_default();
    let n = runs.load(SeqCst) - before;
    let elapsed = start.elapsed();
    eprintln!("{prefix}: {n} runs in {elapsed:?}: {u:?}");
    assert!(beat.cancel());
    // Never ahead of the clock, counted from the schedule call: a task that a busy machine
    // held back before the window catches up inside it (missed runs come in a burst), so the
    // window alone may hold more than `window / period` runs, each on time. Every run counted
    // here started at or after its planned time, before `since` was read.
    let total = runs.load(SeqCst);
    let since = scheduled.elapsed();
    assert!(
        total as u128 <= since.as_micros() / period.as_micros(),
        "{prefix}: {total} runs in {since:?}: ahead of the clock"
    );
    (n, u)
}

/// A timer due while the timer thread sits 50 ms short of it (its deadline 60-200 ms away):
/// the pool stays still until then and does not spin on the way (a timer thread or a worker
/// that woke long before the deadline and kept polling shows; a watcher is only told of the
/// deadline 50 ms before it, so this bound does not see what it does in those 50 ms). Also a 10 ms timer on a
/// 1 s tick (due at the next whole second, up to 1 s away) and a 60 ms one on a 255 ns tick.
/// The wait is the timer's own.
#[test]
fn waiting_for_a_timer_beyond_watch_ahead_does_not_spin() {
    let _serial = crate::serial();
    bounded(|| {
        thread::scope(|s| {
            s.spawn(|| ahead_case("ahead-ms", Duration::from_millis(1), &[60, 120, 200]));
            s.spawn(|| ahead_case("ahead-s", Duration::from_secs(1), &[10, 10]));
            s.spawn(|| ahead_case("ahead-ns", Duration::from_nanos(255), &[60, 1]));
        });
    });
}

fn ahead_case(prefix: &str, tick: Duration, delays_ms: &[u64]) {
    {
        let pool = named_pool(prefix, 2, tick);
        one_timer_through(&pool);
        for &delay_ms in delays_ms {
            let before = usage(prefix);
            let start = Instant::now();
            let mut f = pool
                .schedule(|| (), Duration::from_millis(delay_ms))
                .unwrap();
            f.join_timeout(LONG).expect("lost").unwrap();
            let (Some(before), Some(after)) = (before, usage(prefix)) else {
                return;
            };
            assert_eq!(after.threads, 3, "{prefix}: pool threads in /proc");
            let cpu = after.cpu.saturating_sub(before.cpu);
            let waited = start.elapsed();
            eprintln!("{prefix}: {delay_ms} ms timer, {waited:?}: {cpu:?}");
            assert!(
                cpu < Duration::from_millis(20) + waited / 20,
                "{prefix}: {cpu:?} of CPU while waiting {waited:?}"
            );
        }
    }
}

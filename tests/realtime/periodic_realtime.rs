#![cfg(not(wheelpool_loom))]
//! Periodic tasks on the system clock. Bounds are generous and one-sided: runs happen, none
//! early, none overlapping, none after a cancel; nothing here asserts speed. Waiting is on
//! channels and futures with long timeouts, never a sleep; a run "takes time" by spinning or
//! sleeping inside the task itself.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use wheelpool::{MissedTicks, ScheduledFuture, ScheduledThreadPool, TaskError};

/// Generous bound for anything that should happen within milliseconds.
const LIMIT: Duration = Duration::from_secs(20);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn pool(threads: usize) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(threads)
        .build()
        .unwrap()
}

fn join_within<T: Send + 'static>(mut f: ScheduledFuture<T>) -> Result<T, TaskError> {
    f.join_timeout(LIMIT)
        .expect("the future did not end in time")
}

#[test]
fn fixed_rate_runs_on_its_grid_and_never_early() {
    let _serial = crate::serial();
    let pool = pool(2);
    let (tx, rx) = mpsc::channel();
    let start = Instant::now(); // taken before the schedule call: planned times are later
    let f = pool
        .schedule_at_fixed_rate(
            move || {
                let _ = tx.send(Instant::now());
            },
            ms(10),
            ms(5),
        )
        .unwrap();
    let runs: Vec<Instant> = (0..20)
        .map(|_| rx.recv_timeout(LIMIT).expect("a run"))
        .collect();
    for (k, at) in runs.iter().enumerate() {
        let planned = start + ms(10) + ms(5) * k as u32;
        assert!(*at >= planned, "run {k} came {:?} early", planned - *at);
    }
    assert!(f.cancel());
    assert_eq!(join_within(f), Err(TaskError::Cancelled));
    let _before_or_during_cancel = rx.try_iter().count();
    // Give it well past several periods (a sentinel one-shot, not a sleep): nothing more runs.
    pool.schedule(|| (), ms(30)).unwrap().join().unwrap();
    assert_eq!(rx.try_iter().count(), 0, "a run after cancel returned true");
}

#[test]
fn fixed_delay_waits_the_delay_after_each_run_ends() {
    let _serial = crate::serial();
    let pool = pool(2);
    let (tx, rx) = mpsc::channel();
    let f = pool
        .schedule_with_fixed_delay(
            move || {
                let begin = Instant::now();
                crate::work_for(ms(2));
                let _ = tx.send((begin, Instant::now()));
            },
            ms(1),
            ms(5),
        )
        .unwrap();
    let runs: Vec<(Instant, Instant)> = (0..15)
        .map(|_| rx.recv_timeout(LIMIT).expect("a run"))
        .collect();
    assert!(f.cancel());
    for pair in runs.windows(2) {
        let (_, prev_end) = pair[0];
        let (next_begin, _) = pair[1];
        assert!(
            next_begin >= prev_end + ms(5),
            "next run began {:?} after the previous ended",
            next_begin - prev_end
        );
    }
    assert_eq!(join_within(f), Err(TaskError::Cancelled));
}

#[test]
fn slow_runs_on_many_workers_never_overlap() {
    let _serial = crate::serial();
    let pool = pool(4);
    let mut probes = Vec::new();
    let mut futures = Vec::new();
    for policy in [MissedTicks::Burst, MissedTicks::Skip, MissedTicks::Delay] {
        let inside = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let (i, m, r) = (inside.clone(), max.clone(), runs.clone());
        let f = pool
            .task()
            .missed_ticks(policy)
            .schedule_at_fixed_rate(
                move || {
                    let now = i.fetch_add(1, SeqCst) + 1;
                    m.fetch_max(now, SeqCst);
                    std::thread::sleep(ms(3)); // a slow run: three 1 ms periods
                    r.fetch_add(1, SeqCst);
                    i.fetch_sub(1, SeqCst);
                },
                Duration::ZERO,
                ms(1),
            )
            .unwrap();
        probes.push((policy, max, runs));
        futures.push(f);
    }
    let limit = Instant::now() + LIMIT;
    while probes.iter().any(|(_, _, runs)| runs.load(SeqCst) < 25) {
        assert!(Instant::now() < limit, "the tasks did not reach 25 runs");
        std::thread::yield_now();
    }
    for f in futures {
        assert!(f.cancel());
        assert_eq!(join_within(f), Err(TaskError::Cancelled));
    }
    for (policy, max, _) in probes {
        assert_eq!(
            max.load(SeqCst),
            1,
            "{policy:?}: two runs of one task overlapped"
        );
    }
}

#[test]
fn cancel_racing_rearm_on_the_system_clock() {
    let _serial = crate::serial();
    let pool = pool(2);
    let mut finals = Vec::new();
    for i in 0..300u64 {
        let started = Arc::new(AtomicUsize::new(0));
        let s = started.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    s.fetch_add(1, SeqCst);
                },
                Duration::ZERO,
                Duration::from_micros(500),
            )
            .unwrap();
        let limit = Instant::now() + LIMIT;
        while started.load(SeqCst) < (i % 3) as usize {
            assert!(Instant::now() < limit, "no runs");
            std::hint::spin_loop();
        }
        for _ in 0..(i * 7919 % 3000) {
            std::hint::spin_loop();
        }
        assert!(f.cancel());
        let running = pool.stats().running;
        let snapshot = started.load(SeqCst);
        assert_eq!(join_within(f), Err(TaskError::Cancelled));
        let after = started.load(SeqCst);
        assert!(
            after <= snapshot + 1,
            "iteration {i}: {snapshot} runs at cancel, {after} later"
        );
        if running == 0 {
            assert_eq!(
                after, snapshot,
                "iteration {i}: a run started after cancel returned true"
            );
        }
        finals.push((started, after));
    }
    pool.shutdown();
    assert!(pool.await_termination(LIMIT));
    for (i, (started, at_join)) in finals.iter().enumerate() {
        assert_eq!(
            started.load(SeqCst),
            *at_join,
            "iteration {i}: a run after the future ended"
        );
    }
}

#[test]
fn shutdown_stops_periodic_tasks_and_delayed_one_shots_still_run() {
    let _serial = crate::serial();
    let pool = pool(2);
    let runs = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    let r = runs.clone();
    let beat = pool
        .schedule_at_fixed_rate(
            move || {
                r.fetch_add(1, SeqCst);
                let _ = tx.send(());
            },
            Duration::ZERO,
            ms(2),
        )
        .unwrap();
    let later = pool.schedule(|| "one-shot ran", ms(40)).unwrap();
    for _ in 0..3 {
        rx.recv_timeout(LIMIT).expect("a beat");
    }
    pool.shutdown();
    assert_eq!(join_within(beat), Err(TaskError::Shutdown));
    let at_stop = runs.load(SeqCst);
    assert_eq!(join_within(later), Ok("one-shot ran"));
    assert!(pool.await_termination(LIMIT));
    assert_eq!(
        runs.load(SeqCst),
        at_stop,
        "no periodic run after its future ended"
    );
}

#[test]
fn a_surviving_heartbeat_keeps_beating_through_panics() {
    let _serial = crate::serial();
    let panics = Arc::new(AtomicUsize::new(0));
    let p = panics.clone();
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .panic_handler(move |_| {
            p.fetch_add(1, SeqCst);
        })
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let flip = Arc::new(AtomicBool::new(false));
    let f = pool
        .task()
        .survive_panics(true)
        .schedule_at_fixed_rate(
            move || {
                let _ = tx.send(());
                if !flip.fetch_xor(true, SeqCst) {
                    panic!("flaky heartbeat");
                }
            },
            Duration::ZERO,
            ms(2),
        )
        .unwrap();
    for _ in 0..10 {
        rx.recv_timeout(LIMIT).expect("still beating");
    }
    assert!(f.cancel());
    assert_eq!(join_within(f), Err(TaskError::Cancelled));
    assert!(
        panics.load(SeqCst) >= 5,
        "every other run panicked and was reported"
    );
}

/// A `Burst` fixed-rate task plans its next run from the time its run started (one clock read
/// a run): a run that overruns its next slots sends the re-arm through the wheel, which must
/// still replay every missed slot back to back, none early, and then keep to the grid.
#[test]
fn a_burst_run_that_overruns_replays_its_missed_slots_then_keeps_the_grid() {
    let _serial = crate::serial();
    let pool = pool(2);
    let (tx, rx) = mpsc::channel();
    let start = Instant::now(); // before the schedule call: planned times are later
    let first = Arc::new(AtomicBool::new(true));
    let f = pool
        .task()
        .missed_ticks(MissedTicks::Burst)
        .schedule_at_fixed_rate(
            move || {
                let began = Instant::now();
                if first.swap(false, SeqCst) {
                    crate::work_for(ms(23)); // over the slots at 5, 10, 15 and 20 ms after this one
                }
                let _ = tx.send((began, Instant::now()));
            },
            ms(10),
            ms(5),
        )
        .unwrap();
    let runs: Vec<(Instant, Instant)> = (0..12)
        .map(|_| rx.recv_timeout(LIMIT).expect("a run"))
        .collect();
    assert!(f.cancel());
    for (k, (began, _)) in runs.iter().enumerate() {
        let planned = start + ms(10) + ms(5) * k as u32;
        assert!(
            *began >= planned,
            "run {k} came {:?} early",
            planned - *began
        );
    }
    for k in 1..runs.len() {
        assert!(
            runs[k].0 >= runs[k - 1].1,
            "runs {} and {k} overlapped",
            k - 1
        );
    }
    // The slots the first run overran were due when it ended: each replay starts once the one
    // before it ended, not a slot later (bounded generously for a busy machine).
    let (_, overrun_end) = runs[0];
    for k in 1..=4 {
        let waited = runs[k]
            .0
            .saturating_duration_since(runs[k - 1].1.max(overrun_end));
        assert!(
            waited < ms(500),
            "replay {k} waited {waited:?} after the run before it"
        );
    }
}

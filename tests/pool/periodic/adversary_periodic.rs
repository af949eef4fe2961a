//! Adversarial cancels of periodic tasks on the real clock: two threads cancel 300 tasks that
//! re-arm every millisecond (fixed rate, fixed delay, dynamic), at random moments, while they
//! run, wait, or re-arm. After a cancel returns true, at most the run already under way may
//! still be seen starting (its closure may begin just after the state flipped), never a later
//! one; runs of one task never overlap; every future ends `Cancelled`.

#![cfg(not(wheelpool_loom))]

use crate::manual_common::bounded;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use wheelpool::{ScheduledThreadPool, TaskError};

const LONG: Duration = Duration::from_secs(20);

/// Polls `cond` every millisecond until it holds (true) or `LONG` passes (false).
fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + LONG;
    while !cond() {
        if std::time::Instant::now() >= end {
            return cond();
        }
        thread::sleep(Duration::from_millis(1));
    }
    true
}

#[derive(Default)]
struct Probe {
    /// Set right after the cancel that returned true.
    cancelled: AtomicBool,
    /// Runs that began after `cancelled` was set.
    late_starts: AtomicUsize,
    /// A run is in progress (to catch overlapping runs).
    inside: AtomicBool,
    runs: AtomicUsize,
}

impl Probe {
    fn run(&self) {
        assert!(
            !self.inside.swap(true, SeqCst),
            "two runs of one task overlap"
        );
        if self.cancelled.load(SeqCst) {
            self.late_starts.fetch_add(1, SeqCst);
        }
        self.runs.fetch_add(1, SeqCst);
        // A little work, so cancels land inside runs too.
        std::hint::black_box((0..200).sum::<u64>());
        self.inside.store(false, SeqCst);
    }
}

#[test]
fn cancels_racing_millisecond_periodic_tasks_stop_them_for_good() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("periodic cancel race seed {seed}");
    bounded(move || {
        let pool = Arc::new(ScheduledThreadPool::builder().threads(4).build().unwrap());
        let ms1 = Duration::from_millis(1);
        let mut tasks = Vec::new();
        for k in 0..300usize {
            let probe = Arc::new(Probe::default());
            let p = probe.clone();
            let f = match k % 4 {
                0 => pool.schedule_at_fixed_rate(move || p.run(), Duration::ZERO, ms1),
                1 => pool.schedule_with_fixed_delay(move || p.run(), Duration::ZERO, ms1),
                2 => pool.schedule_at_dynamic_rate(
                    move || {
                        p.run();
                        Some(Duration::ZERO)
                    },
                    Duration::ZERO,
                ),
                _ => pool.schedule_with_dynamic_delay(
                    move || {
                        p.run();
                        Some(Duration::from_micros(300))
                    },
                    Duration::ZERO,
                ),
            }
            .unwrap();
            tasks.push((probe, f));
        }
        let tasks = Arc::new(tasks);
        thread::scope(|s| {
            for c in 0..2u64 {
                let tasks = tasks.clone();
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed ^ c);
                    for (k, (probe, f)) in tasks.iter().enumerate() {
                        if k % 2 != c as usize {
                            continue;
                        }
                        // Let it run a random while (a bounded spin, not a timed wait).
                        for _ in 0..rng.gen_range(0..20_000) {
                            std::hint::spin_loop();
                        }
                        assert!(
                            f.cancel(),
                            "task {k}: a live periodic task refused a cancel"
                        );
                        probe.cancelled.store(true, SeqCst);
                    }
                });
            }
        });
        let tasks = Arc::into_inner(tasks).unwrap();
        let mut runs = 0;
        for (k, (probe, mut f)) in tasks.into_iter().enumerate() {
            assert_eq!(
                f.join_timeout(LONG),
                Some(Err(TaskError::Cancelled)),
                "task {k}"
            );
            // Counted once the future has ended: a run under way at the cancel finishes (and
            // counts itself) first, however long a busy machine holds its worker back.
            runs += probe.runs.load(SeqCst) as u64;
            let late = probe.late_starts.load(SeqCst);
            assert!(
                late <= 1,
                "task {k}: {late} runs began after cancel returned true"
            );
        }
        // A run that re-armed its task counts itself completed just after the task is waiting
        // again, so a cancel (and a join) can slip in between: the counters may trail the
        // futures by that moment. Wait for them (bounded), then check them exactly.
        let settled = |s: &wheelpool::PoolStats| {
            (s.pending, s.running, s.cancelled, s.completed) == (0, 0, 300, runs)
        };
        assert!(wait_until(|| settled(&pool.stats())), "{:?}", pool.stats());
        let stats = pool.stats();
        assert_eq!((stats.pending, stats.running), (0, 0), "{stats:?}");
        assert_eq!(stats.cancelled, 300, "{stats:?}");
        assert_eq!(
            stats.completed, runs,
            "every run returned normally: {stats:?}"
        );
    });
}

//! Adversarial: resets and cancels of timers in crowded coarse slots while the timer thread
//! stages them (wheel/stage.rs), from several threads, with exact accounting.

#![cfg(not(wheelpool_loom))]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::{ScheduledFuture, ScheduledThreadPool};

/// One timer: its deadline (guarded, so a reset and the run's check cannot interleave) and how
/// often it ran.
struct Timer {
    deadline: Mutex<Instant>,
    runs: AtomicU32,
}

/// 40 000 one-shots spread over 200 ms starting 300 ms ahead (two level-3 slots at the 1 us
/// tick, both staged within the horizon), then four threads for 350 ms: reset (by delay, by
/// instant, try_reset) to 1-300 ms ahead, or cancel, at random. Afterwards every timer ran
/// exactly once unless a cancel succeeded (then never), and no run started before the deadline
/// its last successful reset set.
#[test]
fn resets_and_cancels_racing_staging_lose_nothing_and_run_nothing_early_or_twice() {
    let _serial = crate::serial();
    let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
    let t0 = Instant::now();
    let n = 40_000u64;
    let early = Arc::new(AtomicU32::new(0));
    let timers: Arc<Vec<(Arc<Timer>, ScheduledFuture<()>)>> = Arc::new(
        (0..n)
            .map(|i| {
                let deadline = t0 + Duration::from_millis(300) + Duration::from_micros(i * 5);
                let timer = Arc::new(Timer {
                    deadline: Mutex::new(deadline),
                    runs: AtomicU32::new(0),
                });
                let (t, early) = (timer.clone(), early.clone());
                let f = pool
                    .schedule_at(
                        move || {
                            let deadline = *t.deadline.lock().unwrap();
                            if Instant::now() < deadline {
                                early.fetch_add(1, Ordering::Relaxed);
                            }
                            t.runs.fetch_add(1, Ordering::Relaxed);
                        },
                        deadline,
                    )
                    .unwrap();
                (timer, f)
            })
            .collect(),
    );
    let cancelled: Vec<Vec<usize>> = thread::scope(|s| {
        let workers: Vec<_> = (0..4u64)
            .map(|seed| {
                let timers = timers.clone();
                s.spawn(move || {
                    let mut x = 0x2545_F491_4F6C_DD1D ^ (seed + 1).wrapping_mul(0x9E37_79B9);
                    let mut rand = move || {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x
                    };
                    let mut cancelled = Vec::new();
                    let end = t0 + Duration::from_millis(350);
                    while Instant::now() < end {
                        let i = rand() as usize % timers.len();
                        let (timer, f) = &timers[i];
                        let delay = Duration::from_micros(1_000 + rand() % 299_000);
                        let mut deadline = timer.deadline.lock().unwrap();
                        let at = Instant::now() + delay;
                        let moved = match rand() % 64 {
                            0 => {
                                if f.cancel() {
                                    cancelled.push(i);
                                }
                                false
                            }
                            1..=21 => f.reset_at(at),
                            22..=42 => f.try_reset(delay).is_ok(),
                            _ => f.reset(delay),
                        };
                        if moved {
                            // The reset's own `now` came after `at` was taken: its deadline
                            // is at `at` or a little later, never earlier.
                            *deadline = at;
                        }
                    }
                    cancelled
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let mut was_cancelled = vec![false; timers.len()];
    for i in cancelled.into_iter().flatten() {
        was_cancelled[i] = true;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for (i, (timer, f)) in timers.iter().enumerate() {
        if was_cancelled[i] {
            assert!(f.is_cancelled());
            continue;
        }
        while !f.is_done() {
            assert!(Instant::now() < deadline, "timer {i} lost");
            thread::sleep(Duration::from_millis(1));
        }
        let _ = timer;
    }
    // Every future is done: the runs are final.
    for (i, (timer, _)) in timers.iter().enumerate() {
        let runs = timer.runs.load(Ordering::Relaxed);
        let want = u32::from(!was_cancelled[i]);
        assert_eq!(
            runs, want,
            "timer {i} (cancelled: {}) ran {runs} times",
            was_cancelled[i]
        );
    }
    assert_eq!(
        early.load(Ordering::Relaxed),
        0,
        "runs before their deadline"
    );
    let stats = pool.stats();
    assert_eq!(stats.completed + stats.cancelled, n);
    eprintln!("took {:?}; stats {stats:?}", t0.elapsed());
}

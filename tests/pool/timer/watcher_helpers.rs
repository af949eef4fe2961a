//! Helpers for a watcher's due tasks ("Helpers for the watcher's due tasks" in
//! `src/timer/mod.rs`): an idle worker whose poll finds a few timers due runs them itself and
//! leaves waking another worker to the timer thread, which does it on its next pass if they
//! still wait. So a timer that came due beside a long one must still get a worker of its own,
//! and soon: here the long one waits for the others to finish, so without that wake-up every
//! round would wait out its whole bound.

#![cfg(not(wheelpool_loom))]

use crate::common::{Latch, LONG};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wheelpool::ScheduledThreadPool;

/// How long the first task of a round waits for the others before the round fails. Generous
/// for a busy machine; a working pool needs about 0.2 ms (the timer thread's next pass).
const BOUND: Duration = Duration::from_secs(10);

#[test]
fn timers_due_beside_a_long_one_get_another_worker() {
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let mut slowest = Duration::ZERO;
    for round in 0..200usize {
        // 2 to 8 timers due at one instant, scheduled from one thread: one shard, and usually
        // one poll of the watcher (at most 7 left for the timer thread to find help for).
        let k = 2 + round % 7;
        let started = Arc::new(AtomicUsize::new(0));
        let others_done = Arc::new(AtomicUsize::new(0));
        let all_others = Latch::new();
        let at = Instant::now() + Duration::from_millis(1);
        let futures: Vec<_> = (0..k)
            .map(|_| {
                let (started, others_done, all_others) =
                    (started.clone(), others_done.clone(), all_others.clone());
                pool.schedule_at(
                    move || {
                        if started.fetch_add(1, SeqCst) == 0 {
                            // The first to run holds its worker until the others have run.
                            let waited = Instant::now();
                            let ok = all_others.wait(BOUND);
                            return Some((ok, waited.elapsed()));
                        }
                        if others_done.fetch_add(1, SeqCst) + 1 == k - 1 {
                            all_others.open();
                        }
                        None
                    },
                    at,
                )
                .unwrap()
            })
            .collect();
        let mut firsts = 0;
        for mut f in futures {
            let first = f
                .join_timeout(LONG)
                .expect("every timer runs")
                .expect("and completes");
            if let Some((ok, waited)) = first {
                assert!(
                    ok,
                    "round {round}: {} timers waited {waited:?} behind one",
                    k - 1
                );
                slowest = slowest.max(waited);
                firsts += 1;
            }
        }
        assert_eq!(firsts, 1, "round {round}: exactly one task ran first");
    }
    eprintln!("slowest wait of a first task for the others: {slowest:?}");
}

//! Adversarial: fixed-rate tasks with periods of 1-50 us at the 1 us tick, under each
//! `MissedTicks` policy, while the adaptive slack batches them.

#![cfg(not(wheelpool_loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::{MissedTicks, ScheduledThreadPool};

/// Run `k` (from 0) never starts before `start + k * period` whatever the policy (Burst runs
/// on the grid, Skip and Delay run less often), no two runs overlap, and a true cancel lets at
/// most the run already started finish.
#[test]
fn microsecond_periods_are_never_early_never_overlap_and_stop_on_cancel() {
    let _serial = crate::serial();
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    for period_us in [1u64, 7, 50] {
        for policy in [MissedTicks::Burst, MissedTicks::Skip, MissedTicks::Delay] {
            let period = Duration::from_micros(period_us);
            let delay = Duration::from_micros(100);
            let runs = Arc::new(AtomicU64::new(0));
            let early = Arc::new(AtomicU64::new(0));
            let overlaps = Arc::new(AtomicU64::new(0));
            let busy = Arc::new(AtomicBool::new(false));
            let start = Instant::now() + delay; // the task's own start is a little later
            let (r, e, o, b) = (runs.clone(), early.clone(), overlaps.clone(), busy.clone());
            let f = pool
                .task()
                .missed_ticks(policy)
                .schedule_at_fixed_rate(
                    move || {
                        if b.swap(true, Ordering::SeqCst) {
                            o.fetch_add(1, Ordering::Relaxed);
                        }
                        let k = r.fetch_add(1, Ordering::Relaxed);
                        if Instant::now() < start + period * k as u32 {
                            e.fetch_add(1, Ordering::Relaxed);
                        }
                        b.store(false, Ordering::SeqCst);
                    },
                    delay,
                    period,
                )
                .unwrap();
            thread::sleep(Duration::from_millis(60));
            assert!(f.cancel());
            let at_cancel = runs.load(Ordering::SeqCst);
            thread::sleep(Duration::from_millis(5));
            let after = runs.load(Ordering::SeqCst);
            let case = format!("period {period_us} us, {policy:?}");
            assert!(at_cancel > 0, "{case}: never ran");
            assert_eq!(
                early.load(Ordering::Relaxed),
                0,
                "{case}: runs ahead of the grid"
            );
            assert_eq!(
                overlaps.load(Ordering::Relaxed),
                0,
                "{case}: overlapping runs"
            );
            assert!(
                after - at_cancel <= 1,
                "{case}: {} runs after cancel",
                after - at_cancel
            );
        }
    }
}

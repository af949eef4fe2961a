//! Adversarial tests of staging (wheel/stage.rs, "Staging" in timer/mod.rs) in real time: a
//! crowded coarse slot in a shard that nothing polls before the slot's first tick.

#![cfg(not(wheelpool_loom))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wheelpool::ScheduledThreadPool;

/// One round: `n` timers spread over 200 ms of one level-3 slot (262 ms at the 1 us tick),
/// scheduled from one thread (one shard) 470 ms before the slot, with nothing else in the
/// pool. Returns the worst lateness of the timers due in the slot's first 64 us, or `None` if
/// scheduling them took so long (a busy machine) that the slot's staging window was missed:
/// such a round measures nothing and is not counted.
fn crowded_slot_round(n: u64) -> Option<Duration> {
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    // The origin lies before `built`; level-3 slot 2 spans [524.288 ms, 786.432 ms) from it.
    let built = Instant::now();
    let first = built + Duration::from_micros(524_288 + 300);
    let worst = Arc::new(AtomicU64::new(0));
    let futures: Vec<_> = (0..n)
        .map(|i| {
            let offset = Duration::from_micros(i % 200_000);
            let deadline = first + offset;
            let worst = worst.clone();
            let early = offset < Duration::from_micros(64);
            pool.schedule_at(
                move || {
                    let late = Instant::now().saturating_duration_since(deadline);
                    if early {
                        worst.fetch_max(late.as_nanos() as u64, Ordering::Relaxed);
                    }
                },
                deadline,
            )
            .unwrap()
        })
        .collect();
    let scheduled_in = built.elapsed();
    for f in futures {
        f.join().unwrap(); // every timer runs, whatever the round measured
    }
    (scheduled_in < Duration::from_millis(400))
        .then(|| Duration::from_nanos(worst.load(Ordering::Relaxed)))
}

/// 300 000 timers in one coarse slot, scheduled well before it, in a shard that nothing polls
/// meanwhile. Staging must still happen ahead of the slot: the first timers due in it may not
/// wait for its whole cascade (about 3 ms here before the driver staged unpolled shards; about
/// 0.1 ms after). The best of the rounds that could measure keeps a busy machine's noise out;
/// on a machine too busy to schedule 300 000 timers in 400 ms no round can, and the test says
/// so instead of failing (every timer still has to run). Ignored by default: under two CPU
/// burners per core a measuring round saw 6.9 ms from the kernel's scheduling alone, so the
/// bound that tells the defect (2-3 ms) from its fix (0.1-0.3 ms) only holds on an idle
/// machine. What is checked on every run is the wheel's side (`src/wheel/tests.rs`).
#[test]
#[ignore = "a lateness bound in real time: run on an idle machine (cargo test --test realtime -- --ignored adversary_staging)"]
fn a_crowded_coarse_slot_nobody_polls_is_staged_before_it_comes() {
    let _serial = crate::serial();
    let mut measured = Vec::new();
    for _ in 0..4 {
        if let Some(worst) = crowded_slot_round(300_000) {
            measured.push(worst);
            if measured.len() == 2 {
                break;
            }
        }
    }
    let Some(&best) = measured.iter().min() else {
        eprintln!("no round could measure: scheduling 300 000 timers took over 400 ms each time");
        return;
    };
    eprintln!("first timers of a crowded slot: worst lateness {best:?} (best of {measured:?})");
    assert!(
        best < Duration::from_micros(1_500),
        "the first timers of a crowded slot ran {best:?} late: cascaded when the slot came"
    );
}

//! Many threads scheduling and cancelling at once: the memory of cancelled timers
//! stays bounded, cancels from other threads than the scheduler's unlink at once, and with
//! `shutdown_now` racing all of it every task still ends exactly one way.
//!
//! Memory is measured with a counting global allocator (live heap bytes of this test binary),
//! not RSS: it sees every task cell and wheel node, and nothing else moves it much.
//! `WHEELPOOL_STRESS_FULL=1` runs longer versions (build with `--release`).

#![cfg(not(wheelpool_loom))]

use crate::ALLOC;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::{CancelHandle, ScheduleError, ScheduledThreadPool};

fn live_bytes() -> isize {
    ALLOC.allocated() as isize
}

/// The tests here share the allocator's count and the capture counters: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn full() -> bool {
    std::env::var_os("WHEELPOOL_STRESS_FULL").is_some_and(|v| v != "0")
}

/// Counts drops of the values closures capture.
static CAPTURES_DROPPED: AtomicUsize = AtomicUsize::new(0);
static CAPTURES_MADE: AtomicUsize = AtomicUsize::new(0);

/// A captured value; it may also raise a flag of its own when dropped.
struct Capture(Option<Arc<AtomicBool>>);

impl Capture {
    fn new() -> Self {
        CAPTURES_MADE.fetch_add(1, Ordering::SeqCst);
        Capture(None)
    }

    fn flagged(flag: &Arc<AtomicBool>) -> Self {
        let mut c = Capture::new();
        c.0 = Some(flag.clone());
        c
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        CAPTURES_DROPPED.fetch_add(1, Ordering::SeqCst);
        if let Some(flag) = &self.0 {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

/// Four threads each schedule a 30 s timeout and cancel it, as fast as they can, while one
/// long-lived timer keeps the timer thread asleep. Live heap must not grow with the number of
/// pairs (the old design queued the cells of cancelled tasks: +1.3 GB in 8 s), and every
/// captured value is dropped before its `cancel` returns.
#[test]
fn four_threads_churning_schedule_and_cancel_hold_no_memory() {
    let _serial = crate::serial();
    let _serial = serial();
    let pairs_per_thread = if full() { 2_000_000 } else { 100_000 };
    let threads = 4;
    let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
    let _keeper = pool.schedule(|| (), Duration::from_secs(3600)).unwrap();
    // Warm up (shards' slabs, thread-locals), then take the baseline.
    churn(&pool, threads, 10_000);
    let before = live_bytes();
    let start = Instant::now();
    thread::scope(|s| {
        for _ in 0..threads {
            let pool = pool.clone();
            s.spawn(move || {
                for i in 0..pairs_per_thread {
                    // Every 64th capture carries a flag: its drop must come before cancel returns.
                    let flag = (i % 64 == 0).then(|| Arc::new(AtomicBool::new(false)));
                    let c = flag.as_ref().map_or_else(Capture::new, Capture::flagged);
                    let f = pool
                        .schedule(move || drop(c), Duration::from_secs(30))
                        .unwrap();
                    assert!(f.cancel());
                    if let Some(flag) = flag {
                        assert!(flag.load(Ordering::SeqCst), "closure outlived its cancel");
                    }
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let growth = live_bytes() - before;
    eprintln!(
        "churn: {} pairs on {threads} threads in {elapsed:.2?}, live heap growth {growth} B",
        pairs_per_thread * threads,
    );
    // A few pending pairs' worth of slab room may stay allocated; nothing proportional to
    // the 400 k (or 8 M) pairs.
    assert!(
        growth < 64 << 10,
        "live heap grew by {growth} B over {} cancelled timers",
        pairs_per_thread * threads
    );
    assert_eq!(pool.stats().pending, 1);
}

fn churn(pool: &ScheduledThreadPool, threads: usize, pairs: usize) {
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..pairs {
                    let f = pool.schedule(|| (), Duration::from_secs(30)).unwrap();
                    f.cancel();
                }
            });
        }
    });
}

/// What became of one task.
#[derive(Default)]
struct Fate {
    ran: AtomicUsize,
    cancelled: AtomicUsize,
    rejected: AtomicUsize,
}

/// Four producers schedule (due now, soon, or in an hour) and hand every task's cancel handle
/// to two canceller threads, which cancel from threads other than the scheduler's; one thread
/// calls `shutdown_now` in the middle of it all. Every task ends exactly one way: it ran, a
/// cancel stopped it before it started, `shutdown_now` handed it back, or its schedule was
/// refused; and every captured value is dropped exactly once.
#[test]
fn producers_and_other_threads_cancelling_race_shutdown_now() {
    let _serial = crate::serial();
    let _serial = serial();
    let per_producer = if full() { 200_000 } else { 20_000 };
    let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
    let fates: Arc<Mutex<Vec<Arc<Fate>>>> = Arc::default();
    let returned = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let made_before = CAPTURES_MADE.load(Ordering::SeqCst);
    assert_eq!(CAPTURES_DROPPED.load(Ordering::SeqCst), made_before);
    let producers_done = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel::<(Arc<Fate>, CancelHandle)>();
    // Cancellers stop every other task, so some far ones are still waiting at shutdown_now.
    let rx = Arc::new(Mutex::new(rx));
    thread::scope(|s| {
        for p in 0..4u64 {
            let (pool, fates, tx) = (pool.clone(), fates.clone(), tx.clone());
            let done = producers_done.clone();
            s.spawn(move || {
                for i in 0..per_producer {
                    let fate = Arc::new(Fate::default());
                    fates.lock().unwrap().push(fate.clone());
                    let (f2, c) = (fate.clone(), Capture::new());
                    let delay = match (i as u64 ^ p) % 4 {
                        0 => Duration::ZERO,
                        1 | 2 => Duration::from_micros(i as u64 % 3_000),
                        _ => Duration::from_secs(3600),
                    };
                    let run = move || {
                        let _c = c;
                        f2.ran.fetch_add(1, Ordering::SeqCst);
                    };
                    match pool.schedule(run, delay) {
                        Ok(f) if i % 2 == 1 => {
                            let _ = tx.send((fate, f.cancel_handle()));
                        }
                        Ok(_detached) => {}
                        Err(e) => {
                            assert_eq!(e, ScheduleError::Shutdown);
                            fate.rejected.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        drop(tx);
        for _ in 0..2 {
            let rx = rx.clone();
            s.spawn(move || loop {
                let next = rx.lock().unwrap().recv();
                let Ok((fate, handle)) = next else { break };
                if handle.cancel() {
                    fate.cancelled.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        let (pool, returned, stop) = (pool.clone(), returned.clone(), stop.clone());
        let producers_done = producers_done.clone();
        s.spawn(move || {
            // In the thick of it: after some runs, or at the latest when the producers finish.
            while pool.stats().completed < 10_000 && producers_done.load(Ordering::SeqCst) < 4 {
                thread::yield_now();
            }
            returned.lock().unwrap().extend(pool.shutdown_now());
            stop.store(true, Ordering::SeqCst);
        });
    });
    assert!(stop.load(Ordering::SeqCst));
    // What shutdown_now handed back is ours: count it and drop it (its captures drop).
    let handed_back = std::mem::take(&mut *returned.lock().unwrap());
    let handed_back_count = handed_back.len();
    drop(handed_back);
    assert!(pool.await_termination(Duration::from_secs(60)));
    let fates = fates.lock().unwrap();
    let mut totals = [0usize; 4];
    for fate in fates.iter() {
        let ran = fate.ran.load(Ordering::SeqCst);
        let cancelled = fate.cancelled.load(Ordering::SeqCst);
        let rejected = fate.rejected.load(Ordering::SeqCst);
        assert!(ran <= 1 && cancelled <= 1 && rejected <= 1);
        // A cancel during the run returns false for a one-shot, so "ran" and "cancelled"
        // exclude each other; what is neither was handed back.
        assert!(ran + cancelled + rejected <= 1, "two fates for one task");
        totals[0] += ran;
        totals[1] += cancelled;
        totals[2] += rejected;
        totals[3] += usize::from(ran + cancelled + rejected == 0);
    }
    eprintln!(
        "race: {} tasks: ran {}, cancelled {}, rejected {}, handed back {handed_back_count}",
        fates.len(),
        totals[0],
        totals[1],
        totals[2]
    );
    assert_eq!(
        totals[3], handed_back_count,
        "the rest was handed back, each once"
    );
    assert!(totals[0] > 0 && totals[1] > 0 && handed_back_count > 0);
    let made = CAPTURES_MADE.load(Ordering::SeqCst) - made_before;
    assert_eq!(made, fates.len());
    drop(fates);
    drop(Arc::try_unwrap(pool).expect("only the test holds the pool"));
    // Every capture this test made has been dropped exactly once.
    assert_eq!(CAPTURES_DROPPED.load(Ordering::SeqCst), made_before + made);
}

/// A schedule refused with an error (`Shutdown`, `Saturated`) builds no task: it allocates
/// nothing, so a caller retrying against a full or stopped pool costs the heap nothing. Each
/// closure here would make a task cell of over 4 KB; 2 000 refusals of each kind allocate less
/// than 1 MB in all (a stray allocation elsewhere in the process is far smaller than that).
#[test]
fn a_refused_schedule_allocates_nothing() {
    let _serial = crate::serial();
    let _local = serial();
    const REFUSALS: usize = 2_000;
    let payload = [7u8; 4096];

    let full = ScheduledThreadPool::builder()
        .threads(1)
        .max_pending(1)
        .build()
        .unwrap();
    let waiting = full.schedule(|| (), Duration::from_secs(3600)).unwrap();
    let before = ALLOC.total_allocated();
    for _ in 0..REFUSALS {
        let refused = full.schedule(move || payload.len(), Duration::from_secs(3600));
        assert_eq!(
            refused.unwrap_err(),
            ScheduleError::Saturated { max_pending: 1 }
        );
    }
    let saturated = ALLOC.total_allocated() - before;
    assert!(waiting.cancel());

    let stopped = ScheduledThreadPool::builder().threads(1).build().unwrap();
    stopped.shutdown();
    let before = ALLOC.total_allocated();
    for _ in 0..REFUSALS {
        let refused = stopped.schedule(move || payload.len(), Duration::from_secs(3600));
        assert_eq!(refused.unwrap_err(), ScheduleError::Shutdown);
        let refused = stopped.execute(move || assert_eq!(payload.len(), 4096));
        assert_eq!(refused.unwrap_err(), ScheduleError::Shutdown);
    }
    let shut = ALLOC.total_allocated() - before;
    assert!(
        saturated < 1 << 20 && shut < 1 << 20,
        "refused schedules allocated {saturated} B (saturated) and {shut} B (shut down)"
    );
}

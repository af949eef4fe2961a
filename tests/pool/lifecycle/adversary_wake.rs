//! Lost wake-ups: every thread waits for its own short timer, so a timer thread that parks past
//! a new deadline (or forever, when nothing else is pending) shows up as a hang, which the
//! generous bounds turn into a failure. Inserts come from fresh schedules, from resets of far
//! timers, and from tasks re-arming, on many shards at once.

#![cfg(not(wheelpool_loom))]

use crate::manual_common::bounded;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::ScheduledThreadPool;

const LONG: Duration = Duration::from_secs(20);

/// Eight threads (eight shards) each schedule a 0-1500 us timer and wait for it, 300 times,
/// while one far timer keeps the wheel non-empty (so the timer thread parks with a deadline in
/// an hour, the case where a missed wake costs an hour). None is early, none is lost.
#[test]
fn eight_threads_each_waiting_for_its_own_short_timer() {
    bounded(|| {
        let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
        let _far = pool.schedule(|| (), Duration::from_secs(3600)).unwrap();
        thread::scope(|s| {
            for t in 0..8u64 {
                let pool = pool.clone();
                s.spawn(move || {
                    for i in 0..300u64 {
                        let delay = Duration::from_micros((i * 37 + t * 101) % 1_500);
                        let deadline = Instant::now() + delay;
                        let mut f = pool.schedule(Instant::now, delay).unwrap();
                        let ran = f
                            .join_timeout(LONG)
                            .unwrap_or_else(|| panic!("thread {t} timer {i} lost"))
                            .unwrap();
                        assert!(ran >= deadline, "early by {:?}", deadline - ran);
                    }
                });
            }
        });
    });
}

/// The same with resets as the insert: each thread schedules a timer an hour out, then resets it
/// to 0-1500 us and waits for it. The reset's move to an earlier tick must wake a timer thread
/// that sleeps until the hour.
#[test]
fn resets_from_an_hour_to_microseconds_wake_the_timer_thread() {
    bounded(|| {
        let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
        thread::scope(|s| {
            for t in 0..8u64 {
                let pool = pool.clone();
                s.spawn(move || {
                    for i in 0..300u64 {
                        let mut f = pool
                            .schedule(Instant::now, Duration::from_secs(3600))
                            .unwrap();
                        // Give the timer thread a chance to park until the hour.
                        if i % 16 == 0 {
                            thread::yield_now();
                        }
                        let delay = Duration::from_micros((i * 53 + t * 7) % 1_500);
                        let deadline = Instant::now() + delay;
                        assert!(f.reset(delay), "thread {t} timer {i}: it was waiting");
                        let ran = f
                            .join_timeout(LONG)
                            .unwrap_or_else(|| panic!("thread {t} timer {i} lost after reset"))
                            .unwrap();
                        assert!(ran >= deadline, "early by {:?}", deadline - ran);
                    }
                });
            }
        });
    });
}

/// A chain: each run schedules the next one 0-900 us later, from a worker thread (its own
/// shard), 1 000 links on each of four chains, on a 100 us tick. A lost wake stalls a chain
/// for good (and so does an early run: its assertion panics the link).
#[test]
fn chains_of_timers_scheduled_from_workers_never_stall() {
    bounded(|| {
        let pool = ScheduledThreadPool::builder()
            .threads(2)
            .tick(Duration::from_micros(100))
            .build()
            .unwrap();
        let (tx, rx) = mpsc::channel::<usize>();
        for c in 0..4usize {
            link(pool.handle(), c, 0, tx.clone());
        }
        drop(tx);
        let mut done = 0;
        while done < 4 {
            match rx.recv_timeout(LONG) {
                Ok(_) => done += 1,
                Err(e) => panic!("a chain stalled: {e:?}, {done} of 4 done"),
            }
        }
    });
}

static LINKS: AtomicUsize = AtomicUsize::new(0);

fn link(pool: wheelpool::Handle, chain: usize, n: usize, done: mpsc::Sender<usize>) {
    if n == 1_000 {
        let _ = done.send(chain);
        return;
    }
    let delay = Duration::from_micros(((n * 131 + chain * 17) % 900) as u64);
    let deadline = Instant::now() + delay;
    let h = pool.clone();
    let _f = pool
        .schedule(
            move || {
                assert!(Instant::now() >= deadline, "early");
                LINKS.fetch_add(1, SeqCst);
                link(h, chain, n + 1, done);
            },
            delay,
        )
        .unwrap();
}

//! Adversarial storms on the sharded timer (real clock): a hundred thousand one-shots due at one
//! instant while other threads cancel and reset random ones, many threads resetting one task
//! while it comes due, and eight threads cancelling each other's timers under a counting
//! allocator. Only correctness is asserted: nothing early, nothing lost, nothing twice, the
//! pool's counters add up, and the live heap goes back down.
//!
//! Seeds: `ADVERSARY_SEED=<u64>` replays one run; the seed in use is printed on failure.

#![cfg(not(wheelpool_loom))]

use crate::manual_common::bounded;

use crate::ALLOC;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::{CancelHandle, ScheduledFuture, ScheduledThreadPool, TaskError};

/// The heap test shares the allocator's count with everything else: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const LONG: Duration = Duration::from_secs(60);

fn seed() -> u64 {
    std::env::var("ADVERSARY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// Waits for `f` with a generous bound; a hang is a lost task.
fn join_bounded<T: Send + 'static>(mut f: ScheduledFuture<T>, what: &str) -> Result<T, TaskError> {
    match f.join_timeout(LONG) {
        Some(r) => r,
        None => panic!("{what}: future never finished (lost task)"),
    }
}

/// What a storm task recorded.
struct Slot {
    runs: AtomicU8,
    /// Set by the cancel thread when its cancel returned true.
    cancel_won: AtomicBool,
    /// Set by the cancel thread before it calls cancel.
    cancel_tried: AtomicBool,
    /// The deadline of the last reset that returned true (only one thread resets a given task).
    reset_to: Mutex<Option<Instant>>,
}

/// 100 000 one-shots all due at the same instant, scheduled from two threads (two shards).
/// While the storm fires, one thread cancels a random third of them and another resets a
/// random third (and races the cancels on a third of theirs): some to later, some to the past,
/// some to exactly now. Every task not cancelled runs exactly once and never before its
/// deadline (the last successful reset's, if any); a cancel that returned true means it never
/// ran.
#[test]
fn equal_deadline_storm_with_concurrent_cancels_and_resets() {
    let _serial = crate::serial();
    let seed = seed();
    eprintln!("equal_deadline_storm seed {seed}");
    let _serial = serial();
    bounded(move || storm(seed, 100_000));
}

fn storm(seed: u64, n: usize) {
    let pool = Arc::new(ScheduledThreadPool::builder().threads(4).build().unwrap());
    let slots: Arc<Vec<Slot>> = Arc::new(
        (0..n)
            .map(|_| Slot {
                runs: AtomicU8::new(0),
                cancel_won: AtomicBool::new(false),
                cancel_tried: AtomicBool::new(false),
                reset_to: Mutex::new(None),
            })
            .collect(),
    );
    // Far enough that scheduling (debug build) mostly finishes first; if not, the deadline is
    // simply in the past for the late ones, which must still run at or after it.
    let deadline = Instant::now() + Duration::from_millis(150);
    let futures: Vec<Mutex<Option<ScheduledFuture<Instant>>>> =
        (0..n).map(|_| Mutex::new(None)).collect();
    let futures = Arc::new(futures);
    let handles: Arc<Vec<Mutex<Option<CancelHandle>>>> =
        Arc::new((0..n).map(|_| Mutex::new(None)).collect());
    thread::scope(|s| {
        for half in 0..2 {
            let (pool, slots, futures, handles) = (
                pool.clone(),
                slots.clone(),
                futures.clone(),
                handles.clone(),
            );
            s.spawn(move || {
                for i in (half..n).step_by(2) {
                    let slots = slots.clone();
                    let f = pool
                        .schedule_at(
                            move || {
                                slots[i].runs.fetch_add(1, SeqCst);
                                Instant::now()
                            },
                            deadline,
                        )
                        .unwrap();
                    *handles[i].lock().unwrap() = Some(f.cancel_handle());
                    *futures[i].lock().unwrap() = Some(f);
                }
            });
        }
    });
    // Cancel and reset threads: each owns the tasks of its own residue class, so a task has at
    // most one resetter (the "last successful reset" is then well defined).
    thread::scope(|s| {
        let (slots_c, handles_c) = (slots.clone(), handles.clone());
        s.spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut order: Vec<usize> = (0..n).filter(|i| i % 3 == 1).collect();
            shuffle(&mut order, &mut rng);
            for i in order {
                let h = handles_c[i].lock().unwrap().clone().unwrap();
                let ran_before = slots_c[i].runs.load(SeqCst) > 0;
                slots_c[i].cancel_tried.store(true, SeqCst);
                if h.cancel() {
                    assert!(!ran_before, "task {i}: cancel true after it had run");
                    slots_c[i].cancel_won.store(true, SeqCst);
                }
            }
        });
        let (slots_r, handles_r) = (slots.clone(), handles.clone());
        s.spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
            // Its own class, plus a third of the cancel thread's (reset racing cancel).
            let mut order: Vec<usize> = (0..n).filter(|i| i % 3 == 2 || i % 9 == 1).collect();
            shuffle(&mut order, &mut rng);
            for i in order {
                let h = handles_r[i].lock().unwrap().clone().unwrap();
                let now = Instant::now();
                let to = match rng.gen_range(0..4) {
                    0 => now + Duration::from_millis(rng.gen_range(1..60)),
                    1 => now.checked_sub(Duration::from_millis(5)).unwrap_or(now),
                    2 => now,
                    _ => deadline + Duration::from_micros(rng.gen_range(0..3_000)),
                };
                let ran_before = slots_r[i].runs.load(SeqCst) > 0;
                // Record before the reset, so a run that follows a successful reset at once
                // can be checked against it; undo if the reset failed.
                let mut rec = slots_r[i].reset_to.lock().unwrap();
                let prev = rec.replace(to);
                drop(rec);
                if h.reset_at(to) {
                    assert!(!ran_before, "task {i}: reset true after it had run");
                } else {
                    *slots_r[i].reset_to.lock().unwrap() = prev;
                }
            }
        });
    });
    let mut ran = 0usize;
    let mut cancelled = 0usize;
    let mut ran_cancelled = 0usize;
    for i in 0..n {
        let f = futures[i].lock().unwrap().take().unwrap();
        let slot = &slots[i];
        match join_bounded(f, &format!("task {i}")) {
            Ok(at) => {
                ran += 1;
                assert!(
                    !slot.cancel_won.load(SeqCst),
                    "task {i} ran after cancel true"
                );
                assert!(at >= deadline || slot.reset_to.lock().unwrap().is_some());
                // The reset thread is done: its record is final.
                let due = slot.reset_to.lock().unwrap().unwrap_or(deadline);
                assert!(
                    at >= due,
                    "task {i} ran {:?} early (seed {seed})",
                    due.duration_since(at)
                );
            }
            Err(TaskError::Cancelled) => {
                cancelled += 1;
                let won = slot.cancel_won.load(SeqCst);
                // Or cancelled while running: it ran, cancel said false, the future Cancelled.
                let while_running = slot.cancel_tried.load(SeqCst) && slot.runs.load(SeqCst) == 1;
                assert!(won || while_running, "task {i} cancelled by nobody");
                if while_running {
                    ran_cancelled += 1;
                }
            }
            Err(e) => panic!("task {i}: {e:?}"),
        }
        let runs = slot.runs.load(SeqCst);
        assert!(runs <= 1, "task {i} ran {runs} times");
        let cancelled_before_run = slot.cancel_won.load(SeqCst);
        assert_eq!(runs == 0, cancelled_before_run, "task {i}: runs {runs}");
    }
    assert_eq!(ran + cancelled, n);
    let stats = pool.stats();
    assert_eq!(stats.pending, 0, "{stats:?}");
    assert_eq!(stats.completed as usize, ran + ran_cancelled, "{stats:?}");
    assert_eq!(stats.cancelled as usize, cancelled, "{stats:?}");
}

fn shuffle(v: &mut [usize], rng: &mut StdRng) {
    for i in (1..v.len()).rev() {
        let j = rng.gen_range(0..=i);
        v.swap(i, j);
    }
}

/// Eight threads hammer `reset` on the same one-shot (earlier, later, into the past) while it
/// comes due. It runs exactly once; a reset that returned true was made before the run
/// started; a reset call that began after the run started returns false. Repeated for many
/// tasks to hit the window where the timer thread hands the task out.
#[test]
fn reset_storm_on_one_task_runs_it_exactly_once() {
    let _serial = crate::serial();
    let seed = seed();
    eprintln!("reset_storm seed {seed}");
    let _serial = serial();
    bounded(move || {
        let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
        for round in 0..40u64 {
            let started = Arc::new(AtomicUsize::new(0));
            let s2 = started.clone();
            // Before the schedule call: the task's own deadline is at least 2 ms after this.
            let first = Instant::now();
            let f = pool
                .schedule(
                    move || {
                        s2.fetch_add(1, SeqCst);
                        Instant::now()
                    },
                    Duration::from_millis(2),
                )
                .unwrap();
            let trues = Arc::new(AtomicUsize::new(0));
            // The earliest deadline any successful reset asked for.
            let earliest = Arc::new(Mutex::new(None::<Instant>));
            thread::scope(|s| {
                for t in 0..8u64 {
                    let (h, started, trues, earliest) = (
                        f.cancel_handle(),
                        started.clone(),
                        trues.clone(),
                        earliest.clone(),
                    );
                    s.spawn(move || {
                        let mut rng = StdRng::seed_from_u64(seed ^ (round << 8) ^ t);
                        for _ in 0..400 {
                            let now = Instant::now();
                            let to = match rng.gen_range(0..3) {
                                0 => now + Duration::from_micros(rng.gen_range(0..4_000)),
                                1 => now.checked_sub(Duration::from_millis(1)).unwrap_or(now),
                                _ => now,
                            };
                            let ran_before = started.load(SeqCst) > 0;
                            if h.reset_at(to) {
                                assert!(!ran_before, "round {round}: reset true after run");
                                trues.fetch_add(1, SeqCst);
                                let mut e = earliest.lock().unwrap();
                                *e = Some(e.map_or(to, |x: Instant| x.min(to)));
                            }
                            if started.load(SeqCst) > 0 {
                                break;
                            }
                        }
                    });
                }
            });
            let at = join_bounded(f, "reset storm task").unwrap();
            assert_eq!(started.load(SeqCst), 1, "round {round}");
            let due = earliest
                .lock()
                .unwrap()
                .map_or(first + Duration::from_millis(2), |e| {
                    e.min(first + Duration::from_millis(2))
                });
            assert!(at >= due, "round {round} ran {:?} early", due - at);
        }
        assert_eq!(pool.stats().pending, 0);
    });
}

/// Eight threads schedule on their own shards and cancel each other's timers (thread i cancels
/// what thread i-1 scheduled), with a mix of timers that fire (0-2 ms) and that never come
/// (an hour). Afterwards: completed + cancelled equals everything scheduled, nothing is
/// pending, every closure ran or was dropped exactly once, and the live heap is back near
/// where it started.
#[test]
fn eight_threads_cross_cancel_keep_accounts_and_heap() {
    let _serial = crate::serial();
    let _serial = serial();
    bounded(|| {
        let pool = Arc::new(ScheduledThreadPool::builder().threads(4).build().unwrap());
        cross_cancel(&pool, 2_000); // warm up slabs and thread-locals
        let stats0 = pool.stats();
        let before = ALLOC.allocated() as isize;
        let per_thread = 25_000;
        let (ran, cancel_true, both) = cross_cancel(&pool, per_thread);
        let total = 8 * per_thread;
        assert_eq!(ran + cancel_true, total, "every task ran or was cancelled");
        assert!(
            common_wait(|| pool.stats().pending == 0),
            "{:?}",
            pool.stats()
        );
        let stats = pool.stats();
        assert_eq!(
            (stats.completed - stats0.completed) as usize,
            ran,
            "{stats:?}"
        );
        assert_eq!(
            (stats.cancelled - stats0.cancelled) as usize,
            cancel_true + both,
            "{stats:?}"
        );
        let growth = ALLOC.allocated() as isize - before;
        eprintln!("cross cancel: live heap growth {growth} B over {total} timers");
        // An empty shard keeps up to RELEASE_AT (4096) slab nodes for reuse, and the channels'
        // backlog decides how far each of the 8 shards grew: allow that (8 x 4096 x 64 B), far
        // below what 200 000 timers would hold (their cells alone are ~40 MB).
        assert!(
            growth < 2 << 20,
            "live heap grew by {growth} B over {total} timers"
        );
    });
}

/// Returns (runs, tasks cancelled before they ran). A task cancelled while it ran counts as a
/// run here; the pool counts it as completed and cancelled both, see the caller.
fn cross_cancel(pool: &Arc<ScheduledThreadPool>, per_thread: usize) -> (usize, usize, usize) {
    let ran = Arc::new(AtomicUsize::new(0));
    let cancel_true = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let ran_cancelled = Arc::new(AtomicUsize::new(0));
    type Item = (ScheduledFuture<()>, Arc<AtomicBool>);
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..8).map(|_| mpsc::channel::<Item>()).unzip();
    thread::scope(|s| {
        for (t, rx) in rxs.into_iter().enumerate() {
            let tx = txs[(t + 1) % 8].clone();
            let (pool, ran, cancel_true, dropped) = (
                pool.clone(),
                ran.clone(),
                cancel_true.clone(),
                dropped.clone(),
            );
            let ran_cancelled = ran_cancelled.clone();
            s.spawn(move || {
                let settle = |(mut f, flag): Item| {
                    let ran_before = flag.load(SeqCst);
                    if f.cancel() {
                        assert!(!ran_before, "cancel true after run");
                        cancel_true.fetch_add(1, SeqCst);
                        assert_eq!(f.join_timeout(LONG), Some(Err(TaskError::Cancelled)));
                    } else {
                        // Cancelled while running: it ran, and the future says Cancelled.
                        match f.join_timeout(LONG) {
                            Some(Ok(())) => {}
                            Some(Err(TaskError::Cancelled)) => {
                                assert!(flag.load(SeqCst), "cancel false, never ran");
                                cancel_true.fetch_add(1, SeqCst);
                                ran_cancelled.fetch_add(1, SeqCst);
                            }
                            other => panic!("lost or failed task: {other:?}"),
                        }
                    }
                };
                for sent in 0..per_thread {
                    let ran2 = ran.clone();
                    let runs_flag = Arc::new(AtomicBool::new(false));
                    let flag2 = runs_flag.clone();
                    let guard = DropCount(dropped.clone());
                    let delay = if sent % 4 == 0 {
                        Duration::from_micros((sent % 2_000) as u64)
                    } else {
                        Duration::from_secs(3600)
                    };
                    let f = pool
                        .schedule(
                            move || {
                                let _g = guard;
                                assert!(!flag2.swap(true, SeqCst), "ran twice");
                                ran2.fetch_add(1, SeqCst);
                            },
                            delay,
                        )
                        .unwrap();
                    tx.send((f, runs_flag)).unwrap();
                    while let Ok(item) = rx.try_recv() {
                        settle(item);
                    }
                }
                drop(tx);
                // Every sender holds a clone until it is done; the last item arrives before
                // the channel disconnects.
                while let Ok(item) = rx.recv() {
                    settle(item);
                }
            });
        }
        drop(txs);
    });
    assert_eq!(
        dropped.load(SeqCst),
        8 * per_thread,
        "every closure dropped once"
    );
    // A task cancelled while running both ran and ended Cancelled: count it once, as a run.
    let both = ran_cancelled.load(SeqCst);
    (ran.load(SeqCst), cancel_true.load(SeqCst) - both, both)
}

struct DropCount(Arc<AtomicUsize>);
impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn common_wait(mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + LONG;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// A burst of 100 000 one-hour timeouts from one thread (one shard), all cancelled, while one
/// long-lived timer of the same thread stays pending (a heartbeat, say). The tasks (closures,
/// captures, cells) are freed at cancel. The shard's slab keeps its room, as a `Vec` keeps its
/// capacity, until the shard empties: that is the stated bound (`give_back_if_empty` in
/// `src/timer/mod.rs`): at most the peak entry count, rounded up to the slab's growth, times
/// `ENTRY` bytes; giving it back earlier would need compaction of live entries under the shard
/// lock (unbounded work). Once the heartbeat goes too, the shard gives everything back.
#[test]
fn a_shard_keeps_its_slab_room_until_it_empties_then_gives_it_back() {
    let _serial = crate::serial();
    /// Bytes of one wheel entry (a fat task pointer plus links; see `Wheel::ENTRY_SIZE`).
    const ENTRY: isize = 40;
    const BURST: isize = 100_000;
    let _serial = serial();
    bounded(|| {
        let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
        let hour = Duration::from_secs(3600);
        let keeper = pool.schedule(|| (), hour).unwrap();
        let before = ALLOC.allocated() as isize;
        let burst: Vec<_> = (0..BURST)
            .map(|_| pool.schedule(|| (), hour).unwrap())
            .collect();
        let peak = ALLOC.allocated() as isize - before;
        for f in burst {
            assert!(f.cancel());
        }
        let left = ALLOC.allocated() as isize - before;
        eprintln!("burst: peak {peak} B, left after cancelling all but the keeper {left} B");
        // The slab grows by doubling: room for at most twice the peak entries.
        let room = 2 * (BURST + 1) * ENTRY;
        assert!(
            left <= room + (256 << 10),
            "{left} B held after cancelling 100 000 timers: more than the slab's room ({room} B)"
        );
        assert!(
            left < peak / 2,
            "the tasks were freed at cancel: {left} of {peak} B left"
        );
        assert!(keeper.cancel());
        let after_keeper = ALLOC.allocated() as isize - before;
        eprintln!("burst: after the keeper's cancel too {after_keeper} B");
        assert!(
            after_keeper < 256 << 10,
            "{after_keeper} B still held once the shard is empty"
        );
    });
}

/// 20 000 timers due at one instant in one shard (the timer thread hands them out a chunk at a
/// time); as soon as the first one runs, the test thread cancels them all, so the
/// shard empties (and gives its slab back) while the timer thread is between chunks. Every
/// timer ran or was cancelled, never both; and the shard still works afterwards: fresh timers
/// scheduled into it from the same thread all run, none early.
#[test]
fn shard_emptied_by_cancels_between_chunks_of_a_storm_still_works() {
    let _serial = crate::serial();
    let _serial = serial();
    bounded(|| {
        for round in 0..3 {
            let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
            let n = 20_000;
            let first_ran = Arc::new(AtomicBool::new(false));
            let runs = Arc::new(AtomicUsize::new(0));
            let at = Instant::now() + Duration::from_millis(20);
            let futures: Vec<_> = (0..n)
                .map(|_| {
                    let (fr, r) = (first_ran.clone(), runs.clone());
                    pool.schedule_at(
                        move || {
                            fr.store(true, SeqCst);
                            r.fetch_add(1, SeqCst);
                        },
                        at,
                    )
                    .unwrap()
                })
                .collect();
            let mut cancelled = 0;
            while !first_ran.load(SeqCst) {
                std::hint::spin_loop();
            }
            // Equal deadlines come out newest first: cancel oldest first, so the cancels meet
            // the timers the timer thread has not reached yet.
            for f in futures.iter() {
                cancelled += usize::from(f.cancel());
            }
            eprintln!("round {round}: {cancelled} of {n} cancelled between chunks");
            for (i, mut f) in futures.into_iter().enumerate() {
                assert!(
                    f.join_timeout(LONG).is_some(),
                    "round {round}: timer {i} lost"
                );
            }
            assert_eq!(runs.load(SeqCst) + cancelled, n, "round {round}");
            // The same thread, so the same shard: it must still take and fire timers.
            let fresh: Vec<_> = (0..200u64)
                .map(|k| {
                    let deadline = Instant::now() + Duration::from_micros(k * 50);
                    (deadline, pool.schedule_at(Instant::now, deadline).unwrap())
                })
                .collect();
            for (k, (deadline, mut f)) in fresh.into_iter().enumerate() {
                let ran = f
                    .join_timeout(LONG)
                    .expect("a fresh timer was lost")
                    .unwrap();
                assert!(ran >= deadline, "round {round}: fresh timer {k} early");
            }
            // The cancelled tasks the timer thread had already handed out stay in the ready
            // queues until a worker pops and drops each one, counting it in `running` for that
            // moment; on a busy machine the workers may still be at it after the last join.
            // Nothing may stay pending or running for good.
            assert!(
                common_wait(|| {
                    let stats = pool.stats();
                    (stats.pending, stats.running) == (0, 0)
                }),
                "round {round}: {:?}",
                pool.stats()
            );
        }
    });
}

//! Adversarial shutdowns: `shutdown()` and `shutdown_now()` while hundreds of periodic tasks
//! re-arm every millisecond on four workers, producers keep scheduling, and other threads
//! reset and cancel. The pool must terminate, every future must end, and every task must end
//! exactly one way (ran, cancelled, handed back, or refused at schedule time).

#![cfg(not(wheelpool_loom))]

use crate::manual_common::bounded;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::{
    CancelHandle, ManualClock, PendingTask, ScheduleError, ScheduledFuture, ScheduledThreadPool,
    TaskError,
};

const LONG: Duration = Duration::from_secs(30);

/// Counts closures made and dropped: every closure is dropped exactly once, whatever happened.
#[derive(Default)]
struct Ledger {
    made: AtomicUsize,
    dropped: AtomicUsize,
    /// One-shot closures that ran (by a worker, or by us from a `PendingTask`).
    one_shot_runs: AtomicUsize,
    periodic_runs: AtomicUsize,
}

struct Token(Arc<Ledger>);

impl Token {
    fn new(l: &Arc<Ledger>) -> Self {
        l.made.fetch_add(1, SeqCst);
        Token(l.clone())
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, SeqCst);
    }
}

/// The schedules a producer made that were accepted.
#[derive(Default)]
struct Made {
    /// With whether a cancel was tried on it (and returned false: it was running or done).
    one_shots: Vec<(ScheduledFuture<()>, bool)>,
    periodics: Vec<ScheduledFuture<()>>,
    /// One-shots a `cancel` returned true for.
    cancelled: usize,
    refused: usize,
}

/// What kind of stop the test makes.
#[derive(Clone, Copy, PartialEq, Debug)]
enum How {
    Graceful,
    Now,
    /// `shutdown()` and at once `shutdown_now()`, while the graceful sweep is under way.
    Both,
}

/// Four workers; 300 periodic tasks (fixed rate, fixed delay, dynamic) at a 1 ms period; three
/// producers scheduling one-shots (0-3 ms) and more periodic tasks, resetting and cancelling
/// some, until the pool refuses them; then `shutdown` or `shutdown_now` from the main thread
/// once 20 000 periodic and 5 000 one-shot runs have happened.
fn storm(how: How) {
    let ledger = Arc::new(Ledger::default());
    let pool = Arc::new(ScheduledThreadPool::builder().threads(4).build().unwrap());
    let mut base = Vec::new();
    for k in 0..300 {
        base.push(periodic(&pool, &ledger, k).unwrap());
    }
    let handles: Arc<Mutex<Vec<CancelHandle>>> =
        Arc::new(Mutex::new(base.iter().map(|f| f.cancel_handle()).collect()));
    let stop_producing = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for p in 0..3usize {
        let (pool, ledger, handles, stop) = (
            pool.clone(),
            ledger.clone(),
            handles.clone(),
            stop_producing.clone(),
        );
        producers.push(thread::spawn(move || {
            let mut made = Made::default();
            let mut i = 0usize;
            while !stop.load(SeqCst) {
                i += 1;
                if i % 50 == 0 {
                    match periodic(&pool, &ledger, i + p) {
                        Ok(f) => {
                            handles.lock().unwrap().push(f.cancel_handle());
                            made.periodics.push(f);
                        }
                        Err(e) => {
                            assert_eq!(e, ScheduleError::Shutdown);
                            made.refused += 1;
                        }
                    }
                    continue;
                }
                if i % 7 == 0 {
                    // Reset or cancel someone's periodic task.
                    let h = {
                        let hs = handles.lock().unwrap();
                        hs[(i * 31 + p) % hs.len()].clone()
                    };
                    if i % 21 == 0 {
                        h.cancel();
                    } else {
                        h.reset(Duration::from_micros((i % 2_000) as u64));
                    }
                }
                let (l, t) = (ledger.clone(), Token::new(&ledger));
                let delay = Duration::from_micros((i * 13 % 3_000) as u64);
                match pool.schedule(
                    move || {
                        let _t = t;
                        l.one_shot_runs.fetch_add(1, SeqCst);
                    },
                    delay,
                ) {
                    Ok(f) => {
                        let tried = i % 11 == 0;
                        if tried && f.cancel() {
                            made.cancelled += 1;
                            assert_eq!(f.join(), Err(TaskError::Cancelled));
                        } else {
                            made.one_shots.push((f, tried));
                        }
                    }
                    Err(e) => {
                        assert_eq!(e, ScheduleError::Shutdown);
                        made.refused += 1;
                        if made.refused > 1_000 {
                            break; // the pool is shut: enough refusals seen
                        }
                    }
                }
            }
            made
        }));
    }
    let t = Instant::now();
    while ledger.periodic_runs.load(SeqCst) < 20_000 || ledger.one_shot_runs.load(SeqCst) < 5_000 {
        assert!(t.elapsed() < LONG, "periodic tasks do not run");
        thread::sleep(Duration::from_millis(1));
    }
    let handed_back: Vec<PendingTask> = match how {
        How::Graceful => {
            pool.shutdown();
            Vec::new()
        }
        How::Now => pool.shutdown_now(),
        How::Both => {
            pool.shutdown();
            pool.shutdown_now()
        }
    };
    assert!(
        pool.await_termination(LONG),
        "{how:?}: the pool did not terminate; stats {:?}",
        pool.stats()
    );
    stop_producing.store(true, SeqCst);
    let made: Vec<Made> = producers.into_iter().map(|p| p.join().unwrap()).collect();
    // Handed-back one-shots: run them here, so each accepted one-shot ran exactly once unless a
    // cancel took it. Handed-back periodic tasks are dropped.
    let ran_by_pool = ledger.one_shot_runs.load(SeqCst);
    let mut back_one_shots = 0;
    for task in handed_back {
        if task.is_periodic() {
            drop(task);
        } else {
            back_one_shots += 1;
            task.run();
        }
    }
    let mut accepted = 0;
    let mut cancelled = 0;
    let mut pool_ran = 0;
    for m in made.iter() {
        cancelled += m.cancelled;
        accepted += m.one_shots.len() + m.cancelled;
    }
    for m in made {
        for (mut f, tried) in m.one_shots {
            match f.join_timeout(LONG).expect("a one-shot future never ended") {
                Ok(()) => pool_ran += 1,
                // Cancelled while it ran (cancel said false), or handed back by shutdown_now.
                Err(TaskError::Cancelled) | Err(TaskError::Shutdown) => assert!(
                    tried || how != How::Graceful,
                    "graceful shutdown cancelled a waiting one-shot"
                ),
                Err(e) => panic!("{e:?}"),
            }
        }
        for mut f in m.periodics {
            let end = f.join_timeout(LONG).expect("a periodic future never ended");
            assert!(
                matches!(end, Err(TaskError::Shutdown) | Err(TaskError::Cancelled)),
                "{end:?}"
            );
        }
    }
    for mut f in base {
        let end = f.join_timeout(LONG).expect("a periodic future never ended");
        assert!(
            matches!(end, Err(TaskError::Shutdown) | Err(TaskError::Cancelled)),
            "{end:?}"
        );
    }
    let runs = ledger.one_shot_runs.load(SeqCst);
    assert_eq!(runs, ran_by_pool + back_one_shots);
    assert!(
        pool_ran <= ran_by_pool,
        "{how:?}: {pool_ran} futures said Ok, only {ran_by_pool} closures ran"
    );
    assert_eq!(
        runs + cancelled,
        accepted,
        "{how:?}: every accepted one-shot ran once or was cancelled (handed back {back_one_shots})"
    );
    assert_eq!(
        ledger.made.load(SeqCst),
        ledger.dropped.load(SeqCst),
        "{how:?}: a closure was leaked or dropped twice"
    );
    let stats = pool.stats();
    assert_eq!((stats.pending, stats.running), (0, 0), "{stats:?}");
}

/// A periodic task of one of three kinds at a 1 ms period.
fn periodic(
    pool: &ScheduledThreadPool,
    ledger: &Arc<Ledger>,
    k: usize,
) -> Result<ScheduledFuture<()>, ScheduleError> {
    let (l, t) = (ledger.clone(), Token::new(ledger));
    let ms1 = Duration::from_millis(1);
    match k % 3 {
        0 => pool.schedule_at_fixed_rate(
            move || {
                let _ = &t;
                l.periodic_runs.fetch_add(1, SeqCst);
            },
            Duration::ZERO,
            ms1,
        ),
        1 => pool.schedule_with_fixed_delay(
            move || {
                let _ = &t;
                l.periodic_runs.fetch_add(1, SeqCst);
            },
            ms1,
            ms1,
        ),
        _ => pool.schedule_with_dynamic_delay(
            move || {
                let _ = &t;
                l.periodic_runs.fetch_add(1, SeqCst);
                Some(ms1)
            },
            Duration::from_micros(k as u64 % 1_000),
        ),
    }
}

#[test]
fn graceful_shutdown_while_periodics_rearm_every_ms_and_producers_schedule() {
    for _ in 0..3 {
        bounded(|| storm(How::Graceful));
    }
}

#[test]
fn shutdown_now_while_periodics_rearm_every_ms_and_producers_schedule() {
    for _ in 0..3 {
        bounded(|| storm(How::Now));
    }
}

/// Graceful shutdown on a manual clock with one-shots still waiting at 10 and 20 ms and a
/// periodic task: the periodic task stops at once, the one-shots run at exactly their times
/// when the clock gets there, and then the pool terminates.
#[test]
fn graceful_shutdown_on_a_manual_clock_runs_waiting_one_shots_at_their_time() {
    bounded(|| {
        let ms = Duration::from_millis;
        let clock = ManualClock::new();
        let t0 = clock.now();
        let pool = ScheduledThreadPool::builder()
            .threads(2)
            .clock(clock.clone())
            .build()
            .unwrap();
        let at = |d| {
            let c = clock.clone();
            pool.schedule(move || c.now() - t0, d).unwrap()
        };
        let (a, b) = (at(ms(10)), at(ms(20)));
        let beat = pool.schedule_at_fixed_rate(|| (), ms(1), ms(1)).unwrap();
        clock.advance(ms(3));
        pool.shutdown();
        let mut beat = beat;
        assert_eq!(beat.join_timeout(LONG), Some(Err(TaskError::Shutdown)));
        clock.advance(ms(7));
        assert_eq!(a.join(), Ok(ms(10)));
        assert!(!pool.is_terminated());
        clock.advance(ms(10));
        assert_eq!(b.join(), Ok(ms(20)));
        assert!(pool.await_termination(LONG));
    });
}

#[test]
fn shutdown_then_shutdown_now_during_the_sweep() {
    for _ in 0..3 {
        bounded(|| storm(How::Both));
    }
}

/// 5 000 periodic tasks an hour apart in one shard (the graceful sweep takes ten chunks there)
/// and one-shots due soon, then `shutdown()` while two threads keep resetting the periodic tasks
/// (to an hour, to a millisecond, to now) and one cancels some. A reset must not let a periodic
/// task slip behind the sweep: the pool terminates, every periodic future ends Shutdown or
/// Cancelled, and every one-shot runs.
#[test]
fn graceful_sweep_of_a_big_shard_while_periodic_tasks_are_reset() {
    bounded(|| {
        let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
        let hour = Duration::from_secs(3600);
        let periodics: Vec<ScheduledFuture<()>> = (0..5_000)
            .map(|k| {
                if k % 2 == 0 {
                    pool.schedule_at_fixed_rate(|| (), hour, hour).unwrap()
                } else {
                    pool.schedule_with_fixed_delay(|| (), hour, hour).unwrap()
                }
            })
            .collect();
        let ran = Arc::new(AtomicUsize::new(0));
        let one_shots: Vec<_> = (0..2_000u64)
            .map(|i| {
                let r = ran.clone();
                pool.schedule(
                    move || {
                        r.fetch_add(1, SeqCst);
                    },
                    Duration::from_micros(i % 5_000),
                )
                .unwrap()
            })
            .collect();
        let handles: Arc<Vec<CancelHandle>> =
            Arc::new(periodics.iter().map(|f| f.cancel_handle()).collect());
        let stop = Arc::new(AtomicBool::new(false));
        thread::scope(|s| {
            for t in 0..3usize {
                let (handles, stop) = (handles.clone(), stop.clone());
                s.spawn(move || {
                    let mut i = t;
                    while !stop.load(SeqCst) {
                        let h = &handles[i * 7919 % handles.len()];
                        match (t, i % 3) {
                            (2, _) if i % 50 == 0 => {
                                h.cancel();
                            }
                            (_, 0) => {
                                h.reset(Duration::from_secs(3600));
                            }
                            (_, 1) => {
                                h.reset(Duration::from_millis(1));
                            }
                            _ => {
                                h.reset(Duration::ZERO);
                            }
                        }
                        i += 3;
                    }
                });
            }
            // Let the resetters get going, then shut down under them.
            while handles.iter().filter(|h| h.is_cancelled()).count() < 5 {
                thread::yield_now();
            }
            pool.shutdown();
            let ok = pool.await_termination(LONG);
            stop.store(true, SeqCst);
            assert!(ok, "graceful shutdown never finished: {:?}", pool.stats());
        });
        for (k, mut f) in periodics.into_iter().enumerate() {
            let end = f.join_timeout(LONG).expect("periodic future never ended");
            assert!(
                matches!(end, Err(TaskError::Shutdown) | Err(TaskError::Cancelled)),
                "periodic {k}: {end:?}"
            );
        }
        for mut f in one_shots {
            assert_eq!(f.join_timeout(LONG), Some(Ok(())));
        }
        assert_eq!(ran.load(SeqCst), 2_000);
    });
}

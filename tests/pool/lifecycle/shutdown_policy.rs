//! The graceful shutdown policies (`Builder::execute_delayed_after_shutdown`,
//! `Builder::continue_periodic_after_shutdown`), with exact accounting: every task scheduled
//! ran, was cancelled, ended `Shutdown` (stopped, or handed back and then collected), or its
//! schedule failed; none is lost, none counted twice, every closure dropped exactly once. The
//! races schedule from several threads while `shutdown()` comes.

use crate::common::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;
use wheelpool::{Builder, PendingTask, ScheduleError, ScheduledFuture, ScheduledThreadPool};
use wheelpool::{TaskError, TaskKind};

/// Producer threads racing the shutdown.
const PRODUCERS: usize = 4;
/// At most this many schedules per producer (the shutdown usually stops them well before).
const PER_PRODUCER: usize = 3_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A one-shot with a delay left at the shutdown.
    Later,
    /// A one-shot due at once (never in a wheel).
    Now,
    /// Fixed rate, 1 ms.
    Periodic,
}

/// One accepted task: its name, kind, runs by the pool, and its future.
struct Accepted {
    name: String,
    kind: Kind,
    runs: Arc<AtomicUsize>,
    future: ScheduledFuture<()>,
}

/// What the producers did.
struct Race {
    accepted: Vec<Accepted>,
    refused: usize,
    drops: DropCounter,
}

/// Schedules Later / Now / Periodic tasks from `PRODUCERS` threads, each named and carrying a
/// drop token, until the schedules fail; calls `shutdown()` once `before` tasks were accepted.
fn race(pool: &Arc<ScheduledThreadPool>, later: Duration, before: usize) -> Race {
    let drops = DropCounter::new();
    let accepted_count = Arc::new(AtomicUsize::new(0));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (pool, drops, count) = (pool.clone(), drops.clone(), accepted_count.clone());
            thread::spawn(move || {
                let (mut accepted, mut refused) = (Vec::new(), 0);
                for i in 0..PER_PRODUCER {
                    let kind = [Kind::Later, Kind::Now, Kind::Periodic][i % 3];
                    let name = format!("p{p}-{i}");
                    let runs = Arc::new(AtomicUsize::new(0));
                    let (r, token) = (runs.clone(), drops.token());
                    let task = pool.task().name(name.clone());
                    let scheduled = match kind {
                        Kind::Later | Kind::Now => {
                            let delay = if kind == Kind::Later {
                                later
                            } else {
                                Duration::ZERO
                            };
                            let once = move || drop((r.fetch_add(1, SeqCst), token));
                            task.schedule(once, delay)
                        }
                        Kind::Periodic => {
                            let beat = move || {
                                let _captured = &token;
                                r.fetch_add(1, SeqCst);
                            };
                            let ms = Duration::from_millis(1);
                            task.schedule_at_fixed_rate(beat, ms, ms)
                        }
                    };
                    match scheduled {
                        Ok(future) => {
                            count.fetch_add(1, SeqCst);
                            accepted.push(Accepted {
                                name,
                                kind,
                                runs,
                                future,
                            });
                        }
                        Err(e) => {
                            assert_eq!(e, ScheduleError::Shutdown);
                            refused += 1;
                            break;
                        }
                    }
                }
                (accepted, refused)
            })
        })
        .collect();
    assert!(wait_until(LONG, || accepted_count.load(SeqCst) >= before));
    pool.shutdown();
    let (mut accepted, mut refused) = (Vec::new(), 0);
    for p in producers {
        let (a, r) = p.join().unwrap();
        accepted.extend(a);
        refused += r;
    }
    Race {
        accepted,
        refused,
        drops,
    }
}

fn pool(builder: Builder) -> Arc<ScheduledThreadPool> {
    Arc::new(builder.threads(2).build().unwrap())
}

/// The names of `handed` once each (a name handed back twice fails).
fn names_once(handed: &[PendingTask]) -> HashSet<String> {
    let mut names = HashSet::new();
    for task in handed {
        assert_eq!(task.kind(), TaskKind::OneShot, "{task:?}");
        assert!(
            names.insert(task.name().unwrap().to_owned()),
            "twice: {task:?}"
        );
    }
    names
}

#[test]
fn hand_back_waiting_one_shots_and_stop_periodic_tasks_racing_schedules() {
    for _ in 0..5 {
        let pool = pool(ScheduledThreadPool::builder().execute_delayed_after_shutdown(false));
        let Race {
            accepted,
            refused,
            drops,
        } = race(&pool, HOUR, 300);
        assert!(pool.await_termination(LONG), "nothing holds the pool up");
        let handed = pool.take_handed_back();
        let names = names_once(&handed);
        let (mut ran, mut shut, mut runs, mut later) = (0, 0, 0, 0);
        for task in accepted {
            let pool_runs = task.runs.load(SeqCst);
            runs += pool_runs;
            let result = task.future.join();
            match task.kind {
                Kind::Later => {
                    // An hour away: never ran, handed back exactly once.
                    assert_eq!((pool_runs, &result), (0, &Err(TaskError::Shutdown)));
                    assert!(names.contains(&task.name), "{} not handed back", task.name);
                    shut += 1;
                    later += 1;
                }
                Kind::Now => {
                    assert_eq!((pool_runs, result), (1, Ok(())), "{}", task.name);
                    assert!(!names.contains(&task.name));
                    ran += 1;
                }
                Kind::Periodic => {
                    assert_eq!(result, Err(TaskError::Shutdown), "{}", task.name);
                    assert!(!names.contains(&task.name));
                    shut += 1;
                }
            }
        }
        let s = pool.stats();
        assert_eq!(s.cancelled, shut as u64, "each stopped task counted once");
        assert_eq!(s.completed, runs as u64);
        assert_eq!((s.pending, s.running, s.waiting_in_wheels), (0, 0, 0));
        assert!(ran > 0);
        assert_eq!(
            handed.len(),
            later,
            "every waiting one-shot handed back, no other"
        );
        for task in handed {
            task.run(); // the caller's choice: run what was handed back, once
        }
        assert_eq!(pool.take_handed_back().len(), 0);
        let total = ran + shut + refused;
        assert_eq!(drops.dropped(), total, "every closure dropped exactly once");
    }
}

#[test]
fn periodic_tasks_go_on_after_shutdown_until_cancelled() {
    for _ in 0..5 {
        let pool = pool(ScheduledThreadPool::builder().continue_periodic_after_shutdown(true));
        let later = Duration::from_millis(5);
        let Race {
            accepted,
            refused,
            drops,
        } = race(&pool, later, 300);
        let periodic_runs = || -> usize {
            (accepted.iter())
                .filter(|t| t.kind == Kind::Periodic)
                .map(|t| t.runs.load(SeqCst))
                .sum()
        };
        let after_shutdown = periodic_runs();
        assert!(
            wait_until(LONG, || periodic_runs() >= after_shutdown + 20),
            "they go on"
        );
        assert!(!pool.is_terminated());
        let mut cancelled = 0;
        for task in accepted.iter().filter(|t| t.kind == Kind::Periodic) {
            task.future.cancel();
            cancelled += 1;
        }
        assert!(
            pool.await_termination(LONG),
            "terminates once the last is cancelled"
        );
        assert!(pool.take_handed_back().is_empty());
        let (mut runs, created) = (0, accepted.len() + refused);
        for task in accepted {
            runs += task.runs.load(SeqCst);
            let result = task.future.join();
            match task.kind {
                Kind::Later | Kind::Now => assert_eq!(result, Ok(()), "{}", task.name),
                Kind::Periodic => assert_eq!(result, Err(TaskError::Cancelled), "{}", task.name),
            }
        }
        let s = pool.stats();
        assert_eq!(s.cancelled, cancelled);
        assert_eq!(s.completed, runs as u64);
        assert_eq!(s.pending, 0);
        drop(pool);
        assert_eq!(
            drops.dropped(),
            created,
            "every closure dropped exactly once"
        );
    }
}

#[test]
fn shutdown_now_stops_periodic_tasks_that_went_on() {
    let pool = pool(ScheduledThreadPool::builder().continue_periodic_after_shutdown(true));
    let drops = DropCounter::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let futures: Vec<_> = (0..50)
        .map(|_| {
            let (r, token) = (runs.clone(), drops.token());
            let ms = Duration::from_millis(1);
            let beat = move || {
                let _captured = &token;
                r.fetch_add(1, SeqCst);
            };
            pool.schedule_at_fixed_rate(beat, ms, ms).unwrap()
        })
        .collect();
    pool.shutdown();
    let before = runs.load(SeqCst);
    assert!(
        wait_until(LONG, || runs.load(SeqCst) >= before + 100),
        "they go on"
    );
    let handed = pool.shutdown_now();
    assert!(pool.await_termination(LONG));
    let returned: HashSet<u64> = handed.iter().map(PendingTask::id).collect();
    assert_eq!(returned.len(), handed.len());
    let mut cancelled = 0;
    for f in futures {
        match f.join() {
            Err(TaskError::Cancelled) => cancelled += 1, // handed back by shutdown_now
            Err(TaskError::Shutdown) => {}               // was running: stopped after it
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(cancelled, handed.len());
    assert_eq!(pool.stats().cancelled, 50);
    drop(handed);
    assert_eq!(drops.dropped(), 50);
}

#[test]
fn the_default_policy_runs_waiting_one_shots_and_stops_periodic_ones() {
    let pool = pool(ScheduledThreadPool::builder());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let one_shot = pool.schedule(
        move || s.lock().unwrap().push("one-shot"),
        Duration::from_millis(20),
    );
    let ms = Duration::from_millis(1);
    let beat = pool.schedule_at_fixed_rate(|| (), ms, ms).unwrap();
    pool.shutdown();
    assert!(pool.await_termination(LONG));
    assert_eq!(one_shot.unwrap().join(), Ok(()));
    assert_eq!(beat.join(), Err(TaskError::Shutdown));
    assert_eq!(*seen.lock().unwrap(), ["one-shot"]);
    assert!(pool.take_handed_back().is_empty());
}

#[test]
fn on_a_manual_clock_a_handed_back_task_never_runs_and_a_due_one_does() {
    let clock = wheelpool::ManualClock::new();
    let pool = ScheduledThreadPool::builder()
        .threads(1)
        .clock(clock.clone())
        .execute_delayed_after_shutdown(false)
        .build()
        .unwrap();
    let ms = Duration::from_millis;
    let waiting = pool.schedule(|| "waited", ms(10)).unwrap();
    let due = pool.schedule(|| "due", ms(0)).unwrap();
    pool.shutdown();
    clock.advance(ms(20));
    assert!(pool.await_termination(LONG));
    assert_eq!(due.join(), Ok("due"));
    assert_eq!(waiting.join(), Err(TaskError::Shutdown));
    let handed = pool.take_handed_back();
    assert_eq!(handed.len(), 1);
    assert_eq!(handed[0].deadline(), Some(clock.now() - ms(10)));
    assert!(
        format!("{:?}", handed[0]).contains("Shutdown"),
        "{:?}",
        handed[0]
    );
}

#![cfg(not(wheelpool_loom))]
//! Periodic tasks meeting panics and shutdown under the `ManualClock`: a panic stops the task
//! unless it opted to survive; `shutdown` stops periodic tasks after their current run while
//! one-shots still run; `shutdown_now` hands waiting ones back.
//!
//! Helpers and conventions: see `manual_common`.

use crate::manual_common::*;

// ---- panics -----------------------------------------------------------------------------------

#[test]
fn a_panic_stops_a_periodic_task_and_nothing_else() {
    bounded(|| {
        let clock = ManualClock::new();
        let log = PanicLog::default();
        let pool = log.pool(&clock, 2);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    let n = r.fetch_add(1, SeqCst) + 1;
                    if n == 3 {
                        panic!("boom on run {n}");
                    }
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let neighbour = Arc::new(AtomicUsize::new(0));
        let nb = neighbour.clone();
        let g = pool
            .schedule_with_fixed_delay(
                move || {
                    nb.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        clock.advance(ms(100));
        assert_eq!(runs.load(SeqCst), 3, "no run after the panic");
        assert_eq!(
            neighbour.load(SeqCst),
            10,
            "the other periodic task goes on"
        );
        assert!(f.is_done() && !f.is_cancelled());
        assert_eq!(f.delay(), Duration::ZERO);
        assert_eq!(
            join_within(f),
            Err(TaskError::Panicked("boom on run 3".into()))
        );
        assert_eq!(
            log.messages(),
            vec!["boom on run 3".to_owned()],
            "the handler saw it once"
        );
        assert_eq!(pool.stats().panicked, 1);
        let one_shot = pool.schedule(|| "pool still works", ms(5)).unwrap();
        clock.advance(ms(5));
        assert_eq!(join_within(one_shot), Ok("pool still works"));
        assert!(g.cancel());
    });
}

#[test]
fn survive_panics_keeps_the_task_going_and_reports_each_panic() {
    bounded(|| {
        for fixed_delay in [false, true] {
            let clock = ManualClock::new();
            let log = PanicLog::default();
            let pool = log.pool(&clock, 2);
            let runs = Arc::new(AtomicUsize::new(0));
            let r = runs.clone();
            let body = move || {
                let n = r.fetch_add(1, SeqCst) + 1;
                if n % 2 == 0 {
                    panic!("tick {n}");
                }
            };
            let f = if fixed_delay {
                pool.task()
                    .survive_panics(true)
                    .schedule_with_fixed_delay(body, ms(10), ms(10))
                    .unwrap()
            } else {
                pool.task()
                    .survive_panics(true)
                    .schedule_at_fixed_rate(body, ms(10), ms(10))
                    .unwrap()
            };
            clock.advance(ms(100));
            assert_eq!(
                runs.load(SeqCst),
                10,
                "fixed_delay={fixed_delay}: panicking runs do not stop it"
            );
            let expected: Vec<String> = (1..=5).map(|k| format!("tick {}", 2 * k)).collect();
            assert_eq!(log.messages(), expected);
            assert_eq!(pool.stats().panicked, 5);
            assert!(!f.is_done());
            assert_eq!(f.delay(), ms(10), "re-armed after a panicking run too");
            assert!(f.cancel());
            assert_eq!(join_within(f), Err(TaskError::Cancelled));
        }
    });
}

// ---- shutdown ---------------------------------------------------------------------------------

#[test]
fn shutdown_stops_periodic_tasks_while_one_shots_still_run() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let rate_runs = Arc::new(AtomicUsize::new(0));
        let delay_runs = Arc::new(AtomicUsize::new(0));
        let (a, b) = (rate_runs.clone(), delay_runs.clone());
        let rate = pool
            .schedule_at_fixed_rate(
                move || {
                    a.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let delay = pool
            .schedule_with_fixed_delay(
                move || {
                    b.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let one_shot = pool.schedule(|| "delayed one-shot ran", ms(50)).unwrap();
        clock.advance(ms(20));
        assert_eq!((rate_runs.load(SeqCst), delay_runs.load(SeqCst)), (2, 2));
        pool.shutdown();
        // The code ends a periodic task stopped by shutdown with TaskError::Shutdown.
        assert_eq!(join_within(rate), Err(TaskError::Shutdown));
        assert_eq!(join_within(delay), Err(TaskError::Shutdown));
        assert_eq!(
            pool.schedule_at_fixed_rate(|| (), ms(1), ms(1))
                .unwrap_err(),
            ScheduleError::Shutdown
        );
        assert!(!pool.is_terminated(), "a delayed one-shot is still waiting");
        clock.advance(ms(100));
        assert_eq!(join_within(one_shot), Ok("delayed one-shot ran"));
        assert_eq!(
            (rate_runs.load(SeqCst), delay_runs.load(SeqCst)),
            (2, 2),
            "no periodic run after shutdown"
        );
        assert!(pool.await_termination(JOIN_LIMIT));
    });
}

#[test]
fn shutdown_during_a_periodic_run_lets_it_finish_then_stops_it() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let runs = Arc::new(AtomicUsize::new(0));
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let r = runs.clone();
        let f = pool
            .schedule_at_fixed_rate(
                move || {
                    r.fetch_add(1, SeqCst);
                    entered_tx.send(()).unwrap();
                    release_rx.lock().unwrap().recv_timeout(JOIN_LIMIT).unwrap();
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let c = clock.clone();
        let advancer = thread::spawn(move || c.advance(ms(100)));
        entered_rx
            .recv_timeout(JOIN_LIMIT)
            .expect("the first run started");
        pool.shutdown();
        assert!(!f.is_done(), "the current run is still going");
        release_tx.send(()).unwrap();
        assert_eq!(join_within(f), Err(TaskError::Shutdown));
        advancer.join().unwrap();
        assert_eq!(
            runs.load(SeqCst),
            1,
            "the run in progress finished; none followed"
        );
        assert!(pool.await_termination(JOIN_LIMIT));
    });
}

#[test]
fn shutdown_now_hands_back_waiting_periodic_tasks() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        let rate_runs = Arc::new(AtomicUsize::new(0));
        let delay_runs = Arc::new(AtomicUsize::new(0));
        let (a, b) = (rate_runs.clone(), delay_runs.clone());
        let rate = pool
            .schedule_at_fixed_rate(
                move || {
                    a.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let delay = pool
            .schedule_with_fixed_delay(
                move || {
                    b.fetch_add(1, SeqCst);
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        let one_shot = pool.schedule(|| (), Duration::from_secs(3600)).unwrap();
        clock.advance(ms(25));
        let pending = pool.shutdown_now();
        assert_eq!(pending.len(), 3);
        assert_eq!(pending.iter().filter(|p| p.is_periodic()).count(), 2);
        assert_eq!(join_within(rate), Err(TaskError::Cancelled));
        assert_eq!(join_within(delay), Err(TaskError::Cancelled));
        assert_eq!(join_within(one_shot), Err(TaskError::Cancelled));
        assert_eq!((rate_runs.load(SeqCst), delay_runs.load(SeqCst)), (2, 2));
        for task in pending {
            task.run(); // a handed-back periodic task runs once on this thread
        }
        assert_eq!((rate_runs.load(SeqCst), delay_runs.load(SeqCst)), (3, 3));
        assert!(pool.await_termination(JOIN_LIMIT));
        clock.advance(ms(100));
        assert_eq!(
            (rate_runs.load(SeqCst), delay_runs.load(SeqCst)),
            (3, 3),
            "not re-armed"
        );
    });
}

/// A periodic task that owns the last reference to its own pool: stopping it at a graceful
/// shutdown drops the pool. That must happen on a worker, not on the timer thread (whose
/// `shutdown_now` would then wait for itself): the future ends `Shutdown` and nothing hangs.
#[test]
fn a_periodic_task_owning_its_pool_is_stopped_without_a_hang() {
    let pool = Arc::new(ScheduledThreadPool::builder().threads(2).build().unwrap());
    let owned = pool.clone();
    let (dropped_tx, dropped_rx) = mpsc::channel::<()>();
    struct OnDrop(Option<mpsc::Sender<()>>, Option<Arc<ScheduledThreadPool>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            drop(self.1.take()); // may drop the pool: joins every thread but this one
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }
    let guard = OnDrop(Some(dropped_tx), Some(owned));
    let mut beat = pool
        .schedule_at_fixed_rate(
            move || {
                let _ = &guard;
            },
            Duration::from_secs(3600),
            Duration::from_secs(3600),
        )
        .unwrap();
    pool.shutdown();
    drop(pool); // the task's closure now holds the last reference
    assert!(
        dropped_rx.recv_timeout(JOIN_LIMIT).is_ok(),
        "the periodic task's closure was not dropped"
    );
    assert_eq!(
        beat.join_timeout(JOIN_LIMIT),
        Some(Err(TaskError::Shutdown))
    );
}

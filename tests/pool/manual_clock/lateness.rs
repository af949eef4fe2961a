//! `PoolStats`' lateness distribution and queue depths on virtual time, where they are exact:
//! time moves only when the test says, so a run is late only by what the test made it.

use crate::manual_common::*;

#[test]
fn runs_on_time_are_zero_late_and_counted() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 2);
        for i in 1..=100 {
            pool.schedule(|| (), ms(i % 7 + 1)).unwrap().detach();
        }
        let beat = pool.schedule_at_fixed_rate(|| (), ms(1), ms(1)).unwrap();
        pool.execute(|| ()).unwrap(); // no planned time: not measured
        clock.advance(ms(10));
        let s = pool.stats();
        assert_eq!(s.completed, 100 + 10 + 1);
        assert_eq!(
            s.lateness_count,
            100 + 10,
            "every planned run, not the execute"
        );
        assert_eq!(
            (s.lateness_p50, s.lateness_p99, s.lateness_max),
            (Duration::ZERO, Duration::ZERO, Duration::ZERO)
        );
        assert!(beat.cancel());
    });
}

#[test]
fn a_blocked_worker_makes_runs_late_by_exactly_the_blocking() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let c = clock.clone();
        // The only worker runs from 5 ms to 13 ms (the task moves the clock itself); three
        // tasks due at 10 ms wait for it and start 3 ms late; a task due at 20 ms is on time.
        pool.schedule(move || c.advance(ms(8)), ms(5))
            .unwrap()
            .detach();
        for _ in 0..3 {
            pool.schedule(|| (), ms(10)).unwrap().detach();
        }
        pool.schedule(|| (), ms(20)).unwrap().detach();
        clock.advance(ms(10));
        let s = pool.stats();
        assert_eq!(s.lateness_count, 4);
        // [0, 3, 3, 3] ms: the median's bucket holds only 3 ms values, capped by the exact max.
        assert_eq!(
            (s.lateness_p50, s.lateness_p99, s.lateness_max),
            (ms(3), ms(3), ms(3))
        );
        clock.advance(ms(10));
        let s = pool.stats();
        assert_eq!(s.lateness_count, 5);
        assert_eq!(s.lateness_max, ms(3), "the run at 20 ms was on time");
        // [0, 0, 3, 3, 3]: rank 3 of 5 is a 3 ms run.
        assert_eq!(s.lateness_p50, ms(3));
    });
}

#[test]
fn a_late_fixed_rate_burst_measures_each_missed_slot() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let runs = Arc::new(AtomicUsize::new(0));
        let (r, c) = (runs.clone(), clock.clone());
        // Period 10 ms from 10 ms; the first run takes 35 ms: the runs planned at 20, 30 and
        // 40 ms start at 45 ms (Burst), 25, 15 and 5 ms late.
        let beat = pool
            .task()
            .missed_ticks(MissedTicks::Burst)
            .schedule_at_fixed_rate(
                move || {
                    if r.fetch_add(1, SeqCst) == 0 {
                        c.advance(ms(35));
                    }
                },
                ms(10),
                ms(10),
            )
            .unwrap();
        clock.advance(ms(10));
        assert_eq!(runs.load(SeqCst), 4);
        let s = pool.stats();
        assert_eq!(s.lateness_count, 4);
        assert_eq!(s.lateness_max, ms(25));
        // [0, 5, 15, 25] ms: rank 2 is 5 ms, within 1/8 above it.
        assert!(
            s.lateness_p50 >= ms(5) && s.lateness_p50 <= ms(5) + ms(5) / 8,
            "{s:?}"
        );
        assert_eq!(s.lateness_p99, ms(25));
        assert!(beat.cancel());
    });
}

#[test]
fn queue_depths_count_the_wheels_and_the_ready_queues() {
    bounded(|| {
        let clock = ManualClock::new();
        let pool = manual_pool(&clock, 1);
        let hour = Duration::from_secs(3600);
        let waiting: Vec<_> = (0..5)
            .map(|_| pool.schedule(|| (), hour).unwrap())
            .collect();
        let s = pool.stats();
        assert_eq!(
            (s.waiting_in_wheels, s.ready_in_queues, s.pending),
            (5, 0, 5)
        );

        // Block the only worker, then queue three tasks behind it.
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        pool.execute(move || {
            started_tx.send(()).unwrap();
            release_rx.recv_timeout(WATCHDOG).unwrap();
        })
        .unwrap();
        started.recv_timeout(WATCHDOG).unwrap();
        for _ in 0..3 {
            pool.execute(|| ()).unwrap();
        }
        let s = pool.stats();
        assert_eq!((s.waiting_in_wheels, s.ready_in_queues), (5, 3));
        assert_eq!((s.running, s.pending), (1, 8));

        release.send(()).unwrap();
        for f in &waiting {
            assert!(f.cancel());
        }
        let s = pool.stats();
        assert_eq!(s.waiting_in_wheels, 0, "a cancel unlinks at once");
        pool.shutdown();
        assert!(pool.await_termination(JOIN_LIMIT));
        assert_eq!(pool.stats().ready_in_queues, 0);
    });
}

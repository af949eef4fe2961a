#![cfg(not(wheelpool_loom))]
//! `Builder::on_thread_start` / `on_thread_stop`: once per worker (never on the timer thread),
//! the start hook before any task, the stop hook as the worker exits; a panicking start hook
//! fails `build` with every thread joined, a panicking stop hook does not hang shutdown.

use crate::manual_common::*;
use std::cell::Cell;

thread_local! {
    static SET_UP: Cell<bool> = const { Cell::new(false) };
}

/// Names of the threads a hook ran on.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn record(&self) {
        let name = thread::current().name().unwrap_or("?").to_owned();
        self.0.lock().unwrap().push(name);
    }

    fn names(&self) -> Vec<String> {
        let mut v = self.0.lock().unwrap().clone();
        v.sort();
        v
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[test]
fn start_hooks_run_once_per_worker_before_any_task() {
    bounded(|| {
        let started = Seen::default();
        let s = started.clone();
        let pool = ScheduledThreadPool::builder()
            .threads(3)
            .thread_name("hooked")
            .on_thread_start(move || {
                s.record();
                SET_UP.with(|c| c.set(true));
            })
            .build()
            .unwrap();
        // `build` waited for every start hook: the count is complete before any task runs.
        assert_eq!(
            started.names(),
            names("hooked", 3),
            "never on the timer thread"
        );
        let futures: Vec<_> = (0..64)
            .map(|_| {
                pool.schedule(|| SET_UP.with(|c| c.get()), Duration::ZERO)
                    .unwrap()
            })
            .collect();
        for f in futures {
            assert_eq!(
                join_within(f),
                Ok(true),
                "every task ran on a set-up thread"
            );
        }
        pool.shutdown();
        assert!(pool.await_termination(JOIN_LIMIT));
        assert_eq!(started.names().len(), 3);
    });
}

#[test]
fn stop_hooks_run_once_per_worker_at_shutdown_and_on_drop() {
    bounded(|| {
        for graceful in [true, false] {
            let stopped = Seen::default();
            let s = stopped.clone();
            let pool = ScheduledThreadPool::builder()
                .threads(2)
                .thread_name("stopper")
                .on_thread_start(|| ())
                .on_thread_stop(move || s.record())
                .build()
                .unwrap();
            pool.execute(|| ()).unwrap();
            assert!(
                stopped.names().is_empty(),
                "nothing stops while the pool runs"
            );
            if graceful {
                pool.shutdown();
                assert!(pool.await_termination(JOIN_LIMIT));
            } else {
                drop(pool); // shutdown_now, then joins the threads
            }
            assert_eq!(stopped.names(), names("stopper", 2), "graceful: {graceful}");
        }
    });
}

/// Counts thread exits: a value in a thread-local whose drop runs as its thread ends.
struct ExitMark(Arc<AtomicUsize>);

impl Drop for ExitMark {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

thread_local! {
    static EXIT_MARK: std::cell::RefCell<Option<ExitMark>> = const { std::cell::RefCell::new(None) };
}

#[test]
fn a_panicking_start_hook_fails_build_and_leaves_no_thread_behind() {
    bounded(|| {
        let exited = Arc::new(AtomicUsize::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        let stopped = Arc::new(AtomicUsize::new(0));
        let (e, c, s) = (exited.clone(), calls.clone(), stopped.clone());
        let err = ScheduledThreadPool::builder()
            .threads(4)
            .on_thread_start(move || {
                EXIT_MARK.with(|m| *m.borrow_mut() = Some(ExitMark(e.clone())));
                if c.fetch_add(1, SeqCst) == 2 {
                    panic!("worker setup failed");
                }
            })
            .on_thread_stop(move || {
                s.fetch_add(1, SeqCst);
            })
            .build()
            .unwrap_err();
        assert!(err.is_thread_start_panic());
        assert!(!err.is_invalid_config() && !err.is_spawn_failure());
        assert_eq!(err.panic_message(), Some("worker setup failed"));
        assert!(err.to_string().contains("worker setup failed"), "{err}");
        assert_eq!(calls.load(SeqCst), 4, "every worker ran its start hook");
        // `build` joined every worker before it returned: all four have exited.
        assert_eq!(exited.load(SeqCst), 4);
        assert_eq!(
            stopped.load(SeqCst),
            3,
            "the failed worker runs no stop hook"
        );
    });
}

#[test]
fn a_panicking_stop_hook_does_not_hang_shutdown() {
    bounded(|| {
        let clock = ManualClock::new();
        let log = PanicLog::default();
        let handler_log = log.0.clone();
        let pool = ScheduledThreadPool::builder()
            .threads(2)
            .clock(clock.clone())
            .panic_handler(move |payload| {
                let msg = payload.downcast_ref::<&str>().copied().unwrap_or("?");
                handler_log.lock().unwrap().push(msg.to_owned());
            })
            .on_thread_stop(|| panic!("flush failed"))
            .build()
            .unwrap();
        let f = pool.schedule(|| 1, ms(5)).unwrap();
        clock.advance(ms(5));
        assert_eq!(join_within(f), Ok(1));
        pool.shutdown();
        assert!(pool.await_termination(JOIN_LIMIT));
        assert_eq!(log.messages(), ["flush failed", "flush failed"]);
        assert_eq!(pool.stats().panicked, 0, "hook panics are not task panics");
    });
}

#[test]
fn hooks_without_a_panic_handler_are_fine_too() {
    bounded(|| {
        let pool = ScheduledThreadPool::builder()
            .threads(1)
            .on_thread_stop(|| panic!("nobody listens"))
            .build()
            .unwrap();
        assert_eq!(
            join_within(pool.schedule(|| 2, Duration::ZERO).unwrap()),
            Ok(2)
        );
        pool.shutdown();
        assert!(
            pool.await_termination(JOIN_LIMIT),
            "the worker exited past its hook's panic"
        );
    });
}

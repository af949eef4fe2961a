//! Helpers shared by the executor's integration tests: bounded polling, latches, drop counters,
//! quiet panics, and a check that every worker of a pool is alive.
//!
//! Nothing here sleeps to "wait a bit": waits are on a condition, with a generous upper bound so
//! a slow, shared CI machine does not flake, and they report whether the condition came true.

#![allow(dead_code)] // each test file uses a different subset

use std::panic;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};
use wheelpool::ScheduledThreadPool;

/// Upper bound for anything that should happen "soon". Far above what a healthy run needs; it
/// only decides how long a broken run takes to fail.
pub(crate) const LONG: Duration = Duration::from_secs(30);

/// A delay no test waits for: such a task must be cancelled, returned or rejected.
pub(crate) const HOUR: Duration = Duration::from_secs(3600);

/// Thread-name prefix of pools whose panics are expected: the panic hook stays silent for them.
pub(crate) const QUIET: &str = "quiet";

/// Polls `cond` every millisecond until it holds (true) or `timeout` passes (false).
pub(crate) fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return cond();
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// A one-way gate: closed until `open`, then open for good. Cloning shares the gate.
#[derive(Clone, Default)]
pub(crate) struct Latch(Arc<(Mutex<bool>, Condvar)>);

impl Latch {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }

    pub(crate) fn is_open(&self) -> bool {
        *self.0 .0.lock().unwrap()
    }

    /// Blocks until the latch is open (true) or `timeout` passes (false).
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let guard = self.0 .0.lock().unwrap();
        let (guard, _) = self
            .0
             .1
            .wait_timeout_while(guard, timeout, |open| !*open)
            .unwrap();
        *guard
    }
}

/// Counts how many of its tokens have been dropped.
#[derive(Clone, Default)]
pub(crate) struct DropCounter(Arc<AtomicUsize>);

/// A value to capture in a closure: dropping it bumps its counter.
pub(crate) struct Token(Arc<AtomicUsize>);

impl Drop for Token {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl DropCounter {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn token(&self) -> Token {
        Token(self.0.clone())
    }

    pub(crate) fn dropped(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Silences the panic hook on threads named `QUIET...` (pools whose panics a test provokes, by
/// the thousand); every other panic, including a failing assertion, prints as usual.
pub(crate) fn quiet_pool_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let quiet = thread::current()
                .name()
                .is_some_and(|n| n.starts_with(QUIET));
            if !quiet {
                previous(info);
            }
        }));
    });
}

/// A pool with `threads` workers, quiet panics and the default tick.
pub(crate) fn quiet_pool(threads: usize) -> ScheduledThreadPool {
    quiet_pool_panics();
    ScheduledThreadPool::builder()
        .threads(threads)
        .thread_name(QUIET)
        .build()
        .expect("build a pool")
}

/// True if `threads` tasks can all run at the same time on `pool`: each waits (bounded) until all
/// of them have started, so it holds only if `threads` workers are alive and taking work.
pub(crate) fn all_workers_alive(pool: &ScheduledThreadPool, threads: usize) -> bool {
    let arrived = Arc::new(AtomicUsize::new(0));
    let futures: Vec<_> = (0..threads)
        .map(|_| {
            let arrived = arrived.clone();
            pool.schedule(
                move || {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    wait_until(LONG, || arrived.load(Ordering::SeqCst) >= threads)
                },
                Duration::ZERO,
            )
            .expect("schedule a rendezvous task")
        })
        .collect();
    let end = Instant::now() + LONG;
    futures.into_iter().all(|mut f| {
        let left = end.saturating_duration_since(Instant::now());
        f.join_timeout(left) == Some(Ok(true))
    })
}

/// Blocks one worker of `pool` until the returned latch opens; returns once it is blocked, with
/// the blocking task's future (it returns true once released).
pub(crate) fn block_worker(
    pool: &ScheduledThreadPool,
) -> (Latch, wheelpool::ScheduledFuture<bool>) {
    let started = Latch::new();
    let release = Latch::new();
    let (s, r) = (started.clone(), release.clone());
    let f = pool
        .schedule(
            move || {
                s.open();
                r.wait(LONG)
            },
            Duration::ZERO,
        )
        .unwrap();
    assert!(started.wait(LONG), "the blocking task started");
    (release, f)
}

/// A fixed-rate task at `period` (first run one period out) that counts its runs.
pub(crate) fn counting_fixed_rate(
    pool: &ScheduledThreadPool,
    period: Duration,
) -> (Arc<AtomicUsize>, wheelpool::ScheduledFuture<()>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let future = pool
        .schedule_at_fixed_rate(
            move || {
                r.fetch_add(1, Ordering::SeqCst);
            },
            period,
            period,
        )
        .unwrap();
    (runs, future)
}

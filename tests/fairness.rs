//! Fairness: a due timer, a task submitted from outside and a task buried under a worker's
//! own continuation chain all run while every worker runs a chain that never lets its local
//! deque go empty (a chunked job that `execute`s its next chunk from the worker).
//!
//! Without fairness each of these waits forever, so every wait here is bounded and a miss fails
//! the test. No assertion is about timing: only "it ran".

mod common;

use common::{Latch, LONG};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wheelpool::{Handle, ScheduledThreadPool};

/// How long a run of a chain busies its worker: a chunk of a long job.
const CHUNK: Duration = Duration::from_micros(20);

/// A self-continuing job: each run works for `CHUNK`, then `execute`s its next chunk from the
/// worker (onto that worker's own deque), until `stop` is set.
#[derive(Clone)]
struct Chain {
    handle: Handle,
    stop: Arc<AtomicBool>,
    started: Latch,
    runs: Arc<AtomicUsize>,
}

impl Chain {
    fn new(pool: &ScheduledThreadPool) -> Self {
        Chain {
            handle: pool.handle(),
            stop: Arc::new(AtomicBool::new(false)),
            started: Latch::new(),
            runs: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn start(&self) {
        let chain = self.clone();
        self.handle.execute(move || chain.step()).unwrap();
    }

    fn step(self) {
        self.started.open();
        self.runs.fetch_add(1, Ordering::Relaxed);
        let end = Instant::now() + CHUNK;
        while Instant::now() < end {
            std::hint::spin_loop();
        }
        if !self.stop.load(Ordering::SeqCst) {
            let handle = self.handle.clone();
            // Err only once the pool shuts down: then the chain ends.
            let _ = handle.execute(move || self.step());
        }
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn pool(threads: usize) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(threads)
        .build()
        .unwrap()
}

/// Every worker runs its own chain; then a 10 ms timer must still run.
fn a_due_timer_runs_while_chains_run(workers: usize) {
    let pool = pool(workers);
    let chains: Vec<Chain> = (0..workers).map(|_| Chain::new(&pool)).collect();
    for c in &chains {
        c.start();
        // Started one after the other: a chain can only be on a worker that was idle.
        assert!(c.started.wait(LONG), "the chain started");
    }
    let armed = Instant::now();
    let mut timer = pool
        .schedule(Instant::now, Duration::from_millis(10))
        .unwrap();
    let outcome = timer.join_timeout(LONG).map(|r| r.map(|ran| ran - armed));
    let runs: Vec<usize> = chains
        .iter()
        .map(|c| c.runs.load(Ordering::Relaxed))
        .collect();
    chains.iter().for_each(Chain::stop);
    let Some(Ok(after)) = outcome else {
        panic!("a due 10 ms timer did not run within {LONG:?} behind {workers} chain(s) (runs: {runs:?})");
    };
    // Information only (machines are noisy): how late the timer was.
    eprintln!("{workers} chain(s): the 10 ms timer ran {after:?} after it was armed");
    pool.shutdown();
    assert!(pool.await_termination(LONG));
}

#[test]
fn a_due_timer_runs_behind_a_chain_on_the_only_worker() {
    a_due_timer_runs_while_chains_run(1);
}

#[test]
fn a_due_timer_runs_while_both_workers_run_chains() {
    a_due_timer_runs_while_chains_run(2);
}

#[test]
fn an_outside_submission_runs_while_the_only_worker_runs_a_chain() {
    let pool = pool(1);
    let chain = Chain::new(&pool);
    chain.start();
    assert!(chain.started.wait(LONG));
    let mut outside = pool.schedule(|| 7, Duration::ZERO).unwrap();
    let outcome = outside.join_timeout(LONG);
    chain.stop();
    assert_eq!(outcome, Some(Ok(7)), "the injector was never served");
}

/// A task the chain's worker pushed onto its own deque *below* the chain's continuation: the
/// LIFO end is always the chain, so only a look at the deque's FIFO end reaches it.
#[test]
fn a_task_buried_under_a_chain_in_the_same_deque_runs() {
    let pool = pool(1);
    let chain = Chain::new(&pool);
    let buried_ran = Latch::new();
    let (c, ran) = (chain.clone(), buried_ran.clone());
    pool.execute(move || {
        let h = c.handle.clone();
        h.execute(move || ran.open()).unwrap(); // pushed first: under the chain
        c.step(); // the chain's continuation goes on top of it, and so on
    })
    .unwrap();
    assert!(chain.started.wait(LONG));
    let ran = buried_ran.wait(LONG);
    chain.stop();
    assert!(ran, "a task under a self-continuing chain never ran");
}

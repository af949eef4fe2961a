//! Helpers shared by the loom models (`tests/loom_*.rs`).

#![allow(dead_code)] // each model file uses its own subset

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Runs `f` under loom with the preemption bound of `LOOM_MAX_PREEMPTIONS` (2 if unset: the
/// bound CI uses), and prints how long the exploration took.
pub(crate) fn model<F>(name: &str, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    let iterations = Arc::new(AtomicUsize::new(0));
    let counted = iterations.clone();
    let start = Instant::now();
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f()
    });
    eprintln!(
        "loom model {name}: {} executions in {:.2?} (preemption bound {:?})",
        iterations.load(Ordering::Relaxed),
        start.elapsed(),
        builder.preemption_bound
    );
}

/// Counts events (runs, drops) observed by model threads. A plain std atomic on purpose: loom
/// runs its threads one at a time, so a SeqCst std atomic reads what happened earlier in the
/// schedule being explored: it records the interleaving, it is not part of the protocol.
#[derive(Clone, Debug, Default)]
pub(crate) struct Count(Arc<AtomicUsize>);

impl Count {
    pub(crate) fn new() -> Self {
        Self::default()
    }
    pub(crate) fn add(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
    /// A value that bumps this count when dropped.
    pub(crate) fn token(&self) -> DropToken {
        DropToken(self.clone())
    }
}

/// Bumps its `Count` when dropped: captured by closures to count drops.
#[derive(Debug)]
pub(crate) struct DropToken(Count);

impl Drop for DropToken {
    fn drop(&mut self) {
        self.0.add();
    }
}

/// A loom-aware `block_on`: polls `f`, and between polls waits on a loom condvar until its
/// waker is woken. A wake-up that never comes leaves this thread blocked, which loom reports as
/// a deadlock once every other thread is done. Returns the output and how many wakes it saw.
pub(crate) fn block_on<F: std::future::Future>(f: F) -> (F::Output, usize) {
    use std::task::{Context, Poll, Wake, Waker};

    struct Signal {
        woken: loom::sync::Mutex<bool>,
        cv: loom::sync::Condvar,
        wakes: AtomicUsize,
    }
    impl Wake for Signal {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.wakes.fetch_add(1, Ordering::SeqCst);
            *self.woken.lock().unwrap() = true;
            self.cv.notify_one();
        }
    }

    let signal = Arc::new(Signal {
        woken: loom::sync::Mutex::new(false),
        cv: loom::sync::Condvar::new(),
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return (out, signal.wakes.load(Ordering::SeqCst));
        }
        let mut woken = signal.woken.lock().unwrap();
        while !*woken {
            woken = signal.cv.wait(woken).unwrap();
        }
        *woken = false;
    }
}

//! Helpers shared by the ManualClock tests (`manual_clock.rs`, `periodic*.rs`): a watchdog,
//! ManualClock pools, run recorders and a panic log.
#![allow(dead_code, unused_imports)]

pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
pub(crate) use std::sync::mpsc;
pub(crate) use std::sync::{Arc, Mutex, OnceLock};
pub(crate) use std::thread;
pub(crate) use std::time::{Duration, Instant};

pub(crate) use wheelpool::{
    CancelHandle, ManualClock, MissedTicks, ScheduleError, ScheduledFuture, ScheduledThreadPool,
    TaskError,
};

/// How long any test body may take before the watchdog calls it hung.
pub(crate) const WATCHDOG: Duration = Duration::from_secs(60);
/// Generous bound for a future that must end soon (real time, only reached on a bug).
pub(crate) const JOIN_LIMIT: Duration = Duration::from_secs(10);

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs `body` on its own thread and fails if it panics or does not finish within `WATCHDOG`.
pub(crate) fn bounded(body: impl FnOnce() + Send + 'static) {
    bounded_with_progress(|_| body());
}

/// What a long test body reports to [`bounded_with_progress`]: one `step` per round of work.
#[derive(Clone, Default)]
pub(crate) struct Progress(Arc<AtomicUsize>);

impl Progress {
    /// One more round done.
    pub(crate) fn step(&self) {
        self.0.fetch_add(1, SeqCst);
    }

    fn steps(&self) -> usize {
        self.0.load(SeqCst)
    }
}

/// Like [`bounded`], for a body of many rounds (thousands of races, ten thousand periods)
/// whose total time depends on how busy the machine is: the watchdog fails when `WATCHDOG`
/// passes without a single [`Progress::step`], not when the whole body outlasts it. A hang
/// still fails; a slow, shared machine does not.
pub(crate) fn bounded_with_progress(body: impl FnOnce(&Progress) + Send + 'static) {
    let progress = Progress::default();
    let (tx, rx) = mpsc::channel();
    let worker = {
        let progress = progress.clone();
        thread::spawn(move || {
            body(&progress);
            let _ = tx.send(());
        })
    };
    let mut seen = progress.steps();
    loop {
        match rx.recv_timeout(WATCHDOG) {
            Ok(()) => return worker.join().unwrap(),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The body panicked: re-raise its panic in the test thread.
                if let Err(p) = worker.join() {
                    std::panic::resume_unwind(p);
                }
                return;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = progress.steps();
                if now == seen {
                    panic!("test body hung: no progress for {WATCHDOG:?} (after {now} steps)");
                }
                seen = now;
            }
        }
    }
}

pub(crate) fn manual_pool(clock: &ManualClock, threads: usize) -> ScheduledThreadPool {
    ScheduledThreadPool::builder()
        .threads(threads)
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// Records `clock.now() - t0` at each run.
#[derive(Clone)]
pub(crate) struct Runs {
    pub(crate) clock: ManualClock,
    pub(crate) t0: Instant,
    pub(crate) at: Arc<Mutex<Vec<Duration>>>,
}

impl Runs {
    pub(crate) fn new(clock: &ManualClock) -> Self {
        Runs {
            clock: clock.clone(),
            t0: clock.now(),
            at: Arc::default(),
        }
    }

    /// Records this run's time; returns its 0-based index.
    pub(crate) fn record(&self) -> usize {
        let mut at = self.at.lock().unwrap();
        at.push(self.clock.now() - self.t0);
        at.len() - 1
    }

    pub(crate) fn times(&self) -> Vec<Duration> {
        self.at.lock().unwrap().clone()
    }

    pub(crate) fn count(&self) -> usize {
        self.at.lock().unwrap().len()
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.clock.now() - self.t0
    }
}

pub(crate) fn millis(list: &[u64]) -> Vec<Duration> {
    list.iter().map(|&m| ms(m)).collect()
}

pub(crate) fn join_within<T: Send + 'static>(mut f: ScheduledFuture<T>) -> Result<T, TaskError> {
    f.join_timeout(JOIN_LIMIT)
        .expect("the future did not end in time")
}

/// A task that counts panics seen by the pool's handler, with their messages.
#[derive(Clone, Default)]
pub(crate) struct PanicLog(pub(crate) Arc<Mutex<Vec<String>>>);

impl PanicLog {
    pub(crate) fn pool(&self, clock: &ManualClock, threads: usize) -> ScheduledThreadPool {
        let log = self.0.clone();
        ScheduledThreadPool::builder()
            .threads(threads)
            .clock(clock.clone())
            .panic_handler(move |payload| {
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                log.lock().unwrap().push(msg);
            })
            .build()
            .unwrap()
    }

    pub(crate) fn messages(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

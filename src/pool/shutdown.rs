//! The end of a pool: what the timer thread hands back to `shutdown_now`, and the count of live
//! pool threads behind `await_termination`. Plain state under locks; the orderings of shutdown
//! against schedules and takes are in the ground rules of `core.rs` and `queues.rs`.

use crate::sync::{Condvar, Mutex};
use crate::task::PendingTask;
use std::time::Instant;

/// What the timer thread hands back to `shutdown_now`.
#[derive(Debug, Default)]
struct Handback {
    driver_done: bool,
    tasks: Vec<PendingTask>,
}

/// Hand-back and termination.
#[derive(Debug)]
pub(crate) struct Termination {
    handback: Mutex<Handback>,
    handback_ready: Condvar,
    /// Pool threads still alive; `terminated` is signalled when it reaches zero.
    live_threads: Mutex<usize>,
    terminated: Condvar,
}

impl Termination {
    /// For a pool of `threads` threads (workers and the timer thread).
    pub(crate) fn new(threads: usize) -> Self {
        Termination {
            handback: Mutex::new(Handback::default()),
            handback_ready: Condvar::new(),
            live_threads: Mutex::new(threads),
            terminated: Condvar::new(),
        }
    }

    /// The timer thread stopped these tasks for `shutdown_now`, or for a graceful shutdown
    /// that hands waiting one-shots back.
    pub(crate) fn hand_back(&self, tasks: Vec<PendingTask>) {
        self.handback.lock().tasks.extend(tasks);
    }

    /// What has been handed back so far, without waiting for the timer thread (the user's
    /// `take_handed_back`).
    pub(crate) fn take_handed_back_now(&self) -> Vec<PendingTask> {
        std::mem::take(&mut self.handback.lock().tasks)
    }

    /// The timer thread is exiting (normally or not): it hands back nothing more.
    pub(crate) fn driver_done(&self) {
        self.handback.lock().driver_done = true;
        self.handback_ready.notify_all();
    }

    /// `shutdown_now`: waits until the timer thread is done (unless `may_wait` is false: called
    /// on the timer thread itself), then takes what it handed back.
    pub(crate) fn take_handed_back(&self, may_wait: bool) -> Vec<PendingTask> {
        let mut handback = self.handback.lock();
        while !handback.driver_done && may_wait {
            handback = crate::sync::wait_until(&self.handback_ready, handback, None);
        }
        std::mem::take(&mut handback.tasks)
    }

    /// A pool thread is exiting.
    pub(crate) fn thread_exited(&self) {
        let mut live = self.live_threads.lock();
        *live -= 1;
        if *live == 0 {
            self.terminated.notify_all();
        }
    }

    /// Waits until every pool thread has exited, or `deadline` passes.
    pub(crate) fn await_termination(&self, deadline: Option<Instant>) -> bool {
        let mut live = self.live_threads.lock();
        while *live > 0 {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            live = crate::sync::wait_until(&self.terminated, live, deadline);
        }
        true
    }

    pub(crate) fn is_terminated(&self) -> bool {
        *self.live_threads.lock() == 0
    }
}

//! How `ManualClock::advance` knows a pool has run everything due: the settle handshake.
//!
//! # Ground rules
//!
//! - `in_pool` counts tasks handed to the workers and not yet finished; a periodic task's re-arm
//!   (its insert into a wheel) happens before its run counts as finished.
//! - `inserted` counts inserts into the wheels (and resets); it is bumped after the insert's
//!   lock is released. A driver pass reads it (SeqCst) before it polls, so every insert that
//!   count includes happened before the pass's polls (the SeqCst read synchronises with the
//!   increment, which follows the unlock), and the pass saw it.
//! - A settle request bumps `requested` and wakes the driver. The driver reports a pass only
//!   when it is about to sleep (every shard polled to the end): the request it served, what it
//!   pushed, the insert count it started from and the next deadline.
//! - The pool is settled when the latest reported pass serves our request, pushed nothing
//!   and started from the insert count we read now, and `in_pool` is zero: then nothing due is
//!   in a wheel (the pass saw every insert and found nothing due), a run queue or a worker.
//!   No batch limit enters the argument, so it holds for any number of pending tasks.

use super::Timer;
use crate::sync::{AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};
use std::time::Instant;

/// The manual clock's view of a pool.
#[derive(Debug)]
pub(crate) struct Settle {
    status: Mutex<Status>,
    changed: Condvar,
    /// Tasks handed to the workers and not yet finished (re-arm included).
    in_pool: AtomicUsize,
    /// Inserts into the wheels so far.
    inserted: AtomicU64,
    /// Tasks ever handed to the workers (`in_pool` only goes up by these).
    entered: AtomicU64,
}

#[derive(Debug, Default)]
struct Status {
    /// Settle requests made / the latest one a reported pass had seen.
    requested: u64,
    completed: u64,
    /// Of the latest reported pass: tasks it pushed, the insert count it started from, and
    /// the next deadline in nanoseconds.
    pushed: usize,
    inserted_at_start: u64,
    next: Option<u64>,
}

/// What a driver pass read when it started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PassStart {
    requested: u64,
    inserted: u64,
}

impl Settle {
    pub(crate) fn new() -> Self {
        Settle {
            status: Mutex::new(Status::default()),
            changed: Condvar::new(),
            in_pool: AtomicUsize::new(0),
            inserted: AtomicU64::new(0),
            entered: AtomicU64::new(0),
        }
    }

    /// `n` tasks are about to be handed to the workers.
    pub(crate) fn entering_pool(&self, n: usize) {
        // SeqCst: pairs with the load in `wait`.
        self.in_pool.fetch_add(n, Ordering::SeqCst);
        // SeqCst: pairs with the load in `activity`.
        self.entered.fetch_add(n as u64, Ordering::SeqCst);
    }

    /// Work taken in so far (see `ClockListener::activity`).
    pub(crate) fn activity(&self) -> u64 {
        // SeqCst: pairs with the increments in `inserted` and `entering_pool`.
        self.inserted.load(Ordering::SeqCst) + self.entered.load(Ordering::SeqCst)
    }

    /// A task handed to the workers has finished (after any re-arm was inserted).
    pub(crate) fn left_pool(&self) {
        // SeqCst: pairs with the load in `wait`; the decrement to zero notifies under the
        // status lock, so a waiter that checked under that lock loses no wake-up.
        if self.in_pool.fetch_sub(1, Ordering::SeqCst) == 1 {
            let _status = self.status.lock();
            self.changed.notify_all();
        }
    }

    /// An insert into a wheel has been made (after its lock was released).
    pub(crate) fn inserted(&self) {
        // SeqCst: pairs with the loads in `pass_start` and `wait` (ground rules).
        self.inserted.fetch_add(1, Ordering::SeqCst);
    }

    /// The driver starts a pass.
    pub(crate) fn pass_start(&self) -> PassStart {
        let requested = self.status.lock().requested;
        PassStart {
            requested,
            // SeqCst: pairs with the increment in `inserted`.
            inserted: self.inserted.load(Ordering::SeqCst),
        }
    }

    /// The driver is about to sleep after a pass that started at `pass`.
    pub(crate) fn report(&self, pass: PassStart, pushed: usize, next: Option<u64>) {
        let mut st = self.status.lock();
        st.completed = st.completed.max(pass.requested);
        st.pushed = pushed;
        st.inserted_at_start = pass.inserted;
        st.next = next;
        drop(st);
        self.changed.notify_all();
    }

    /// Wakes every waiter: the driver is gone.
    pub(crate) fn release(&self) {
        let _st = self.status.lock();
        self.changed.notify_all();
    }
}

impl Timer {
    /// Runs the handshake until the pool is settled at the clock's current time; returns the
    /// earliest pending deadline, or `None` if there is none (or the timer thread is gone).
    pub(crate) fn settle_wait(&self) -> Option<Instant> {
        let s = self.settle.as_ref()?;
        loop {
            let req = {
                let mut st = s.status.lock();
                st.requested += 1;
                st.requested
            };
            self.wake();
            let mut st = s.status.lock();
            // SeqCst: pairs with `entering_pool`/`left_pool`.
            while (st.completed < req || s.in_pool.load(Ordering::SeqCst) != 0)
                && !self.driver_gone()
            {
                st = crate::sync::wait_until(&s.changed, st, None);
            }
            if self.driver_gone() {
                return None;
            }
            // SeqCst: pairs with the increment in `inserted`.
            let inserted = s.inserted.load(Ordering::SeqCst);
            if st.pushed == 0 && st.inserted_at_start == inserted {
                return st.next.map(|n| self.time.instant_of(n));
            }
        }
    }
}

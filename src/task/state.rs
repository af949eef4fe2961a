//! The task's atomic state machine.
//!
//! # Ground rules
//!
//! A task's life is one byte, changed only by compare-and-swap:
//!
//! ```text
//!                  run()     run returns (one-shot; dynamic: its closure returned None)
//!  SCHEDULED ──────────────► RUNNING ────────────────────────────► COMPLETED | PANICKED
//!   │    ▲                    │  │  run returns (periodic) while the pool shuts down
//!   │    │ re-arm (periodic)  │  └───────────────────────────────► SHUT_DOWN
//!   │    └────────────────────┤
//!   │                         │ cancel()
//!   │                         ▼
//!   │                   RUNNING_CANCELLED ──── run returns ──────► CANCELLED
//!   │ cancel(), or shutdown_now() handing it back
//!   ├────────────────────────────────────────────────────────────► CANCELLED
//!   │ shutdown() of a periodic task, or a schedule refused by a shutdown
//!   └────────────────────────────────────────────────────────────► SHUT_DOWN
//! ```
//!
//! - `SCHEDULED`: waiting (in its shard's wheel, or a run queue). Exactly one of a worker
//!   (`SCHEDULED -> RUNNING`), a canceller or `shutdown_now` (`-> CANCELLED`) or a graceful
//!   shutdown (`-> SHUT_DOWN`) wins the CAS out of it; the winner owns what happens next.
//! - `RUNNING`: one worker is running the closure. Only that worker leaves this state, except a
//!   canceller, which may mark it `RUNNING_CANCELLED`.
//! - Terminal states (`COMPLETED`, `CANCELLED`, `PANICKED`, `SHUT_DOWN`) never change again. The
//!   thread that enters a terminal state also stores the result under the task's body lock.
//!
//! Orderings: every transition is `AcqRel` (it hands the task's body from one thread to the next);
//! plain reads are `Acquire`, pairing with those transitions.

use crate::sync::{AtomicU8, Ordering};

/// Waiting to run.
pub(crate) const SCHEDULED: u8 = 0;
/// A worker is running the closure.
pub(crate) const RUNNING: u8 = 1;
/// Cancelled while running: the run finishes, its result is dropped, nothing runs after it.
pub(crate) const RUNNING_CANCELLED: u8 = 2;
/// Finished with a value (one-shot).
pub(crate) const COMPLETED: u8 = 3;
/// Cancelled by `cancel()`.
pub(crate) const CANCELLED: u8 = 4;
/// A run panicked and the task stopped.
pub(crate) const PANICKED: u8 = 5;
/// Stopped by the pool's shutdown before it could run (again).
pub(crate) const SHUT_DOWN: u8 = 6;

/// The atomic state of one task.
#[derive(Debug)]
pub(crate) struct State(AtomicU8);

impl State {
    pub(crate) fn new() -> Self {
        State(AtomicU8::new(SCHEDULED))
    }

    pub(crate) fn load(&self) -> u8 {
        // Acquire: pairs with the AcqRel transitions below.
        self.0.load(Ordering::Acquire)
    }

    /// Moves `from -> to`; true if this call made the change.
    pub(crate) fn transition(&self, from: u8, to: u8) -> bool {
        // AcqRel: the winner takes over the body the previous owner released.
        self.0
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Stores a terminal state; only the thread that owns the task (it won the last CAS) calls it.
    pub(crate) fn finish(&self, to: u8) {
        debug_assert!(is_terminal(to));
        // Release: pairs with the Acquire in `load`, publishing the result stored before it.
        self.0.store(to, Ordering::Release);
    }
}

/// True for states that never change again.
pub(crate) fn is_terminal(state: u8) -> bool {
    state >= COMPLETED
}

/// True for states that mean "will not run (again) because someone stopped it".
pub(crate) fn is_cancelled(state: u8) -> bool {
    matches!(state, CANCELLED | RUNNING_CANCELLED | SHUT_DOWN)
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_cas_leaves_scheduled() {
        let s = State::new();
        assert!(s.transition(SCHEDULED, RUNNING));
        assert!(!s.transition(SCHEDULED, CANCELLED));
        assert_eq!(s.load(), RUNNING);
        assert!(s.transition(RUNNING, RUNNING_CANCELLED));
        assert!(is_cancelled(s.load()));
        assert!(!is_terminal(s.load()));
        s.finish(CANCELLED);
        assert!(is_terminal(s.load()));
    }

    #[test]
    fn terminal_set_is_exact() {
        let terminal: Vec<u8> = (0..=SHUT_DOWN).filter(|&s| is_terminal(s)).collect();
        assert_eq!(terminal, vec![COMPLETED, CANCELLED, PANICKED, SHUT_DOWN]);
    }
}

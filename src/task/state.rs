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
//!   │    │ re-arm (periodic)  │  └───────────────────────────────► SHUTDOWN
//!   │    └────────────────────┤
//!   │                         │ cancel()
//!   │                         ▼
//!   │                   RUNNING_CANCELLED ──── run returns ──────► CANCELLED
//!   │ cancel(), or shutdown_now() handing it back
//!   ├────────────────────────────────────────────────────────────► CANCELLED
//!   │ shutdown() of a periodic task, or a schedule refused by a shutdown
//!   └────────────────────────────────────────────────────────────► SHUTDOWN
//! ```
//!
//! - `SCHEDULED`: waiting (in its shard's wheel, or a run queue). Exactly one of a worker
//!   (`SCHEDULED -> RUNNING`), a canceller or `shutdown_now` (`-> CANCELLED`) or a graceful
//!   shutdown (`-> SHUTDOWN`) wins the CAS out of it; the winner owns what happens next.
//! - `RUNNING`: one worker is running the closure. Only that worker leaves this state, except a
//!   canceller, which may mark it `RUNNING_CANCELLED`.
//! - Terminal states (`COMPLETED`, `CANCELLED`, `PANICKED`, `SHUTDOWN`) never change again. The
//!   thread that enters a terminal state also stores the result under the task's body lock.
//!
//! Orderings: every transition is `AcqRel` (it hands the task's body from one thread to the next);
//! plain reads are `Acquire`, pairing with those transitions.

use crate::sync::{AtomicU8, Ordering};

/// A state as the atomic stores it. It never leaves this file: other modules see `Snapshot`s and
/// call named transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Byte(u8);

const SCHEDULED: Byte = Byte(0);
const RUNNING: Byte = Byte(1);
const RUNNING_CANCELLED: Byte = Byte(2);
const COMPLETED: Byte = Byte(3);
const CANCELLED: Byte = Byte(4);
const PANICKED: Byte = Byte(5);
const SHUTDOWN: Byte = Byte(6);

/// How a task ended: its terminal state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Finished with a value (one-shot), or a dynamic task's closure ended it.
    Completed,
    /// Cancelled by `cancel()` or handed back by `shutdown_now`.
    Cancelled,
    /// A run panicked and the task stopped.
    Panicked,
    /// Stopped by the pool's shutdown before it could run (again).
    Shutdown,
}

impl End {
    fn byte(self) -> Byte {
        match self {
            End::Completed => COMPLETED,
            End::Cancelled => CANCELLED,
            End::Panicked => PANICKED,
            End::Shutdown => SHUTDOWN,
        }
    }
}

/// A typed reading of a task's state.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Snapshot {
    /// Waiting to run.
    Scheduled,
    /// A worker is running the closure.
    Running,
    /// Cancelled while running: the run finishes, its result is dropped, nothing runs after it.
    RunningCancelled,
    /// Terminal: never changes again.
    Ended(End),
}

/// The state by its name (`Debug` of futures and handles shows it): `Scheduled`, `Running`,
/// `Cancelling` (cancelled while running), `Completed`, `Cancelled`, `Panicked`, `Shutdown`.
impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Snapshot::Scheduled => "Scheduled",
            Snapshot::Running => "Running",
            Snapshot::RunningCancelled => "Cancelling",
            Snapshot::Ended(End::Completed) => "Completed",
            Snapshot::Ended(End::Cancelled) => "Cancelled",
            Snapshot::Ended(End::Panicked) => "Panicked",
            Snapshot::Ended(End::Shutdown) => "Shutdown",
        })
    }
}

impl Snapshot {
    fn of(byte: Byte) -> Snapshot {
        match byte {
            SCHEDULED => Snapshot::Scheduled,
            RUNNING => Snapshot::Running,
            RUNNING_CANCELLED => Snapshot::RunningCancelled,
            COMPLETED => Snapshot::Ended(End::Completed),
            CANCELLED => Snapshot::Ended(End::Cancelled),
            PANICKED => Snapshot::Ended(End::Panicked),
            _ => Snapshot::Ended(End::Shutdown),
        }
    }

    /// True for states that never change again.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Snapshot::Ended(_))
    }

    /// True for states that mean "will not run (again) because someone stopped it".
    pub(crate) fn is_cancelled(self) -> bool {
        matches!(
            self,
            Snapshot::RunningCancelled | Snapshot::Ended(End::Cancelled | End::Shutdown)
        )
    }
}

/// The atomic state of one task.
#[derive(Debug)]
pub(crate) struct State(AtomicU8);

impl State {
    pub(crate) fn new() -> Self {
        State(AtomicU8::new(SCHEDULED.0))
    }

    #[inline]
    pub(crate) fn load(&self) -> Snapshot {
        // Acquire: pairs with the AcqRel transitions below.
        Snapshot::of(Byte(self.0.load(Ordering::Acquire)))
    }

    /// True while the task waits to run.
    #[inline]
    pub(crate) fn is_scheduled(&self) -> bool {
        self.load() == Snapshot::Scheduled
    }

    /// Moves `from -> to`; true if this call made the change.
    #[inline]
    fn transition(&self, from: Byte, to: Byte) -> bool {
        // AcqRel: the winner takes over the body the previous owner released.
        self.0
            .compare_exchange(from.0, to.0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// A worker takes a waiting task to run it.
    #[inline]
    pub(crate) fn start(&self) -> bool {
        self.transition(SCHEDULED, RUNNING)
    }

    /// A periodic task's worker puts it back to wait for its next run (fails if a cancel
    /// marked the run `RunningCancelled`).
    #[inline]
    pub(crate) fn rearm(&self) -> bool {
        self.transition(RUNNING, SCHEDULED)
    }

    /// A waiting task is stopped before it runs (cancel, `shutdown_now`, or a shutdown): it
    /// ends as `to`.
    #[inline]
    pub(crate) fn end_waiting(&self, to: End) -> bool {
        self.transition(SCHEDULED, to.byte())
    }

    /// A cancel marks a running task: that run finishes, nothing runs after it.
    #[inline]
    pub(crate) fn cancel_running(&self) -> bool {
        self.transition(RUNNING, RUNNING_CANCELLED)
    }

    /// The worker ends the task after its last run, unless a cancel marked it meanwhile.
    #[inline]
    pub(crate) fn end_run(&self, to: End) -> bool {
        self.transition(RUNNING, to.byte())
    }

    /// Stores a terminal state after a cancelled run; only the worker that ran it calls this.
    #[inline]
    pub(crate) fn finish_cancelled_run(&self) {
        debug_assert_eq!(self.load(), Snapshot::RunningCancelled);
        // Release: pairs with the Acquire in `load`, publishing the result stored before it.
        self.0.store(CANCELLED.0, Ordering::Release);
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_cas_leaves_scheduled() {
        let s = State::new();
        assert!(s.start());
        assert!(!s.end_waiting(End::Cancelled));
        assert_eq!(s.load(), Snapshot::Running);
        assert!(s.cancel_running());
        assert!(s.load().is_cancelled());
        assert!(!s.load().is_terminal());
        assert!(!s.rearm(), "a cancelled run never re-arms");
        s.finish_cancelled_run();
        assert_eq!(s.load(), Snapshot::Ended(End::Cancelled));
    }

    #[test]
    fn bytes_and_snapshots_agree() {
        for end in [End::Completed, End::Cancelled, End::Panicked, End::Shutdown] {
            assert_eq!(Snapshot::of(end.byte()), Snapshot::Ended(end));
            assert!(Snapshot::of(end.byte()).is_terminal());
        }
        assert!(!Snapshot::of(SCHEDULED).is_terminal());
        assert!(!Snapshot::of(RUNNING).is_cancelled());
        assert!(Snapshot::of(SHUTDOWN).is_cancelled());
    }
}

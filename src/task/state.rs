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
//! The same byte is the lock of the task's body (its closure or result, and who waits on it:
//! `cell.rs`), in its top bit, [`LOCK`]:
//!
//! - While the bit is up, only its holder changes the byte: every other transition is a
//!   compare-and-swap that expects the bit down, and one that finds the bit up waits for it to
//!   fall (the holder keeps it for a few stores, and runs no user code: the end of a run
//!   also counts the task out, which once the pool shuts down may wake the timer thread
//!   through its parker's mutex; nothing holds that mutex and waits for a task) and tries
//!   again.
//! - So the holder knows the state while it holds the bit, and it unlocks with a plain Release
//!   store of the state it leaves: a new one (a periodic re-arm, the end of a run) or the one
//!   it found. Its unlock is a store, not a locked instruction.
//! - A transition that hands the body to its winner also takes the lock ([`State::start`],
//!   [`State::end_waiting`]): one compare-and-swap where a transition and then a lock took two.
//!   A cancel of a waiting task and the start of a run each cost one locked instruction fewer,
//!   and the end of a run takes the lock and decides under it ([`State::lock`], [`Held`]).
//!
//! Orderings: a compare-and-swap that changes the state or takes the lock is `AcqRel` (it hands
//! the task's body from one thread to the next); the unlock is `Release`; plain reads are
//! `Acquire`, pairing with both.

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

/// The body lock: the top bit of a task's state byte (see the ground rules).
const LOCK: u8 = 0x80;

/// The atomic state of one task, and its body lock.
#[derive(Debug)]
pub(crate) struct State {
    byte: AtomicU8,
    /// Under loom, a waiter for the lock blocks here instead of spinning: loom may schedule
    /// two yielding waiters against each other without end, where a real scheduler runs the
    /// holder. The byte protocol it models is the same.
    #[cfg(wheelpool_loom)]
    parked: (crate::sync::Mutex<()>, crate::sync::Condvar),
}

impl State {
    pub(crate) fn new() -> Self {
        State {
            byte: AtomicU8::new(SCHEDULED.0),
            #[cfg(wheelpool_loom)]
            parked: (crate::sync::Mutex::new(()), crate::sync::Condvar::new()),
        }
    }

    #[inline]
    pub(crate) fn load(&self) -> Snapshot {
        // Acquire: pairs with the AcqRel transitions and the Release unlocks.
        Snapshot::of(Byte(self.byte.load(Ordering::Acquire) & !LOCK))
    }

    /// True while the task waits to run.
    #[inline]
    pub(crate) fn is_scheduled(&self) -> bool {
        self.load() == Snapshot::Scheduled
    }

    /// Moves `from -> to` (taking the lock too if `lock`), waiting while another context holds
    /// the lock; false if the state is not `from`.
    #[inline]
    fn transition(&self, from: Byte, to: Byte, lock: bool) -> bool {
        let to = if lock { to.0 | LOCK } else { to.0 };
        loop {
            // AcqRel: the winner takes over the body the previous owner released.
            match self
                .byte
                .compare_exchange(from.0, to, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(seen) if seen == from.0 | LOCK => self.wait_unlocked(),
                Err(_) => return false,
            }
        }
    }

    /// Waits until the lock reads free (spin, yield, nap: `sync::backoff_until`).
    #[cold]
    fn wait_unlocked(&self) {
        // Relaxed: only a hint to try again; the caller's compare-and-swap is what acquires.
        #[cfg(not(wheelpool_loom))]
        crate::sync::backoff_until(|| self.byte.load(Ordering::Relaxed) & LOCK == 0);
        #[cfg(wheelpool_loom)]
        {
            // The holder stores, then passes through the mutex and notifies (`unparked`): a
            // waiter that checks under the mutex either sees the store or is waiting when the
            // notification comes.
            let (mutex, cv) = &self.parked;
            let mut guard = mutex.lock();
            while self.byte.load(Ordering::Relaxed) & LOCK != 0 {
                guard = crate::sync::wait_until(cv, guard, None);
            }
        }
    }

    /// Under loom, wakes the waiters of [`wait_unlocked`](Self::wait_unlocked) after an unlock.
    #[cfg(wheelpool_loom)]
    fn unparked(&self) {
        let (mutex, cv) = &self.parked;
        drop(mutex.lock());
        cv.notify_all();
    }

    /// Takes the body lock, whatever the state; the state stays as it is until the holder
    /// changes it.
    #[inline]
    pub(crate) fn lock(&self) -> Held<'_> {
        // Relaxed: a first guess for the compare-and-swap, which acquires.
        let mut seen = self.byte.load(Ordering::Relaxed);
        loop {
            if seen & LOCK != 0 {
                // Wait, then guess the holder left the state as it was; a wrong guess costs
                // one failed compare-and-swap, which reads the byte as it is now.
                self.wait_unlocked();
                seen &= !LOCK;
            }
            // AcqRel: pairs with the previous holder's Release unlock (and transitions).
            match self.byte.compare_exchange_weak(
                seen,
                seen | LOCK,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Held {
                        state: self,
                        now: Byte(seen),
                    }
                }
                Err(now) => seen = now,
            }
        }
    }

    /// A worker takes a waiting task to run it, and the body lock with it (to take the
    /// closure out).
    #[inline]
    pub(crate) fn start(&self) -> Option<Held<'_>> {
        self.win(RUNNING)
    }

    /// A waiting task is stopped before it runs (cancel, `shutdown_now`, or a shutdown): it
    /// ends as `to`, and the winner holds the body lock (to take the closure out and store the
    /// failure).
    #[inline]
    pub(crate) fn end_waiting(&self, to: End) -> Option<Held<'_>> {
        self.win(to.byte())
    }

    /// Moves `SCHEDULED -> to` and takes the body lock with it; the winner holds the lock.
    #[inline]
    fn win(&self, to: Byte) -> Option<Held<'_>> {
        // `then`, not `then_some`: a `Held` made and dropped on failure would unlock.
        self.transition(SCHEDULED, to, true).then(|| Held {
            state: self,
            now: to,
        })
    }

    /// A cancel marks a running task: that run finishes, nothing runs after it.
    #[inline]
    pub(crate) fn cancel_running(&self) -> bool {
        self.transition(RUNNING, RUNNING_CANCELLED, false)
    }
}

/// The body lock, held (see the ground rules). Dropping it unlocks, storing the state its
/// holder leaves; nobody else changes the state meanwhile.
#[must_use = "dropping it unlocks at once"]
pub(crate) struct Held<'a> {
    state: &'a State,
    /// The state as it is, and will be stored at the unlock.
    now: Byte,
}

impl Held<'_> {
    /// The state, which only this holder may change until it unlocks.
    #[inline]
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot::of(self.now)
    }

    /// True if this lock is `state`'s: a body reached with it is the one `state` guards.
    #[inline]
    pub(crate) fn guards(&self, state: &State) -> bool {
        std::ptr::eq(self.state, state)
    }

    /// A periodic task's worker puts it back to wait for its next run, as it unlocks.
    #[inline]
    pub(crate) fn rearm(&mut self) {
        debug_assert_eq!(self.now, RUNNING, "only a running task re-arms");
        self.now = SCHEDULED;
    }

    /// The worker ends its task after a run (`RUNNING` or `RUNNING_CANCELLED`), as it unlocks.
    #[inline]
    pub(crate) fn end_run(&mut self, to: End) {
        debug_assert!(
            self.now == RUNNING || (self.now == RUNNING_CANCELLED && to == End::Cancelled),
            "a run ends from RUNNING, or as cancelled from RUNNING_CANCELLED"
        );
        self.now = to.byte();
    }
}

impl Drop for Held<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the next holder's compare-and-swap and of `load`,
        // publishing what this holder did under the lock, with the state it leaves.
        self.state.byte.store(self.now.0, Ordering::Release);
        #[cfg(wheelpool_loom)]
        self.state.unparked();
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_cas_leaves_scheduled() {
        let s = State::new();
        let held = s.start().expect("a new task is scheduled");
        assert_eq!(
            s.load(),
            Snapshot::Running,
            "the lock bit is not part of the state"
        );
        drop(held);
        assert!(s.end_waiting(End::Cancelled).is_none());
        assert_eq!(s.load(), Snapshot::Running);
        assert!(s.cancel_running());
        assert!(s.load().is_cancelled());
        assert!(!s.load().is_terminal());
        let mut held = s.lock();
        assert_eq!(
            held.snapshot(),
            Snapshot::RunningCancelled,
            "a cancelled run never re-arms"
        );
        held.end_run(End::Cancelled);
        drop(held);
        assert_eq!(s.load(), Snapshot::Ended(End::Cancelled));
    }

    #[test]
    fn a_holder_re_arms_as_it_unlocks() {
        let s = State::new();
        let mut held = s.start().expect("a new task is scheduled");
        assert!(held.guards(&s));
        held.rearm();
        assert_eq!(
            s.load(),
            Snapshot::Running,
            "nothing changes before the unlock"
        );
        drop(held);
        assert!(s.is_scheduled());
        let held = s.end_waiting(End::Shutdown).expect("scheduled again");
        drop(held);
        assert_eq!(s.load(), Snapshot::Ended(End::Shutdown));
    }

    /// A panic under the lock (a broken invariant) unwinds through `Held`, which unlocks and
    /// leaves the state as the holder had it.
    #[test]
    fn a_panic_under_the_lock_leaves_it_free() {
        let s = State::new();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut held = s.start().expect("a new task is scheduled");
            held.rearm();
            panic!("inside");
        }));
        assert!(caught.is_err());
        assert!(s.is_scheduled());
        let held = s.lock();
        assert_eq!(held.snapshot(), Snapshot::Scheduled);
    }

    #[test]
    fn a_transition_waits_for_the_holder() {
        let s = std::sync::Arc::new(State::new());
        let held = s.start().expect("a new task is scheduled");
        let canceller = {
            let s = std::sync::Arc::clone(&s);
            std::thread::spawn(move || s.cancel_running())
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!canceller.is_finished(), "no change while the lock is held");
        assert_eq!(s.load(), Snapshot::Running);
        drop(held);
        assert!(canceller.join().unwrap());
        assert_eq!(s.load(), Snapshot::RunningCancelled);
    }

    /// Threads (more than the machine's cores) take the lock in turn, one of them changing
    /// the state under it and others trying transitions that must wait for it: under the lock
    /// two Relaxed counters never differ, and every increment is there at the end.
    #[test]
    fn holders_take_turns_and_transitions_wait() {
        use std::sync::atomic::AtomicU64;
        use std::sync::Arc;
        struct Shared {
            state: State,
            a: AtomicU64,
            b: AtomicU64,
        }
        let threads = if cfg!(miri) { 3 } else { 6 };
        let per: u64 = if cfg!(miri) { 20 } else { 20_000 };
        let s = Arc::new(Shared {
            state: State::new(),
            a: AtomicU64::new(0),
            b: AtomicU64::new(0),
        });
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    for i in 0..per {
                        let mut held = match (t, i % 2) {
                            // A worker's round: start (taking the lock), re-arm as it unlocks.
                            (0, _) => match s.state.start() {
                                Some(held) => held,
                                None => s.state.lock(),
                            },
                            // A canceller's mark: waits for any holder, then may find RUNNING.
                            (1, 0) => {
                                s.state.cancel_running();
                                s.state.lock()
                            }
                            _ => s.state.lock(),
                        };
                        // Two Relaxed read-then-writes: only the lock keeps them from mixing.
                        let a = s.a.load(Ordering::Relaxed);
                        assert_eq!(a, s.b.load(Ordering::Relaxed), "two holders at once");
                        s.a.store(a + 1, Ordering::Relaxed);
                        s.b.store(a + 1, Ordering::Relaxed);
                        match held.snapshot() {
                            Snapshot::Running => held.rearm(),
                            Snapshot::RunningCancelled => {
                                // Back to the start for the next round, as a test only may.
                                held.now = SCHEDULED;
                            }
                            _ => {}
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(s.a.load(Ordering::Relaxed), threads * per);
        assert!(s.state.is_scheduled());
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

//! The task cell: one allocation holding the closure, its atomic state, the planned deadline and
//! the result slot that the [`ScheduledFuture`](crate::ScheduledFuture) reads. A second, small
//! one holds the waker once someone waits on the task (`join`, or a poll that returns `Pending`).
//!
//! The pool sees a task as a type-erased [`TaskRef`]; the future sees the same allocation through
//! [`TaskResult<T>`]. Who may touch the body (closure or result) is decided by the state machine in
//! [`state`]: the thread that wins the CAS out of `SCHEDULED` owns the closure until it hands it
//! back (periodic re-arm) or stores a final result.

#[cfg(feature = "cron")]
pub(crate) mod calendar;
mod cell;
pub(crate) mod dynamic;
mod info;
mod job;
mod options;
mod pending;
pub(crate) mod periodic;
mod ptr;
pub(crate) mod state;

pub use dynamic::NextRun;
pub use info::{TaskInfo, TaskKind};
pub use pending::PendingTask;
pub use periodic::MissedTicks;

pub(crate) use info::Name;
use info::PackedId;
pub(crate) use options::Options;

pub(crate) use cell::TaskCell;
pub(crate) use job::{Job, OneShot};
pub(crate) use ptr::{pair, single, TaskPtr};

use crate::error::TaskError;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use std::any::Any;
use std::task::{Context, Poll};
use std::time::Instant;

/// A task as the pool moves it around: shared, type-erased.
pub(crate) type TaskRef = TaskPtr<dyn RawTask>;

/// What a worker needs from its pool while it runs a task.
pub(crate) trait RunEnv {
    /// Nanoseconds since the pool's origin, on the pool's clock.
    fn now_nanos(&self) -> u64;
    /// True once the pool is shutting down: periodic tasks stop instead of re-arming.
    fn stopping(&self) -> bool;
    /// Hands a panic payload of `task`'s run to the pool's panic handler; returns its message.
    fn report_panic(&self, task: TaskInfo, payload: Box<dyn Any + Send>) -> String;
    /// The run that just returned was the task's last: it ends in terminal state `end`;
    /// `ran_ok` says that run returned normally. Called before the future completes, so the
    /// pool's counters already agree when `join` returns.
    fn run_ending(&self, end: state::End, ran_ok: bool);
    /// A run of `task` starts (its CAS won; its closure is called next): the pool reads its
    /// clock, records how late the run is and returns both (`None`: the task has no planned
    /// time, or this environment does not measure it).
    fn run_starts(&self, _task: &Header) -> Option<Start> {
        None
    }
    /// The time a job that plans its next run from the start of the one that just ended
    /// ([`Job::plans_from_end`] false) plans with: `start`'s reading where this clock cannot
    /// have moved in a way a plan depends on, otherwise a fresh one. One clock read per run
    /// instead of two (W5).
    fn plan_time(&self, _start: Option<Start>) -> u64 {
        self.now_nanos()
    }
    /// The task's fate is decided: its `SCHEDULED -> RUNNING` CAS won (called just before the
    /// closure is called, after the run's own bookkeeping), or it will not start. A worker
    /// lowers its `taking` flag here, which `shutdown_now` waits for. May be called more than
    /// once.
    fn claim_decided(&self) {}
}

/// A run's start as the pool read it: when (nanoseconds since the origin) and how late against
/// its planned time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Start {
    pub(crate) at: u64,
    pub(crate) late: u64,
}

/// What became of a task after a worker ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunOutcome {
    /// Someone else won the task before it started (cancel or shutdown): nothing ran.
    NotStarted,
    /// The task ran and ended in this terminal state.
    Finished(state::End),
    /// A periodic task ran and is `SCHEDULED` again for `header().deadline()`: schedule it
    /// again. `ran_ok`: that run counts as completed (false if it panicked and the task
    /// survives panics, or if a calendar job only looked at the clock).
    /// `now`: the clock reading the next deadline was planned from (one read serves both).
    Rearm { ran_ok: bool, now: u64 },
}

/// What a successful `cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancelled {
    /// Already finished or cancelled: nothing changed.
    No,
    /// It was waiting: its closure is dropped and its future completed.
    Waiting,
    /// It was running: that run finishes, then the task ends as cancelled.
    Running,
}

/// Why the pool stops a task that is still waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// `shutdown_now`: the task ends `Cancelled` and its closure goes back to the caller.
    ShutdownNow,
    /// A periodic task at shutdown, or a task the pool could not accept after all: it ends
    /// `Shutdown` and its closure is dropped.
    Shutdown,
    /// A one-shot that a graceful shutdown hands back (the pool's policy): it ends `Shutdown`
    /// and its closure goes back to the user.
    HandBackAtShutdown,
}

/// What the pool's stop did to a task.
#[derive(Debug)]
pub(crate) enum Stopped {
    /// It was not waiting (running, finished, or someone else won it): nothing changed.
    NotWaiting,
    /// [`Stop::ShutdownNow`] or [`Stop::HandBackAtShutdown`] won it: it ended `Cancelled` or
    /// `Shutdown`; here is its closure for the caller.
    HandedBack(PendingTask),
    /// [`Stop::Shutdown`] won it: it ended `Shutdown`; its closure was dropped.
    Ended,
}

/// The fields every task has, whatever its closure and output types. 24 bytes: the state (with
/// the body's lock in its top bit), the shard and the id share one word (the id in five of its
/// bytes), then the deadline, then the wheel key and the count of pointers to the task (the kind
/// fits the first word). The name lives beside the header only in named tasks (`TaskCell`'s
/// name slot). So a capture-less one-shot's whole cell is 40 bytes, the allocator's 48-byte
/// chunk, and one that captures a word takes the 64-byte chunk.
pub(crate) struct Header {
    /// The task's state, and in its top bit the lock of its body (`TaskCell`; see `state.rs`).
    pub(crate) state: state::State,
    /// How its runs are planned (never changes).
    kind: TaskKind,
    /// The timer shard whose wheel takes this task (never changes; a pool has at most 64),
    /// and [`UNPLANNED`] if the task has no planned time (`execute`).
    shard: u8,
    /// Unique among the last 2^40 tasks of the process (never changes): see `PackedId`.
    id: PackedId,
    /// Planned start of the next run, in nanoseconds since the pool's origin; `u64::MAX`: never.
    deadline: AtomicU64,
    /// The wheel entry's key while the task sits in its shard's wheel. Written only under that
    /// shard's lock, and read there, so `Relaxed` is enough; besides, a pointer's drop that
    /// finds the count at two reads it without the lock, for [`ORPHANED`] (`ptr.rs`).
    wheel_key: AtomicU32,
    /// How many [`TaskPtr`]s point to the task (`ptr.rs`): in the header's last four bytes,
    /// which were padding.
    refs: AtomicU32,
}

/// `wheel_key` when the task is not in the wheel.
pub(crate) const NO_KEY: u32 = u32::MAX;

/// `wheel_key` of a task that a cancel took out of its wheel, keeping the wheel's share of the
/// count instead of subtracting it ([`TaskPtr::orphan`](ptr::TaskPtr::orphan)). Never a real
/// key: a wheel's keys stay below `u32::MAX - 1` (a slab index is below its list heads).
pub(crate) const ORPHANED: u32 = u32::MAX - 1;

/// A bit of `Header::shard`: the task has no planned time (`execute`: its deadline 0 only
/// means "now", with no clock read), so its run's lateness is not measured.
const UNPLANNED: u8 = 0x80;

impl Header {
    #[inline]
    pub(crate) fn new(deadline: u64, kind: TaskKind, shard: u16) -> Self {
        let shard = match u8::try_from(shard) {
            Ok(shard) if shard & UNPLANNED == 0 => shard,
            _ => crate::panic::broken_invariant("a timer shard index above 127"),
        };
        Header {
            state: state::State::new(),
            kind,
            shard,
            id: PackedId::next(),
            deadline: AtomicU64::new(deadline),
            wheel_key: AtomicU32::new(NO_KEY),
            refs: AtomicU32::new(0),
        }
    }

    /// The task's id (see [`TaskInfo::id`]).
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.id.get()
    }

    /// How its runs are planned.
    #[inline]
    pub(crate) fn kind(&self) -> TaskKind {
        self.kind
    }

    /// Planned start of the next run (nanoseconds since the pool's origin).
    #[inline]
    pub(crate) fn deadline(&self) -> u64 {
        // Relaxed: the value travels with the task through queues that synchronise it.
        self.deadline.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn set_deadline(&self, nanos: u64) {
        self.deadline.store(nanos, Ordering::Relaxed);
    }

    /// True for periodic tasks: fixed rate, fixed delay, dynamic delay or rate.
    #[inline]
    pub(crate) fn is_periodic(&self) -> bool {
        self.kind.is_periodic()
    }

    /// The timer shard whose wheel takes this task.
    #[inline]
    pub(crate) fn shard(&self) -> u16 {
        u16::from(self.shard & !UNPLANNED)
    }

    /// The task has no planned time (`execute`): see [`UNPLANNED`].
    pub(crate) fn set_unplanned(&mut self) {
        self.shard |= UNPLANNED;
    }

    /// A run starting now (`now()`, nanoseconds since the origin, read only for a task with a
    /// planned time: W4's `execute` tasks pay no clock read): when, and how late against its
    /// planned start; `None` for a task with no planned time.
    #[inline]
    pub(crate) fn start(&self, now: impl FnOnce() -> u64) -> Option<Start> {
        (self.shard & UNPLANNED == 0).then(|| {
            let at = now();
            Start {
                at,
                late: at.saturating_sub(self.deadline()),
            }
        })
    }

    #[inline]
    pub(crate) fn wheel_key(&self) -> u32 {
        self.wheel_key.load(Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn set_wheel_key(&self, key: u32) {
        self.wheel_key.store(key, Ordering::Relaxed);
    }

    /// Marks the wheel's share of the count as given up (`ptr.rs`). `Release`: a drop that
    /// sees the mark (`Acquire`) also sees every count change made before it.
    #[inline]
    pub(crate) fn mark_orphaned(&self) {
        self.wheel_key.store(ORPHANED, Ordering::Release);
    }

    /// True once a canceller gave up the wheel's share of the count (`ptr.rs`).
    #[inline]
    pub(crate) fn is_orphaned(&self) -> bool {
        self.wheel_key.load(Ordering::Acquire) == ORPHANED
    }
}

/// Where a task keeps its name: nothing at all in an unnamed task (`()`), a [`Name`] in a
/// named one. A type parameter of `TaskCell`, so that a task without a name pays no byte for
/// one (W1 counts bytes per pending timer).
pub(crate) trait NameSlot: Send + Sync + 'static {
    fn name(&self) -> Option<&Name>;
}

impl NameSlot for () {
    fn name(&self) -> Option<&Name> {
        None
    }
}

impl NameSlot for Name {
    fn name(&self) -> Option<&Name> {
        Some(self)
    }
}

/// A task as the pool sees it.
pub(crate) trait RawTask: Send + Sync {
    fn header(&self) -> &Header;
    /// The name given at schedule time, if any.
    fn name(&self) -> Option<&Name>;
    /// Who the task is: id, name, kind (the name's `Arc` cloned).
    fn info(&self) -> TaskInfo {
        let header = self.header();
        TaskInfo::new(header.id(), self.name().cloned(), header.kind())
    }
    /// Runs the task once on the calling worker (see [`RunOutcome`]).
    fn run(&self, env: &dyn RunEnv) -> RunOutcome;
    /// The user's cancel.
    fn cancel(&self) -> Cancelled;
    /// The pool stops a waiting task. A task that is running or finished is left alone.
    fn stop(&self, why: Stop) -> Stopped;
    /// A reset moved the waiting task's next run to `deadline`: re-bases its plan (a fixed-rate
    /// grid, a dynamic rate) under the task's body lock. Does nothing unless the closure is in
    /// the task (waiting). The caller holds the timer lock that keeps the task from being
    /// pushed to the workers meanwhile, and sets the header's deadline itself.
    fn rebase(&self, deadline: u64);
}

/// A task as its future sees it.
pub(crate) trait TaskResult<T>: RawTask {
    /// Takes the result if the task is finished, else registers `cx`'s waker.
    fn poll_result(&self, cx: &mut Context<'_>) -> Poll<Result<T, TaskError>>;
    /// Blocks until the task is finished (then takes the result) or `deadline` passes (`None`).
    fn wait(&self, deadline: Option<Instant>) -> Option<Result<T, TaskError>>;
}

/// Who the task is and its state by name; no raw nanoseconds (the deadline is on the pool's
/// clock, which the header does not know).
impl std::fmt::Debug for dyn RawTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header = self.header();
        f.debug_struct("Task")
            .field("id", &header.id())
            .field("name", &self.name().map(|n| n.as_str()))
            .field("kind", &header.kind)
            .field("state", &header.state.load())
            .finish()
    }
}

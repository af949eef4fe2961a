//! The public face: `ScheduledThreadPool`, its `Handle`, its `Builder` and `PoolStats`; below
//! it, one idea per file, each importing only files below it:
//!
//! ```text
//! mod.rs       ScheduledThreadPool, PoolStats: the public face
//! builder.rs   Builder: checks the settings, makes a Config
//! handle.rs    Handle: the scheduling methods, without options
//! task_builder.rs  TaskBuilder: per-task options, then the scheduling methods (written once)
//! link.rs      CoreLink: how a handle and its task builders reach the core
//! future.rs    ScheduledFuture, AbortOnDrop
//! cancel.rs    CancelHandle, and the cancel and reset it shares with the future
//! schedule.rs  the generic front of scheduling: builds a task, hands it to the core
//! threads.rs   starts the timer thread and the workers (hooks, start latch, exit bookkeeping)
//! worker.rs    a worker's loop: take, run, search, sleep, watch the timer
//! run.rs       a task's run on a worker, and the RunEnv it sees
//! core.rs      Core: a task's bookkeeping through the pool (schedule, cancel, stop, shut down)
//! config.rs    Config: what a core is made from
//! queues.rs    the ready queues (injector, per-worker deques) and the `taking` flags
//! sleep.rs     how idle workers sleep and wake
//! shutdown.rs  what the timer thread hands back, and termination
//! counters.rs  the per-thread counters behind PoolStats
//! lateness.rs  the per-worker lateness histograms behind PoolStats
//! lifecycle.rs the pool's typed atomic lifecycle
//! ```
//!
//! A task moves one way: scheduled (`schedule.rs`: `Core::admit`, `Core::schedule_admitted`),
//! inserted into a timer shard's wheel (`Timer::insert`) unless due now, pushed to a ready queue
//! when due (by the scheduler, the timer thread or the watcher), then run by a worker
//! (`run::run_task`).

mod builder;
mod cancel;
mod config;
mod core;
mod counters;
mod future;
mod handle;
mod lateness;
mod lifecycle;
mod link;
mod place;
mod queues;
mod run;
mod schedule;
mod shutdown;
mod sleep;
mod task_builder;
mod threads;
mod worker;

use self::core::Core;
pub(crate) use self::core::CoreRef;
/// The cluster module reports panics through the crate's one panic module.
#[cfg(feature = "postgres")]
pub(crate) use crate::panic::panic_message;
pub use builder::Builder;
pub use cancel::CancelHandle;
pub use counters::PoolStats;
pub use future::{AbortOnDrop, ScheduledFuture};
pub use handle::Handle;
pub use task_builder::TaskBuilder;

use crate::sync::Arc;
use crate::task::PendingTask;

/// What the loom models reach inside the pool (they live in `src/loom/`, beside the crate, and
/// drive the pool's own functions step by step).
#[cfg(all(test, wheelpool_loom))]
pub(crate) mod model {
    pub(crate) use super::config::Config;
    pub(crate) use super::core::{Arrival, Core, Parts};
    pub(crate) use super::counters::Counters;
    pub(crate) use super::run::run_task;
    pub(crate) use super::schedule::{one_shot, schedule_job, When};
    pub(crate) use super::worker::{push_polled, run as run_worker};
}
use std::fmt;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A scheduled thread pool: one timer thread keeps delays in hierarchical timing wheels (one per
/// shard, so producers on different threads rarely meet on a lock), and a work-stealing set of
/// workers runs what is due.
///
/// Build one with [`ScheduledThreadPool::new`] (one worker per CPU, 1 us tick) or
/// [`ScheduledThreadPool::builder`]. Schedule with [`execute`](Handle::execute),
/// [`schedule`](Handle::schedule), [`schedule_at`](Handle::schedule_at),
/// [`schedule_at_fixed_rate`](Handle::schedule_at_fixed_rate),
/// [`schedule_with_fixed_delay`](Handle::schedule_with_fixed_delay),
/// [`schedule_with_dynamic_delay`](Handle::schedule_with_dynamic_delay) and
/// [`schedule_at_dynamic_rate`](Handle::schedule_at_dynamic_rate): the pool dereferences to its
/// own [`Handle`], where these are (per-task options through [`Handle::task`]).
///
/// Dropping the pool does [`shutdown_now`](Self::shutdown_now) (tasks that had not started are
/// cancelled and dropped) and then joins every pool thread. For a graceful end, call
/// [`shutdown`](Self::shutdown) and [`await_termination`](Self::await_termination) first.
///
/// # Examples
///
/// ```
/// use wheelpool::ScheduledThreadPool;
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
/// let answer = pool.schedule(|| 42, Duration::from_millis(10)).unwrap();
/// assert_eq!(answer.join(), Ok(42));
/// pool.shutdown();
/// assert!(pool.await_termination(Duration::from_secs(10)));
/// ```
pub struct ScheduledThreadPool {
    /// The pool's own handle: it owns the core, and the scheduling methods are its.
    handle: Handle,
    /// Only `Drop` touches them (with `&mut self`), so no lock.
    threads: Vec<JoinHandle<()>>,
    /// The per-shard references futures keep to the core (`CoreRef`); the core holds only
    /// weak ones, so once the pool and every future are gone the core goes too.
    _refs: Box<[Arc<CoreRef>]>,
}

impl ScheduledThreadPool {
    /// A pool with one worker per CPU and a 1 us tick.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread; use [`builder`](Self::builder) to get
    /// that as an error instead.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = wheelpool::ScheduledThreadPool::new();
    /// assert!(!pool.is_shutdown());
    /// ```
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        match Builder::new().build() {
            Ok(pool) => pool,
            Err(e) => panic!("wheelpool: {e}"),
        }
    }

    /// A builder for the thread count, names, tick, bounds, panic handler and clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let pool = wheelpool::ScheduledThreadPool::builder()
    ///     .threads(2)
    ///     .tick(Duration::from_micros(100))
    ///     .build()
    ///     .unwrap();
    /// pool.shutdown();
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }

    pub(crate) fn from_parts(
        core: Arc<Core>,
        refs: Box<[Arc<CoreRef>]>,
        threads: Vec<JoinHandle<()>>,
    ) -> Self {
        ScheduledThreadPool {
            handle: Handle::owner(core),
            threads,
            _refs: refs,
        }
    }

    fn core(&self) -> &Arc<Core> {
        self.handle.owned_core()
    }

    /// A [`Handle`] to schedule on this pool without keeping it alive.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let h = pool.handle();
    /// h.execute(|| ()).unwrap();
    /// ```
    pub fn handle(&self) -> Handle {
        self.handle.clone() // does not keep the pool alive
    }

    /// Starts a graceful shutdown and returns at once: new schedules fail with
    /// [`ScheduleError::Shutdown`](crate::ScheduleError::Shutdown); tasks already due still run;
    /// the pool terminates when nothing is left. Calling it again does nothing. What happens to
    /// waiting tasks is the builder's policy, as in Java:
    ///
    /// - One-shots still waiting for their time run then (the default), or, with
    ///   [`execute_delayed_after_shutdown(false)`](Builder::execute_delayed_after_shutdown),
    ///   are handed back at once: their futures end
    ///   [`TaskError::Shutdown`](crate::TaskError::Shutdown) and their closures wait for
    ///   [`take_handed_back`](Self::take_handed_back).
    /// - Periodic tasks stop after their current run, or before their next one (the default;
    ///   their futures end [`TaskError::Shutdown`](crate::TaskError::Shutdown)), or, with
    ///   [`continue_periodic_after_shutdown(true)`](Builder::continue_periodic_after_shutdown),
    ///   go on until cancelled or [`shutdown_now`](Self::shutdown_now);
    ///   [`await_termination`](Self::await_termination) waits for them.
    ///
    /// Every task admitted before the shutdown ends exactly one way: it runs, is cancelled, ends
    /// `Shutdown` (handed back or stopped), or is returned by `shutdown_now`. A schedule that
    /// races the shutdown either is admitted (and ends one of those ways) or fails with
    /// `ScheduleError::Shutdown`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| "still runs", Duration::from_millis(5)).unwrap();
    /// pool.shutdown();
    /// assert_eq!(f.join(), Ok("still runs"));
    /// assert!(pool.await_termination(Duration::from_secs(10)));
    /// ```
    pub fn shutdown(&self) {
        self.core().shutdown();
    }

    /// Stops at once: nothing new starts; runs in progress finish; every task that had not
    /// started is cancelled (its future ends [`TaskError::Cancelled`](crate::TaskError::Cancelled))
    /// and handed back, so the caller decides whether to run or drop it. The one-shots an
    /// earlier graceful [`shutdown`](Self::shutdown) handed back and nobody took with
    /// [`take_handed_back`](Self::take_handed_back) come back here too (their futures said
    /// `Shutdown`). Returns after the timer
    /// thread has handed back its tasks and every worker that had just taken a task has either
    /// started it or let it be handed back: once this returns, no task starts. It does not wait
    /// for running tasks (use [`await_termination`](Self::await_termination)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| (), Duration::from_secs(3600)).unwrap();
    /// let pending = pool.shutdown_now();
    /// assert_eq!(pending.len(), 1);
    /// assert!(f.is_cancelled());
    /// ```
    pub fn shutdown_now(&self) -> Vec<PendingTask> {
        self.core().shutdown_now()
    }

    /// Blocks until the pool has terminated (after a shutdown, every pool thread has exited) or
    /// `timeout` passes; true if it terminated. After a graceful [`shutdown`](Self::shutdown)
    /// that means every waiting task has run or ended, periodic tasks that go on after it
    /// ([`Builder::continue_periodic_after_shutdown`]) included.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// assert!(!pool.await_termination(Duration::from_millis(1)), "not shut down yet");
    /// pool.shutdown();
    /// assert!(pool.await_termination(Duration::from_secs(10)));
    /// assert!(pool.is_terminated());
    /// ```
    pub fn await_termination(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        self.core().termination.await_termination(deadline)
    }

    /// Takes the one-shots that a graceful [`shutdown`](Self::shutdown) has handed back so far
    /// (a pool built with
    /// [`execute_delayed_after_shutdown(false)`](Builder::execute_delayed_after_shutdown)), so
    /// the caller can log, run or drop them. Their futures already ended
    /// [`TaskError::Shutdown`](crate::TaskError::Shutdown). Does not block: the timer thread
    /// hands them back in chunks, so call it after
    /// [`await_termination`](Self::await_termination) returned true to get every one; each is
    /// returned once (a later call, or `shutdown_now`, returns only the rest). Empty for the
    /// default policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder()
    ///     .threads(1)
    ///     .execute_delayed_after_shutdown(false)
    ///     .build()
    ///     .unwrap();
    /// for i in 0..3 {
    ///     pool.schedule(move || i, Duration::from_secs(60)).unwrap().detach();
    /// }
    /// pool.shutdown();
    /// assert!(pool.await_termination(Duration::from_secs(10)));
    /// let handed_back = pool.take_handed_back();
    /// assert_eq!(handed_back.len(), 3);
    /// assert!(pool.take_handed_back().is_empty(), "each is handed back once");
    /// assert_eq!(pool.stats().cancelled, 3);
    /// ```
    pub fn take_handed_back(&self) -> Vec<PendingTask> {
        self.core().take_handed_back()
    }

    /// True once [`shutdown`](Self::shutdown) or [`shutdown_now`](Self::shutdown_now) was called.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// pool.shutdown();
    /// assert!(pool.is_shutdown());
    /// ```
    pub fn is_shutdown(&self) -> bool {
        self.core().is_shutdown()
    }

    /// True once the pool has shut down and every pool thread has exited.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// assert!(!pool.is_terminated());
    /// pool.shutdown_now();
    /// assert!(pool.await_termination(Duration::from_secs(10)) && pool.is_terminated());
    /// ```
    pub fn is_terminated(&self) -> bool {
        self.core().termination.is_terminated()
    }

    /// The pool's counters, how late runs started (p50, p99, max) and how many tasks wait in
    /// the wheels and in the ready queues: see [`PoolStats`]. Costs a walk over every worker's
    /// lateness buckets (4 KB each) and a short lock of each timer shard.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// pool.schedule(|| (), std::time::Duration::ZERO).unwrap().join().unwrap();
    /// assert_eq!(pool.stats().completed, 1);
    /// ```
    pub fn stats(&self) -> PoolStats {
        self.core().stats()
    }
}

impl Drop for ScheduledThreadPool {
    /// `shutdown_now`, then join every pool thread (except the current one, if a task drops
    /// the pool from inside it). The handed-back tasks are dropped one by one with any panic
    /// in their captures' `Drop` caught (as `cancel` does), so the threads are still joined
    /// and a pool dropped while its thread unwinds from another panic does not abort.
    fn drop(&mut self) {
        for pending in self.core().shutdown_now() {
            crate::panic::drop_user(pending);
        }
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

/// The scheduling methods ([`schedule`](Handle::schedule), [`execute`](Handle::execute),
/// [`schedule_at_fixed_rate`](Handle::schedule_at_fixed_rate), ...) are [`Handle`]'s, written
/// once there; the pool dereferences to its own handle.
impl std::ops::Deref for ScheduledThreadPool {
    type Target = Handle;

    fn deref(&self) -> &Handle {
        &self.handle
    }
}

impl fmt::Debug for ScheduledThreadPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScheduledThreadPool")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

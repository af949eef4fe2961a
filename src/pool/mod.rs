//! The public face: `ScheduledThreadPool`, its `Handle`, its `Builder` and `PoolStats`.

mod builder;
mod core;
mod sleep;
pub(crate) mod submit;
pub(crate) mod worker;

pub(crate) use self::core::{Core, Lifecycle};
pub use builder::Builder;

use crate::error::ScheduleError;
use crate::future::ScheduledFuture;
use crate::sync::{Arc, Mutex, Weak};
use crate::task::{PendingTask, PeriodicOptions};
use std::fmt;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[allow(unused_imports)] // used in the docs of the generated scheduling methods
use crate::task::MissedTicks;

/// A scheduled thread pool: one timer thread keeps delays in a hierarchical timing wheel, and a
/// work-stealing set of workers runs what is due.
///
/// Build one with [`ScheduledThreadPool::new`] (one worker per CPU, 1 ms tick) or
/// [`ScheduledThreadPool::builder`]. Schedule with [`execute`](Self::execute),
/// [`schedule`](Self::schedule), [`schedule_at`](Self::schedule_at),
/// [`schedule_at_fixed_rate`](Self::schedule_at_fixed_rate) and
/// [`schedule_with_fixed_delay`](Self::schedule_with_fixed_delay).
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
    core: Arc<Core>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// A cheap, cloneable way to schedule on a pool without keeping it alive: what a task captures
/// to schedule its follow-ups. Once the pool is gone, every method returns
/// [`ScheduleError::Shutdown`].
///
/// # Examples
///
/// ```
/// use wheelpool::{ScheduledThreadPool, ScheduleError};
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let handle = pool.handle();
/// assert_eq!(handle.schedule(|| 1, Duration::ZERO).unwrap().join(), Ok(1));
/// drop(pool);
/// assert_eq!(handle.execute(|| ()).unwrap_err(), ScheduleError::Shutdown);
/// ```
#[derive(Clone)]
pub struct Handle {
    core: Weak<Core>,
}

/// A snapshot of a pool's counters (each read on its own, so they may be a moment apart).
///
/// # Examples
///
/// ```
/// use wheelpool::ScheduledThreadPool;
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
/// assert_eq!(pool.stats().pending, 1);
/// f.cancel();
/// assert_eq!(pool.stats().cancelled, 1);
/// assert_eq!(pool.stats().pending, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PoolStats {
    /// Tasks waiting to run: in the wheel, in transit, or queued for a worker.
    pub pending: usize,
    /// Runs in progress.
    pub running: usize,
    /// Runs that returned normally: every run of a periodic task counts, and so does a run
    /// during which its task was cancelled.
    pub completed: u64,
    /// Tasks whose future ended `Cancelled` or `Shutdown` (not `Panicked`): cancelled while
    /// waiting or while running, returned by `shutdown_now`, or periodic tasks stopped by
    /// `shutdown`.
    pub cancelled: u64,
    /// Runs that panicked (each one also went to the panic handler).
    pub panicked: u64,
}

impl ScheduledThreadPool {
    /// A pool with one worker per CPU and a 1 ms tick.
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

    pub(crate) fn from_parts(core: Arc<Core>, threads: Vec<JoinHandle<()>>) -> Self {
        ScheduledThreadPool {
            core,
            threads: Mutex::new(threads),
        }
    }

    fn with_core<R>(
        &self,
        f: impl FnOnce(&Arc<Core>) -> Result<R, ScheduleError>,
    ) -> Result<R, ScheduleError> {
        f(&self.core)
    }

    submit::scheduling_methods!();

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
        Handle {
            core: Arc::downgrade(&self.core),
        }
    }

    /// Starts a graceful shutdown and returns at once: new schedules fail with
    /// [`ScheduleError::Shutdown`]; tasks already due or delayed still run at their time;
    /// periodic tasks stop after their current run (their futures end
    /// [`TaskError::Shutdown`](crate::TaskError::Shutdown)). The pool terminates when nothing
    /// is left. Calling it again does nothing.
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
        self.core.shutdown();
    }

    /// Stops at once: nothing new starts; runs in progress finish; every task that had not
    /// started is cancelled (its future ends [`TaskError::Cancelled`](crate::TaskError::Cancelled))
    /// and handed back, so the caller decides whether to run or drop it. Returns after the timer
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
        self.core.shutdown_now()
    }

    /// Blocks until the pool has terminated (after a shutdown, every pool thread has exited) or
    /// `timeout` passes; true if it terminated.
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
        self.core
            .await_termination(Instant::now().checked_add(timeout))
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
        self.core.is_shutdown()
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
        self.core.is_terminated()
    }

    /// The pool's counters.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// pool.schedule(|| (), std::time::Duration::ZERO).unwrap().join().unwrap();
    /// assert_eq!(pool.stats().completed, 1);
    /// ```
    pub fn stats(&self) -> PoolStats {
        let c = self.core.counts();
        PoolStats {
            pending: c.pending,
            running: c.running,
            completed: c.completed,
            cancelled: c.cancelled,
            panicked: c.panicked,
        }
    }
}

impl Drop for ScheduledThreadPool {
    /// `shutdown_now`, then join every pool thread (except the current one, if a task drops
    /// the pool from inside it). The handed-back tasks are dropped one by one with any panic
    /// in their captures' `Drop` caught (as `cancel` does), so the threads are still joined
    /// and a pool dropped while its thread unwinds from another panic does not abort.
    fn drop(&mut self) {
        for pending in self.core.shutdown_now() {
            crate::task::drop_user(pending);
        }
        let me = std::thread::current().id();
        for t in self.threads.lock().drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl fmt::Debug for ScheduledThreadPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScheduledThreadPool")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Handle {
    fn with_core<R>(
        &self,
        f: impl FnOnce(&Arc<Core>) -> Result<R, ScheduleError>,
    ) -> Result<R, ScheduleError> {
        match self.core.upgrade() {
            Some(core) => f(&core),
            None => Err(ScheduleError::Shutdown),
        }
    }

    submit::scheduling_methods!();
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("alive", &(self.core.strong_count() > 0))
            .finish()
    }
}

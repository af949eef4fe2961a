//! `PendingTask`: a task that `shutdown_now` (or a graceful shutdown that hands back waiting
//! one-shots) took back before it ever started.

use super::state::End;
use super::{TaskInfo, TaskKind};
use std::fmt;
use std::time::Instant;

/// A task whose next run never started, handed back by
/// [`ScheduledThreadPool::shutdown_now`](crate::ScheduledThreadPool::shutdown_now) (a one-shot
/// that was still waiting, or a periodic task waiting between runs), or by a graceful
/// [`shutdown`](crate::ScheduledThreadPool::shutdown) of a pool built with
/// [`execute_delayed_after_shutdown(false)`](crate::Builder::execute_delayed_after_shutdown) (a
/// one-shot still waiting for its time; collect those with
/// [`take_handed_back`](crate::ScheduledThreadPool::take_handed_back)).
///
/// Its future already reports [`TaskError::Cancelled`](crate::TaskError::Cancelled) (handed back
/// by `shutdown_now`) or [`TaskError::Shutdown`](crate::TaskError::Shutdown) (by a graceful
/// shutdown). The caller may run the closure itself (for example on the current thread while
/// shutting down) or drop it.
///
/// # Examples
///
/// ```
/// use wheelpool::ScheduledThreadPool;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let hits = Arc::new(AtomicUsize::new(0));
/// let h = hits.clone();
/// let _f = pool.schedule(move || { h.fetch_add(1, Ordering::SeqCst); }, Duration::from_secs(3600)).unwrap();
/// let pending = pool.shutdown_now();
/// assert_eq!(pending.len(), 1);
/// for task in pending {
///     task.run(); // runs here, on the caller's thread
/// }
/// assert_eq!(hits.load(Ordering::SeqCst), 1);
/// ```
///
/// It tells which task it was ([`id`](Self::id), [`name`](Self::name), [`kind`](Self::kind))
/// and when its next run was planned ([`deadline`](Self::deadline)), so what never ran can be
/// logged at shutdown:
///
/// ```
/// use wheelpool::{ScheduledThreadPool, TaskKind};
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let hour = Duration::from_secs(3600);
/// let f = pool.task().name("report").schedule_with_fixed_delay(|| (), hour, hour).unwrap();
/// for task in pool.shutdown_now() {
///     assert_eq!((task.name(), task.kind()), (Some("report"), TaskKind::FixedDelay));
///     assert!(task.deadline().is_some());
///     println!("never ran: {task:?}");
/// }
/// assert!(f.is_cancelled());
/// ```
pub struct PendingTask {
    info: TaskInfo,
    /// How its task ended when it was handed back: `Cancelled` or `Shutdown`.
    end: End,
    /// Planned start of the next run, nanoseconds since the pool's origin (`u64::MAX`: never),
    /// until the pool turns it into an instant on its clock.
    planned: u64,
    deadline: Option<Instant>,
    run: Box<dyn FnOnce() + Send>,
}

impl PendingTask {
    pub(crate) fn new(
        info: TaskInfo,
        end: End,
        planned: u64,
        run: Box<dyn FnOnce() + Send>,
    ) -> Self {
        PendingTask {
            info,
            end,
            planned,
            deadline: None,
            run,
        }
    }

    /// How its task ended, by name: `Cancelled` (`shutdown_now`) or `Shutdown` (a graceful
    /// shutdown's hand-back).
    pub(crate) fn state_label(&self) -> &'static str {
        match self.end {
            End::Shutdown => "Shutdown",
            _ => "Cancelled",
        }
    }

    /// Places the planned run on the pool's clock: `instant_of` turns nanoseconds since the
    /// origin into an instant. A run planned for "never" keeps no deadline.
    pub(crate) fn place(mut self, instant_of: impl FnOnce(u64) -> Instant) -> Self {
        self.deadline = (self.planned != u64::MAX).then(|| instant_of(self.planned));
        self
    }

    /// The task's id, as its future's `Debug` shows it.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let (a, b) = (pool.schedule(|| (), Duration::MAX).unwrap(), pool.schedule(|| (), Duration::MAX).unwrap());
    /// let pending = pool.shutdown_now();
    /// assert_ne!(pending[0].id(), pending[1].id());
    /// # drop((a, b));
    /// ```
    pub fn id(&self) -> u64 {
        self.info.id()
    }

    /// The task's name, if it was given one
    /// ([`TaskBuilder::name`](crate::TaskBuilder::name)).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// pool.task().name("cleanup").schedule(|| (), Duration::from_secs(60)).unwrap().detach();
    /// assert_eq!(pool.shutdown_now()[0].name(), Some("cleanup"));
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.info.name()
    }

    /// The task's kind.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ScheduledThreadPool, TaskKind};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// pool.schedule_with_dynamic_delay(|| None, Duration::from_secs(60)).unwrap().detach();
    /// assert_eq!(pool.shutdown_now()[0].kind(), TaskKind::DynamicDelay);
    /// ```
    pub fn kind(&self) -> TaskKind {
        self.info.kind()
    }

    /// When its next run was planned, on the pool's clock; `None` for a run planned after
    /// `Duration::MAX` (never).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let at = clock.now() + Duration::from_secs(60);
    /// pool.schedule_at(|| (), at).unwrap().detach();
    /// pool.schedule(|| (), Duration::MAX).unwrap().detach();
    /// let pending = pool.shutdown_now();
    /// let mut deadlines: Vec<_> = pending.iter().map(|t| t.deadline()).collect();
    /// deadlines.sort();
    /// assert_eq!(deadlines, [None, Some(at)]);
    /// ```
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Runs the closure once on the calling thread. A one-shot task's value is dropped (its
    /// future already ended `Cancelled`); a periodic task runs once and is not re-armed.
    ///
    /// # Panics
    ///
    /// Propagates a panic of the closure: this runs user code on the caller's thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ScheduledThreadPool, TaskError};
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let (tx, rx) = mpsc::channel();
    /// let f = pool
    ///     .schedule(move || tx.send(std::thread::current().id()).unwrap(), Duration::from_secs(3600))
    ///     .unwrap();
    /// let mut pending = pool.shutdown_now();
    /// assert_eq!(pending.len(), 1);
    /// assert!(rx.try_recv().is_err(), "not run yet");
    ///
    /// pending.pop().unwrap().run();
    /// assert_eq!(rx.try_recv(), Ok(std::thread::current().id())); // ran here, at once
    /// assert_eq!(f.join(), Err(TaskError::Cancelled)); // the future does not see the run
    /// ```
    pub fn run(self) {
        (self.run)()
    }

    /// True if this was a periodic task (fixed rate or delay, dynamic delay or rate).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let hour = Duration::from_secs(3600);
    /// let _once = pool.schedule(|| (), hour).unwrap();
    /// let _rate = pool.schedule_at_fixed_rate(|| (), hour, hour).unwrap();
    /// let _delay = pool.schedule_with_fixed_delay(|| (), hour, hour).unwrap();
    /// let pending = pool.shutdown_now();
    /// assert_eq!(pending.len(), 3);
    /// assert_eq!(pending.iter().filter(|t| t.is_periodic()).count(), 2);
    /// ```
    pub fn is_periodic(&self) -> bool {
        self.info.kind().is_periodic()
    }
}

impl fmt::Debug for PendingTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingTask")
            .field("id", &self.id())
            .field("name", &self.name())
            .field("kind", &self.kind())
            // Handed back: the task ended cancelled or shut down (its future says so).
            .field("state", &self.end)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

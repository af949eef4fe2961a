//! `PendingTask`: a task that `shutdown_now` took back before it ever started.

use std::fmt;

/// A task whose next run never started, handed back by
/// [`ScheduledThreadPool::shutdown_now`](crate::ScheduledThreadPool::shutdown_now): a one-shot
/// that was still waiting, or a periodic task waiting between runs.
///
/// Its future already reports [`TaskError::Cancelled`](crate::TaskError::Cancelled). The caller may
/// run the closure itself (for example on the current thread while shutting down) or drop it.
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
pub struct PendingTask {
    periodic: bool,
    run: Box<dyn FnOnce() + Send>,
}

impl PendingTask {
    pub(crate) fn new(periodic: bool, run: Box<dyn FnOnce() + Send>) -> Self {
        PendingTask { periodic, run }
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

    /// True if this was a fixed-rate or fixed-delay task.
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
        self.periodic
    }
}

impl fmt::Debug for PendingTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingTask")
            .field("periodic", &self.periodic)
            .finish_non_exhaustive()
    }
}

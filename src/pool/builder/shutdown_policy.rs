//! The builder's graceful-shutdown policy, as Java's `ScheduledThreadPoolExecutor` sets it:
//! whether waiting one-shots run at their time or are handed back, and whether periodic tasks
//! stop or go on.

use super::Builder;
#[cfg(doc)]
use crate::ScheduledThreadPool;

impl Builder {
    /// What a graceful [`shutdown`](ScheduledThreadPool::shutdown) does with one-shots still
    /// waiting for their time: `true` (the default) runs them then, as Java's
    /// `setExecuteExistingDelayedTasksAfterShutdownPolicy`; `false` hands them back at once:
    /// each ends [`TaskError::Shutdown`](crate::TaskError::Shutdown) without running (counted in
    /// [`PoolStats::cancelled`](crate::PoolStats::cancelled)) and its closure waits for
    /// [`take_handed_back`](ScheduledThreadPool::take_handed_back) (or a later `shutdown_now`),
    /// so a 24-hour job no longer holds `await_termination` up. A one-shot already due when the
    /// shutdown comes runs under both policies, as in Java.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ScheduledThreadPool, TaskError};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder()
    ///     .threads(1)
    ///     .execute_delayed_after_shutdown(false)
    ///     .build()
    ///     .unwrap();
    /// let nightly = pool.task().name("nightly").schedule(|| "ran", Duration::from_secs(24 * 3600)).unwrap();
    /// pool.shutdown();
    /// assert!(pool.await_termination(Duration::from_secs(10)), "not held up by the 24 h job");
    /// assert_eq!(nightly.join(), Err(TaskError::Shutdown));
    /// let handed_back = pool.take_handed_back();
    /// assert_eq!(handed_back.len(), 1);
    /// assert_eq!(handed_back[0].name(), Some("nightly"));
    /// ```
    // Both policies are named, and take a `bool`, after Java's, so a reader who knows
    // `ScheduledThreadPoolExecutor` finds them; each reads as a sentence at the call site.
    pub fn execute_delayed_after_shutdown(mut self, run: bool) -> Self {
        self.keep_at_shutdown.one_shots = run;
        self
    }

    /// What a graceful [`shutdown`](ScheduledThreadPool::shutdown) does with periodic tasks
    /// (fixed rate or delay, dynamic, calendar): `false` (the default) stops each after its
    /// current run or before its next, its future ending
    /// [`TaskError::Shutdown`](crate::TaskError::Shutdown), as Java's
    /// `setContinueExistingPeriodicTasksAfterShutdownPolicy`; `true` lets them go on until each
    /// is cancelled, ends itself, panics, or [`shutdown_now`](ScheduledThreadPool::shutdown_now)
    /// stops it. [`await_termination`](ScheduledThreadPool::await_termination) waits for them.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ScheduledThreadPool, TaskError};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder()
    ///     .threads(1)
    ///     .continue_periodic_after_shutdown(true)
    ///     .build()
    ///     .unwrap();
    /// let (tx, beats) = std::sync::mpsc::channel();
    /// let ms = Duration::from_millis(1);
    /// let heartbeat = pool.schedule_at_fixed_rate(move || tx.send(()).unwrap(), ms, ms).unwrap();
    /// pool.shutdown();
    /// while beats.try_recv().is_ok() {} // the beats before the shutdown
    /// for _ in 0..3 {
    ///     beats.recv_timeout(Duration::from_secs(30)).unwrap(); // it goes on beating
    /// }
    /// assert!(!pool.await_termination(Duration::from_millis(1)), "waits for the heartbeat");
    /// assert!(heartbeat.cancel());
    /// assert!(pool.await_termination(Duration::from_secs(10)));
    /// assert_eq!(heartbeat.join(), Err(TaskError::Cancelled));
    /// ```
    pub fn continue_periodic_after_shutdown(mut self, go_on: bool) -> Self {
        self.keep_at_shutdown.periodic = go_on;
        self
    }
}

//! `CancelHandle`, and the cancel and reset that it and `ScheduledFuture` share: below the
//! future, which hands out handles.

use super::core::{Core, CoreRef};
use crate::error::ResetError;
use crate::sync::Arc;
use crate::task::{RawTask, TaskRef};
use crate::timer::duration_nanos;
use std::fmt;
use std::time::{Duration, Instant};

/// A cloneable handle that cancels one task from anywhere, while someone else holds its future.
///
/// Handles and futures of one task share a count kept in the task (4 bytes): more than 2^31
/// live handles to one task, which only leaking them (`mem::forget` in a loop) can reach,
/// aborts the process rather than let the count wrap, as `Arc` does past `isize::MAX` clones.
///
/// # Examples
///
/// ```
/// use wheelpool::{ScheduledThreadPool, TaskError};
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let f = pool.schedule(|| "late", Duration::from_secs(3600)).unwrap();
/// let handle = f.cancel_handle();
/// std::thread::spawn(move || assert!(handle.cancel())).join().unwrap();
/// assert_eq!(f.join(), Err(TaskError::Cancelled));
/// ```
#[derive(Clone)]
pub struct CancelHandle {
    task: TaskRef,
    core: Arc<CoreRef>,
}

impl CancelHandle {
    pub(super) fn new(task: TaskRef, core: Arc<CoreRef>) -> Self {
        CancelHandle { task, core }
    }

    /// Cancels the task; same rules and return value as [`ScheduledFuture::cancel`](crate::ScheduledFuture::cancel).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
    /// assert!(f.cancel_handle().cancel());
    /// ```
    pub fn cancel(&self) -> bool {
        cancel(&*self.task, &self.core)
    }

    /// Moves the task's next run to `delay` from now; same rules and return value as
    /// [`ScheduledFuture::reset`](crate::ScheduledFuture::reset). What a peer's connection handler holds to push back its
    /// idle timeout while someone else owns the future.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let idle = pool.schedule(|| "closed", ms(30)).unwrap();
    /// let handle = idle.cancel_handle();
    /// clock.advance(ms(20));
    /// assert!(std::thread::spawn(move || handle.reset(ms(30))).join().unwrap());
    /// clock.advance(ms(20)); // 40 ms: the old deadline has passed
    /// assert!(!idle.is_done());
    /// clock.advance(ms(10)); // 50 ms
    /// assert_eq!(idle.join(), Ok("closed"));
    /// ```
    pub fn reset(&self, delay: Duration) -> bool {
        self.try_reset(delay).is_ok()
    }

    /// Like [`reset`](Self::reset), saying why not; same rules as
    /// [`ScheduledFuture::try_reset`](crate::ScheduledFuture::try_reset).
    ///
    /// # Errors
    ///
    /// [`ResetError::Running`], [`ResetError::Done`] or [`ResetError::Cancelled`].
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ResetError, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
    /// let h = f.cancel_handle();
    /// assert_eq!(h.try_reset(Duration::from_secs(1)), Ok(()));
    /// f.cancel();
    /// assert_eq!(h.try_reset(Duration::from_secs(1)), Err(ResetError::Cancelled));
    /// ```
    pub fn try_reset(&self, delay: Duration) -> Result<(), ResetError> {
        reset_after(&*self.task, &self.core, delay)
    }

    /// Like [`reset_at`](Self::reset_at), saying why not; same rules as
    /// [`ScheduledFuture::try_reset_at`](crate::ScheduledFuture::try_reset_at).
    ///
    /// # Errors
    ///
    /// [`ResetError::Running`], [`ResetError::Done`] or [`ResetError::Cancelled`].
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ResetError, ScheduledThreadPool};
    /// use std::time::{Duration, Instant};
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let mut f = pool.schedule(|| (), Duration::ZERO).unwrap();
    /// let h = f.cancel_handle();
    /// assert_eq!(f.join_timeout(Duration::from_secs(10)), Some(Ok(())));
    /// assert_eq!(h.try_reset_at(Instant::now()), Err(ResetError::Done));
    /// ```
    pub fn try_reset_at(&self, at: Instant) -> Result<(), ResetError> {
        reset_at(&*self.task, &self.core, at)
    }

    /// Moves the task's next run to the instant `at`; same rules and return value as
    /// [`ScheduledFuture::reset_at`](crate::ScheduledFuture::reset_at).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
    /// let h = f.cancel_handle();
    /// assert!(h.cancel());
    /// assert!(!h.reset_at(clock.now()), "a cancelled task cannot be reset");
    /// ```
    pub fn reset_at(&self, at: Instant) -> bool {
        self.try_reset_at(at).is_ok()
    }

    /// True if the task was cancelled (by anyone, or by the pool's shutdown).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
    /// let h = f.cancel_handle();
    /// f.cancel();
    /// assert!(h.is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.task.header().state.load().is_cancelled()
    }
}

/// Shows the task's id, name, kind and state by name, as its future's `Debug` does.
impl fmt::Debug for CancelHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelHandle")
            .field("task", &(&*self.task as &dyn RawTask))
            .finish()
    }
}

pub(super) fn cancel(task: &dyn RawTask, core: &Core) -> bool {
    use crate::task::Cancelled;
    let outcome = task.cancel();
    core.on_cancel(task, outcome);
    match outcome {
        Cancelled::Waiting => true,
        // A periodic task's later runs had not started: this call stopped them. A running
        // one-shot has no run left to stop (its value will be dropped, `join` says Cancelled).
        Cancelled::Running => task.header().is_periodic(),
        Cancelled::No => false,
    }
}

pub(super) fn reset_after(
    task: &dyn RawTask,
    core: &Core,
    delay: Duration,
) -> Result<(), ResetError> {
    let time = &core.timer.time;
    let deadline = time.now_nanos().saturating_add(duration_nanos(delay));
    core.reset(task, deadline)
}

pub(super) fn reset_at(task: &dyn RawTask, core: &Core, at: Instant) -> Result<(), ResetError> {
    core.reset(task, core.timer.time.nanos_of(at))
}

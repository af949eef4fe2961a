//! `ScheduledFuture<T>`: the caller's end of a scheduled task.
//!
//! It lives with the pool's public face because it is one: it cancels and resets through the
//! pool's core, so keeping it here keeps every import pointing down (pool -> timer -> task ->
//! wheel).

use super::cancel::{cancel, reset_after, reset_at, CancelHandle};
use super::core::CoreRef;
use crate::error::{ResetError, TaskError};
use crate::sync::Arc;
use crate::task::{RawTask, TaskPtr, TaskRef, TaskResult};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The result of a scheduled task, and the way to cancel it.
///
/// Wait for it with [`join`](Self::join) (blocking), [`join_timeout`](Self::join_timeout), or
/// `.await` (it is a [`Future`] with `Output = Result<T, TaskError>`; no busy polling, the waker
/// is stored in the task). Periodic tasks return `ScheduledFuture<()>`, which completes only when
/// the task stops: cancelled, panicked, or ended by shutdown.
///
/// # Dropping detaches
///
/// Dropping the future **detaches** the task: it still runs (and a periodic task goes on until
/// the pool stops it). So `tokio::time::timeout(d, future)` that times out, or a `select!` that
/// takes another branch, leaves the task running. To stop it, call [`cancel`](Self::cancel),
/// keep a [`CancelHandle`], or wrap the future with [`abort_on_drop`](Self::abort_on_drop),
/// which cancels the task when the wrapper is dropped. Say fire-and-forget out loud with
/// [`detach`](Self::detach) (it also keeps `let _ = ...` and its lint away).
///
/// # Examples
///
/// ```
/// use wheelpool::ScheduledThreadPool;
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
/// let f = pool.schedule(|| 6 * 7, Duration::from_millis(5)).unwrap();
/// assert_eq!(f.join(), Ok(42));
/// ```
#[must_use = "dropping a ScheduledFuture detaches the task (it still runs): call .detach() to say so, or keep it to cancel or join"]
pub struct ScheduledFuture<T> {
    task: TaskPtr<dyn TaskResult<T>>,
    core: Arc<CoreRef>,
}

impl<T: Send + 'static> ScheduledFuture<T> {
    pub(crate) fn new(task: TaskPtr<dyn TaskResult<T>>, core: Arc<CoreRef>) -> Self {
        ScheduledFuture { task, core }
    }

    fn raw(&self) -> TaskRef {
        self.task.to_raw()
    }

    /// Cancels the task. Returns true if this call stopped a run that had not started: the
    /// answer an RPC timeout needs ("did I stop the timeout handler?").
    ///
    /// - Waiting: it will never start; its closure (and everything it captured) is dropped
    ///   before `cancel` returns, and its wheel entry is unlinked now or soon after. Returns true.
    /// - Periodic, waiting or running: no later run starts; a run in progress finishes. Returns
    ///   true.
    /// - Running one-shot: the run finishes (it cannot be stopped), its value is dropped, and the
    ///   future reports [`TaskError::Cancelled`]. Returns false: the closure did run.
    ///   [`is_cancelled`](Self::is_cancelled) is true from now on.
    /// - Finished, or already cancelled: nothing changes. Returns false.
    ///
    /// After `cancel` returns true, no run of the task starts any more and the future ends with
    /// `Err(TaskError::Cancelled)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
    /// assert!(f.cancel());
    /// assert!(!f.cancel(), "a second cancel changes nothing");
    /// assert!(f.is_cancelled() && f.is_done());
    /// ```
    pub fn cancel(&self) -> bool {
        cancel(&*self.task, &self.core)
    }

    /// A cloneable, `Send + Sync` handle that cancels this task.
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
    /// assert!(h.clone().cancel());
    /// assert!(f.is_cancelled());
    /// ```
    pub fn cancel_handle(&self) -> CancelHandle {
        CancelHandle::new(self.raw(), self.core.clone())
    }

    /// True if the task was cancelled, by [`cancel`](Self::cancel) or by the pool's shutdown.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
    /// assert!(!f.is_cancelled());
    /// f.cancel();
    /// assert!(f.is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.task.header().state.load().is_cancelled()
    }

    /// True once the task has finished for good: a value, a panic, a cancel, or a shutdown.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let mut f = pool.schedule(|| 1, Duration::ZERO).unwrap();
    /// assert_eq!(f.join_timeout(Duration::from_secs(10)), Some(Ok(1)));
    /// assert!(f.is_done());
    /// ```
    pub fn is_done(&self) -> bool {
        self.task.header().state.load().is_terminal()
    }

    /// Time left until the next planned run: zero when it is due, running, or finished.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
    /// let left = f.delay();
    /// assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(50));
    /// ```
    pub fn delay(&self) -> Duration {
        let header = self.task.header();
        if !header.state.is_scheduled() {
            return Duration::ZERO;
        }
        let now = self.core.timer.time.now_nanos();
        Duration::from_nanos(header.deadline().saturating_sub(now))
    }

    /// Moves the task's next run to `delay` from now, earlier or later: the idle timeout that
    /// every heartbeat pushes back. Returns true if the task was waiting and now waits for the
    /// new time; false, and nothing changes, once it is running, finished or cancelled (or
    /// already handed to a worker because it came due).
    ///
    /// It never runs before the new deadline (rounded up to the next tick); a zero delay makes
    /// it due now. For a one-shot, fixed-delay or dynamic-delay task only the next run moves.
    /// A fixed-rate task's grid re-bases at the new time: its planned runs become `now +
    /// delay`, then every period after that. A dynamic-rate task counts its next delay from
    /// the new time. O(1): the task is moved in the wheel, not re-created.
    ///
    /// # Examples
    ///
    /// A failure detector: each heartbeat pushes the peer's 100 ms timeout back.
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let t0 = clock.now();
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let c = clock.clone();
    /// let timeout = pool.schedule(move || c.now() - t0, ms(100)).unwrap();
    /// clock.advance(ms(60));
    /// assert!(timeout.reset(ms(100))); // a heartbeat at 60 ms: dead at 160 ms, not 100 ms
    /// clock.advance(ms(99));
    /// assert!(!timeout.is_done());
    /// clock.advance(ms(1));
    /// assert!(!timeout.reset(ms(100)), "it has run: too late to reset");
    /// assert_eq!(timeout.join(), Ok(ms(160)));
    /// ```
    pub fn reset(&self, delay: Duration) -> bool {
        self.try_reset(delay).is_ok()
    }

    /// Like [`reset`](Self::reset), saying why the task was not moved: [`ResetError::Running`]
    /// (a run in progress, or due and handed to a worker: it is firing), [`ResetError::Done`]
    /// or [`ResetError::Cancelled`]. Nothing changes on an error.
    ///
    /// # Errors
    ///
    /// As above; [`reset`](Self::reset) is `try_reset(..).is_ok()`.
    ///
    /// # Examples
    ///
    /// A failure detector that knows whether its timeout is firing or has fired:
    ///
    /// ```
    /// use wheelpool::{ManualClock, ResetError, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let dead = pool.schedule(|| "peer is dead", ms(100)).unwrap();
    /// assert_eq!(dead.try_reset(ms(100)), Ok(()));
    /// clock.advance(ms(100));
    /// assert_eq!(dead.try_reset(ms(100)), Err(ResetError::Done));
    /// assert_eq!(dead.join(), Ok("peer is dead"));
    /// ```
    pub fn try_reset(&self, delay: Duration) -> Result<(), ResetError> {
        reset_after(&*self.task, &self.core, delay)
    }

    /// Like [`reset_at`](Self::reset_at), saying why the task was not moved (see
    /// [`try_reset`](Self::try_reset)).
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
    /// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
    /// assert_eq!(f.try_reset_at(Instant::now() + Duration::from_secs(120)), Ok(()));
    /// assert!(f.cancel());
    /// assert_eq!(f.try_reset_at(Instant::now()), Err(ResetError::Cancelled));
    /// ```
    pub fn try_reset_at(&self, at: Instant) -> Result<(), ResetError> {
        reset_at(&*self.task, &self.core, at)
    }

    /// Like [`reset`](Self::reset), to the instant `at` on the pool's clock (with a
    /// `ManualClock`, take it from `clock.now()`); an instant in the past makes the task due
    /// now. Same return value: false once the task is running, finished or cancelled.
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
    /// let f = pool.schedule(|| "ran", Duration::from_secs(3600)).unwrap();
    /// clock.advance(Duration::ZERO); // let the timer thread take it into the wheel
    /// assert!(f.reset_at(clock.now() + ms(5))); // an hour became 5 ms
    /// clock.advance(ms(5));
    /// assert!(f.is_done());
    /// assert!(!f.reset_at(clock.now()));
    /// assert_eq!(f.join(), Ok("ran"));
    /// ```
    pub fn reset_at(&self, at: Instant) -> bool {
        self.try_reset_at(at).is_ok()
    }

    /// Lets the task go: it runs (and a periodic task goes on) with nobody waiting for its
    /// result, as when the future is dropped, but said on purpose. A `CancelHandle` taken
    /// before still cancels it.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let (tx, rx) = mpsc::channel();
    /// pool.schedule(move || tx.send("ran anyway").unwrap(), Duration::from_millis(1)).unwrap().detach();
    /// assert_eq!(rx.recv(), Ok("ran anyway"));
    /// ```
    pub fn detach(self) {}

    /// A wrapper that cancels the task when it is dropped, for async code where a dropped
    /// future means "no longer wanted" (`tokio::time::timeout`, `select!`, an aborted
    /// request). It is itself a `Future` with the same output, and dereferences to this
    /// future (`cancel`, `reset`, ...). A task that already finished is left alone.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| "late", Duration::from_secs(3600)).unwrap();
    /// let handle = f.cancel_handle();
    /// let guarded = f.abort_on_drop();
    /// drop(guarded); // e.g. a timeout around `guarded.await` fired
    /// assert!(handle.is_cancelled());
    /// ```
    pub fn abort_on_drop(self) -> AbortOnDrop<T> {
        AbortOnDrop { future: self }
    }

    /// Blocks until the task finishes and returns its value or why there is none.
    ///
    /// A periodic task's future finishes only when the task stops, so this waits until it is
    /// cancelled, panics (without `survive_panics`), or is stopped by shutdown.
    ///
    /// # Errors
    ///
    /// [`TaskError::Cancelled`], [`TaskError::Panicked`] with the panic message, or
    /// [`TaskError::Shutdown`]; [`TaskError::Taken`] if an earlier
    /// [`join_timeout`](Self::join_timeout) (or `.await`) already returned the result.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ScheduledThreadPool, TaskError};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.schedule(|| -> u8 { panic!("boom") }, Duration::ZERO).unwrap();
    /// assert_eq!(f.join(), Err(TaskError::Panicked("boom".into())));
    /// ```
    pub fn join(self) -> Result<T, TaskError> {
        match self.task.wait(None) {
            Some(result) => result,
            None => unreachable!("an untimed wait returns only with a result"),
        }
    }

    /// Like [`join`](Self::join), but gives up after `timeout` and returns `None` (the future
    /// stays usable: join or await it again later). Once it has returned `Some`, the result is
    /// gone: a later call returns `Some(Err(TaskError::Taken))` at once (so do `join` and a
    /// poll).
    ///
    /// # Errors
    ///
    /// `Some(Err(_))` as for [`join`](Self::join): [`TaskError::Cancelled`],
    /// [`TaskError::Panicked`], [`TaskError::Shutdown`], or [`TaskError::Taken`] after the
    /// result was returned once. `None` is not an error: the task has not finished yet.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ScheduledThreadPool, TaskError};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let mut f = pool.schedule(|| 7, Duration::from_secs(3600)).unwrap();
    /// assert_eq!(f.join_timeout(Duration::from_millis(1)), None);
    /// f.cancel();
    /// assert_eq!(f.join_timeout(Duration::from_secs(10)), Some(Err(TaskError::Cancelled)));
    /// assert_eq!(f.join_timeout(Duration::from_secs(10)), Some(Err(TaskError::Taken)));
    /// ```
    pub fn join_timeout(&mut self, timeout: Duration) -> Option<Result<T, TaskError>> {
        let deadline = Instant::now().checked_add(timeout);
        self.task.wait(deadline)
    }
}

impl<T: Send + 'static> Future for ScheduledFuture<T> {
    type Output = Result<T, TaskError>;

    /// Polled again after it returned `Ready`, it returns `Ready(Err(TaskError::Taken))`.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.task.poll_result(cx)
    }
}

/// Shows the task's id, name, kind and state by name, for example
/// `ScheduledFuture { task: Task { id: 7, name: Some("sweep"), kind: FixedRate, state: Scheduled } }`.
impl<T: 'static> fmt::Debug for ScheduledFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScheduledFuture")
            .field("task", &(&*self.task as &dyn RawTask))
            .finish()
    }
}

/// A [`ScheduledFuture`] that cancels its task when dropped: made by
/// [`ScheduledFuture::abort_on_drop`]. A `Future` with the same output; dereferences to the
/// future it wraps.
///
/// # Examples
///
/// ```
/// use wheelpool::{ScheduledThreadPool, TaskError};
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let guarded = pool.schedule(|| 5, Duration::ZERO).unwrap().abort_on_drop();
/// assert_eq!(pollster::block_on(guarded), Ok(5)); // finished: the drop cancels nothing
///
/// let guarded = pool.schedule(|| 5, Duration::from_secs(3600)).unwrap().abort_on_drop();
/// let handle = guarded.cancel_handle();
/// drop(guarded);
/// assert!(handle.is_cancelled());
/// ```
#[must_use = "dropping an AbortOnDrop cancels its task at once"]
pub struct AbortOnDrop<T: Send + 'static> {
    future: ScheduledFuture<T>,
}

impl<T: Send + 'static> Future for AbortOnDrop<T> {
    type Output = Result<T, TaskError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.future).poll(cx)
    }
}

impl<T: Send + 'static> std::ops::Deref for AbortOnDrop<T> {
    type Target = ScheduledFuture<T>;

    fn deref(&self) -> &ScheduledFuture<T> {
        &self.future
    }
}

impl<T: Send + 'static> Drop for AbortOnDrop<T> {
    /// Cancels the task, with [`ScheduledFuture::cancel`]'s rules: a waiting task never
    /// starts, a running one-shot finishes but its value is dropped, a finished task is left
    /// alone.
    fn drop(&mut self) {
        self.future.cancel();
    }
}

impl<T: Send + 'static> fmt::Debug for AbortOnDrop<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortOnDrop")
            .field("task", &(&*self.future.task as &dyn RawTask))
            .finish()
    }
}

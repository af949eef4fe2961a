//! The crate's error types: why a schedule was refused, why a task produced no value, why a pool
//! could not be built.

use std::fmt;
use std::time::Duration;

/// Why a task could not be scheduled. Nothing was queued when this is returned.
///
/// What to do: `Shutdown`, schedule on a live pool (a `Handle` whose pool is gone always gets
/// it); `Saturated`, cancel some tasks, retry later, or raise
/// [`Builder::max_pending`](crate::Builder::max_pending); `ZeroPeriod`, pass a period greater
/// than zero. The `Display` texts are short and say only what happened.
///
/// # Examples
///
/// ```
/// use wheelpool::{ScheduledThreadPool, ScheduleError};
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// pool.shutdown();
/// assert_eq!(pool.execute(|| ()), Err(ScheduleError::Shutdown));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The pool is shut down (or gone, for a `Handle`): it takes no new tasks.
    Shutdown,
    /// The pool already holds `max_pending` tasks waiting to run.
    Saturated {
        /// The bound set with `Builder::max_pending`.
        max_pending: usize,
    },
    /// A periodic task was given a zero period or a zero delay between runs.
    ZeroPeriod,
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::Shutdown => f.write_str("pool is shut down"),
            ScheduleError::Saturated { max_pending } => {
                write!(f, "pool is full ({max_pending} pending tasks)")
            }
            ScheduleError::ZeroPeriod => f.write_str("period is zero"),
        }
    }
}

impl std::error::Error for ScheduleError {}

/// Why a task's future holds no value.
///
/// What to do: `Cancelled`, schedule it again if the work is still needed; `Panicked`, fix the
/// task (the pool's panic handler saw the payload, and [`TaskInfo::panicking`] told it which
/// task); `Shutdown`, shut down once the work is done; `Taken`, keep the result the first
/// `join_timeout` or poll returned.
///
/// [`TaskInfo::panicking`]: crate::TaskInfo::panicking
///
/// # Examples
///
/// ```
/// use wheelpool::{ScheduledThreadPool, TaskError};
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let f = pool.schedule(|| 1, Duration::from_secs(3600)).unwrap();
/// assert!(f.cancel());
/// assert_eq!(f.join(), Err(TaskError::Cancelled));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskError {
    /// The task was cancelled (by `cancel`, or by `shutdown_now` before it started).
    Cancelled,
    /// A run of the task panicked; the string is the panic message (or a placeholder when the
    /// payload was not a string).
    Panicked(String),
    /// The pool shut down: a periodic task stops after its current run when the pool shuts down.
    Shutdown,
    /// The result was already taken: an earlier [`join_timeout`] returned `Some`, or the future
    /// was polled again after it returned `Ready`. Each task has one result.
    ///
    /// [`join_timeout`]: crate::ScheduledFuture::join_timeout
    Taken,
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskError::Cancelled => f.write_str("task cancelled"),
            TaskError::Panicked(msg) => write!(f, "task panicked: {msg}"),
            TaskError::Shutdown => f.write_str("pool shut down before the task finished"),
            TaskError::Taken => f.write_str("task result already taken"),
        }
    }
}

impl std::error::Error for TaskError {}

/// Why [`try_reset`](crate::ScheduledFuture::try_reset) (or `try_reset_at`, also on
/// [`CancelHandle`](crate::CancelHandle)) did not move a task. Nothing changed.
///
/// A failure detector tells "the timeout is firing now" (`Running`: too late, the peer is being
/// declared dead) from "it already fired" (`Done`) and "someone stopped it" (`Cancelled`)
/// without a generation counter of its own.
///
/// # Examples
///
/// ```
/// use wheelpool::{ResetError, ScheduledThreadPool};
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
/// assert_eq!(f.try_reset(Duration::from_secs(30)), Ok(()));
/// f.cancel();
/// assert_eq!(f.try_reset(Duration::from_secs(30)), Err(ResetError::Cancelled));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResetError {
    /// A run is in progress, or the task came due and was handed to a worker (it is firing).
    /// For a periodic task, its next run can be reset again once this run has re-armed it.
    Running,
    /// The task finished: a one-shot ran, or a periodic task ended (its closure said so, or a
    /// run panicked).
    Done,
    /// The task was cancelled (by `cancel`, `shutdown_now`, or stopped by a shutdown).
    Cancelled,
}

impl fmt::Display for ResetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResetError::Running => "task is running",
            ResetError::Done => "task is done",
            ResetError::Cancelled => "task was cancelled",
        })
    }
}

impl std::error::Error for ResetError {}

/// Why `Builder::build` failed. Threads started before the failure have been stopped and joined.
///
/// What to do: a setting out of range ([`is_invalid_config`](Self::is_invalid_config)) fails
/// the same way every time, so fix it (one worker per CPU and a 1 us tick, the defaults, suit
/// most uses; leave `max_pending` unset for no bound); a spawn failure may pass later or with
/// fewer threads; a panicking `on_thread_start` hook needs fixing. `Display` says only what
/// happened.
///
/// # Examples
///
/// ```
/// use wheelpool::ScheduledThreadPool;
///
/// let err = ScheduledThreadPool::builder().threads(0).build().unwrap_err();
/// assert!(err.is_invalid_config());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct BuildError {
    kind: BuildErrorKind,
}

#[derive(Debug)]
enum BuildErrorKind {
    /// `got` outside `1..=max` (`Builder::MAX_THREADS`).
    ThreadsOutOfRange {
        got: usize,
        max: usize,
    },
    /// `got` outside `min..=max` (`Builder::MIN_TICK`, `Builder::MAX_TICK`).
    TickOutOfRange {
        got: Duration,
        min: Duration,
        max: Duration,
    },
    ZeroMaxPending,
    ThreadNameHasNul,
    Spawn(std::io::Error),
    ThreadStartPanicked(String),
}

impl BuildError {
    pub(crate) fn threads_out_of_range(got: usize, max: usize) -> Self {
        BuildError {
            kind: BuildErrorKind::ThreadsOutOfRange { got, max },
        }
    }
    pub(crate) fn tick_out_of_range(got: Duration, min: Duration, max: Duration) -> Self {
        BuildError {
            kind: BuildErrorKind::TickOutOfRange { got, min, max },
        }
    }
    pub(crate) fn zero_max_pending() -> Self {
        BuildError {
            kind: BuildErrorKind::ZeroMaxPending,
        }
    }
    pub(crate) fn thread_name_has_nul() -> Self {
        BuildError {
            kind: BuildErrorKind::ThreadNameHasNul,
        }
    }
    pub(crate) fn spawn(err: std::io::Error) -> Self {
        BuildError {
            kind: BuildErrorKind::Spawn(err),
        }
    }
    pub(crate) fn thread_start_panicked(message: String) -> Self {
        BuildError {
            kind: BuildErrorKind::ThreadStartPanicked(message),
        }
    }

    /// True when a builder setting was out of range (threads outside
    /// `1..=`[`Builder::MAX_THREADS`](crate::Builder::MAX_THREADS), a tick outside
    /// [`Builder::MIN_TICK`](crate::Builder::MIN_TICK)`..=`[`Builder::MAX_TICK`](crate::Builder::MAX_TICK),
    /// zero max_pending, a thread name with a NUL byte).
    /// Retrying with the same settings fails the same way: fix the setting the message names.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// for err in [
    ///     ScheduledThreadPool::builder().threads(0).build().unwrap_err(),
    ///     ScheduledThreadPool::builder().threads(usize::MAX).build().unwrap_err(),
    ///     ScheduledThreadPool::builder().tick(Duration::ZERO).build().unwrap_err(),
    ///     ScheduledThreadPool::builder().tick(Duration::MAX).build().unwrap_err(),
    ///     ScheduledThreadPool::builder().threads(1).max_pending(0).build().unwrap_err(),
    /// ] {
    ///     assert!(err.is_invalid_config());
    ///     assert!(!err.is_spawn_failure());
    /// }
    /// ```
    pub fn is_invalid_config(&self) -> bool {
        matches!(
            self.kind,
            BuildErrorKind::ThreadsOutOfRange { .. }
                | BuildErrorKind::TickOutOfRange { .. }
                | BuildErrorKind::ZeroMaxPending
                | BuildErrorKind::ThreadNameHasNul
        )
    }

    /// True when the operating system refused to start a thread. The underlying
    /// [`std::io::Error`] is the error's [`source`](std::error::Error::source); the settings
    /// were fine, so building again later (with fewer threads, or once resources are freed) may
    /// succeed.
    ///
    /// # Examples
    ///
    /// A configuration error is not a spawn failure and has no source:
    ///
    /// ```
    /// use std::error::Error;
    /// use wheelpool::ScheduledThreadPool;
    ///
    /// let err = ScheduledThreadPool::builder().threads(0).build().unwrap_err();
    /// assert!(!err.is_spawn_failure());
    /// assert!(err.source().is_none());
    ///
    /// // Typical handling: a spawn failure is worth a retry, a bad setting is not.
    /// let pool = match ScheduledThreadPool::builder().threads(1).build() {
    ///     Ok(pool) => pool,
    ///     Err(e) if e.is_spawn_failure() => ScheduledThreadPool::builder().threads(1).build().unwrap(),
    ///     Err(e) => panic!("bad pool settings: {e}"),
    /// };
    /// assert!(!pool.is_shutdown());
    /// ```
    pub fn is_spawn_failure(&self) -> bool {
        matches!(self.kind, BuildErrorKind::Spawn(_))
    }
}

impl BuildError {
    /// True when a [`Builder::on_thread_start`](crate::Builder::on_thread_start) hook panicked
    /// on a worker. The pool was stopped and its threads joined; building again with the same
    /// hook fails again unless what made it panic has changed.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    ///
    /// let err = ScheduledThreadPool::builder()
    ///     .threads(1)
    ///     .on_thread_start(|| panic!("metrics registry unavailable"))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.is_thread_start_panic());
    /// assert!(!err.is_invalid_config() && !err.is_spawn_failure());
    /// assert!(err.to_string().contains("metrics registry unavailable"));
    /// ```
    pub fn is_thread_start_panic(&self) -> bool {
        matches!(self.kind, BuildErrorKind::ThreadStartPanicked(_))
    }

    /// The message of the panic that failed the build (an `on_thread_start` hook's), if that
    /// is what happened; a placeholder text when the payload was not a string.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    ///
    /// let err = ScheduledThreadPool::builder()
    ///     .threads(2)
    ///     .on_thread_start(|| panic!("no log sink"))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.panic_message(), Some("no log sink"));
    ///
    /// let err = ScheduledThreadPool::builder().threads(0).build().unwrap_err();
    /// assert_eq!(err.panic_message(), None);
    /// ```
    pub fn panic_message(&self) -> Option<&str> {
        match &self.kind {
            BuildErrorKind::ThreadStartPanicked(message) => Some(message),
            _ => None,
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            BuildErrorKind::ThreadsOutOfRange { got, max } => write!(
                f,
                "threads must be at least 1 and at most {max} (got {got})"
            ),
            BuildErrorKind::TickOutOfRange { got, min, max } => write!(
                f,
                "tick must be at least {min:?} and at most {max:?} (got {got:?})"
            ),
            BuildErrorKind::ZeroMaxPending => f.write_str("max_pending must be at least 1"),
            BuildErrorKind::ThreadNameHasNul => f.write_str("thread_name contains a NUL byte"),
            BuildErrorKind::Spawn(e) => write!(f, "could not start a pool thread: {e}"),
            BuildErrorKind::ThreadStartPanicked(message) => {
                write!(f, "an on_thread_start hook panicked: {message}")
            }
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            BuildErrorKind::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

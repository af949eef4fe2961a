//! `Handle`: the scheduling methods without options (each is `task()` with none; the bodies are
//! `TaskBuilder`'s). `ScheduledThreadPool` dereferences to its own handle (which owns the core);
//! other handles refer to the core without keeping it alive.

use super::core::Core;
use super::future::ScheduledFuture;
use super::link::CoreLink;
use super::task_builder::TaskBuilder;
use crate::error::ScheduleError;
use crate::sync::Arc;
use crate::task::NextRun;
use std::fmt;
use std::time::{Duration, Instant};

/// The scheduling side of a pool: the scheduling methods are here, and
/// [`ScheduledThreadPool`](crate::ScheduledThreadPool) dereferences to its own `Handle`, so `pool.schedule(..)` is
/// `Handle::schedule`. Options for one task (a name, ...) go through [`task`](Self::task).
///
/// A handle from [`ScheduledThreadPool::handle`](crate::ScheduledThreadPool::handle) (or a clone of any handle) is a cheap way to
/// schedule on a pool without keeping it alive: what a task captures to schedule its follow-ups.
/// Once the pool is gone, every method returns [`ScheduleError::Shutdown`].
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
pub struct Handle {
    core: CoreLink,
}

impl Handle {
    /// The pool's own handle, which keeps the core alive.
    pub(crate) fn owner(core: Arc<Core>) -> Self {
        Handle {
            core: CoreLink::Owner(core),
        }
    }

    /// The core, if this is the pool's own handle.
    pub(crate) fn owned_core(&self) -> &Arc<Core> {
        match &self.core {
            CoreLink::Owner(core) => core,
            CoreLink::Weak(_) => unreachable!("only the pool's own handle is asked for its core"),
        }
    }

    /// Options for one task (a name, the missed-run policy, surviving panics), then any of the
    /// scheduling methods: `pool.task().name("flush").schedule_at_fixed_rate(f, init, period)`.
    /// The methods below are the same calls with no options; see [`TaskBuilder`] for why
    /// options come this way.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{MissedTicks, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let second = Duration::from_secs(1);
    /// let beat = pool
    ///     .task()
    ///     .name("heartbeat")
    ///     .missed_ticks(MissedTicks::Skip)
    ///     .survive_panics(true)
    ///     .schedule_at_fixed_rate(|| (), second, second)
    ///     .unwrap();
    /// assert!(format!("{beat:?}").contains("heartbeat"));
    /// assert!(beat.cancel());
    /// ```
    pub fn task(&self) -> TaskBuilder<'_> {
        TaskBuilder::new(&self.core)
    }

    /// Runs `f` as soon as a worker is free (it skips the wheel).
    ///
    /// A panic in `f` goes to the panic handler; there is no future to report it to.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] after shutdown (or when the pool is gone),
    /// [`ScheduleError::Saturated`] past `max_pending`.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::sync::mpsc;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let (tx, rx) = mpsc::channel();
    /// pool.execute(move || tx.send("ran").unwrap()).unwrap();
    /// assert_eq!(rx.recv().unwrap(), "ran");
    /// ```
    pub fn execute<F>(&self, f: F) -> Result<(), ScheduleError>
    where
        F: FnOnce() + Send + 'static,
    {
        self.task().execute(f)
    }

    /// Runs `f` once, `delay` from now (never earlier; deadlines round up to the next tick).
    /// A zero delay runs as soon as a worker is free; `Duration::MAX` never comes.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] or [`ScheduleError::Saturated`]; nothing was queued.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::{Duration, Instant};
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let start = Instant::now();
    /// let f = pool.schedule(move || start.elapsed(), Duration::from_millis(20)).unwrap();
    /// assert!(f.join().unwrap() >= Duration::from_millis(20));
    /// ```
    pub fn schedule<F, T>(&self, f: F, delay: Duration) -> Result<ScheduledFuture<T>, ScheduleError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.task().schedule(f, delay)
    }

    /// Runs `f` once at `at`, an instant on the pool's clock (with a `ManualClock`, take it
    /// from `clock.now()`). An instant in the past runs as soon as a worker is free.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] or [`ScheduleError::Saturated`]; nothing was queued.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::{Duration, Instant};
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let at = Instant::now() + Duration::from_millis(10);
    /// let f = pool.schedule_at(move || Instant::now() >= at, at).unwrap();
    /// assert_eq!(f.join(), Ok(true));
    /// ```
    pub fn schedule_at<F, T>(&self, f: F, at: Instant) -> Result<ScheduledFuture<T>, ScheduleError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.task().schedule_at(f, at)
    }

    /// Runs `f` at `initial`, `initial + period`, `initial + 2 * period`, ... measured from
    /// this call, whatever the runs take (no drift). A run that overruns delays the next
    /// one; runs never overlap; missed runs follow the pool's [`MissedTicks`](crate::MissedTicks) policy
    /// (default `Burst`, like Java), or the task's ([`TaskBuilder::missed_ticks`]). Example: period 5 s, a run takes 2 s: the next starts
    /// 3 s after it ends, still on the 5 s grid.
    ///
    /// The future completes only when the task stops (cancel, panic, shutdown).
    ///
    /// # Errors
    ///
    /// [`ScheduleError::ZeroPeriod`] for a zero `period`; [`ScheduleError::Shutdown`] or
    /// [`ScheduleError::Saturated`].
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
    /// let beat = pool
    ///     .schedule_at_fixed_rate(move || { let _ = tx.send(()); }, Duration::ZERO, Duration::from_millis(5))
    ///     .unwrap();
    /// for _ in 0..3 {
    ///     rx.recv().unwrap();
    /// }
    /// assert!(beat.cancel());
    /// ```
    pub fn schedule_at_fixed_rate<F>(
        &self,
        f: F,
        initial: Duration,
        period: Duration,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() + Send + 'static,
    {
        self.task().schedule_at_fixed_rate(f, initial, period)
    }

    /// Runs `f` at `initial`, then again `delay` after each run returns. Example: delay
    /// 5 s, a run takes 2 s: runs start 7 s apart.
    ///
    /// The future completes only when the task stops (cancel, panic, shutdown).
    ///
    /// # Errors
    ///
    /// [`ScheduleError::ZeroPeriod`] for a zero `delay`; [`ScheduleError::Shutdown`] or
    /// [`ScheduleError::Saturated`].
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ScheduledThreadPool, ScheduleError};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let err = pool.schedule_with_fixed_delay(|| (), Duration::ZERO, Duration::ZERO).unwrap_err();
    /// assert_eq!(err, ScheduleError::ZeroPeriod);
    /// ```
    pub fn schedule_with_fixed_delay<F>(
        &self,
        f: F,
        initial: Duration,
        delay: Duration,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() + Send + 'static,
    {
        self.task().schedule_with_fixed_delay(f, initial, delay)
    }

    /// Runs `f` at `initial`, then again whenever its last run says, `delay` after this run
    /// **returned**. `f` returns either (see [`NextRun`]):
    ///
    /// - `Option<Duration>`: `Some(delay)` for a next run, `None` to end the task, whose
    ///   future then gives `Ok(())`; or
    /// - [`ControlFlow<T, Duration>`](std::ops::ControlFlow): `Continue(delay)` for a next
    ///   run, `Break(value)` to end the task, whose future then gives `Ok(value)`: a retry
    ///   that returns its reply, or its last error (`examples/retry_backoff.rs`).
    ///
    /// Retry loops with backoff, polling that slows down when idle. One future (and its
    /// [`CancelHandle`]) cancels the whole chain.
    ///
    /// Runs never overlap. A panicking run ends the task with [`TaskError::Panicked`] (to
    /// survive panics: [`TaskBuilder::survive_panics`]); cancel and shutdown behave as for
    /// fixed-delay tasks.
    ///
    /// [`TaskError::Panicked`]: crate::TaskError::Panicked
    /// [`CancelHandle`]: crate::CancelHandle
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] or [`ScheduleError::Saturated`]; nothing was queued.
    ///
    /// # Examples
    ///
    /// Exponential backoff, 10 ms doubling, until the fourth try succeeds: runs at 0, 10,
    /// 30 and 70 ms, then the task ends with `Ok(())`.
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    ///
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let t0 = clock.now();
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let tries = Arc::new(Mutex::new(Vec::new()));
    /// let (log, c) = (tries.clone(), clock.clone());
    /// let mut backoff = ms(10);
    /// let retry = pool
    ///     .schedule_with_dynamic_delay(
    ///         move || {
    ///             let mut log = log.lock().unwrap();
    ///             log.push(c.now() - t0);
    ///             if log.len() == 4 {
    ///                 return None; // success: stop retrying
    ///             }
    ///             let wait = backoff;
    ///             backoff *= 2;
    ///             Some(wait)
    ///         },
    ///         Duration::ZERO,
    ///     )
    ///     .unwrap();
    /// clock.advance(ms(100));
    /// assert_eq!(*tries.lock().unwrap(), [ms(0), ms(10), ms(30), ms(70)]);
    /// assert_eq!(retry.join(), Ok(()));
    /// ```
    ///
    /// A loop that returns: three tries 10 ms apart, then it gives up with the last error.
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::ops::ControlFlow::{Break, Continue};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let mut tries = 0;
    /// let call = pool
    ///     .schedule_with_dynamic_delay(
    ///         move || {
    ///             tries += 1;
    ///             let reply: Result<u32, String> = Err(format!("refused ({tries})"));
    ///             match reply {
    ///                 Err(_) if tries < 3 => Continue(Duration::from_millis(10)),
    ///                 done => Break(done),
    ///             }
    ///         },
    ///         Duration::ZERO,
    ///     )
    ///     .unwrap();
    /// clock.advance(Duration::from_millis(20));
    /// assert_eq!(call.join(), Ok(Err("refused (3)".to_owned())));
    /// ```
    pub fn schedule_with_dynamic_delay<F, R>(
        &self,
        f: F,
        initial: Duration,
    ) -> Result<ScheduledFuture<R::Output>, ScheduleError>
    where
        F: FnMut() -> R + Send + 'static,
        R: NextRun,
    {
        self.task().schedule_with_dynamic_delay(f, initial)
    }

    /// Runs `f` at `initial`, then again whenever its last run says: `f` returns
    /// `Some(delay)` (or `ControlFlow::Continue(delay)`) for a next run `delay` after this
    /// run's **planned start** (its deadline, so late dispatch does not drift the schedule),
    /// or `None` (or `ControlFlow::Break(value)`) to end the task, whose future then gives
    /// `Ok(())` (or `Ok(value)`); see [`NextRun`]. A run that takes longer than the delay it returns makes
    /// the next run due at once, after it returns: runs never overlap. A
    /// [`reset`](crate::ScheduledFuture::reset) re-bases: the delay then counts from the new
    /// deadline.
    ///
    /// Panics, cancel and shutdown behave as for fixed-rate tasks.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] or [`ScheduleError::Saturated`]; nothing was queued.
    ///
    /// # Examples
    ///
    /// Each run takes 3 ms (it moves the clock itself) and asks for the next 10 ms after
    /// it started: runs at 10, 20 and 30 ms, the third ends the task.
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    ///
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let t0 = clock.now();
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let starts = Arc::new(Mutex::new(Vec::new()));
    /// let (log, c) = (starts.clone(), clock.clone());
    /// let sampler = pool
    ///     .schedule_at_dynamic_rate(
    ///         move || {
    ///             let mut log = log.lock().unwrap();
    ///             log.push(c.now() - t0);
    ///             c.advance(ms(3)); // the work takes 3 ms
    ///             (log.len() < 3).then_some(ms(10))
    ///         },
    ///         ms(10),
    ///     )
    ///     .unwrap();
    /// clock.advance(ms(40));
    /// assert_eq!(*starts.lock().unwrap(), [ms(10), ms(20), ms(30)]);
    /// assert_eq!(sampler.join(), Ok(()));
    /// ```
    pub fn schedule_at_dynamic_rate<F, R>(
        &self,
        f: F,
        initial: Duration,
    ) -> Result<ScheduledFuture<R::Output>, ScheduleError>
    where
        F: FnMut() -> R + Send + 'static,
        R: NextRun,
    {
        self.task().schedule_at_dynamic_rate(f, initial)
    }

    /// Runs `f` at each occurrence of `cron` (a cron expression in a time zone, feature
    /// `cron`), from the next one after now on, until cancelled.
    ///
    /// - **Never early** by the wall clock (the system's, or a [`ManualClock`]'s virtual
    ///   one): occurrences are planned from it, and a wake-up that finds it short of the
    ///   occurrence only plans again. Lateness is the pool's usual (about a tick).
    /// - **A stepped clock** (NTP, a suspend, an administrator) moves the next run within a
    ///   minute: the task looks at the wall clock at least once a minute. A clock stepped
    ///   back never runs an occurrence a second time; one stepped forward makes the
    ///   occurrences it jumped over missed ones.
    /// - **Never two runs at once.** Occurrences missed while a run overran (or the machine
    ///   slept, or the clock jumped) follow the pool's [`MissedTicks`] policy: `Burst`
    ///   (default) runs each at once, in order; `Skip` waits for the first occurrence at or
    ///   after now; `Delay` runs once at once for all of them, then goes on with the calendar.
    /// - **Daylight saving**: an occurrence in a skipped hour runs at the first instant after
    ///   the gap (or not at all: [`Cron::skipped_time`](crate::cron::Cron::skipped_time)), one
    ///   in a repeated hour runs once (see [`cron`](crate::cron)).
    /// - Options (a name, the missed-run policy, surviving panics) through
    ///   [`task`](Self::task), as for every kind of task.
    /// - Cancel, panics (the task stops, like a fixed-rate one), shutdown and
    ///   `shutdown_now` behave as for fixed-rate tasks, and the future is the same kind. A
    ///   [`reset`](crate::ScheduledFuture::reset) runs the next occurrence at the new time,
    ///   then the calendar goes on. [`delay`](crate::ScheduledFuture::delay) tells the time
    ///   to the next look at the clock (at most a minute), not to the next occurrence: ask
    ///   [`Cron::next_after`](crate::cron::Cron::next_after) for that.
    /// - An expression with no occurrence left (its years are past) ends the task: the
    ///   future gives `Ok(())`.
    ///
    /// [`ManualClock`]: crate::ManualClock
    /// [`MissedTicks`]: crate::MissedTicks
    ///
    /// # Errors
    ///
    /// [`ScheduleError::Shutdown`] or [`ScheduleError::Saturated`]; nothing was queued.
    ///
    /// # Examples
    ///
    /// A weekday job at 09:00 in New York, on a [`ManualClock`] whose wall clock starts on
    /// Friday 2026-01-02 at 08:59 EST: it runs a minute later, then not before Monday.
    ///
    /// ```
    /// use wheelpool::cron::Cron;
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::sync::{Arc, Mutex};
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let friday_0859_est = UNIX_EPOCH + Duration::from_secs(1_767_362_340);
    /// let clock = ManualClock::starting_at(friday_0859_est);
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let weekdays = Cron::parse("0 9 * * MON-FRI", "America/New_York").unwrap();
    /// let runs = Arc::new(Mutex::new(Vec::new()));
    /// let (log, c) = (runs.clone(), clock.clone());
    /// let task = pool.schedule_cron(move || log.lock().unwrap().push(c.system_time()), &weekdays).unwrap();
    ///
    /// clock.advance(Duration::from_secs(60));
    /// assert_eq!(*runs.lock().unwrap(), [friday_0859_est + Duration::from_secs(60)]);
    /// clock.advance(Duration::from_secs(2 * 24 * 3600)); // the weekend
    /// assert_eq!(runs.lock().unwrap().len(), 1);
    /// assert!(task.cancel());
    /// ```
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub fn schedule_cron<F>(
        &self,
        f: F,
        cron: &crate::cron::Cron,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() + Send + 'static,
    {
        self.task().schedule_cron(f, cron)
    }
}

impl Clone for Handle {
    /// A handle that does not keep the pool alive (also when cloning the pool's own).
    fn clone(&self) -> Self {
        Handle {
            core: self.core.downgrade(),
        }
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("alive", &self.core.is_alive())
            .finish()
    }
}

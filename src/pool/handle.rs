//! `Handle`: the scheduling methods, written once. `ScheduledThreadPool` dereferences to its
//! own handle (which owns the core); other handles refer to the core without keeping it alive.

use super::core::Core;
use super::future::ScheduledFuture;
use super::schedule::{self, Every};
use crate::error::ScheduleError;
use crate::sync::{Arc, Weak};
use crate::task::dynamic::CountFrom;
use crate::task::PeriodicOptions;
use std::fmt;
use std::time::{Duration, Instant};

/// The scheduling side of a pool: every scheduling method is written here once, and
/// [`ScheduledThreadPool`](crate::ScheduledThreadPool) dereferences to its own `Handle`, so `pool.schedule(..)` is
/// `Handle::schedule`.
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

/// The pool's own handle keeps the core alive; every other handle only refers to it.
enum CoreLink {
    Owner(Arc<Core>),
    Weak(Weak<Core>),
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

    fn with_core<R>(
        &self,
        f: impl FnOnce(&Arc<Core>) -> Result<R, ScheduleError>,
    ) -> Result<R, ScheduleError> {
        match &self.core {
            CoreLink::Owner(core) => f(core),
            CoreLink::Weak(weak) => match weak.upgrade() {
                Some(core) => f(&core),
                None => Err(ScheduleError::Shutdown),
            },
        }
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
        self.with_core(|core| schedule::execute(core, f))
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
        self.with_core(|core| {
            let when = schedule::after(core, delay);
            schedule::one_shot(core, f, when)
        })
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
        self.with_core(|core| {
            let when = schedule::at(core, at);
            schedule::one_shot(core, f, when)
        })
    }

    /// Runs `f` at `initial`, `initial + period`, `initial + 2 * period`, ... measured from
    /// this call, whatever the runs take (no drift). A run that overruns delays the next
    /// one; runs never overlap; missed runs follow the pool's [`MissedTicks`](crate::MissedTicks) policy
    /// (default `Burst`, like Java). Example: period 5 s, a run takes 2 s: the next starts
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
        self.schedule_at_fixed_rate_with(f, initial, period, PeriodicOptions::new())
    }

    // The four `*_with` twins (here and below) repeat their plain method's signature and
    // forward to one generic front each in `schedule.rs`: they are public API, and replacing them
    // by one options value is the API part of issue 22, not this internal pass. Until then the
    // repetition is deliberate; keep each twin a one-line forward.

    /// [`schedule_at_fixed_rate`](Self::schedule_at_fixed_rate) with per-task options
    /// (missed-run policy, surviving panics).
    ///
    /// # Errors
    ///
    /// As [`schedule_at_fixed_rate`](Self::schedule_at_fixed_rate).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{MissedTicks, PeriodicOptions, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let opts = PeriodicOptions::new().missed_ticks(MissedTicks::Skip).survive_panics(true);
    /// let f = pool.schedule_at_fixed_rate_with(|| (), Duration::from_secs(1), Duration::from_secs(1), opts).unwrap();
    /// assert!(f.cancel());
    /// ```
    pub fn schedule_at_fixed_rate_with<F>(
        &self,
        f: F,
        initial: Duration,
        period: Duration,
        opts: PeriodicOptions,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() + Send + 'static,
    {
        let every = Every::Rate(period);
        self.with_core(|core| schedule::periodic(core, f, initial, every, opts))
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
        self.schedule_with_fixed_delay_with(f, initial, delay, PeriodicOptions::new())
    }

    /// [`schedule_with_fixed_delay`](Self::schedule_with_fixed_delay) with per-task options
    /// (surviving panics; the missed-run policy does not apply to fixed delay).
    ///
    /// # Errors
    ///
    /// As [`schedule_with_fixed_delay`](Self::schedule_with_fixed_delay).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{PeriodicOptions, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let opts = PeriodicOptions::new().survive_panics(true);
    /// let f = pool.schedule_with_fixed_delay_with(|| (), Duration::from_secs(1), Duration::from_secs(1), opts).unwrap();
    /// assert!(f.cancel());
    /// ```
    pub fn schedule_with_fixed_delay_with<F>(
        &self,
        f: F,
        initial: Duration,
        delay: Duration,
        opts: PeriodicOptions,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() + Send + 'static,
    {
        let every = Every::Delay(delay);
        self.with_core(|core| schedule::periodic(core, f, initial, every, opts))
    }

    /// Runs `f` at `initial`, then again whenever its last run says: `f` returns
    /// `Some(delay)` for a next run `delay` after this run **returned**, or `None` to end the
    /// task, whose future then gives `Ok(())`. Retry loops with backoff, polling that slows
    /// down when idle. One future (and its [`CancelHandle`]) cancels the whole chain.
    ///
    /// Runs never overlap. A panicking run ends the task with [`TaskError::Panicked`]
    /// (see [`schedule_with_dynamic_delay_with`](Self::schedule_with_dynamic_delay_with) to
    /// survive panics); cancel and shutdown behave as for fixed-delay tasks.
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
    pub fn schedule_with_dynamic_delay<F>(
        &self,
        f: F,
        initial: Duration,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() -> Option<Duration> + Send + 'static,
    {
        self.schedule_with_dynamic_delay_with(f, initial, PeriodicOptions::new())
    }

    /// [`schedule_with_dynamic_delay`](Self::schedule_with_dynamic_delay) with per-task
    /// options. Only [`survive_panics`](PeriodicOptions::survive_panics) applies (the
    /// missed-run policy is for fixed-rate tasks): after a panicking run the task goes on
    /// with the delay `f` last returned (before any run returned one: `initial`).
    ///
    /// # Errors
    ///
    /// As [`schedule_with_dynamic_delay`](Self::schedule_with_dynamic_delay).
    ///
    /// # Examples
    ///
    /// The second run panics; the task survives and runs again 5 ms later, as the first
    /// run asked:
    ///
    /// ```
    /// use wheelpool::{ManualClock, PeriodicOptions, ScheduledThreadPool};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let pool = ScheduledThreadPool::builder()
    ///     .threads(1)
    ///     .clock(clock.clone())
    ///     .panic_handler(|_| {}) // expected
    ///     .build()
    ///     .unwrap();
    /// let runs = Arc::new(AtomicUsize::new(0));
    /// let r = runs.clone();
    /// let task = move || {
    ///     if r.fetch_add(1, Ordering::SeqCst) == 1 {
    ///         panic!("flaky");
    ///     }
    ///     Some(ms(5))
    /// };
    /// let opts = PeriodicOptions::new().survive_panics(true);
    /// let f = pool.schedule_with_dynamic_delay_with(task, ms(5), opts).unwrap();
    /// clock.advance(ms(15)); // runs at 5, 10 (panics) and 15 ms
    /// assert_eq!(runs.load(Ordering::SeqCst), 3);
    /// assert!(f.cancel());
    /// ```
    pub fn schedule_with_dynamic_delay_with<F>(
        &self,
        f: F,
        initial: Duration,
        opts: PeriodicOptions,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() -> Option<Duration> + Send + 'static,
    {
        let from = CountFrom::End;
        self.with_core(|core| schedule::dynamic(core, f, initial, from, opts))
    }

    /// Runs `f` at `initial`, then again whenever its last run says: `f` returns
    /// `Some(delay)` for a next run `delay` after this run's **planned start** (its deadline,
    /// so late dispatch does not drift the schedule), or `None` to end the task, whose
    /// future then gives `Ok(())`. A run that takes longer than the delay it returns makes
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
    pub fn schedule_at_dynamic_rate<F>(
        &self,
        f: F,
        initial: Duration,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() -> Option<Duration> + Send + 'static,
    {
        self.schedule_at_dynamic_rate_with(f, initial, PeriodicOptions::new())
    }

    /// [`schedule_at_dynamic_rate`](Self::schedule_at_dynamic_rate) with per-task options.
    /// Only [`survive_panics`](PeriodicOptions::survive_panics) applies: after a panicking
    /// run the task goes on with the delay `f` last returned (before any run returned one:
    /// `initial`), counted from that run's planned start.
    ///
    /// # Errors
    ///
    /// As [`schedule_at_dynamic_rate`](Self::schedule_at_dynamic_rate).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ManualClock, PeriodicOptions, ScheduledThreadPool, TaskError};
    /// use std::time::Duration;
    ///
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let pool = ScheduledThreadPool::builder()
    ///     .threads(1)
    ///     .clock(clock.clone())
    ///     .panic_handler(|_| {}) // expected
    ///     .build()
    ///     .unwrap();
    /// let opts = PeriodicOptions::new().survive_panics(false); // the default
    /// let f = pool
    ///     .schedule_at_dynamic_rate_with(|| -> Option<Duration> { panic!("bad probe") }, ms(1), opts)
    ///     .unwrap();
    /// clock.advance(ms(1));
    /// assert_eq!(f.join(), Err(TaskError::Panicked("bad probe".to_owned())));
    /// ```
    pub fn schedule_at_dynamic_rate_with<F>(
        &self,
        f: F,
        initial: Duration,
        opts: PeriodicOptions,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() -> Option<Duration> + Send + 'static,
    {
        let from = CountFrom::PlannedStart;
        self.with_core(|core| schedule::dynamic(core, f, initial, from, opts))
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
        self.with_core(|core| schedule::calendar(core, f, cron))
    }
}

impl Clone for Handle {
    /// A handle that does not keep the pool alive (also when cloning the pool's own).
    fn clone(&self) -> Self {
        let weak = match &self.core {
            CoreLink::Owner(core) => Arc::downgrade(core),
            CoreLink::Weak(weak) => weak.clone(),
        };
        Handle {
            core: CoreLink::Weak(weak),
        }
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let alive = match &self.core {
            CoreLink::Owner(_) => true,
            CoreLink::Weak(weak) => weak.strong_count() > 0,
        };
        f.debug_struct("Handle").field("alive", &alive).finish()
    }
}

//! The generic front of scheduling: build the task cell, then hand it to the one non-generic
//! `Core::submit`. Shared by `ScheduledThreadPool` and `Handle` through `scheduling_methods!`.

use super::core::Core;
use crate::error::ScheduleError;
use crate::future::ScheduledFuture;
use crate::sync::Arc;
use crate::task::dynamic::{CountFrom, Dynamic};
use crate::task::periodic::{Periodic, Plan};
use crate::task::{Job, OneShot, PeriodicOptions, TaskCell, TaskRef};
use crate::timer::duration_nanos;
use std::time::{Duration, Instant};

/// When a task is due, and the clock reading it was computed from (both in nanoseconds since
/// the pool's origin): one clock read per schedule call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct When {
    pub(crate) deadline: u64,
    pub(crate) now: u64,
}

/// Due `delay` from now.
pub(crate) fn after(core: &Core, delay: Duration) -> When {
    let now = core.timer.time.now_nanos();
    When {
        deadline: now.saturating_add(duration_nanos(delay)),
        now,
    }
}

/// Due at `at` on the pool's time line (an instant in the past is due now).
pub(crate) fn at(core: &Core, at: Instant) -> When {
    let time = &core.timer.time;
    When {
        deadline: time.nanos_of(at),
        now: time.now_nanos(),
    }
}

/// Due at once (`execute`): no clock read needed.
const NOW: When = When {
    deadline: 0,
    now: 0,
};

pub(crate) fn one_shot<F, T>(
    core: &Arc<Core>,
    f: F,
    when: When,
) -> Result<ScheduledFuture<T>, ScheduleError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    submit_job(core, OneShot::new(f), when)
}

/// Builds the task cell for `job`, hands it to the non-generic `Core::submit`, and wraps the
/// cell in the caller's future: the one tail every scheduling method shares.
pub(crate) fn submit_job<J: Job>(
    core: &Arc<Core>,
    job: J,
    when: When,
) -> Result<ScheduledFuture<J::Output>, ScheduleError> {
    let cell = Arc::new(TaskCell::new(job, when.deadline, core.timer.home_shard()));
    let raw: TaskRef = cell.clone();
    core.submit(&raw, when.now)?;
    Ok(ScheduledFuture::new(cell, core.clone()))
}

pub(crate) fn execute<F>(core: &Arc<Core>, f: F) -> Result<(), ScheduleError>
where
    F: FnOnce() + Send + 'static,
{
    // Due now: it never enters a wheel, so any shard will do.
    let raw: TaskRef = Arc::new(TaskCell::new(OneShot::new(f), NOW.deadline, 0));
    core.submit(&raw, NOW.now)
}

/// Which kind of periodic task.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Every {
    Rate(Duration),
    Delay(Duration),
}

pub(crate) fn periodic<F>(
    core: &Arc<Core>,
    f: F,
    initial: Duration,
    every: Every,
    opts: PeriodicOptions,
) -> Result<ScheduledFuture<()>, ScheduleError>
where
    F: FnMut() + Send + 'static,
{
    let first = after(core, initial);
    let plan = match every {
        Every::Rate(period) if !period.is_zero() => Plan::Rate {
            period: duration_nanos(period),
            planned: first.deadline,
            missed: opts.missed_ticks_policy().unwrap_or(core.missed_ticks),
        },
        Every::Delay(delay) if !delay.is_zero() => Plan::Delay {
            delay: duration_nanos(delay),
        },
        _ => return Err(ScheduleError::ZeroPeriod),
    };
    submit_job(core, Periodic::new(f, plan, opts.survives_panics()), first)
}

pub(crate) fn dynamic<F>(
    core: &Arc<Core>,
    f: F,
    initial: Duration,
    from: CountFrom,
    opts: PeriodicOptions,
) -> Result<ScheduledFuture<()>, ScheduleError>
where
    F: FnMut() -> Option<Duration> + Send + 'static,
{
    let first = after(core, initial);
    let job = Dynamic::new(
        f,
        from,
        first.deadline,
        duration_nanos(initial),
        opts.survives_panics(),
    );
    submit_job(core, job, first)
}

/// The scheduling methods of `ScheduledThreadPool` and `Handle`: one text, two types. The type
/// provides `fn with_core<R>(&self, f: impl FnOnce(&Arc<Core>) -> Result<R, ScheduleError>)`.
macro_rules! scheduling_methods {
    () => {
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
            self.with_core(|core| $crate::pool::submit::execute(core, f))
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
        pub fn schedule<F, T>(
            &self,
            f: F,
            delay: Duration,
        ) -> Result<ScheduledFuture<T>, ScheduleError>
        where
            F: FnOnce() -> T + Send + 'static,
            T: Send + 'static,
        {
            self.with_core(|core| {
                let when = $crate::pool::submit::after(core, delay);
                $crate::pool::submit::one_shot(core, f, when)
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
        pub fn schedule_at<F, T>(
            &self,
            f: F,
            at: Instant,
        ) -> Result<ScheduledFuture<T>, ScheduleError>
        where
            F: FnOnce() -> T + Send + 'static,
            T: Send + 'static,
        {
            self.with_core(|core| {
                let when = $crate::pool::submit::at(core, at);
                $crate::pool::submit::one_shot(core, f, when)
            })
        }

        /// Runs `f` at `initial`, `initial + period`, `initial + 2 * period`, ... measured from
        /// this call, whatever the runs take (no drift). A run that overruns delays the next
        /// one; runs never overlap; missed runs follow the pool's [`MissedTicks`] policy
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
            let every = $crate::pool::submit::Every::Rate(period);
            self.with_core(|core| $crate::pool::submit::periodic(core, f, initial, every, opts))
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
            let every = $crate::pool::submit::Every::Delay(delay);
            self.with_core(|core| $crate::pool::submit::periodic(core, f, initial, every, opts))
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
            let from = $crate::task::dynamic::CountFrom::End;
            self.with_core(|core| $crate::pool::submit::dynamic(core, f, initial, from, opts))
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
            let from = $crate::task::dynamic::CountFrom::PlannedStart;
            self.with_core(|core| $crate::pool::submit::dynamic(core, f, initial, from, opts))
        }
    };
}
pub(crate) use scheduling_methods;

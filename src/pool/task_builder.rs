//! `TaskBuilder`: per-task options, one way for every kind of task.

use super::future::ScheduledFuture;
use super::link::CoreLink;
use super::schedule::{self, Every};
use crate::error::ScheduleError;
use crate::sync::Arc;
use crate::task::dynamic::CountFrom;
use crate::task::{MissedTicks, NextRun, Options};
use std::fmt;
use std::time::{Duration, Instant};

/// Options for one task, then the scheduling method: returned by [`Handle::task`](crate::Handle::task) (and so by
/// `pool.task()`).
///
/// ```text
/// pool.task().name("heartbeat").survive_panics(true).schedule_at_fixed_rate(beat, init, period)
/// ```
///
/// Every scheduling method of [`Handle`](crate::Handle) is here too, with the same arguments and the same
/// rules; `Handle`'s own are these with no options. Options that do not apply to a kind of
/// task are ignored by it (each setter says where it applies).
///
/// Why a builder and not an options argument: the plain methods keep their short signatures
/// (the common case passes no options), an options argument would need a second copy of each
/// method (a `_with` twin) or an argument every caller fills with `Default::default()`, and
/// a new option later is one more setter here, not a new method for every kind of task. The
/// builder is `Clone`, so one set of options serves many tasks (a clone shares the name's text).
///
/// # Examples
///
/// ```
/// use wheelpool::{ScheduledThreadPool, TaskKind};
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let timeouts = pool.task().name("rpc-timeout");
/// let a = timeouts.clone().schedule(|| "a timed out", Duration::from_secs(30)).unwrap();
/// let b = timeouts.schedule(|| "b timed out", Duration::from_secs(30)).unwrap();
/// for task in pool.shutdown_now() {
///     assert_eq!((task.name(), task.kind()), (Some("rpc-timeout"), TaskKind::OneShot));
/// }
/// assert!(a.is_cancelled() && b.is_cancelled());
/// ```
#[derive(Clone)]
#[must_use = "a TaskBuilder schedules nothing until one of its schedule methods is called"]
pub struct TaskBuilder<'h> {
    /// The handle's link to the core (the builder borrows the handle it came from).
    link: &'h CoreLink,
    opts: Options,
}

impl<'h> TaskBuilder<'h> {
    pub(super) fn new(link: &'h CoreLink) -> Self {
        TaskBuilder {
            link,
            opts: Options::default(),
        }
    }

    /// Names the task: [`PendingTask::name`](crate::PendingTask::name), the `Debug` of its
    /// future and [`CancelHandle`](crate::CancelHandle), and
    /// [`TaskInfo::panicking`](crate::TaskInfo::panicking) in the pool's panic handler show it.
    /// Any kind of task. Unnamed by default; a name costs one allocation per builder (clones
    /// share it).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.task().name("cache-sweep").schedule(|| (), Duration::from_secs(60)).unwrap();
    /// assert!(format!("{f:?}").contains(r#"name: Some("cache-sweep")"#));
    /// assert_eq!(pool.shutdown_now()[0].name(), Some("cache-sweep"));
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.opts.name = Some(Arc::new(name.into()));
        self
    }

    /// The missed-run policy for this task, overriding the pool's
    /// [`Builder::missed_ticks`](crate::Builder::missed_ticks). Fixed rate only (other kinds
    /// never miss a slot of a grid: they have none).
    ///
    /// # Examples
    ///
    /// The pool replays missed runs (`Burst`, the default), this task skips them. Period 10 ms,
    /// first run at 10 ms; that run overruns to 45 ms (it moves the clock itself), so the 20,
    /// 30 and 40 ms slots are missed and the next run is at 50 ms:
    ///
    /// ```
    /// use wheelpool::{ManualClock, MissedTicks, ScheduledThreadPool};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let runs = Arc::new(AtomicUsize::new(0));
    /// let (r, c) = (runs.clone(), clock.clone());
    /// let task = move || {
    ///     if r.fetch_add(1, Ordering::SeqCst) == 0 {
    ///         c.advance(ms(35)); // the first run "takes" 35 ms
    ///     }
    /// };
    /// let beat = pool.task().missed_ticks(MissedTicks::Skip).schedule_at_fixed_rate(task, ms(10), ms(10)).unwrap();
    /// clock.advance(ms(10)); // to 45 ms, through the overrun
    /// assert_eq!(runs.load(Ordering::SeqCst), 1, "Burst would have run 20, 30 and 40 ms too");
    /// clock.advance(ms(5));
    /// assert_eq!(runs.load(Ordering::SeqCst), 2); // the 50 ms slot
    /// assert!(beat.cancel());
    /// ```
    pub fn missed_ticks(mut self, policy: MissedTicks) -> Self {
        self.opts.missed = Some(policy);
        self
    }

    /// Keep running after a run panics (each panic still goes to the pool's panic handler).
    /// Periodic tasks only (fixed rate or delay, dynamic); a one-shot that panics has no run
    /// left. Heartbeat loops usually want this; the default (`false`) stops the task, like
    /// Java. A dynamic task goes on with the delay its closure last returned (before any run
    /// returned one: the initial delay).
    ///
    /// # Examples
    ///
    /// A heartbeat whose every other run panics keeps beating; without the option the first
    /// panic ends it:
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool, TaskError};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let ms = Duration::from_millis;
    /// let clock = ManualClock::new();
    /// let pool = ScheduledThreadPool::builder()
    ///     .threads(1)
    ///     .clock(clock.clone())
    ///     .panic_handler(|_| {}) // panics are expected here
    ///     .build()
    ///     .unwrap();
    /// let flaky = |runs: Arc<AtomicUsize>| {
    ///     move || {
    ///         if runs.fetch_add(1, Ordering::SeqCst) % 2 == 0 {
    ///             panic!("flaky beat");
    ///         }
    ///     }
    /// };
    /// let (tough, fragile) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    /// let t = pool.task().survive_panics(true).schedule_at_fixed_rate(flaky(tough.clone()), ms(10), ms(10)).unwrap();
    /// let f = pool.schedule_at_fixed_rate(flaky(fragile.clone()), ms(10), ms(10)).unwrap();
    ///
    /// clock.advance(ms(40));
    /// assert_eq!(tough.load(Ordering::SeqCst), 4); // 10, 20, 30, 40 ms, two of them panicked
    /// assert!(!t.is_done());
    /// assert_eq!(fragile.load(Ordering::SeqCst), 1);
    /// assert_eq!(f.join(), Err(TaskError::Panicked("flaky beat".to_owned())));
    /// assert!(t.cancel());
    /// ```
    pub fn survive_panics(mut self, yes: bool) -> Self {
        self.opts.survive_panics = yes;
        self
    }

    // The scheduling methods below are alike on purpose: each is one public signature and its
    // docs around one call into `schedule`, where the work is written once. Their likeness is
    // the API's shape (one method per kind of task, as DESIGN.md lists them), not logic twice.

    /// [`Handle::execute`](crate::Handle::execute) with these options.
    ///
    /// # Errors
    ///
    /// As [`Handle::execute`](crate::Handle::execute).
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// pool.task().name("warm-up").execute(|| ()).unwrap();
    /// ```
    pub fn execute<F>(self, f: F) -> Result<(), ScheduleError>
    where
        F: FnOnce() + Send + 'static,
    {
        let opts = self.opts;
        self.link.with_core(|core| schedule::execute(core, f, opts))
    }

    /// [`Handle::schedule`](crate::Handle::schedule) with these options.
    ///
    /// # Errors
    ///
    /// As [`Handle::schedule`](crate::Handle::schedule).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.task().name("answer").schedule(|| 42, Duration::ZERO).unwrap();
    /// assert_eq!(f.join(), Ok(42));
    /// ```
    pub fn schedule<F, T>(self, f: F, delay: Duration) -> Result<ScheduledFuture<T>, ScheduleError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let opts = self.opts;
        self.link.with_core(|core| {
            let when = schedule::after(core, delay);
            schedule::one_shot(core, f, when, opts)
        })
    }

    /// [`Handle::schedule_at`](crate::Handle::schedule_at) with these options.
    ///
    /// # Errors
    ///
    /// As [`Handle::schedule_at`](crate::Handle::schedule_at).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let f = pool.task().name("soon").schedule_at(|| 1, Instant::now()).unwrap();
    /// assert_eq!(f.join(), Ok(1));
    /// ```
    pub fn schedule_at<F, T>(self, f: F, at: Instant) -> Result<ScheduledFuture<T>, ScheduleError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let opts = self.opts;
        self.link.with_core(|core| {
            let when = schedule::at(core, at);
            schedule::one_shot(core, f, when, opts)
        })
    }

    /// [`Handle::schedule_at_fixed_rate`](crate::Handle::schedule_at_fixed_rate) with these options.
    ///
    /// # Errors
    ///
    /// As [`Handle::schedule_at_fixed_rate`](crate::Handle::schedule_at_fixed_rate).
    ///
    /// # Examples
    ///
    /// See [`missed_ticks`](Self::missed_ticks) and [`survive_panics`](Self::survive_panics).
    pub fn schedule_at_fixed_rate<F>(
        self,
        f: F,
        initial: Duration,
        period: Duration,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() + Send + 'static,
    {
        let (opts, every) = (self.opts, Every::Rate(period));
        self.link
            .with_core(|core| schedule::periodic(core, f, initial, every, opts))
    }

    /// [`Handle::schedule_with_fixed_delay`](crate::Handle::schedule_with_fixed_delay) with these options.
    ///
    /// # Errors
    ///
    /// As [`Handle::schedule_with_fixed_delay`](crate::Handle::schedule_with_fixed_delay).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let pool = wheelpool::ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let second = Duration::from_secs(1);
    /// let poll = pool.task().name("poll").survive_panics(true).schedule_with_fixed_delay(|| (), second, second).unwrap();
    /// assert!(poll.cancel());
    /// ```
    pub fn schedule_with_fixed_delay<F>(
        self,
        f: F,
        initial: Duration,
        delay: Duration,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() + Send + 'static,
    {
        let (opts, every) = (self.opts, Every::Delay(delay));
        self.link
            .with_core(|core| schedule::periodic(core, f, initial, every, opts))
    }

    /// [`Handle::schedule_with_dynamic_delay`](crate::Handle::schedule_with_dynamic_delay) with these options.
    ///
    /// # Errors
    ///
    /// As [`Handle::schedule_with_dynamic_delay`](crate::Handle::schedule_with_dynamic_delay).
    ///
    /// # Examples
    ///
    /// The second run panics; the task survives and runs again 5 ms later, as the first
    /// run asked:
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
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
    /// let f = pool.task().survive_panics(true).schedule_with_dynamic_delay(task, ms(5)).unwrap();
    /// clock.advance(ms(15)); // runs at 5, 10 (panics) and 15 ms
    /// assert_eq!(runs.load(Ordering::SeqCst), 3);
    /// assert!(f.cancel());
    /// ```
    pub fn schedule_with_dynamic_delay<F, R>(
        self,
        f: F,
        initial: Duration,
    ) -> Result<ScheduledFuture<R::Output>, ScheduleError>
    where
        F: FnMut() -> R + Send + 'static,
        R: NextRun,
    {
        let (opts, from) = (self.opts, CountFrom::End);
        self.link
            .with_core(|core| schedule::dynamic(core, f, initial, from, opts))
    }

    /// [`Handle::schedule_at_dynamic_rate`](crate::Handle::schedule_at_dynamic_rate) with these options.
    ///
    /// # Errors
    ///
    /// As [`Handle::schedule_at_dynamic_rate`](crate::Handle::schedule_at_dynamic_rate).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool, TaskError};
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
    /// let f = pool
    ///     .task()
    ///     .name("probe")
    ///     .schedule_at_dynamic_rate(|| -> Option<Duration> { panic!("bad probe") }, ms(1))
    ///     .unwrap();
    /// clock.advance(ms(1));
    /// assert_eq!(f.join(), Err(TaskError::Panicked("bad probe".to_owned())));
    /// ```
    pub fn schedule_at_dynamic_rate<F, R>(
        self,
        f: F,
        initial: Duration,
    ) -> Result<ScheduledFuture<R::Output>, ScheduleError>
    where
        F: FnMut() -> R + Send + 'static,
        R: NextRun,
    {
        let (opts, from) = (self.opts, CountFrom::PlannedStart);
        self.link
            .with_core(|core| schedule::dynamic(core, f, initial, from, opts))
    }

    /// [`Handle::schedule_cron`](crate::Handle::schedule_cron) with these options (feature
    /// `cron`): the missed-run policy applies to missed occurrences, as there.
    ///
    /// # Errors
    ///
    /// As [`Handle::schedule_cron`](crate::Handle::schedule_cron).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cron::Cron;
    /// use wheelpool::{MissedTicks, ScheduledThreadPool, TaskKind};
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let nightly = Cron::parse("0 3 * * *", "Europe/Paris").unwrap();
    /// let f = pool.task().name("nightly").missed_ticks(MissedTicks::Skip).schedule_cron(|| (), &nightly).unwrap();
    /// let pending = pool.shutdown_now();
    /// assert_eq!((pending[0].name(), pending[0].kind()), (Some("nightly"), TaskKind::Cron));
    /// assert!(f.is_cancelled());
    /// ```
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub fn schedule_cron<F>(
        self,
        f: F,
        cron: &crate::cron::Cron,
    ) -> Result<ScheduledFuture<()>, ScheduleError>
    where
        F: FnMut() + Send + 'static,
    {
        let opts = self.opts;
        self.link
            .with_core(|core| schedule::calendar(core, f, cron, opts))
    }
}

impl fmt::Debug for TaskBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskBuilder")
            .field("name", &self.opts.name.as_deref().map(String::as_str))
            .field("missed_ticks", &self.opts.missed)
            .field("survive_panics", &self.opts.survive_panics)
            .finish()
    }
}

//! `Builder`: configure and start a pool.

use super::config::Config;
use super::core::{Core, Parts};
use super::threads::{self, ThreadHooks};
use super::ScheduledThreadPool;
use crate::error::BuildError;
use crate::panic::PanicHandler;
use crate::sync::Arc;
use crate::task::MissedTicks;
use crate::timer::{Clock, Keep, ManualClock};
use std::any::Any;
use std::fmt;
use std::time::Duration;

mod shutdown_policy;

/// The default tick: deadlines keep their microsecond. The timer side batches dense expirations
/// by its adaptive slack instead of by a coarse tick (see the crate docs on lateness).
const DEFAULT_TICK: Duration = Duration::from_micros(1);

/// Configures a [`ScheduledThreadPool`]. Setters take and return the builder by value.
///
/// # Examples
///
/// ```
/// use wheelpool::{ManualClock, MissedTicks, ScheduledThreadPool};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// let panics = Arc::new(AtomicUsize::new(0));
/// let seen = panics.clone();
/// let pool = ScheduledThreadPool::builder()
///     .threads(2)
///     .thread_name("heartbeat")
///     .tick(Duration::from_millis(1))
///     .max_pending(100_000)
///     .missed_ticks(MissedTicks::Skip)
///     .panic_handler(move |_payload| { seen.fetch_add(1, Ordering::SeqCst); })
///     .clock(ManualClock::new())
///     .build()
///     .unwrap();
/// pool.execute(|| panic!("caught")).unwrap();
/// pool.shutdown();
/// assert!(pool.await_termination(Duration::from_secs(10)));
/// assert_eq!(panics.load(Ordering::SeqCst), 1);
/// ```
#[must_use = "a Builder does nothing until build() is called"]
pub struct Builder {
    threads: Option<usize>,
    name: String,
    tick: Duration,
    max_pending: Option<usize>,
    panic_handler: Option<PanicHandler>,
    clock: Option<ManualClock>,
    missed_ticks: MissedTicks,
    keep_at_shutdown: Keep,
    hooks: ThreadHooks,
}

impl Builder {
    /// The most worker threads a pool may have. Far above the CPU count of any machine today
    /// (large servers have a few hundred hardware threads), so it refuses only mistakes such as
    /// `threads(usize::MAX)`, whose per-worker queues could not even be allocated. It also
    /// bounds the work of an idle worker's search, which visits every sibling's deque.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{Builder, ScheduledThreadPool};
    ///
    /// assert_eq!(Builder::MAX_THREADS, 4096);
    /// let too_many = ScheduledThreadPool::builder().threads(Builder::MAX_THREADS + 1).build();
    /// assert!(too_many.unwrap_err().is_invalid_config());
    /// ```
    pub const MAX_THREADS: usize = 4096;

    /// The finest tick: 1 ns, i.e. any tick greater than zero. The wheel's eleven levels of
    /// 64 slots span every `u64` tick count, so even a nanosecond tick is correct; it only
    /// costs more cascading, with no gain below the tens of microseconds an operating system
    /// can actually sleep (Linux adds 50 us of timer slack by default). Zero is refused: a
    /// deadline cannot round up to a tick of no length.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{Builder, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// assert_eq!(Builder::MIN_TICK, Duration::from_nanos(1));
    /// assert!(ScheduledThreadPool::builder().threads(1).tick(Builder::MIN_TICK).build().is_ok());
    /// let err = ScheduledThreadPool::builder().tick(Duration::ZERO).build().unwrap_err();
    /// assert!(err.is_invalid_config());
    /// ```
    pub const MIN_TICK: Duration = Duration::from_nanos(1);

    /// The coarsest tick: 1 s. Every delay rounds up to a whole tick, so a coarser tick would
    /// make a 1 ms task wait a second or more: the pool is for sub-second timers. (Before this
    /// bound, `tick(Duration::MAX)` was accepted and a 1 ms task then never ran.)
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{Builder, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// assert_eq!(Builder::MAX_TICK, Duration::from_secs(1));
    /// assert!(ScheduledThreadPool::builder().threads(1).tick(Builder::MAX_TICK).build().is_ok());
    /// let err = ScheduledThreadPool::builder().tick(Duration::from_secs(2)).build().unwrap_err();
    /// assert!(err.is_invalid_config());
    /// ```
    pub const MAX_TICK: Duration = Duration::from_secs(1);

    /// The defaults: one worker per CPU, names `wheelpool-worker-N`, 1 us tick, no bound on
    /// pending tasks, no panic handler, the system clock, `MissedTicks::Burst`, Java's graceful
    /// shutdown (waiting one-shots run, periodic tasks stop). Same as
    /// [`ScheduledThreadPool::builder`].
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::Builder;
    /// use std::time::Duration;
    ///
    /// let pool = Builder::new().threads(1).build().unwrap();
    /// let name = pool
    ///     .schedule(|| std::thread::current().name().map(String::from), Duration::ZERO)
    ///     .unwrap();
    /// assert_eq!(name.join(), Ok(Some("wheelpool-worker-0".to_owned())));
    /// ```
    pub fn new() -> Self {
        Builder {
            threads: None,
            name: "wheelpool-worker".to_owned(),
            tick: DEFAULT_TICK,
            max_pending: None,
            panic_handler: None,
            clock: None,
            missed_ticks: MissedTicks::Burst,
            keep_at_shutdown: Keep::DEFAULT,
            hooks: ThreadHooks::default(),
        }
    }

    /// Number of worker threads, from 1 to [`MAX_THREADS`](Self::MAX_THREADS); `build`
    /// refuses anything else with a [`BuildError`]. The timer thread is extra. Unset, the pool
    /// has one worker per CPU (at most `MAX_THREADS`).
    ///
    /// # Examples
    ///
    /// Two workers run two tasks at the same time: each task waits for the other to start.
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    /// let (to_b, from_a) = mpsc::channel();
    /// let (to_a, from_b) = mpsc::channel();
    /// let wait = Duration::from_secs(30); // only reached if the two never overlap
    /// let a = pool
    ///     .schedule(move || { to_b.send(()).unwrap(); from_b.recv_timeout(wait).is_ok() }, Duration::ZERO)
    ///     .unwrap();
    /// let b = pool
    ///     .schedule(move || { to_a.send(()).unwrap(); from_a.recv_timeout(wait).is_ok() }, Duration::ZERO)
    ///     .unwrap();
    /// assert_eq!(a.join(), Ok(true));
    /// assert_eq!(b.join(), Ok(true));
    ///
    /// let err = ScheduledThreadPool::builder().threads(0).build().unwrap_err();
    /// assert!(err.is_invalid_config());
    /// let err = ScheduledThreadPool::builder().threads(1 << 40).build().unwrap_err();
    /// assert!(err.to_string().contains("at most 4096"), "{err}");
    /// ```
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }

    /// Prefix of thread names: workers are `PREFIX-0`, `PREFIX-1`, ...; the timer thread is
    /// `PREFIX-timer`.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).thread_name("ticker").build().unwrap();
    /// let name = pool
    ///     .schedule(|| std::thread::current().name().map(String::from), Duration::ZERO)
    ///     .unwrap();
    /// assert_eq!(name.join(), Ok(Some("ticker-0".to_owned())));
    /// ```
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.name = prefix.into();
        self
    }

    /// The wheel's tick, from [`MIN_TICK`](Self::MIN_TICK) (1 ns) to
    /// [`MAX_TICK`](Self::MAX_TICK) (1 s); `build` refuses anything else with a [`BuildError`].
    /// Deadlines round up to it. The default, 1 us, keeps them practically exact: the timer
    /// side batches dense expirations by an adaptive slack (up to 1 ms less the tick; see the
    /// crate docs on lateness), not by rounding. A coarser tick rounds every deadline up and
    /// batches by that; a tick of 1 ms or more adds no slack (the behaviour of releases that
    /// defaulted to 1 ms).
    ///
    /// # Examples
    ///
    /// With a 10 ms tick, a 1 ms delay waits for the first tick boundary, at 10 ms:
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let start = clock.now();
    /// let pool = ScheduledThreadPool::builder()
    ///     .threads(1)
    ///     .tick(Duration::from_millis(10))
    ///     .clock(clock.clone())
    ///     .build()
    ///     .unwrap();
    /// let c = clock.clone();
    /// let f = pool.schedule(move || c.now() - start, Duration::from_millis(1)).unwrap();
    /// clock.advance(Duration::from_millis(5));
    /// assert!(!f.is_done(), "rounded up to the 10 ms tick, not run at 1 ms");
    /// clock.advance(Duration::from_millis(5));
    /// assert_eq!(f.join(), Ok(Duration::from_millis(10)));
    ///
    /// let err = ScheduledThreadPool::builder().tick(Duration::ZERO).build().unwrap_err();
    /// assert!(err.is_invalid_config());
    /// let err = ScheduledThreadPool::builder().tick(Duration::MAX).build().unwrap_err();
    /// assert!(err.to_string().contains("at most 1s"), "{err}");
    /// ```
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// At most `n` tasks waiting to run; past it, scheduling fails with
    /// [`ScheduleError::Saturated`](crate::ScheduleError::Saturated). Periodic tasks already
    /// admitted are never refused a re-arm.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ScheduleError, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).max_pending(2).build().unwrap();
    /// let hour = Duration::from_secs(3600);
    /// let first = pool.schedule(|| 1, hour).unwrap();
    /// let _second = pool.schedule(|| 2, hour).unwrap();
    /// assert_eq!(
    ///     pool.schedule(|| 3, hour).unwrap_err(),
    ///     ScheduleError::Saturated { max_pending: 2 }
    /// );
    /// assert!(first.cancel()); // frees a place at once
    /// assert!(pool.schedule(|| 3, hour).is_ok());
    /// ```
    pub fn max_pending(mut self, n: usize) -> Self {
        self.max_pending = Some(n);
        self
    }

    /// Called with the payload of every panic in a task (also panics that end a future as
    /// `Panicked`). It runs on the worker; a panic inside the handler is caught and dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{ScheduledThreadPool, TaskError};
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    ///
    /// let (tx, rx) = mpsc::channel();
    /// let pool = ScheduledThreadPool::builder()
    ///     .threads(1)
    ///     .panic_handler(move |payload| {
    ///         let msg = payload.downcast_ref::<&str>().copied().unwrap_or("?");
    ///         tx.send(msg.to_owned()).unwrap();
    ///     })
    ///     .build()
    ///     .unwrap();
    /// let f = pool.schedule(|| -> u32 { panic!("boom") }, Duration::ZERO).unwrap();
    /// assert_eq!(f.join(), Err(TaskError::Panicked("boom".to_owned())));
    /// assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), "boom");
    /// ```
    pub fn panic_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(Box<dyn Any + Send>) + Send + Sync + 'static,
    {
        self.panic_handler = Some(Box::new(handler));
        self
    }

    /// Measures time on `clock` instead of the system clock (for tests: see [`ManualClock`]).
    ///
    /// # Examples
    ///
    /// An hour passes in no time:
    ///
    /// ```
    /// use wheelpool::{ManualClock, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
    /// let f = pool.schedule(|| "an hour later", Duration::from_secs(3600)).unwrap();
    /// clock.advance(Duration::from_secs(3599));
    /// assert!(!f.is_done());
    /// clock.advance(Duration::from_secs(1));
    /// assert!(f.is_done());
    /// assert_eq!(f.join(), Ok("an hour later"));
    /// ```
    pub fn clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The pool's default [`MissedTicks`] policy for fixed-rate tasks. A task can override it
    /// with [`TaskBuilder::missed_ticks`](crate::TaskBuilder::missed_ticks).
    ///
    /// # Examples
    ///
    /// Period 10 ms, first run at 10 ms; that run overruns to 45 ms (it moves the clock
    /// itself). `Burst` replays the missed 20, 30 and 40 ms runs at once, `Skip` waits for the
    /// 50 ms slot, `Delay` re-bases the grid and waits until 55 ms:
    ///
    /// ```
    /// use wheelpool::{ManualClock, MissedTicks, ScheduledThreadPool};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// // Runs counted at 45 ms (just after the overrun) and at 50 ms.
    /// fn runs_with(policy: MissedTicks) -> (usize, usize) {
    ///     let ms = Duration::from_millis;
    ///     let clock = ManualClock::new();
    ///     let pool = ScheduledThreadPool::builder()
    ///         .threads(1)
    ///         .clock(clock.clone())
    ///         .missed_ticks(policy)
    ///         .build()
    ///         .unwrap();
    ///     let runs = Arc::new(AtomicUsize::new(0));
    ///     let (r, c) = (runs.clone(), clock.clone());
    ///     let task = move || {
    ///         if r.fetch_add(1, Ordering::SeqCst) == 0 {
    ///             c.advance(ms(35)); // the first run "takes" 35 ms
    ///         }
    ///     };
    ///     let _beat = pool.schedule_at_fixed_rate(task, ms(10), ms(10)).unwrap();
    ///     clock.advance(ms(10)); // the first run, and whatever became due during it
    ///     let at_45 = runs.load(Ordering::SeqCst);
    ///     clock.advance(ms(5));
    ///     (at_45, runs.load(Ordering::SeqCst))
    /// }
    ///
    /// assert_eq!(runs_with(MissedTicks::Burst), (4, 5)); // 10, 20, 30, 40, then 50
    /// assert_eq!(runs_with(MissedTicks::Skip), (1, 2)); // 10, then 50
    /// assert_eq!(runs_with(MissedTicks::Delay), (1, 1)); // 10, then 55
    /// ```
    // The example mirrors `TaskBuilder::missed_ticks`' on purpose: the same policy, set for
    // the pool here and for one task there; each public item carries its own example.
    pub fn missed_ticks(mut self, policy: MissedTicks) -> Self {
        self.missed_ticks = policy;
        self
    }

    /// Runs `hook` on each worker thread once, before that worker takes any task: per-thread
    /// setup such as a logging context, a metrics registry or CPU affinity. The timer thread
    /// runs no hook (it never runs user code). A hook that blocks keeps `build` from returning.
    ///
    /// If the hook panics on any worker, `build` fails with a [`BuildError`] for which
    /// [`is_thread_start_panic`](BuildError::is_thread_start_panic) is true, carrying the
    /// panic's message; the pool is stopped and its threads joined before `build` returns,
    /// and a worker whose start hook panicked runs no stop hook.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::cell::Cell;
    /// use std::time::Duration;
    ///
    /// thread_local!(static REQUEST_LOG: Cell<&'static str> = const { Cell::new("unset") });
    ///
    /// let pool = ScheduledThreadPool::builder()
    ///     .threads(2)
    ///     .on_thread_start(|| REQUEST_LOG.with(|l| l.set("per-worker log")))
    ///     .build()
    ///     .unwrap();
    /// let seen = pool.schedule(|| REQUEST_LOG.with(|l| l.get()), Duration::ZERO).unwrap();
    /// assert_eq!(seen.join(), Ok("per-worker log"));
    ///
    /// let err = ScheduledThreadPool::builder()
    ///     .threads(2)
    ///     .on_thread_start(|| panic!("no config file"))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.is_thread_start_panic());
    /// assert_eq!(err.panic_message(), Some("no config file"));
    /// ```
    pub fn on_thread_start<F>(mut self, hook: F) -> Self
    where
        F: Fn() + Send + Sync + 'static,
    {
        self.hooks.start = Some(Arc::new(hook));
        self
    }

    /// Runs `hook` on each worker thread as it exits (after its last task, at shutdown or
    /// when the pool is dropped): per-thread teardown, such as flushing a thread's metrics.
    /// Every stop hook has run once [`await_termination`](ScheduledThreadPool::await_termination)
    /// returns true, or once a dropped pool has joined its threads.
    ///
    /// A panic in the hook is caught: the worker still exits normally and shutdown does not
    /// hang. The payload goes to the [`panic_handler`](Self::panic_handler) if there is one
    /// (it is not counted in [`PoolStats::panicked`](crate::PoolStats::panicked), which counts
    /// task runs), else it is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::ScheduledThreadPool;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let stopped = Arc::new(AtomicUsize::new(0));
    /// let s = stopped.clone();
    /// let pool = ScheduledThreadPool::builder()
    ///     .threads(3)
    ///     .on_thread_stop(move || { s.fetch_add(1, Ordering::SeqCst); })
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(stopped.load(Ordering::SeqCst), 0);
    /// pool.shutdown();
    /// assert!(pool.await_termination(Duration::from_secs(10)));
    /// assert_eq!(stopped.load(Ordering::SeqCst), 3); // once per worker
    /// ```
    pub fn on_thread_stop<F>(mut self, hook: F) -> Self
    where
        F: Fn() + Send + Sync + 'static,
    {
        self.hooks.stop = Some(Arc::new(hook));
        self
    }

    /// Starts the timer thread and the workers and returns the running pool; it blocks only
    /// while the threads are spawned.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] for a thread count outside `1..=`[`MAX_THREADS`](Self::MAX_THREADS), a
    /// tick outside [`MIN_TICK`](Self::MIN_TICK)`..=`[`MAX_TICK`](Self::MAX_TICK), a zero
    /// `max_pending`, when a thread cannot be started, or when an
    /// [`on_thread_start`](Self::on_thread_start) hook panics (the threads already started are
    /// stopped and joined first).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::{BuildError, ScheduledThreadPool};
    /// use std::time::Duration;
    ///
    /// let pool = ScheduledThreadPool::builder().threads(2).build()?;
    /// assert_eq!(pool.schedule(|| 6 * 7, Duration::ZERO).unwrap().join(), Ok(42));
    ///
    /// let err = ScheduledThreadPool::builder().threads(0).build().unwrap_err();
    /// assert!(err.is_invalid_config());
    /// assert_eq!(err.to_string(), "threads must be at least 1 and at most 4096 (got 0)");
    /// # Ok::<(), BuildError>(())
    /// ```
    pub fn build(self) -> Result<ScheduledThreadPool, BuildError> {
        let threads = self
            .threads
            .unwrap_or_else(|| num_cpus::get().clamp(1, Self::MAX_THREADS));
        if !(1..=Self::MAX_THREADS).contains(&threads) {
            return Err(BuildError::threads_out_of_range(threads, Self::MAX_THREADS));
        }
        if !(Self::MIN_TICK..=Self::MAX_TICK).contains(&self.tick) {
            let (min, max) = (Self::MIN_TICK, Self::MAX_TICK);
            return Err(BuildError::tick_out_of_range(self.tick, min, max));
        }
        if self.max_pending == Some(0) {
            return Err(BuildError::zero_max_pending());
        }
        if self.name.contains('\0') {
            return Err(BuildError::thread_name_has_nul());
        }
        let clock = match self.clock {
            Some(c) => Clock::Manual(c),
            None => Clock::System,
        };
        let config = Config {
            max_pending: self.max_pending,
            panic_handler: self.panic_handler,
            missed_ticks: self.missed_ticks,
            keep_at_shutdown: self.keep_at_shutdown,
            ..Config::new(threads, clock, self.tick)
        };
        let Parts { core, refs, deques } = Core::new(config);
        threads::start(&core, &self.name, deques, &self.hooks)
            .map(|handles| ScheduledThreadPool::from_parts(core, refs, handles))
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

/// By hand, like every `Debug` of a type that holds closures: the panic handler and the hooks
/// show only whether they are set.
impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("threads", &self.threads)
            .field("thread_name", &self.name)
            .field("tick", &self.tick)
            .field("max_pending", &self.max_pending)
            .field("panic_handler", &self.panic_handler.is_some())
            .field("clock", &self.clock)
            .field("missed_ticks", &self.missed_ticks)
            .field(
                "execute_delayed_after_shutdown",
                &self.keep_at_shutdown.one_shots,
            )
            .field(
                "continue_periodic_after_shutdown",
                &self.keep_at_shutdown.periodic,
            )
            .field("hooks", &self.hooks)
            .finish()
    }
}

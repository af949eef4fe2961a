//! `Builder`: configure and start a pool.

use super::core::{Core, PanicHandler};
use super::worker::{self, WorkerSet};
use super::ScheduledThreadPool;
use crate::error::BuildError;
use crate::sync::Arc;
use crate::task::MissedTicks;
use crate::timer::{driver, Clock, ClockListener, ManualClock, TimeBase, Timer};
use std::any::Any;
use std::fmt;
use std::thread::JoinHandle;
use std::time::Duration;

/// The default tick: fine enough for RPC timeouts, coarse enough to batch expirations.
const DEFAULT_TICK: Duration = Duration::from_millis(1);

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
}

impl Builder {
    /// The defaults: one worker per CPU, names `wheelpool-worker-N`, 1 ms tick, no bound on
    /// pending tasks, no panic handler, the system clock, `MissedTicks::Burst`.
    pub fn new() -> Self {
        Builder {
            threads: None,
            name: "wheelpool-worker".to_owned(),
            tick: DEFAULT_TICK,
            max_pending: None,
            panic_handler: None,
            clock: None,
            missed_ticks: MissedTicks::Burst,
        }
    }

    /// Number of worker threads (at least 1; `build` refuses 0). The timer thread is extra.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }

    /// Prefix of thread names: workers are `PREFIX-0`, `PREFIX-1`, ...; the timer thread is
    /// `PREFIX-timer`.
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.name = prefix.into();
        self
    }

    /// The wheel's tick (greater than zero; `build` refuses zero). Deadlines round up to it:
    /// a finer tick lowers lateness and costs more timer-thread wake-ups under load.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// At most `n` tasks waiting to run; past it, scheduling fails with
    /// [`ScheduleError::Saturated`](crate::ScheduleError::Saturated). Periodic tasks already
    /// admitted are never refused a re-arm.
    pub fn max_pending(mut self, n: usize) -> Self {
        self.max_pending = Some(n);
        self
    }

    /// Called with the payload of every panic in a task (also panics that end a future as
    /// `Panicked`). It runs on the worker; a panic inside the handler is caught and dropped.
    pub fn panic_handler<H>(mut self, handler: H) -> Self
    where
        H: Fn(Box<dyn Any + Send>) + Send + Sync + 'static,
    {
        self.panic_handler = Some(Box::new(handler));
        self
    }

    /// Measures time on `clock` instead of the system clock (for tests: see [`ManualClock`]).
    pub fn clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The pool's default [`MissedTicks`] policy for fixed-rate tasks.
    pub fn missed_ticks(mut self, policy: MissedTicks) -> Self {
        self.missed_ticks = policy;
        self
    }

    /// Starts the timer thread and the workers.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] for zero threads, a zero tick or a zero `max_pending`, or when a thread
    /// cannot be started (the threads already started are stopped and joined first).
    pub fn build(self) -> Result<ScheduledThreadPool, BuildError> {
        let threads = self.threads.unwrap_or_else(num_cpus::get);
        if threads == 0 {
            return Err(BuildError::zero_threads());
        }
        if self.tick.is_zero() {
            return Err(BuildError::zero_tick());
        }
        if self.max_pending == Some(0) {
            return Err(BuildError::zero_max_pending());
        }
        let clock = match &self.clock {
            Some(c) => Clock::Manual(c.clone()),
            None => Clock::System,
        };
        let timer = Timer::new(TimeBase::new(clock, self.tick));
        let (set, locals) = WorkerSet::new(threads);
        let core = Arc::new(Core::new(
            timer,
            set,
            threads + 1,
            self.max_pending,
            self.panic_handler,
            self.missed_ticks,
        ));
        if let Some(c) = &self.clock {
            let listener: Arc<dyn ClockListener> = core.clone();
            c.register(Arc::downgrade(&listener));
        }
        start_threads(&core, &self.name, locals)
            .map(|handles| ScheduledThreadPool::from_parts(core, handles))
    }
}

/// Spawns the timer thread, then the workers; on failure stops and joins what started.
fn start_threads(
    core: &Arc<Core>,
    name: &str,
    locals: Vec<crate::sync::Worker<crate::task::TaskRef>>,
) -> Result<Vec<JoinHandle<()>>, BuildError> {
    let total = locals.len() + 1;
    let mut handles = Vec::with_capacity(total);
    let c = core.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("{name}-timer"))
        .spawn(move || {
            let _exit = ExitGuard {
                core: &c,
                driver: true,
            };
            driver::run(c.clone());
        });
    match spawned {
        Ok(h) => handles.push(h),
        Err(e) => {
            core.driver_exited();
            (0..total).for_each(|_| core.thread_exited());
            return Err(BuildError::spawn(e));
        }
    }
    for (index, deque) in locals.into_iter().enumerate() {
        let c = core.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{name}-{index}"))
            .spawn(move || {
                let _exit = ExitGuard {
                    core: &c,
                    driver: false,
                };
                worker::run(c.clone(), index, deque);
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                (handles.len()..total).for_each(|_| core.thread_exited());
                drop(core.shutdown_now());
                for h in handles {
                    let _ = h.join();
                }
                return Err(BuildError::spawn(e));
            }
        }
    }
    Ok(handles)
}

/// Runs a pool thread's exit bookkeeping even if the thread unwinds.
struct ExitGuard<'a> {
    core: &'a Arc<Core>,
    driver: bool,
}

impl Drop for ExitGuard<'_> {
    fn drop(&mut self) {
        if self.driver {
            self.core.driver_exited();
        }
        self.core.thread_exited();
    }
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

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
            .finish()
    }
}

//! The one trait every workload is written against, and its two peer implementations:
//! the crate `scheduled-thread-pool` (a binary heap under one mutex) and tokio (a task per timer).
//! wheelpool's implementation lives in `wheelpool_impl.rs`. W1 and W2 need less ([`Entries`]:
//! put a timer in, take it out), which a third peer has on its own: tokio-util's `DelayQueue`, a
//! timing wheel owned by the producer, as lean as a timer entry gets (it runs nothing).
//!
//! Ground rules, so that the figures compare like with like:
//! - Every implementation gets [`WORKERS`] worker threads.
//! - Closures are handed over unboxed (generic methods): each implementation boxes, or not, as
//!   its own API does.
//! - `schedule` measures its delay from the call, like every API here does.
//! - `cancel` takes the handle by value: the handle is dropped as part of the cancel.

use std::time::Duration;

/// Worker threads of every implementation (the machine has 2 cores).
pub(crate) const WORKERS: usize = 2;

/// A scheduled thread pool, as the workloads see it.
pub(crate) trait Timer: Sync + Sized {
    /// What the caller keeps to cancel a scheduled task later.
    type Handle: Send;

    /// Starts the implementation with `workers` worker threads. `tick` is the timer resolution
    /// for implementations that have one (`None`: their default); the others ignore it.
    fn build(workers: usize, tick: Option<Duration>) -> Self;

    /// Runs `f` once, `delay` from now.
    fn schedule<F: FnOnce() + Send + 'static>(&self, f: F, delay: Duration) -> Self::Handle;

    /// Stops a task that has not run yet (one-shot) or every later run (periodic).
    fn cancel(&self, handle: Self::Handle);

    /// Runs `f` as soon as a worker is free.
    fn execute<F: FnOnce() + Send + 'static>(&self, f: F);

    /// Runs `f` at `init`, `init + period`, `init + 2 * period`, ... from now; missed runs are
    /// caught up in a burst.
    fn schedule_at_fixed_rate<F: FnMut() + Send + 'static>(
        &self,
        f: F,
        init: Duration,
        period: Duration,
    ) -> Self::Handle;
}

/// What W1 and W2 do with a timer: put one in, take it out. Every [`Timer`] (by shared
/// reference) is one; so is a bare [`DelayQueuePeer`].
pub(crate) trait Entries {
    /// What the caller keeps to take the timer out again.
    type Handle;

    /// Puts `f` in, due `delay` from now.
    fn schedule<F: FnOnce() + Send + 'static>(&mut self, f: F, delay: Duration) -> Self::Handle;

    /// Takes a timer out before it is due (and drops its handle).
    fn cancel(&mut self, handle: Self::Handle);
}

impl<T: Timer> Entries for &T {
    type Handle = T::Handle;

    fn schedule<F: FnOnce() + Send + 'static>(&mut self, f: F, delay: Duration) -> Self::Handle {
        Timer::schedule(*self, f, delay)
    }

    fn cancel(&mut self, handle: Self::Handle) {
        Timer::cancel(*self, handle);
    }
}

/// tokio-util's `DelayQueue` holding the tasks as `Box<dyn FnOnce() + Send>`, owned by the
/// producer thread: no lock, no thread, nothing run (W1 and W2 fire nothing). The cost of a
/// timer entry and nothing else, so the lower bound the issue tracker measures wheelpool's
/// schedule, cancel and bytes per timer against. Made inside a tokio runtime's context (a
/// current-thread runtime with time), as `DelayQueue` needs one for its timer.
pub(crate) struct DelayQueuePeer {
    queue: tokio_util::time::DelayQueue<Box<dyn FnOnce() + Send>>,
}

impl DelayQueuePeer {
    /// Call inside a runtime's context (`Runtime::enter`), and use it there.
    pub(crate) fn new() -> Self {
        DelayQueuePeer {
            queue: tokio_util::time::DelayQueue::new(),
        }
    }
}

impl Entries for DelayQueuePeer {
    type Handle = tokio_util::time::delay_queue::Key;

    fn schedule<F: FnOnce() + Send + 'static>(&mut self, f: F, delay: Duration) -> Self::Handle {
        self.queue.insert(Box::new(f), delay)
    }

    fn cancel(&mut self, handle: Self::Handle) {
        drop(self.queue.remove(&handle));
    }
}

/// The crate `scheduled-thread-pool`: every job in one `BinaryHeap` under one mutex; cancel sets a
/// flag and the job stays in the heap until its time comes.
pub(crate) struct StpTimer {
    pool: scheduled_thread_pool::ScheduledThreadPool,
}

impl Timer for StpTimer {
    type Handle = scheduled_thread_pool::JobHandle;

    fn build(workers: usize, _tick: Option<Duration>) -> Self {
        StpTimer {
            pool: scheduled_thread_pool::ScheduledThreadPool::new(workers),
        }
    }

    fn schedule<F: FnOnce() + Send + 'static>(&self, f: F, delay: Duration) -> Self::Handle {
        self.pool.execute_after(delay, f)
    }

    fn cancel(&self, handle: Self::Handle) {
        handle.cancel();
    }

    fn execute<F: FnOnce() + Send + 'static>(&self, f: F) {
        self.pool.execute(f);
    }

    fn schedule_at_fixed_rate<F: FnMut() + Send + 'static>(
        &self,
        f: F,
        init: Duration,
        period: Duration,
    ) -> Self::Handle {
        self.pool.execute_at_fixed_rate(init, period, f)
    }
}

/// tokio: a multi-thread runtime with [`WORKERS`] workers; a timer is a spawned task that awaits
/// `sleep_until(deadline)` (deadline taken at the schedule call), cancel is `JoinHandle::abort`,
/// fixed rate is an `interval_at` with `MissedTickBehavior::Burst`.
pub(crate) struct TokioTimer {
    runtime: tokio::runtime::Runtime,
}

impl Timer for TokioTimer {
    type Handle = tokio::task::JoinHandle<()>;

    fn build(workers: usize, _tick: Option<Duration>) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_time()
            .build()
            .expect("cannot start the tokio runtime");
        TokioTimer { runtime }
    }

    fn schedule<F: FnOnce() + Send + 'static>(&self, f: F, delay: Duration) -> Self::Handle {
        // The deadline is fixed here, not at the task's first poll, as the other APIs do.
        let deadline = tokio::time::Instant::now() + delay;
        self.runtime.spawn(async move {
            tokio::time::sleep_until(deadline).await;
            f();
        })
    }

    fn cancel(&self, handle: Self::Handle) {
        handle.abort();
    }

    fn execute<F: FnOnce() + Send + 'static>(&self, f: F) {
        drop(self.runtime.spawn(async move { f() }));
    }

    fn schedule_at_fixed_rate<F: FnMut() + Send + 'static>(
        &self,
        mut f: F,
        init: Duration,
        period: Duration,
    ) -> Self::Handle {
        let start = tokio::time::Instant::now() + init;
        self.runtime.spawn(async move {
            let mut interval = tokio::time::interval_at(start, period);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            loop {
                interval.tick().await;
                f();
            }
        })
    }
}

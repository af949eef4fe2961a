//! A scheduled thread pool: delays live in a **hierarchical timing wheel**, due tasks run on a
//! **work-stealing pool**.
//!
//! wheelpool is a `ScheduledExecutorService` for Rust, built for the timers services keep by the
//! hundred thousand: heartbeats, retries with backoff, RPC and request timeouts, housekeeping.
//! Most of them are cancelled before they fire, so scheduling and cancelling are O(1), and a
//! cancel frees the task's closure and its wheel entry before it returns, on the cancelling
//! thread, whatever else the pool is doing.
//!
//! # When to pick it
//!
//! - Over a binary-heap scheduler (Java's `ScheduledThreadPoolExecutor`, the
//!   `scheduled-thread-pool` crate): insert and cancel stay O(1) at a million pending timers,
//!   there is no global lock on the schedule path (threads schedule into separate wheel
//!   shards), and cancelled timers do not linger.
//! - Over a hashed wheel with one thread (Netty's `HashedWheelTimer`): due tasks run on every
//!   worker, and an idle pool sleeps instead of ticking.
//! - Over a tokio runtime: when the code is synchronous (plain closures, blocking calls) and you
//!   want Java's scheduling semantics (fixed rate, fixed delay, shutdown that hands back what
//!   never ran) without an async runtime. Futures are still `.await`able.
//!
//! # How it works
//!
//! ```text
//! caller ──schedule()──► task (one allocation: closure + atomic state + deadline + result)
//!                            │ inserted by the calling thread into its home shard's wheel,
//!                            │ under that shard's lock (O(1); cancel and reset unlink the same way)
//!                            ▼
//!          shards: hierarchical wheels (64 slots a level, bitmaps), one lock each
//!                            │ the timer thread polls each shard a chunk (512) at a time,
//!                            │ sleeps until the earliest next expiration or an earlier deadline;
//!                            │ one idle worker (the watcher) sleeps until the same instant and
//!                            │ polls the due shards itself, so a due timer needs one wake-up
//!                            │ (the timer thread then wakes 50 us later, as a backstop)
//!                            ▼ due tasks, a chunk at a time
//!              workers (crossbeam-deque injector + per-worker deques, work stealing)
//!                            │ run under catch_unwind
//!                            ▼
//!        one-shot: complete the ScheduledFuture     periodic: re-arm the same task in its shard
//! ```
//!
//! There is no queue between schedulers and the timer thread: nothing a producer does can build
//! a backlog or keep the memory of cancelled timers, and no locked section does more than a
//! bounded amount of work, so a storm of equal deadlines or of cancels holds no other timer up
//! for more than a chunk.
//!
//! The timer thread never runs user code; a task scheduled with zero delay (or `execute`) skips
//! the wheel; a task scheduled from a worker goes to that worker's own deque.
//!
//! # Timing guarantees
//!
//! - **Never early.** A deadline rounds *up* to the next tick of the wheel (1 us by default,
//!   [`Builder::tick`]); a task never starts before its deadline.
//! - **Lateness** is one thread's wake-up (the watching worker's; if no worker is idle to
//!   watch, the timer thread's and then a worker's; if the watcher is slow to get a CPU, the
//!   timer thread's 50 us later) plus an adaptive *slack*: none while deadlines come sparser
//!   than one per 4 us, else the timer side sleeps until the earliest deadline plus 2 us for
//!   each task that came due while it last slept, at most 1 ms. Sparse timers (a lone timeout,
//!   a heartbeat, a hundred thousand spread over a second) therefore fire within a wake-up of
//!   their deadline, and dense ones (thousands due each millisecond) are batched as a 1 ms tick
//!   would batch them, at about the same CPU cost. BENCHMARKS.md (W3, W5, W8) has the figures.
//!   A tick of 1 ms or more (`Builder::tick`) rounds every deadline up instead and adds no
//!   slack. On a machine with more busy threads than CPUs the kernel decides when a woken
//!   thread runs: a few rounds in a hundred of the cancel-storm benchmark waited 6-18 ms for it.
//! - **Fixed rate** runs on the grid `start + initial + k * period` with no drift; a run that
//!   overruns delays the next one; missed runs follow [`MissedTicks`]. **Fixed delay** plans each
//!   run `delay` after the previous one returned. Runs of one task never overlap.
//! - **Any delay** up to `Duration::MAX` is accepted (it just never comes); an `Instant` in the
//!   past runs at once.
//! - **Calendar schedules** (feature `cron`: `wheelpool::cron`, `Handle::schedule_cron`) run
//!   at each occurrence of a cron expression in a time zone, planned by the wall clock and
//!   never early by it; the wall clock is re-read at least once a minute.
//!
//! # Example
//!
//! ```
//! use wheelpool::{ScheduledThreadPool, TaskError};
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
//!
//! // An RPC timeout, cancelled because the reply came first.
//! let timeout = pool.schedule(|| "timed out", Duration::from_secs(30)).unwrap();
//! let reply = pool.schedule(|| "reply", Duration::from_millis(5)).unwrap();
//! assert_eq!(reply.join(), Ok("reply"));
//! assert!(timeout.cancel());
//! assert_eq!(timeout.join(), Err(TaskError::Cancelled));
//!
//! // A heartbeat every 5 ms, stopped after three beats.
//! let beats = Arc::new(AtomicUsize::new(0));
//! let b = beats.clone();
//! let heartbeat = pool
//!     .schedule_at_fixed_rate(move || { b.fetch_add(1, Ordering::SeqCst); },
//!                             Duration::ZERO, Duration::from_millis(5))
//!     .unwrap();
//! while beats.load(Ordering::SeqCst) < 3 {
//!     std::thread::yield_now();
//! }
//! assert!(heartbeat.cancel());
//!
//! // Graceful shutdown: nothing new, what is waiting still runs, then the threads exit.
//! pool.shutdown();
//! assert!(pool.await_termination(Duration::from_secs(10)));
//! ```
//!
//! Deterministic tests of your own timing code: see [`ManualClock`].
//!
//! # The public surface
//!
//! - [`ScheduledThreadPool`], built with [`Builder`]; it dereferences to its [`Handle`], where
//!   the scheduling methods are (`execute`, `schedule`, `schedule_at`, fixed rate, fixed delay,
//!   dynamic delay and rate). A dynamic task's closure returns `Option<Duration>` or
//!   `ControlFlow<T, Duration>` ([`NextRun`]): a loop that returns its value.
//! - [`TaskBuilder`], from `handle.task()`: options for one task (a name, [`MissedTicks`],
//!   surviving panics), then any scheduling method. The one way to pass options: there are no
//!   `_with` variants.
//! - [`ScheduledFuture`]: join, `.await`, cancel, reset (`try_reset` says why not,
//!   [`ResetError`]), `detach`, and [`AbortOnDrop`] for async code; [`CancelHandle`] cancels
//!   and resets from another owner.
//! - Inspection: [`PendingTask`] (what `shutdown_now` hands back), [`TaskInfo`] (which task
//!   panicked, in the panic handler) and [`TaskKind`]; [`PoolStats`].
//! - Errors: [`ScheduleError`], [`TaskError`], [`ResetError`], [`BuildError`].
//! - [`ManualClock`] for tests on virtual time.
//! - With the `cron` feature, `wheelpool::cron` (`Cron`, `CronError`, `CronField`,
//!   `SkippedTime`) and `schedule_cron` on [`Handle`] and [`TaskBuilder`]: calendar schedules in
//!   time zones.
//! - With the `postgres` feature, `wheelpool::cluster`: jobs run once per planned run across
//!   processes (`ClusterJob`, `PgLockStore`, their errors and counters).
//! - With the `tracing` feature, spans and events (below); no public item of its own.
//!
//! The timing wheel, the task cells and the timer shards are the crate's own, not part of it.
//!
//! # Tracing
//!
//! With the `tracing` feature (`wheelpool = { version = "0.1", features = ["tracing"] }`) the
//! pool reports through the [`tracing`](https://docs.rs/tracing) crate, under the target
//! `wheelpool` (filter with `wheelpool=debug`, say). Without it nothing of this is compiled in.
//!
//! | what | kind, level | fields |
//! |---|---|---|
//! | each run of a task, entered while its closure runs | span `run`, DEBUG | `task.id`, `task.name` (if named), `task.kind` (`OneShot`, `FixedRate`, ...), `lateness_ns` (start minus planned time; not for `execute`) |
//! | a run panicked | event `task panicked`, ERROR, in the run's span | `task.id`, `task.name`, `task.kind`, `panic` (the message) |
//! | a fixed-rate run ended with planned runs already past | event `missed ticks`, WARN, in the run's span | `policy` (`Burst`, `Skip`, `Delay`), `missed` (planned runs past), `period_ns` |
//! | [`shutdown`](ScheduledThreadPool::shutdown) | event `shutdown`, INFO | `execute_delayed`, `continue_periodic` (the policy) |
//! | [`shutdown_now`](ScheduledThreadPool::shutdown_now) (and dropping the pool) | event `shutdown_now`, INFO | `handed_back` (how many) |
//! | a task leaves the pool without running (`shutdown_now`, [`take_handed_back`](ScheduledThreadPool::take_handed_back)) | event `task handed back`, DEBUG | `task.id`, `task.name`, `task.kind`, `state` (`Cancelled` or `Shutdown`) |
//!
//! The events' text is their `message` field. The timer thread emits nothing (it runs no user
//! code, and a subscriber is user code): spans and panic and missed-tick events come from the
//! worker that runs the task, the others from the thread that called the method.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod cluster;
#[cfg(feature = "cron")]
#[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
pub mod cron;
mod error;
#[cfg(all(test, wheelpool_loom))]
mod loom;
mod panic;
mod pool;
mod sync;
mod task;
mod timer;
mod trace;
// The timing wheel is the crate's own: not part of the API. The `bench-wheel` feature exposes it
// (hidden, no stability promise) to the wheel-against-a-heap benchmark in `benches/` only.
#[cfg(feature = "bench-wheel")]
#[doc(hidden)]
pub mod wheel;
#[cfg(not(feature = "bench-wheel"))]
mod wheel;

pub use error::{BuildError, ResetError, ScheduleError, TaskError};
pub use pool::{AbortOnDrop, CancelHandle, ScheduledFuture};
pub use pool::{Builder, Handle, PoolStats, ScheduledThreadPool, TaskBuilder};
pub use task::{MissedTicks, NextRun, PendingTask, TaskInfo, TaskKind};
pub use timer::ManualClock;

/// The README's example, compiled and run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Which public types cross threads, decided on purpose and checked at compile time.
#[allow(dead_code)]
fn _thread_safety() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<ScheduledThreadPool>();
    send_sync::<Handle>();
    send_sync::<CancelHandle>();
    send_sync::<ScheduledFuture<u32>>();
    send_sync::<ManualClock>();
    send_sync::<Builder>();
    send_sync::<PoolStats>();
    send_sync::<TaskBuilder<'static>>();
    send_sync::<TaskInfo>();
    send_sync::<TaskKind>();
    send_sync::<MissedTicks>();
    send_sync::<AbortOnDrop<u32>>();
    // Errors go into `Box<dyn Error + Send + Sync>`.
    send_sync::<ScheduleError>();
    send_sync::<TaskError>();
    send_sync::<BuildError>();
    send_sync::<ResetError>();
    #[cfg(feature = "cron")]
    {
        send_sync::<cron::Cron>();
        send_sync::<cron::CronError>();
        send_sync::<cron::SkippedTime>();
    }
    // A handed-back closure may be run on another thread; it is `Send` but not shared.
    send::<PendingTask>();
}

//! The pool's counters, split by thread: every schedule, cancel and run updates them, and one
//! shared cache line written by every producer would cost each of them a cache-line transfer per
//! operation (about 37 ns a write on this project's 2-core machine, against 4.5 ns unshared).
//!
//! # Ground rules
//!
//! - A thread writes only the cell of its home index (the one that also picks its timer shard):
//!   producers on different threads never write one line. Readers sum every cell.
//! - `outstanding` is admitted-minus-ended. A task may be counted in on one cell and out on
//!   another, so one cell can go "below zero": cells wrap, and only their wrapping sum means
//!   anything. A task that ends cancelled (or stopped by a shutdown) is counted out by its
//!   `cancelled` increment alone: the sum subtracts every cell's `cancelled` too, so a cancel
//!   pays one locked instruction for both figures, not two. The sum is exact when nothing
//!   moves, and never counts a task admitted before a reader's SeqCst load of the lifecycle as
//!   gone while it is not (its increment precedes that load, every cell load follows it).
//! - A cell's two figures are read as one: `cancelled`, `outstanding`, `cancelled` again, until
//!   both readings of `cancelled` agree. Read once each, a thread of that cell that cancels a
//!   task and schedules another between the two loads would be seen admitting without
//!   cancelling, once per such pair: the sum over-counted without bound, and `max_pending`
//!   refused schedules far below it (a hostile review found it; `loom/counters.rs`). Only
//!   cancels move `cancelled`, and they are short, so a reader retries rarely.
//! - Every change and sum of `outstanding` and `cancelled` is SeqCst, and the count that may end
//!   the last task after a shutdown is followed by `fence(SeqCst)` before its sum: of two tasks
//!   ending at once on two cells, the later one's sum sees both ends (see `Core::task_ended`).
//! - The other counters are statistics: Relaxed, read one by one.
//! - What only a run counts (`running`, `completed`, `panicked`) lives in a cell per *worker*
//!   ([`RunCounts`]), and only that worker writes it: with one writer, a Relaxed load and a
//!   Relaxed store count exactly, so a run costs no locked instruction for them (three locked
//!   read-modify-writes a run before, about 20 cycles each on the 2-core machine). Runs happen
//!   only on workers (a loom model's bare step uses worker 0's cell, from one thread at a time
//!   and never beside a worker 0 thread). Home cells cannot serve: outside threads may share a
//!   worker's home cell once there are more threads than shards.

use crate::sync::{AtomicU64, AtomicUsize, CachePadded, Ordering};

/// A snapshot of a pool's counters, how late runs started, and how many tasks wait where.
/// Each figure is read on its own, so they may be a moment apart; the queue depths are racy
/// snapshots (tasks move while they are counted).
///
/// # Lateness
///
/// A run's lateness is the time from its planned start (its deadline: a one-shot's, or the
/// planned time of a periodic task's run) to the moment a worker starts it, on the pool's
/// clock: the wait for the wheel's next tick, a wake-up, and any queue. It is measured for every
/// run that has a planned time: one-shots scheduled with a delay or an instant, and every run of
/// a periodic task; `execute` (no planned time, and no clock read on that path) is not counted.
/// Each worker records into buckets of its own, merged when `stats()` is called.
///
/// The percentiles are exact below 8 ns and otherwise come from log-linear buckets: a reported
/// percentile is never below the true one and above it by less than 1/8 of it (10 ms reads as
/// at most 11.25 ms), and never above `lateness_max`, which is exact. So a percentile is exact
/// when it falls on the largest value recorded (or below 8 ns): with a [`ManualClock`], where
/// time moves only when told, a test can arrange that, as in the example below.
///
/// [`ManualClock`]: crate::ManualClock
///
/// # Examples
///
/// ```
/// use wheelpool::ScheduledThreadPool;
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let f = pool.schedule(|| (), Duration::from_secs(60)).unwrap();
/// assert_eq!(pool.stats().pending, 1);
/// assert_eq!(pool.stats().waiting_in_wheels, 1);
/// f.cancel();
/// assert_eq!(pool.stats().cancelled, 1);
/// assert_eq!(pool.stats().pending, 0);
/// ```
///
/// Lateness on virtual time: a task due at 10 ms runs while another blocks the only worker
/// until 13 ms, so it starts 3 ms late; the blocking one started on time.
///
/// ```
/// use wheelpool::{ManualClock, ScheduledThreadPool};
/// use std::time::Duration;
///
/// let ms = Duration::from_millis;
/// let clock = ManualClock::new();
/// let pool = ScheduledThreadPool::builder().threads(1).clock(clock.clone()).build().unwrap();
/// let c = clock.clone();
/// pool.schedule(move || c.advance(ms(8)), ms(5)).unwrap().detach(); // runs 5 ms to 13 ms
/// pool.schedule(|| (), ms(10)).unwrap().detach();
/// clock.advance(ms(10));
/// let stats = pool.stats();
/// assert_eq!(stats.lateness_count, 2);
/// assert_eq!((stats.lateness_p50, stats.lateness_p99, stats.lateness_max), (ms(0), ms(3), ms(3)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PoolStats {
    /// Tasks waiting to run: in the wheel, in transit, or queued for a worker.
    pub pending: usize,
    /// Runs in progress.
    pub running: usize,
    /// Runs that returned normally: every run of a periodic task counts, and so does a run
    /// during which its task was cancelled.
    pub completed: u64,
    /// Tasks whose future ended `Cancelled` or `Shutdown` (not `Panicked`): cancelled while
    /// waiting or while running, returned by `shutdown_now`, or periodic tasks stopped by
    /// `shutdown`. A schedule refused with an error (`Shutdown`, `Saturated`) was never a task
    /// and is not counted anywhere: its caller got the error.
    pub cancelled: u64,
    /// Runs that panicked (each one also went to the panic handler).
    pub panicked: u64,
    /// Runs whose lateness was measured (every run with a planned time: see
    /// [Lateness](#lateness)).
    pub lateness_count: u64,
    /// Median lateness of those runs (within 1/8, never below the true value).
    pub lateness_p50: std::time::Duration,
    /// 99th percentile of lateness (within 1/8, never below the true value).
    pub lateness_p99: std::time::Duration,
    /// The latest any of those runs started (exact).
    pub lateness_max: std::time::Duration,
    /// Tasks waiting in the timer's wheels for their time (a racy snapshot: each wheel is
    /// counted under its lock, one after the other).
    pub waiting_in_wheels: usize,
    /// Tasks due and waiting for a worker in the ready queues: the shared injector and the
    /// workers' deques (a racy snapshot). A task cancelled there stays counted until a worker
    /// takes it and drops it.
    pub ready_in_queues: usize,
}

/// One home index's share of the counters (written by every thread of that home).
#[derive(Debug, Default)]
struct Cell {
    /// Admitted, less ended other than cancelled (wrapping).
    outstanding: AtomicUsize,
    /// Ended cancelled or stopped by a shutdown: also subtracted from `outstanding`'s sum.
    cancelled: AtomicU64,
}

impl Cell {
    /// This cell's share of the outstanding tasks: both figures as of one instant (ground
    /// rules).
    fn outstanding(&self) -> usize {
        // SeqCst: pairs with `admitted`/`ended`/`ended_cancelled` and the lifecycle store
        // (ground rules).
        let mut cancelled = self.cancelled.load(Ordering::SeqCst);
        loop {
            let outstanding = self.outstanding.load(Ordering::SeqCst);
            let again = self.cancelled.load(Ordering::SeqCst);
            if again == cancelled {
                // No cancel between the two readings: `outstanding` was read while `cancelled`
                // held this value. Truncating it keeps the wrapping sum exact.
                return outstanding.wrapping_sub(cancelled as usize);
            }
            cancelled = again;
        }
    }
}

/// One worker's run counts, written by that worker alone (ground rules).
#[derive(Debug, Default)]
pub(crate) struct RunCounts {
    running: AtomicUsize,
    completed: AtomicU64,
    panicked: AtomicU64,
}

impl RunCounts {
    /// A run starts on this worker.
    #[inline]
    pub(crate) fn run_started(&self) {
        // One writer (ground rules): a load and a store count exactly.
        let n = self.running.load(Ordering::Relaxed);
        self.running.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// A run on this worker is over.
    #[inline]
    pub(crate) fn run_over(&self) {
        let n = self.running.load(Ordering::Relaxed);
        self.running.store(n.wrapping_sub(1), Ordering::Relaxed);
    }

    /// A run on this worker returned normally.
    #[inline]
    pub(crate) fn completed(&self) {
        bump(&self.completed);
    }

    /// A run on this worker panicked.
    pub(crate) fn panicked(&self) {
        bump(&self.panicked);
    }
}

/// Adds one to a counter that has one writer.
#[inline]
fn bump(counter: &AtomicU64) {
    let n = counter.load(Ordering::Relaxed);
    counter.store(n.wrapping_add(1), Ordering::Relaxed);
}

/// The counters behind `PoolStats`, `max_pending` and termination.
#[derive(Debug)]
pub(crate) struct Counters {
    cells: Box<[CachePadded<Cell>]>,
    workers: Box<[CachePadded<RunCounts>]>,
}

impl Counters {
    /// `cells` must be a power of two (the timer's shard count); one [`RunCounts`] per worker.
    pub(crate) fn new(cells: usize, workers: usize) -> Self {
        debug_assert!(cells.is_power_of_two());
        Counters {
            cells: (0..cells)
                .map(|_| CachePadded::new(Cell::default()))
                .collect(),
            workers: (0..workers.max(1))
                .map(|_| CachePadded::new(RunCounts::default()))
                .collect(),
        }
    }

    /// Worker `index`'s run counts: only that worker may count with them (ground rules).
    #[inline]
    pub(crate) fn worker(&self, index: usize) -> &RunCounts {
        &self.workers[index]
    }

    #[inline]
    fn mine(&self) -> &Cell {
        &self.cells[crate::timer::home::index() & (self.cells.len() - 1)]
    }

    /// A task was admitted.
    #[inline]
    pub(crate) fn admitted(&self) {
        // SeqCst: ordered before the admitting thread's lifecycle load (ground rules).
        self.mine().outstanding.fetch_add(1, Ordering::SeqCst);
    }

    /// An admitted task reached a terminal state (or backed out) other than cancelled.
    #[inline]
    pub(crate) fn ended(&self) {
        // SeqCst: pairs with the sums in `outstanding` (ground rules).
        self.mine().outstanding.fetch_sub(1, Ordering::SeqCst);
    }

    /// An admitted task ended cancelled or stopped by a shutdown: counted as cancelled and, by
    /// the same increment, as ended (ground rules).
    #[inline]
    pub(crate) fn ended_cancelled(&self) {
        // SeqCst: an end, like `ended`.
        self.mine().cancelled.fetch_add(1, Ordering::SeqCst);
    }

    /// The tasks admitted before this call and not yet ended, for the saturation check and
    /// the `pending` figure: [`outstanding`](Self::outstanding), read as 0 when it is below
    /// zero. The wrapping sum goes below zero for an instant when a task is counted in on one
    /// cell after the reader passed it and counted out on another before the reader gets there;
    /// read as a `usize` that looked like billions pending, and `max_pending` refused schedules
    /// on an empty pool.
    pub(crate) fn pending_or_running(&self) -> usize {
        let sum = self.outstanding();
        if (sum as isize) < 0 {
            0
        } else {
            sum
        }
    }

    /// Tasks admitted and not yet ended (the wrapping sum of every cell).
    pub(crate) fn outstanding(&self) -> usize {
        // Wrapping in `u64` and truncating keeps the wrapping `usize` sum exact.
        sum(&self.cells, |c| c.outstanding() as u64) as usize
    }

    /// Runs in progress (a snapshot).
    pub(crate) fn running(&self) -> usize {
        sum(&self.workers, |w| w.running.load(Ordering::Relaxed) as u64) as usize
    }

    /// The counts of a `stats()` snapshot (each sum read on its own).
    pub(crate) fn stats(&self) -> PoolStats {
        let running = self.running();
        PoolStats {
            pending: self.pending_or_running().saturating_sub(running),
            running,
            completed: sum(&self.workers, |w| w.completed.load(Ordering::Relaxed)),
            cancelled: sum(&self.cells, |c| c.cancelled.load(Ordering::Relaxed)),
            panicked: sum(&self.workers, |w| w.panicked.load(Ordering::Relaxed)),
            ..PoolStats::default() // the lateness and queue depths: filled in by `Core::stats`
        }
    }
}

/// The wrapping sum of one figure over a set of cells (home cells or workers' cells).
fn sum<C>(cells: &[CachePadded<C>], read: impl Fn(&C) -> u64) -> u64 {
    cells.iter().fold(0u64, |sum, c| sum.wrapping_add(read(c)))
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    /// A task counted out on a cell the reader has not reached yet, whose admission on another
    /// cell it passed already, leaves the wrapping sum below zero for an instant: that reads as
    /// no task, not as billions of them.
    #[test]
    fn a_sum_below_zero_reads_as_nothing_pending() {
        let counters = Counters::new(2, 1);
        // The end, on this thread's cell, without the admission that the reader missed.
        counters.ended();
        assert_eq!(counters.outstanding(), usize::MAX, "the raw sum wrapped");
        assert_eq!(counters.pending_or_running(), 0);
        assert_eq!(counters.stats().pending, 0);
        counters.admitted();
        counters.admitted();
        assert_eq!(counters.pending_or_running(), 1);
    }
}

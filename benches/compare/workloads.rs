//! The workloads W1..W8 of WORKLOADS.md, each a generic function over [`Timer`] that runs in a
//! fresh child process and returns its figures.
//!
//! Ground rules:
//! - Random inputs (delays) are drawn from a fixed seed before any clock or memory reading starts,
//!   so every implementation gets the very same inputs and the drawing is not measured.
//! - Task closures capture nothing they must share (no `Arc` clone per task): they bump the
//!   process-wide [`DONE`] counter, and W3 writes its lateness into a preallocated slot.
//! - Memory readings wait for the process to settle ([`probe::settled_rss_bytes`]): timer threads
//!   and workers may still be taking in what the producer handed them.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Barrier, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::probe::{self, Snapshot};
use crate::timer::{DelayQueuePeer, Entries, Timer, WORKERS};

/// Seed of every random draw: same inputs for every implementation and every run.
const SEED: u64 = 0x5eed_0f73;

/// How long a child waits for tasks that must all run before it reports what it has.
const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// The timeout of W2 and W7: longer than either loop runs, so none fires.
const CHURN_TIMEOUT: Duration = Duration::from_secs(30);

/// Figures of one run: name (unit in the name) and value.
pub(crate) type Figures = Vec<(&'static str, f64)>;

/// One workload of WORKLOADS.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Workload {
    W1,
    W2,
    W3,
    W4,
    W5,
    W6,
    W7,
    W8,
}

impl Workload {
    /// Every workload, in order.
    pub(crate) const ALL: [Workload; 8] = [
        Workload::W1,
        Workload::W2,
        Workload::W3,
        Workload::W4,
        Workload::W5,
        Workload::W6,
        Workload::W7,
        Workload::W8,
    ];

    /// `"W1"`..`"W8"`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
            Workload::W5 => "W5",
            Workload::W6 => "W6",
            Workload::W7 => "W7",
            Workload::W8 => "W8",
        }
    }

    /// The workload named `name` (case-insensitive).
    pub(crate) fn parse(name: &str) -> Option<Workload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name().eq_ignore_ascii_case(name))
    }
}

/// What a child is asked to run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub(crate) workload: Workload,
    /// The workload's size: W1 timers, W2 loop rounds M (P = M / 10 stay pending), W3 tasks,
    /// W4 tasks, W5 periodic tasks K, W7 loop rounds M of all producers together (P = M / 20
    /// stay pending), W8 tasks; unused by W6.
    pub(crate) n: u64,
    /// W7's producer threads T (the others ignore it).
    pub(crate) threads: u64,
    /// Timer resolution for implementations that have one (`None`: their default).
    pub(crate) tick: Option<Duration>,
    /// How long W5 runs and W6 sleeps; W8's lead time from the first schedule call to the
    /// common deadline.
    pub(crate) secs: f64,
}

/// Runs `params.workload` on a fresh `T` and returns its figures.
pub(crate) fn run<T: Timer>(params: &Params) -> Figures {
    let timer = T::build(WORKERS, params.tick);
    let n = params.n.max(1);
    match params.workload {
        Workload::W1 => insert_cancel(&timer, n),
        Workload::W2 => churn(&timer, n),
        Workload::W3 => fire(&timer, n),
        Workload::W4 => execute(&timer, n),
        Workload::W5 => periodic(&timer, n, Duration::from_secs_f64(params.secs)),
        Workload::W6 => idle(&timer, Duration::from_secs_f64(params.secs)),
        Workload::W7 => contention(&timer, n, params.threads.max(1)),
        Workload::W8 => storm(&timer, n, Duration::from_secs_f64(params.secs)),
    }
}

/// W1 or W2 on a bare `DelayQueue` ([`DelayQueuePeer`]); `None` for the workloads it cannot
/// run (it runs no task: it is a timer entry, not a pool).
pub(crate) fn run_delay_queue(params: &Params) -> Option<Figures> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("cannot start the tokio runtime");
    let _context = runtime.enter();
    let n = params.n.max(1);
    match params.workload {
        Workload::W1 => Some(insert_cancel(DelayQueuePeer::new(), n)),
        Workload::W2 => Some(churn(DelayQueuePeer::new(), n)),
        _ => None,
    }
}

/// W1: schedule `n` far-away one-shots, then cancel them all in insertion order.
fn insert_cancel<E: Entries>(mut timer: E, n: u64) -> Figures {
    let delays = uniform_delays(n, Duration::from_secs(10), Duration::from_secs(3600));
    let mut handles = touched_vec::<E::Handle>(n);
    let before = probe::settled_rss_bytes();

    let start = Instant::now();
    for &delay in &delays {
        handles.push(timer.schedule(bump, delay));
    }
    let sched_ns = per_op_ns(start.elapsed(), n);
    let scheduled = probe::settled_rss_bytes();

    let start = Instant::now();
    for handle in handles.drain(..) {
        timer.cancel(handle);
    }
    let cancel_ns = per_op_ns(start.elapsed(), n);
    let cancelled = probe::settled_rss_bytes();

    // A second wave on the memory the first one gave back: grows again only where cancelled
    // timers are still held (the allocator keeps freed blocks, so the RSS after cancel alone
    // cannot tell "freed but kept by malloc" from "still held by the timer").
    for &delay in &delays {
        handles.push(timer.schedule(bump, delay));
    }
    let rescheduled = probe::settled_rss_bytes();

    vec![
        ("sched_ns", sched_ns),
        ("rss_bytes_per_timer", per_timer(scheduled, before, n)),
        ("cancel_ns", cancel_ns),
        (
            "rss_after_cancel_per_timer",
            per_timer(cancelled, before, n),
        ),
        (
            "rss_resched_per_timer",
            per_timer(rescheduled, cancelled, n),
        ),
        ("handle_bytes", std::mem::size_of::<E::Handle>() as f64),
    ]
}

/// W2: keep `m / 10` timeouts of 30 s pending; `m` times schedule a new one and cancel the oldest.
fn churn<E: Entries>(mut timer: E, m: u64) -> Figures {
    const TIMEOUT: Duration = CHURN_TIMEOUT;
    let pending = (m / 10).max(1);
    let mut queue: VecDeque<E::Handle> = VecDeque::with_capacity(pending as usize + 1);
    for _ in 0..pending {
        queue.push_back(timer.schedule(bump, TIMEOUT));
    }
    let before = probe::settled_rss_bytes();

    let start = Instant::now();
    for _ in 0..m {
        queue.push_back(timer.schedule(bump, TIMEOUT));
        let oldest = queue
            .pop_front()
            .expect("the queue holds `pending` handles");
        timer.cancel(oldest);
    }
    let elapsed = start.elapsed();
    let after = probe::settled_rss_bytes();
    if elapsed >= TIMEOUT {
        eprintln!("W2: the loop took {elapsed:?}, longer than the 30 s timeouts: some fired");
    }

    vec![
        ("pending", pending as f64),
        ("ops_per_s", m as f64 / elapsed.as_secs_f64()),
        ("rss_growth_bytes", after as f64 - before as f64),
    ]
}

/// W7: W2 split over `threads` producers at once, each on its own ring: together they keep
/// `m / 20` timeouts of 30 s pending and do `m` schedule+cancel pairs.
fn contention<T: Timer>(timer: &T, m: u64, threads: u64) -> Figures {
    let pending = (m / 20).max(threads) / threads;
    let rounds = m / threads;
    // Everybody (producers and this thread) meets twice: once the rings are full, so that the
    // RSS before is read with every ring in place, and once more to start the loops together.
    let barrier = Barrier::new(threads as usize + 1);
    let (before, elapsed, rings) = thread::scope(|scope| {
        let producers: Vec<_> = (0..threads)
            .map(|_| scope.spawn(|| churn_ring(timer, pending, rounds, &barrier)))
            .collect();
        barrier.wait();
        let before = probe::settled_rss_bytes();
        barrier.wait();
        let start = Instant::now();
        let rings: Vec<_> = producers
            .into_iter()
            .map(|p| p.join().expect("a W7 producer panicked"))
            .collect();
        (before, start.elapsed(), rings)
    });
    // The rings are still held, as they were for the reading before.
    let after = probe::settled_rss_bytes();
    drop(rings);
    if elapsed >= CHURN_TIMEOUT {
        eprintln!("W7: the loops took {elapsed:?}, longer than the 30 s timeouts: some fired");
    }
    vec![
        ("pending", (pending * threads) as f64),
        (
            "ops_per_s",
            (rounds * threads) as f64 / elapsed.as_secs_f64(),
        ),
        ("rss_growth_bytes", after as f64 - before as f64),
    ]
}

/// One W7 producer: fills its ring with `pending` timeouts, meets the others twice at
/// `barrier`, then `rounds` times schedules a new timeout and cancels its oldest. Returns the
/// ring, still pending.
fn churn_ring<T: Timer>(
    timer: &T,
    pending: u64,
    rounds: u64,
    barrier: &Barrier,
) -> VecDeque<T::Handle> {
    let mut ring: VecDeque<T::Handle> = VecDeque::with_capacity(pending as usize + 1);
    for _ in 0..pending {
        ring.push_back(timer.schedule(bump, CHURN_TIMEOUT));
    }
    barrier.wait();
    barrier.wait();
    for _ in 0..rounds {
        ring.push_back(timer.schedule(bump, CHURN_TIMEOUT));
        let oldest = ring.pop_front().expect("the ring holds `pending` handles");
        timer.cancel(oldest);
    }
    ring
}

/// Lateness (run instant minus deadline, ns) of each W3 task; `i64::MIN` until it ran.
static LATENESS: OnceLock<Box<[AtomicI64]>> = OnceLock::new();

/// W3: `n` one-shots with delays uniform in [0, 1 s]; each records how late it ran.
fn fire<T: Timer>(timer: &T, n: u64) -> Figures {
    let delays = uniform_delays(n, Duration::ZERO, Duration::from_secs(1));
    let slots = (0..n).map(|_| AtomicI64::new(i64::MIN)).collect();
    LATENESS.set(slots).expect("W3 runs once per process");
    let mut handles = Vec::with_capacity(n as usize);
    DONE.reset(n);

    let start = Instant::now();
    for (index, &delay) in delays.iter().enumerate() {
        let deadline = Instant::now() + delay;
        handles.push(timer.schedule(move || record_lateness(index, deadline), delay));
    }
    DONE.wait(WAIT_LIMIT);
    let wall = start.elapsed();

    let slots = LATENESS.get().expect("set above");
    let mut late: Vec<i64> = slots
        .iter()
        .map(|s| s.load(Ordering::Relaxed))
        .filter(|&ns| ns != i64::MIN)
        .collect();
    late.sort_unstable();
    let us = |ns: i64| ns as f64 / 1e3;
    drop(handles);
    vec![
        ("fired", late.len() as f64),
        ("wall_ms", wall.as_secs_f64() * 1e3),
        ("late_p50_us", us(percentile(&late, 50))),
        ("late_p99_us", us(percentile(&late, 99))),
        ("late_max_us", us(late.last().copied().unwrap_or(0))),
        (
            "early_count",
            late.iter().filter(|&&ns| ns < 0).count() as f64,
        ),
    ]
}

/// The W3 task: stores (now - deadline) in its slot, then counts itself done.
fn record_lateness(index: usize, deadline: Instant) {
    let now = Instant::now();
    let ns = match now.checked_duration_since(deadline) {
        Some(late) => saturating_ns(late),
        None => -saturating_ns(deadline - now),
    };
    if let Some(slot) = LATENESS.get().and_then(|slots| slots.get(index)) {
        slot.store(ns, Ordering::Relaxed);
    }
    bump();
}

/// W8: `n` one-shots all due at one instant, `lead` after the first schedule call, scheduled
/// from this thread; each records how late it ran.
fn storm<T: Timer>(timer: &T, n: u64, lead: Duration) -> Figures {
    let slots = (0..n).map(|_| AtomicI64::new(i64::MIN)).collect();
    LATENESS.set(slots).expect("W8 runs once per process");
    let mut handles = Vec::with_capacity(n as usize);
    DONE.reset(n);

    let start = Instant::now();
    let deadline = start + lead;
    for index in 0..n as usize {
        // The delay is taken just before the call, so the implementation's own deadline
        // (its clock at the call plus the delay) is never before `deadline`.
        let delay = deadline.saturating_duration_since(Instant::now());
        handles.push(timer.schedule(move || record_lateness(index, deadline), delay));
    }
    let sched = start.elapsed();
    if sched >= lead {
        eprintln!("W8: scheduling took {sched:?}, past the common deadline");
    }
    DONE.wait(WAIT_LIMIT + lead);

    let late: Vec<i64> = LATENESS
        .get()
        .expect("set above")
        .iter()
        .map(|s| s.load(Ordering::Relaxed))
        .filter(|&ns| ns != i64::MIN)
        .collect();
    let first = late.iter().copied().min().unwrap_or(0);
    let last = late.iter().copied().max().unwrap_or(0);
    let ms = |ns: i64| ns as f64 / 1e6;
    drop(handles);
    vec![
        ("fired", late.len() as f64),
        ("sched_ms", sched.as_secs_f64() * 1e3),
        ("first_late_ms", ms(first)),
        ("last_late_ms", ms(last)),
        (
            "drain_per_s",
            late.len() as f64 / ((last - first).max(1) as f64 / 1e9),
        ),
        (
            "early_count",
            late.iter().filter(|&&ns| ns < 0).count() as f64,
        ),
    ]
}

/// W4: `n` immediate tasks from one submitter, then `n` more from two (n / 2 each). Besides the
/// rates, the CPU each task cost the whole process (submitting, running, waking, idling threads'
/// spins): on two cores with four busy threads the rate also depends on how the OS shares them
/// out, the CPU per task much less.
fn execute<T: Timer>(timer: &T, n: u64) -> Figures {
    DONE.reset(n);
    let cpu = probe::cpu_ns();
    let start = Instant::now();
    for _ in 0..n {
        timer.execute(bump);
    }
    DONE.wait(WAIT_LIMIT);
    let one = n as f64 / start.elapsed().as_secs_f64();
    let cpu_one = probe::cpu_ns().saturating_sub(cpu) as f64 / n as f64;

    let per_submitter = n / 2;
    DONE.reset(per_submitter * 2);
    // The submitters exit before the second reading: each adds its own CPU time first.
    let submitters_ns = AtomicU64::new(0);
    let cpu = probe::cpu_ns();
    let start = Instant::now();
    thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..per_submitter {
                    timer.execute(bump);
                }
                submitters_ns.fetch_add(probe::thread_cpu_ns(), Ordering::Relaxed);
            });
        }
    });
    DONE.wait(WAIT_LIMIT);
    let two = (per_submitter * 2) as f64 / start.elapsed().as_secs_f64();
    let cpu_two = (probe::cpu_ns().saturating_sub(cpu) + submitters_ns.into_inner()) as f64
        / (per_submitter * 2) as f64;

    vec![
        ("tasks_per_s_1_submitter", one),
        ("tasks_per_s_2_submitters", two),
        ("cpu_ns_per_task_1_submitter", cpu_one),
        ("cpu_ns_per_task_2_submitters", cpu_two),
    ]
}

/// W5: `k` fixed-rate tasks, period 10 ms, initial delay uniform in [0, 10 ms]; cancel all after
/// `run_for`.
fn periodic<T: Timer>(timer: &T, k: u64, run_for: Duration) -> Figures {
    const PERIOD: Duration = Duration::from_millis(10);
    let inits = uniform_delays(k, Duration::ZERO, PERIOD);
    let mut handles = Vec::with_capacity(k as usize);
    DONE.reset(u64::MAX);

    let before = Snapshot::take();
    let start = Instant::now();
    for &init in &inits {
        handles.push(timer.schedule_at_fixed_rate(bump, init, PERIOD));
    }
    thread::sleep(run_for.saturating_sub(start.elapsed()));
    for handle in handles.drain(..) {
        timer.cancel(handle);
    }
    let executions = DONE.count();
    let after = Snapshot::take();

    let ideal = k as f64 * (run_for.as_secs_f64() / PERIOD.as_secs_f64()).round();
    vec![
        ("executions", executions as f64),
        ("ideal", ideal),
        ("ratio", executions as f64 / ideal),
        ("cpu_ms", after.cpu_ms_since(&before)),
    ]
}

/// W6: one task at 1 h, then sleep `idle_for`: what does an idle pool cost?
fn idle<T: Timer>(timer: &T, idle_for: Duration) -> Figures {
    // Let the threads finish starting up: their start is not idleness.
    thread::sleep(Duration::from_millis(100));
    let lone = lone_timers(timer);
    // Let the threads go back to sleep after the lone timers.
    thread::sleep(Duration::from_millis(100));
    let handle = timer.schedule(bump, Duration::from_secs(3600));
    let before = Snapshot::take();
    thread::sleep(idle_for);
    let after = Snapshot::take();
    drop(handle);
    vec![
        ("cpu_ms", after.cpu_ms_since(&before)),
        ("wakeups", after.switches_since(&before) as f64),
        ("lone_p50_us", lone[0]),
        ("lone_p99_us", lone[1]),
    ]
}

/// Before W6's idle window: `LONE` timers one at a time on the idle pool, each 1-2 ms out and
/// waited for before the next is set. Returns their lateness p50 and p99 in microseconds: what
/// a lone timeout or heartbeat sees.
fn lone_timers<T: Timer>(timer: &T) -> [f64; 2] {
    const LONE: u64 = 100;
    let delays = uniform_delays(LONE, Duration::from_millis(1), Duration::from_millis(2));
    let mut late = Vec::with_capacity(delays.len());
    for delay in delays {
        let (tx, rx) = std::sync::mpsc::channel();
        let deadline = Instant::now() + delay;
        let _handle = timer.schedule(move || tx.send(Instant::now()).unwrap_or(()), delay);
        let ran = rx.recv_timeout(WAIT_LIMIT).expect("a lone timer never ran");
        late.push(match ran.checked_duration_since(deadline) {
            Some(d) => saturating_ns(d),
            None => -saturating_ns(deadline - ran),
        });
    }
    late.sort_unstable();
    let us = |ns: i64| ns as f64 / 1e3;
    [us(percentile(&late, 50)), us(percentile(&late, 99))]
}

/// Counts task runs process-wide and wakes the waiter when a target is reached.
struct DoneCounter {
    count: AtomicU64,
    target: AtomicU64,
    reached: Mutex<bool>,
    wake: Condvar,
}

/// The counter every task of every workload bumps.
static DONE: DoneCounter = DoneCounter {
    count: AtomicU64::new(0),
    target: AtomicU64::new(u64::MAX),
    reached: Mutex::new(false),
    wake: Condvar::new(),
};

/// The task of every workload: one count.
fn bump() {
    DONE.bump();
}

impl DoneCounter {
    /// Starts a new count towards `target`. Call before any task of the round can run.
    fn reset(&self, target: u64) {
        *self.reached.lock().expect("poisoned") = false;
        self.count.store(0, Ordering::Relaxed);
        self.target.store(target, Ordering::Relaxed);
    }

    fn bump(&self) {
        // AcqRel: the bumps form one release sequence, so the task that reaches the target has
        // seen every earlier task's writes (W3's lateness slots) and hands them on through the
        // mutex to the waiter.
        let count = self.count.fetch_add(1, Ordering::AcqRel) + 1;
        if count == self.target.load(Ordering::Relaxed) {
            *self.reached.lock().expect("poisoned") = true;
            self.wake.notify_all();
        }
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Blocks until the target is reached or `limit` has passed.
    fn wait(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut reached = self.reached.lock().expect("poisoned");
        while !*reached {
            let now = Instant::now();
            if now >= deadline {
                eprintln!("gave up waiting after {limit:?}: {} done", self.count());
                return;
            }
            reached = self
                .wake
                .wait_timeout(reached, deadline - now)
                .expect("poisoned")
                .0;
        }
    }
}

/// `n` delays uniform in [`low`, `high`] at nanosecond grain, from [`SEED`].
fn uniform_delays(n: u64, low: Duration, high: Duration) -> Vec<Duration> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let (low, high) = (saturating_ns(low), saturating_ns(high));
    (0..n)
        .map(|_| Duration::from_nanos(rng.gen_range(low..=high) as u64))
        .collect()
}

/// An empty vector with room for `n` items whose memory is already resident, so that the RSS
/// taken before a workload already holds the handles' storage.
fn touched_vec<H>(n: u64) -> Vec<H> {
    let mut v = Vec::with_capacity(n as usize);
    v.spare_capacity_mut()
        .iter_mut()
        .for_each(|slot: &mut MaybeUninit<H>| *slot = MaybeUninit::zeroed());
    v
}

/// The `p`-th percentile (nearest rank) of sorted `values`, 0 if empty.
fn percentile(sorted: &[i64], p: usize) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

fn per_op_ns(elapsed: Duration, n: u64) -> f64 {
    elapsed.as_nanos() as f64 / n as f64
}

fn per_timer(after: u64, before: u64, n: u64) -> f64 {
    (after as f64 - before as f64) / n as f64
}

fn saturating_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

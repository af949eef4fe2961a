//! A worker thread's loop: take a task from the ready queues (`queues.rs`, whose ground rules
//! cover fairness and the `taking` flag), run it through the core, and when there is nothing to
//! do search a little, then sleep (`sleep.rs`), perhaps as the timer's watcher.

use super::core::Core;
use super::lifecycle::Lifecycle;
use super::queues::{Found, Taking, Turns};
use super::run;
use super::sleep::{Watch, Woke};
use crate::sync::{Arc, Worker};
use crate::task::TaskRef;
use crate::timer::duration_nanos;
use std::time::{Duration, Instant};

/// Rounds of looking for work before a worker announces itself as a sleeper. Each round spins a
/// little longer (15 spin hints in all: 0.3 us on the Intel VM, where a spin hint takes 21 ns).
/// Short: an idle pool must not burn CPU, and a pool woken for each of a stream of sparse
/// deadlines searches once per wake-up. With 7 rounds (127 hints, 2.7 us) 20 000 one-second
/// heartbeats spent a fifth of their CPU spinning (2.45 s over 4 s against 1.95 s with 4
/// rounds), and W4 ran no faster. No round yields: on a machine whose CPUs are all busy a
/// `yield_now` gives the CPU away until the scheduler's next tick (4 ms on the 2-core machine),
/// and a searching worker is one that pushes count on to find their task (`Sleep::notify`), so
/// a due timer waited behind it (seen in traces of the cancel-storm benchmark).
#[cfg(not(wheelpool_loom))]
const SPIN_ROUNDS: u32 = 4;
#[cfg(wheelpool_loom)]
const SPIN_ROUNDS: u32 = 0;

/// A worker thread's body.
pub(crate) fn run(core: Arc<Core>, index: usize, deque: Worker<TaskRef>) {
    crate::timer::mark_pool_thread(&core.timer.time.clock);
    crate::timer::home::set(index); // workers spread over the timer shards
    let queues = &core.queues;
    queues.bind(index, deque);
    queues.sleep.register(index);
    let mut turns = Turns::default();
    // As the watcher: our last poll at a watched tick met no locked shard (`Timer::watch_tick`).
    let mut eager = true;
    // As the watcher: when our last poll left waking helpers to the timer thread.
    let mut left_at = None;
    loop {
        match queues.take(index, &mut turns, core.lifecycle_cell()) {
            Found::Task(task, taking) => {
                turns.ran();
                run_taken(&core, index, task, taking);
                continue;
            }
            Found::ShutdownNow => break,
            Found::Nothing => {}
        }
        if core.worker_should_exit() {
            break;
        }
        let sleep = &queues.sleep;
        sleep.start_searching();
        let found = spin_for_work(&core, index, &mut turns);
        let last_searcher = sleep.stop_searching();
        match found {
            Found::Task(task, taking) => {
                if last_searcher {
                    sleep.notify(1); // pushes may have skipped waking anyone while we searched
                }
                turns.ran();
                run_taken(&core, index, task, taking);
                continue;
            }
            Found::ShutdownNow => break,
            Found::Nothing => {}
        }
        if let Some(at) = left_at.take() {
            batch_ran(&core, at);
        }
        let watch = TimerWatch { core: &core, eager };
        let watching = core.may_watch().then_some(&watch as &dyn Watch);
        let woke = sleep.sleep(
            index,
            || queues.has_work() || core.worker_should_exit(),
            watching,
        );
        if woke == Woke::Due {
            (eager, left_at) = poll_due(&core, index);
        }
    }
    queues.unbind();
}

/// How long a watcher whose poll met a locked shard waits before it polls a due tick again:
/// about one poll's hold of the lock, and no spinning against it.
const RETRY: Duration = Duration::from_micros(10);

/// The watcher's view of the timer (see "The watcher" in `timer/mod.rs`).
struct TimerWatch<'a> {
    core: &'a Core,
    /// The worker's last poll at a watched tick met no locked shard.
    eager: bool,
}

impl Watch for TimerWatch<'_> {
    fn until(&self) -> Option<Instant> {
        let timer = &self.core.timer;
        let tick = timer.watch_tick()?;
        let mut at = timer.wake_nanos(tick);
        let now = timer.time.now_nanos();
        if !self.eager && at <= now {
            // Our last poll met a locked shard: do not poll a due tick again at once.
            at = now.saturating_add(duration_nanos(RETRY));
        }
        Some(timer.time.wake_instant(at))
    }

    fn unwatch(&self) {
        self.core.timer.unwatch();
    }
}

/// The watcher's tick came: take what is due out of the wheels that nobody holds and push it
/// to the ready queues, this worker's first. Under the `taking` flag, like any take (ground
/// rules in `queues.rs`), so `shutdown_now` either finds the pool stopped before we poll or
/// waits for our pushes and sweeps them.
/// Returns false if a shard with something due was locked (`Timer::help_poll`), and when the
/// poll left waking helpers to the timer thread, if it did (`push_polled`).
fn poll_due(core: &Core, index: usize) -> (bool, Option<u64>) {
    let (taking, life) = core.queues.raise_taking(index, core.lifecycle_cell());
    let mut all = true;
    let mut left_at = None;
    if life == Lifecycle::Running {
        let mut due = Vec::new();
        all = core.timer.help_poll(&mut due);
        left_at = push_polled(core, &mut due);
    }
    // Release (in `lower`): publishes our pushes to the sweep that follows `quiesce`.
    taking.lower();
    (all, left_at)
}

/// What the watcher's poll took, onto its own deque; helpers for all but the first woken now,
/// or left to the timer thread ("Helpers for the watcher's due tasks" in `timer/mod.rs`).
/// Returns when it left them (nanoseconds since the origin), if it did.
pub(crate) fn push_polled(core: &Core, due: &mut Vec<TaskRef>) -> Option<u64> {
    let mut left_at = None;
    core.queues.push_from_watcher(due, |n| {
        left_at = core.timer.leave_helpers(n);
        left_at.is_some()
    });
    left_at
}

/// A watcher that left waking helpers to the timer thread at `left_at` has run out of work: if
/// that took longer than [`LONG_BATCH`], its tasks (or what it took after them) were long, and
/// for a while the watcher wakes helpers itself (`Timer::helpers_at_once`): a helper then comes
/// after one wake-up, not after the timer thread's and then its own.
fn batch_ran(core: &Core, left_at: u64) {
    let timer = &core.timer;
    if timer.time.now_nanos().saturating_sub(left_at) > duration_nanos(LONG_BATCH) {
        timer.helpers_at_once();
    }
}

/// Longer than this from leaving helpers to running out of work, a watcher's batch is long (see
/// `batch_ran`): about the timer thread's backstop, by when it would have woken a helper anyway.
const LONG_BATCH: Duration = Duration::from_micros(200);

/// Runs a task worker `index` took, then lets go of the worker's reference. If that was the
/// last one, the task's unread result or closure is dropped here, where a panicking `Drop`
/// cannot unwind the worker.
fn run_taken(core: &Core, index: usize, task: TaskRef, taking: Taking<'_>) {
    run::run_task(core, index, &task, Some(&taking));
    taking.lower(); // the task did not start (cancelled, stopped): lower the flag now
    crate::panic::drop_user(task);
}

/// Looks for work a few more times before sleeping.
fn spin_for_work<'a>(core: &'a Core, index: usize, turns: &mut Turns) -> Found<'a> {
    for round in 0..SPIN_ROUNDS {
        for _ in 0..(1u32 << round) {
            std::hint::spin_loop();
        }
        match core.queues.take(index, turns, core.lifecycle_cell()) {
            Found::Nothing => {}
            found => return found,
        }
    }
    Found::Nothing
}

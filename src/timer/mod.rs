//! The timer side: the clock, the sharded wheels, and the timer thread (driver) that polls them.
//!
//! # Ground rules
//!
//! **Shards.** Pending tasks live in `shards.len()` (a power of two) hierarchical wheels, each
//! under its own short lock. A task's shard is fixed when it is created: the *home shard* of the
//! scheduling thread (a worker's own index; other threads are dealt shards round-robin from the
//! last one down, `home.rs`), kept in its header. Producers on different threads therefore
//! rarely meet on one lock, and a periodic task re-arms into the shard that already knows it.
//!
//! **No queues between producers and the timer thread.** An insert, a cancel's unlink and a reset
//! each take the task's shard lock (blocking: the lock is held for O(1) work by producers and
//! for at most `CHUNK` entries by the driver) and change the wheel themselves. So a cancel frees
//! the task's wheel entry before it returns, and nothing producers do can build a backlog or hold
//! the memory of cancelled tasks: there is nowhere for either to wait.
//!
//! - `Header::wheel_key` is written only under the task's shard lock, and read there (but for
//!   a pointer's drop looking for the mark below, `task/ptr.rs`). An insert checks
//!   under that lock that the task is still `SCHEDULED`; a cancel wins `SCHEDULED -> CANCELLED`
//!   before it takes the lock. Either the insert sees the cancel (and does not insert) or the
//!   cancel's lock comes after the insert (and it unlinks the entry by the recorded key).
//!   Whenever a task leaves the wheel (fired, unlinked, swept by a graceful shutdown), its key
//!   is cleared under the same lock. `shutdown_now` alone leaves the keys: it swaps the whole
//!   wheel out of a shard it stops, and the empty wheel that stays never takes an entry. An
//!   unlink also checks that the entry it finds is this very task (a wheel key is a slab
//!   index, reused by later entries), so no task can ever unlink another. A cancel's unlink
//!   leaves the key `ORPHANED` for good instead: it gave the wheel's pointer up rather than
//!   drop it (`task/ptr.rs`, "A share given up").
//! - A shard has a gate. `Open`: everything goes in. `Closing` (graceful shutdown): only the
//!   tasks the pool's policy keeps ([`Keep`]: by default one-shots, not periodic tasks) go in.
//!   `Stopped` (`shutdown_now`): everything is refused. The
//!   driver moves the gate under the shard's lock, so an insert either lands before the driver's
//!   sweep of that shard (and the sweep finds it) or is refused (and the caller stops the task
//!   itself). No insert slips in behind a sweep.
//!
//! **Bounded locked work.** The driver polls each due shard with a budget of `CHUNK` entries, hands
//! the chunk to the workers after releasing the lock, and moves on to the next shard; a shard with
//! more due goes round again without sleeping. A storm of a million equal deadlines therefore
//! comes out a chunk at a time, the first chunk at once, and a timer due in another shard waits
//! for at most one chunk per shard. The shard locks never park (`sync/spin.rs`: their unlock is
//! a store), and the driver takes them with `lock_urgent`: it waits for the current holder
//! only, never for producers that would barge in after it.
//!
//! **Memory given back.** Wherever entries leave a wheel (a cancel's unlink, a poll that fires
//! them, the driver's or the watcher's), a shard left empty gives back its wheel's room past
//! `RELEASE_AT` entries, in O(1) under the lock (`give_back_if_empty`), and the memory is
//! freed after unlocking: by a canceller at once; by a poller not before the timers that poll
//! found (`Spare`), since freeing megabytes takes about a millisecond. The driver frees what
//! its own polls gave up as it parks, after it has handed them out and nudged the watcher; the
//! watcher hands what its polls gave up to the driver and wakes it (rare: a shard of more than
//! `RELEASE_AT` entries' room emptied), so a task it then runs, however long, holds nothing.
//! A free can delay the driver's next pass by that millisecond, once per emptied shard. A
//! shard that still holds entries keeps its room (its peak entry count rounded up to a whole
//! chunk of the slab, at most twice that plus 62, times 32 B) until it empties: compacting live entries would be
//! unbounded work under the lock. The slab grows by chunks that never move, so growing is
//! one allocation under the lock, never a copy of the entries (`wheel/nodes.rs`).
//!
//! **Hints.** Each shard keeps, beside its lock, a `hint`: a lower bound on the earliest tick in
//! its wheel, written only under the lock (an insert below it lowers it; a poll, the driver's or
//! the watcher's, sets it to the wheel's next expiration; a cancel leaves it, still a lower
//! bound). The driver reads
//! hints without the lock and locks only shards with something due: a shard that cancellers keep
//! busy costs the timer thread nothing (a cancel storm once held a due timer up while the
//! driver queued for such locks).
//!
//! **Sleep vs. new deadlines** (no lost wake-up; a fence only on inserts that lower a hint).
//! - `sleep_until` holds the tick the driver sleeps until, or `AWAKE` while it works. Only the
//!   driver stores a tick; anyone may CAS it to `AWAKE`, and the winner unparks the driver.
//! - The driver *announces* its sleep tick (the least hint it saw), then `fence(SeqCst)`, then
//!   re-reads every hint; only if none is earlier does it park.
//! - A producer whose insert lowered a hint unlocks, then `fence(SeqCst)`, then reads
//!   `sleep_until`; if its tick is earlier it wins the CAS and unparks. The two fences make a
//!   Dekker pair: either the driver's re-read sees the lowered hint (and it does not park), or
//!   the producer's read sees the announced tick (and wakes it if its own is earlier). An insert
//!   that did not lower its shard's hint needs nothing: the driver already sleeps until that
//!   hint or earlier, or was woken by whoever lowered it.
//! - The parker keeps one token, so an unpark that lands before the park is not lost.
//! - An idle pool parks without a time limit: no periodic wake-ups.
//!
//! **The watcher** (one wake-up between a deadline and its run, not two). With only the timer
//! thread, a due timer waits for two wake-ups in a row: the timer thread's, then the worker's it
//! hands the task to. On a machine whose CPUs are all busy each wake-up may wait for the OS
//! scheduler's next tick (4 ms here), so the two add up (6 ms in a cancel storm). So one
//! idle worker at a time, the *watcher*, parks until the tick the driver sleeps until, and when
//! that comes polls the due shards itself (`help_poll`) and runs what it found. The driver
//! stays the one that is always right: the watcher only ever takes work off it.
//! - **The driver is the backstop** while the pool runs (a watcher polls only then). When the
//!   watcher watches the tick the driver will sleep until (or an earlier one, or was just
//!   nudged to read it), the driver parks until the *backstop* after it (50 us, or up to
//!   200 us, below), and while a watcher watches any tick, a pass of the driver takes only
//!   entries due at least the backstop ago. Were both to wake at the tick, the driver (its
//!   lock blocking, the watcher's not) took most timers first and woke a worker for them: a
//!   second wake-up, 14 us from its poll to the run (median, W3) against 3 us.
//! - **The backstop adapts** (`Driver::adapt_backstop`): it doubles, up to 200 us, each time
//!   the driver wakes as the backstop and finds that the watcher handed everything out, and
//!   falls back to 50 us as soon as a pass finds entries the watcher left. A watcher that keeps
//!   up with deadlines one every 50 us (20 000 one-second heartbeats) thus costs the driver a
//!   wake-up per 200 us, not one per deadline (that pool's CPU: 1.26 s over 4 s, against
//!   1.77 s). When the watcher fails a timer (busy, or slow to get a CPU), the driver hands it
//!   out within the backstop in force (at most 200 us) of its deadline plus the slack, and the
//!   backstop is 50 us again for the next ones. A watcher that stays late by less than the
//!   backstop hands everything out itself, late by that much, and the backstop stays long.
//!   Nothing here changes a fence pair: the driver still announces its tick, producers still
//!   wake it for earlier ones, and it wakes for every entry at the latest the backstop plus
//!   the slack after its deadline.
//! - `help_poll` takes shard locks with `try_lock` (a worker never waits for the wheel: a locked
//!   shard is being polled by the driver or changed by a producer, and the driver is awake at
//!   that tick too) and polls one chunk per shard.
//! - The watcher registers (in the pool's `Sleep`), stores `watch = u64::MAX` ("nudge me"),
//!   `fence(SeqCst)`, reads `sleep_until` and, if it is a tick, stores it in `watch` and parks
//!   until it. The driver, after its own fence in `announce_and_check`, reads `watch` and asks
//!   the pool to nudge the watcher if it watches a later tick than the one it will sleep until.
//!   The two fences make a Dekker pair: either the watcher read the driver's tick, or the driver
//!   sees the registration and `u64::MAX` (or the tick the watcher then read) and nudges. A nudge
//!   makes the watcher read `sleep_until` again; a missed one would only cost latency.
//! - A watcher that finds the driver's tick already come (the driver is waking for it, or the
//!   watcher just polled it) watches the earliest hint instead of parking until a nudge, even
//!   a hint already due: then it polls at once. The driver will announce that hint or an
//!   earlier one, and nudges as above if it is earlier, so the pair's promise is unchanged.
//!   Under dense deadlines this is most registrations. A watcher whose last poll met a locked
//!   shard waits `RETRY` (10 us, `pool/worker.rs`) before it polls a due hint again, so it
//!   never spins against a lock holder.
//! - A tick more than `WATCH_AHEAD` (50 ms) away is not worth a worker's wake-up yet: the driver
//!   then parks until `WATCH_AHEAD` before it (never later than its announced tick, so nothing
//!   above changes) and nudges on that pass. An idle pool given a timer an hour away wakes no
//!   worker for it.
//! - A watcher only polls while the pool is running and under its `taking` flag, so
//!   `shutdown_now` sweeps whatever it took out of a wheel (see `pool/queues.rs`). With a manual
//!   clock nobody watches: the driver alone settles time.
//!
//! **Helpers for the watcher's due tasks** (no wake-up for a batch one worker runs at once).
//! A watcher whose poll finds several tasks due pushes them all onto its own deque and runs
//! them. Waking a sleeper for the others at once costs a futex wake-up before the first runs,
//! and, when the tasks are short (heartbeats, timeouts), a worker that wakes to find them
//! already run: W3 spent 16% of its CPU so (one deadline per 10 us; 20 000 one-second
//! heartbeats, 19%). So for up to `LEAVE_AT_MOST` (7, `pool/queues.rs`) such tasks the watcher
//! leaves the waking to the driver, which does it on its next pass if they still wait: behind
//! a long first task they wait at most that long for a helper. More than that is a burst, and
//! helpers are woken at once, as for a push.
//! - The watcher adds the count to `helpers_owed`, `fence(SeqCst)`, reads `sleep_until`. It
//!   leaves the waking to the driver if the driver is in a pass (`AWAKE`) or sleeps until a
//!   tick whose wake-up time has come: the driver then parks until at most that time plus
//!   `MAX_BACKSTOP` (`Driver::tell_watcher_and_park`), so its next pass is at most
//!   `MAX_BACKSTOP`, plus the slack it read stale, away. Otherwise (the driver sleeps until a
//!   later tick, or without a limit) the watcher wakes them itself.
//! - The driver, after the fence of every announcement (and on every pass that goes round
//!   again), takes the count and, if the ready queues hold work, wakes that many sleepers
//!   (`Host::wake_helpers`, less the searchers as for any push).
//! - The fences make a Dekker pair: either the driver's read after its fence sees the count,
//!   or the watcher's read sees the tick the driver announced with that fence. A watcher that
//!   read `AWAKE` read it before that announcement, so the driver's read sees the count.
//!   Nothing here can lose a task: the tasks are in a worker's deque, and at worst wait for
//!   that worker; the protocol bounds how long they wait for a helper.
//! - Leaving costs a task behind a long one two wake-ups in a row (the driver's, then the
//!   helper's) where waking at once cost one: with the first task spinning on one of two busy
//!   CPUs, the others' wait went from 37 to 240 us at the median, and past 1.5 ms in 38% of
//!   rounds instead of 17%. So a watcher that left them and then ran for longer than
//!   `LONG_BATCH` (200 us, the backstop's longest: by then the driver has done the waking)
//!   before it ran out of work marks the pool (`helpers_at_once`), and for `HELPERS_AT_ONCE`
//!   (100 ms) every watcher wakes helpers at once. Timers whose runs are short never set it.
//!
//! **Coalescing** (precise when timers are sparse, batched when they are dense). Deadlines are
//! kept to the tick (1 us by default), so a lone timer fires at its deadline plus one wake-up.
//! But a dense stream of deadlines (ten thousand 10 ms heartbeats are one every microsecond)
//! would cost a wake-up of the timer thread and a worker per deadline. So the driver and the
//! watcher sleep until the earliest deadline *plus a slack*, and take everything due by then in
//! one pass. The slack adapts: when the driver goes to sleep it sets it to `SLACK_PER_TASK`
//! (2 us) per task that came due (driver's and watcher's polls, `fired`) since it last went to
//! sleep, at most `MAX_SLACK` (1 ms) less the tick, or to nothing if those tasks came sparser
//! than one per `DENSE_GAP` (4 us) over that time. Deadlines one per 10 us (W3) thus get no
//! slack (a count alone gave them a few microseconds, more after every late wake-up, and a
//! longer tail); denser ones grow it to the cap, where a pool batches like the 1 ms tick it had
//! before (W5: one deadline per microsecond). A manual clock has no slack.
//! - The slack only moves *when* the sleeper wakes, never what is due: polls take entries due
//!   by the current time, so nothing fires early, and a timer waits at most the slack (1 ms)
//!   more than without it.
//! - `sleep_until` still holds the earliest tick, not the tick plus slack: a producer wakes the
//!   driver only for a deadline earlier than every known one (the Dekker pair is unchanged), and
//!   a deadline inside the slack window is taken by the coalesced wake-up.
//! - `slack` and `fired` are `Relaxed`: a stale value moves a wake-up within the slack bound.
//!
//! **Staging** (no due timer waits behind a coarse slot's cascade). At a 1 us tick a slot of
//! level 3 spans 262 ms; 100 000 timers over a second put 26 000 in one, and cascading them
//! when the slot's first tick came took 0.3-0.8 ms under the lock while its first timers were
//! due. So every poll ends with a short step of `Wheel::stage_ahead_from`, which moves the
//! entries of coarse slots starting within `STAGE_AHEAD` (250 ms) to the finer level they
//! will cascade to (wheel/stage.rs); when such a slot comes, it is live in O(1).
//! - Which levels (`Timer::staging`): level 2 and up while the timer side is precise, level 3
//!   and up while it batches (slack at least half the cap). A level-2 slot spans 4 ms: W3 puts
//!   400 timers in one, whose cascade took 20-100 us and was W3's p99; a dense stream puts
//!   thousands in one, but then its cascade hides in the slack, and a build that staged level
//!   2 always cost W5 5-9% more CPU. Levels 0 and 1 are never staged.
//! - How much: a step is short, so that the entries a poll found due, or that come due while
//!   the driver stages, wait for a few microseconds of it, not for a chunk: at most
//!   `STAGE_WITH_DUE` (16) moves in a poll that found due entries (they are handed out after
//!   it), `STAGE_STEP` (64) otherwise. 512 moves of cold entries took 20-100 us.
//!
//! A poll whose step ran out while staging reports it (`Polled::stage`), and the driver polls
//! that shard again at once, releasing the lock in between, until nothing is left to
//! stage. The horizon keeps staging off timers that are cancelled long before they are due.
//! A shard with nothing due is polled too once its hint comes within the horizon (once per
//! hint), and the driver wakes `WATCH_AHEAD` before a hint no poll has staged at: a crowded
//! slot scheduled long before, in a shard nothing polls meanwhile, would otherwise be cascaded
//! whole when its first tick came (300 000 timers: its first ones 2.2 ms late; 0.08 ms so).

mod clock;
pub(crate) mod driver;
pub(crate) mod home;
mod settle;
mod shard;

pub use clock::ManualClock;
pub(crate) use clock::{duration_nanos, mark_pool_thread, Clock, ClockListener, TimeBase};
pub(crate) use home::PoolId;
pub(crate) use settle::Settle;
pub(crate) use shard::{clear_keys, Keep, NotInserted, Shard, ShardCell, Spare, Staging, CHUNK};
use shard::{give_back_if_empty, unlink, Gate};

use crate::error::ResetError;
use crate::sync::{
    fence, AtomicBool, AtomicU64, AtomicUsize, CachePadded, Mutex, Ordering, Parker, SpinMutex,
    SpinMutexGuard,
};
use crate::task::state::{End, Snapshot};
use crate::task::{Header, RawTask, TaskRef};
use crate::wheel::Wheel;
use std::time::Duration;

/// How long the watcher wakes helpers for its due tasks itself after a batch it left to the
/// driver turned out long (see "Helpers for the watcher's due tasks"): timers whose runs are
/// long get their helper in one wake-up, not the driver's and then the helper's.
const HELPERS_AT_ONCE: Duration = Duration::from_millis(100);

/// `sleep_until` while the driver is awake: no deadline tick is earlier, so nobody wakes it.
const AWAKE: u64 = 0;

/// Most shards a pool has. More would only make the driver's passes longer.
const MAX_SHARDS: usize = 64;

/// The most a due timer waits for company (see "Coalescing" in the ground rules), tick
/// included: a pool at a tick this coarse or coarser never adds slack.
const MAX_SLACK: Duration = Duration::from_millis(1);

/// How far ahead of its first tick a coarse slot is staged (see "Staging"): far enough to
/// stage a million entries before it comes, near enough that timeouts cancelled within a few
/// hundred milliseconds (RPC timeouts) are never moved.
const STAGE_AHEAD: Duration = Duration::from_millis(250);

/// Slack granted per task that came due while the timer side last slept (see "Coalescing").
/// At this rate the slack settles near zero while deadlines come less often than one per
/// 2 us, and grows to [`MAX_SLACK`] when they come more often.
const SLACK_PER_TASK: Duration = Duration::from_micros(2);

/// Deadlines that came due sparser than one per this, on average since the driver last slept,
/// get no slack at all (see "Coalescing"): their timers are each woken for.
const DENSE_GAP: Duration = Duration::from_micros(4);

/// The tasks that had come due by a moment, and that moment (nanoseconds since the origin):
/// what the driver remembers of its last sleep to set the next slack (see "Coalescing").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SlackMark {
    pub(crate) fired: u64,
    pub(crate) at: u64,
}

/// The slack after `tasks` came due over `elapsed` nanoseconds: none unless they came at least
/// one per [`DENSE_GAP`] on average, else [`SLACK_PER_TASK`] per task, at most `max`.
fn coalescing_slack(tasks: u64, elapsed: u64, max: u64) -> u64 {
    if tasks.saturating_mul(duration_nanos(DENSE_GAP)) < elapsed {
        return 0;
    }
    tasks
        .saturating_mul(duration_nanos(SLACK_PER_TASK))
        .min(max)
}

/// Where the pool is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// Taking tasks.
    Running,
    /// `shutdown`: no new tasks; waiting tasks run or stop as the pool's [`Keep`] says (by
    /// default one-shots run, periodic tasks stop).
    Shutdown,
    /// `shutdown_now`: nothing new starts.
    ShutdownNow,
}

/// What the timer side needs from the pool above it (implemented by the pool's core; the timer
/// never names the pool's types).
pub(crate) trait Host: Send + Sync + 'static {
    /// The pool's identity (the timer thread marks itself with it).
    fn id(&self) -> PoolId;
    /// The pool's timer.
    fn timer(&self) -> &Timer;
    /// Where the pool is in its life.
    fn lifecycle(&self) -> Lifecycle;
    /// Pushes due tasks to the pool's ready queues, emptying `due`.
    fn push_due(&self, due: &mut Vec<TaskRef>);
    /// `shutdown_now`: the tasks the wheels held, to be stopped and returned.
    fn hand_back(&self, tasks: Vec<TaskRef>);
    /// Which waiting tasks a graceful shutdown keeps.
    fn keep_at_shutdown(&self) -> Keep;
    /// Graceful shutdown: one-shots the sweep took out of the wheels (not kept, not yet due),
    /// to be stopped and kept for the user without running (or dropping) their closures.
    fn hand_back_at_shutdown(&self, tasks: Vec<TaskRef>);
    /// After a graceful shutdown: true once no admitted task is left.
    fn drained(&self) -> bool;
    /// The driver will sleep until an earlier tick than the watcher watches: make the watcher
    /// (if a worker is watching) read the tick again. True if a watcher was nudged.
    fn nudge_watcher(&self) -> bool;
    /// The watcher left `n` of its due tasks for a helper if they still wait (see "Helpers for
    /// the watcher's due tasks"): wake up to `n` sleepers if the ready queues hold work.
    fn wake_helpers(&self, n: usize);
}

/// A manual clock talks to the timer of each pool on it: every pool's timer side is a clock
/// listener, through its host (the pool above implements only `Host`).
impl<H: Host> ClockListener for H {
    fn settle(&self) -> Option<std::time::Instant> {
        self.timer().settle_wait()
    }

    fn time_moved(&self) {
        self.timer().wake();
    }

    fn activity(&self) -> u64 {
        self.timer().settle.as_ref().map_or(0, |s| s.activity())
    }
}

/// What producers share with the timer thread.
#[derive(Debug)]
pub(crate) struct Timer {
    pub(crate) time: TimeBase,
    pub(crate) shards: Box<[CachePadded<ShardCell>]>,
    sleep_until: CachePadded<AtomicU64>,
    /// The tick the watcher parks until; `u64::MAX` while nobody watches a tick (ground rules).
    watch: CachePadded<AtomicU64>,
    parker: Parker,
    /// Only with a manual clock: how `ManualClock::advance` waits for the pool to settle.
    pub(crate) settle: Option<Settle>,
    driver_gone: AtomicBool,
    /// Tasks taken out of the wheels so far, by the driver or the watcher (see "Coalescing").
    fired: CachePadded<AtomicU64>,
    /// Nanoseconds the driver and the watcher sleep past the earliest deadline; written by the
    /// driver only, read by the watcher (see "Coalescing").
    slack: AtomicU64,
    /// The largest slack this pool uses: [`MAX_SLACK`] less the tick, 0 with a manual clock.
    max_slack: u64,
    /// [`STAGE_AHEAD`] in ticks.
    stage_horizon: u64,
    /// Storage that the watcher's polls took from emptied shards, for the timer thread to free
    /// as it parks (`Spare`; see "Memory given back").
    spare: Mutex<Spare>,
    /// Helpers the watcher left the driver to wake if its due tasks still wait (see
    /// "Helpers for the watcher's due tasks").
    helpers_owed: CachePadded<AtomicUsize>,
    /// Until when (nanoseconds since the origin) the watcher wakes helpers itself: set when a
    /// batch it left to the driver was long (see "Helpers for the watcher's due tasks").
    helpers_at_once_until: AtomicU64,
}

impl Timer {
    /// A timer with enough shards for `threads` workers and about as many outside producers.
    pub(crate) fn new(time: TimeBase, threads: usize) -> Self {
        let n = threads
            .saturating_mul(2)
            .clamp(8, MAX_SHARDS)
            .next_power_of_two();
        let settle = time.clock.is_manual().then(Settle::new);
        let max_slack = if settle.is_some() {
            0 // a manual clock is exact: each deadline is settled at its own tick
        } else {
            duration_nanos(MAX_SLACK).saturating_sub(time.nanos_of_tick(1))
        };
        let stage_horizon = time.tick_ceil(duration_nanos(STAGE_AHEAD));
        Timer {
            time,
            shards: (0..n)
                .map(|_| {
                    CachePadded::new(ShardCell {
                        lock: SpinMutex::new(Shard {
                            wheel: Wheel::new(),
                            gate: Gate::Open,
                        }),
                        hint: AtomicU64::new(u64::MAX),
                    })
                })
                .collect(),
            sleep_until: CachePadded::new(AtomicU64::new(AWAKE)),
            watch: CachePadded::new(AtomicU64::new(u64::MAX)),
            parker: Parker::new(),
            settle,
            driver_gone: AtomicBool::new(false),
            fired: CachePadded::new(AtomicU64::new(0)),
            slack: AtomicU64::new(0),
            max_slack,
            stage_horizon,
            spare: Mutex::new(Spare::default()),
            helpers_owed: CachePadded::new(AtomicUsize::new(0)),
            helpers_at_once_until: AtomicU64::new(0),
        }
    }

    /// When the timer side wakes for the earliest deadline `tick`: its first instant plus the
    /// slack in force, in nanoseconds since the origin (see "Coalescing").
    pub(crate) fn wake_nanos(&self, tick: u64) -> u64 {
        // Relaxed: a stale slack only moves a wake-up within the bound of MAX_SLACK.
        let slack = self.slack.load(Ordering::Relaxed);
        self.time.nanos_of_tick(tick).saturating_add(slack)
    }

    /// The driver, about to sleep: sets the slack from the tasks that came due since it last
    /// slept (`before` is the count and the time it saw then); returns the count and time now.
    pub(crate) fn adapt_slack(&self, before: SlackMark) -> SlackMark {
        let now = SlackMark {
            fired: self.fired.load(Ordering::Relaxed),
            at: self.time.now_nanos(),
        };
        let slack = coalescing_slack(
            now.fired.wrapping_sub(before.fired),
            now.at.saturating_sub(before.at),
            self.max_slack,
        );
        self.slack.store(slack, Ordering::Relaxed);
        now
    }

    /// How a poll stages now (see "Staging"): level 2 too while the timer side is precise, only
    /// level 3 and up while it batches (its slack at least half the cap). A pool without slack
    /// (a manual clock, whose time jumps make a cascade cost no lateness, or a tick of 1 ms or
    /// more, where level 2 spans 4 s and more) reads as batching: level 3 and up, as before
    /// slack-chosen staging.
    pub(crate) fn staging(&self) -> Staging {
        // Relaxed: a stale slack only picks the other level for one poll.
        let batching = self.slack.load(Ordering::Relaxed) >= self.max_slack / 2;
        Staging {
            from: if batching {
                shard::BATCHING_FROM
            } else {
                shard::PRECISE_FROM
            },
            horizon: self.stage_horizon,
        }
    }

    /// Counts tasks taken out of the wheels (the driver's or the watcher's poll).
    pub(crate) fn count_fired(&self, n: usize) {
        if n > 0 && self.max_slack > 0 {
            self.fired.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// How many shards (a power of two).
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The calling thread's shard for new tasks.
    #[inline]
    pub(crate) fn home_shard(&self) -> u16 {
        // `shards.len()` is a power of two no larger than MAX_SHARDS.
        (home::index() & (self.shards.len() - 1)) as u16
    }

    /// The shard for a new periodic task: the calling thread deals its periodic tasks over all
    /// shards in turn. A periodic task is re-armed by whichever worker ran it, so its creator's
    /// shard buys nothing, and ten thousand heartbeats created by one thread would otherwise make
    /// every worker's re-arm and the timer thread's polls queue for one lock.
    pub(crate) fn spread_shard(&self) -> u16 {
        ((home::index().wrapping_add(home::next_spread())) & (self.shards.len() - 1)) as u16
    }

    /// The shard that keeps the task whose `header` this is.
    #[inline]
    fn cell_of(&self, header: &Header) -> &ShardCell {
        &self.shards[usize::from(header.shard())]
    }

    /// Puts a `SCHEDULED` task in its shard's wheel for the deadline in its header: the wheel
    /// keeps the caller's reference (no count is bumped or dropped on the way). A task a cancel
    /// won in transit is not inserted; the canceller has accounted for it. `Refused` if the
    /// shard's gate refuses it (the pool is shutting down): the caller stops the task.
    ///
    /// `rearm`: a periodic task's re-arm, whose deadline may come from the reading taken as its
    /// run started (`Job::plans_from_end`), so a run that overran its next slot brings one
    /// already past; through the wheel it would wait for the timer thread's wake-up and a
    /// worker's (milliseconds on a busy machine) instead of running next, back to back. So when
    /// such a deadline would become the earliest of its shard, a fresh clock reading is taken,
    /// and if it is due nothing is inserted and `Due` gives it back: the caller hands the task
    /// straight to the workers. A dense shard's re-arms almost never lower its hint (W5: a 10 ms
    /// re-arm is behind thousands of earlier deadlines), so they are not read again.
    pub(crate) fn insert(&self, task: TaskRef, rearm: bool) -> Result<(), NotInserted> {
        // The header once: each `header()` is a virtual call.
        let header = task.header();
        let deadline = header.deadline();
        let tick = self.time.tick_ceil(deadline);
        let cell = self.cell_of(header);
        let mut shard = cell.lock();
        if rearm && cell.hint().is_none_or(|hint| tick < hint) && deadline <= self.time.now_nanos()
        {
            return Err(NotInserted::Due(task));
        }
        if !shard.gate.admits(&*task) {
            return Err(NotInserted::Refused(task));
        }
        if !header.state.is_scheduled() {
            // Cancelled in transit: the canceller has accounted for it. Our reference is
            // dropped after unlocking.
            drop(shard);
            return Ok(());
        }
        // The key goes into the header before the reference moves into the wheel; both under
        // the shard's lock, where every reader of the key looks (ground rules).
        let key = shard.wheel.vacant_key();
        header.set_wheel_key(key.to_u32());
        let inserted = shard.wheel.insert(tick, task);
        debug_assert_eq!(
            inserted, key,
            "the wheel filled another node than it said it would"
        );
        self.inserted(cell, shard, tick);
        Ok(())
    }

    /// The tail of every insert (a new one or a reset's move) at `tick`, still holding the
    /// shard's lock: lower the hint, unlock, count the insert for a manual clock's settle, and
    /// wake the driver if the hint went down (see "Sleep vs. new deadlines" in the ground rules).
    fn inserted(&self, cell: &ShardCell, shard: SpinMutexGuard<'_, Shard>, tick: u64) {
        let lowered = cell.lower_hint(&shard, tick);
        drop(shard);
        if let Some(s) = &self.settle {
            s.inserted();
        }
        if lowered {
            self.wake_if_before(tick);
        }
    }

    /// A waiting task was cancelled: its wheel entry is unlinked and freed now, on the
    /// cancelling thread; the task's cell goes with the last of the other pointers to it.
    pub(crate) fn cancelled(&self, task: &dyn RawTask) {
        let header = task.header();
        let mut shard = self.cell_of(header).lock();
        // The wheel's pointer is given up, not dropped: one locked subtraction less per cancel
        // (`task/ptr.rs`, "A share given up"); the caller holds a pointer of its own.
        if let Some(removed) = unlink(&mut shard.wheel, task) {
            removed.orphan();
        }
        let spare = give_back_if_empty(&mut shard.wheel);
        drop(shard);
        drop(spare);
    }

    /// Moves a task that waits in a wheel to `deadline` (nanoseconds since the origin); false,
    /// with nothing changed, if it is not waiting in a wheel (running, handed to the workers,
    /// finished or cancelled). `rebase` runs under the shard's lock once the move is certain (a
    /// periodic task re-bases its plan there).
    ///
    /// Under the shard's lock a `SCHEDULED` task with a live key can be neither pushed out (the
    /// driver polls under this lock) nor unlinked (a cancel unlinks under it). A cancel that wins
    /// the state after our check unlinks the moved entry by its new key once we unlock.
    pub(crate) fn reset(
        &self,
        task: &dyn RawTask,
        deadline: u64,
        rebase: impl FnOnce(),
    ) -> Result<(), ResetError> {
        let tick = self.time.tick_ceil(deadline);
        let header = task.header();
        let cell = self.cell_of(header);
        let mut shard = cell.lock();
        let state = header.state.load();
        if state != Snapshot::Scheduled {
            return Err(not_waiting(state));
        }
        if !shard.gate.admits(task) {
            // A shard closed to this task is being swept by a shutdown: the task will not run
            // (again), so there is nothing to move, and the sweep must find it where it is.
            return Err(ResetError::Cancelled);
        }
        let Some(entry) = unlink(&mut shard.wheel, task) else {
            // Due and handed to a worker (firing), or a periodic task between its run and its
            // re-arm's insert.
            return Err(ResetError::Running);
        };
        header.set_deadline(deadline);
        rebase();
        let key = shard.wheel.insert(tick, entry);
        header.set_wheel_key(key.to_u32());
        self.inserted(cell, shard, tick);
        Ok(())
    }

    /// After an insert lowered its shard's hint to `tick`: wakes the driver if it sleeps past it.
    fn wake_if_before(&self, tick: u64) {
        // SeqCst fence: pairs with the one in `Driver::announce_and_check` (ground rules): the
        // driver's re-read of the hints sees our lowered hint, or this read sees its tick.
        fence(Ordering::SeqCst);
        let mut sleeping = self.sleep_until.load(Ordering::Relaxed);
        while tick < sleeping {
            match self.sleep_until.compare_exchange_weak(
                sleeping,
                AWAKE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return self.parker.unpark(),
                Err(now) => sleeping = now,
            }
        }
    }

    /// The watcher, registered and about to park: the tick the driver sleeps until, if it
    /// sleeps until one (ground rules). `None`: park without a time limit until nudged.
    pub(crate) fn watch_tick(&self) -> Option<u64> {
        self.watch_tick_at(|| self.time.now_nanos())
    }

    /// [`Timer::watch_tick`] with the clock read by `now` (a loom model sets the time).
    pub(crate) fn watch_tick_at(&self, now: impl FnOnce() -> u64) -> Option<u64> {
        if self.settle.is_some() {
            return None; // a manual clock: the driver alone settles time
        }
        self.watch.store(u64::MAX, Ordering::Relaxed);
        // SeqCst fence: pairs with the one in `Driver::announce_and_check` (ground rules):
        // either this read sees the driver's tick, or the driver sees our registration.
        fence(Ordering::SeqCst);
        let tick = self.sleep_until.load(Ordering::Relaxed);
        if tick == AWAKE || tick == u64::MAX {
            return None; // the driver is at work (it will nudge us) or sleeps without limit
        }
        let tick = if self.wake_nanos(tick) > now() {
            tick
        } else {
            // Already come: the driver is waking for it (or we just polled it ourselves), and
            // will announce the earliest hint as its next tick. Watch that hint now rather than
            // wait for the driver's nudge (see "The watcher"), even if it is due already: then
            // the watcher polls at once (or a little later if its last poll met a locked
            // shard, so that it never spins on a lock: `pool/worker.rs`).
            self.shards.iter().filter_map(|cell| cell.hint()).min()?
        };
        self.watch.store(tick, Ordering::Relaxed);
        Some(tick)
    }

    /// The watcher stops watching.
    pub(crate) fn unwatch(&self) {
        self.watch.store(u64::MAX, Ordering::Relaxed);
    }

    /// The watcher pushed `n` due tasks besides the one it runs first: `Some(now)` if it may
    /// leave waking helpers for them to the driver, which passes within `MAX_BACKSTOP` (plus the
    /// slack) and wakes them then if the tasks still wait; `None` if the caller must wake them
    /// now (see "Helpers for the watcher's due tasks").
    pub(crate) fn leave_helpers(&self, n: usize) -> Option<u64> {
        if self.settle.is_some() || self.driver_gone() {
            return None;
        }
        let now = self.time.now_nanos();
        // Relaxed: a stale value only moves when the watcher starts or stops leaving them.
        if now < self.helpers_at_once_until.load(Ordering::Relaxed) {
            return None; // a batch left lately was long
        }
        // Release: a driver that takes the count (Acquire) sees the pushes made before it.
        self.helpers_owed.fetch_add(n, Ordering::Release);
        // SeqCst fence: pairs with the one in `Driver::announce_and_check`: either the driver's
        // read after its fence sees our count, or this read sees the tick it announced.
        fence(Ordering::SeqCst);
        let tick = self.sleep_until.load(Ordering::Relaxed);
        let looks_soon = tick == AWAKE || (tick != u64::MAX && self.wake_nanos(tick) <= now);
        if !looks_soon {
            // The caller wakes them. Take our count back unless the driver has taken it (then
            // it may wake one more: harmless).
            let _ = self
                .helpers_owed
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |owed| {
                    owed.checked_sub(n)
                });
            return None;
        }
        Some(now)
    }

    /// A watcher's batch left to the driver was long: for [`HELPERS_AT_ONCE`] the watcher
    /// wakes helpers itself (see "Helpers for the watcher's due tasks").
    pub(crate) fn helpers_at_once(&self) {
        let until = self
            .time
            .now_nanos()
            .saturating_add(duration_nanos(HELPERS_AT_ONCE));
        self.helpers_at_once_until.store(until, Ordering::Relaxed);
    }

    /// The driver, after the fence of its announcement: how many helpers the watcher left it
    /// to wake (see "Helpers for the watcher's due tasks").
    pub(crate) fn take_owed_helpers(&self) -> usize {
        // The swap only when one is owed: the line stays shared while none is.
        if self.helpers_owed.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        // Acquire: pairs with the Release of `leave_helpers`.
        self.helpers_owed.swap(0, Ordering::Acquire)
    }

    /// The tick the watcher watches (`u64::MAX`: none, or not yet read).
    #[cfg(all(wheelpool_loom, test))]
    pub(crate) fn watched(&self) -> u64 {
        self.watch.load(Ordering::Relaxed)
    }

    /// True while the driver is awake (not parked, or woken by a producer and not yet back).
    #[cfg(all(wheelpool_loom, test))]
    pub(crate) fn driver_awake(&self) -> bool {
        self.sleep_until.load(Ordering::Relaxed) == AWAKE
    }

    /// True while a worker watches a tick (registered, and it has read one).
    pub(crate) fn watcher_watches(&self) -> bool {
        self.settle.is_none() && self.watch.load(Ordering::Relaxed) != u64::MAX
    }

    /// The driver, after announcing `tick` (and its fence): true if the watcher, if any, parks
    /// until later and needs a nudge.
    pub(crate) fn watcher_is_late(&self, tick: u64) -> bool {
        self.settle.is_none() && self.watch.load(Ordering::Relaxed) > tick
    }

    /// The watcher's poll at its tick: every shard with something due that nobody holds gives
    /// at most one chunk of due tasks into `due` (only those a cancel has not won). Never waits
    /// for a lock (ground rules). The storage of shards it emptied goes to the timer thread,
    /// which is woken to free it (`Spare`). Returns false if it left a shard with something due
    /// because its lock was held.
    pub(crate) fn help_poll(&self, due: &mut Vec<TaskRef>) -> bool {
        let mut spare = Spare::default();
        let staging = self.staging();
        let now = self.time.tick_floor(self.time.now_nanos());
        let mut all = true;
        for cell in self.shards.iter() {
            if cell.hint().is_none_or(|h| h > now) {
                continue;
            }
            let Some(mut shard) = cell.lock.try_lock() else {
                all = false; // the driver (awake at this tick too) or a producer has it
                continue;
            };
            let polled = cell.poll_chunk(&mut shard, now, staging, due);
            drop(shard);
            spare.keep(polled.spare);
        }
        self.count_fired(due.len());
        due.retain(|t| t.header().state.is_scheduled());
        if !spare.is_empty() {
            // Rare (a shard of more than RELEASE_AT entries' room emptied): one wake-up of the
            // timer thread, which frees it on another CPU, not in the way of `due`.
            self.spare.lock().take_from(&mut spare);
            self.wake();
        }
        all
    }

    /// The storage the watcher's polls left for the timer thread to free (`Spare`).
    pub(crate) fn take_spare(&self, into: &mut Spare) {
        into.take_from(&mut self.spare.lock());
    }

    /// Wakes the driver unconditionally (shutdown, manual clock).
    pub(crate) fn wake(&self) {
        self.sleep_until.store(AWAKE, Ordering::Relaxed);
        self.parker.unpark();
    }

    pub(crate) fn driver_gone(&self) -> bool {
        // SeqCst: pairs with the store in `driver_exited`.
        self.driver_gone.load(Ordering::SeqCst)
    }

    /// The timer thread is exiting (normally or not): nobody polls any more.
    pub(crate) fn driver_exited(&self) {
        self.driver_gone.store(true, Ordering::SeqCst);
        if let Some(s) = &self.settle {
            s.release();
        }
    }
}

/// Why a task that is not waiting cannot be reset, from its state. A run in progress (or one
/// that just re-armed: waiting again, but not yet in the wheel) is `Running`.
fn not_waiting(state: Snapshot) -> ResetError {
    match state {
        Snapshot::Scheduled | Snapshot::Running => ResetError::Running,
        Snapshot::RunningCancelled | Snapshot::Ended(End::Cancelled | End::Shutdown) => {
            ResetError::Cancelled
        }
        Snapshot::Ended(End::Completed | End::Panicked) => ResetError::Done,
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    #[test]
    fn sparse_deadlines_get_no_slack_dense_ones_two_us_each_up_to_the_cap() {
        let max = 999 * US;
        // W3: one deadline per 10 us; a late wake-up that finds five due changes nothing.
        assert_eq!(coalescing_slack(1, 10 * US, max), 0);
        assert_eq!(coalescing_slack(5, 60 * US, max), 0);
        // Exactly one per 4 us counts as dense.
        assert_eq!(coalescing_slack(10, 40 * US, max), 20 * US);
        // W5: one per microsecond, capped.
        assert_eq!(coalescing_slack(100, 100 * US, max), 200 * US);
        assert_eq!(coalescing_slack(5_000, 1_000 * US, max), max);
        // Nothing came due; a manual clock (no slack at all).
        assert_eq!(coalescing_slack(0, 0, max), 0);
        assert_eq!(coalescing_slack(0, 5 * US, max), 0);
        assert_eq!(coalescing_slack(5_000, 1_000 * US, 0), 0);
        // No overflow at the extremes.
        assert_eq!(coalescing_slack(u64::MAX, u64::MAX, max), max);
    }

    #[test]
    fn the_watchers_poll_hands_an_emptied_shards_storage_to_the_timer_thread() {
        use crate::task::{OneShot, TaskCell};
        let timer = Timer::new(TimeBase::new(Clock::System, Duration::from_micros(1)), 2);
        let n = 5_000; // more than RELEASE_AT: an emptied shard gives the room past it back
        for _ in 0..n {
            let task: TaskRef = crate::task::single(TaskCell::new(OneShot::new(|| ()), 1_000, 0));
            assert!(timer.insert(task, false).is_ok());
        }
        while timer.time.now_nanos() < 2_000 {
            std::hint::spin_loop();
        }
        let mut due = Vec::new();
        let mut spare = Spare::default();
        while due.len() < n {
            let before = due.len();
            timer.sleep_until.store(12_345, Ordering::Relaxed); // the driver sleeps
            assert!(timer.help_poll(&mut due));
            assert!(due.len() > before, "a chunk a poll");
            timer.take_spare(&mut spare);
            let emptied = due.len() == n;
            assert_eq!(
                !spare.is_empty(),
                emptied,
                "handed over once the shard is empty"
            );
            // Handing it over wakes the timer thread, which frees it as it parks again.
            let woken = timer.sleep_until.load(Ordering::Relaxed) == AWAKE;
            assert_eq!(woken, emptied);
        }
        assert!(
            timer.shards[0].lock().wheel.capacity() <= shard::RELEASE_AT,
            "given up past the room kept"
        );
        spare.free();
        assert!(spare.is_empty());
    }

    #[test]
    fn the_watcher_leaves_helpers_to_a_driver_that_looks_soon_unless_a_batch_was_long() {
        let timer = Timer::new(TimeBase::new(Clock::System, Duration::from_micros(1)), 2);
        // The driver is in a pass (AWAKE): it reads the count after its announcement.
        assert!(timer.leave_helpers(3).is_some());
        assert_eq!(timer.take_owed_helpers(), 3);
        assert_eq!(timer.take_owed_helpers(), 0, "taken once");
        // Asleep until a tick an hour away: the watcher wakes them, and takes its count back.
        timer.sleep_until.store(3_600_000_000, Ordering::Relaxed);
        assert!(timer.leave_helpers(2).is_none());
        assert_eq!(timer.take_owed_helpers(), 0);
        // Asleep until a tick that has come: it wakes within the backstop.
        timer.sleep_until.store(1, Ordering::Relaxed);
        assert!(timer.leave_helpers(1).is_some());
        assert_eq!(timer.take_owed_helpers(), 1);
        // A long batch: helpers at once for HELPERS_AT_ONCE, then left again.
        timer.helpers_at_once();
        assert!(timer.leave_helpers(1).is_none());
        assert_eq!(timer.take_owed_helpers(), 0);
        std::thread::sleep(HELPERS_AT_ONCE + Duration::from_millis(5));
        assert!(timer.leave_helpers(1).is_some());
        // Nobody to leave them to: a manual clock, or a driver that has exited.
        timer.driver_exited();
        assert!(timer.leave_helpers(1).is_none());
        let manual = Timer::new(
            TimeBase::new(Clock::Manual(ManualClock::new()), Duration::from_micros(1)),
            2,
        );
        assert!(manual.leave_helpers(1).is_none());
    }

    #[test]
    fn a_precise_timer_stages_level_two_a_batching_or_manual_one_level_three_up() {
        let us = Duration::from_micros(1);
        let timer = Timer::new(TimeBase::new(Clock::System, us), 2);
        assert_eq!(timer.staging().from, shard::PRECISE_FROM);
        assert_eq!(timer.staging().horizon, 250_000, "250 ms of 1 us ticks");
        timer
            .slack
            .store(timer.max_slack / 2 - 1, Ordering::Relaxed);
        assert_eq!(timer.staging().from, shard::PRECISE_FROM);
        timer.slack.store(timer.max_slack / 2, Ordering::Relaxed);
        assert_eq!(timer.staging().from, shard::BATCHING_FROM);
        timer.slack.store(timer.max_slack, Ordering::Relaxed);
        assert_eq!(timer.staging().from, shard::BATCHING_FROM);
        // A manual clock never has slack, and its jumps make a cascade cost no lateness.
        let manual = Timer::new(TimeBase::new(Clock::Manual(ManualClock::new()), us), 2);
        assert_eq!(manual.staging().from, shard::BATCHING_FROM);
    }
}

//! The timer thread: polls the shards' wheels in bounded chunks, hands due tasks to the workers,
//! and sleeps until the earliest next expiration. It never runs user code.
//!
//! One pass: for each shard whose hint says something is due, take its lock, poll at most
//! `CHUNK` entries due by now, release the lock, hand them out. If any shard had more, go round
//! again at once; otherwise announce the sleep tick, fence, re-read every hint, and park (ground
//! rules in `timer/mod.rs`).

use super::{
    clear_keys, duration_nanos, Gate, Host, Lifecycle, PoolId, SlackMark, Spare, Timer, AWAKE,
    CHUNK,
};
use crate::sync::{fence, Arc, Ordering};
use crate::task::TaskRef;
use crate::wheel::Wheel;
use std::cell::Cell;
use std::time::Duration;

/// How long before a deadline the driver tells the watcher of it at the latest (see
/// `tell_watcher_and_park`): ample time for the nudged worker to park again with the new
/// deadline, even on a machine whose CPUs are all busy.
const WATCH_AHEAD: Duration = Duration::from_millis(50);

/// How long after a tick the driver wakes for it when the watcher watches that tick, at least
/// (see "The watcher" in the ground rules; it grows to `MAX_BACKSTOP` while the watcher keeps
/// up): the watcher hands it out, and the driver is the backstop. Short, so a watcher that is
/// busy or slow to get a CPU costs its timer little;
/// long enough that the driver, woken with it, does not take the timers first and wake a
/// worker for them (a futex wake-up here ends 17-24 us after the asked instant, p50).
const BACKSTOP: Duration = Duration::from_micros(50);

/// The longest the backstop grows to while the watcher keeps up (see `Driver::adapt_backstop`).
/// W3's p99, 5 alternating runs: 35 us with a fixed 50 us backstop, 34 us up to 200 us, 39 us up
/// to 400 us, 46 us up to 1 ms; 20 000 one-second heartbeats' CPU over 4 s: 1.77, 1.26, 1.15
/// and 1.14 s.
const MAX_BACKSTOP: Duration = Duration::from_micros(200);

/// The timer thread's own state.
pub(crate) struct Driver {
    host: Arc<dyn Host>,
    /// Scratch space for due tasks, reused across passes.
    due: Vec<TaskRef>,
    /// Each shard's next expiration as of the latest poll (`None`: empty).
    next: Vec<Option<u64>>,
    /// Graceful shutdown: where each shard's sweep for periodic tasks goes on (`None`: done).
    sweep: Option<Vec<Option<usize>>>,
    /// `Timer::fired`, and the time, when the driver last went to sleep (see "Coalescing").
    slept: SlackMark,
    /// Shards whose last poll may have left staging to do (see "Staging").
    staging: Vec<bool>,
    /// Each shard's hint when it was last polled with nothing left to stage (`None`: never).
    /// A shard whose hint comes within the staging horizon and differs from this one is polled
    /// (and staged) though nothing is due, and the driver wakes `WATCH_AHEAD` before such a
    /// hint to do it: otherwise a crowded coarse slot in a shard nobody polls beforehand
    /// would be cascaded whole when its first tick comes, its first timers waiting for it.
    staged_at: Vec<Option<u64>>,
    /// Storage that shards emptied by our polls (and the watcher's) gave up: freed as we park
    /// (`Spare`).
    spare: Spare,
    /// How long after a watched tick the driver wakes to hand out what the watcher left
    /// (`adapt_backstop`).
    backstop: Duration,
    /// When the driver's last park, as the watcher's backstop, was to end (nanoseconds since
    /// the origin); `None` if it was not a backstop.
    backstop_until: Option<u64>,
}

crate::sync::thread_local! {
    /// On a timer thread: its pool's id (`None` elsewhere).
    static TIMER_OF: Cell<Option<PoolId>> = const { Cell::new(None) };
}

/// True on the timer thread of pool `id`.
pub(crate) fn on_timer_thread_of(id: PoolId) -> bool {
    TIMER_OF.with(|t| t.get() == Some(id))
}

/// The timer thread's body.
pub(crate) fn run(host: Arc<dyn Host>) {
    super::mark_pool_thread(&host.timer().time.clock);
    TIMER_OF.with(|t| t.set(Some(host.id())));
    Driver::new(host).run();
}

impl Driver {
    pub(crate) fn new(host: Arc<dyn Host>) -> Self {
        let shards = host.timer().shards.len();
        Driver {
            host,
            due: Vec::new(),
            next: vec![None; shards],
            sweep: None,
            slept: SlackMark::default(),
            staging: vec![false; shards],
            staged_at: vec![None; shards],
            spare: Spare::default(),
            backstop: BACKSTOP,
            backstop_until: None,
        }
    }

    fn run(&mut self) {
        loop {
            if self.pass() {
                return;
            }
        }
    }

    /// One pass; true when the timer thread should exit.
    pub(crate) fn pass(&mut self) -> bool {
        let host = self.host.clone();
        let timer = host.timer();
        self.mark_awake();
        let pass = timer.settle.as_ref().map(|s| s.pass_start());
        let life = host.lifecycle();
        if life == Lifecycle::ShutdownNow {
            self.stop_now();
            return true;
        }
        let mut more = life == Lifecycle::Shutdown && self.sweep_step();
        let (unfinished, pushed) = self.poll_step();
        self.adapt_backstop(pushed);
        more |= unfinished;
        if more {
            self.wake_owed_helpers();
            return false;
        }
        if life == Lifecycle::Shutdown && host.drained() {
            return true;
        }
        let checked = self.announce_and_check();
        self.wake_owed_helpers();
        if let (Some(s), Some(pass)) = (&timer.settle, pass) {
            let (Ok(next) | Err(next)) = checked;
            s.report(
                pass,
                pushed,
                next.map(|tick| timer.time.nanos_of_tick(tick)),
            );
        }
        if let Ok(next) = checked {
            self.slept = timer.adapt_slack(self.slept);
            self.tell_watcher_and_park(next);
        }
        false
    }

    fn timer(&self) -> &Timer {
        self.host.timer()
    }

    /// Starts a pass: the driver is awake, so no producer needs to wake it.
    pub(crate) fn mark_awake(&self) {
        self.timer().sleep_until.store(AWAKE, Ordering::Relaxed);
    }

    /// Polls every shard for one chunk and hands each chunk out after releasing its lock.
    /// Returns whether some shard has more due, and how many tasks went to the workers.
    pub(crate) fn poll_step(&mut self) -> (bool, usize) {
        let host = self.host.clone();
        let timer = host.timer();
        // While a worker watches, what came due within the backstop is the watcher's to hand
        // out: the driver takes only what it has left that long.
        let behind = if self.watcher_helps() {
            duration_nanos(self.backstop)
        } else {
            0
        };
        let now = timer
            .time
            .tick_floor(timer.time.now_nanos().saturating_sub(behind));
        let mut more = false;
        let mut pushed = 0;
        let staging = timer.staging();
        let horizon = staging.horizon;
        for (i, cell) in timer.shards.iter().enumerate() {
            let hint = cell.hint();
            let to_stage =
                hint.is_some_and(|h| h <= now.saturating_add(horizon)) && hint != self.staged_at[i];
            if hint.is_none_or(|h| h > now) && !self.staging[i] && !to_stage {
                // Nothing due there, and no need for its lock: a shard that other threads
                // keep busy costs the timer nothing. A stale hint is caught when we announce.
                self.next[i] = hint;
                continue;
            }
            let polled = cell.poll_chunk(&mut cell.lock_urgent(), now, staging, &mut self.due);
            self.spare.keep(polled.spare);
            more |= polled.more || polled.stage;
            self.staging[i] = polled.stage;
            self.staged_at[i] = if polled.more || polled.stage {
                None
            } else {
                polled.next
            };
            self.next[i] = polled.next;
            timer.count_fired(self.due.len());
            pushed += self.push_due();
        }
        (more, pushed)
    }

    /// After a poll that pushed `pushed` tasks: the backstop goes back to [`BACKSTOP`] if the
    /// watcher left some (due at least the backstop ago), and doubles, up to [`MAX_BACKSTOP`],
    /// if the driver woke as the backstop and found that the watcher had handed everything
    /// out. A watcher that keeps up with a stream of sparse deadlines (one every 50 us) then
    /// costs the driver a wake-up per `MAX_BACKSTOP`, not one a deadline; the first timer a busy
    /// or slow watcher leaves waits for the backstop in force, and the next ones for 50 us.
    fn adapt_backstop(&mut self, pushed: usize) {
        let until = self.backstop_until.take();
        if pushed > 0 {
            self.backstop = BACKSTOP;
        } else if until.is_some_and(|at| self.timer().time.now_nanos() >= at) {
            self.backstop = (self.backstop * 2).min(MAX_BACKSTOP);
        }
    }

    /// Pushes the due tasks (those a cancel has not won) to the ready queues; returns how many.
    fn push_due(&mut self) -> usize {
        self.due.retain(|t| t.header().state.is_scheduled());
        let n = self.due.len();
        if n > 0 {
            self.host.push_due(&mut self.due);
        }
        self.due.clear();
        n
    }

    /// Announces the sleep tick, then re-reads every shard's hint (ground rules).
    /// `Ok(next)`: park until `next` (`None`: no time limit); `Err(seen)`: something earlier
    /// came in, go round again. Either way the value is the earliest expiration seen.
    pub(crate) fn announce_and_check(&mut self) -> Result<Option<u64>, Option<u64>> {
        let announced = self.next.iter().flatten().min().copied();
        // A tick of 0 would read as AWAKE; clamp so a producer's comparison stays meaningful.
        let tick = announced.unwrap_or(u64::MAX).max(AWAKE + 1);
        let timer = self.timer();
        timer.sleep_until.store(tick, Ordering::Relaxed);
        // SeqCst fence: pairs with the one in `Timer::wake_if_before` (ground rules): either
        // these reads see a producer's lowered hint, or its read of `sleep_until` sees our tick.
        fence(Ordering::SeqCst);
        let seen = timer.shards.iter().filter_map(|cell| cell.hint()).min();
        let earlier = match (seen, announced) {
            (Some(s), Some(a)) => s < a,
            (Some(_), None) => true,
            _ => false,
        };
        if earlier {
            Err(seen)
        } else {
            Ok(announced)
        }
    }

    /// Wakes the helpers the watcher left to us, if its due tasks still wait (see "Helpers for
    /// the watcher's due tasks"). On every pass: after the fence of `announce_and_check`, or
    /// as it goes round again without announcing.
    pub(crate) fn wake_owed_helpers(&self) {
        let owed = self.timer().take_owed_helpers();
        if owed > 0 {
            self.host.wake_helpers(owed);
        }
    }

    /// After `announce_and_check` said park until `next`: if the watcher watches a later tick
    /// (or none), nudge it to read ours (see "The watcher" in the ground rules). True if a
    /// watcher was nudged.
    pub(crate) fn nudge_watcher_if_late(&self, next: Option<u64>) -> bool {
        next.is_some_and(|tick| self.timer().watcher_is_late(tick)) && self.host.nudge_watcher()
    }

    /// Parks until the tick `next`, telling the watcher of it first, unless it is further away
    /// than [`WATCH_AHEAD`] and the watcher would need a nudge: then the driver parks until
    /// `WATCH_AHEAD` before it and tells the watcher on that pass. So a deadline far away costs
    /// no worker a wake-up when it is set (an idle pool given a timer an hour away stays still),
    /// and one pass of the timer thread shortly before it comes.
    fn tell_watcher_and_park(&mut self, next: Option<u64>) {
        let host = self.host.clone();
        let timer = host.timer();
        if let (None, Some(tick)) = (&timer.settle, next) {
            let at = timer.wake_nanos(tick);
            let ahead = duration_nanos(WATCH_AHEAD);
            if at.saturating_sub(timer.time.now_nanos()) > ahead
                && (timer.watcher_is_late(tick) || self.unstaged(tick))
            {
                self.free_spare();
                timer.parker.park(Some(timer.time.wake_instant(at - ahead)));
                return;
            }
        }
        let nudged = self.nudge_watcher_if_late(next);
        // Watched: the watcher watches `next` or an earlier tick (it is not late), or was just
        // nudged to read it.
        let watched =
            self.watcher_helps() && next.is_some_and(|tick| nudged || !timer.watcher_is_late(tick));
        let behind = if watched {
            self.backstop
        } else {
            Duration::ZERO
        };
        self.backstop_until = next
            .filter(|_| watched)
            .map(|tick| park_nanos(timer, tick, behind));
        self.free_spare();
        self.park_for(next, behind);
    }

    /// About to park, with what our polls found handed out and the watcher nudged: frees the
    /// storage that emptied shards gave up, ours and the watcher's (`Spare`).
    fn free_spare(&mut self) {
        let host = self.host.clone();
        host.timer().take_spare(&mut self.spare);
        self.spare.free();
    }

    /// True if a shard whose next expiration is `tick` has not been polled for staging at it
    /// and holds more than a chunk (a slot of at most `CHUNK` entries cascades in one bounded
    /// step when it comes, so staging it is not worth a wake-up: a 1 s heartbeat costs one).
    fn unstaged(&mut self, tick: u64) -> bool {
        let host = self.host.clone();
        let mut any = false;
        for (i, cell) in host.timer().shards.iter().enumerate() {
            if self.next[i] != Some(tick) || self.staged_at[i] == Some(tick) {
                continue;
            }
            if cell.lock_urgent().wheel.len() > CHUNK {
                any = true;
            } else {
                self.staged_at[i] = Some(tick);
            }
        }
        any
    }

    /// True if a watcher may hand timers out: one watches a tick, and the pool is running (a
    /// watcher polls only then, so after `shutdown` the driver hands out everything itself).
    fn watcher_helps(&self) -> bool {
        self.host.lifecycle() == Lifecycle::Running && self.timer().watcher_watches()
    }

    /// Parks until the tick `next` (`None`: no time limit), or until woken.
    #[cfg(all(wheelpool_loom, test))]
    pub(crate) fn park(&self, next: Option<u64>) {
        self.park_for(next, Duration::ZERO);
    }

    /// Parks until `behind` after the tick `next` (`None`: no time limit), or until woken.
    fn park_for(&self, next: Option<u64>, behind: Duration) {
        let timer = self.timer();
        let deadline = match (&timer.settle, next) {
            (None, Some(tick)) => Some(timer.time.wake_instant(park_nanos(timer, tick, behind))),
            _ => None, // a manual clock wakes the driver when time moves
        };
        timer.parker.park(deadline);
    }

    /// Graceful shutdown, one chunk per shard: close each shard to the tasks the pool does not
    /// keep (`Keep`) and take those out: periodic tasks go to the workers, which stop them
    /// (stopping drops the closure and wakes the future: user code, which the timer thread
    /// never runs); one-shots not yet due go to the pool to be handed back (their closures are
    /// kept, not dropped; only their futures are woken, as `stop_now`'s hand-back does). A
    /// one-shot already due stays and runs, as under Java's policy (a delay left, not a
    /// deadline passed, is what a graceful shutdown may hand back). Returns whether the sweep
    /// has more to do.
    fn sweep_step(&mut self) -> bool {
        let host = self.host.clone();
        let timer = host.timer();
        let keep = host.keep_at_shutdown();
        let now = timer.time.now_nanos();
        let swept = |t: &TaskRef| {
            !keep.keeps(&**t) && (t.header().is_periodic() || t.header().deadline() > now)
        };
        let mut sweep = self
            .sweep
            .take()
            .unwrap_or_else(|| vec![Some(0); timer.shards.len()]);
        let mut more = false;
        for (i, shard) in timer.shards.iter().enumerate() {
            let Some(from) = sweep[i] else { continue };
            {
                let mut shard = shard.lock_urgent();
                if shard.gate == Gate::Open {
                    shard.gate = Gate::Closing(keep);
                }
                sweep[i] = shard.wheel.extract_some(from, CHUNK, swept, &mut self.due);
                clear_keys(&self.due);
            }
            more |= sweep[i].is_some();
            if !keep.one_shots {
                let (periodic, one_shots) =
                    self.due.drain(..).partition(|t| t.header().is_periodic());
                self.due = periodic;
                host.hand_back_at_shutdown(one_shots);
            }
            self.push_due();
        }
        self.sweep = Some(sweep);
        more
    }

    /// `shutdown_now`: every shard is stopped and emptied, and what it held is handed back.
    fn stop_now(&mut self) {
        let host = self.host.clone();
        let mut all = Vec::new();
        for shard in host.timer().shards.iter() {
            let mut wheel = Wheel::new();
            {
                let mut shard = shard.lock_urgent();
                shard.gate = Gate::Stopped;
                // O(1) under the lock: the stopped shard never takes another entry, so the
                // keys of the old wheel find nothing in the new one.
                std::mem::swap(&mut shard.wheel, &mut wheel);
            }
            wheel.drain(&mut all);
        }
        host.hand_back(all);
    }
}

/// When a park for the tick `tick` ends, `behind` after it (nanoseconds since the origin).
fn park_nanos(timer: &Timer, tick: u64, behind: Duration) -> u64 {
    timer
        .wake_nanos(tick)
        .saturating_add(duration_nanos(behind))
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use crate::timer::{Clock, Keep, TimeBase};

    /// A host with a timer and nothing above it: enough for the driver's own bookkeeping.
    struct Bare(Timer);

    impl Host for Bare {
        fn id(&self) -> PoolId {
            PoolId::new()
        }
        fn timer(&self) -> &Timer {
            &self.0
        }
        fn lifecycle(&self) -> Lifecycle {
            Lifecycle::Running
        }
        fn push_due(&self, due: &mut Vec<TaskRef>) {
            due.clear();
        }
        fn hand_back(&self, _: Vec<TaskRef>) {}
        fn keep_at_shutdown(&self) -> Keep {
            Keep::DEFAULT
        }
        fn hand_back_at_shutdown(&self, _: Vec<TaskRef>) {}
        fn drained(&self) -> bool {
            true
        }
        fn nudge_watcher(&self) -> bool {
            false
        }
        fn wake_helpers(&self, _: usize) {}
    }

    #[test]
    fn the_backstop_doubles_while_the_watcher_keeps_up_and_falls_back_when_it_does_not() {
        let time = TimeBase::new(Clock::System, Duration::from_micros(1));
        let mut driver = Driver::new(Arc::new(Bare(Timer::new(time, 2))));
        let us = Duration::from_micros;
        assert_eq!(driver.backstop, BACKSTOP);
        // Woken as the backstop (its time has come), nothing left by the watcher: doubles.
        for expected in [us(100), us(200), us(200)] {
            driver.backstop_until = Some(0);
            driver.adapt_backstop(0);
            assert_eq!(driver.backstop, expected);
            assert_eq!(driver.backstop_until, None, "one adaptation per park");
        }
        // Woken before its time (a producer's earlier deadline), or not parked as a backstop:
        // no evidence either way.
        driver.backstop_until = Some(u64::MAX);
        driver.adapt_backstop(0);
        driver.adapt_backstop(0);
        assert_eq!(driver.backstop, us(200));
        // The watcher left a timer: back to the shortest at once, however the driver woke.
        driver.adapt_backstop(1);
        assert_eq!(driver.backstop, BACKSTOP);
    }
}

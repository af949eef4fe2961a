//! Calendar jobs (feature `cron`): a closure run at each occurrence of a [`Cron`] expression,
//! re-armed by resubmission like the other periodic jobs.
//!
//! # Ground rules
//!
//! - **Two clocks.** Occurrences are instants on the *wall clock* (`SystemTime`, or a
//!   `ManualClock`'s virtual one); the wheel counts *monotonic* nanoseconds. Each wake-up is
//!   planned as "now + (occurrence - wall now)", but never more than [`RECHECK`] ahead: a
//!   wall clock that is stepped (NTP, a suspended laptop, a test) moves the next run within
//!   a minute.
//! - **A wake-up runs the closure only if the wall clock has reached the occurrence** (or a
//!   reset asked for the run). Otherwise it was a look at the clock: no user code runs, the
//!   pool does not count a run, and the next wake-up is planned again from the new reading.
//!   So a run is never early by the wall clock, whatever the two clocks did in between.
//! - **The occurrence after a run is planned from the occurrence that ran**, never from the
//!   wall clock alone, so a clock stepped back does not replay occurrences that ran: nothing
//!   runs twice.
//! - **A clock stepped back moves the wait earlier**: a look that finds the wall clock behind
//!   its previous reading plans again, for the first occurrence after the new time (and after
//!   the last one that ran). A clock stepped forward keeps the wait: the occurrences it
//!   jumped over are missed ones.
//! - **Missed occurrences** (a run overran them, the machine slept, the clock jumped forward)
//!   follow [`MissedTicks`]: `Burst` runs each of them at once, in order; `Skip` drops them and
//!   waits for the first occurrence at or after now; `Delay` runs once at once for all of them
//!   (the latest missed one), then the calendar goes on.
//! - An expression with no occurrence left ends the task; its future gives `Ok(())`.

use super::periodic::MissedTicks;
use super::{Job, TaskKind};
use crate::cron::Cron;
use std::time::{Duration, SystemTime};

/// The longest a calendar job sleeps before it looks at the wall clock again: a stepped clock
/// moves the next run within this. A minute is cron's own resolution for most expressions,
/// and costs an idle daily job 1 440 wake-ups a day, each a few microseconds.
pub(crate) const RECHECK: Duration = Duration::from_secs(60);

/// Where a calendar job reads the wall clock (implemented by the pool's clock, above).
pub(crate) trait WallClock: Send + 'static {
    /// The current wall-clock time.
    fn wall_now(&self) -> SystemTime;
}

/// A closure run at each occurrence of a cron expression.
pub(crate) struct Calendar<F, W> {
    f: F,
    cron: Cron,
    wall: W,
    /// The occurrence the next wake-up waits for (`None`: the expression has no more).
    target: Option<SystemTime>,
    /// The last `call` ran the closure (for `target`), rather than only looking at the clock.
    ran: bool,
    /// The last occurrence that ran (`None` before the first run).
    last: Option<SystemTime>,
    /// The wall clock's reading when the wait for `target` was last planned.
    seen: SystemTime,
    /// A reset moved the next run: the next wake-up runs, whatever the wall clock says.
    forced: bool,
    missed: MissedTicks,
    survive_panics: bool,
}

impl<F, W> Calendar<F, W>
where
    F: FnMut() + Send + 'static,
    W: WallClock,
{
    /// A job waiting for the first occurrence after the wall clock's present.
    pub(crate) fn new(f: F, cron: Cron, wall: W, missed: MissedTicks, survive: bool) -> Self {
        let seen = wall.wall_now();
        let target = cron.next_after(seen);
        Calendar {
            f,
            cron,
            wall,
            target,
            ran: false,
            last: None,
            seen,
            forced: false,
            missed,
            survive_panics: survive,
        }
    }

    /// The first wake-up, for a job scheduled at `now` (monotonic nanoseconds).
    pub(crate) fn first_deadline(&self, now: u64) -> u64 {
        self.wake_up(now, self.wall.wall_now())
    }

    /// The wake-up for `target`: `now` plus the wall-clock time left, at most [`RECHECK`].
    /// Without a target: at once (the wake-up then ends the task).
    fn wake_up(&self, now: u64, wall: SystemTime) -> u64 {
        let Some(target) = self.target else {
            return now;
        };
        let left = target.duration_since(wall).unwrap_or(Duration::ZERO);
        now.saturating_add(nanos(left.min(RECHECK)))
    }

    /// The occurrence to wait for after the one at `last` ran, the wall clock reading `wall`.
    fn after_run(&self, last: SystemTime, wall: SystemTime) -> Option<SystemTime> {
        let next = self.cron.next_after(last)?;
        if next > wall {
            return Some(next);
        }
        match self.missed {
            MissedTicks::Burst => Some(next),
            MissedTicks::Skip => self
                .cron
                .next_after(wall.checked_sub(Duration::from_nanos(1))?),
            // The latest missed occurrence stands for all of them (it is at or after `next`).
            MissedTicks::Delay => self.cron.last_at_or_before(wall).map(|t| t.max(next)),
        }
    }
}

/// `d` in whole nanoseconds, saturating at `u64::MAX` ("never").
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<F, W> Job for Calendar<F, W>
where
    F: FnMut() + Send + 'static,
    W: WallClock,
{
    type Output = ();

    fn call(&mut self) -> Option<()> {
        let due = self.target.is_some_and(|t| self.wall.wall_now() >= t);
        self.ran = self.target.is_some() && (due || self.forced);
        self.forced = false;
        if self.ran {
            (self.f)()
        }
        None // the calendar decides in `plan_next` whether another occurrence comes
    }

    fn counts_as_run(&self) -> bool {
        self.ran
    }

    fn plan_next(&mut self, now: u64) -> Option<u64> {
        let wall = self.wall.wall_now();
        if self.ran {
            self.last = self.target;
            self.target = self.target.and_then(|last| self.after_run(last, wall));
        } else if wall < self.seen {
            // Stepped back: the first occurrence after the new time, never one that ran.
            let from = self.last.map_or(wall, |last| last.max(wall));
            self.target = self.cron.next_after(from);
        }
        self.seen = wall;
        // No occurrence left: the task ends with this wake-up.
        self.target?;
        Some(self.wake_up(now, wall))
    }

    fn survives_panic(&self) -> bool {
        self.survive_panics
    }

    fn rebase(&mut self, _deadline: u64) {
        // A reset moved the next run: the wake-up at the new deadline runs the closure, for
        // the occurrence it waited for; the calendar goes on from that occurrence.
        self.forced = true;
    }

    fn value_at_end(&mut self) -> Option<()> {
        Some(()) // no occurrence left: the future gives Ok(())
    }

    const PERIODIC: bool = true;

    fn kind(&self) -> TaskKind {
        TaskKind::Cron
    }

    fn into_run(self) -> Box<dyn FnOnce() + Send> {
        Box::new(self.f)
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::UNIX_EPOCH;

    /// A wall clock the test sets by hand (seconds since the epoch).
    #[derive(Clone, Default)]
    struct Wall(Arc<AtomicU64>);

    impl WallClock for Wall {
        fn wall_now(&self) -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(self.0.load(Ordering::SeqCst))
        }
    }

    const S: u64 = 1_000_000_000;

    fn job(
        expr: &str,
        missed: MissedTicks,
        wall: &Wall,
    ) -> (Calendar<impl FnMut(), Wall>, Arc<AtomicUsize>) {
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let cron = Cron::parse(expr, "UTC").unwrap();
        let f = move || {
            r.fetch_add(1, Ordering::SeqCst);
        };
        (Calendar::new(f, cron, wall.clone(), missed, false), runs)
    }

    #[test]
    fn sleeps_at_most_a_minute_and_runs_only_when_the_wall_clock_is_there() {
        let wall = Wall::default();
        let (mut j, runs) = job("0 * * * *", MissedTicks::Burst, &wall); // hourly
        assert_eq!(
            j.first_deadline(0),
            60 * S,
            "an hour away: look again in a minute"
        );
        wall.0.store(60, Ordering::SeqCst);
        j.call();
        assert!(!j.counts_as_run());
        assert_eq!(j.plan_next(60 * S), Some(120 * S));
        wall.0.store(3570, Ordering::SeqCst);
        assert_eq!(
            j.plan_next(3570 * S),
            Some(3600 * S),
            "30 s left: wake up then"
        );
        wall.0.store(3600, Ordering::SeqCst);
        j.call();
        assert!(j.counts_as_run());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(j.plan_next(3600 * S), Some(3660 * S));
    }

    #[test]
    fn a_clock_stepped_back_does_not_replay_what_ran() {
        let wall = Wall::default();
        wall.0.store(3599, Ordering::SeqCst);
        let (mut j, runs) = job("0 * * * *", MissedTicks::Burst, &wall);
        wall.0.store(3600, Ordering::SeqCst);
        j.call();
        wall.0.store(0, Ordering::SeqCst); // back an hour
        j.plan_next(0);
        assert_eq!(j.target, Some(UNIX_EPOCH + Duration::from_secs(7200)));
        wall.0.store(3600, Ordering::SeqCst); // the 01:00 occurrence again on the wall clock
        j.call();
        assert_eq!(runs.load(Ordering::SeqCst), 1, "01:00 ran once");
    }

    #[test]
    fn a_clock_stepped_back_before_a_run_waits_for_the_earlier_occurrence() {
        let wall = Wall::default();
        wall.0.store(2 * 3600 + 1800, Ordering::SeqCst); // 02:30
        let (mut j, _) = job("0 * * * *", MissedTicks::Burst, &wall);
        assert_eq!(j.target, Some(UNIX_EPOCH + Duration::from_secs(3 * 3600)));
        wall.0.store(1800, Ordering::SeqCst); // back to 00:30
        j.call();
        assert_eq!(j.plan_next(0), Some(60 * S));
        assert_eq!(j.target, Some(UNIX_EPOCH + Duration::from_secs(3600)));
    }

    #[test]
    fn missed_occurrences_follow_the_policy() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        let wall = Wall::default();
        // Minutely; the run for 00:01 ends at 00:04:30, past 00:02, 00:03 and 00:04.
        let (j, _) = job("* * * * *", MissedTicks::Burst, &wall);
        assert_eq!(j.after_run(at(60), at(270)), Some(at(120)));
        let (j, _) = job("* * * * *", MissedTicks::Skip, &wall);
        assert_eq!(j.after_run(at(60), at(270)), Some(at(300)));
        assert_eq!(j.after_run(at(60), at(300)), Some(at(300)), "at now counts");
        let (j, _) = job("* * * * *", MissedTicks::Delay, &wall);
        assert_eq!(j.after_run(at(60), at(270)), Some(at(240)));
        assert_eq!(
            j.after_run(at(60), at(90)),
            Some(at(120)),
            "on time: no policy"
        );
    }

    #[test]
    fn a_reset_runs_at_once_and_an_expression_without_occurrences_ends() {
        let wall = Wall::default();
        let (mut j, runs) = job("0 0 1 1 *", MissedTicks::Burst, &wall); // yearly
        j.rebase(5 * S);
        j.call();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let (mut never, runs) = job("0 0 30 2 *", MissedTicks::Burst, &wall);
        assert_eq!(never.first_deadline(7), 7);
        never.call();
        assert_eq!(never.plan_next(7), None);
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }
}

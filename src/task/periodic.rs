//! Periodic jobs: fixed rate and fixed delay, re-armed by resubmission after each run.
//!
//! All times are nanoseconds since the pool's origin, saturating at `u64::MAX` ("never").

use super::{Job, TaskKind};

/// What a fixed-rate task does about planned runs it missed because a run overran or the
/// machine stalled.
///
/// Example: period 10 ms, planned runs at 0, 10, 20, 30 ms; the run at 0 takes 35 ms.
/// - `Burst` runs at once for the missed 10, 20 and 30 ms slots, back to back, then 40 ms.
/// - `Skip` drops the missed slots and runs next at 40 ms, the first slot of the grid not yet past.
/// - `Delay` re-bases the grid on the end of the overrun: next run at 45 ms, then 55, 65 ms.
///
/// Runs of one task never overlap under any policy.
///
/// Calendar tasks (feature `cron`) apply the same policies to occurrences they missed: `Burst`
/// runs each, `Skip` waits for the first occurrence at or after now, `Delay` runs once at once
/// for all of them and goes on with the calendar.
///
/// # Examples
///
/// Set for the whole pool with [`Builder::missed_ticks`](crate::Builder::missed_ticks), for
/// one task with [`TaskBuilder::missed_ticks`](crate::TaskBuilder::missed_ticks):
///
/// ```
/// use wheelpool::{MissedTicks, ScheduledThreadPool};
/// use std::time::Duration;
///
/// assert_eq!(MissedTicks::default(), MissedTicks::Burst);
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let second = Duration::from_secs(1);
/// let f = pool.task().missed_ticks(MissedTicks::Skip).schedule_at_fixed_rate(|| (), second, second).unwrap();
/// assert!(f.cancel());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MissedTicks {
    /// Replay missed runs back to back (Java's `scheduleAtFixedRate`). The default.
    #[default]
    Burst,
    /// Skip missed runs; the next run is the first grid slot at or after now.
    Skip,
    /// Re-base the grid: the next run is one period after now.
    Delay,
}

impl MissedTicks {
    /// The policy's name, as its `Debug` writes it (for tracing's fields).
    pub(crate) fn label(self) -> &'static str {
        match self {
            MissedTicks::Burst => "Burst",
            MissedTicks::Skip => "Skip",
            MissedTicks::Delay => "Delay",
        }
    }
}

/// How the next run is planned.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Plan {
    /// Runs at `first + k * period`; `planned` is the deadline of the run now due or running.
    Rate {
        period: u64,
        planned: u64,
        missed: MissedTicks,
    },
    /// Runs `delay` after the previous run returned.
    Delay { delay: u64 },
}

impl Plan {
    /// The deadline of the run after one that finished at `now`.
    pub(crate) fn next(&mut self, now: u64) -> u64 {
        match self {
            Plan::Delay { delay } => now.saturating_add(*delay),
            Plan::Rate {
                period,
                planned,
                missed,
            } => {
                let on_grid = planned.saturating_add(*period);
                let next = if on_grid >= now {
                    on_grid
                } else {
                    let behind = (now - *planned) / *period; // planned runs already past
                    crate::trace::missed_ticks(missed.label(), behind, *period);
                    match missed {
                        MissedTicks::Burst => on_grid,
                        MissedTicks::Skip => next_grid_slot(*planned, *period, now),
                        MissedTicks::Delay => now.saturating_add(*period),
                    }
                };
                *planned = next;
                next
            }
        }
    }
}

impl Plan {
    /// A reset moved the next run to `deadline`: a fixed-rate grid re-bases there (the planned
    /// runs become `deadline`, `deadline + period`, ...); a fixed delay still counts from the
    /// end of each run, so it has nothing to change.
    pub(crate) fn rebase(&mut self, deadline: u64) {
        if let Plan::Rate { planned, .. } = self {
            *planned = deadline;
        }
    }
}

/// The first slot `base + k * period` (k >= 1) at or after `now`; `now > base`, `period > 0`.
fn next_grid_slot(base: u64, period: u64, now: u64) -> u64 {
    let steps = (now - base).div_ceil(period);
    base.saturating_add(steps.saturating_mul(period))
}

/// A periodic closure and its plan.
pub(crate) struct Periodic<F> {
    f: F,
    plan: Plan,
    survive_panics: bool,
}

impl<F: FnMut() + Send + 'static> Periodic<F> {
    pub(crate) fn new(f: F, plan: Plan, survive_panics: bool) -> Self {
        Periodic {
            f,
            plan,
            survive_panics,
        }
    }
}

impl<F: FnMut() + Send + 'static> Job for Periodic<F> {
    type Output = ();

    fn call(&mut self) -> Option<()> {
        (self.f)();
        None // runs until cancelled, a panic or a shutdown
    }

    fn plan_next(&mut self, now: u64) -> Option<u64> {
        Some(self.plan.next(now))
    }

    fn plans_from_end(&self) -> bool {
        // Burst replays the grid whatever the time; the tracing feature's missed-ticks event
        // counts the runs the one that ended overran, which needs the time it ended.
        match self.plan {
            Plan::Rate {
                missed: MissedTicks::Burst,
                ..
            } => cfg!(feature = "tracing"),
            Plan::Rate { .. } | Plan::Delay { .. } => true,
        }
    }

    fn kind(&self) -> TaskKind {
        match self.plan {
            Plan::Rate { .. } => TaskKind::FixedRate,
            Plan::Delay { .. } => TaskKind::FixedDelay,
        }
    }

    fn survives_panic(&self) -> bool {
        self.survive_panics
    }

    fn rebase(&mut self, deadline: u64) {
        self.plan.rebase(deadline);
    }

    const PERIODIC: bool = true;

    fn into_run(self) -> Box<dyn FnOnce() + Send> {
        Box::new(self.f)
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    fn rate(period: u64, planned: u64, missed: MissedTicks) -> Plan {
        Plan::Rate {
            period,
            planned,
            missed,
        }
    }

    #[test]
    fn on_time_runs_follow_the_grid_for_every_policy() {
        for missed in [MissedTicks::Burst, MissedTicks::Skip, MissedTicks::Delay] {
            let mut p = rate(10, 0, missed);
            assert_eq!(p.next(3), 10);
            assert_eq!(p.next(12), 20);
            assert_eq!(
                p.next(20),
                30,
                "finishing exactly on the next slot is not a miss"
            );
        }
    }

    #[test]
    fn overrun_by_policy_matches_the_documented_example() {
        // period 10, planned at 0, the run ends at 35.
        let mut burst = rate(10, 0, MissedTicks::Burst);
        let b: Vec<u64> = (0..4).map(|_| burst.next(35)).collect();
        assert_eq!(b, vec![10, 20, 30, 40]);
        let mut skip = rate(10, 0, MissedTicks::Skip);
        assert_eq!(skip.next(35), 40);
        assert_eq!(skip.next(41), 50);
        let mut delay = rate(10, 0, MissedTicks::Delay);
        assert_eq!(delay.next(35), 45);
        assert_eq!(delay.next(46), 55);
    }

    #[test]
    fn fixed_delay_counts_from_the_end_of_the_run() {
        let mut p = Plan::Delay { delay: 7 };
        assert_eq!(p.next(100), 107);
        assert_eq!(p.next(u64::MAX - 1), u64::MAX);
    }

    #[test]
    fn a_rebased_rate_grid_counts_from_the_new_deadline() {
        let mut p = rate(10, 0, MissedTicks::Burst);
        p.rebase(37);
        assert_eq!(p.next(40), 47);
        assert_eq!(p.next(48), 57);
        let mut d = Plan::Delay { delay: 7 };
        d.rebase(1_000);
        assert_eq!(
            d.next(100),
            107,
            "a fixed delay counts from the end of the run"
        );
    }

    #[test]
    fn arithmetic_saturates_at_never() {
        let mut p = rate(u64::MAX, u64::MAX - 5, MissedTicks::Skip);
        assert_eq!(p.next(u64::MAX - 1), u64::MAX);
        assert_eq!(next_grid_slot(0, 3, u64::MAX), u64::MAX);
        assert_eq!(next_grid_slot(5, 10, 6), 15);
        assert_eq!(next_grid_slot(5, 10, 15), 15);
    }
}

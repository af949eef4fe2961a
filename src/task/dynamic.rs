//! Dynamic jobs: each run returns when the next one comes (`Some(delay)`) or that there is none
//! (`None`), re-armed by resubmission like the other periodic jobs.
//!
//! All times are nanoseconds since the pool's origin, saturating at `u64::MAX` ("never").
//!
//! # When the next run is planned
//!
//! - Dynamic delay: `d` after the run that returned `Some(d)` returned (the clock reading the
//!   worker takes once the run is over).
//! - Dynamic rate: `d` after the *planned* start of the run that returned `Some(d)`: its
//!   deadline, not the moment a worker picked it up, so dispatch lateness does not pile up from
//!   run to run (as on a fixed-rate grid). If that time has already passed when the run returns
//!   (the run took longer than `d`), the next run is due at once; it still starts only after
//!   this one returned, so runs never overlap.
//! - A reset moves the next run; a dynamic rate then counts from the new deadline.
//! - A run that panics returns no delay. With `survive_panics` the task goes on with the delay
//!   the closure last returned (before any run returned one: the initial delay).

use super::{Job, PendingTask};
use std::time::Duration;

/// Which instant a returned delay counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CountFrom {
    /// From the end of the run (dynamic delay).
    End,
    /// From the planned start of the run (dynamic rate).
    PlannedStart,
}

/// A closure that plans its own next run.
pub(crate) struct Dynamic<F> {
    f: F,
    from: CountFrom,
    /// The delay the closure last returned, in nanoseconds; `None` once it returned `None`.
    next: Option<u64>,
    /// The deadline of the run now due or running (used by `CountFrom::PlannedStart`).
    planned: u64,
    survive_panics: bool,
}

impl<F> Dynamic<F>
where
    F: FnMut() -> Option<Duration> + Send + 'static,
{
    /// A job whose first run is planned at `first`, `initial` nanoseconds after scheduling.
    pub(crate) fn new(
        f: F,
        from: CountFrom,
        first: u64,
        initial: u64,
        survive_panics: bool,
    ) -> Self {
        Dynamic {
            f,
            from,
            next: Some(initial),
            planned: first,
            survive_panics,
        }
    }
}

/// `d` in whole nanoseconds, saturating at `u64::MAX` ("never").
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<F> Job for Dynamic<F>
where
    F: FnMut() -> Option<Duration> + Send + 'static,
{
    type Output = ();

    fn call(&mut self) {
        // A panic leaves `next` as it was: the delay of the previous run (module docs).
        self.next = (self.f)().map(nanos);
    }

    fn plan_next(&mut self, now: u64) -> Option<u64> {
        let delay = self.next?;
        let next = match self.from {
            CountFrom::End => now.saturating_add(delay),
            CountFrom::PlannedStart => self.planned.saturating_add(delay),
        };
        self.planned = next;
        Some(next)
    }

    fn survives_panic(&self) -> bool {
        self.survive_panics
    }

    fn ended(&self) -> bool {
        self.next.is_none()
    }

    fn rebase(&mut self, deadline: u64) {
        self.planned = deadline;
    }

    const PERIODIC: bool = true;

    fn into_pending(self) -> PendingTask {
        let mut f = self.f;
        PendingTask::new(
            true,
            Box::new(move || {
                let _ = f();
            }),
        )
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A job whose closure returns `delays` (in nanoseconds) one after the other.
    fn job(
        from: CountFrom,
        first: u64,
        delays: &[Option<u64>],
    ) -> Dynamic<impl FnMut() -> Option<Duration> + Send> {
        let mut left: VecDeque<Option<u64>> = delays.iter().copied().collect();
        let f = move || left.pop_front().flatten().map(Duration::from_nanos);
        Dynamic::new(f, from, first, first, false)
    }

    #[test]
    fn a_dynamic_delay_counts_from_the_end_of_the_run() {
        let mut j = job(CountFrom::End, 10, &[Some(5), Some(7)]);
        j.call();
        assert_eq!(j.plan_next(13), Some(18));
        j.call();
        assert_eq!(j.plan_next(20), Some(27));
    }

    #[test]
    fn a_dynamic_rate_counts_from_the_planned_start() {
        let mut j = job(CountFrom::PlannedStart, 10, &[Some(5), Some(5), Some(5)]);
        j.call();
        assert_eq!(
            j.plan_next(13),
            Some(15),
            "planned 10, run started late and ended at 13"
        );
        j.call();
        assert_eq!(
            j.plan_next(40),
            Some(20),
            "overran: due at once, never two at once"
        );
        j.rebase(100);
        j.call();
        assert_eq!(j.plan_next(101), Some(105), "a reset re-bases the rate");
    }

    #[test]
    fn none_ends_the_job() {
        let mut j = job(CountFrom::End, 0, &[Some(1), None]);
        j.call();
        assert!(!j.ended());
        assert_eq!(j.plan_next(0), Some(1));
        j.call();
        assert!(j.ended());
        assert_eq!(j.plan_next(1), None);
    }

    #[test]
    fn a_panicking_run_keeps_the_last_delay() {
        let mut calls = 0;
        let f = move || {
            calls += 1;
            if calls == 2 {
                panic!("second run");
            }
            Some(Duration::from_nanos(4))
        };
        let mut j = Dynamic::new(f, CountFrom::End, 0, 9, true);
        assert_eq!(j.plan_next(0), Some(9), "before any run: the initial delay");
        j.call();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| j.call()));
        assert!(caught.is_err());
        assert_eq!(j.plan_next(10), Some(14));
    }

    #[test]
    fn delays_saturate_at_never() {
        let mut j = job(CountFrom::PlannedStart, u64::MAX - 1, &[Some(u64::MAX)]);
        j.call();
        assert_eq!(j.plan_next(0), Some(u64::MAX));
        assert_eq!(nanos(Duration::MAX), u64::MAX);
    }
}

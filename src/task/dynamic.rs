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

use super::{Job, TaskKind};
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::time::Duration;

/// What a run of a dynamic task returns: when the next run comes, or that there is none. Two
/// return types, for the same scheduling methods
/// ([`schedule_with_dynamic_delay`](crate::Handle::schedule_with_dynamic_delay),
/// [`schedule_at_dynamic_rate`](crate::Handle::schedule_at_dynamic_rate)):
///
/// - `Option<Duration>`: `Some(d)` runs again after `d`, `None` ends the task; its future gives
///   `Ok(())`.
/// - [`ControlFlow<T, Duration>`]: `Continue(d)` runs again after `d`, `Break(v)` ends the task
///   with `v`; its future gives `Ok(v)`. A loop that returns: a retry giving back its reply, or
///   its last error.
///
/// Sealed: these two are the only implementations.
///
/// # Examples
///
/// ```
/// use wheelpool::ScheduledThreadPool;
/// use std::ops::ControlFlow;
/// use std::time::Duration;
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let mut tries = 0;
/// let f = pool
///     .schedule_with_dynamic_delay(
///         move || {
///             tries += 1;
///             if tries < 3 { ControlFlow::Continue(Duration::from_millis(1)) } else { ControlFlow::Break(tries) }
///         },
///         Duration::ZERO,
///     )
///     .unwrap();
/// assert_eq!(f.join(), Ok(3));
/// ```
pub trait NextRun: sealed::Sealed + Send + 'static {
    /// What the task's future gives when a run ends the task.
    type Output: Send + 'static;

    /// This run's answer as "again after this delay" or "done with this value".
    #[doc(hidden)]
    fn into_flow(self) -> ControlFlow<Self::Output, Duration>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for Option<std::time::Duration> {}
    impl<T> Sealed for std::ops::ControlFlow<T, std::time::Duration> {}
}

impl NextRun for Option<Duration> {
    type Output = ();

    fn into_flow(self) -> ControlFlow<(), Duration> {
        match self {
            Some(delay) => ControlFlow::Continue(delay),
            None => ControlFlow::Break(()),
        }
    }
}

impl<T: Send + 'static> NextRun for ControlFlow<T, Duration> {
    type Output = T;

    fn into_flow(self) -> ControlFlow<T, Duration> {
        self
    }
}

/// Which instant a returned delay counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CountFrom {
    /// From the end of the run (dynamic delay).
    End,
    /// From the planned start of the run (dynamic rate).
    PlannedStart,
}

/// A closure that plans its own next run.
pub(crate) struct Dynamic<F, R> {
    f: F,
    from: CountFrom,
    /// The delay the closure last returned, in nanoseconds (before any run: the initial delay).
    next: u64,
    /// The deadline of the run now due or running (used by `CountFrom::PlannedStart`).
    planned: u64,
    survive_panics: bool,
    returns: PhantomData<fn() -> R>,
}

impl<F, R> Dynamic<F, R>
where
    F: FnMut() -> R + Send + 'static,
    R: NextRun,
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
            next: initial,
            planned: first,
            survive_panics,
            returns: PhantomData,
        }
    }
}

/// `d` in whole nanoseconds, saturating at `u64::MAX` ("never").
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<F, R> Job for Dynamic<F, R>
where
    F: FnMut() -> R + Send + 'static,
    R: NextRun,
{
    type Output = R::Output;

    fn call(&mut self) -> Option<R::Output> {
        // A panic leaves `next` as it was: the delay of the previous run (module docs).
        match (self.f)().into_flow() {
            ControlFlow::Continue(delay) => {
                self.next = nanos(delay);
                None
            }
            ControlFlow::Break(value) => Some(value),
        }
    }

    fn plan_next(&mut self, now: u64) -> Option<u64> {
        let next = match self.from {
            CountFrom::End => now.saturating_add(self.next),
            CountFrom::PlannedStart => self.planned.saturating_add(self.next),
        };
        self.planned = next;
        Some(next)
    }

    fn plans_from_end(&self) -> bool {
        matches!(self.from, CountFrom::End)
    }

    fn survives_panic(&self) -> bool {
        self.survive_panics
    }

    fn rebase(&mut self, deadline: u64) {
        self.planned = deadline;
    }

    const PERIODIC: bool = true;

    fn kind(&self) -> TaskKind {
        match self.from {
            CountFrom::End => TaskKind::DynamicDelay,
            CountFrom::PlannedStart => TaskKind::DynamicRate,
        }
    }

    fn into_run(self) -> Box<dyn FnOnce() + Send> {
        let mut f = self.f;
        Box::new(move || drop(f()))
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
    ) -> Dynamic<impl FnMut() -> Option<Duration> + Send, Option<Duration>> {
        let mut left: VecDeque<Option<u64>> = delays.iter().copied().collect();
        let f = move || left.pop_front().flatten().map(Duration::from_nanos);
        Dynamic::new(f, from, first, first, false)
    }

    #[test]
    fn a_dynamic_delay_counts_from_the_end_of_the_run() {
        let mut j = job(CountFrom::End, 10, &[Some(5), Some(7)]);
        assert_eq!(j.call(), None);
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
        assert_eq!(j.call(), None, "again");
        assert_eq!(j.plan_next(0), Some(1));
        assert_eq!(j.call(), Some(()), "done");
    }

    #[test]
    fn break_ends_the_job_with_its_value() {
        let mut left = vec![
            ControlFlow::Break("done"),
            ControlFlow::Continue(Duration::from_nanos(3)),
        ];
        let f = move || left.pop().unwrap();
        let mut j = Dynamic::new(f, CountFrom::End, 0, 0, false);
        assert_eq!(j.call(), None);
        assert_eq!(j.plan_next(10), Some(13));
        assert_eq!(j.call(), Some("done"));
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

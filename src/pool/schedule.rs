//! The generic front of scheduling: admit the task (`Core::admit`), build its cell, then hand it
//! to the one non-generic `Core::schedule_admitted`. One generic function per kind of closure
//! (one-shot, periodic, dynamic):
//! their signatures look alike because each states its own closure bound, while what they build
//! differs; the shared tail is `schedule_job`, written once. The public methods that call these live on `TaskBuilder` (`task_builder.rs`); `Handle`'s are those with no options.

use super::core::{Arrival, Core};
use super::future::ScheduledFuture;
use crate::error::ScheduleError;
use crate::sync::Arc;
use crate::task::dynamic::{CountFrom, Dynamic};
use crate::task::periodic::{Periodic, Plan};
use crate::task::{pair, single, Job, Name, NextRun, OneShot, Options, TaskCell};
use crate::timer::duration_nanos;
use std::time::{Duration, Instant};

/// When a task is due, and the clock reading it was computed from (both in nanoseconds since
/// the pool's origin): one clock read per schedule call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct When {
    pub(crate) deadline: u64,
    pub(crate) now: u64,
}

/// Due `delay` from now.
#[inline]
pub(crate) fn after(core: &Core, delay: Duration) -> When {
    let now = core.timer.time.now_nanos();
    When {
        deadline: now.saturating_add(duration_nanos(delay)),
        now,
    }
}

/// Due at `at` on the pool's time line (an instant in the past is due now). "Now" is read
/// through `Instant` too, the caller's clock, so an `at` that has come is due at once
/// (`TimeBase::now_nanos_exact`).
pub(crate) fn at(core: &Core, at: Instant) -> When {
    let time = &core.timer.time;
    When {
        deadline: time.nanos_of(at),
        now: time.now_nanos_exact(),
    }
}

/// Due at once (`execute`): no clock read needed.
const NOW: When = When {
    deadline: 0,
    now: 0,
};

pub(crate) fn one_shot<F, T>(
    core: &Arc<Core>,
    f: F,
    when: When,
    opts: Options,
) -> Result<ScheduledFuture<T>, ScheduleError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    schedule_job(core, OneShot::new(f), when, opts.name)
}

/// Admits the task, builds its cell for `job`, hands it to the non-generic
/// `Core::schedule_admitted`, and wraps the cell in the caller's future: the one tail every
/// scheduling method shares.
/// `name`: what the task is called (`PendingTask`, `Debug`, the panic handler).
pub(crate) fn schedule_job<J: Job>(
    core: &Arc<Core>,
    job: J,
    when: When,
    name: Option<Name>,
) -> Result<ScheduledFuture<J::Output>, ScheduleError> {
    let shard = if J::PERIODIC {
        core.timer.spread_shard()
    } else {
        core.timer.home_shard()
    };
    let owner = core.core_ref(shard).ok_or(ScheduleError::Shutdown)?;
    core.admit()?;
    // A task without a name keeps no room for one (`NameSlot`). Born with two pointers: the
    // future keeps one, the wheel (or a ready queue) the other.
    let (cell, raw) = match name {
        None => pair(TaskCell::new(job, when.deadline, shard)),
        Some(name) => pair(TaskCell::named(job, when.deadline, shard, name)),
    };
    core.schedule_admitted(raw, when.now, Arrival::New)?;
    Ok(ScheduledFuture::new(cell, owner))
}

pub(crate) fn execute<F>(core: &Arc<Core>, f: F, opts: Options) -> Result<(), ScheduleError>
where
    F: FnOnce() + Send + 'static,
{
    core.admit()?;
    // Due now: it never enters a wheel, so any shard will do.
    let job = OneShot::new(f);
    let raw = match opts.name {
        None => single(TaskCell::new(job, NOW.deadline, 0).unplanned()),
        Some(name) => single(TaskCell::named(job, NOW.deadline, 0, name).unplanned()),
    };
    core.schedule_admitted(raw, NOW.now, Arrival::New)
}

/// Which kind of periodic task.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Every {
    Rate(Duration),
    Delay(Duration),
}

pub(crate) fn periodic<F>(
    core: &Arc<Core>,
    f: F,
    initial: Duration,
    every: Every,
    opts: Options,
) -> Result<ScheduledFuture<()>, ScheduleError>
where
    F: FnMut() + Send + 'static,
{
    let first = after(core, initial);
    let plan = match every {
        Every::Rate(period) if !period.is_zero() => Plan::Rate {
            period: duration_nanos(period),
            planned: first.deadline,
            missed: opts.missed.unwrap_or(core.missed_ticks),
        },
        Every::Delay(delay) if !delay.is_zero() => Plan::Delay {
            delay: duration_nanos(delay),
        },
        _ => return Err(ScheduleError::ZeroPeriod),
    };
    let job = Periodic::new(f, plan, opts.survive_panics);
    schedule_job(core, job, first, opts.name)
}

pub(crate) fn dynamic<F, R>(
    core: &Arc<Core>,
    f: F,
    initial: Duration,
    from: CountFrom,
    opts: Options,
) -> Result<ScheduledFuture<R::Output>, ScheduleError>
where
    F: FnMut() -> R + Send + 'static,
    R: NextRun,
{
    let first = after(core, initial);
    let job = Dynamic::new(
        f,
        from,
        first.deadline,
        duration_nanos(initial),
        opts.survive_panics,
    );
    schedule_job(core, job, first, opts.name)
}

/// A calendar task (feature `cron`): its first wake-up is planned from the wall clock, under
/// the task's missed-run policy, else the pool's (see `task/calendar.rs`).
#[cfg(feature = "cron")]
pub(crate) fn calendar<F>(
    core: &Arc<Core>,
    f: F,
    cron: &crate::cron::Cron,
    opts: Options,
) -> Result<ScheduledFuture<()>, ScheduleError>
where
    F: FnMut() + Send + 'static,
{
    use crate::task::calendar::Calendar;
    let clock = core.timer.time.clock.clone();
    let missed = opts.missed.unwrap_or(core.missed_ticks);
    let job = Calendar::new(f, cron.clone(), clock, missed, opts.survive_panics);
    let now = core.timer.time.now_nanos();
    let first = When {
        deadline: job.first_deadline(now),
        now,
    };
    schedule_job(core, job, first, opts.name)
}

//! What a cluster job's runs are planned by: a fixed period on a grid from the epoch, or
//! (feature `cron`) a cron expression in a time zone. The row stores it as the grid
//! (`period_ns`, `offset_ns`) and the `cron` text; two nodes agree on a job's settings when
//! all three are equal.

#[cfg(feature = "cron")]
use super::calendar::{Occurrences, CRON_GRID};
use std::time::Duration;

/// A cluster job's schedule.
#[derive(Debug)]
pub(super) enum Schedule {
    /// Run `k` is planned at `offset + k * period` after the epoch.
    Every { period: Duration, offset: Duration },
    /// Each occurrence of a cron expression, named by its instant (see `calendar.rs`).
    #[cfg(feature = "cron")]
    Cron(Box<Occurrences>),
}

impl Schedule {
    /// The grid the row holds, in ns.
    pub(super) fn grid(&self) -> (i64, i64) {
        match self {
            Schedule::Every { period, offset } => (nanos(*period), nanos(*offset)),
            #[cfg(feature = "cron")]
            Schedule::Cron(_) => CRON_GRID,
        }
    }

    /// The row's `cron` text: empty for a period.
    pub(super) fn cron_text(&self) -> &str {
        match self {
            Schedule::Every { .. } => "",
            #[cfg(feature = "cron")]
            Schedule::Cron(occ) => occ.settings(),
        }
    }

    /// The time between runs (for a cron schedule, between its next two occurrences when it
    /// was scheduled): what the defaults of the lease and the grace, the standby delay, and
    /// a refused node's retries scale with.
    pub(super) fn step(&self) -> Duration {
        match self {
            Schedule::Every { period, .. } => *period,
            #[cfg(feature = "cron")]
            Schedule::Cron(occ) => occ.step(),
        }
    }

    /// The cron schedule, if it is one.
    #[cfg(feature = "cron")]
    pub(super) fn occurrences(&self) -> Option<&Occurrences> {
        match self {
            Schedule::Cron(occ) => Some(occ),
            Schedule::Every { .. } => None,
        }
    }

    /// The period and offset as [`ClusterError::ConfigMismatch`](super::ClusterError) shows
    /// them: both zero for a cron schedule.
    pub(super) fn shown(&self) -> (Duration, Duration) {
        match self {
            Schedule::Every { period, offset } => (*period, *offset),
            #[cfg(feature = "cron")]
            Schedule::Cron(_) => (Duration::ZERO, Duration::ZERO),
        }
    }
}

/// The settings a row holds, as [`ClusterError::ConfigMismatch`](super::ClusterError) shows
/// them: a cron job's (its grid is no period) as zeros.
pub(super) fn shown(stored: &Stored) -> (Duration, Duration) {
    let span = |ns: i64| Duration::from_nanos(ns.unsigned_abs());
    if stored.cron.is_empty() {
        (span(stored.grid.0), span(stored.grid.1))
    } else {
        (Duration::ZERO, Duration::ZERO)
    }
}

/// A job's settings as the store holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stored {
    pub(super) grid: (i64, i64),
    pub(super) cron: String,
}

impl Stored {
    /// True if a node with `schedule` runs this row's job.
    pub(super) fn matches(&self, schedule: &Schedule) -> bool {
        self.grid == schedule.grid() && self.cron == schedule.cron_text()
    }
}

/// A duration in nanoseconds as the store's `bigint` (spans are checked to fit at build).
pub(super) fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

//! How a job chain reports what did not go as planned: failed store calls (with fewer
//! reports as a streak grows), skipped runs, and the counters behind both. Reports go to the
//! job's handler on the pool, never run on the store's thread.

use super::batch::ClaimAnswer;
use super::error::{ClusterError, SkipReason};
use super::pg::system_time;
use super::stats::Counters;
use super::task::{retry_after, Shared, MIN_RETRY};
use std::panic;
use std::time::Duration;

/// A long outage may skip thousands of runs: each is counted, but a bounded number reported
/// one by one, then the rest as one event for the last of them.
const ONE_BY_ONE: usize = 100;

impl Shared {
    /// A failed store call: report it, and the wait before the chain tries again. In a long
    /// streak (the database down for minutes) the first three failures are reported, then
    /// the 4th, 8th, 16th, ...: every failure is counted in the stats.
    pub(super) fn failed(&self, err: ClusterError) -> Duration {
        let errors = {
            let mut chain = self.chain.lock();
            chain.errors += 1;
            chain.errors
        };
        if errors <= 3 || errors.is_power_of_two() {
            self.report(err);
        }
        retry_after(MIN_RETRY, errors)
    }

    /// Reports runs `from..=to` as skipped for `reason` (nothing if the range is empty). For
    /// a cron schedule, the occurrences in that stretch of instants; an unconfirmed run is
    /// reported as it is (a triggered run's number need not be an occurrence).
    pub(super) fn skipped(&self, grid: (i64, i64), from: i64, to: i64, reason: SkipReason) {
        if from > to {
            return;
        }
        #[cfg(feature = "cron")]
        if let Some(occ) = self
            .spec
            .schedule
            .occurrences()
            .filter(|_| !matches!(reason, SkipReason::Unconfirmed { .. }))
        {
            let within = occ.within(from, to, ONE_BY_ONE);
            self.count(|c| c.skipped(reason, within.count));
            for run in within.listed.into_iter().chain(within.last) {
                self.report_skipped(grid, run, reason);
            }
            return;
        }
        let runs = u64::try_from(to - from + 1).unwrap_or(u64::MAX);
        self.count(|c| c.skipped(reason, runs));
        let last_single = to.min(from + ONE_BY_ONE as i64 - 1);
        for run in (from..=last_single).chain((last_single < to).then_some(to)) {
            self.report_skipped(grid, run, reason);
        }
    }

    fn report_skipped(&self, grid: (i64, i64), run: i64, reason: SkipReason) {
        self.report(ClusterError::RunSkipped {
            job: self.spec.job.to_string(),
            run: u64::try_from(run).unwrap_or(0),
            planned_at: system_time(self.planned(grid, run)),
            reason,
        });
    }

    /// Counts on this job and on the node's store alike.
    pub(super) fn count(&self, f: impl Fn(&Counters)) {
        f(&self.stats);
        f(&self.store.stats);
    }

    /// Hands `err` to the job's handler on the pool, or, without one, to the pool's panic
    /// handler as the panic of a separate one-shot task (the job itself goes on). If the pool
    /// refuses (it is shutting down), the handler runs on a thread of its own (never on the
    /// store's thread), or, without a handler, the message goes to stderr.
    pub(super) fn report(&self, err: ClusterError) {
        match &self.on_error {
            Some(handler) => {
                let h = handler.clone();
                let err2 = err.clone();
                let call = move || {
                    // A panicking handler must not stop the job; its payload is dropped here.
                    crate::panic::call_user(|| h(err2));
                };
                if self.handle.execute(call).is_err() {
                    // The pool is shutting down; the store's thread must not run user code.
                    let h = handler.clone();
                    let spawned = std::thread::Builder::new()
                        .name("wheelpool-pg-report".into())
                        .spawn(move || {
                            crate::panic::call_user(|| h(err));
                        });
                    if let Err(e) = spawned {
                        eprintln!("wheelpool cluster: cannot report an error: {e}");
                    }
                }
            }
            None => {
                let message = format!(
                    "wheelpool cluster job `{}` on node `{}`: {err}",
                    self.spec.job, self.spec.node
                );
                let relay = message.clone();
                if self
                    .handle
                    .execute(move || panic::panic_any(relay))
                    .is_err()
                {
                    eprintln!("{message}");
                }
            }
        }
    }

    /// Reports the unconfirmed claim a won claim superseded, if any (see `sql::CLAIM`).
    pub(super) fn unconfirmed(&self, a: &ClaimAnswer) {
        if let Some((run, triggered)) = a.orphan {
            self.skipped(a.grid, run, run, SkipReason::Unconfirmed { triggered });
        }
    }
}

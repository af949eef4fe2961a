//! A cron job's side of the chain (features `postgres` and `cron`): which occurrence a claim
//! names, and where the chain goes after an answer or a run. What names a run, and how long
//! an occurrence stays claimable, is in `calendar.rs`; the rest of the chain, and its ground
//! rules, in `task.rs` and `running.rs`.
//!
//! - The chain keeps one occurrence in view (`Chain::target`): the oldest it may still claim
//!   by its last reading of the store's clock. Each answer moves it past the row's last run
//!   (the latest occurrence claimed, by any node), each run past the run.
//! - A claim is sent for the occurrence in view, at its time (or, for a node on standby or
//!   waiting for a lease, later); a claim sent late names the oldest occurrence still
//!   claimable by then, so one that lands after its occurrence's time still gets it, and
//!   the winner reports those it jumped over (`RunSkipped`, `Misfired`).
//! - With no occurrence in view (the first claim, or the store's clock unknown), a claim
//!   names none (`want = i64::MAX`): it cannot win a planned run (it still takes a trigger,
//!   or a claim handed back), and its answer brings the row's last run and the clock.
//! - An expression with no occurrence left ends the chain: `join` gives `Ok(())`.

use super::batch::{ClaimAnswer, Outcome};
use super::calendar::Occurrences;
use super::error::SkipReason;
use super::run::Won;
use super::schedule::nanos;
use super::stats::Counters;
use super::task::{Shared, RESYNC};
use std::time::Duration;

impl Shared {
    /// The occurrence the next claim names, until when, and whether it names none. `None`:
    /// no occurrence left.
    pub(super) fn cron_claim(&self, occ: &Occurrences) -> Option<(Option<i64>, i64, bool)> {
        const NONE: i64 = i64::MAX;
        let target = self.chain.lock().target;
        let (Some(target), Some(now)) = (target, self.store_now()) else {
            return Some((Some(NONE), NONE, true));
        };
        // Woken late: the oldest occurrence still claimable now, from the one in view.
        let grace = nanos(self.spec.grace);
        let want = occ.oldest_claimable(target - 1, clamp(now), grace)?;
        self.chain.lock().target = Some(want);
        Some((Some(want), occ.deadline(want, grace), false))
    }

    /// Where the chain goes after an answer that won nothing (the outcomes that differ
    /// from a period's; see `task.rs` for the others).
    pub(super) fn answered_cron(&self, a: &ClaimAnswer) {
        match a.outcome {
            Outcome::Leased => {
                // As for a period: a due occurrence waits for the lease to end, a later one
                // for its time (the holder has usually released by then).
                let Some(t) = self.aim(a.k) else {
                    return self.no_more();
                };
                let due = self.store_now().is_some_and(|now| i128::from(t) <= now);
                let at = if due { t.max(a.until_ns) } else { t };
                self.plan(self.until(i128::from(at)) + self.standby());
            }
            Outcome::Paused => {
                self.skipped(a.grid, a.last_run + 1, a.k - 1, SkipReason::Misfired);
                self.skipped(a.grid, a.k, a.due, SkipReason::Paused);
                self.plan_occurrence(a.due + 1, Duration::ZERO);
            }
            Outcome::Taken => {
                self.count(|c| Counters::bump(&c.found_taken));
                self.plan_occurrence(a.k, self.standby());
            }
            // The occurrence is not due yet, or was past its time: aim again from it.
            _ => self.plan_occurrence(a.k, Duration::ZERO),
        }
    }

    /// After a run (and its release): the next occurrence after it, at once if a trigger
    /// waits. (Not after the last due one: a handed-back run may be older than another due
    /// occurrence, which is still claimable.)
    pub(super) fn after_cron_run(&self, won: Won) {
        if won.more {
            self.aim(won.run + 1);
            self.plan(Duration::ZERO);
        } else {
            self.plan_occurrence(won.run + 1, Duration::ZERO);
        }
    }

    /// Plans the claim of the oldest occurrence at or after `k` still claimable, at its time
    /// plus `extra`.
    fn plan_occurrence(&self, k: i64, extra: Duration) {
        match self.aim(k) {
            Some(t) => self.plan(self.until(i128::from(t)) + extra),
            None => self.no_more(),
        }
    }

    /// Puts the oldest occurrence at or after `k` still claimable in view; `None` if no
    /// occurrence is left. Every caller follows an answer, so the store's clock has been
    /// read; were it not, nothing is put in view (the next claim names none) and the
    /// epoch is given, which `until` turns into a look again after a step.
    fn aim(&self, k: i64) -> Option<i64> {
        let occ = self.spec.schedule.occurrences()?;
        let Some(now) = self.store_now() else {
            self.chain.lock().target = None;
            return Some(0);
        };
        let t = occ.oldest_claimable(k - 1, clamp(now), nanos(self.spec.grace));
        self.chain.lock().target = t;
        t
    }

    /// No occurrence left: the chain ends (`join` gives `Ok(())`), or, without a reading of
    /// the store's clock yet, looks again.
    fn no_more(&self) {
        if self.store_now().is_some() {
            self.end(Ok(()));
        } else {
            self.plan(self.spec.schedule.step().min(RESYNC));
        }
    }
}

/// A reading of the store's clock as the store's `bigint`.
fn clamp(ns: i128) -> i64 {
    i64::try_from(ns).unwrap_or(if ns < 0 { 0 } else { i64::MAX })
}

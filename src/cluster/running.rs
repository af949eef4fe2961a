//! A won run of a cluster job on its node: handed to the pool, run, and its lease released; the
//! other half of the chain in `task.rs` (whose ground rules hold here too).

use super::batch::{LeaseState, ReleaseRequest, Reply};
use super::error::{ClusterError, SkipReason, StoreError};
use super::run::{ClusterRun, Won};
use super::stats::Counters;
use super::task::{
    handing_over, refused_here, retry_after, Shared, BUSY_RETRY, MAX_RETRY, SATURATED_RETRY,
};
use crate::sync::Arc;
use crate::{ScheduleError, TaskError};
use std::panic::{self, AssertUnwindSafe};
use std::time::Duration;

/// A won run handed to the pool. Dropped without running (the pool refused it, or handed it
/// back at `shutdown_now`), it reports the run as skipped.
struct RunTask(Option<(Arc<Shared>, Won)>);

impl RunTask {
    fn run(mut self) {
        if let Some((shared, won)) = self.0.take() {
            shared.run(won);
        }
    }
}

impl Drop for RunTask {
    fn drop(&mut self) {
        if let Some((shared, won)) = self.0.take() {
            if !refused_here() {
                shared.abandon(won);
            }
        }
    }
}

impl Shared {
    /// Hands a won run to the pool.
    pub(super) fn start_run(self: &Arc<Self>, won: Won) {
        self.count(|c| Counters::bump(&c.claims_won));
        self.hand_run(won);
    }

    /// Hands a won run to the pool. A full pool is tried again shortly (the run stays
    /// claimed, its lease held); a pool shutting down, now or later (`shutdown_now` drops the
    /// run unrun), gets the run reported and its lease given up (`RunTask::drop`).
    pub(super) fn hand_run(self: &Arc<Self>, won: Won) {
        let task = RunTask(Some((self.clone(), won)));
        match handing_over(|| self.handle.execute(move || task.run())) {
            Ok(()) => {}
            Err(ScheduleError::Saturated { .. }) => {
                let shared = self.clone();
                self.store.spawn(async move {
                    tokio::time::sleep(SATURATED_RETRY).await;
                    shared.hand_run(won);
                });
            }
            Err(_) => self.abandon(won),
        }
    }

    /// A claimed run that will not run (its pool is shutting down): reported, and its lease
    /// released. The run is claimed, so no other node runs it.
    pub(super) fn abandon(self: &Arc<Self>, won: Won) {
        self.skipped(won.grid, won.run, won.run, SkipReason::Shutdown);
        self.end(Err(TaskError::Shutdown));
        self.handled(won, false);
    }

    /// Runs the body for a won claim (on a pool worker), then releases the lease.
    pub(super) fn run(self: Arc<Self>, won: Won) {
        let renewal = self.spec.keep_alive.then(|| {
            let shared = self.clone();
            let every = self.spec.lease / 3;
            self.store.spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    if let Err(err) = shared.renew(won).await {
                        let stop = matches!(err, ClusterError::LeaseExpired { .. });
                        shared.report(err);
                        if stop {
                            return;
                        }
                    }
                }
            })
        });
        let outcome = {
            let mut body = self.body.lock();
            let renew = || {
                let shared = self.arc();
                self.store.block(async move { shared.renew(won).await })
            };
            let info = ClusterRun {
                job: &self.spec.job,
                node: &self.spec.node,
                run: won,
                renew: &renew,
            };
            panic::catch_unwind(AssertUnwindSafe(|| (*body)(&info)))
        };
        if let Some(renewal) = renewal {
            renewal.abort();
        }
        let panicked = outcome.err();
        if let (Some(payload), false) = (&panicked, self.spec.survive_panics) {
            let message = crate::pool::panic_message(&**payload);
            self.end(Err(TaskError::Panicked(message)));
        }
        self.handled(won, true);
        if let Some(payload) = panicked {
            // The pool reports it to its panic handler, as for any task.
            panic::resume_unwind(payload);
        }
    }

    /// Marks `won` handled, releases its lease (`ran`: the body ran, so an expired lease is
    /// reported) and plans the next wake-up when the store answers.
    pub(super) fn handled(self: &Arc<Self>, won: Won, ran: bool) {
        self.chain.lock().known = won.claim;
        let shared = self.clone();
        self.store.release(ReleaseRequest {
            job: self.spec.job.clone(),
            claim: won.claim,
            owner: self.spec.owner.clone(),
            reply: Reply::new(move |released| shared.released(won, ran, released)),
        });
    }

    /// The store's answer to a release (on the store's thread): report an expired lease or a
    /// failure, and plan the next wake-up.
    pub(super) fn released(
        self: Arc<Self>,
        won: Won,
        ran: bool,
        released: Result<LeaseState, ClusterError>,
    ) {
        // A release that found the row locked, or lost its connection or its time, is sent
        // again: until it confirms the run, another node's claim would report the run as
        // unconfirmed once the lease runs out.
        let again = matches!(
            released,
            Ok(LeaseState::Busy) | Err(ClusterError::Unavailable(_))
        );
        let busy = {
            let mut chain = self.chain.lock();
            chain.busy = if again { chain.busy + 1 } else { 0 };
            chain.busy
        };
        if let Err(err) = &released {
            if again && busy == 1 {
                self.report(err.clone());
            }
        }
        match released {
            // The row is locked (another node's claim, an administrator), or the call failed:
            // send the release again shortly, alone, so no other job's release waits for
            // that lock. After a streak as long as a call timeout, give up: the lease then
            // runs out by itself.
            Ok(LeaseState::Busy) | Err(ClusterError::Unavailable(_)) => {
                let wait = retry_after(BUSY_RETRY, busy);
                if wait < MAX_RETRY.min(self.store.call_timeout) {
                    let shared = self.clone();
                    self.store.spawn(async move {
                        tokio::time::sleep(wait).await;
                        shared.handled(won, ran);
                    });
                    return;
                }
                if matches!(released, Ok(LeaseState::Busy)) {
                    self.report(ClusterError::Store(StoreError::busy("release")));
                }
            }
            Ok(LeaseState::Expired { taken_over }) if ran => {
                self.count(|c| Counters::bump(&c.leases_expired));
                self.report(ClusterError::LeaseExpired {
                    job: self.spec.job.to_string(),
                    run: u64::try_from(won.run).unwrap_or(0),
                    lease: self.spec.lease,
                    taken_over,
                });
            }
            Ok(_) => {}
            Err(err) => self.report(err),
        }
        #[cfg(feature = "cron")]
        if self.spec.schedule.occurrences().is_some() {
            return self.after_cron_run(won);
        }
        if won.more {
            self.plan(Duration::ZERO);
        } else {
            let next = self.planned(won.grid, won.run.max(won.due) + 1);
            self.plan(self.until(next));
        }
    }

    /// Extends `won`'s lease (see [`ClusterRun::keep_alive`]).
    pub(super) async fn renew(&self, won: Won) -> Result<(), ClusterError> {
        let lease_us = i64::try_from(self.spec.lease.as_micros()).unwrap_or(i64::MAX);
        let state = self
            .store
            .renew(&self.spec.job, won.claim, &self.spec.owner, lease_us)
            .await?;
        match state {
            LeaseState::Held => Ok(()),
            LeaseState::Busy => Err(ClusterError::Store(StoreError::busy("renew"))),
            LeaseState::Expired { taken_over } => {
                self.count(|c| Counters::bump(&c.leases_expired));
                Err(ClusterError::LeaseExpired {
                    job: self.spec.job.to_string(),
                    run: u64::try_from(won.run).unwrap_or(0),
                    lease: self.spec.lease,
                    taken_over,
                })
            }
        }
    }
}

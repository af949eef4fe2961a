//! `ClusterTask`: a node's handle on its part of a cluster job.

use super::stats::ClusterStats;
use super::task::Shared;
use crate::sync::Arc;
use crate::TaskError;
use std::fmt;
use std::time::{Duration, Instant};

/// A node's handle on a scheduled cluster job: cancel it, wait for it to end, read its
/// counters.
///
/// Dropping it detaches (the job goes on until the pool shuts down), like dropping a
/// [`ScheduledFuture`](crate::ScheduledFuture).
///
/// # Examples
///
/// The pool shutting down ends it; so does [`cancel`](Self::cancel):
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use wheelpool::cluster::{ClusterJob, PgLockStore};
/// use wheelpool::{ScheduledThreadPool, TaskError};
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
/// let job = ClusterJob::builder("sweep", store).on_error(|_| {}).build().unwrap();
/// let period = Duration::from_secs(3600);
/// let a = job.schedule_at_fixed_rate(&pool.handle(), |_| {}, period).unwrap();
/// let b = job.schedule_at_fixed_rate(&pool.handle(), |_| {}, period).unwrap();
/// assert!(!a.is_done());
/// assert_eq!(a.join_timeout(Duration::from_millis(10)), None);
/// assert!(a.cancel());
/// assert!(!a.cancel()); // already ended
/// assert_eq!(a.join(), Err(TaskError::Cancelled));
///
/// drop(pool);
/// assert_eq!(b.join_timeout(Duration::from_secs(30)), Some(Err(TaskError::Shutdown)));
/// assert!(b.is_done());
/// ```
pub struct ClusterTask {
    shared: Arc<Shared>,
}

impl ClusterTask {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Stops this node's part of the job: no later wake-up runs. A run in progress finishes
    /// (and releases its lease), and so may one whose wake-up a worker had just taken.
    /// Returns true if this call stopped it, false if it had already ended. Other nodes go on
    /// running the job.
    pub fn cancel(&self) -> bool {
        let next = {
            let mut state = self.shared.state.lock();
            if state.end.is_some() {
                return false;
            }
            state.end = Some(Err(TaskError::Cancelled));
            self.shared.ended.notify_all();
            state.next.take()
        };
        // Outside the lock: cancelling drops the wake-up, whose `Drop` takes the lock.
        if let Some(next) = next {
            next.cancel();
        }
        true
    }

    /// True once this node's part of the job has ended (cancel, panic, or pool shutdown).
    pub fn is_done(&self) -> bool {
        self.shared.state.lock().end.is_some()
    }

    /// This job's counters on this node (claims won, found taken, skipped by reason, failed
    /// calls, claim latency).
    pub fn stats(&self) -> ClusterStats {
        self.shared.stats.snapshot()
    }

    /// Blocks until this node's part of the job ends: `Cancelled` after [`cancel`](Self::cancel),
    /// `Panicked` after a run panicked (unless the job survives panics), `Shutdown` when the
    /// pool shut down, `Ok(())` when a cron schedule has no occurrence left. Do not call it
    /// from a task of the same pool.
    pub fn join(&self) -> Result<(), TaskError> {
        let mut state = self.shared.state.lock();
        loop {
            if let Some(end) = &state.end {
                return end.clone();
            }
            self.shared.ended.wait(&mut state);
        }
    }

    /// [`join`](Self::join) for at most `timeout`: `None` if it has not ended by then.
    pub fn join_timeout(&self, timeout: Duration) -> Option<Result<(), TaskError>> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state.lock();
        loop {
            if let Some(end) = &state.end {
                return Some(end.clone());
            }
            if self
                .shared
                .ended
                .wait_until(&mut state, deadline)
                .timed_out()
            {
                return state.end.clone();
            }
        }
    }
}

impl fmt::Debug for ClusterTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterTask")
            .field("job", &self.shared.spec.job)
            .field("node", &self.shared.spec.node)
            .field("done", &self.is_done())
            .finish()
    }
}

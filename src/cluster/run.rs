//! `ClusterRun`: what a job body is told about the run it is called for.

use super::error::ClusterError;
use super::pg::system_time;
use std::fmt;
use std::time::SystemTime;

/// The run a job body is called for: its number (the same on every node), job, node, and
/// when it was planned; and a way to keep its lease alive.
///
/// # Examples
///
/// See [`ClusterJob`](super::ClusterJob) and the `cluster_job` example.
#[derive(Clone, Copy)]
pub struct ClusterRun<'a> {
    pub(super) job: &'a str,
    pub(super) node: &'a str,
    pub(super) run: Won,
    /// Renews this run's lease (one bounded call to the store).
    pub(super) renew: &'a (dyn Fn() -> Result<(), ClusterError> + Sync),
}

/// A claim this node won.
#[derive(Debug, Clone, Copy)]
pub(super) struct Won {
    pub(super) run: i64,
    pub(super) claim: i64,
    pub(super) trigger: bool,
    /// The grid the run was planned on (the store's).
    pub(super) grid: (i64, i64),
    /// Another run was due when it was claimed.
    pub(super) more: bool,
    /// The last run due at the claim.
    pub(super) due: i64,
}

impl ClusterRun<'_> {
    /// The run number, the same on every node: run `k` is planned at `offset + k * period`
    /// after the Unix epoch. For a cron job, the occurrence's instant in nanoseconds since the
    /// Unix epoch ([`planned_at`](Self::planned_at) as a number). A triggered run carries the
    /// number of the last planned run before it (of a cron job that never ran: the instant
    /// it was registered).
    pub fn number(&self) -> u64 {
        u64::try_from(self.run.run).unwrap_or(0)
    }

    /// The job's cluster-wide name.
    pub fn job(&self) -> &str {
        self.job
    }

    /// The label of the node running it ([`ClusterJobBuilder::node`](super::ClusterJobBuilder::node)).
    pub fn node(&self) -> &str {
        self.node
    }

    /// True if this run was asked for with [`PgLockStore::trigger`](super::PgLockStore::trigger)
    /// rather than planned.
    pub fn is_triggered(&self) -> bool {
        self.run.trigger
    }

    /// When this run was planned, on the store's clock, exactly (`offset + k * period`; for a
    /// cron job, the occurrence).
    pub fn planned_at(&self) -> SystemTime {
        let (period, offset) = self.run.grid;
        system_time(i128::from(offset) + i128::from(self.run.run) * i128::from(period))
    }

    /// Extends this run's lease to a full `at_most_for` from now, so a long run keeps the job
    /// (ShedLock's "extend lock"). Blocks for one bounded call to the store.
    ///
    /// # Errors
    ///
    /// [`ClusterError::LeaseExpired`] if the lease had already run out (another node may
    /// have started a later run); [`ClusterError::Unavailable`] or [`ClusterError::Store`] if
    /// the call failed (the lease then ends when it runs out).
    pub fn keep_alive(&self) -> Result<(), ClusterError> {
        (self.renew)()
    }
}

impl fmt::Debug for ClusterRun<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterRun")
            .field("job", &self.job())
            .field("node", &self.node())
            .field("number", &self.run.run)
            .field("triggered", &self.run.trigger)
            .finish()
    }
}

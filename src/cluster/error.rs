//! `ClusterError`: what can go wrong when a job is shared by several nodes.

use crate::ScheduleError;
use std::fmt;
use std::time::Duration;

/// An error of a cluster-wide job or of its lock store.
///
/// Setup errors ([`InvalidUrl`](Self::InvalidUrl), [`InvalidJob`](Self::InvalidJob), and
/// [`Unavailable`](Self::Unavailable) from an eager connect) come back as `Err` from the call that
/// caused them. Errors during runs never panic a worker: the run is skipped (or its lease is left
/// to expire) and the error goes to the job's error handler
/// ([`ClusterJobBuilder::on_error`](super::ClusterJobBuilder::on_error)).
///
/// # Examples
///
/// ```
/// use wheelpool::cluster::{ClusterError, PgLockStore};
///
/// let err = PgLockStore::connect("host=localhost port=notaport").unwrap_err();
/// assert!(matches!(err, ClusterError::InvalidUrl(_)));
/// assert!(err.to_string().contains("connection string"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterError {
    /// The connection string could not be parsed, or asks for something the store cannot do
    /// (TLS). The text says what is wrong.
    InvalidUrl(String),
    /// The job's settings are unusable (empty name, zero period, a lease shorter than a
    /// millisecond, ...). The text says which.
    InvalidJob(String),
    /// The store cannot be reached: a connect failed, the connection was lost mid-call, or the
    /// store is waiting out its reconnect backoff. The run was skipped; the store reconnects by
    /// itself.
    Unavailable {
        /// What the store saw.
        reason: String,
    },
    /// The store answered with an error (a failed statement, a timeout). The run was skipped,
    /// or, if this came from the release, the run happened and its lease will simply expire.
    Store {
        /// The store's message.
        reason: String,
    },
    /// A run took longer than its lease (`at_most_for`): once the lease ran out another node
    /// was free to start the next planned run, so the two may have overlapped.
    LeaseExpired {
        /// The job's cluster-wide name.
        job: String,
        /// The run number (see the module docs).
        run: u64,
        /// The lease that was exceeded.
        lease: Duration,
        /// True if another node has already claimed a later run.
        taken_over: bool,
    },
    /// The pool refused the job's next wake-up (it is shutting down, or full).
    Schedule(ScheduleError),
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidUrl(why) => write!(
                f,
                "invalid PostgreSQL connection string: {why}; pass a URL \
                 (postgresql://user@host:port/db) or key=value pairs (host=.. port=.. user=..)"
            ),
            Self::InvalidJob(why) => write!(f, "invalid cluster job: {why}"),
            Self::Unavailable { reason } => write!(
                f,
                "lock store unavailable, run skipped: {reason}; it reconnects with backoff, \
                 check that the database is up and reachable"
            ),
            Self::Store { reason } => write!(
                f,
                "lock store error: {reason}; check the database log and the store's permissions"
            ),
            Self::LeaseExpired {
                job,
                run,
                lease,
                taken_over,
            } => {
                write!(
                    f,
                    "run {run} of job `{job}` outlived its lease of {lease:?}"
                )?;
                if *taken_over {
                    f.write_str(" and another node has taken over (runs may have overlapped)")?;
                }
                f.write_str("; raise at_most_for above the longest run")
            }
            Self::Schedule(err) => write!(f, "could not plan the job's next run: {err}"),
        }
    }
}

impl std::error::Error for ClusterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Schedule(err) => Some(err),
            _ => None,
        }
    }
}

impl From<ScheduleError> for ClusterError {
    fn from(err: ScheduleError) -> Self {
        Self::Schedule(err)
    }
}

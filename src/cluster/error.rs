//! `ClusterError`: what can go wrong when a job is shared by several nodes, and `StoreError`,
//! the cause behind a failed call to the store.

use crate::ScheduleError;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// An error of a cluster-wide job or of its lock store, or a planned run that did not run.
///
/// Setup errors ([`InvalidUrl`](Self::InvalidUrl), [`InvalidJob`](Self::InvalidJob),
/// [`ConfigMismatch`](Self::ConfigMismatch) and [`Unavailable`](Self::Unavailable) from an eager
/// connect) come back as `Err` from the call that caused them. Everything that happens during
/// runs goes to the job's handler
/// ([`ClusterJobBuilder::on_error`](super::ClusterJobBuilder::on_error)) and never panics a
/// worker.
///
/// # Examples
///
/// ```
/// use wheelpool::cluster::{ClusterError, PgLockStore};
///
/// let err = PgLockStore::connect("host=localhost port=notaport").unwrap_err();
/// assert!(matches!(err, ClusterError::InvalidUrl(_)));
/// assert!(err.to_string().starts_with("invalid connection string"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterError {
    /// The connection string could not be parsed, names no host, or asks for something the
    /// store cannot do (TLS). The text says what is wrong.
    InvalidUrl(String),
    /// The job's settings are unusable (a name with a NUL byte, a zero period, a lease or
    /// period the store cannot represent, ...). The text says which.
    InvalidJob(String),
    /// The store could not be reached within its bounds: a connect failed or timed out, the
    /// connection was lost, a call took longer than the call timeout, or the store is waiting
    /// out its reconnect backoff. The call's effect is unknown (see the module docs for how a
    /// claim stays exactly-once anyway); the node retries.
    Unavailable(StoreError),
    /// The database answered a call with an error (its SQLSTATE and message are in the
    /// [`StoreError`], which is also the [`source`](std::error::Error::source)).
    Store(StoreError),
    /// This node's settings for the job differ from the ones the store holds (another
    /// replica runs it with another period or offset, or another cron schedule). The node
    /// does not run the job until they agree again; build it with
    /// [`take_over`](super::ClusterJobBuilder::take_over) to move the job to the new settings.
    /// A cron schedule shows here as a zero period and offset; the store's is in
    /// [`JobInfo::cron`](super::JobInfo::cron).
    ConfigMismatch {
        /// The job's cluster-wide name.
        job: String,
        /// The period and offset the store holds (zero: a cron schedule).
        stored: (Duration, Duration),
        /// The period and offset this node asked for (zero: a cron schedule).
        ours: (Duration, Duration),
    },
    /// A planned run that no node will run, and why. Reported once, by the node that found
    /// it (see the module docs).
    RunSkipped {
        /// The job's cluster-wide name.
        job: String,
        /// The run number.
        run: u64,
        /// When it was planned, by the store's clock.
        planned_at: SystemTime,
        /// Why it is not run.
        reason: SkipReason,
    },
    /// A run's lease (`at_most_for`) ran out before the run was released: the run took
    /// longer than the lease and it was not kept alive, or its release came late (a slow or
    /// unreachable store). Once it ran out another node was free to start the next planned
    /// run, so the two may have overlapped.
    LeaseExpired {
        /// The job's cluster-wide name.
        job: String,
        /// The run number.
        run: u64,
        /// The lease that was exceeded.
        lease: Duration,
        /// True if another node has already claimed a later run.
        taken_over: bool,
    },
    /// The pool refused the job's next wake-up or its run (it is shutting down, or full).
    Schedule(ScheduleError),
}

/// Why a planned run of a cluster job is not run anywhere.
///
/// # Examples
///
/// ```
/// use wheelpool::cluster::SkipReason;
///
/// assert_eq!(SkipReason::Paused.to_string(), "the job is paused");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SkipReason {
    /// No node claimed it within the misfire grace after its planned time (every node was
    /// down, cut off from the store, or held up by a longer run's lease).
    Misfired,
    /// The job was paused cluster-wide when the run came.
    Paused,
    /// The node that claimed it could not start it: its pool was shutting down.
    Shutdown,
    /// The node that claimed it never confirmed it (it died, or lost the store or the answer
    /// to its claim, until its lease ran out): it may not have run. Reported by the node whose
    /// claim replaced it. `triggered`: it was a triggered run (its number is then that of the
    /// last planned run before it).
    Unconfirmed {
        /// It was a triggered run.
        triggered: bool,
    },
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Misfired => "not claimed within the misfire grace",
            Self::Paused => "the job is paused",
            Self::Shutdown => "the pool that claimed it shut down",
            Self::Unconfirmed { triggered: false } => {
                "its claimer never confirmed it, so it may not have run"
            }
            Self::Unconfirmed { triggered: true } => {
                "a triggered run whose claimer never confirmed it, so it may not have run"
            }
        })
    }
}

/// The cause of a failed call to the lock store: which call, what kind of failure, and the
/// database's own error (SQLSTATE and message) when it gave one.
///
/// # Examples
///
/// ```
/// use std::error::Error;
/// use wheelpool::cluster::{ClusterError, PgLockStore, StoreErrorKind};
///
/// // Nothing listens on port 1: the connect is refused.
/// let err = PgLockStore::connect("host=127.0.0.1 port=1").unwrap_err();
/// let ClusterError::Unavailable(cause) = &err else { panic!("{err}") };
/// assert_eq!(cause.kind(), StoreErrorKind::Connect);
/// assert_eq!(cause.call(), "connect");
/// assert_eq!(cause.sqlstate(), None);
/// assert!(err.source().is_some());
/// ```
#[derive(Clone)]
pub struct StoreError {
    call: &'static str,
    kind: StoreErrorKind,
    sqlstate: Option<String>,
    message: String,
    source: Option<Arc<tokio_postgres::Error>>,
}

/// What kind of failure a [`StoreError`] is.
///
/// # Examples
///
/// ```
/// use wheelpool::cluster::StoreErrorKind;
///
/// assert_ne!(StoreErrorKind::Timeout, StoreErrorKind::Database);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// Opening a connection failed (refused, unreachable, login rejected).
    Connect,
    /// The connection broke during the call (closed by the server, an administrator, a
    /// proxy, or the network).
    ConnectionLost,
    /// The call did not finish within its bound on the client side (a silent or frozen
    /// server); the connection it used is dropped.
    Timeout,
    /// No connect was tried: the store is waiting out its backoff after failed connects.
    Backoff,
    /// The database answered with an error (see [`StoreError::sqlstate`]).
    Database,
}

impl StoreError {
    /// A call that did not finish within `after`.
    pub(super) fn timeout(call: &'static str, after: Duration) -> Self {
        Self {
            call,
            kind: StoreErrorKind::Timeout,
            sqlstate: None,
            message: format!("timed out after {after:?}"),
            source: None,
        }
    }

    pub(super) fn backoff(call: &'static str, wait: Duration, last: &str) -> Self {
        Self {
            call,
            kind: StoreErrorKind::Backoff,
            sqlstate: None,
            message: format!("next connect in {wait:?} (last: {last})"),
            source: None,
        }
    }

    /// A batch whose answer had no row for one of its requests (a broken invariant of the
    /// statement, reported rather than trusted).
    pub(super) fn unanswered(call: &'static str) -> Self {
        Self {
            call,
            kind: StoreErrorKind::Database,
            sqlstate: None,
            message: "no answer for this job in the batch".to_owned(),
            source: None,
        }
    }

    /// A claim that found the job's row locked by another session for a while.
    pub(super) fn busy(call: &'static str) -> Self {
        Self {
            call,
            kind: StoreErrorKind::Database,
            sqlstate: Some("55P03".to_owned()),
            message: "the job's row is locked by another session".to_owned(),
            source: None,
        }
    }

    /// Classifies a client error: a server error keeps its SQLSTATE; an error without one is
    /// a broken connection (or, when connecting, a failed connect).
    pub(super) fn from_pg(
        call: &'static str,
        connecting: bool,
        err: tokio_postgres::Error,
    ) -> Self {
        let (kind, sqlstate, message) = match err.as_db_error() {
            Some(db) => {
                let code = db.code().code();
                // 57P01-57P03 (terminated, shutting down, cannot connect now) and class 08
                // end the session; every other server error leaves it usable.
                let kind = if code.starts_with("08") || code.starts_with("57P") {
                    if connecting {
                        StoreErrorKind::Connect
                    } else {
                        StoreErrorKind::ConnectionLost
                    }
                } else {
                    StoreErrorKind::Database
                };
                (kind, Some(code.to_owned()), db.message().to_owned())
            }
            None if connecting => (StoreErrorKind::Connect, None, err.to_string()),
            None => (StoreErrorKind::ConnectionLost, None, err.to_string()),
        };
        let message = match std::error::Error::source(&err) {
            Some(cause) if err.as_db_error().is_none() => format!("{message}: {cause}"),
            _ => message,
        };
        Self {
            call,
            kind,
            sqlstate,
            message,
            source: Some(Arc::new(err)),
        }
    }

    /// Which call failed: `connect`, `register`, `claim`, `release`, `renew`, or an admin call
    /// (`jobs`, `pause`, `resume`, `trigger`).
    ///
    /// # Examples
    ///
    /// See [`StoreError`].
    pub fn call(&self) -> &'static str {
        self.call
    }

    /// What kind of failure it is.
    ///
    /// # Examples
    ///
    /// See [`StoreError`].
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The database's SQLSTATE (`55P03` for a lock timeout, `57014` for a statement timeout,
    /// `57P01` for a terminated backend, ...), if the database answered with an error.
    ///
    /// # Examples
    ///
    /// See [`StoreError`].
    pub fn sqlstate(&self) -> Option<&str> {
        self.sqlstate.as_deref()
    }

    /// True if the session the call used is gone (the next call opens a new one).
    pub(super) fn session_lost(&self) -> bool {
        !matches!(self.kind, StoreErrorKind::Database)
    }

    /// The error as a [`ClusterError`]: a database answer is `Store`, anything else
    /// `Unavailable`.
    pub(super) fn into_cluster(self) -> ClusterError {
        match self.kind {
            StoreErrorKind::Database => ClusterError::Store(self),
            _ => ClusterError::Unavailable(self),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.kind, &self.sqlstate) {
            (StoreErrorKind::Timeout, _) => write!(f, "{} {}", self.call, self.message),
            (_, Some(code)) => write!(
                f,
                "{} failed: {} (SQLSTATE {code})",
                self.call, self.message
            ),
            (StoreErrorKind::Connect, None) => write!(f, "connect failed: {}", self.message),
            (StoreErrorKind::Backoff, None) => {
                write!(f, "{} not sent: {}", self.call, self.message)
            }
            (_, None) => write!(f, "{} lost its connection: {}", self.call, self.message),
        }
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreError")
            .field("call", &self.call)
            .field("kind", &self.kind)
            .field("sqlstate", &self.sqlstate)
            .field("message", &self.message)
            .finish()
    }
}

/// Two errors are equal when they say the same thing (the underlying client error is not
/// compared).
impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        (self.call, self.kind, &self.sqlstate, &self.message)
            == (other.call, other.kind, &other.sqlstate, &other.message)
    }
}

impl Eq for StoreError {}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidUrl(why) => write!(f, "invalid connection string: {why}"),
            Self::InvalidJob(why) => write!(f, "invalid cluster job: {why}"),
            Self::Unavailable(err) => write!(f, "lock store unavailable: {err}"),
            Self::Store(err) => write!(f, "lock store error: {err}"),
            Self::ConfigMismatch { job, stored, ours } => {
                let settings = |(period, offset): &(Duration, Duration)| match period.is_zero() {
                    true => "a cron schedule".to_owned(),
                    false => format!("period {period:?} offset {offset:?}"),
                };
                let (stored, ours) = (settings(stored), settings(ours));
                if stored == ours {
                    // Two cron schedules (the store's is in the job table).
                    write!(
                        f,
                        "job `{job}` is stored with another cron schedule: not run here"
                    )
                } else {
                    write!(
                        f,
                        "job `{job}` is stored with {stored}, this node has {ours}: not run here"
                    )
                }
            }
            Self::RunSkipped {
                job, run, reason, ..
            } => write!(f, "run {run} of job `{job}` skipped: {reason}"),
            Self::LeaseExpired {
                job,
                run,
                lease,
                taken_over,
            } => {
                write!(
                    f,
                    "the lease ({lease:?}) of run {run} of job `{job}` ran out before the run \
                     was released"
                )?;
                if *taken_over {
                    f.write_str(" and another node has taken over")?;
                }
                Ok(())
            }
            Self::Schedule(err) => write!(f, "could not plan the job's next run: {err}"),
        }
    }
}

impl std::error::Error for ClusterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Schedule(err) => Some(err),
            Self::Unavailable(err) | Self::Store(err) => Some(err),
            _ => None,
        }
    }
}

impl From<ScheduleError> for ClusterError {
    fn from(err: ScheduleError) -> Self {
        Self::Schedule(err)
    }
}

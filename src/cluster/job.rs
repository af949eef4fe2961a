//! `ClusterJob` and its builder: a job's cluster-wide name, lease and error handler.

use super::checks::{
    check_grace, check_lease, check_name, default_grace, random_tag, MAX_SPAN, MIN_STEP,
};
use super::handle::ClusterTask;
use super::pg::PgLockStore;
use super::run::ClusterRun;
use super::schedule::Schedule;
use super::task::{ErrorHandler, Shared, Spec};
use super::ClusterError;
use crate::sync::Arc;
use crate::Handle;
use std::fmt;
use std::time::Duration;

/// A job that runs once per planned run across every node that schedules it under the same
/// name and store. Build it with [`ClusterJob::builder`], then schedule it on each node's pool
/// with [`schedule_at_fixed_rate`](Self::schedule_at_fixed_rate). The rule that decides which
/// node runs what is in the [module docs](super).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use wheelpool::cluster::{ClusterError, ClusterJob, PgLockStore};
///
/// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
/// let job = ClusterJob::builder("nightly-cleanup", store)
///     .at_most_for(Duration::from_secs(600))
///     .node("replica-1")
///     .build()
///     .unwrap();
/// assert_eq!(job.name(), "nightly-cleanup");
///
/// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
/// for bad in ["", "nul\0inside"] {
///     let err = ClusterJob::builder(bad, store.clone()).build();
///     assert!(matches!(err, Err(ClusterError::InvalidJob(_))));
/// }
/// let err = ClusterJob::builder("ok", store).at_most_for(Duration::MAX).build();
/// assert!(matches!(err, Err(ClusterError::InvalidJob(_))));
/// ```
pub struct ClusterJob {
    name: String,
    node: String,
    store: Arc<PgLockStore>,
    lease: Option<Duration>,
    offset: Duration,
    grace: Option<Duration>,
    take_over: bool,
    keep_alive: bool,
    survive_panics: bool,
    on_error: Option<ErrorHandler>,
}

/// Settings of a [`ClusterJob`]; see [`ClusterJob::builder`].
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use wheelpool::cluster::{ClusterJob, PgLockStore};
///
/// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
/// let builder = ClusterJob::builder("report", store).offset(Duration::from_secs(3 * 3600));
/// assert!(format!("{builder:?}").contains("report"));
/// ```
#[must_use]
pub struct ClusterJobBuilder {
    job: ClusterJob,
}

impl ClusterJob {
    /// Starts building the job `name` (its key in `store`: every node must use the same name,
    /// period and offset, or cron schedule, for one job).
    ///
    /// Defaults: the lease (`at_most_for`) is the period (for a cron schedule, the time
    /// between its next two occurrences); the node label is `pid<process id>`;
    /// the grid starts on the Unix epoch (offset zero); a panicking run stops this node's part
    /// of the job; errors go to the pool's panic handler (see
    /// [`on_error`](ClusterJobBuilder::on_error)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use wheelpool::cluster::{ClusterJob, PgLockStore};
    ///
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
    /// let job = ClusterJob::builder("sweep", store).build().unwrap();
    /// assert!(job.node().starts_with("pid"));
    /// ```
    pub fn builder(name: impl Into<String>, store: Arc<PgLockStore>) -> ClusterJobBuilder {
        ClusterJobBuilder {
            job: ClusterJob {
                name: name.into(),
                node: format!("pid{}", std::process::id()),
                store,
                lease: None,
                offset: Duration::ZERO,
                grace: None,
                take_over: false,
                keep_alive: false,
                survive_panics: false,
                on_error: None,
            },
        }
    }

    /// The job's cluster-wide name.
    ///
    /// # Examples
    ///
    /// See [`ClusterJob`] (it asserts on the name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This node's label (shown to the job body and stored with the lease).
    ///
    /// # Examples
    ///
    /// See [`ClusterJob::builder`].
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Schedules this node's part of the job on the pool behind `handle`: run `k` is planned
    /// at `offset + k * period` on the store's clock (counted from the Unix epoch), and of all
    /// the nodes that schedule the job, the first to claim run `k` runs `f` for it; no other
    /// node runs run `k`. See the [module docs](super) for the whole rule.
    ///
    /// This call registers the job with the store (one bounded call: it blocks for at most
    /// the store's call timeout) and plans the first claim at once. Claims, releases and lease
    /// renewals are sent by the store's own thread; `f` runs on a pool worker.
    ///
    /// # Errors
    ///
    /// [`ClusterError::InvalidJob`] for a period outside 1 ms ..= 100 years or an offset not
    /// under the period; [`ClusterError::ConfigMismatch`] if the store holds the job with
    /// another period or offset (and the job was not built to
    /// [`take_over`](ClusterJobBuilder::take_over)); [`ClusterError::Store`] if the store
    /// answered the registration with an error; [`ClusterError::Schedule`] if the pool
    /// refuses the first wake-up (it is shut down, or full). A store that cannot be reached
    /// is no error here: the node registers when it can, and reports each failed try.
    ///
    /// # Examples
    ///
    /// Without a database every claim fails: runs are skipped and each error goes to the
    /// handler.
    ///
    /// ```
    /// use std::sync::{mpsc, Arc};
    /// use std::time::Duration;
    /// use wheelpool::cluster::{ClusterError, ClusterJob, PgLockStore};
    /// use wheelpool::{ScheduledThreadPool, TaskError};
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1 connect_timeout=1").unwrap());
    /// let (tx, rx) = mpsc::channel();
    /// let job = ClusterJob::builder("sweep", store)
    ///     .on_error(move |err| { let _ = tx.send(err); })
    ///     .build()
    ///     .unwrap();
    /// let task = job
    ///     .schedule_at_fixed_rate(&pool.handle(), |run| println!("run {}", run.number()), Duration::from_millis(10))
    ///     .unwrap();
    /// let err = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    /// assert!(matches!(err, ClusterError::Unavailable { .. }));
    /// assert!(task.cancel());
    /// assert_eq!(task.join(), Err(TaskError::Cancelled));
    /// ```
    pub fn schedule_at_fixed_rate<F>(
        &self,
        handle: &Handle,
        f: F,
        period: Duration,
    ) -> Result<ClusterTask, ClusterError>
    where
        F: FnMut(&ClusterRun<'_>) + Send + 'static,
    {
        if !(MIN_STEP..=MAX_SPAN).contains(&period) {
            return Err(ClusterError::InvalidJob(format!(
                "period {period:?} is not within 1 ms ..= 100 years"
            )));
        }
        if self.offset >= period {
            return Err(ClusterError::InvalidJob(format!(
                "offset {:?} is not under the period {period:?}",
                self.offset
            )));
        }
        let schedule = Schedule::Every {
            period,
            offset: self.offset,
        };
        self.start(schedule, Box::new(f), handle)
    }

    /// Schedules this node's part of the job by a calendar (features `postgres` and `cron`):
    /// each occurrence of `cron` (an expression in a time zone, see [`crate::cron`]) on the
    /// store's clock is run once, by the first node to claim it; no other node runs it. An
    /// occurrence is named by its instant ([`ClusterRun::planned_at`]; its
    /// [`number`](ClusterRun::number) is that instant in nanoseconds since the Unix epoch), so
    /// no instant runs twice, even across nodes with different expressions or a takeover.
    /// Daylight saving follows [`Handle::schedule_cron`](crate::Handle::schedule_cron)'s rule:
    /// a skipped time runs after the gap (or, with
    /// [`SkippedTime::Skip`](crate::cron::SkippedTime::Skip), not at all), a repeated time
    /// once. Everything else is as for [`schedule_at_fixed_rate`](Self::schedule_at_fixed_rate)
    /// and the [module docs](super): the misfire grace runs from the next occurrence, the
    /// lease and the grace default to the time between the next two occurrences (grace: three
    /// of them, 1 s to 60 s), and nodes must have the same expression and zone (compared as
    /// text, fields separated by single spaces), or be built to
    /// [`take_over`](ClusterJobBuilder::take_over). The first occurrence that may run is the
    /// first after the job was first registered with the store.
    ///
    /// The zone's rules come from each node's time zone database: nodes whose databases
    /// disagree on a zone (one updated for a rule change, one not) name the same wall-clock
    /// time by different instants, and may both run it. Give every node the same one (the
    /// same system `tzdata`, or the same build: wheelpool bundles one for machines without).
    ///
    /// # Errors
    ///
    /// As [`schedule_at_fixed_rate`](Self::schedule_at_fixed_rate);
    /// [`ClusterError::InvalidJob`] also for an [`offset`](ClusterJobBuilder::offset) (which
    /// a calendar has no use for) or an expression with no occurrence left.
    ///
    /// # Examples
    ///
    /// Without a database every claim fails, and each error goes to the handler.
    ///
    /// ```
    /// use std::sync::{mpsc, Arc};
    /// use std::time::Duration;
    /// use wheelpool::cluster::{ClusterError, ClusterJob, PgLockStore};
    /// use wheelpool::cron::Cron;
    /// use wheelpool::{ScheduledThreadPool, TaskError};
    ///
    /// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1 connect_timeout=1").unwrap());
    /// let (tx, rx) = mpsc::channel();
    /// let job = ClusterJob::builder("nightly-billing", store)
    ///     .on_error(move |err| { let _ = tx.send(err); })
    ///     .build()
    ///     .unwrap();
    /// let nightly = Cron::parse("0 3 * * *", "Europe/Berlin").unwrap();
    /// let task = job
    ///     .schedule_cron(&pool.handle(), |run| println!("billing for {:?}", run.planned_at()), &nightly)
    ///     .unwrap();
    /// let err = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    /// assert!(matches!(err, ClusterError::Unavailable { .. }));
    /// assert!(task.cancel());
    /// assert_eq!(task.join(), Err(TaskError::Cancelled));
    /// ```
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub fn schedule_cron<F>(
        &self,
        handle: &Handle,
        f: F,
        cron: &crate::cron::Cron,
    ) -> Result<ClusterTask, ClusterError>
    where
        F: FnMut(&ClusterRun<'_>) + Send + 'static,
    {
        if !self.offset.is_zero() {
            return Err(ClusterError::InvalidJob(format!(
                "offset {:?} does not apply to a cron schedule",
                self.offset
            )));
        }
        let occurrences = super::calendar::Occurrences::new(cron)?;
        self.start(Schedule::Cron(Box::new(occurrences)), Box::new(f), handle)
    }

    fn start(
        &self,
        schedule: Schedule,
        body: super::task::Body,
        handle: &Handle,
    ) -> Result<ClusterTask, ClusterError> {
        let spec = self.spec(schedule)?;
        let shared = Shared::start(
            spec,
            self.store.core().clone(),
            handle,
            self.on_error.clone(),
            body,
        )?;
        Ok(ClusterTask::new(shared))
    }

    fn spec(&self, schedule: Schedule) -> Result<Spec, ClusterError> {
        let step = schedule.step().min(MAX_SPAN);
        let lease = self.lease.unwrap_or(step);
        let grace = self.grace.unwrap_or_else(|| default_grace(step));
        check_lease(lease)?;
        check_grace(grace)?;
        Ok(Spec {
            job: self.name.as_str().into(),
            node: self.node.as_str().into(),
            owner: format!("{}#{}", self.node, random_tag()).into(),
            schedule,
            lease,
            grace,
            take_over: self.take_over,
            keep_alive: self.keep_alive,
            survive_panics: self.survive_panics,
        })
    }
}

impl ClusterJobBuilder {
    /// The lease: the longest a node may hold the job. A node that dies mid-run blocks the
    /// job for at most this long, then another node may run it. A run that takes longer is
    /// reported as [`ClusterError::LeaseExpired`] (and may overlap the next run on another
    /// node). Pick it above the longest run. Default: the period.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use wheelpool::cluster::{ClusterJob, PgLockStore};
    ///
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
    /// let job = ClusterJob::builder("report", store).at_most_for(Duration::from_secs(60)).build();
    /// assert!(job.is_ok());
    /// ```
    pub fn at_most_for(mut self, lease: Duration) -> Self {
        self.job.lease = Some(lease);
        self
    }

    /// This node's label, handed to the job body ([`ClusterRun::node`]) and stored with the
    /// lease (`locked_by`, with a random suffix). Default: `pid<process id>`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use wheelpool::cluster::{ClusterJob, PgLockStore};
    ///
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
    /// let job = ClusterJob::builder("report", store).node("eu-west-2a").build().unwrap();
    /// assert_eq!(job.node(), "eu-west-2a");
    /// ```
    pub fn node(mut self, label: impl Into<String>) -> Self {
        self.job.node = label.into();
        self
    }

    /// Shifts the grid: run `k` is planned at `offset + k * period` after the Unix epoch on
    /// the store's clock. A daily job at 03:00 UTC: period 24 h, offset 3 h. Must be under the
    /// period. A cron schedule takes none (its expression says when).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use wheelpool::cluster::{ClusterJob, PgLockStore};
    ///
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
    /// let job = ClusterJob::builder("report", store).offset(Duration::from_secs(3 * 3600)).build();
    /// assert!(job.is_ok());
    /// ```
    pub fn offset(mut self, offset: Duration) -> Self {
        self.job.offset = offset;
        self
    }

    /// How late a run may still be claimed, past its own period: run `k` may be claimed until
    /// `grace` after run `k + 1` is planned. A node that wakes (or reaches the store) late
    /// claims the oldest such run, and runs them once each, in order; a run older than that
    /// is skipped and reported ([`ClusterError::RunSkipped`] with
    /// [`SkipReason::Misfired`](super::SkipReason::Misfired)). Quartz calls it the misfire
    /// threshold. Default: three periods, at least 1 s, at most 60 s. Zero: a run is claimable
    /// only within its own period (a node that comes late runs the current run only). For a
    /// cron schedule, an occurrence is claimable until `grace` after the next occurrence, and
    /// the default is three times the time between its next two occurrences (1 s to 60 s).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use wheelpool::cluster::{ClusterJob, PgLockStore};
    ///
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
    /// let job = ClusterJob::builder("report", store).misfire_grace(Duration::from_secs(600)).build();
    /// assert!(job.is_ok());
    /// ```
    pub fn misfire_grace(mut self, grace: Duration) -> Self {
        self.job.grace = Some(grace);
        self
    }

    /// Move the job to this node's period and offset (or cron schedule) if the store holds
    /// others (a rolling deploy that changes the schedule). The new grid starts after the end
    /// of the old grid's last claimed period, so no stretch of time is run twice (a new cron
    /// schedule: its first occurrence after the last instant claimed); nodes still on the old
    /// settings stop running it and report [`ClusterError::ConfigMismatch`]. Without it
    /// (the default) a node whose settings differ does not run the job.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use wheelpool::cluster::{ClusterJob, PgLockStore};
    ///
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
    /// assert!(ClusterJob::builder("report", store).take_over(true).build().is_ok());
    /// ```
    pub fn take_over(mut self, yes: bool) -> Self {
        self.job.take_over = yes;
        self
    }

    /// Keep the lease alive while a run lasts: every third of `at_most_for` the store's own
    /// thread extends it to a full `at_most_for` again (ShedLock's "extend lock"), so the
    /// lease can be short (fast failover after a node dies) and runs long. A renewal that
    /// fails is reported. Without it, a run can still call
    /// [`ClusterRun::keep_alive`](super::ClusterRun::keep_alive) itself. Default: off.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use wheelpool::cluster::{ClusterJob, PgLockStore};
    ///
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
    /// let job = ClusterJob::builder("billing", store)
    ///     .at_most_for(Duration::from_secs(10))
    ///     .keep_alive(true)
    ///     .build();
    /// assert!(job.is_ok());
    /// ```
    pub fn keep_alive(mut self, yes: bool) -> Self {
        self.job.keep_alive = yes;
        self
    }

    /// Keep this node's part of the job going after a run panics (the panic still goes to
    /// the pool's panic handler). Default: a panic ends it, like a periodic task of the pool.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use wheelpool::cluster::{ClusterJob, PgLockStore};
    ///
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
    /// assert!(ClusterJob::builder("report", store).survive_panics(true).build().is_ok());
    /// ```
    pub fn survive_panics(mut self, yes: bool) -> Self {
        self.job.survive_panics = yes;
        self
    }

    /// Where errors during runs go: the store unreachable or failing (the run is skipped), a
    /// run that outlived its lease, the pool refusing a wake-up. The handler runs on a pool
    /// worker; a panic in it is caught and dropped.
    ///
    /// **Without a handler**, each error is raised as the panic of a separate one-shot task on
    /// the same pool, with a `String` payload that names the job and node: the pool's panic
    /// handler sees it, `stats().panicked` counts it, and Rust's panic hook prints it (to
    /// stderr by default). The job itself goes on. If the pool refuses that task, the message
    /// is printed to stderr.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use wheelpool::cluster::{ClusterJob, PgLockStore};
    ///
    /// let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
    /// let job = ClusterJob::builder("report", store)
    ///     .on_error(|err| eprintln!("report: {err}"))
    ///     .build();
    /// assert!(job.is_ok());
    /// ```
    pub fn on_error<H>(mut self, handler: H) -> Self
    where
        H: Fn(ClusterError) + Send + Sync + 'static,
    {
        self.job.on_error = Some(Arc::new(handler));
        self
    }

    /// Checks the name and gives the job.
    ///
    /// # Errors
    ///
    /// [`ClusterError::InvalidJob`] for an empty name or one over 200 bytes. (Period, lease
    /// and offset are checked when it is scheduled.)
    ///
    /// # Examples
    ///
    /// See [`ClusterJob`].
    pub fn build(self) -> Result<ClusterJob, ClusterError> {
        check_name("name", &self.job.name)?;
        check_name("node label", &self.job.node)?;
        // Checked here when set, and again when scheduled (where the period gives defaults).
        self.job.lease.map_or(Ok(()), check_lease)?;
        self.job.grace.map_or(Ok(()), check_grace)?;
        Ok(self.job)
    }
}

impl fmt::Debug for ClusterJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterJob")
            .field("name", &self.name)
            .field("node", &self.node)
            .field("store", &self.store)
            .field("lease", &self.lease)
            .field("offset", &self.offset)
            .field("grace", &self.grace)
            .field("take_over", &self.take_over)
            .field("keep_alive", &self.keep_alive)
            .field("survive_panics", &self.survive_panics)
            .field("on_error", &self.on_error.is_some())
            .finish()
    }
}

impl fmt::Debug for ClusterJobBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClusterJobBuilder").field(&self.job).finish()
    }
}

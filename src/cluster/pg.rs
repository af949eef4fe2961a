//! `PgLockStore`: the lock store on PostgreSQL, its settings, and the admin calls (the job
//! table, pause, resume, trigger). The calls themselves, and their bounds, are in
//! [`calls`](super::calls).

use super::calls::StoreCore;
use super::sql;
use super::stats::ClusterStats;
use super::ClusterError;
use crate::sync::Arc;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};
use tokio_postgres::config::SslMode;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Config, Row};

/// Default bound on a connect: TCP, then the login handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default bound on every other call.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Default number of connections.
const CONNECTIONS: usize = 4;

/// A lock store on PostgreSQL (14 or later; tested on 15): one table, `wheelpool_jobs`
/// (created if missing), one row per job, every time from the server's clock.
///
/// **Bounds, on this side of the wire**: a connect (TCP and login) gives up after the connect
/// timeout (5 s), every other call after the call timeout (5 s), whatever the server or the
/// network do; a frozen or silent server yields [`ClusterError::Unavailable`] with a
/// [`StoreErrorKind::Timeout`](super::StoreErrorKind::Timeout) in that time. **Several connections** (4): a call takes the
/// least busy one, so one stalled call does not hold up the node's other jobs. **Connection
/// loss** is repaired: a dead connection is replaced and the call retried once at once;
/// failed connects back off (50 ms doubling to 2 s).
///
/// Claims of all the node's jobs go to the database in batches (one statement for every
/// claim waiting), so a node with a thousand jobs due at once makes a few round trips, not a
/// thousand. The claim and release statements are prepared once per connection (named
/// prepared statements): behind a pooler in transaction mode, that needs PgBouncer 1.21 or
/// later with `max_prepared_statements` set (or session mode).
///
/// **TLS is not supported** (the client connects without it): use it on a trusted network or
/// through a local proxy; a connection string with `sslmode=require` is refused.
///
/// Calls that block (the admin calls, [`connect`](Self::connect)) wait on a channel for the
/// store's own runtime thread; they may be made from any thread, but inside an async task
/// they block that task's thread for up to the call timeout.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheelpool::cluster::{ClusterError, PgLockStore};
///
/// // Setup errors are typed; a lazy store only parses here and connects on first use.
/// assert!(matches!(PgLockStore::connect_lazy("port=65536"), Err(ClusterError::InvalidUrl(_))));
/// assert!(matches!(PgLockStore::connect_lazy("user=app dbname=app"), Err(ClusterError::InvalidUrl(_))));
/// let store = PgLockStore::builder("postgresql://app@db.internal:5432/app")
///     .connections(2)
///     .call_timeout(Duration::from_secs(2))
///     .connect_lazy()
///     .unwrap();
/// assert!(format!("{store:?}").contains("db.internal"));
/// ```
pub struct PgLockStore {
    core: Arc<StoreCore>,
}

/// Settings of a [`PgLockStore`]; see [`PgLockStore::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use wheelpool::cluster::PgLockStore;
///
/// let builder = PgLockStore::builder("host=db user=app").connect_timeout(Duration::from_secs(1));
/// assert!(format!("{builder:?}").contains("connect_timeout"));
/// ```
#[must_use]
#[derive(Debug, Clone)]
pub struct PgLockStoreBuilder {
    url: String,
    connections: usize,
    connect_timeout: Duration,
    call_timeout: Duration,
}

/// One job as the store holds it, read by [`PgLockStore::jobs`]; times are the database's.
///
/// # Examples
///
/// See [`PgLockStore::jobs`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobInfo {
    /// The job's cluster-wide name.
    pub name: String,
    /// Its period and offset (run `k` is planned at `offset + k * period` after the epoch);
    /// both zero for a cron job.
    pub period: Duration,
    /// See `period`.
    pub offset: Duration,
    /// A cron job's schedule, as nodes compare it: the expression and the zone
    /// (`0 3 * * * (Europe/Berlin)`); `None` for a periodic job.
    pub cron: Option<String>,
    /// The last run number claimed (or given up), if any run was claimed yet; for a cron job,
    /// the last occurrence's instant in nanoseconds since the Unix epoch.
    pub last_run: Option<u64>,
    /// The node label that made the last claim, and when (`None` before the first claim).
    pub last_claim: Option<(String, SystemTime)>,
    /// When the current lease ends, if one is held.
    pub lease_until: Option<SystemTime>,
    /// Paused cluster-wide.
    pub paused: bool,
    /// Runs asked for with [`PgLockStore::trigger`] and not claimed yet.
    pub pending_triggers: u64,
    /// When the next planned run comes. For a cron job, by this node's reading of the
    /// expression (feature `cron`); `read_at` if this node cannot read it.
    pub next_run: SystemTime,
    /// The database's clock when it was read.
    pub read_at: SystemTime,
}

impl PgLockStore {
    /// Settings for a store at `url`, a URL (`postgresql://user:pass@host:5432/db`) or
    /// key=value pairs (`host=localhost port=5432 user=app dbname=app`).
    ///
    /// # Examples
    ///
    /// See [`PgLockStore`].
    pub fn builder(url: impl Into<String>) -> PgLockStoreBuilder {
        PgLockStoreBuilder {
            url: url.into(),
            connections: CONNECTIONS,
            connect_timeout: CONNECT_TIMEOUT,
            call_timeout: CALL_TIMEOUT,
        }
    }

    /// Connects with the default settings (see [`PgLockStoreBuilder::connect`]).
    ///
    /// # Errors
    ///
    /// As [`PgLockStoreBuilder::connect`].
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cluster::{ClusterError, PgLockStore};
    ///
    /// let err = PgLockStore::connect("postgresql://app@db:5432/app?sslmode=require").unwrap_err();
    /// assert!(matches!(err, ClusterError::InvalidUrl(_)));
    /// ```
    pub fn connect(url: &str) -> Result<Self, ClusterError> {
        Self::builder(url).connect()
    }

    /// Parses `url` with the default settings, connecting on first use (see
    /// [`PgLockStoreBuilder::connect_lazy`]).
    ///
    /// # Errors
    ///
    /// [`ClusterError::InvalidUrl`].
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cluster::PgLockStore;
    ///
    /// assert!(PgLockStore::connect_lazy("host=127.0.0.1 port=1 user=nobody").is_ok());
    /// ```
    pub fn connect_lazy(url: &str) -> Result<Self, ClusterError> {
        Self::builder(url).connect_lazy()
    }

    /// Every job in the store, by name, with its last claim, lease and next planned run by the
    /// database's clock: what an operator looks at first.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Unavailable`] or [`ClusterError::Store`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use wheelpool::cluster::PgLockStore;
    ///
    /// # fn main() -> Result<(), wheelpool::cluster::ClusterError> {
    /// let store = PgLockStore::connect("postgresql://app@db:5432/app")?;
    /// for job in store.jobs()? {
    ///     println!("{} every {:?}, last run {:?}, next at {:?}", job.name, job.period, job.last_run, job.next_run);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn jobs(&self) -> Result<Vec<JobInfo>, ClusterError> {
        let core = self.core.clone();
        let rows = self
            .core
            .block(async move { core.query("jobs", sql::JOBS, &[]).await })?;
        Ok(rows.iter().map(job_info).collect())
    }

    /// Pauses `name` on every node: its planned runs are skipped (and reported, with
    /// [`SkipReason::Paused`](super::SkipReason::Paused)) until [`resume`](Self::resume).
    /// A run in progress finishes. Returns false if the store has no such job.
    ///
    /// # Errors
    ///
    /// As [`jobs`](Self::jobs).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use wheelpool::cluster::PgLockStore;
    /// # fn main() -> Result<(), wheelpool::cluster::ClusterError> {
    /// let store = PgLockStore::connect("postgresql://app@db:5432/app")?;
    /// assert!(store.pause("nightly-billing")?);
    /// assert!(store.resume("nightly-billing")?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn pause(&self, name: &str) -> Result<bool, ClusterError> {
        self.set_paused("pause", name, true)
    }

    /// Ends a [`pause`](Self::pause): the next planned run runs as usual. Returns false if the
    /// store has no such job.
    ///
    /// # Errors
    ///
    /// As [`jobs`](Self::jobs).
    ///
    /// # Examples
    ///
    /// See [`pause`](Self::pause).
    pub fn resume(&self, name: &str) -> Result<bool, ClusterError> {
        self.set_paused("resume", name, false)
    }

    fn set_paused(
        &self,
        call: &'static str,
        name: &str,
        paused: bool,
    ) -> Result<bool, ClusterError> {
        let core = self.core.clone();
        let name = name.to_owned();
        self.core.block(async move {
            let args: [(&(dyn ToSql + Sync), Type); 2] =
                [(&name, Type::TEXT), (&paused, Type::BOOL)];
            let n = core.execute(call, sql::SET_PAUSED, &args).await?;
            Ok(n == 1)
        })
    }

    /// Asks for one run of `name` now, besides its plan; like a planned run it is run by one
    /// node only. It runs as soon as no planned run is due and no lease is held: at once on
    /// this node if the job is scheduled here, otherwise at the next wake-up of any node
    /// (the next planned run, or within a minute). Not while the job is paused. Returns false
    /// if the store has no such job.
    ///
    /// # Errors
    ///
    /// As [`jobs`](Self::jobs).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use wheelpool::cluster::PgLockStore;
    /// # fn main() -> Result<(), wheelpool::cluster::ClusterError> {
    /// let store = PgLockStore::connect("postgresql://app@db:5432/app")?;
    /// assert!(store.trigger("nightly-billing")?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn trigger(&self, name: &str) -> Result<bool, ClusterError> {
        let core = self.core.clone();
        let owned = name.to_owned();
        let found = self.core.block(async move {
            let n = core
                .execute("trigger", sql::TRIGGER, &[(&owned, Type::TEXT)])
                .await?;
            Ok(n == 1)
        })?;
        if found {
            self.core.wake_local(name);
        }
        Ok(found)
    }

    /// This node's counters over every job it runs on this store: claims won, found taken,
    /// runs skipped by reason, failed calls, and claim latency.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cluster::PgLockStore;
    ///
    /// let store = PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap();
    /// assert_eq!(store.stats().claims_won, 0);
    /// ```
    pub fn stats(&self) -> ClusterStats {
        self.core.stats.snapshot()
    }

    pub(super) fn core(&self) -> &Arc<StoreCore> {
        &self.core
    }
}

impl PgLockStoreBuilder {
    /// How many connections the store may open (at least 1; default 4).
    ///
    /// # Examples
    ///
    /// See [`PgLockStore`].
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n;
        self
    }

    /// The bound on opening a connection, TCP and login together (default 5 s).
    ///
    /// # Examples
    ///
    /// See [`PgLockStoreBuilder`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The bound on every other call: claim, release, renew, the admin calls (default 5 s).
    /// It is also the session's `statement_timeout` and `lock_timeout` on the server.
    ///
    /// # Examples
    ///
    /// See [`PgLockStore`].
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Parses the connection string and checks the settings, then connects (one connection,
    /// creating the table if it is missing), so that a wrong address or password shows at
    /// start-up.
    ///
    /// # Errors
    ///
    /// [`ClusterError::InvalidUrl`] for a string that does not parse, names no host, or
    /// requires TLS; [`ClusterError::InvalidJob`] for zero connections or a zero timeout;
    /// [`ClusterError::Unavailable`] if the server cannot be reached or does not answer the
    /// login within the connect timeout; [`ClusterError::Store`] if the table cannot be
    /// created.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use wheelpool::cluster::{ClusterError, PgLockStore};
    ///
    /// let start = Instant::now();
    /// let err = PgLockStore::builder("host=127.0.0.1 port=1")
    ///     .connect_timeout(Duration::from_secs(2))
    ///     .connect()
    ///     .unwrap_err();
    /// assert!(matches!(err, ClusterError::Unavailable(_)));
    /// assert!(start.elapsed() < Duration::from_secs(30));
    /// ```
    pub fn connect(self) -> Result<PgLockStore, ClusterError> {
        let store = self.connect_lazy()?;
        let core = store.core.clone();
        store
            .core
            .block(async move { core.query("connect", "SELECT 1", &[]).await.map(drop) })?;
        Ok(store)
    }

    /// Parses the connection string and checks the settings; connects on first use (a node
    /// may then start while the database is down; its claims fail until it is up).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect), less the ones a connect gives.
    ///
    /// # Examples
    ///
    /// See [`PgLockStore`].
    pub fn connect_lazy(self) -> Result<PgLockStore, ClusterError> {
        let mut config =
            Config::from_str(&self.url).map_err(|e| ClusterError::InvalidUrl(e.to_string()))?;
        if config.get_ssl_mode() == SslMode::Require {
            return Err(ClusterError::InvalidUrl(
                "sslmode=require, but this store connects without TLS".to_owned(),
            ));
        }
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(ClusterError::InvalidUrl("no host given".to_owned()));
        }
        if self.connections == 0 {
            return Err(ClusterError::InvalidJob(
                "connections must be at least 1".into(),
            ));
        }
        if self.connect_timeout.is_zero() || self.call_timeout.is_zero() {
            return Err(ClusterError::InvalidJob(
                "timeouts must be above zero".into(),
            ));
        }
        config
            .connect_timeout(self.connect_timeout)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(5))
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            .tcp_user_timeout(self.call_timeout.max(Duration::from_secs(1)));
        if config.get_application_name().is_none() {
            config.application_name("wheelpool-cluster");
        }
        let core = StoreCore::start(
            config,
            self.connections,
            self.connect_timeout,
            self.call_timeout,
        )?;
        Ok(PgLockStore { core })
    }
}

/// Nanoseconds since the epoch as a `SystemTime` (before the epoch reads as the epoch).
pub(super) fn system_time(ns: i128) -> SystemTime {
    let ns = u64::try_from(ns.max(0)).unwrap_or(u64::MAX);
    SystemTime::UNIX_EPOCH + Duration::from_nanos(ns)
}

fn job_info(row: &Row) -> JobInfo {
    let period: i64 = row.get(1);
    let offset: i64 = row.get(2);
    let last_run: i64 = row.get(3);
    let claims: i64 = row.get(4);
    let claimed_at: i64 = row.get(6);
    let until: i64 = row.get(7);
    let now: i64 = row.get(10);
    let cron: String = row.get(11);
    let due = (i128::from(now) - i128::from(offset)).div_euclid(i128::from(period));
    let next = if cron.is_empty() {
        i128::from(offset) + (due.max(i128::from(last_run)) + 1) * i128::from(period)
    } else {
        next_occurrence(&cron, last_run.max(now)).map_or(i128::from(now), i128::from)
    };
    let span = |ns: i64| match cron.is_empty() {
        true => Duration::from_nanos(ns.unsigned_abs()),
        false => Duration::ZERO,
    };
    JobInfo {
        name: row.get(0),
        period: span(period),
        offset: span(offset),
        cron: (!cron.is_empty()).then_some(cron),
        last_run: (claims > 0).then(|| u64::try_from(last_run).unwrap_or(0)),
        last_claim: (claims > 0).then(|| (row.get(5), system_time(claimed_at.into()))),
        lease_until: (until > now).then(|| system_time(until.into())),
        paused: row.get(8),
        pending_triggers: u64::try_from(row.get::<_, i64>(9)).unwrap_or(0),
        next_run: system_time(next),
        read_at: system_time(now.into()),
    }
}

/// The first occurrence after `after` (ns) of a cron job's stored schedule, if this node can
/// read it.
#[cfg(feature = "cron")]
fn next_occurrence(settings: &str, after: i64) -> Option<i64> {
    let cron = super::calendar::parse_settings(settings)?;
    super::calendar::Occurrences::new(&cron).ok()?.next(after)
}

#[cfg(not(feature = "cron"))]
fn next_occurrence(_settings: &str, _after: i64) -> Option<i64> {
    None
}

impl fmt::Debug for PgLockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.core, f)
    }
}

//! `PgLockStore`: the lock store on PostgreSQL, one row per job, with time from the server.
//!
//! Ground rules:
//! - One connection per store, behind a mutex: a call holds it for one statement (or a
//!   connect). Every statement is bounded: `connect_timeout`, TCP keepalives and a user timeout
//!   on the socket, and `statement_timeout` / `lock_timeout` on the session.
//! - A call that finds no connection connects, unless it is inside the backoff after a failed
//!   connect (it then fails at once with `Unavailable`). A connection that errors at the socket
//!   level is dropped; the next call connects again.
//! - Every time is the server's `now()` (one per statement, so one reading decides a claim).

use super::store::{Claim, ClaimOutcome, ClaimRequest, LockStore, Released};
use super::ClusterError;
use crate::sync::Mutex;
use postgres::config::SslMode;
use postgres::{Client, Config, NoTls};
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// The table, created if missing. `period_us` is part of the state so that a job whose period
/// changes starts a fresh run count instead of waiting for the old one to be passed.
const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS wheelpool_cluster_jobs (
    name         text PRIMARY KEY,
    period_us    bigint NOT NULL,
    last_run     bigint NOT NULL,
    locked_by    text NOT NULL,
    locked_at    timestamptz NOT NULL,
    locked_until timestamptz NOT NULL
)";

/// Concurrent `CREATE TABLE IF NOT EXISTS` can fail with a unique violation in the catalog:
/// nodes starting together take this advisory lock around it.
const DDL_LOCK_KEY: i64 = 0x0077_686c_706f_6f6c; // "whlpool" in ASCII

/// The claim: one statement, one `now()`. The insert wins when the job has no row; the update
/// wins when the stored run is older than the current one (or the period changed) and no lease
/// is held. The outer select reports the server time and, from the snapshot before the claim,
/// when the blocking lease ends.
const CLAIM: &str = "WITH t AS (SELECT (extract(epoch FROM now()) * 1000000)::bigint AS now_us),
claim AS (
    INSERT INTO wheelpool_cluster_jobs AS j
        (name, period_us, last_run, locked_by, locked_at, locked_until)
    SELECT $1::text, $2::bigint, (t.now_us - $3::bigint) / $2::bigint, $4::text, now(),
           now() + $5::bigint * interval '1 microsecond'
    FROM t
    ON CONFLICT (name) DO UPDATE SET
        period_us = EXCLUDED.period_us, last_run = EXCLUDED.last_run,
        locked_by = EXCLUDED.locked_by, locked_at = EXCLUDED.locked_at,
        locked_until = EXCLUDED.locked_until
    WHERE (j.last_run < EXCLUDED.last_run OR j.period_us <> EXCLUDED.period_us)
      AND j.locked_until <= now()
    RETURNING j.last_run)
SELECT t.now_us, (SELECT last_run FROM claim),
       (SELECT (extract(epoch FROM locked_until) * 1000000)::bigint
          FROM wheelpool_cluster_jobs WHERE name = $1::text)
FROM t";

/// End the lease now if this owner still holds it for this run.
const RELEASE: &str = "UPDATE wheelpool_cluster_jobs SET locked_until = now()
    WHERE name = $1::text AND last_run = $2::bigint AND locked_by = $3::text
      AND locked_until > now()";

/// After a release that matched nothing: is the row still ours (expired) or someone else's?
const STILL_OURS: &str = "SELECT last_run = $2::bigint AND locked_by = $3::text
    FROM wheelpool_cluster_jobs WHERE name = $1::text";

/// First wait after a failed connect; it doubles on each failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// Longest wait between connect attempts: how late a node notices that the server is back.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Bound on a connect (per address tried).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on a statement on the server, and on waiting for a row lock.
const STATEMENT_TIMEOUT_MS: u32 = 5_000;
/// Bound on unacknowledged data on the socket and on an idle dead peer: a vanished server
/// fails a call within about this long instead of hanging a worker.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(10);

/// A [`LockStore`] on PostgreSQL (9.5 or later; tested on 15), through the `postgres` crate's
/// blocking client.
///
/// It keeps one table, `wheelpool_cluster_jobs` (created if missing), with one row per job:
/// the last claimed run number, who holds the lease and until when. Every time comes from the
/// server's clock. One connection serves every job of the node; calls hold it for one
/// statement.
///
/// **Connection loss** is recovered: a failed call drops the connection, the next call
/// reconnects, and failed connects back off (50 ms doubling to 2 s) so a dead server is not
/// hammered. While it is down, claims fail with [`ClusterError::Unavailable`] and runs are
/// skipped. **Bounds**: connects time out after 5 s; statements and lock waits after 5 s on
/// the server; the socket uses keepalives and a 10 s TCP user timeout.
///
/// **TLS is not supported** (the client connects with `NoTls`): use it on a trusted network
/// or through a local proxy; a connection string with `sslmode=require` is refused at setup.
///
/// # Examples
///
/// ```
/// use wheelpool::cluster::{ClusterError, PgLockStore};
///
/// // Setup errors are typed; a lazy store only parses here and connects on first use.
/// assert!(matches!(PgLockStore::connect_lazy("port=65536"), Err(ClusterError::InvalidUrl(_))));
/// let store = PgLockStore::connect_lazy("postgresql://app@db.internal:5432/app").unwrap();
/// assert!(format!("{store:?}").contains("PgLockStore"));
/// ```
pub struct PgLockStore {
    config: Config,
    conn: Mutex<Conn>,
}

/// The connection and the reconnect backoff.
struct Conn {
    client: Option<Client>,
    /// Connect failures in a row.
    failures: u32,
    /// No connect attempt before this.
    retry_at: Option<Instant>,
    last_error: String,
}

impl PgLockStore {
    /// Parses `url`, connects, and creates the table if it is missing.
    ///
    /// `url` is a URL (`postgresql://user:pass@host:5432/db`) or key=value pairs
    /// (`host=localhost port=5432 user=app dbname=app`).
    ///
    /// # Errors
    ///
    /// [`ClusterError::InvalidUrl`] for a string that does not parse or that requires TLS;
    /// [`ClusterError::Unavailable`] if the server cannot be reached;
    /// [`ClusterError::Store`] if the table cannot be created.
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
        let store = Self::connect_lazy(url)?;
        store.with_client(|_| Ok(()))?;
        Ok(store)
    }

    /// Parses `url` but connects only on first use (a node may then start while the database
    /// is down; its runs are skipped until it is up).
    ///
    /// # Errors
    ///
    /// [`ClusterError::InvalidUrl`], as for [`connect`](Self::connect).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::cluster::PgLockStore;
    ///
    /// assert!(PgLockStore::connect_lazy("host=127.0.0.1 port=1 user=nobody").is_ok());
    /// ```
    pub fn connect_lazy(url: &str) -> Result<Self, ClusterError> {
        let mut config =
            Config::from_str(url).map_err(|e| ClusterError::InvalidUrl(e.to_string()))?;
        if config.get_ssl_mode() == SslMode::Require {
            return Err(ClusterError::InvalidUrl(
                "sslmode=require, but this store connects without TLS; use sslmode=disable \
                 or prefer"
                    .to_owned(),
            ));
        }
        config
            .connect_timeout(CONNECT_TIMEOUT)
            .keepalives(true)
            .keepalives_idle(SOCKET_TIMEOUT / 2)
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            .tcp_user_timeout(SOCKET_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("wheelpool-cluster");
        }
        Ok(Self {
            config,
            conn: Mutex::new(Conn {
                client: None,
                failures: 0,
                retry_at: None,
                last_error: String::new(),
            }),
        })
    }

    /// Runs `op` on the connection, connecting first if needed; see the ground rules.
    fn with_client<R>(
        &self,
        op: impl FnOnce(&mut Client) -> Result<R, postgres::Error>,
    ) -> Result<R, ClusterError> {
        let mut conn = self.conn.lock();
        let client = match conn.client.take() {
            Some(client) => client,
            None => self.reconnect(&mut conn)?,
        };
        let client = conn.client.insert(client);
        match op(client) {
            Ok(value) => Ok(value),
            Err(err) => {
                let lost = client.is_closed() || connection_gone(&err);
                if lost {
                    conn.client = None;
                    Err(ClusterError::Unavailable {
                        reason: format!("connection lost: {err}"),
                    })
                } else {
                    Err(ClusterError::Store {
                        reason: err.to_string(),
                    })
                }
            }
        }
    }

    /// Connects (outside the backoff window) and prepares the session and the table.
    #[cold]
    fn reconnect(&self, conn: &mut Conn) -> Result<Client, ClusterError> {
        let now = Instant::now();
        if let Some(at) = conn.retry_at.filter(|at| *at > now) {
            return Err(ClusterError::Unavailable {
                reason: format!(
                    "next connect attempt in {:?}; last error: {}",
                    at - now,
                    conn.last_error
                ),
            });
        }
        match self.open() {
            Ok(client) => {
                conn.failures = 0;
                conn.retry_at = None;
                Ok(client)
            }
            Err(err) => {
                conn.failures = conn.failures.saturating_add(1);
                conn.retry_at = Some(Instant::now() + backoff(conn.failures));
                conn.last_error = err.to_string();
                Err(ClusterError::Unavailable {
                    reason: format!("connect failed: {err}"),
                })
            }
        }
    }

    fn open(&self) -> Result<Client, postgres::Error> {
        let mut client = self.config.connect(NoTls)?;
        client.batch_execute(&format!(
            "SET statement_timeout = {STATEMENT_TIMEOUT_MS}; \
             SET lock_timeout = {STATEMENT_TIMEOUT_MS};"
        ))?;
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&DDL_LOCK_KEY])?;
        tx.batch_execute(CREATE_TABLE)?;
        tx.commit()?;
        Ok(client)
    }
}

/// The wait after `failures` failed connects in a row.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    MIN_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// True if `err` means the session is over: no server error at all (a socket or protocol
/// failure), or a server error of class 08 (connection exception) or 57 (operator
/// intervention: shutdown, crash recovery, terminated backend; not a statement timeout).
fn connection_gone(err: &postgres::Error) -> bool {
    match err.code() {
        None => true,
        Some(code) => {
            // 57014 is a statement timeout: the session is still fine.
            let class = code.code().get(..2);
            (class == Some("08") || class == Some("57")) && code.code() != "57014"
        }
    }
}

/// Microseconds as the `bigint` the SQL takes (saturating: no period reaches it).
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Microseconds since the epoch from the server, as a `Duration` (a time before 1970 reads as
/// the epoch).
fn since_epoch(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

impl LockStore for PgLockStore {
    fn try_claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, ClusterError> {
        let row = self.with_client(|c| {
            c.query_one(
                CLAIM,
                &[
                    &req.job,
                    &micros(req.period).max(1),
                    &micros(req.offset),
                    &req.owner,
                    &micros(req.lease),
                ],
            )
        })?;
        let now_us: i64 = row.get(0);
        let won: Option<i64> = row.get(1);
        let until_us: Option<i64> = row.get(2);
        let outcome = match (won, until_us) {
            (Some(run), _) => ClaimOutcome::Won {
                run: u64::try_from(run).unwrap_or(0),
            },
            (None, Some(until)) if until > now_us => ClaimOutcome::Leased {
                until: since_epoch(until),
            },
            (None, _) => ClaimOutcome::AlreadyRun,
        };
        Ok(Claim {
            store_time: since_epoch(now_us),
            outcome,
        })
    }

    fn release(&self, job: &str, run: u64, owner: &str) -> Result<Released, ClusterError> {
        let run = i64::try_from(run).unwrap_or(i64::MAX);
        let released = self.with_client(|c| c.execute(RELEASE, &[&job, &run, &owner]))?;
        if released == 1 {
            return Ok(Released::InTime);
        }
        let ours: Option<bool> = self
            .with_client(|c| c.query_opt(STILL_OURS, &[&job, &run, &owner]))?
            .map(|row| row.get(0));
        Ok(Released::LeaseExpired {
            taken_over: ours != Some(true),
        })
    }
}

impl fmt::Debug for PgLockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The config may hold a password: show only where it points.
        // A call may hold the connection for seconds: do not wait for it here.
        let connected = self.conn.try_lock().map(|conn| conn.client.is_some());
        f.debug_struct("PgLockStore")
            .field("hosts", &self.config.get_hosts())
            .field("ports", &self.config.get_ports())
            .field("dbname", &self.config.get_dbname())
            .field("connected", &connected)
            .finish()
    }
}

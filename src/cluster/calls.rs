//! `StoreCore`: the calls every job makes to the store, each bounded on the client side.
//!
//! Ground rules:
//! - The store runs its own one-thread tokio runtime (thread `wheelpool-pg`). Job chains hand
//!   it claims without blocking a pool worker; admin calls and `keep_alive` block their caller
//!   on a channel until the runtime answers (never on the runtime itself).
//! - **Every call is bounded here, on the client**: a connect (TCP and login) by the connect
//!   timeout, any other call by the call timeout, both with `tokio::time::timeout`. A call
//!   that runs out drops its connection (the socket is closed by aborting the connection's
//!   task) and asks the server to cancel the statement; the server-side `statement_timeout`
//!   and `lock_timeout` are a second line, not the bound.
//! - Several connections (`connections`, default 4). A call takes the one with the fewest
//!   calls in flight, so one stalled connection holds up only the calls already on it.
//! - A call that finds its connection dead (terminated by an administrator, a pooler, a
//!   failover) retries once on a fresh connection, within the same bound.
//! - Failed connects back off per connection (50 ms doubling to 2 s): a dead server is not
//!   hammered, and calls meanwhile fail at once with [`StoreErrorKind::Backoff`].
//! - Claims and releases are batched: whatever claims (releases) are queued when a sender is
//!   free go in one statement ([`sql::CLAIM`], [`sql::RELEASE`]), never two for one job; at
//!   most one sender per connection runs for each, so batches grow with the load instead of
//!   queueing one round trip per job.
//! - The runtime never runs user code: answers go to the job chains, which hand anything of
//!   the user's (a body, an error handler) to the pool.

use super::batch::{ClaimRequest, LeaseState, Queue, ReleaseRequest};
use super::error::{StoreError, StoreErrorKind};
use super::schedule::Stored;
use super::sql;
use super::stats::Counters;
use super::ClusterError;
use crate::sync::{Arc, AtomicBool, AtomicUsize, Mutex, Ordering, Weak};
use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, NoTls, Row, Statement};

/// First wait after a failed connect; it doubles on each failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// Longest wait between connect attempts: how late a node notices that the server is back.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The parameter types of [`sql::CLAIM`] and [`sql::RELEASE`].
const CLAIM_TYPES: [Type; 11] = [
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
];
const RELEASE_TYPES: [Type; 3] = [Type::TEXT_ARRAY, Type::INT8_ARRAY, Type::TEXT_ARRAY];
/// Bound on the cancel request sent for a statement that ran out of time.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(1);

/// A job scheduled on this node, woken at once by a local [`PgLockStore::trigger`].
pub(super) trait LocalJob: Send + Sync {
    fn name(&self) -> &str;
    fn wake_now(&self);
}

/// Everything the store's calls share; job chains hold it, so the runtime lives while they do.
pub(super) struct StoreCore {
    config: Config,
    connect_timeout: Duration,
    pub(super) call_timeout: Duration,
    pub(super) runtime: tokio::runtime::Handle,
    slots: Box<[Arc<Slot>]>,
    next_slot: AtomicUsize,
    schema_ready: AtomicBool,
    pub(super) claims: Mutex<Queue<ClaimRequest>>,
    pub(super) releases: Mutex<Queue<ReleaseRequest>>,
    pub(super) stats: Counters,
    local: Mutex<Vec<Weak<dyn LocalJob>>>,
    /// Dropping it stops the runtime's thread.
    _stop: tokio::sync::oneshot::Sender<()>,
}

struct Slot {
    in_flight: AtomicUsize,
    conn: tokio::sync::Mutex<SlotConn>,
}

/// A connection, and the batch statements prepared on it: parsed and analysed once per
/// connection instead of once per batch (the server's cost for a small batch was mostly
/// that). Each is planned again for its arguments (`plan_cache_mode`), since a generic plan
/// cannot see how many rows the arrays hold.
pub(super) struct Session {
    pub(super) client: Client,
    pub(super) claim: Statement,
    pub(super) release: Statement,
}

impl std::ops::Deref for Session {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

#[derive(Default)]
struct SlotConn {
    client: Option<Arc<Session>>,
    /// The task driving the connection's socket: aborted to close it.
    driver: Option<JoinHandle<()>>,
    failures: u32,
    retry_at: Option<Instant>,
    last_error: String,
}

impl StoreCore {
    /// How many connections the store has (at most one batch sender per queue for each).
    pub(super) fn connections(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn start(
        config: Config,
        connections: usize,
        connect_timeout: Duration,
        call_timeout: Duration,
    ) -> Result<Arc<Self>, ClusterError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                ClusterError::InvalidUrl(format!("cannot start the store's runtime: {e}"))
            })?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("wheelpool-pg".into())
            .spawn(move || {
                STORE_THREAD.with(|s| s.set(true));
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                // Dropped here, outside the runtime: pending calls end as errors.
            })
            .map_err(|e| {
                ClusterError::InvalidUrl(format!("cannot start the store's thread: {e}"))
            })?;
        let slots = (0..connections)
            .map(|_| {
                Arc::new(Slot {
                    in_flight: AtomicUsize::new(0),
                    conn: tokio::sync::Mutex::new(SlotConn::default()),
                })
            })
            .collect();
        Ok(Arc::new(Self {
            config,
            connect_timeout,
            call_timeout,
            runtime: handle,
            slots,
            next_slot: AtomicUsize::new(0),
            schema_ready: AtomicBool::new(false),
            claims: Mutex::new(Queue::default()),
            releases: Mutex::new(Queue::default()),
            stats: Counters::default(),
            local: Mutex::new(Vec::new()),
            _stop: stop,
        }))
    }

    /// Runs `fut` on the store's runtime and waits for it on this thread.
    pub(super) fn block<R: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<R, ClusterError>> + Send + 'static,
    ) -> Result<R, ClusterError> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().unwrap_or_else(|_| {
            Err(ClusterError::Unavailable(StoreError::backoff(
                "call",
                Duration::ZERO,
                "the store's runtime has stopped",
            )))
        })
    }

    /// Runs `fut` on the store's runtime without waiting.
    pub(super) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
        self.runtime.spawn(fut)
    }

    /// Registers a job (see [`sql::REGISTER`] and [`sql::TAKE_OVER`]); gives the stored
    /// settings after it (`ours` if a takeover changed them).
    pub(super) async fn register(
        &self,
        job: &str,
        ours: Stored,
        grace_ns: i64,
        take_over: bool,
    ) -> Result<Stored, ClusterError> {
        let job = job.to_owned();
        let args: [(&(dyn ToSql + Sync), Type); 5] = [
            (&job, Type::TEXT),
            (&ours.grid.0, Type::INT8),
            (&ours.grid.1, Type::INT8),
            (&grace_ns, Type::INT8),
            (&ours.cron, Type::TEXT),
        ];
        let grid_of = |rows: &[Row]| -> Option<Stored> {
            let row = rows.first()?;
            Some(Stored {
                grid: (row.try_get(0).ok()?, row.try_get(1).ok()?),
                cron: row.try_get(2).ok()?,
            })
        };
        let mut stored = grid_of(&self.query("register", sql::REGISTER, &args).await?);
        if stored.is_none() {
            // Another node's insert committed after this statement's snapshot: its
            // `ON CONFLICT DO NOTHING` waited for it, but the read below it could not see it.
            // A new statement does.
            let name: [(&(dyn ToSql + Sync), Type); 1] = [(&job, Type::TEXT)];
            stored = grid_of(&self.query("register", sql::GRID, &name).await?);
        }
        let Some(stored) = stored else {
            return Err(ClusterError::Store(StoreError::unanswered("register")));
        };
        if stored == ours || !take_over {
            return Ok(stored);
        }
        self.query("register", sql::TAKE_OVER, &args).await?;
        Ok(ours)
    }

    /// Extends a lease held by `owner` for `claim` to `now + lease_us`.
    pub(super) async fn renew(
        &self,
        job: &str,
        claim: i64,
        owner: &str,
        lease_us: i64,
    ) -> Result<LeaseState, ClusterError> {
        let (job, owner) = (job.to_owned(), owner.to_owned());
        let args: [(&(dyn ToSql + Sync), Type); 4] = [
            (&job, Type::TEXT),
            (&claim, Type::INT8),
            (&owner, Type::TEXT),
            (&lease_us, Type::INT8),
        ];
        let rows = self.query("renew", sql::RENEW, &args).await?;
        Ok(rows
            .first()
            .map_or(LeaseState::Expired { taken_over: true }, |row| {
                let held: bool = row.get(0);
                let ours: bool = row.get(1);
                if held {
                    LeaseState::Held
                } else {
                    LeaseState::Expired { taken_over: !ours }
                }
            }))
    }

    pub(super) fn add_local(&self, job: Weak<dyn LocalJob>) {
        let mut local = self.local.lock();
        local.retain(|j| j.strong_count() > 0);
        local.push(job);
    }

    pub(super) fn wake_local(&self, name: &str) {
        let jobs: Vec<_> = self
            .local
            .lock()
            .iter()
            .filter_map(|j| j.upgrade())
            .collect();
        for job in jobs.iter().filter(|j| j.name() == name) {
            job.wake_now();
        }
    }

    pub(super) async fn execute(
        &self,
        call: &'static str,
        statement: &'static str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<u64, ClusterError> {
        self.bounded(call, |client| async move {
            client.execute_typed(statement, params).await
        })
        .await
    }

    pub(super) async fn query(
        &self,
        call: &'static str,
        statement: &'static str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, ClusterError> {
        self.bounded(call, |client| async move {
            client.query_typed(statement, params).await
        })
        .await
    }

    /// Runs `op` on the least busy connection within the call timeout (see the ground rules).
    pub(super) async fn bounded<'a, R, F, Fut>(
        &'a self,
        call: &'static str,
        op: F,
    ) -> Result<R, ClusterError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: Future<Output = Result<R, tokio_postgres::Error>> + 'a,
    {
        let deadline = tokio::time::Instant::now() + self.call_timeout;
        // A lost connection is retried on another (or a fresh) one, at most once per
        // connection: after an administrator cut them all, the next ones may be dead too.
        let mut retries = self.slots.len();
        loop {
            let slot = self.pick();
            slot.in_flight.fetch_add(1, Ordering::Relaxed);
            let mut used = None;
            let outcome = tokio::time::timeout_at(deadline, async {
                let client = self.client(slot, call).await?;
                used = Some(client.clone());
                op(client)
                    .await
                    .map_err(|e| StoreError::from_pg(call, false, e))
            })
            .await;
            slot.in_flight.fetch_sub(1, Ordering::Relaxed);
            let err = match outcome {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(err)) => err,
                Err(_) => StoreError::timeout(call, self.call_timeout),
            };
            self.stats.failed_calls.fetch_add(1, Ordering::Relaxed);
            if err.session_lost() {
                if let Some(client) = used {
                    self.drop_connection(slot, client, err.kind() == StoreErrorKind::Timeout);
                }
            }
            let fresh_try = err.kind() == StoreErrorKind::ConnectionLost && retries > 0;
            if !fresh_try || tokio::time::Instant::now() >= deadline {
                return Err(err.into_cluster());
            }
            retries -= 1;
        }
    }

    /// The connection with the fewest calls in flight (ties: round robin).
    fn pick(&self) -> &Arc<Slot> {
        let start = self.next_slot.fetch_add(1, Ordering::Relaxed);
        let n = self.slots.len();
        (0..n)
            .map(|i| &self.slots[(start + i) % n])
            .min_by_key(|s| s.in_flight.load(Ordering::Relaxed))
            .expect("at least one connection")
    }

    /// The slot's live connection, or a new one.
    async fn client(&self, slot: &Slot, call: &'static str) -> Result<Arc<Session>, StoreError> {
        let mut conn = slot.conn.lock().await;
        if let Some(client) = conn.client.as_ref().filter(|c| !c.is_closed()) {
            return Ok(client.clone());
        }
        close(&mut conn);
        let now = Instant::now();
        if let Some(at) = conn.retry_at.filter(|at| *at > now) {
            return Err(StoreError::backoff(call, at - now, &conn.last_error));
        }
        let opened = tokio::time::timeout(self.connect_timeout, self.open()).await;
        let opened =
            opened.unwrap_or_else(|_| Err(StoreError::timeout("connect", self.connect_timeout)));
        match opened {
            Ok((client, driver)) => {
                conn.failures = 0;
                conn.retry_at = None;
                conn.driver = Some(driver);
                Ok(conn.client.insert(Arc::new(client)).clone())
            }
            Err(err) => {
                conn.failures = conn.failures.saturating_add(1);
                conn.retry_at = Some(Instant::now() + backoff(conn.failures));
                conn.last_error = err.to_string();
                Err(err)
            }
        }
    }

    /// Opens a connection: login, session bounds, and the table on the store's first connect.
    async fn open(&self) -> Result<(Session, JoinHandle<()>), StoreError> {
        let pg = |e| StoreError::from_pg("connect", true, e);
        let (mut client, connection) = self.config.connect(NoTls).await.map_err(pg)?;
        let driver = self.runtime.spawn(async move {
            let _ = connection.await;
        });
        let ms = self.call_timeout.as_millis().max(1);
        let setup = async {
            client
                .batch_execute(&format!(
                    "SET statement_timeout = {ms}; SET lock_timeout = {ms}; \
                     SET idle_in_transaction_session_timeout = {ms}; \
                     SET plan_cache_mode = force_custom_plan;"
                ))
                .await?;
            if !self.schema_ready.load(Ordering::Acquire) {
                let tx = client.transaction().await?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&sql::DDL_LOCK_KEY])
                    .await?;
                tx.batch_execute(sql::CREATE_TABLE).await?;
                tx.batch_execute(sql::MIGRATE).await?;
                tx.commit().await?;
                // Pairs with the load above: later connects skip the DDL.
                self.schema_ready.store(true, Ordering::Release);
            }
            let claim = client.prepare_typed(sql::CLAIM, &CLAIM_TYPES).await?;
            let release = client.prepare_typed(sql::RELEASE, &RELEASE_TYPES).await?;
            Ok((claim, release))
        };
        match setup.await {
            Ok((claim, release)) => Ok((
                Session {
                    client,
                    claim,
                    release,
                },
                driver,
            )),
            Err(e) => {
                driver.abort();
                Err(StoreError::from_pg("connect", false, e))
            }
        }
    }

    /// Drops `client` from `slot` if it is still the slot's connection, closing its socket;
    /// after a timeout, first asks the server to cancel what it runs. Never waits: the call
    /// that failed returns at once, and if a connect holds the slot, a task does it after.
    fn drop_connection(&self, slot: &Arc<Slot>, client: Arc<Session>, cancel: bool) {
        if cancel {
            let token = client.cancel_token();
            self.runtime.spawn(async move {
                let _ = tokio::time::timeout(CANCEL_TIMEOUT, token.cancel_query(NoTls)).await;
            });
        }
        let forget = move |conn: &mut SlotConn| {
            if conn
                .client
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(c, &client))
            {
                close(conn);
            }
        };
        match slot.conn.try_lock() {
            Ok(mut conn) => forget(&mut conn),
            Err(_) => {
                let slot = slot.clone();
                self.runtime
                    .spawn(async move { forget(&mut *slot.conn.lock().await) });
            }
        }
    }
}

crate::sync::thread_local! {
    /// True on the store's runtime thread.
    static STORE_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// True on a store's runtime thread, where no user code may run (nor be dropped).
pub(super) fn on_store_thread() -> bool {
    STORE_THREAD.with(Cell::get)
}

/// Forgets the slot's connection and closes its socket.
fn close(conn: &mut SlotConn) {
    conn.client = None;
    if let Some(driver) = conn.driver.take() {
        driver.abort();
    }
}

/// The wait after `failures` failed connects in a row.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    MIN_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

impl fmt::Debug for StoreCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The config may hold a password: show only where it points.
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|h| match h {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        f.debug_struct("PgLockStore")
            .field("hosts", &hosts)
            .field("ports", &self.config.get_ports())
            .field("dbname", &self.config.get_dbname())
            .field("connections", &self.slots.len())
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

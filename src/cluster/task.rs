//! One node's side of a cluster job: a chain of one-shot wake-ups on the pool, each planned
//! from the store's clock, and the `ClusterTask` handle that ends it.
//!
//! Ground rules:
//! - At most one wake-up of a job is pending or running on a node at a time: a wake-up plans
//!   the next one only when it is done, so runs of a job on one node never overlap.
//! - `State::end` is set once (cancel, panic, or the pool dropping a wake-up) under the state
//!   lock, and nothing is planned after it. The state lock is never held while user code, a
//!   store call, a scheduling call or a cancel runs, nor while a future is dropped: a wake-up
//!   dropped by the pool takes the lock in `Drop`.

use super::store::{ClaimOutcome, ClaimRequest, LockStore, Released};
use super::ClusterError;
// The crate's public API only (its re-exports), plus the sync shim.
use crate::sync::{Arc, Condvar, Mutex};
use crate::{Handle, ScheduleError, ScheduledFuture, TaskError};
use std::any::Any;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant, SystemTime};

/// Wake this long after a slot starts (by the estimate of the store's clock). The estimate
/// errs late, by the time the answer took to come back, so this only covers rounding.
const MARGIN: Duration = Duration::from_millis(1);

/// Never sleep longer than this without reading the store's clock again: bounds how far a
/// node's clock may drift from the store's before it is corrected.
const RESYNC: Duration = Duration::from_secs(60);

/// The user's error handler.
pub(super) type ErrorHandler = Arc<dyn Fn(ClusterError) + Send + Sync>;

/// The user's job body.
pub(super) type Body = Box<dyn FnMut(&ClusterRun<'_>) + Send>;

/// What a node needs to know about its job.
#[derive(Debug)]
pub(super) struct Spec {
    pub(super) job: String,
    pub(super) node: String,
    pub(super) owner: String,
    pub(super) period: Duration,
    pub(super) offset: Duration,
    pub(super) lease: Duration,
    pub(super) survive_panics: bool,
}

/// The run a job body is called for: its number (the same on every node), job, node, and
/// when it was planned.
///
/// # Examples
///
/// With a toy store whose clock stands at run 42 and that lets every claim win:
///
/// ```
/// use std::sync::{mpsc, Arc};
/// use std::time::{Duration, UNIX_EPOCH};
/// use wheelpool::cluster::{Claim, ClaimOutcome, ClaimRequest, ClusterError, ClusterJob, LockStore, Released};
/// use wheelpool::ScheduledThreadPool;
///
/// #[derive(Debug)]
/// struct AtRun42;
/// impl LockStore for AtRun42 {
///     fn try_claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, ClusterError> {
///         Ok(Claim { store_time: req.offset + req.period * 42, outcome: ClaimOutcome::Won { run: 42 } })
///     }
///     fn release(&self, _: &str, _: u64, _: &str) -> Result<Released, ClusterError> {
///         Ok(Released::InTime)
///     }
/// }
///
/// let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
/// let (tx, rx) = mpsc::channel();
/// let job = ClusterJob::builder("report", Arc::new(AtRun42)).node("n1").build().unwrap();
/// let task = job.schedule_at_fixed_rate(&pool.handle(), move |run| {
///     let _ = tx.send((run.number(), run.job().to_owned(), run.node().to_owned(), run.planned_at()));
/// }, Duration::from_secs(1)).unwrap();
/// let (number, job, node, planned) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
/// assert_eq!((number, job.as_str(), node.as_str()), (42, "report", "n1"));
/// assert_eq!(planned, UNIX_EPOCH + Duration::from_secs(42));
/// assert!(task.cancel());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ClusterRun<'a> {
    spec: &'a Spec,
    run: u64,
}

impl ClusterRun<'_> {
    /// The run number, the same on every node: `(t - offset) / period` for the store's time `t`
    /// of the claim, so run `k` is planned at `offset + k * period` after the Unix epoch.
    ///
    /// # Examples
    ///
    /// See [`ClusterRun`].
    pub fn number(&self) -> u64 {
        self.run
    }

    /// The job's cluster-wide name.
    ///
    /// # Examples
    ///
    /// See [`ClusterRun`].
    pub fn job(&self) -> &str {
        &self.spec.job
    }

    /// The label of the node running it ([`ClusterJobBuilder::node`](super::ClusterJobBuilder::node)).
    ///
    /// # Examples
    ///
    /// See [`ClusterRun`].
    pub fn node(&self) -> &str {
        &self.spec.node
    }

    /// When this run was planned, on the store's clock.
    ///
    /// # Examples
    ///
    /// See [`ClusterRun`].
    pub fn planned_at(&self) -> SystemTime {
        let nanos = u128::from(self.run) * self.spec.period.as_nanos();
        let since = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        SystemTime::UNIX_EPOCH + self.spec.offset + since
    }
}

/// A node's handle on a scheduled cluster job: cancel it or wait for it to end.
///
/// Dropping it detaches (the job goes on until the pool shuts down), like dropping a
/// [`ScheduledFuture`].
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

pub(super) struct Shared {
    spec: Spec,
    store: Arc<dyn LockStore>,
    handle: Handle,
    on_error: Option<ErrorHandler>,
    body: Mutex<Body>,
    state: Mutex<State>,
    ended: Condvar,
    /// The last reading of the store's clock, and when it arrived here.
    sync: Mutex<Option<(Instant, Duration)>>,
}

#[derive(Default)]
struct State {
    end: Option<Result<(), TaskError>>,
    next: Option<ScheduledFuture<()>>,
}

/// A pending wake-up. Dropped without firing (the pool shut down, or a cancel), it ends the
/// chain.
struct Fire(Option<Arc<Shared>>);

impl Fire {
    fn fire(mut self) {
        if let Some(shared) = self.0.take() {
            shared.wake();
        }
    }
}

impl Drop for Fire {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.end(Err(TaskError::Shutdown));
        }
    }
}

impl Shared {
    pub(super) fn start(
        spec: Spec,
        store: Arc<dyn LockStore>,
        handle: &Handle,
        on_error: Option<ErrorHandler>,
        body: Body,
    ) -> Result<ClusterTask, ClusterError> {
        let shared = Arc::new(Shared {
            spec,
            store,
            handle: handle.clone(),
            on_error,
            body: Mutex::new(body),
            state: Mutex::new(State::default()),
            ended: Condvar::new(),
            sync: Mutex::new(None),
        });
        let fire = Fire(Some(shared.clone()));
        let first = handle.schedule(move || fire.fire(), Duration::ZERO)?;
        // The first wake-up may already have run and planned the second: keep the newer one.
        // (Futures are dropped outside the state lock, see the ground rules.)
        let mut state = shared.state.lock();
        let stale = match state.next {
            None => state.next.replace(first),
            Some(_) => Some(first),
        };
        drop(state);
        drop(stale);
        Ok(ClusterTask { shared })
    }

    /// One wake-up: claim, run if won, release, plan the next wake-up.
    fn wake(self: Arc<Self>) {
        if self.state.lock().end.is_some() {
            return; // cancelled after this wake-up was taken by a worker
        }
        let spec = &self.spec;
        let request = ClaimRequest {
            job: &spec.job,
            owner: &spec.owner,
            period: spec.period,
            offset: spec.offset,
            lease: spec.lease,
        };
        let mut panicked = None;
        let mut lease_end = None;
        match self.store.try_claim(&request) {
            Ok(claim) => {
                *self.sync.lock() = Some((Instant::now(), claim.store_time));
                match claim.outcome {
                    ClaimOutcome::Won { run } => panicked = self.run(run),
                    ClaimOutcome::Leased { until } => {
                        lease_end = Some(until.saturating_sub(claim.store_time) + MARGIN);
                    }
                    _ => {}
                }
            }
            Err(err) => self.report(err),
        }
        let wait = self.until_next_slot();
        let wait = lease_end.map_or(wait, |lease| lease.min(wait));
        match panicked {
            None => self.plan(wait),
            Some(payload) => {
                if self.spec.survive_panics {
                    self.plan(wait);
                } else {
                    self.end(Err(TaskError::Panicked(crate::pool::panic_message(
                        &*payload,
                    ))));
                }
                // The pool reports it to its panic handler, as for any task.
                panic::resume_unwind(payload);
            }
        }
    }

    /// Runs the body for `run` and releases the lease; gives back a panic's payload.
    fn run(&self, run: u64) -> Option<Box<dyn Any + Send>> {
        let info = ClusterRun {
            spec: &self.spec,
            run,
        };
        let outcome = {
            let mut body = self.body.lock();
            panic::catch_unwind(AssertUnwindSafe(|| (*body)(&info)))
        };
        match self.store.release(&self.spec.job, run, &self.spec.owner) {
            Ok(Released::LeaseExpired { taken_over }) => {
                self.report(ClusterError::LeaseExpired {
                    job: self.spec.job.clone(),
                    run,
                    lease: self.spec.lease,
                    taken_over,
                });
            }
            Ok(_) => {}
            Err(err) => self.report(err),
        }
        outcome.err()
    }

    /// The wait until the next slot starts (plus [`MARGIN`]), by the last reading of the
    /// store's clock and the time passed here since; at most [`RESYNC`]. Without any reading
    /// yet (the store was never reached), one period.
    fn until_next_slot(&self) -> Duration {
        let Some((local, store)) = *self.sync.lock() else {
            return self.spec.period.min(RESYNC);
        };
        let now = store + local.elapsed();
        let period = self.spec.period.as_nanos();
        let into_grid = now.saturating_sub(self.spec.offset).as_nanos();
        let left = period - into_grid % period;
        let left = Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX));
        (left + MARGIN).min(RESYNC)
    }

    /// Plans the next wake-up in `wait`, unless the chain has ended.
    fn plan(self: &Arc<Self>, wait: Duration) {
        if self.state.lock().end.is_some() {
            return;
        }
        let fire = Fire(Some(self.clone()));
        match self.handle.schedule(move || fire.fire(), wait) {
            Ok(next) => {
                let mut state = self.state.lock();
                if state.end.is_none() {
                    let done = state.next.replace(next);
                    drop(state);
                    drop(done);
                    return;
                }
                drop(state);
                // Cancelled meanwhile: this wake-up must not run.
                next.cancel();
            }
            // The dropped wake-up has ended the chain (`Fire::drop`).
            Err(ScheduleError::Shutdown) => {}
            Err(err) => self.report(err.into()),
        }
    }

    fn end(&self, result: Result<(), TaskError>) -> bool {
        let mut state = self.state.lock();
        if state.end.is_some() {
            return false;
        }
        state.end = Some(result);
        self.ended.notify_all();
        true
    }

    /// Hands `err` to the job's handler, or, without one, to the pool's panic handler as the
    /// panic of a separate one-shot task (the job itself goes on).
    fn report(&self, err: ClusterError) {
        match &self.on_error {
            Some(handler) => {
                // A panicking handler must not stop the job; its payload is dropped here.
                let _ = panic::catch_unwind(AssertUnwindSafe(|| handler(err)));
            }
            None => {
                let message = format!(
                    "wheelpool cluster job `{}` on node `{}`: {err}",
                    self.spec.job, self.spec.node
                );
                let relay = message.clone();
                if self
                    .handle
                    .execute(move || panic::panic_any(relay))
                    .is_err()
                {
                    eprintln!("{message}");
                }
            }
        }
    }
}

impl ClusterTask {
    /// Stops this node's part of the job: no later wake-up runs. A run in progress finishes
    /// (and releases its lease), and so may one whose wake-up a worker had just taken. Returns true if this call stopped it, false if it had already
    /// ended. Other nodes go on running the job.
    ///
    /// # Examples
    ///
    /// See [`ClusterTask`].
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
    ///
    /// # Examples
    ///
    /// See [`ClusterTask`].
    pub fn is_done(&self) -> bool {
        self.shared.state.lock().end.is_some()
    }

    /// Blocks until this node's part of the job ends: `Cancelled` after [`cancel`](Self::cancel),
    /// `Panicked` after a run panicked (unless the job survives panics), `Shutdown` when the
    /// pool shut down. Do not call it from a task of the same pool.
    ///
    /// # Examples
    ///
    /// See [`ClusterTask`].
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
    ///
    /// # Examples
    ///
    /// See [`ClusterTask`].
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

//! One node's side of a cluster job: a chain of one-shot wake-ups on the pool, each planned
//! from the store's clock, and the `ClusterTask` handle that ends it.
//!
//! Ground rules:
//! - The chain is strictly sequential: a wake-up (on a pool worker) hands a claim to the store
//!   and returns; the answer (on the store's thread) either hands the run to the pool or plans
//!   the next wake-up; a run (on a pool worker) releases its lease and, on the answer, plans
//!   the next wake-up. So at most one wake-up, claim or run of a job is under way on a node,
//!   and runs of a job on one node never overlap.
//! - The store's thread never runs user code: bodies and error handlers go to the pool.
//! - `State::end` is set once (cancel, panic, or the pool dropping a wake-up) under the state
//!   lock, and nothing is planned after it. The state lock is never held while user code, a
//!   store call, a scheduling call or a cancel runs, nor while a future is dropped: a wake-up
//!   dropped by the pool takes the lock in `Drop`.
//! - `Chain` (the last claim handled, the clock reading, error streaks) is touched by one
//!   step of the chain at a time; its lock is never held across anything else.

use super::calls::{
    ClaimAnswer, ClaimRequest, LeaseState, LocalJob, Outcome, ReleaseRequest, StoreCore,
};
use super::error::{ClusterError, SkipReason, StoreError};
use super::pg::system_time;
use super::stats::{ClusterStats, Counters};
use crate::sync::{Arc, AtomicBool, Condvar, Mutex, Ordering, Weak};
use crate::{Handle, ScheduleError, ScheduledFuture, TaskError};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant, SystemTime};

/// Wake this long after a run's planned time (by the estimate of the store's clock). The
/// estimate errs late, by the time the answer took to come back, so this only covers rounding.
const MARGIN: Duration = Duration::from_millis(1);

/// Never sleep longer than this without asking the store again: bounds how far a node's clock
/// may drift from the store's, and how late a node sees a trigger or a takeover.
const RESYNC: Duration = Duration::from_secs(60);

/// First retry after a failed claim; doubles up to [`MAX_RETRY`].
const MIN_RETRY: Duration = Duration::from_millis(20);
const MAX_RETRY: Duration = Duration::from_secs(2);

/// Retry after finding the job's row locked; doubles up to [`MAX_RETRY`].
const BUSY_RETRY: Duration = Duration::from_millis(5);

/// The user's error handler.
pub(super) type ErrorHandler = Arc<dyn Fn(ClusterError) + Send + Sync>;

/// The user's job body.
pub(super) type Body = Box<dyn FnMut(&ClusterRun<'_>) + Send>;

/// What a node needs to know about its job.
#[derive(Debug)]
pub(super) struct Spec {
    pub(super) job: Arc<str>,
    pub(super) node: Arc<str>,
    pub(super) owner: Arc<str>,
    pub(super) period: Duration,
    pub(super) offset: Duration,
    pub(super) lease: Duration,
    pub(super) grace: Duration,
    pub(super) take_over: bool,
    pub(super) keep_alive: bool,
    pub(super) survive_panics: bool,
}

impl Spec {
    fn grid(&self) -> (i64, i64) {
        (nanos(self.period), nanos(self.offset))
    }
}

/// A duration in nanoseconds as the store's `bigint` (spans are checked to fit at build).
fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// The run a job body is called for: its number (the same on every node), job, node, and
/// when it was planned; and a way to keep its lease alive.
///
/// # Examples
///
/// See [`ClusterJob`](super::ClusterJob) and the `cluster_job` example.
#[derive(Clone, Copy)]
pub struct ClusterRun<'a> {
    shared: &'a Shared,
    run: Won,
}

/// A claim this node won.
#[derive(Debug, Clone, Copy)]
struct Won {
    run: i64,
    claim: i64,
    trigger: bool,
    /// The grid the run was planned on (the store's).
    grid: (i64, i64),
    /// Another run was due when it was claimed.
    more: bool,
    /// The last run due at the claim.
    due: i64,
}

impl ClusterRun<'_> {
    /// The run number, the same on every node: run `k` is planned at `offset + k * period`
    /// after the Unix epoch. A triggered run carries the number of the last planned run
    /// before it.
    pub fn number(&self) -> u64 {
        u64::try_from(self.run.run).unwrap_or(0)
    }

    /// The job's cluster-wide name.
    pub fn job(&self) -> &str {
        &self.shared.spec.job
    }

    /// The label of the node running it ([`ClusterJobBuilder::node`](super::ClusterJobBuilder::node)).
    pub fn node(&self) -> &str {
        &self.shared.spec.node
    }

    /// True if this run was asked for with [`PgLockStore::trigger`](super::PgLockStore::trigger)
    /// rather than planned.
    pub fn is_triggered(&self) -> bool {
        self.run.trigger
    }

    /// When this run was planned, on the store's clock, exactly (`offset + k * period`).
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
        let shared = self.shared.arc();
        let won = self.run;
        self.shared
            .store
            .block(async move { shared.renew(won).await })
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

/// A node's handle on a scheduled cluster job: cancel it, wait for it to end, read its
/// counters.
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
    store: Arc<StoreCore>,
    handle: Handle,
    on_error: Option<ErrorHandler>,
    body: Mutex<Body>,
    state: Mutex<State>,
    ended: Condvar,
    chain: Mutex<Chain>,
    /// A trigger on this node's store asked for a claim now (see `LocalJob::wake_now`).
    poked: AtomicBool,
    stats: Counters,
    me: Weak<Shared>,
}

#[derive(Default)]
struct State {
    end: Option<Result<(), TaskError>>,
    next: Option<ScheduledFuture<()>>,
}

/// What the chain remembers between its steps.
#[derive(Default)]
struct Chain {
    /// The row holds the job (registered by this chain, or found there).
    registered: bool,
    /// The last claim this chain handled: ran, or gave up.
    known: i64,
    /// The last reading of the store's clock (ns since the epoch), and when it arrived.
    sync: Option<(Instant, i64)>,
    /// Failed claims in a row, and busy rows in a row.
    errors: u32,
    busy: u32,
    /// The stored grid last reported as a mismatch (reported once per change).
    mismatch: Option<(i64, i64)>,
}

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
            shared.abandon(won);
        }
    }
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
    /// Registers the job (a mismatch without `take_over` is an error here, if the store
    /// answers) and plans the first wake-up at once.
    pub(super) fn start(
        spec: Spec,
        store: Arc<StoreCore>,
        handle: &Handle,
        on_error: Option<ErrorHandler>,
        body: Body,
    ) -> Result<ClusterTask, ClusterError> {
        let shared = Arc::new_cyclic(|me| Shared {
            spec,
            store: store.clone(),
            handle: handle.clone(),
            on_error,
            body: Mutex::new(body),
            state: Mutex::new(State::default()),
            ended: Condvar::new(),
            chain: Mutex::new(Chain::default()),
            poked: AtomicBool::new(false),
            stats: Counters::default(),
            me: me.clone(),
        });
        let registering = shared.clone();
        match store.block(async move { registering.register().await }) {
            Ok(()) | Err(ClusterError::Unavailable(_)) => {}
            Err(err) => return Err(err),
        }
        let local: Arc<dyn LocalJob> = shared.clone();
        store.add_local(Arc::downgrade(&local));
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

    fn arc(&self) -> Arc<Shared> {
        self.me.upgrade().expect("a run holds its chain")
    }

    /// Inserts the job's row if missing and checks (or, with `take_over`, moves) its grid.
    async fn register(&self) -> Result<(), ClusterError> {
        let grid = self.spec.grid();
        let stored = self
            .store
            .register(
                &self.spec.job,
                grid,
                nanos(self.spec.grace),
                self.spec.take_over,
            )
            .await?;
        if stored != grid {
            return Err(self.mismatch(stored));
        }
        self.chain.lock().registered = true;
        Ok(())
    }

    fn mismatch(&self, stored: (i64, i64)) -> ClusterError {
        let span = |ns: i64| Duration::from_nanos(ns.unsigned_abs());
        ClusterError::ConfigMismatch {
            job: self.spec.job.to_string(),
            stored: (span(stored.0), span(stored.1)),
            ours: (self.spec.period, self.spec.offset),
        }
    }

    /// One wake-up (on a pool worker): hand a claim to the store.
    fn wake(self: Arc<Self>) {
        if self.state.lock().end.is_some() {
            return; // cancelled after this wake-up was taken by a worker
        }
        // This claim sees any trigger made before it.
        self.poked.store(false, Ordering::Relaxed);
        let (registered, known) = {
            let chain = self.chain.lock();
            (chain.registered, chain.known)
        };
        if !registered {
            let shared = self.clone();
            self.store.spawn(async move {
                match shared.register().await {
                    Ok(()) => shared.claim(known),
                    Err(err) => {
                        let wait = shared.failed(err);
                        shared.plan(wait);
                    }
                }
            });
            return;
        }
        self.claim(known);
    }

    fn claim(self: &Arc<Self>, known: i64) {
        let spec = &self.spec;
        let (period_ns, offset_ns) = spec.grid();
        let shared = self.clone();
        self.store.claim(ClaimRequest {
            job: spec.job.clone(),
            period_ns,
            offset_ns,
            owner: spec.owner.clone(),
            node: spec.node.clone(),
            lease_us: i64::try_from(spec.lease.as_micros()).unwrap_or(i64::MAX),
            grace_ns: nanos(spec.grace),
            known,
            reply: Box::new(move |answer| shared.answered(answer)),
        });
    }

    /// The store's answer to a claim (on the store's thread).
    fn answered(self: Arc<Self>, answer: Result<ClaimAnswer, ClusterError>) {
        let a = match answer {
            Ok(a) => a,
            Err(err) => {
                let wait = self.failed(err);
                return self.plan(wait);
            }
        };
        self.count(|c| Counters::bump(&c.claims));
        {
            let mut chain = self.chain.lock();
            chain.sync = Some((a.received, a.store_ns));
            chain.errors = 0;
            if a.outcome != Outcome::Busy {
                chain.busy = 0;
            }
            if a.outcome != Outcome::Mismatch {
                chain.mismatch = None;
            }
        }
        let won = |run, claim, trigger| Won {
            run,
            claim,
            trigger,
            grid: a.grid,
            more: a.more,
            due: a.due,
        };
        match a.outcome {
            Outcome::Missing => {
                self.chain.lock().registered = false;
                self.plan(Duration::ZERO);
            }
            Outcome::Busy => {
                let busy = {
                    let mut chain = self.chain.lock();
                    chain.busy += 1;
                    chain.busy
                };
                let wait = retry_after(BUSY_RETRY, busy);
                // Reported once a streak has lasted about a call timeout.
                if wait >= MAX_RETRY.min(self.store.call_timeout) && busy.is_power_of_two() {
                    self.report(ClusterError::Store(StoreError::busy("claim")));
                }
                self.plan(wait);
            }
            Outcome::Mismatch => {
                self.count(|c| Counters::bump(&c.mismatches));
                let fresh = self.chain.lock().mismatch.replace(a.grid) != Some(a.grid);
                if fresh {
                    self.report(self.mismatch(a.grid));
                }
                self.plan(self.spec.period.min(RESYNC));
            }
            Outcome::Leased => {
                let at = self.planned(a.grid, a.k).max(i128::from(a.until_ns));
                self.plan(self.until(at));
            }
            Outcome::Paused => {
                self.skipped(&a, a.last_run + 1, a.k - 1, SkipReason::Misfired);
                self.skipped(&a, a.k, a.due, SkipReason::Paused);
                let next = self.planned(a.grid, a.due + 1);
                self.plan(self.until(next));
            }
            Outcome::Won { run, claim } => {
                self.skipped(&a, a.last_run + 1, a.k - 1, SkipReason::Misfired);
                self.start_run(won(run, claim, false));
            }
            Outcome::Triggered { run, claim } => self.start_run(won(run, claim, true)),
            Outcome::Redeliver {
                run,
                claim,
                trigger,
            } => {
                // Claimable until `grace` after the next run's planned time (see sql::CLAIM).
                let too_old = self.planned(a.grid, run + 1) + i128::from(nanos(self.spec.grace));
                if !trigger && i128::from(a.store_ns) > too_old {
                    self.skipped(&a, run, run, SkipReason::Misfired);
                    self.handled(won(run, claim, trigger), false);
                } else {
                    self.start_run(won(run, claim, trigger));
                }
            }
            Outcome::Taken | Outcome::Idle => {
                if a.outcome == Outcome::Taken {
                    self.count(|c| Counters::bump(&c.found_taken));
                }
                let next = self.planned(a.grid, a.k);
                self.plan(self.until(next));
            }
        }
    }

    /// A failed store call: report it, and the wait before the chain tries again. In a long
    /// streak (the database down for minutes) the first three failures are reported, then
    /// the 4th, 8th, 16th, ...: every failure is counted in the stats.
    fn failed(&self, err: ClusterError) -> Duration {
        let errors = {
            let mut chain = self.chain.lock();
            chain.errors += 1;
            chain.errors
        };
        if errors <= 3 || errors.is_power_of_two() {
            self.report(err);
        }
        retry_after(MIN_RETRY, errors)
    }

    /// Reports runs `from..=to` as skipped for `reason` (nothing if the range is empty).
    fn skipped(&self, a: &ClaimAnswer, from: i64, to: i64, reason: SkipReason) {
        if from > to {
            return;
        }
        let runs = u64::try_from(to - from + 1).unwrap_or(u64::MAX);
        self.count(|c| c.skipped(reason, runs));
        // A long outage may skip thousands of runs: each is reported, but a bounded number
        // one by one, then the rest as one event for the last of them.
        const ONE_BY_ONE: i64 = 100;
        let last_single = to.min(from + ONE_BY_ONE - 1);
        for run in (from..=last_single).chain((last_single < to).then_some(to)) {
            self.report(ClusterError::RunSkipped {
                job: self.spec.job.to_string(),
                run: u64::try_from(run).unwrap_or(0),
                planned_at: system_time(self.planned(a.grid, run)),
                reason,
            });
        }
    }

    /// Hands a won run to the pool.
    fn start_run(self: &Arc<Self>, won: Won) {
        self.count(|c| Counters::bump(&c.claims_won));
        let task = RunTask(Some((self.clone(), won)));
        // Refused, the closure is dropped here; dropped unrun by a `shutdown_now` later, in
        // the pool: either way `RunTask::drop` reports the run and gives up its lease.
        let _ = self.handle.execute(move || task.run());
    }

    /// A claimed run that will not run (its pool is shutting down): reported, and its lease
    /// released. The run is claimed, so no other node runs it.
    fn abandon(self: &Arc<Self>, won: Won) {
        self.count(|c| c.skipped(SkipReason::Shutdown, 1));
        self.report(ClusterError::RunSkipped {
            job: self.spec.job.to_string(),
            run: u64::try_from(won.run).unwrap_or(0),
            planned_at: system_time(self.planned(won.grid, won.run)),
            reason: SkipReason::Shutdown,
        });
        self.end(Err(TaskError::Shutdown));
        self.handled(won, false);
    }

    /// Runs the body for a won claim (on a pool worker), then releases the lease.
    fn run(self: Arc<Self>, won: Won) {
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
            let info = ClusterRun {
                shared: &self,
                run: won,
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
    fn handled(self: &Arc<Self>, won: Won, ran: bool) {
        self.chain.lock().known = won.claim;
        let shared = self.clone();
        self.store.release(ReleaseRequest {
            job: self.spec.job.clone(),
            claim: won.claim,
            owner: self.spec.owner.clone(),
            reply: Box::new(move |released| shared.released(won, ran, released)),
        });
    }

    /// The store's answer to a release (on the store's thread): report an expired lease or a
    /// failure, and plan the next wake-up.
    fn released(&self, won: Won, ran: bool, released: Result<LeaseState, ClusterError>) {
        match released {
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
        if won.more {
            self.plan(Duration::ZERO);
        } else {
            let next = self.planned(won.grid, won.run.max(won.due) + 1);
            self.plan(self.until(next));
        }
    }

    /// Extends `won`'s lease (see [`ClusterRun::keep_alive`]).
    async fn renew(&self, won: Won) -> Result<(), ClusterError> {
        let lease_us = i64::try_from(self.spec.lease.as_micros()).unwrap_or(i64::MAX);
        let state = self
            .store
            .renew(&self.spec.job, won.claim, &self.spec.owner, lease_us)
            .await?;
        match state {
            LeaseState::Held => Ok(()),
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

    /// When run `k` of `grid` is planned (ns since the epoch).
    fn planned(&self, grid: (i64, i64), k: i64) -> i128 {
        i128::from(grid.1) + i128::from(k) * i128::from(grid.0)
    }

    /// The wait until `at` (ns since the epoch, store clock) plus [`MARGIN`], by the last
    /// reading of the store's clock and the time passed here since; at most [`RESYNC`].
    fn until(&self, at: i128) -> Duration {
        let Some((local, store_ns)) = self.chain.lock().sync else {
            return self.spec.period.min(RESYNC);
        };
        let now = i128::from(store_ns) + i128::try_from(local.elapsed().as_nanos()).unwrap_or(0);
        let left = u64::try_from((at - now).max(0)).unwrap_or(u64::MAX);
        (Duration::from_nanos(left) + MARGIN).min(RESYNC)
    }

    /// Plans the next wake-up in `wait`, unless the chain has ended.
    fn plan(&self, wait: Duration) {
        if self.state.lock().end.is_some() {
            return;
        }
        let fire = Fire(Some(self.arc()));
        match self.handle.schedule(move || fire.fire(), wait) {
            Ok(next) => {
                let mut state = self.state.lock();
                if state.end.is_none() {
                    let poke = (!wait.is_zero()).then(|| next.cancel_handle());
                    let done = state.next.replace(next);
                    drop(state);
                    drop(done);
                    // A trigger that came while this chain was claiming or running: its
                    // `wake_now` found no pending wake-up to move, or moved the old one. The
                    // state lock orders its flag before this swap, or its read of `next`
                    // after the store above.
                    if let Some(next) = poke.filter(|_| self.poked.swap(false, Ordering::Relaxed)) {
                        next.reset(Duration::ZERO);
                    }
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

    /// Counts on this job and on the node's store alike.
    fn count(&self, f: impl Fn(&Counters)) {
        f(&self.stats);
        f(&self.store.stats);
    }

    /// Hands `err` to the job's handler on the pool, or, without one, to the pool's panic
    /// handler as the panic of a separate one-shot task (the job itself goes on). If the pool
    /// refuses (it is shutting down), the handler runs here, or the message goes to stderr.
    fn report(&self, err: ClusterError) {
        match &self.on_error {
            Some(handler) => {
                let h = handler.clone();
                let err2 = err.clone();
                let call = move || {
                    // A panicking handler must not stop the job; its payload is dropped here.
                    let _ = panic::catch_unwind(AssertUnwindSafe(|| h(err2)));
                };
                if self.handle.execute(call).is_err() {
                    // The pool is shutting down; the store's thread must not run user code.
                    let h = handler.clone();
                    let spawned = std::thread::Builder::new()
                        .name("wheelpool-pg-report".into())
                        .spawn(move || {
                            let _ = panic::catch_unwind(AssertUnwindSafe(|| h(err)));
                        });
                    if let Err(e) = spawned {
                        eprintln!("wheelpool cluster: cannot report an error: {e}");
                    }
                }
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

/// `first`, doubled for each failure after the first, at most [`MAX_RETRY`].
fn retry_after(first: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    first.saturating_mul(1 << doublings).min(MAX_RETRY)
}

impl LocalJob for Shared {
    fn name(&self) -> &str {
        &self.spec.job
    }

    /// Moves the pending wake-up to now (a trigger); a chain in the middle of a claim or run
    /// finds the flag when it plans its next wake-up, and plans it for now.
    fn wake_now(&self) {
        self.poked.store(true, Ordering::Relaxed);
        let next = self.state.lock().next.as_ref().map(|f| f.cancel_handle());
        if let Some(next) = next {
            next.reset(Duration::ZERO);
        }
    }
}

impl ClusterTask {
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
    /// pool shut down. Do not call it from a task of the same pool.
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

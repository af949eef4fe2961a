//! One node's side of a cluster job: a chain of one-shot wake-ups on the pool, each planned
//! from the store's clock. Its handle is `ClusterTask` (`handle.rs`), what a run sees is
//! [`ClusterRun`] (`run.rs`).
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

use super::batch::{ClaimAnswer, ClaimRequest, Outcome, Reply};
use super::calls::{on_store_thread, LocalJob, StoreCore};
use super::error::{ClusterError, SkipReason, StoreError};
use super::run::{ClusterRun, Won};
use super::schedule::{nanos, shown, Schedule, Stored};
use super::stats::Counters;
use crate::sync::{Arc, AtomicBool, Condvar, Mutex, Ordering, Weak};
use crate::{Handle, ScheduleError, ScheduledFuture, TaskError};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Wake this long after a run's planned time (by the estimate of the store's clock). The
/// estimate errs late, by the time the answer took to come back, so this only covers rounding.
const MARGIN: Duration = Duration::from_millis(1);

/// Never sleep longer than this without asking the store again: bounds how far a node's clock
/// may drift from the store's, and how late a node sees a trigger or a takeover.
pub(super) const RESYNC: Duration = Duration::from_secs(60);

/// First retry after a failed claim; doubles up to [`MAX_RETRY`].
pub(super) const MIN_RETRY: Duration = Duration::from_millis(20);
pub(super) const MAX_RETRY: Duration = Duration::from_secs(2);

/// Retry after the pool refused a wake-up or a run as full.
pub(super) const SATURATED_RETRY: Duration = Duration::from_millis(20);

/// Retry after finding the job's row locked; doubles up to [`MAX_RETRY`].
/// How long after a run's planned time a node claims it when another node ran the job's
/// last run (at most a quarter of the period): the node that ran a job keeps it while it
/// claims on time, and the others' claims find the run taken instead of racing for its row
/// at the start of the period. Failover (or a late owner) costs this much more lateness.
const STANDBY: Duration = Duration::from_millis(30);
pub(super) const BUSY_RETRY: Duration = Duration::from_millis(5);

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
    pub(super) schedule: Schedule,
    pub(super) lease: Duration,
    pub(super) grace: Duration,
    pub(super) take_over: bool,
    pub(super) keep_alive: bool,
    pub(super) survive_panics: bool,
}

impl Spec {
    fn grid(&self) -> (i64, i64) {
        self.schedule.grid()
    }

    /// This node's settings as the row would hold them.
    fn stored(&self) -> Stored {
        Stored {
            grid: self.grid(),
            cron: self.schedule.cron_text().to_owned(),
        }
    }
}

pub(super) struct Shared {
    pub(super) spec: Spec,
    pub(super) store: Arc<StoreCore>,
    pub(super) handle: Handle,
    pub(super) on_error: Option<ErrorHandler>,
    pub(super) body: Mutex<Body>,
    pub(super) state: Mutex<State>,
    pub(super) ended: Condvar,
    pub(super) chain: Mutex<Chain>,
    /// A trigger on this node's store asked for a claim now (see `LocalJob::wake_now`).
    poked: AtomicBool,
    /// The pool refused the last wake-up as full (reported once per streak).
    saturated: AtomicBool,
    pub(super) stats: Counters,
    me: Weak<Shared>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) end: Option<Result<(), TaskError>>,
    pub(super) next: Option<ScheduledFuture<()>>,
}

/// The user's body and handler are never dropped on the store's thread (their captures'
/// `Drop` is user code, and may block or panic): the chain's last reference can go there (an
/// answer's callback), so its drop hands them to the pool, or to a thread of their own.
impl Drop for Shared {
    fn drop(&mut self) {
        if !on_store_thread() {
            return;
        }
        let body: Body = std::mem::replace(self.body.get_mut(), Box::new(|_| {}));
        let parts = Arc::new(Mutex::new(Some((body, self.on_error.take()))));
        let in_pool = parts.clone();
        if self
            .handle
            .execute(move || drop(in_pool.lock().take()))
            .is_err()
        {
            if let Some(parts) = parts.lock().take() {
                let spawned = std::thread::Builder::new()
                    .name("wheelpool-pg-drop".into())
                    .spawn(move || drop(parts));
                if let Err(e) = spawned {
                    eprintln!(
                        "wheelpool cluster: cannot drop a job's body off the store thread: {e}"
                    );
                }
            }
        }
    }
}

/// What the chain remembers between its steps.
#[derive(Default)]
pub(super) struct Chain {
    /// The row holds the job (registered by this chain, or found there).
    registered: bool,
    /// The last claim this chain handled: ran, or gave up.
    pub(super) known: i64,
    /// The last reading of the store's clock (ns since the epoch), and when it arrived.
    sync: Option<(Instant, i64)>,
    /// Failed claims in a row, and busy rows in a row.
    pub(super) errors: u32,
    pub(super) busy: u32,
    /// The stored settings last reported as a mismatch (reported once per change).
    mismatch: Option<Stored>,
    /// A cron job: the occurrence the next claim names (`None`: none known yet; the claim
    /// then asks for the row's state, see `cron_chain.rs`).
    #[cfg(feature = "cron")]
    pub(super) target: Option<i64>,
}

crate::sync::thread_local! {
    /// Set while this thread hands a wake-up or a run to the pool: a closure the pool drops
    /// then is a refusal the caller sees as an error and handles (a full pool is retried),
    /// not a shutdown that ends the chain.
    static HANDING_OVER: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with [`HANDING_OVER`] set.
pub(super) fn handing_over<R>(f: impl FnOnce() -> R) -> R {
    HANDING_OVER.with(|h| h.set(true));
    let r = f();
    HANDING_OVER.with(|h| h.set(false));
    r
}

pub(super) fn refused_here() -> bool {
    HANDING_OVER.with(Cell::get)
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
            if !refused_here() {
                shared.end(Err(TaskError::Shutdown));
            }
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
    ) -> Result<Arc<Shared>, ClusterError> {
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
            saturated: AtomicBool::new(false),
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
        Ok(shared)
    }

    pub(super) fn arc(&self) -> Arc<Shared> {
        self.me.upgrade().expect("a run holds its chain")
    }

    /// Inserts the job's row if missing and checks (or, with `take_over`, moves) its
    /// settings.
    async fn register(&self) -> Result<(), ClusterError> {
        let stored = self
            .store
            .register(
                &self.spec.job,
                self.spec.stored(),
                nanos(self.spec.grace),
                self.spec.take_over,
            )
            .await?;
        if !stored.matches(&self.spec.schedule) {
            return Err(self.mismatch(&stored));
        }
        self.chain.lock().registered = true;
        Ok(())
    }

    fn mismatch(&self, stored: &Stored) -> ClusterError {
        ClusterError::ConfigMismatch {
            job: self.spec.job.to_string(),
            stored: shown(stored),
            ours: self.spec.schedule.shown(),
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
        let Some((want, until_ns, probe)) = self.aim_claim() else {
            self.end(Ok(())); // a cron schedule with no occurrence left
            return;
        };
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
            cron: spec.schedule.cron_text().into(),
            want,
            until_ns,
            reply: Reply::new(move |answer| shared.answered(answer, probe)),
        });
    }

    /// The store's answer to a claim (on the store's thread); `probe`: a cron claim that
    /// named no occurrence.
    fn answered(self: Arc<Self>, answer: Result<ClaimAnswer, ClusterError>, probe: bool) {
        let mut a = match answer {
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
            // Only an answer that read the row and found our grid ends a mismatch: a locked
            // (busy) or missing row says nothing about it, and must not make the next
            // mismatch be reported again.
            if !matches!(
                a.outcome,
                Outcome::Mismatch | Outcome::Busy | Outcome::Missing
            ) {
                chain.mismatch = None;
            }
        }
        if probe {
            // It named no occurrence: what follows starts after the row's last run.
            a.k = a.last_run.saturating_add(1);
            a.due = a.last_run;
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
                let stored = Stored {
                    grid: a.grid,
                    cron: a.cron.clone().unwrap_or_default(),
                };
                let last = self.chain.lock().mismatch.replace(stored.clone());
                if last.as_ref() != Some(&stored) {
                    self.report(self.mismatch(&stored));
                }
                self.plan(self.spec.schedule.step().min(RESYNC));
            }
            Outcome::Won { run, claim } => {
                self.unconfirmed(&a);
                self.skipped(a.grid, a.last_run + 1, a.k - 1, SkipReason::Misfired);
                self.start_run(won(run, claim, false));
            }
            Outcome::Triggered { run, claim } => {
                self.unconfirmed(&a);
                self.start_run(won(run, claim, true));
            }
            Outcome::Redeliver {
                run,
                claim,
                trigger,
            } => {
                // The runs the lost claim gave up are reported now, as its answer would have.
                if !trigger {
                    self.skipped(a.grid, a.from, run - 1, SkipReason::Misfired);
                }
                if !trigger && i128::from(a.store_ns) > self.deadline(a.grid, run) {
                    self.skipped(a.grid, run, run, SkipReason::Misfired);
                    self.handled(won(run, claim, trigger), false);
                } else {
                    self.start_run(won(run, claim, trigger));
                }
            }
            #[cfg(feature = "cron")]
            _ if self.spec.schedule.occurrences().is_some() => self.answered_cron(&a),
            Outcome::Stale => self.plan(Duration::ZERO), // only a cron claim is answered so
            Outcome::Leased => {
                // The current run is claimed and its lease held: try the next run when it
                // comes (the holder has usually released by then, and if it died after
                // releasing, the next run is not held up by a lease that no longer counts).
                // A run already due waits for the lease to end.
                let next = self.planned(a.grid, a.k);
                let at = if a.k > a.due {
                    next
                } else {
                    next.max(i128::from(a.until_ns))
                };
                self.plan(self.until(at) + self.standby());
            }
            Outcome::Paused => {
                self.skipped(a.grid, a.last_run + 1, a.k - 1, SkipReason::Misfired);
                self.skipped(a.grid, a.k, a.due, SkipReason::Paused);
                let next = self.planned(a.grid, a.due + 1);
                self.plan(self.until(next));
            }
            Outcome::Taken | Outcome::Idle => {
                if a.outcome == Outcome::Taken {
                    self.count(|c| Counters::bump(&c.found_taken));
                }
                let next = self.planned(a.grid, a.k);
                let standby = if a.outcome == Outcome::Taken {
                    self.standby()
                } else {
                    Duration::ZERO
                };
                self.plan(self.until(next) + standby);
            }
        }
    }

    /// Until when run `run` of `grid` may be claimed (ns since the epoch, store clock):
    /// `grace` after the next run is planned (see `sql::CLAIM`).
    fn deadline(&self, grid: (i64, i64), run: i64) -> i128 {
        let grace = nanos(self.spec.grace);
        #[cfg(feature = "cron")]
        if let Some(occ) = self.spec.schedule.occurrences() {
            return i128::from(occ.deadline(run, grace));
        }
        self.planned(grid, run + 1) + i128::from(grace)
    }

    /// What the next claim names: the occurrence, until when it is claimable, and whether
    /// it names none (see `cron_chain.rs`); a periodic claim names nothing. `None`: a cron
    /// schedule has no occurrence left.
    fn aim_claim(&self) -> Option<(Option<i64>, i64, bool)> {
        #[cfg(feature = "cron")]
        if let Some(occ) = self.spec.schedule.occurrences() {
            return self.cron_claim(occ);
        }
        Some((None, 0, false))
    }

    /// When run `k` of `grid` is planned (ns since the epoch).
    pub(super) fn planned(&self, grid: (i64, i64), k: i64) -> i128 {
        i128::from(grid.1) + i128::from(k) * i128::from(grid.0)
    }

    /// The wait until `at` (ns since the epoch, store clock) plus [`MARGIN`], by the last
    /// reading of the store's clock and the time passed here since; at most [`RESYNC`].
    pub(super) fn until(&self, at: i128) -> Duration {
        let Some(now) = self.store_now() else {
            return self.spec.schedule.step().min(RESYNC);
        };
        let left = u64::try_from((at - now).max(0)).unwrap_or(u64::MAX);
        (Duration::from_nanos(left) + MARGIN).min(RESYNC)
    }

    /// The store's clock now (ns since the epoch), by its last reading and the time passed
    /// here since; `None` before the first answer.
    pub(super) fn store_now(&self) -> Option<i128> {
        let (local, store_ns) = self.chain.lock().sync?;
        Some(i128::from(store_ns) + i128::try_from(local.elapsed().as_nanos()).unwrap_or(0))
    }

    /// The delay of a claim for a run whose last run another node ran (see [`STANDBY`]).
    pub(super) fn standby(&self) -> Duration {
        STANDBY.min(self.spec.schedule.step() / 4)
    }

    /// Plans the next wake-up in `wait`, unless the chain has ended.
    pub(super) fn plan(&self, wait: Duration) {
        if self.state.lock().end.is_some() {
            return;
        }
        let fire = Fire(Some(self.arc()));
        match handing_over(|| self.handle.schedule(move || fire.fire(), wait)) {
            Ok(next) => {
                self.saturated.store(false, Ordering::Relaxed);
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
            Err(err @ ScheduleError::Saturated { .. }) => {
                // A full pool (`max_pending`) is a moment, not an end: try again shortly,
                // from the store's thread, and say so once per streak.
                if !self.saturated.swap(true, Ordering::Relaxed) {
                    self.report(err.into());
                }
                let shared = self.arc();
                self.store.spawn(async move {
                    tokio::time::sleep(SATURATED_RETRY).await;
                    shared.plan(wait.saturating_sub(SATURATED_RETRY));
                });
            }
            Err(_) => {
                self.end(Err(TaskError::Shutdown));
            }
        }
    }

    pub(super) fn end(&self, result: Result<(), TaskError>) -> bool {
        let mut state = self.state.lock();
        if state.end.is_some() {
            return false;
        }
        state.end = Some(result);
        self.ended.notify_all();
        true
    }
}

/// `first`, doubled for each failure after the first, at most [`MAX_RETRY`].
pub(super) fn retry_after(first: Duration, failures: u32) -> Duration {
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

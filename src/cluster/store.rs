//! The lock-store contract: what a database (PostgreSQL here, Redis or another later) must do
//! for a cluster job. See the module docs of [`cluster`](super) for the rule it implements.

use super::ClusterError;
use std::fmt;
use std::time::Duration;

/// What a node asks the store for when its wake-up for a job comes.
///
/// # Examples
///
/// ```
/// use wheelpool::cluster::ClaimRequest;
/// use std::time::Duration;
///
/// let req = ClaimRequest {
///     job: "nightly-cleanup",
///     owner: "replica-1#7f3a",
///     period: Duration::from_secs(86_400),
///     offset: Duration::from_secs(3 * 3600), // 03:00 UTC
///     lease: Duration::from_secs(600),
/// };
/// assert!(req.offset < req.period);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimRequest<'a> {
    /// The job's cluster-wide name (the lock's key).
    pub job: &'a str,
    /// Who claims: unique per node and job (the node's label plus a random suffix).
    pub owner: &'a str,
    /// Run `k` is planned at `offset + k * period` on the store's clock, counted from the Unix
    /// epoch.
    pub period: Duration,
    /// Where the grid starts within a period (less than `period`).
    pub offset: Duration,
    /// How long the claim holds the job at most (`at_most_for`).
    pub lease: Duration,
}

/// The store's answer to a claim: its clock, and whether this node won the current run.
///
/// # Examples
///
/// ```
/// use wheelpool::cluster::{Claim, ClaimOutcome};
/// use std::time::Duration;
///
/// let claim = Claim { store_time: Duration::from_secs(1_700_000_000), outcome: ClaimOutcome::Won { run: 17 } };
/// assert_eq!(claim.outcome, ClaimOutcome::Won { run: 17 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The store's clock when it decided, as time since the Unix epoch. The node plans its
    /// next wake-up from this reading, not from its own wall clock.
    pub store_time: Duration,
    /// Whether the claim was won.
    pub outcome: ClaimOutcome,
}

/// How a claim ended.
///
/// # Examples
///
/// ```
/// use wheelpool::cluster::ClaimOutcome;
/// use std::time::Duration;
///
/// let blocked = ClaimOutcome::Leased { until: Duration::from_secs(1_700_000_060) };
/// assert!(!matches!(blocked, ClaimOutcome::Won { .. }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimOutcome {
    /// This node owns run `run` now, under a lease of `ClaimRequest::lease`.
    Won {
        /// The run number: `(store_time - offset) / period`, rounded down.
        run: u64,
    },
    /// The current run was already claimed (by this node or another): nothing to do until the
    /// next one.
    AlreadyRun,
    /// Another claim's lease is still held; it ends at `until` (store clock, since the epoch).
    Leased {
        /// When the holder's lease runs out.
        until: Duration,
    },
}

/// How a release ended.
///
/// # Examples
///
/// ```
/// use wheelpool::cluster::Released;
///
/// let r = Released::LeaseExpired { taken_over: false };
/// assert_ne!(r, Released::InTime);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Released {
    /// The lease was still held: it now ends at once, so the next run need not wait for it.
    InTime,
    /// The lease had already run out before the release.
    LeaseExpired {
        /// True if another node has claimed a later run since.
        taken_over: bool,
    },
}

/// A store of job locks shared by every node of a cluster: the one place that decides which
/// node runs which planned run.
///
/// An implementation must make [`try_claim`](Self::try_claim) atomic and take the time from
/// its own clock (never from the caller's), so that nodes whose clocks disagree still agree on
/// run numbers. [`PgLockStore`](super::PgLockStore) is the PostgreSQL one; a Redis one would
/// do the same in a Lua script with `TIME`.
///
/// Methods block the calling worker until the store answers; an implementation must bound
/// that (timeouts) and must not panic.
///
/// # Examples
///
/// A store that lives in memory, with a clock of its own (enough for one process, and a
/// picture of the contract):
///
/// ```
/// use std::sync::Mutex;
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use wheelpool::cluster::{Claim, ClaimOutcome, ClaimRequest, ClusterError, LockStore, Released};
///
/// #[derive(Debug, Default)]
/// struct MemoryStore(Mutex<Option<(u64, String, Duration)>>); // last run, owner, lease end
///
/// impl LockStore for MemoryStore {
///     fn try_claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, ClusterError> {
///         let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
///         let run = ((now - req.offset).as_nanos() / req.period.as_nanos()) as u64;
///         let mut row = self.0.lock().unwrap();
///         let outcome = match &*row {
///             Some((_, _, until)) if *until > now => ClaimOutcome::Leased { until: *until },
///             Some((last, _, _)) if *last >= run => ClaimOutcome::AlreadyRun,
///             _ => {
///                 *row = Some((run, req.owner.to_owned(), now + req.lease));
///                 ClaimOutcome::Won { run }
///             }
///         };
///         Ok(Claim { store_time: now, outcome })
///     }
///
///     fn release(&self, _job: &str, run: u64, owner: &str) -> Result<Released, ClusterError> {
///         let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
///         let mut row = self.0.lock().unwrap();
///         match row.as_mut() {
///             Some((r, o, until)) if *r == run && o == owner && *until > now => {
///                 *until = now;
///                 Ok(Released::InTime)
///             }
///             Some((r, o, _)) => Ok(Released::LeaseExpired { taken_over: *r != run || o != owner }),
///             None => Ok(Released::LeaseExpired { taken_over: true }),
///         }
///     }
/// }
///
/// let store = MemoryStore::default();
/// let req = ClaimRequest {
///     job: "j", owner: "a", period: Duration::from_secs(3600), offset: Duration::ZERO,
///     lease: Duration::from_secs(60),
/// };
/// let ClaimOutcome::Won { run } = store.try_claim(&req).unwrap().outcome else { panic!() };
/// assert!(matches!(store.try_claim(&ClaimRequest { owner: "b", ..req }).unwrap().outcome,
///                  ClaimOutcome::Leased { .. }));
/// assert_eq!(store.release("j", run, "a").unwrap(), Released::InTime);
/// // Released, but run `run` is done: nobody runs it again this hour.
/// assert_eq!(store.try_claim(&ClaimRequest { owner: "b", ..req }).unwrap().outcome,
///            ClaimOutcome::AlreadyRun);
/// ```
pub trait LockStore: Send + Sync + fmt::Debug + 'static {
    /// Atomically: read the store's clock, compute the current run number
    /// `k = (now - offset) / period`, and give `req.owner` a lease on the job until
    /// `now + lease` if no earlier claim of run `k` or later exists and no lease is held.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Unavailable`] when the store cannot be reached (the run is skipped),
    /// [`ClusterError::Store`] when it fails.
    fn try_claim(&self, req: &ClaimRequest<'_>) -> Result<Claim, ClusterError>;

    /// Ends `owner`'s lease on run `run` of `job` now, if it still holds it, and says whether
    /// the lease had run out already.
    ///
    /// # Errors
    ///
    /// As [`try_claim`](Self::try_claim); the lease then ends when it runs out.
    fn release(&self, job: &str, run: u64, owner: &str) -> Result<Released, ClusterError>;
}

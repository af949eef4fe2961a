//! Jobs that run **once per planned run across several processes** (feature `postgres`).
//!
//! Several replicas of a service each run a pool, and each schedules the nightly cleanup; the
//! cleanup should still run once a night, not once per replica. Give the job a cluster-wide
//! name and a shared [`LockStore`] ([`PgLockStore`] on PostgreSQL), and schedule it on every
//! replica:
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use wheelpool::cluster::{ClusterJob, PgLockStore};
//! use wheelpool::ScheduledThreadPool;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = ScheduledThreadPool::new();
//! let store = Arc::new(PgLockStore::connect("postgresql://app@db:5432/app")?);
//! let job = ClusterJob::builder("nightly-cleanup", store)
//!     .offset(Duration::from_secs(3 * 3600))   // at 03:00 UTC (by the database's clock)
//!     .at_most_for(Duration::from_secs(3600))  // a dead replica blocks it for an hour at most
//!     .on_error(|err| eprintln!("cleanup: {err}"))
//!     .build()?;
//! let task = job.schedule_at_fixed_rate(&pool.handle(), |run| {
//!     println!("cleanup run {} on {}", run.number(), run.node());
//! }, Duration::from_secs(24 * 3600))?;
//! # task.cancel();
//! # Ok(())
//! # }
//! ```
//!
//! # The rule
//!
//! - **Runs are numbered by the database's clock.** Run `k` of a job is planned at
//!   `offset + k * period` after the Unix epoch, *as the store's clock reads it*. A claim reads
//!   the store's clock once, in the same atomic statement that decides it, and computes the
//!   current run number `k = (now - offset) / period` there. No node's clock is ever compared
//!   with another's, so nodes whose clocks disagree by seconds or hours still agree on `k`.
//! - **A run is claimed once.** The store keeps, per job, the last claimed run number and a
//!   lease. A claim of run `k` wins only if the last claimed run is older than `k` and no lease
//!   is held; it then records `k` and a lease until `now + at_most_for`. A run number is never
//!   claimed twice, so a node whose wake-up comes late (or early, or twice) in the same period
//!   finds it taken and does nothing. That is what ShedLock needs `lockAtLeastFor` and
//!   synchronized clocks for; here the lease can end the moment the run returns.
//! - **Every node tries every run.** Each node plans its wake-ups from its last reading of the
//!   store's clock (not from its own wall clock): at the start of each period, plus 1 ms, and at
//!   least once a minute so that its clock's rate cannot drift far from the store's. The
//!   first node to claim runs the job; the others find it taken. So while at least one node is
//!   up, every planned run is run by exactly one node, and never by two.
//! - **Death and leases.** A node that dies mid-run leaves its lease; the other nodes, seeing
//!   it held, wake up when it ends (at most `at_most_for` after the claim) and the first of them
//!   claims the run current at that moment. The dead node's run is **not** run again (at most
//!   once, like ShedLock; a job that must not miss a run should make each run catch up on what
//!   the last one left). Periods that start while a lease is held are claimed when it ends, if
//!   it ends within them, or skipped (like [`MissedTicks::Skip`](crate::MissedTicks::Skip)):
//!   runs of one job never overlap while the lease holds.
//! - **A run that outlives its lease** is reported ([`ClusterError::LeaseExpired`], saying
//!   whether another node has taken over meanwhile, in which case the two may have
//!   overlapped). Pick `at_most_for` above the longest run.
//! - **Time jumps.** If the store's clock steps back, run numbers go back and claims find them
//!   taken: runs are skipped until the clock catches up, never repeated. Changing a job's
//!   period restarts its count (the store keeps the period with the row); all nodes must use
//!   the same name, period and offset.
//!
//! # Where it runs, and failures
//!
//! Each wake-up is a one-shot task on the node's pool; the claim, the job body and the release
//! all run on that worker, and the store calls block it for a round trip (bounded by the
//! store's timeouts: see [`PgLockStore`]). A node runs at most one wake-up of a job at a time.
//!
//! The database unreachable or failing never panics a worker: the claim fails, the run is
//! skipped on this node, and the error goes to the handler set with
//! [`ClusterJobBuilder::on_error`] (without one: to the pool's panic handler, as the panic of
//! a separate one-shot task; see there). A release that fails leaves the lease to expire. The
//! store reconnects with backoff, and runs resume when the database is back. A bad connection
//! string is an error at setup ([`ClusterError::InvalidUrl`]).
//!
//! A claim whose answer is lost (the connection drops after the database committed it) counts
//! as claimed but is not run: the rule prefers a missed run to a double one.
//!
//! # Run it
//!
//! `cargo run --example cluster_job --features postgres` starts a throwaway PostgreSQL server
//! (or uses `DATABASE_URL`) and three nodes, and prints which node ran each period.

mod error;
mod job;
mod pg;
mod store;
mod task;

pub use error::ClusterError;
pub use job::{ClusterJob, ClusterJobBuilder};
pub use pg::PgLockStore;
pub use store::{Claim, ClaimOutcome, ClaimRequest, LockStore, Released};
pub use task::{ClusterRun, ClusterTask};

/// Which public types of this module cross threads, decided on purpose and checked at compile
/// time.
#[allow(dead_code)]
fn _thread_safety() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PgLockStore>();
    send_sync::<ClusterJob>();
    send_sync::<ClusterTask>();
    send_sync::<ClusterError>();
}

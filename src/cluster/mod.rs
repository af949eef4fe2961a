//! Jobs that run **once per planned run across several processes** (feature `postgres`).
//!
//! Several replicas of a service each run a pool, and each schedules the nightly cleanup; the
//! cleanup should still run once a night, not once per replica. Give the job a cluster-wide
//! name and a shared [`PgLockStore`] (PostgreSQL), and schedule it on every replica:
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
//!     .at_most_for(Duration::from_secs(60))    // a dead replica blocks it for a minute at most
//!     .keep_alive(true)                        // ... while a live one keeps its lease
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
//! With the `cron` feature too, a job can follow a calendar instead of a period:
//! [`ClusterJob::schedule_cron`] runs each occurrence of a [`Cron`](crate::cron::Cron)
//! expression in a time zone ("03:00 every night, Berlin time") once across the nodes, with
//! the same rule as below; an occurrence is named by its instant instead of a run number.
//!
//! # The rule
//!
//! What is guaranteed, and what it rests on. A *node* is one chain of wake-ups: one
//! `schedule_at_fixed_rate` call of one process.
//!
//! - **Runs are numbered by the database's clock.** Run `k` of a job is planned at
//!   `offset + k * period` after the Unix epoch, in nanoseconds, exactly (any period from 1 ms
//!   to 100 years; `Duration::from_secs(1) / 3` is fine). The store keeps the job's period
//!   and offset in its row, and every claim reads the store's clock once, in the same atomic
//!   statement that decides it. No node's clock is compared with another's.
//! - **A cron job's runs are named by their instants** (feature `cron`): an occurrence is
//!   due when the store's clock reaches its instant, and its run "number" is that instant in
//!   nanoseconds since the epoch. The row holds the expression and zone as the job's settings
//!   and, as for a period, the latest run claimed: an instant, after which alone a claim may
//!   take one. The database does not evaluate the expression: the node names the occurrence
//!   it claims and until when it is claimable (the next occurrence plus the grace), and the
//!   claim statement checks both against the store's clock. So two nodes whose clocks or
//!   expressions differ can never both run one instant, and a takeover to a new expression
//!   (or from a period to a calendar and back) runs nothing at or before the last instant
//!   claimed. Daylight saving follows the in-process rule
//!   ([`Handle::schedule_cron`](crate::Handle::schedule_cron)): a skipped time runs after the
//!   gap or not at all, a repeated time once.
//! - **A run is claimed at most once, ever**, across all nodes and all settings. The row holds
//!   the highest run number claimed; a claim takes the oldest run after it that is due and
//!   still claimable (run `k` is, until the *misfire grace* after run `k + 1` is planned),
//!   and only while no lease is held. Runs are taken in order, each once.
//! - **While a node can reach the store, every planned run is run or reported.** Each node
//!   wakes at each planned time (from its last reading of the store's clock, re-read at least
//!   once a minute) and claims. A claim that fails (a dead connection, a timeout) is retried,
//!   on a fresh connection, with backoff; a wake-up or claim that lands late, even in a later
//!   period, still gets the run it was meant for while that run is claimable
//!   ([`ClusterJobBuilder::misfire_grace`]; default three periods, 1 s to 60 s). A run that
//!   nobody claimed in its grace, a run that came while the job was paused, and a run whose
//!   claimer's pool was shutting down are reported once, by the node that finds them
//!   ([`ClusterError::RunSkipped`] with its number, planned time and [`SkipReason`]), to
//!   its handler and its [`ClusterStats`].
//! - **A claim whose answer is lost is not lost.** Each claim carries the last claim its node
//!   handled; when the row shows a later claim made for this node that it never saw (the
//!   connection broke after the database committed), the next claim hands it back to that
//!   node, and to no other, with the reports of the runs it gave up.
//! - **A claim never confirmed is reported.** A run ends with a release that confirms it. If
//!   a claim's lease runs out unconfirmed (its node died mid-run, or lost the store, or lost
//!   the answer and did not claim again in time) and another node's claim replaces it, that
//!   node reports the run ([`SkipReason::Unconfirmed`]: it may not have run). It is never run
//!   again: at most once, like ShedLock, but never silently.
//! - **Every call is bounded on the client side** ([`PgLockStore`]): connect (TCP and login),
//!   claim, release, renew and the admin calls end within their timeout whatever the server
//!   does (frozen, silent, half-open); a timed-out connection is dropped and replaced. Calls
//!   are spread over several connections, so one stalled call does not hold up the node's
//!   other jobs. Claims (and releases) go in batches: one statement carries every claim
//!   that came while the last one was in flight (group commit), more statements run side by
//!   side only when a full batch waits, and a statement in flight for over 50 ms no longer
//!   holds the others back.
//! - **Which node runs a job.** The node that ran a job's last run claims the next one at its
//!   planned time; the others, having found the last run taken, claim each run 30 ms after
//!   its planned time (a quarter of the period if that is shorter) and find it taken. So a
//!   job stays on one node while that node claims on time (no race for its row at the start
//!   of every period, and no claims that must be tried again), and moves when that node is
//!   late by the standby delay, stops, or dies (then after its lease). Jobs spread over the
//!   nodes as they first win them; a cluster has no notion of balancing them.
//! - **Settings never drift silently.** A node whose period or offset (or cron expression and
//!   zone, compared as text) differ from the row's does not run the job and reports [`ClusterError::ConfigMismatch`] (an error from
//!   `schedule_at_fixed_rate` if it finds it then). Built with
//!   [`take_over`](ClusterJobBuilder::take_over), it moves the row to its settings instead:
//!   the new grid's first run is planned no earlier than the end of the old grid's last
//!   claimed period, so no stretch of time is run twice, and nodes still on the old settings
//!   stop running the job.
//! - **Leases.** A claim holds the job until `now + at_most_for` (store clock); the run's end
//!   releases it at once. A node that dies mid-run blocks the job for at most the lease; the
//!   runs that came meanwhile are claimed, in order, by the next node while within the grace.
//!   With [`keep_alive`](ClusterJobBuilder::keep_alive) the store's thread extends the lease
//!   every third of it while the run lasts (a run may also call [`ClusterRun::keep_alive`]),
//!   so a short lease gives fast failover without cutting long runs short. A run that
//!   outlives its lease is reported ([`ClusterError::LeaseExpired`], saying whether another
//!   node has taken over meanwhile, in which case the two may have overlapped).
//! - **Time jumps.** If the store's clock steps back, claims find the runs taken until it
//!   catches up: never repeated. If it steps forward, the runs jumped over are claimed while
//!   within the grace, and reported past it.
//!
//! What is **not** guaranteed:
//!
//! - **Exactly once is at most once plus a report.** A run whose node dies mid-run is not run
//!   again; it is reported (`Unconfirmed`) by the node that next claims the job.
//! - **A report can be lost with its answer in one case:** a claim that finds the job paused
//!   gives up the runs that came meanwhile in the database; if the connection drops after the
//!   database committed and before the answer arrives, those runs are not reported (they
//!   still never run). Claims that win a run do not have this gap (see above).
//! - **Deleting a job's row by hand forgets which runs ran.** The next claim registers the job
//!   again, and the run of the current period may run a second time. Pause a job instead.
//! - **Nodes' wake-ups are planned from the store's clock as last read**, re-read at every
//!   claim; a node whose own clock runs fast or slow by more than the standby delay between
//!   two claims may let another node take a run over (never twice).
//! - **A cron job's nodes must read the same time zone rules.** Each node turns wall-clock
//!   times into instants with its own time zone database; two that disagree on a zone (one
//!   updated for a change of its rules, one not) name one wall-clock time by two instants,
//!   and both may run. Ship one `tzdata` (or one build: the `cron` feature bundles a copy for
//!   machines without one) to every node.
//! - **A cron job starts with the first occurrence after it was first registered**; earlier
//!   occurrences are neither run nor reported. A stretch of more than 10 000 occurrences
//!   skipped at once (a per-second job down for hours) counts as 10 000 in the stats (its
//!   first 100 and its last are reported, as for a period).
//!
//! # Where it runs, and failures
//!
//! Each wake-up is a one-shot task on the node's pool that hands a claim to the store and
//! returns: no pool worker waits for the database. The store's own thread sends the claims
//! and hands won runs back to the pool; the body runs on a pool worker. A node runs at most
//! one wake-up, claim or run of a job at a time.
//!
//! The database unreachable or failing never panics a worker: the claim fails, the node
//! retries, and the error goes to the handler set with [`ClusterJobBuilder::on_error`]
//! (without one: to the pool's panic handler, as the panic of a separate one-shot task; see
//! there). Errors name their cause: a [`StoreError`] with the call, the kind of failure and
//! the database's SQLSTATE and message.
//!
//! # Seeing and steering it
//!
//! [`PgLockStore::jobs`] lists the store's jobs (period, offset, last run, which node ran it
//! and when, the lease, the next planned run by the database's clock);
//! [`PgLockStore::pause`], [`resume`](PgLockStore::resume) and
//! [`trigger`](PgLockStore::trigger) steer a job cluster-wide. [`ClusterTask::stats`] and
//! [`PgLockStore::stats`] count claims won, runs found taken, runs skipped by reason, failed
//! calls and claim latency, per job and per node.
//!
//! # Run it
//!
//! `cargo run --example cluster_job --features postgres` starts a throwaway PostgreSQL server
//! (or uses `DATABASE_URL`) and three nodes, and prints which node ran each period;
//! `cargo run --example cluster_jobs_table --features postgres` prints the job table;
//! `cargo run --example cluster_job --features postgres,cron` also runs a per-second cron job
//! on the three nodes.

mod batch;
#[cfg(feature = "cron")]
mod calendar;
mod calls;
mod checks;
#[cfg(feature = "cron")]
mod cron_chain;
mod error;
mod handle;
mod job;
mod pg;
mod report;
mod run;
mod running;
mod schedule;
mod send;
mod sql;
mod stats;
mod task;

pub use error::{ClusterError, SkipReason, StoreError, StoreErrorKind};
pub use handle::ClusterTask;
pub use job::{ClusterJob, ClusterJobBuilder};
pub use pg::{JobInfo, PgLockStore, PgLockStoreBuilder};
pub use run::ClusterRun;
pub use stats::ClusterStats;

/// Which public types of this module cross threads, decided on purpose and checked at compile
/// time.
#[allow(dead_code)]
fn _thread_safety() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PgLockStore>();
    send_sync::<ClusterJob>();
    send_sync::<ClusterTask>();
    send_sync::<ClusterError>();
    send_sync::<ClusterStats>();
}

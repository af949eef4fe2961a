//! The requests job chains queue for the store, how they are cut into batches, and how a
//! batch's rows are read back (see [`CLAIM`](super::sql::CLAIM) and [`RELEASE`](super::sql::RELEASE)).

use super::error::StoreError;
use super::ClusterError;
use crate::sync::Arc;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;
use tokio_postgres::Row;

/// Most claims (or releases) in one statement: large enough that a thousand jobs due at once
/// take a few round trips, small enough that the batches run on several connections, so on
/// several server cores, and the first runs start before the last claims are decided.
const MAX_BATCH: usize = 250;
/// What a node's job chain hands the store for a claim, and where the answer goes.
pub(super) struct ClaimRequest {
    pub(super) job: Arc<str>,
    pub(super) period_ns: i64,
    pub(super) offset_ns: i64,
    pub(super) owner: Arc<str>,
    pub(super) node: Arc<str>,
    pub(super) lease_us: i64,
    pub(super) grace_ns: i64,
    /// The last claim this owner handled (ran, or gave up).
    pub(super) known: i64,
    /// The job's cron text (empty for a period), and for a cron job the occurrence it claims
    /// and until when (see [`CLAIM`](super::sql::CLAIM)).
    pub(super) cron: Arc<str>,
    pub(super) want: Option<i64>,
    pub(super) until_ns: i64,
    pub(super) reply: Reply<ClaimAnswer>,
}

/// A lease to end now, and where the answer goes.
pub(super) struct ReleaseRequest {
    pub(super) job: Arc<str>,
    pub(super) claim: i64,
    pub(super) owner: Arc<str>,
    pub(super) reply: Reply<LeaseState>,
}

/// The store's answer to one claim; see [`CLAIM`](super::sql::CLAIM) for the outcomes.
#[derive(Debug, Clone)]
pub(super) struct ClaimAnswer {
    pub(super) outcome: Outcome,
    /// The row's last run before the claim, the run the claim looked at, and the last run
    /// due by the store's clock (meaningless for `Missing` and `Busy`).
    pub(super) last_run: i64,
    pub(super) k: i64,
    pub(super) due: i64,
    /// The stored grid.
    pub(super) grid: (i64, i64),
    pub(super) until_ns: i64,
    /// Another run (or trigger) was already due when this claim was made.
    pub(super) more: bool,
    /// The store's clock as the answer left it, and when the answer came.
    pub(super) store_ns: i64,
    pub(super) received: Instant,
    /// The first run a won (or handed back) claim gave up as too old: runs `from .. run - 1`.
    pub(super) from: i64,
    /// The unconfirmed claim this one superseded: its run, and whether it was a trigger.
    pub(super) orphan: Option<(i64, bool)>,
    /// The stored cron text, read for a `Mismatch` only.
    pub(super) cron: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Missing,
    Busy,
    Mismatch,
    /// A claim of this owner that it never ran: `run`, `claim`, and whether it is a trigger.
    Redeliver {
        run: i64,
        claim: i64,
        trigger: bool,
    },
    Leased,
    /// A cron claim's occurrence is past the time it could be claimed (see `sql::CLAIM`).
    Stale,
    Paused,
    Won {
        run: i64,
        claim: i64,
    },
    Triggered {
        run: i64,
        claim: i64,
    },
    Taken,
    Idle,
}

/// How a release or renewal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeaseState {
    /// The lease was held, and is now ended (release) or extended (renew).
    Held,
    /// It had run out; `taken_over` if the row holds a later claim.
    Expired { taken_over: bool },
    /// The row is locked by another transaction: nothing was done; send it again.
    Busy,
}

/// Requests waiting for a batch, and how many tasks are sending batches of them.
///
/// The rule is group commit: one sender per queue, sending everything queued while its last
/// statement ran as the next statement, so a burst of requests goes out in a few large
/// statements rather than many small ones (the server's cost is mostly per statement). More
/// senders start, up to one per connection, only when a full batch waits for each sender
/// already sending, or when a sender's statement has stalled.
pub(super) struct Queue<T> {
    items: VecDeque<T>,
    /// Sender tasks running, stalled ones included.
    senders: usize,
    /// Senders whose statement outlasted the stall bound and is still in flight.
    stalled: usize,
}

impl<T> Queue<T> {
    /// A sender that stopped without emptying the queue (it unwound) is counted out.
    pub(super) fn give_back_sender(&mut self) {
        self.senders = self.senders.saturating_sub(1);
    }

    /// A sender's statement has stalled; true if the caller must start another sender (by
    /// the rule of [`push`](Self::push)).
    pub(super) fn stall(&mut self, max: usize) -> bool {
        self.stalled += 1;
        self.wants_sender(max)
    }

    /// True, counting it, if a sender must start: fewer than `max` run and more than a full
    /// batch waits for each one sending (any item, if none is).
    fn wants_sender(&mut self, max: usize) -> bool {
        let sending = self.senders.saturating_sub(self.stalled);
        let start = self.senders < max && self.items.len() > MAX_BATCH * sending;
        self.senders += usize::from(start);
        start
    }

    /// A stalled statement ended (or its sender went away).
    pub(super) fn unstall(&mut self) {
        self.stalled = self.stalled.saturating_sub(1);
    }
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            items: VecDeque::new(),
            senders: 0,
            stalled: 0,
        }
    }
}

/// A request that belongs to one job.
pub(super) trait ForJob {
    fn job(&self) -> &str;
}

impl<T: ForJob> Queue<T> {
    /// Queues `item`; true if the caller must start a sender: none is sending (every one
    /// running has stalled), or a full batch waits for each one sending, and fewer than `max`
    /// run.
    pub(super) fn push(&mut self, item: T, max: usize) -> bool {
        self.items.push_back(item);
        self.wants_sender(max)
    }

    /// The next batch: up to [`MAX_BATCH`] requests in queue order, never two for one job
    /// (one statement updates a row once), the rest left for the next batch. `None`, and one
    /// sender fewer, once the queue is empty.
    pub(super) fn take(&mut self) -> Option<Vec<T>> {
        if self.items.is_empty() {
            self.senders -= 1;
            return None;
        }
        let mut names = HashSet::new();
        let mut batch = Vec::new();
        let mut later = VecDeque::new();
        while let Some(item) = self.items.pop_front() {
            if batch.len() == MAX_BATCH {
                self.items.push_front(item);
                break;
            }
            if names.insert(item.job().to_owned()) {
                batch.push(item);
            } else {
                later.push_back(item);
            }
        }
        later.append(&mut self.items);
        self.items = later;
        Some(batch)
    }
}

impl ForJob for ClaimRequest {
    fn job(&self) -> &str {
        &self.job
    }
}

impl ForJob for ReleaseRequest {
    fn job(&self) -> &str {
        &self.job
    }
}

/// Where the answer to a request goes. Dropped unanswered (a batch task that died), it
/// answers with an error, so a job chain is never left waiting for an answer that will not
/// come.
pub(super) struct Reply<T>(Option<Answer<T>>);

/// The callback behind a [`Reply`].
type Answer<T> = Box<dyn FnOnce(Result<T, ClusterError>) + Send>;

impl<T> Reply<T> {
    pub(super) fn new(f: impl FnOnce(Result<T, ClusterError>) + Send + 'static) -> Self {
        Self(Some(Box::new(f)))
    }

    /// Calls the callback; a panic in it (a bug) is contained here, so it cannot take down
    /// the sender that answers the rest of the batch.
    pub(super) fn send(mut self, answer: Result<T, ClusterError>) {
        if let Some(f) = self.0.take() {
            crate::panic::call_user(|| f(answer));
        }
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            let answer = Err(ClusterError::Store(StoreError::unanswered("batch")));
            crate::panic::call_user(|| f(answer));
        }
    }
}

/// Hands each request of a batch its row of `result` (rows carry the request's 1-based
/// position first), or the batch's error. A row that cannot be read answers its request
/// with an error; nothing here panics.
pub(super) fn answer_each<A, R>(
    result: Result<Vec<Row>, ClusterError>,
    replies: impl Iterator<Item = Reply<A>>,
    read: R,
) where
    R: Fn(&Row) -> Result<A, tokio_postgres::Error>,
{
    match result {
        Ok(rows) => {
            let mut by_position: HashMap<i64, A> = rows
                .iter()
                .filter_map(|row| Some((row.try_get::<_, i64>(0).ok()?, read(row).ok()?)))
                .collect();
            for (i, reply) in (1..).zip(replies) {
                reply.send(
                    by_position
                        .remove(&i)
                        .ok_or_else(|| ClusterError::Store(StoreError::unanswered("batch"))),
                );
            }
        }
        Err(err) => replies.for_each(|reply| reply.send(Err(err.clone()))),
    }
}

/// Reads one row of [`RELEASE`](super::sql::RELEASE).
pub(super) fn lease_state(row: &Row) -> Result<LeaseState, tokio_postgres::Error> {
    let held: bool = row.try_get(1)?;
    let ours: bool = row.try_get(2)?;
    let busy: bool = row.try_get(3)?;
    Ok(if held {
        LeaseState::Held
    } else if busy {
        LeaseState::Busy
    } else {
        LeaseState::Expired { taken_over: !ours }
    })
}

/// Reads one row of [`CLAIM`](super::sql::CLAIM).
pub(super) fn answer(row: &Row, received: Instant) -> Result<ClaimAnswer, tokio_postgres::Error> {
    let int = |i| -> Result<i64, tokio_postgres::Error> {
        Ok(row.try_get::<_, Option<i64>>(i)?.unwrap_or(0))
    };
    let (new_run, new_claim) = (int(8)?, int(9)?);
    let trigger = row.try_get::<_, Option<bool>>(10)?.unwrap_or(false);
    let outcome = match row.try_get::<_, &str>(1)? {
        "missing" => Outcome::Missing,
        "busy" => Outcome::Busy,
        "mismatch" => Outcome::Mismatch,
        "redeliver" => Outcome::Redeliver {
            run: new_run,
            claim: new_claim,
            trigger,
        },
        "leased" => Outcome::Leased,
        "stale" => Outcome::Stale,
        "paused" => Outcome::Paused,
        "won" => Outcome::Won {
            run: new_run,
            claim: new_claim,
        },
        "triggered" => Outcome::Triggered {
            run: new_run,
            claim: new_claim,
        },
        "taken" => Outcome::Taken,
        _ => Outcome::Idle,
    };
    let (last_run, k, due) = (int(4)?, int(5)?, int(6)?);
    let trigger_left: bool = row.try_get(11)?;
    Ok(ClaimAnswer {
        outcome,
        last_run,
        k,
        due,
        grid: (int(2)?, int(3)?),
        until_ns: int(7)?,
        more: trigger_left || matches!(outcome, Outcome::Won { run, .. } if run < due),
        store_ns: row.try_get(12)?,
        received,
        from: int(15)?,
        orphan: match row.try_get::<_, Option<i64>>(13)? {
            Some(run) => Some((run, row.try_get::<_, Option<bool>>(14)?.unwrap_or(false))),
            None => None,
        },
        cron: match outcome {
            Outcome::Mismatch => row.try_get(16)?,
            _ => None,
        },
    })
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A panic payload whose own `Drop` panics.
    struct PanicsOnDrop;

    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("the callback's panic payload panicked on drop");
            }
        }
    }

    /// A reply callback that panics with such a payload, answered (`send`) or dropped
    /// unanswered: the store's sender thread goes on either way.
    #[test]
    fn a_callback_panicking_with_a_payload_that_panics_on_drop_is_contained() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let bomb = || {
            Reply::<()>::new(|_| {
                CALLS.fetch_add(1, Ordering::SeqCst);
                std::panic::panic_any(PanicsOnDrop)
            })
        };
        let outcome = std::panic::catch_unwind(|| {
            bomb().send(Ok(()));
            drop(bomb());
        });
        std::panic::set_hook(hook);
        assert!(
            outcome.is_ok(),
            "a callback's panic unwound out of the reply"
        );
        assert_eq!(CALLS.load(Ordering::SeqCst), 2);
    }

    struct Req(String);

    impl ForJob for Req {
        fn job(&self) -> &str {
            &self.0
        }
    }

    fn req(i: usize) -> Req {
        Req(format!("job-{i}"))
    }

    #[test]
    fn one_sender_until_a_full_batch_waits_for_each() {
        let mut q = Queue::default();
        assert!(q.push(req(0), 4), "the first request starts a sender");
        for i in 1..MAX_BATCH {
            assert!(!q.push(req(i), 4), "request {i}: one sender takes it all");
        }
        // MAX_BATCH + 1 waiting for one sender: a second one starts.
        assert!(q.push(req(MAX_BATCH), 4));
        assert_eq!(q.senders, 2);
        for i in MAX_BATCH + 1..2 * MAX_BATCH {
            assert!(!q.push(req(i), 4), "request {i}");
        }
        assert!(
            q.push(req(2 * MAX_BATCH), 4),
            "a third past two full batches"
        );
        // Never more than `max`.
        for i in 0..10 * MAX_BATCH {
            q.push(req(2 * MAX_BATCH + 1 + i), 4);
        }
        assert_eq!(q.senders, 4);
        // The senders drain it in full batches, then give themselves back.
        let mut taken = 0;
        while let Some(batch) = q.take() {
            assert!(batch.len() <= MAX_BATCH);
            taken += batch.len();
            if q.items.is_empty() {
                break;
            }
        }
        assert_eq!(taken, 12 * MAX_BATCH + 1);
        assert_eq!(
            q.senders, 4,
            "no sender gave itself back while items waited"
        );
        for left in (0..4).rev() {
            assert!(q.take().is_none());
            assert_eq!(q.senders, left);
        }
    }

    #[test]
    fn a_stalled_sender_lets_another_start() {
        let mut q = Queue::default();
        assert!(q.push(req(0), 2));
        assert_eq!(q.take().map(|b| b.len()), Some(1));
        // Its statement stalls with nothing waiting: nobody starts yet...
        assert!(!q.stall(2));
        // ...but the next request starts a sender, as if none were sending.
        assert!(q.push(req(1), 2));
        assert_eq!(q.senders, 2);
        // That one stalls too: a third would pass `max`.
        assert!(!q.stall(2));
        assert!(!q.push(req(2), 2));
        // A stall that ends counts as sending again.
        q.unstall();
        q.unstall();
        assert_eq!(q.stalled, 0);
        assert_eq!(q.senders, 2);
        // A stall seen with requests waiting starts a sender at once.
        let mut q = Queue::default();
        assert!(q.push(req(0), 3));
        q.push(req(1), 3);
        assert!(q.stall(3));
        assert_eq!(q.senders, 2);
    }

    #[test]
    fn a_batch_holds_each_job_once() {
        let mut q = Queue::default();
        q.push(req(1), 1);
        q.push(req(2), 1);
        q.push(req(1), 1);
        let first: Vec<String> = q.take().unwrap().into_iter().map(|r| r.0).collect();
        assert_eq!(first, ["job-1", "job-2"]);
        let second: Vec<String> = q.take().unwrap().into_iter().map(|r| r.0).collect();
        assert_eq!(second, ["job-1"]);
    }
}

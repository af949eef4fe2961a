//! How claims and releases reach the database: queued by the job chains, sent in batches by
//! sender tasks on the store's runtime (group commit; see [`Queue`]), one statement a batch.

use super::batch::{answer, answer_each, lease_state, ClaimRequest, ForJob, Queue, ReleaseRequest};
use super::calls::StoreCore;
use crate::sync::{Arc, Mutex};
use std::future::Future;
use std::time::{Duration, Instant};
use tokio_postgres::types::ToSql;

/// How long a sender that starts waits before taking its first batch, so requests that come
/// together (every job due at one instant) go out in one statement, not in one each.
const GATHER: Duration = Duration::from_millis(1);
/// How long a batch's statement may be in flight before its sender stops counting as one:
/// well above a busy server's time for a full batch, well below any call timeout.
const STALL: Duration = Duration::from_millis(50);

impl StoreCore {
    /// Queues a claim; the answer goes to `req.reply` on the store's runtime.
    pub(super) fn claim(self: &Arc<Self>, req: ClaimRequest) {
        self.enqueue(
            req,
            |core| &core.claims,
            |core, batch| async move { core.claim_batch(batch).await },
        );
    }

    /// Queues a release; the answer goes to `req.reply` on the store's runtime.
    pub(super) fn release(self: &Arc<Self>, req: ReleaseRequest) {
        self.enqueue(
            req,
            |core| &core.releases,
            |core, batch| async move { core.release_batch(batch).await },
        );
    }

    /// Queues `req` in `queue`, and starts a sender when the queue's rule asks for one (see
    /// [`Queue::push`]).
    fn enqueue<T, F, Fut>(self: &Arc<Self>, req: T, queue: QueueOf<T>, send: F)
    where
        T: ForJob + Send + 'static,
        F: Fn(Arc<Self>, Vec<T>) -> Fut + Copy + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        if queue(self).lock().push(req, self.connections()) {
            self.start_sender(queue, send);
        }
    }

    /// A task that sends the queue's batches with `send`, one statement at a time, until the
    /// queue is empty. A statement still in flight after [`STALL`] (a frozen backend, a lost
    /// network) no longer counts as sending: the queue may start another sender on another
    /// connection, so one stuck call holds up only its own batch.
    fn start_sender<T, F, Fut>(self: &Arc<Self>, queue: QueueOf<T>, send: F)
    where
        T: ForJob + Send + 'static,
        F: Fn(Arc<Self>, Vec<T>) -> Fut + Copy + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let core = self.clone();
        self.runtime.spawn(async move {
            // If this task unwinds or is dropped, the sender (and its stall) it counts for is
            // given back, so later requests still start one.
            let mut sending = Sending {
                core,
                queue,
                done: false,
                stalled: false,
            };
            tokio::time::sleep(GATHER).await;
            loop {
                let Some(batch) = queue(&sending.core).lock().take() else {
                    sending.done = true; // `take` gave the sender back
                    return;
                };
                let call = send(sending.core.clone(), batch);
                let mut call = std::pin::pin!(call);
                if tokio::time::timeout(STALL, call.as_mut()).await.is_ok() {
                    continue;
                }
                sending.stalled = true;
                if queue(&sending.core)
                    .lock()
                    .stall(sending.core.connections())
                {
                    sending.core.start_sender(queue, send);
                }
                call.await;
                sending.stalled = false;
                queue(&sending.core).lock().unstall();
            }
        });
    }

    async fn claim_batch(&self, batch: Vec<ClaimRequest>) {
        let sent = Instant::now();
        let names: Vec<&str> = batch.iter().map(|r| &*r.job).collect();
        let periods: Vec<i64> = batch.iter().map(|r| r.period_ns).collect();
        let offsets: Vec<i64> = batch.iter().map(|r| r.offset_ns).collect();
        let owners: Vec<&str> = batch.iter().map(|r| &*r.owner).collect();
        let nodes: Vec<&str> = batch.iter().map(|r| &*r.node).collect();
        let leases: Vec<i64> = batch.iter().map(|r| r.lease_us).collect();
        let graces: Vec<i64> = batch.iter().map(|r| r.grace_ns).collect();
        let known: Vec<i64> = batch.iter().map(|r| r.known).collect();
        let crons: Vec<&str> = batch.iter().map(|r| &*r.cron).collect();
        let wants: Vec<Option<i64>> = batch.iter().map(|r| r.want).collect();
        let untils: Vec<i64> = batch.iter().map(|r| r.until_ns).collect();
        let args: [&(dyn ToSql + Sync); 11] = [
            &names, &periods, &offsets, &owners, &nodes, &leases, &graces, &known, &crons, &wants,
            &untils,
        ];
        let args = &args;
        let result = self
            .bounded(
                "claim",
                |s| async move { s.client.query(&s.claim, args).await },
            )
            .await;
        let received = Instant::now();
        self.stats.claim_latency.record(received - sent);
        let replies = batch.into_iter().map(|r| r.reply);
        answer_each(result, replies, |row| answer(row, received));
    }

    async fn release_batch(&self, batch: Vec<ReleaseRequest>) {
        let names: Vec<&str> = batch.iter().map(|r| &*r.job).collect();
        let claims: Vec<i64> = batch.iter().map(|r| r.claim).collect();
        let owners: Vec<&str> = batch.iter().map(|r| &*r.owner).collect();
        let args: [&(dyn ToSql + Sync); 3] = [&names, &claims, &owners];
        let args = &args;
        let result = self
            .bounded("release", |s| async move {
                s.client.query(&s.release, args).await
            })
            .await;
        let replies = batch.into_iter().map(|r| r.reply);
        answer_each(result, replies, lease_state);
    }
}

/// A running sender of one queue's batches.
struct Sending<T: 'static> {
    core: Arc<StoreCore>,
    queue: QueueOf<T>,
    done: bool,
    /// Its statement outlasted [`STALL`] and is still in flight.
    stalled: bool,
}

impl<T: 'static> Drop for Sending<T> {
    fn drop(&mut self) {
        let mut queue = (self.queue)(&self.core).lock();
        if self.stalled {
            queue.unstall();
        }
        if !self.done {
            queue.give_back_sender();
        }
    }
}

/// Which of the store's queues a sender serves.
type QueueOf<T> = fn(&StoreCore) -> &Mutex<Queue<T>>;

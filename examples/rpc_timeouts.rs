//! A fake RPC client: every request arms a timeout on the pool and cancels it when the reply
//! comes. `cancel()` returning true means the timeout had not fired: its closure will never run
//! (or, if it was just starting, its result is dropped). Like a real client, each request also
//! has a completion slot that the reply and the timeout race to claim, so a request ends exactly
//! once even when both land in the same instant.
//!
//! The "server" is simulated with the same pool: each reply is scheduled after a random latency,
//! some of them longer than the timeout.
//!
//! Run it with `cargo run --example rpc_timeouts`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wheelpool::ScheduledThreadPool;

/// How many requests the client sends.
const REQUESTS: usize = 10_000;
/// How long the client waits for a reply.
const TIMEOUT: Duration = Duration::from_millis(50);
/// Server latency is uniform in 0..MAX_LATENCY: with 80 ms, about 5 in 8 replies beat a 50 ms
/// timeout.
const MAX_LATENCY_MS: u64 = 80;

#[derive(Default)]
struct Tally {
    /// The reply came first and cancelled the timeout.
    replied: AtomicUsize,
    /// The timeout fired: the request failed.
    timed_out: AtomicUsize,
    /// A reply that came after its timeout had fired (dropped by the client).
    late_replies: AtomicUsize,
    /// Replies whose `cancel()` returned true.
    cancels_won: AtomicUsize,
}

fn main() {
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .thread_name("rpc")
        .build()
        .expect("start the pool");
    let tally = Arc::new(Tally::default());
    // Seeded: the latencies are the same on every run; only races right at 50 ms can differ.
    let mut rng = StdRng::seed_from_u64(7);
    let (mut faster, mut ties) = (0, 0);
    let started = Instant::now();

    let mut replies = Vec::with_capacity(REQUESTS);
    for _request in 0..REQUESTS {
        // The request's completion slot: the first to claim it ends the request.
        let claimed = Arc::new(AtomicBool::new(false));
        // The client arms the timeout for this request.
        let (t, c) = (tally.clone(), claimed.clone());
        let timeout = pool
            .schedule(
                move || {
                    if !c.swap(true, Ordering::AcqRel) {
                        t.timed_out.fetch_add(1, Ordering::Relaxed);
                    }
                },
                TIMEOUT,
            )
            .expect("arm the timeout");
        let cancel_timeout = timeout.cancel_handle();
        drop(timeout); // detached: the cancel handle is all the reply needs

        // The server answers after its latency.
        let latency = Duration::from_millis(rng.gen_range(0..MAX_LATENCY_MS));
        if latency < TIMEOUT {
            faster += 1;
        } else if latency == TIMEOUT {
            ties += 1;
        }
        let t = tally.clone();
        let reply = pool
            .schedule(
                move || {
                    if cancel_timeout.cancel() {
                        t.cancels_won.fetch_add(1, Ordering::Relaxed);
                    }
                    if !claimed.swap(true, Ordering::AcqRel) {
                        t.replied.fetch_add(1, Ordering::Relaxed);
                    } else {
                        t.late_replies.fetch_add(1, Ordering::Relaxed);
                    }
                },
                latency,
            )
            .expect("schedule the reply");
        replies.push(reply);
    }

    // Every reply runs (the longest latency is under 80 ms); by then every timeout has either
    // fired or been cancelled.
    for reply in replies {
        reply.join().expect("the reply task ran");
    }
    let elapsed = started.elapsed();
    let replied = tally.replied.load(Ordering::Relaxed);
    let late = tally.late_replies.load(Ordering::Relaxed);
    // A timeout that lost to a late reply is still firing; wait for the pool to drain.
    pool.shutdown();
    assert!(
        pool.await_termination(Duration::from_secs(30)),
        "the pool drained"
    );
    let timed_out = tally.timed_out.load(Ordering::Relaxed);

    println!("{REQUESTS} requests, timeout {TIMEOUT:?}, server latency 0..{MAX_LATENCY_MS} ms");
    println!(
        "  replies in time : {replied:>6}   (latency under the timeout: {faster}, equal to it: {ties}; ties go either way)"
    );
    println!("  timed out       : {timed_out:>6}");
    println!("  late replies    : {late:>6}   (each matches a timeout that fired)");
    println!(
        "  cancel() true   : {:>6}   (timeouts stopped before they fired)",
        tally.cancels_won.load(Ordering::Relaxed)
    );
    println!("  wall time       : {:>6} ms", elapsed.as_millis());
    let stats = pool.stats();
    println!(
        "  pool stats      : completed {}, cancelled {}, panicked {}, pending {}, running {}",
        stats.completed, stats.cancelled, stats.panicked, stats.pending, stats.running
    );

    assert_eq!(replied + timed_out, REQUESTS, "every request ends one way");
    assert_eq!(late, timed_out, "a late reply is one whose timeout fired");
    let cancels_won = tally.cancels_won.load(Ordering::Relaxed);
    assert_eq!(
        stats.cancelled as usize, cancels_won,
        "the pool counted each winning cancel"
    );
}

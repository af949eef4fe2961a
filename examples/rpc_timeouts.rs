//! A fake RPC client: every request arms a timeout on the pool and cancels it when the reply
//! comes. `cancel()` returning true means the timeout had not started: its closure will never
//! run. A cancel that meets a timeout already running returns false: that run goes on (its
//! result, if any, is dropped), and the pool still counts the task as cancelled. So the pool's
//! `cancelled` count is the cancels that returned true plus those that met a running timeout:
//! the two numbers printed below agree unless a reply came at the very moment its timeout
//! started. Like a real client, each request also has a completion slot that the reply and the
//! timeout race to claim, so a request ends exactly once even when both land in the same
//! instant.
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
    /// Replies whose `cancel()` returned true: the timeout never started.
    cancels_won: AtomicUsize,
    /// Replies whose `cancel()` returned false but marked the timeout cancelled: it was already
    /// running (it still ran to its end; the pool counts it as completed and as cancelled).
    cancels_while_running: AtomicUsize,
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
        timeout.detach(); // the cancel handle is all the reply needs

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
                    } else if cancel_timeout.is_cancelled() {
                        // Nobody else cancels it, so this call marked it: it was running.
                        t.cancels_while_running.fetch_add(1, Ordering::Relaxed);
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
    let cancels_won = tally.cancels_won.load(Ordering::Relaxed);
    let while_running = tally.cancels_while_running.load(Ordering::Relaxed);
    println!("  cancel() true   : {cancels_won:>6}   (timeouts stopped before they started)");
    println!(
        "  cancel() false  : {while_running:>6}   (the timeout had just started: it ran on, yet counts as cancelled)"
    );
    println!("  wall time       : {:>6} ms", elapsed.as_millis());
    let stats = pool.stats();
    println!(
        "  pool stats      : completed {}, cancelled {}, panicked {}, pending {}, running {}",
        stats.completed, stats.cancelled, stats.panicked, stats.pending, stats.running
    );
    println!(
        "                    (cancelled {} = {cancels_won} cancel() true + {while_running} cancel() false on a started timeout)",
        stats.cancelled
    );

    assert_eq!(replied + timed_out, REQUESTS, "every request ends one way");
    assert_eq!(late, timed_out, "a late reply is one whose timeout fired");
    // What holds in every interleaving: the pool counts a task as cancelled when a cancel
    // stopped it before it started (cancel() true) or marked it while it ran (cancel() false,
    // the run went on). Every reply ran, and so did every timeout whose cancel did not return
    // true.
    assert_eq!(
        stats.cancelled as usize,
        cancels_won + while_running,
        "the pool counted each cancel that stopped or marked a timeout"
    );
    assert_eq!(
        stats.completed as usize,
        REQUESTS + (REQUESTS - cancels_won),
        "every reply ran, and every timeout not stopped before it started"
    );
}

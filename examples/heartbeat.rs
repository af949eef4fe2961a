//! Heartbeats and a retry with exponential backoff on one pool.
//!
//! - Three simulated connections each send a heartbeat every 200 ms (fixed rate, staggered
//!   start). `conn-3` closes after four beats by cancelling its own task from inside it.
//! - A flaky operation fails its first attempts; each failure schedules the next attempt as a
//!   one-shot through the pool's `Handle`, doubling the wait (50, 100, 200, 400 ms) until it
//!   succeeds.
//! - At 1.5 s the heartbeats are cancelled, the pool shuts down and waits for its threads.
//!
//! Run with `cargo run --example heartbeat`. It prints a timeline in elapsed milliseconds and
//! finishes in about 1.5 s.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use wheelpool::{CancelHandle, Handle, ScheduledThreadPool};

/// How often each connection sends a heartbeat.
const HEARTBEAT: Duration = Duration::from_millis(200);
/// First retry wait; it doubles after each failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The flaky operation succeeds on this attempt.
const SUCCEEDS_ON: u32 = 5;
/// How long the demo runs.
const RUN_FOR: Duration = Duration::from_millis(1500);

/// Prints one timeline line.
fn log(start: Instant, who: &str, what: &str) {
    println!("[{:>5} ms] {who:<8} {what}", start.elapsed().as_millis());
}

/// One attempt of the flaky operation; on failure it schedules the next one with twice the wait.
fn attempt(pool: Handle, start: Instant, n: u32, backoff: Duration, done: Sender<u32>) {
    if n < SUCCEEDS_ON {
        log(
            start,
            "retry",
            &format!("attempt {n} failed; next in {} ms", backoff.as_millis()),
        );
        let next = pool.clone();
        let scheduled = pool.schedule(
            move || attempt(next, start, n + 1, backoff * 2, done),
            backoff,
        );
        if let Err(e) = scheduled {
            log(start, "retry", &format!("gave up: {e}"));
        }
    } else {
        log(start, "retry", &format!("attempt {n} succeeded"));
        let _ = done.send(n);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .thread_name("heartbeat")
        .build()?;
    let start = Instant::now();
    log(
        start,
        "main",
        "starting 3 connections and a flaky operation",
    );

    let mut heartbeats = Vec::new();
    for id in 1..=3u32 {
        let name = format!("conn-{id}");
        let beats = Arc::new(AtomicU32::new(0));
        let me: Arc<OnceLock<CancelHandle>> = Arc::new(OnceLock::new());
        let (b, m) = (beats.clone(), me.clone());
        let offset = Duration::from_millis(u64::from(id) * 20);
        let future = pool.schedule_at_fixed_rate(
            move || {
                let n = b.fetch_add(1, Ordering::SeqCst) + 1;
                log(start, &name, &format!("heartbeat #{n}"));
                if id == 3 && n == 4 {
                    log(start, &name, "peer closed: stopping its heartbeat");
                    if let Some(h) = m.get() {
                        h.cancel();
                    }
                }
            },
            offset,
            HEARTBEAT,
        )?;
        // Set before the first beat (20 ms away), so the task always finds it.
        let _ = me.set(future.cancel_handle());
        heartbeats.push((id, beats, future));
    }

    let (done_tx, done_rx) = mpsc::channel();
    let handle = pool.handle();
    pool.execute(move || attempt(handle, start, 1, FIRST_BACKOFF, done_tx))?;

    // Wait for the retry to succeed, then for the end of the demo (a one-shot timer, not a sleep).
    let attempts = done_rx.recv_timeout(Duration::from_secs(5))?;
    let end = pool.schedule(|| (), RUN_FOR.saturating_sub(start.elapsed()))?;
    end.join()?;

    log(start, "main", "closing connections");
    for (id, beats, future) in heartbeats {
        let stopped_here = future.cancel();
        let outcome = future.join();
        println!(
            "           conn-{id}: {} heartbeats, {} ({outcome:?})",
            beats.load(Ordering::SeqCst),
            if stopped_here {
                "cancelled on close"
            } else {
                "had already stopped"
            }
        );
    }
    println!("           retry: succeeded on attempt {attempts}");

    pool.shutdown();
    let clean = pool.await_termination(Duration::from_secs(5));
    log(start, "main", &format!("pool terminated: {clean}"));
    if !clean {
        return Err("the pool did not terminate".into());
    }
    Ok(())
}

//! Heartbeats: fixed-rate tasks, one per connection.
//!
//! - Three simulated connections each send a heartbeat every 200 ms (fixed rate, staggered
//!   start). `conn-3` closes after four beats by cancelling its own task from inside it.
//! - At 1.5 s the heartbeats are cancelled, the pool shuts down and waits for its threads.
//!
//! (Retry with backoff is the `retry_backoff` example.)
//!
//! Run with `cargo run --example heartbeat`. It prints a timeline in elapsed milliseconds and
//! finishes in about 1.5 s.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use wheelpool::{CancelHandle, ScheduledThreadPool};

/// How often each connection sends a heartbeat.
const HEARTBEAT: Duration = Duration::from_millis(200);
/// How long the demo runs.
const RUN_FOR: Duration = Duration::from_millis(1500);

/// Prints one timeline line.
fn log(start: Instant, who: &str, what: &str) {
    println!("[{:>5} ms] {who:<8} {what}", start.elapsed().as_millis());
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .thread_name("heartbeat")
        .build()?;
    let start = Instant::now();
    log(start, "main", "starting 3 connections");

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

    // Wait for the end of the demo (a one-shot timer, not a sleep).
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

    pool.shutdown();
    let clean = pool.await_termination(Duration::from_secs(5));
    log(start, "main", &format!("pool terminated: {clean}"));
    if !clean {
        return Err("the pool did not terminate".into());
    }
    Ok(())
}

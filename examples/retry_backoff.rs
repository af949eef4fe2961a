//! Retry with exponential backoff: a flaky operation is retried by one-shot resubmission from
//! inside the task (through a `Handle`), doubling the delay each time, until it succeeds.
//!
//! Run: `cargo run --example retry_backoff`

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wheelpool::{Handle, ScheduledThreadPool};

/// A fake remote call that fails its first `failures` attempts.
struct Flaky {
    attempts: AtomicU32,
    failures: u32,
}

impl Flaky {
    fn call(&self) -> Result<&'static str, String> {
        let n = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        if n <= self.failures {
            Err(format!("attempt {n}: connection refused"))
        } else {
            Ok("200 OK")
        }
    }
}

/// One try; on failure schedules the next try `backoff` later (doubled, capped), on success
/// reports through `done`.
fn attempt(
    pool: Handle,
    op: Arc<Flaky>,
    backoff: Duration,
    start: Instant,
    done: mpsc::Sender<(u32, &'static str)>,
) {
    let elapsed = start.elapsed().as_millis();
    match op.call() {
        Ok(reply) => {
            println!("{elapsed:>5} ms  success: {reply}");
            let _ = done.send((op.attempts.load(Ordering::SeqCst), reply));
        }
        Err(e) => {
            println!(
                "{elapsed:>5} ms  {e}; retrying in {} ms",
                backoff.as_millis()
            );
            let next = (backoff * 2).min(Duration::from_millis(800));
            let again = pool.clone();
            // The follow-up goes back into the wheel as a fresh one-shot: no thread sleeps.
            // Its future is dropped, which detaches (never cancels) the retry.
            let retry = pool.schedule(move || attempt(again, op, next, start, done), backoff);
            drop(retry.expect("pool is running"));
        }
    }
}

fn main() {
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .build()
        .expect("pool");
    let op = Arc::new(Flaky {
        attempts: AtomicU32::new(0),
        failures: 5,
    });
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    let handle = pool.handle();
    pool.execute(move || attempt(handle, op, Duration::from_millis(25), start, tx))
        .expect("execute");

    let (attempts, reply) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the retry loop finished");
    println!(
        "done after {attempts} attempts ({} ms): {reply}",
        start.elapsed().as_millis()
    );
    assert_eq!(attempts, 6);

    pool.shutdown();
    assert!(pool.await_termination(Duration::from_secs(5)));
    println!("stats: {:?}", pool.stats());
}

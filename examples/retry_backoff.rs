//! Retry with exponential backoff: a flaky operation is retried by one dynamic-delay task. Each
//! run decides when the next one comes (`Some(backoff)`, doubled and capped) or that there is
//! none (`None` on success). The whole chain is one task with one future: `join` waits for the
//! success, and `cancel` stops every retry that has not started, wherever the chain is.
//!
//! Run: `cargo run --example retry_backoff`

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wheelpool::{ScheduleError, ScheduledFuture, ScheduledThreadPool, TaskError};

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

/// Starts the retry loop: first try now, then `first_backoff`, doubled after each failure up to
/// `max_backoff`. The reply lands in `reply`; the future ends `Ok(())` after the success.
fn retry(
    pool: &ScheduledThreadPool,
    label: &'static str,
    op: Arc<Flaky>,
    first_backoff: Duration,
    max_backoff: Duration,
    reply: Arc<Mutex<Option<&'static str>>>,
) -> Result<ScheduledFuture<()>, ScheduleError> {
    let start = Instant::now();
    let mut backoff = first_backoff;
    pool.schedule_with_dynamic_delay(
        move || {
            let elapsed = start.elapsed().as_millis();
            match op.call() {
                Ok(r) => {
                    println!("[{label}] {elapsed:>5} ms  success: {r}");
                    *reply.lock().unwrap() = Some(r);
                    None // done: the task ends and its future gives Ok(())
                }
                Err(e) => {
                    println!(
                        "[{label}] {elapsed:>5} ms  {e}; retrying in {} ms",
                        backoff.as_millis()
                    );
                    let wait = backoff;
                    backoff = (backoff * 2).min(max_backoff);
                    Some(wait)
                }
            }
        },
        Duration::ZERO,
    )
}

fn main() {
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .build()
        .expect("pool");
    let ms = Duration::from_millis;

    // 1. A call that succeeds on its sixth try: 25, 50, 100, 200, 400 ms of backoff.
    let op = Arc::new(Flaky {
        attempts: AtomicU32::new(0),
        failures: 5,
    });
    let reply = Arc::new(Mutex::new(None));
    let start = Instant::now();
    let chain =
        retry(&pool, "flaky", op.clone(), ms(25), ms(800), reply.clone()).expect("schedule");
    assert_eq!(chain.join(), Ok(()));
    let took = start.elapsed();
    println!(
        "done after {} attempts ({} ms): {:?}",
        op.attempts.load(Ordering::SeqCst),
        took.as_millis(),
        reply.lock().unwrap()
    );
    assert_eq!(op.attempts.load(Ordering::SeqCst), 6);
    assert_eq!(*reply.lock().unwrap(), Some("200 OK"));
    assert!(
        took >= ms(25 + 50 + 100 + 200 + 400),
        "never earlier than the backoff"
    );

    // 2. A call that never succeeds: the caller gives up after 300 ms and cancels the chain
    // through one handle, whichever retry is waiting at that moment.
    let dead = Arc::new(Flaky {
        attempts: AtomicU32::new(0),
        failures: u32::MAX,
    });
    let reply = Arc::new(Mutex::new(None));
    let chain =
        retry(&pool, "dead", dead.clone(), ms(20), ms(100), reply.clone()).expect("schedule");
    let handle = chain.cancel_handle();
    std::thread::sleep(ms(300)); // the caller's own deadline (demo only: tests use a ManualClock)
    assert!(handle.cancel(), "the chain was still retrying");
    // `join` returns once a try that was running at the cancel has finished.
    assert_eq!(chain.join(), Err(TaskError::Cancelled));
    let tries = dead.attempts.load(Ordering::SeqCst);
    std::thread::sleep(ms(250)); // longer than the largest backoff
    assert_eq!(
        dead.attempts.load(Ordering::SeqCst),
        tries,
        "no retry after the cancel"
    );
    println!("gave up on the dead endpoint after {tries} attempts; the chain is cancelled");

    pool.shutdown();
    assert!(pool.await_termination(Duration::from_secs(5)));
    println!("stats: {:?}", pool.stats());
}

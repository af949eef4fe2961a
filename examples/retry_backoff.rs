//! Retry with exponential backoff, jitter and a try limit, as one dynamic-delay task whose
//! future returns the reply or the last error. Each run returns `ControlFlow::Continue(wait)`
//! for another try or `ControlFlow::Break(result)` when done; `join` (or `.await`) gives that
//! result, and `cancel` stops the retries wherever the chain is.
//!
//! Run: `cargo run --example retry_backoff`

use std::ops::ControlFlow::{Break, Continue};
use std::time::{Duration, Instant, SystemTime};
use wheelpool::ScheduledThreadPool;

/// A fake remote call that is refused its first `refusals` times.
fn call(attempt: u32, refusals: u32) -> Result<&'static str, String> {
    if attempt <= refusals {
        Err(format!("attempt {attempt}: connection refused"))
    } else {
        Ok("200 OK")
    }
}

/// A small xorshift for jitter, seeded from the time: no dependency needed.
fn jitter_source() -> impl FnMut() -> u64 {
    let since_epoch = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
    let mut x = since_epoch.map_or(1, |d| d.as_nanos() as u64) | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

fn main() {
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .build()
        .expect("pool");
    let start = Instant::now();
    for (label, refusals) in [("flaky", 3), ("down", 99)] {
        const TRIES: u32 = 5;
        let (mut attempt, mut backoff, mut random) =
            (0, Duration::from_millis(20), jitter_source());
        let retry = pool
            .task()
            .name(label)
            .schedule_with_dynamic_delay(
                move || {
                    attempt += 1;
                    match call(attempt, refusals) {
                        Err(e) if attempt < TRIES => {
                            // Full jitter: wait a random time up to the backoff, so that many
                            // clients refused at once do not come back at once.
                            let wait = backoff.mul_f64((random() % 1000) as f64 / 1000.0);
                            backoff = (backoff * 2).min(Duration::from_secs(1));
                            println!("[{label}] {e}; again in {} ms", wait.as_millis());
                            Continue(wait)
                        }
                        result => Break(result), // the reply, or the last error
                    }
                },
                Duration::ZERO,
            )
            .expect("schedule");
        let result = retry.join().expect("the retry task ran to its end");
        println!(
            "[{label}] {result:?} after {} ms",
            start.elapsed().as_millis()
        );
    }
    pool.shutdown();
}

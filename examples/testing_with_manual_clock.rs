//! How to test your own retry loop deterministically: build the pool on a `ManualClock` and
//! move time by hand. `advance` returns only when everything due has run, so you can assert right
//! after it: no sleeps, no flakes, and seconds of backoff take microseconds.
//!
//! Run: `cargo run --example testing_with_manual_clock`

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wheelpool::{Handle, ManualClock, ScheduledThreadPool};

/// The code under test: tries `op`; on failure tries again after `backoff`, doubling it each
/// time up to `max`, by one-shot resubmission through a `Handle` (no thread sleeps).
#[derive(Clone)]
struct Retry {
    pool: Handle,
    op: Arc<dyn Fn() -> bool + Send + Sync>,
    max: Duration,
}

impl Retry {
    fn attempt(self, backoff: Duration) {
        if (self.op)() {
            return; // done: nothing more is scheduled
        }
        let next = (backoff * 2).min(self.max);
        let again = self.clone();
        let retry = self.pool.schedule(move || again.attempt(next), backoff);
        retry.expect("the pool is running").detach(); // nobody waits for it: it still runs
    }
}

fn main() {
    let clock = ManualClock::new();
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .clock(clock.clone())
        .build()
        .expect("pool");
    let t0 = clock.now();

    // A fake server that is down for the first second, recording when it was called.
    let calls = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let (c, server_clock) = (calls.clone(), clock.clone());
    let up_at = t0 + Duration::from_secs(1);
    let op = Arc::new(move || {
        let now = server_clock.now();
        c.lock().unwrap().push(now);
        now >= up_at
    });

    let retry = Retry {
        pool: pool.handle(),
        op,
        max: Duration::from_secs(30),
    };
    pool.execute(move || retry.attempt(Duration::from_millis(100)))
        .expect("execute");

    clock.advance(Duration::ZERO); // the first attempt runs at once
    let at = |calls: &Mutex<Vec<Instant>>| -> Vec<u128> {
        calls
            .lock()
            .unwrap()
            .iter()
            .map(|t| (*t - t0).as_millis())
            .collect()
    };
    assert_eq!(at(&calls), vec![0]);

    clock.advance(Duration::from_millis(299));
    assert_eq!(
        at(&calls),
        vec![0, 100],
        "the second try 100 ms later, the third not yet"
    );

    clock.advance(Duration::from_secs(60)); // a minute passes in an instant
    let tries = at(&calls);
    println!("attempts at (virtual) ms: {tries:?}");
    assert_eq!(
        tries,
        vec![0, 100, 300, 700, 1500],
        "backoff 100, 200, 400, 800 ms; the server is up from 1000 ms; nothing after success"
    );
    println!(
        "the retry loop stopped after its first success, {} ms in",
        tries[4]
    );
}

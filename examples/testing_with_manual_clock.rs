//! How to test your own retry loop deterministically: build the pool on a `ManualClock` and
//! move time by hand. `advance` returns only when everything due has run, so you can assert right
//! after it: no sleeps, no flakes, and seconds of backoff take microseconds.
//!
//! The tests at the bottom are what you would write for your own code: `cargo test --example
//! testing_with_manual_clock` runs them (and plain `cargo test` does too). `cargo run --example
//! testing_with_manual_clock` prints one scenario.

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

/// A pool on virtual time, a fake server that is up from `up_after`, and a retry of it started
/// at once with a first backoff of 100 ms, doubling up to `max`: the clock, the pool (kept
/// alive) and when the server was called (ms after the start).
struct Scenario {
    clock: ManualClock,
    _pool: ScheduledThreadPool,
    t0: Instant,
    calls: Arc<Mutex<Vec<Instant>>>,
}

impl Scenario {
    fn start(up_after: Duration, max: Duration) -> Self {
        let clock = ManualClock::new();
        let pool = ScheduledThreadPool::builder()
            .threads(2)
            .clock(clock.clone())
            .build()
            .expect("pool");
        let t0 = clock.now();
        let calls = Arc::new(Mutex::new(Vec::<Instant>::new()));
        let (c, server_clock) = (calls.clone(), clock.clone());
        let op = Arc::new(move || {
            let now = server_clock.now();
            c.lock().unwrap().push(now);
            now >= t0 + up_after
        });
        let retry = Retry {
            pool: pool.handle(),
            op,
            max,
        };
        pool.execute(move || retry.attempt(Duration::from_millis(100)))
            .expect("execute");
        clock.advance(Duration::ZERO); // the first attempt runs at once
        Scenario {
            clock,
            _pool: pool,
            t0,
            calls,
        }
    }

    /// When the server was called, in ms after the start.
    fn calls(&self) -> Vec<u128> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|t| (*t - self.t0).as_millis())
            .collect()
    }
}

fn main() {
    let s = Scenario::start(Duration::from_secs(1), Duration::from_secs(30));
    s.clock.advance(Duration::from_secs(60)); // a minute passes in an instant
    let tries = s.calls();
    println!("server down for 1 s; attempts at (virtual) ms: {tries:?}");
    println!(
        "the retry loop stopped after its first success, {} ms in",
        tries[tries.len() - 1]
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_try_is_at_once_and_the_second_100_ms_later() {
        let s = Scenario::start(Duration::from_secs(1), Duration::from_secs(30));
        assert_eq!(s.calls(), vec![0]);
        s.clock.advance(Duration::from_millis(99));
        assert_eq!(s.calls(), vec![0], "never early");
        s.clock.advance(Duration::from_millis(1));
        assert_eq!(s.calls(), vec![0, 100]);
    }

    #[test]
    fn backoff_doubles_until_the_server_answers_then_stops() {
        let s = Scenario::start(Duration::from_secs(1), Duration::from_secs(30));
        s.clock.advance(Duration::from_secs(60)); // a minute passes in an instant
        assert_eq!(
            s.calls(),
            vec![0, 100, 300, 700, 1500],
            "backoff 100, 200, 400, 800 ms; up from 1000 ms; nothing after success"
        );
    }

    #[test]
    fn backoff_stops_growing_at_its_cap() {
        let s = Scenario::start(Duration::from_secs(10), Duration::from_millis(1500));
        s.clock.advance(Duration::from_secs(60));
        // 100, 200, 400, 800, then 1500 each time: 0, 100, 300, 700, 1500, 3000, ...
        let calls = s.calls();
        assert_eq!(calls[..6], [0, 100, 300, 700, 1500, 3000]);
        let gaps: Vec<u128> = calls.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps[4..].iter().all(|&g| g == 1500), "gaps {gaps:?}");
        assert!(
            *calls.last().unwrap() >= 10_000,
            "the first call at or after 10 s succeeds"
        );
        assert!(calls[calls.len() - 2] < 10_000, "and is the last");
    }
}

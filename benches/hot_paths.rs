//! Criterion micro-benchmarks of wheelpool's hot paths: schedule, cancel, schedule + cancel,
//! reset and schedule among 1 M pending timers, and the execute round trip. The side-by-side
//! comparison with peers is `benches/compare.rs`.
//!
//! Run: `cargo bench --bench hot_paths`

#[cfg(not(wheelpool_loom))]
mod benches {
    use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use wheelpool::ScheduledThreadPool;

    const HOUR: Duration = Duration::from_secs(3600);

    fn pool() -> ScheduledThreadPool {
        ScheduledThreadPool::builder()
            .threads(2)
            .build()
            .expect("pool")
    }

    /// Schedules `iters` one-hour timers (timed), then cancels them (untimed).
    fn schedule_timed(pool: &ScheduledThreadPool, iters: u64) -> Duration {
        let mut futures = Vec::with_capacity(iters as usize);
        let start = Instant::now();
        for _ in 0..iters {
            futures.push(pool.schedule(|| (), HOUR).expect("schedule"));
        }
        let took = start.elapsed();
        for f in &futures {
            f.cancel();
        }
        took
    }

    /// `schedule_timed` on an otherwise idle pool.
    fn schedule(c: &mut Criterion) {
        let pool = pool();
        c.bench_function("schedule_1h", |b| {
            b.iter_custom(|iters| schedule_timed(&pool, iters))
        });
    }

    /// Pending one-hour timers kept in the pool by `pending_1m`.
    const PENDING: usize = 1_000_000;

    /// With 1 M one-hour timers pending: schedule one more (then cancel it, untimed), and reset
    /// a pending one to an hour from now (round robin over all of them): the failure detector's
    /// "heartbeat received" costs no more than arming a new timeout.
    fn pending_1m(c: &mut Criterion) {
        let pool = pool();
        // Filled on first use, so a run filtered to other benches does not pay for it.
        let pending = std::cell::OnceCell::new();
        let fill = || -> Vec<_> {
            (0..PENDING)
                .map(|_| pool.schedule(|| (), HOUR).expect("schedule"))
                .collect()
        };
        let mut group = c.benchmark_group("pending_1m");
        group.bench_function("schedule", |b| {
            pending.get_or_init(fill);
            b.iter_custom(|iters| schedule_timed(&pool, iters))
        });
        let mut next = 0;
        group.bench_function("reset", |b| {
            let pending = pending.get_or_init(fill);
            b.iter(|| {
                let moved = pending[next].reset(HOUR);
                next = (next + 1) % PENDING;
                moved
            })
        });
        group.finish();
        for f in pending.get().into_iter().flatten() {
            f.cancel();
        }
    }

    /// Cancels `iters` pending one-hour timers in insertion order (timed).
    fn cancel(c: &mut Criterion) {
        let pool = pool();
        c.bench_function("cancel_1h", |b| {
            b.iter_custom(|iters| {
                let futures: Vec<_> = (0..iters)
                    .map(|_| pool.schedule(|| (), HOUR).expect("schedule"))
                    .collect();
                let start = Instant::now();
                for f in &futures {
                    f.cancel();
                }
                start.elapsed()
            })
        });
    }

    /// The RPC-timeout pattern: arm a timeout, the reply comes, cancel it.
    fn schedule_cancel(c: &mut Criterion) {
        let pool = pool();
        c.bench_function("schedule_then_cancel_30s", |b| {
            b.iter(|| {
                let f = pool
                    .schedule(|| (), Duration::from_secs(30))
                    .expect("schedule");
                f.cancel()
            })
        });
    }

    /// Latency of one zero-delay task: schedule, run on a worker, join.
    fn round_trip(c: &mut Criterion) {
        let pool = pool();
        c.bench_function("schedule_zero_join_round_trip", |b| {
            b.iter(|| {
                pool.schedule(|| 1u32, Duration::ZERO)
                    .expect("schedule")
                    .join()
            })
        });
    }

    /// Throughput of `execute` from one submitter, until every task has run.
    fn execute_throughput(c: &mut Criterion) {
        let pool = pool();
        let mut group = c.benchmark_group("execute");
        for batch in [10_000u64, 100_000] {
            group.throughput(Throughput::Elements(batch));
            group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
                b.iter(|| {
                    let done = Arc::new(AtomicUsize::new(0));
                    for _ in 0..batch {
                        let d = done.clone();
                        pool.execute(move || {
                            d.fetch_add(1, Ordering::Relaxed);
                        })
                        .expect("execute");
                    }
                    // Yield, not spin: the workers need the cores (2 on the reference machine).
                    while done.load(Ordering::Relaxed) < batch as usize {
                        std::thread::yield_now();
                    }
                })
            });
        }
        group.finish();
    }

    criterion_group! {
        name = hot_paths;
        config = Criterion::default()
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(20);
        targets = schedule, cancel, schedule_cancel, round_trip, execute_throughput, pending_1m
    }
}

#[cfg(not(wheelpool_loom))]
criterion::criterion_main!(benches::hot_paths);

#[cfg(wheelpool_loom)]
fn main() {}

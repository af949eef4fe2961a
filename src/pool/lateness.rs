//! How late runs start: a log-linear histogram of nanoseconds per worker, merged when
//! `stats()` asks for percentiles.
//!
//! # Ground rules
//!
//! - **One writer per cell.** A run's lateness is recorded by the worker that starts it, in the
//!   cell of its own index (`home::index()`, which each worker sets to its index; only workers
//!   run tasks). So a record is two plain load-and-store pairs (a bucket's count, the max), no
//!   read-modify-write and no shared cache line: a run pays about what a counter bump costs.
//!   Readers (`stats()`) load every cell; their view may be a moment apart per bucket.
//! - **Buckets.** Values below [`SUB`] nanoseconds have a bucket each (exact). Above, each power
//!   of two is split into `SUB` = 8 equal buckets, so a bucket's width is at most 1/8 of its
//!   lowest value. A percentile is reported as the highest value of its bucket, capped by the
//!   largest value recorded: never below the true percentile, and above it by less than 1/8 of
//!   it. The largest value is kept exactly.
//! - All 64 bits of a `u64` are covered (496 buckets, 4 KB a worker): no value is clamped.

use crate::sync::{AtomicU64, Ordering};
use std::time::Duration;

/// Bits of the sub-bucket index within a power of two.
const SUB_BITS: u32 = 3;
/// Sub-buckets per power of two: the resolution, 1/8 of a value.
const SUB: usize = 1 << SUB_BITS;
/// Buckets covering every `u64`: `SUB` exact ones, then `SUB` per power of two from 2^3 to 2^63.
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// The bucket of value `v`.
fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = msb - SUB_BITS;
    (((shift + 1) as usize) << SUB_BITS) + ((v >> shift) as usize & (SUB - 1))
}

/// The highest value that falls in bucket `i`.
fn bucket_high(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let shift = (i >> SUB_BITS) as u32 - 1;
    let low = ((SUB + (i & (SUB - 1))) as u64) << shift;
    low + ((1u64 << shift) - 1)
}

/// One worker's histogram; written by that worker only (ground rules).
#[derive(Debug)]
struct Cell {
    buckets: Box<[AtomicU64]>,
    max: AtomicU64,
}

impl Cell {
    fn new() -> Self {
        Cell {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max: AtomicU64::new(0),
        }
    }

    fn record(&self, nanos: u64) {
        // Relaxed loads and stores, no read-modify-write: this worker is the only writer
        // (ground rules); readers only need each value to be one that was stored.
        let bucket = &self.buckets[bucket_of(nanos)];
        bucket.store(bucket.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        if nanos > self.max.load(Ordering::Relaxed) {
            self.max.store(nanos, Ordering::Relaxed);
        }
    }
}

/// The lateness of runs, per worker.
#[derive(Debug)]
pub(crate) struct Lateness {
    cells: Box<[Cell]>,
}

/// The merged distribution, as `PoolStats` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Summary {
    pub(crate) count: u64,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) max: Duration,
}

impl Lateness {
    /// Cells for `workers` workers: a power of two of them, so a worker finds its own with a
    /// mask rather than a division (worker `i < workers` gets cell `i`).
    pub(crate) fn new(workers: usize) -> Self {
        Lateness {
            cells: (0..workers.max(1).next_power_of_two())
                .map(|_| Cell::new())
                .collect(),
        }
    }

    /// A run started `nanos` after its planned time, on the calling worker.
    pub(crate) fn record(&self, nanos: u64) {
        let index = crate::timer::home::index() & (self.cells.len() - 1);
        self.cells[index].record(nanos);
    }

    /// Merges every worker's buckets: the count, p50, p99 and max.
    pub(crate) fn summary(&self) -> Summary {
        let mut merged = vec![0u64; BUCKETS];
        let mut max = 0;
        for cell in self.cells.iter() {
            for (sum, bucket) in merged.iter_mut().zip(cell.buckets.iter()) {
                *sum += bucket.load(Ordering::Relaxed);
            }
            max = max.max(cell.max.load(Ordering::Relaxed));
        }
        let count: u64 = merged.iter().sum();
        let at = |percent: u64| Duration::from_nanos(percentile(&merged, count, percent, max));
        Summary {
            count,
            p50: at(50),
            p99: at(99),
            max: Duration::from_nanos(max),
        }
    }
}

/// The value at `percent` of `count` values in `buckets`: the smallest bucket whose cumulative
/// count reaches the rank `ceil(count * percent / 100)`, as its highest value capped by `max`.
/// Zero when nothing was recorded.
fn percentile(buckets: &[u64], count: u64, percent: u64, max: u64) -> u64 {
    if count == 0 {
        return 0;
    }
    let rank = (u128::from(count) * u128::from(percent))
        .div_ceil(100)
        .max(1);
    let mut seen = 0u128;
    for (i, &n) in buckets.iter().enumerate() {
        seen += u128::from(n);
        if seen >= rank {
            return bucket_high(i).min(max);
        }
    }
    max // a reader raced the writers: buckets summed past the count
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_every_u64() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_high(BUCKETS - 1), u64::MAX);
        for i in 1..BUCKETS {
            assert_eq!(bucket_of(bucket_high(i - 1) + 1), i, "bucket {i}");
            assert_eq!(bucket_of(bucket_high(i)), i, "bucket {i}");
        }
    }

    #[test]
    fn a_bucket_is_narrower_than_an_eighth_of_its_values() {
        for v in (0..64).flat_map(|s| [1u64 << s, (1u64 << s) + (1 << s) / 3, u64::MAX >> s]) {
            let high = bucket_high(bucket_of(v));
            assert!(high >= v && high - v <= v / 8, "{v}: {high}");
        }
        for v in 0..SUB as u64 {
            assert_eq!(bucket_high(bucket_of(v)), v, "exact below {SUB}");
        }
    }

    #[test]
    fn percentiles_by_rank_capped_by_the_max() {
        let l = Lateness::new(1);
        for _ in 0..98 {
            l.record(0);
        }
        l.record(1_000);
        l.record(10_000_000);
        let s = l.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50, Duration::ZERO);
        // Rank 99 is the 1 000 ns run: its bucket's top, within 1/8.
        assert!((1_000..=1_125).contains(&s.p99.as_nanos()), "{s:?}");
        assert_eq!(s.max, Duration::from_nanos(10_000_000));
        assert_eq!(Lateness::new(2).summary(), Summary::default());
        let one = Lateness::new(1);
        one.record(10_000_000);
        let s = one.summary();
        assert_eq!((s.p50, s.p99), (s.max, s.max), "one value: exact");
    }
}

//! Counters of cluster jobs: per job ([`ClusterTask::stats`](super::ClusterTask::stats)) and
//! per node and store ([`PgLockStore::stats`](super::PgLockStore::stats)).

use super::SkipReason;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a node saw of its cluster jobs: a snapshot of counters that only grow.
///
/// # Examples
///
/// ```
/// use wheelpool::cluster::ClusterStats;
///
/// let stats = ClusterStats::default();
/// assert_eq!(stats.claims_won + stats.found_taken, 0);
/// assert_eq!(stats.claim_latency_p99, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterStats {
    /// Claims answered by the store.
    pub claims: u64,
    /// Runs this node claimed (and so ran, or reported as skipped).
    pub claims_won: u64,
    /// Wake-ups that found the current run already claimed by another node.
    pub found_taken: u64,
    /// Runs reported as skipped: not claimed within the misfire grace.
    pub skipped_misfired: u64,
    /// Runs reported as skipped: the job was paused.
    pub skipped_paused: u64,
    /// Runs this node claimed but could not start (its pool was shutting down).
    pub skipped_shutdown: u64,
    /// Runs another node claimed and never confirmed, found by this node's claims.
    pub skipped_unconfirmed: u64,
    /// Wake-ups that found the store's settings for the job differ from this node's.
    pub mismatches: u64,
    /// Store calls that failed (timeouts, lost connections, errors), retries included.
    pub failed_calls: u64,
    /// Leases that ran out before the run ended (or before a renewal).
    pub leases_expired: u64,
    /// Median time from sending a claim to its answer (from a log histogram: within 19 %).
    pub claim_latency_p50: Option<Duration>,
    /// 99th percentile of the same.
    pub claim_latency_p99: Option<Duration>,
    /// Longest claim seen.
    pub claim_latency_max: Option<Duration>,
}

/// The live counters behind a [`ClusterStats`].
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) claims: AtomicU64,
    pub(super) claims_won: AtomicU64,
    pub(super) found_taken: AtomicU64,
    skipped: [AtomicU64; 4],
    pub(super) mismatches: AtomicU64,
    pub(super) failed_calls: AtomicU64,
    pub(super) leases_expired: AtomicU64,
    pub(super) claim_latency: Latency,
}

impl Counters {
    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn skipped(&self, reason: SkipReason, runs: u64) {
        let i = match reason {
            SkipReason::Misfired => 0,
            SkipReason::Paused => 1,
            SkipReason::Shutdown => 2,
            SkipReason::Unconfirmed { .. } => 3,
        };
        self.skipped[i].fetch_add(runs, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> ClusterStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ClusterStats {
            claims: get(&self.claims),
            claims_won: get(&self.claims_won),
            found_taken: get(&self.found_taken),
            skipped_misfired: get(&self.skipped[0]),
            skipped_paused: get(&self.skipped[1]),
            skipped_shutdown: get(&self.skipped[2]),
            skipped_unconfirmed: get(&self.skipped[3]),
            mismatches: get(&self.mismatches),
            failed_calls: get(&self.failed_calls),
            leases_expired: get(&self.leases_expired),
            claim_latency_p50: self.claim_latency.quantile(0.50),
            claim_latency_p99: self.claim_latency.quantile(0.99),
            claim_latency_max: self.claim_latency.max(),
        }
    }
}

/// Buckets per power of two: each spans a factor of 2^(1/4) (19 %).
const SUB: usize = 4;
/// Buckets: microseconds from 1 to 2^40 (about 12 days).
const BUCKETS: usize = 40 * SUB;

/// A lock-free histogram of durations in logarithmic buckets of microseconds.
#[derive(Debug)]
pub(super) struct Latency {
    buckets: Box<[AtomicU64]>,
    max_us: AtomicU64,
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_us: AtomicU64::new(0),
        }
    }
}

impl Latency {
    pub(super) fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
        self.buckets[bucket(us)].fetch_add(1, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    fn quantile(&self, q: f64) -> Option<Duration> {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based; the float is only for the product.
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Duration::from_micros(upper(i)).min(self.max().unwrap_or_default()));
            }
        }
        self.max()
    }

    fn max(&self) -> Option<Duration> {
        match self.max_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }
}

/// The bucket of `us` (at least 1): the power of two, then which quarter of it.
fn bucket(us: u64) -> usize {
    let log = 63 - us.leading_zeros() as usize;
    let frac = if log >= 2 {
        ((us >> (log - 2)) & 3) as usize
    } else {
        ((us << (2 - log)) & 3) as usize
    };
    (log * SUB + frac).min(BUCKETS - 1)
}

/// The largest microsecond count that falls in bucket `i`.
fn upper(i: usize) -> u64 {
    let (log, frac) = (i / SUB, (i % SUB) as u64);
    if log >= 2 {
        ((4 + frac + 1) << (log - 2)) - 1
    } else {
        // Below 4 us each bucket holds one value: 1, 2 or 3.
        ((4 + frac) >> (2 - log)).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_their_values() {
        for us in 1..5_000u64 {
            let b = bucket(us);
            assert!(us <= upper(b), "{us} in bucket {b} over {}", upper(b));
            if b > 0 && us >= 8 {
                assert!(us > upper(b - 1), "{us} belongs above bucket {}", b - 1);
            }
        }
    }

    #[test]
    fn quantiles_of_known_samples() {
        let l = Latency::default();
        for us in 1..=100 {
            l.record(Duration::from_micros(us * 10));
        }
        let p50 = l.quantile(0.5).unwrap().as_micros();
        assert!((500..=600).contains(&p50), "{p50}");
        assert_eq!(l.max(), Some(Duration::from_micros(1000)));
        assert!(l.quantile(0.99).unwrap() <= Duration::from_micros(1000));
    }
}

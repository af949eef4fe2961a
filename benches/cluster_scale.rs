//! Cluster jobs at scale on one PostgreSQL server: N jobs x M nodes at one period, for a few
//! seconds. Prints one JSON line: claims the server answered per second, claim latency
//! (p50/p99/max, from the nodes' counters), run lateness against the planned time (p50, p99,
//! max, and the last run of a period), runs that ran twice (must be 0) and runs reported
//! skipped.
//!
//! ```sh
//! cargo bench --features postgres --bench cluster_scale              # 1000 jobs x 3 nodes, 1 s, 10 s
//! cargo bench --features postgres --bench cluster_scale -- 200 3 10  # jobs nodes seconds
//! ```
//!
//! Starts a throwaway PostgreSQL 15 server (as the cluster tests do; `WHEELPOOL_PG_BIN` to
//! point elsewhere). Each node has its own pool (2 workers) and store (default 4
//! connections). The bodies do nothing but record when they started.

#[path = "../tests/pg_common/mod.rs"]
mod pg_common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use wheelpool::cluster::{ClusterError, ClusterJob, ClusterStats, PgLockStore};
use wheelpool::ScheduledThreadPool;

const PERIOD: Duration = Duration::from_secs(1);

/// (job index, run number) -> starts seen (node index, lateness in microseconds).
type Seen = Arc<Mutex<HashMap<(usize, u64), Vec<(usize, i64)>>>>;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let jobs = args.first().copied().unwrap_or(1000);
    let nodes = args.get(1).copied().unwrap_or(3);
    let secs = args.get(2).copied().unwrap_or(10);

    let server = pg_common::PgServer::start();
    let url = server.url();
    let seen: Seen = Arc::default();
    let errors: Arc<Mutex<Vec<ClusterError>>> = Arc::default();
    let mut running = Vec::new();
    for n in 0..nodes {
        let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
        let store = Arc::new(PgLockStore::connect(&url).unwrap());
        let mut tasks = Vec::new();
        for j in 0..jobs {
            let errors = errors.clone();
            let job = ClusterJob::builder(format!("job-{j}"), store.clone())
                .node(format!("node-{n}"))
                .at_most_for(Duration::from_secs(5))
                .on_error(move |e| errors.lock().unwrap().push(e))
                .build()
                .unwrap();
            let seen = seen.clone();
            let task = job
                .schedule_at_fixed_rate(
                    &pool.handle(),
                    move |run| {
                        let now = SystemTime::now();
                        let late = match now.duration_since(run.planned_at()) {
                            Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
                            Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(0),
                        };
                        seen.lock()
                            .unwrap()
                            .entry((j, run.number()))
                            .or_default()
                            .push((n, late));
                    },
                    PERIOD,
                )
                .unwrap();
            tasks.push(task);
        }
        running.push((pool, store, tasks));
    }
    // The first runs come at scheduling time (each job's first claim is at once): measure
    // the periods after a settling second.
    std::thread::sleep(PERIOD);
    let skip_before = epoch_run(SystemTime::now()) + 1;
    let before: Vec<ClusterStats> = running.iter().map(|(_, s, _)| s.stats()).collect();
    std::thread::sleep(PERIOD * secs as u32);
    let last_run = epoch_run(SystemTime::now()).saturating_sub(1);
    let after: Vec<ClusterStats> = running.iter().map(|(_, s, _)| s.stats()).collect();
    for (pool, _, tasks) in &running {
        for t in tasks {
            t.cancel();
        }
        pool.shutdown();
    }

    let seen = seen.lock().unwrap();
    let mut late: Vec<i64> = Vec::new();
    let mut doubles = 0usize;
    let mut missing = 0usize;
    let mut last_of_period: HashMap<u64, i64> = HashMap::new();
    for j in 0..jobs {
        for run in skip_before..=last_run {
            match seen.get(&(j, run)) {
                None => missing += 1,
                Some(starts) => {
                    doubles += starts.len() - 1;
                    late.push(starts[0].1);
                    let worst = last_of_period.entry(run).or_insert(i64::MIN);
                    *worst = (*worst).max(starts[0].1);
                }
            }
        }
    }
    late.sort_unstable();
    let pct = |p: f64| {
        late.get(((late.len() as f64 * p) as usize).min(late.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let mut period_last: Vec<i64> = last_of_period.into_values().collect();
    period_last.sort_unstable();
    let claims: u64 = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.claims - b.claims)
        .sum();
    let sum = |f: fn(&ClusterStats) -> u64| {
        after
            .iter()
            .zip(&before)
            .map(|(a, b)| f(a) - f(b))
            .sum::<u64>()
    };
    let (won, taken) = (sum(|s| s.claims_won), sum(|s| s.found_taken));
    let lat = |f: fn(&ClusterStats) -> Option<Duration>| {
        after
            .iter()
            .filter_map(f)
            .max()
            .map_or(0, |d| d.as_micros())
    };
    let skipped = errors
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, ClusterError::RunSkipped { .. }))
        .count();
    let other_errors = errors.lock().unwrap().len() - skipped;
    println!(
        "{{\"impl\":\"wheelpool-cluster\",\"jobs\":{jobs},\"nodes\":{nodes},\"period_ms\":{},\
         \"periods\":{},\"runs\":{},\"missing\":{missing},\"doubles\":{doubles},\
         \"skipped_reported\":{skipped},\"other_errors\":{other_errors},\
         \"claims_per_s\":{:.0},\"won\":{won},\"taken\":{taken},\"other_claims\":{},\"claim_p50_us\":{},\"claim_p99_us\":{},\"claim_max_us\":{},\
         \"late_p50_us\":{},\"late_p99_us\":{},\"late_max_us\":{},\
         \"period_last_p50_us\":{},\"period_last_max_us\":{}}}",
        PERIOD.as_millis(),
        last_run + 1 - skip_before,
        late.len(),
        claims as f64 / (PERIOD * secs as u32).as_secs_f64(),
        claims - won - taken,
        lat(|s| s.claim_latency_p50),
        lat(|s| s.claim_latency_p99),
        lat(|s| s.claim_latency_max),
        pct(0.50),
        pct(0.99),
        late.last().copied().unwrap_or(0),
        period_last.get(period_last.len() / 2).copied().unwrap_or(0),
        period_last.last().copied().unwrap_or(0),
    );
    drop(running);
    drop(server);
}

/// The run number of a 1 s grid at `t`.
fn epoch_run(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as u64 / PERIOD.as_nanos() as u64
}

//! What an operator sees of cluster jobs: the store's job table, pause, trigger, and each
//! node's counters.
//!
//! ```sh
//! cargo run --example cluster_jobs_table --features postgres
//! DATABASE_URL=postgresql://me@localhost/mydb cargo run --example cluster_jobs_table --features postgres
//! ```
//!
//! Without `DATABASE_URL` it starts a throwaway PostgreSQL 15 server (removed at the end). Two
//! nodes share three jobs for a few seconds; half way, `reports` is paused and `rebuild-index`
//! (hourly) is triggered once. Then it prints the table and the counters.

#[path = "../tests/pg_common/mod.rs"]
mod pg_common;

mod common;

use common::clock;

use std::sync::Arc;
use std::time::Duration;
use wheelpool::cluster::{ClusterJob, ClusterRun, ClusterTask, PgLockStore};
use wheelpool::ScheduledThreadPool;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_server, url) = common::database();

    let jobs = [
        ("heartbeat-sweep", Duration::from_millis(200)),
        ("reports", Duration::from_millis(500)),
        ("rebuild-index", Duration::from_secs(3600)),
    ];
    let mut nodes: Vec<(ScheduledThreadPool, Arc<PgLockStore>, Vec<ClusterTask>)> = Vec::new();
    for node in ["node-a", "node-b"] {
        let pool = ScheduledThreadPool::builder().threads(2).build()?;
        let store = Arc::new(PgLockStore::connect(&url)?);
        let mut tasks = Vec::new();
        for (name, period) in jobs {
            let job = ClusterJob::builder(name, store.clone())
                .node(node)
                .at_most_for(Duration::from_secs(10))
                .keep_alive(true)
                .on_error(move |err| println!("  [{node}] {err}"))
                .build()?;
            let body = move |run: &ClusterRun<'_>| {
                if run.is_triggered() {
                    println!("  [{node}] {name}: triggered run, once across the cluster");
                }
            };
            tasks.push(job.schedule_at_fixed_rate(&pool.handle(), body, period)?);
        }
        nodes.push((pool, store, tasks));
    }

    std::thread::sleep(Duration::from_millis(1500));
    let admin = &nodes[0].1;
    println!("pause `reports`, trigger `rebuild-index`:");
    admin.pause("reports")?;
    admin.trigger("rebuild-index")?;
    std::thread::sleep(Duration::from_millis(1500));

    println!(
        "\n{:<16} {:>8} {:>12} {:<7} {:>13} {:>6} {:>13}",
        "job", "period", "last run", "by", "claimed at", "paused", "next run"
    );
    for job in admin.jobs()? {
        let (by, at) = match &job.last_claim {
            Some((node, at)) => (node.as_str(), clock(*at)),
            None => ("-", "-".to_owned()),
        };
        println!(
            "{:<16} {:>8} {:>12} {:<7} {:>13} {:>6} {:>13}",
            job.name,
            format!("{:?}", job.period),
            job.last_run.map_or("-".to_owned(), |r| r.to_string()),
            by,
            at,
            job.paused,
            clock(job.next_run),
        );
    }
    admin.resume("reports")?;

    println!("\ncounters per node (all jobs):");
    for (pool, store, tasks) in &nodes {
        let s = store.stats();
        println!(
            "  won {:>3}  found taken {:>3}  skipped (misfired {}, paused {})  failed calls {}  \
             claim p50 {:?} p99 {:?}",
            s.claims_won,
            s.found_taken,
            s.skipped_misfired,
            s.skipped_paused,
            s.failed_calls,
            s.claim_latency_p50.unwrap_or_default(),
            s.claim_latency_p99.unwrap_or_default(),
        );
        for t in tasks {
            t.cancel();
        }
        pool.shutdown();
    }
    Ok(())
}

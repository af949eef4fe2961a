//! One job, three nodes, one run per period: a cluster job on PostgreSQL.
//!
//! ```sh
//! cargo run --example cluster_job --features postgres
//! cargo run --example cluster_job --features postgres,cron   # and then a cron job
//! DATABASE_URL=postgresql://me@localhost/mydb cargo run --example cluster_job --features postgres
//! ```
//!
//! Without `DATABASE_URL` it starts a throwaway PostgreSQL 15 server (initdb in a temporary
//! directory, removed at the end). Three nodes, each with its own pool and connection, schedule
//! the same job every 200 ms; each period is run by exactly one of them: the node that ran the
//! last period keeps the job while it claims on time, the others stand by. Half way, node-1
//! leaves and the other two carry on (one of them takes the job over).
//!
//! With the `cron` feature, the three nodes then share a calendar job: a per-second cron
//! expression in Europe/Berlin, each occurrence run by one node, named by its instant.

#[path = "../tests/pg_common/mod.rs"]
mod pg_common;

mod common;

use common::clock;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wheelpool::cluster::{ClusterJob, ClusterTask, PgLockStore};
use wheelpool::ScheduledThreadPool;

const PERIOD: Duration = Duration::from_millis(200);
const RUN_FOR: Duration = Duration::from_secs(3);

struct Node {
    pool: ScheduledThreadPool,
    task: ClusterTask,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_server, url) = common::database();

    let (tx, rx) = mpsc::channel();
    let mut nodes = Vec::new();
    for i in 1..=3 {
        let pool = ScheduledThreadPool::builder().threads(2).build()?;
        let store = Arc::new(PgLockStore::connect(&url)?);
        let job = ClusterJob::builder("cluster-job-example", store)
            .node(format!("node-{i}"))
            .at_most_for(Duration::from_secs(5))
            .on_error(|err| eprintln!("error: {err}"))
            .build()?;
        let tx = tx.clone();
        let task = job.schedule_at_fixed_rate(
            &pool.handle(),
            move |run| {
                let _ = tx.send((run.number(), run.planned_at(), run.node().to_owned()));
            },
            PERIOD,
        )?;
        nodes.push(Node { pool, task });
    }
    drop(tx);
    println!("3 nodes share one job every {PERIOD:?}; run number = period index on the database's clock\n");

    let start = Instant::now();
    let mut runs: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut left = false;
    while start.elapsed() < RUN_FOR {
        if !left && start.elapsed() >= RUN_FOR / 2 {
            let node = nodes.remove(0);
            node.task.cancel();
            // A graceful leave: a run this node already claimed still runs.
            node.pool.shutdown();
            node.pool.await_termination(Duration::from_secs(10));
            println!("  -- node-1 leaves --");
            left = true;
        }
        let Ok((number, planned, node)) = rx.recv_timeout(Duration::from_millis(50)) else {
            continue;
        };
        println!("run {number}  planned {}  ran on {node}", clock(planned));
        runs.entry(number).or_default().push(node);
    }
    for node in &nodes {
        node.task.cancel();
    }

    let doubles = runs.values().filter(|nodes| nodes.len() > 1).count();
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for node in runs.values().flatten() {
        *per_node.entry(node.as_str()).or_default() += 1;
    }
    let (first, last) = (runs.keys().next(), runs.keys().next_back());
    let gaps = match (first, last) {
        (Some(a), Some(b)) => (b - a + 1) as usize - runs.len(),
        _ => 0,
    };
    println!(
        "\n{} periods run, {doubles} run twice, {gaps} skipped; per node: {per_node:?}",
        runs.len()
    );
    #[cfg(feature = "cron")]
    cron_job(&url)?;
    Ok(())
}

/// Three nodes share a per-second calendar job for a few seconds.
#[cfg(feature = "cron")]
fn cron_job(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    use wheelpool::cron::Cron;

    let every_second = Cron::parse("* * * * * *", "Europe/Berlin")?;
    let (tx, rx) = mpsc::channel();
    let mut nodes = Vec::new();
    for i in 1..=3 {
        let pool = ScheduledThreadPool::builder().threads(2).build()?;
        let store = Arc::new(PgLockStore::connect(url)?);
        let job = ClusterJob::builder("cluster-cron-example", store)
            .node(format!("node-{i}"))
            .on_error(|err| eprintln!("error: {err}"))
            .build()?;
        let tx = tx.clone();
        let task = job.schedule_cron(
            &pool.handle(),
            move |run| {
                let _ = tx.send((run.planned_at(), run.node().to_owned()));
            },
            &every_second,
        )?;
        nodes.push(Node { pool, task });
    }
    drop(tx);
    println!("\n3 nodes share the cron job `{every_second}`; a run is named by its occurrence\n");
    let mut runs: BTreeMap<std::time::SystemTime, Vec<String>> = BTreeMap::new();
    let start = Instant::now();
    while start.elapsed() < RUN_FOR {
        if let Ok((at, node)) = rx.recv_timeout(Duration::from_millis(50)) {
            println!("occurrence {}  ran on {node}", clock(at));
            runs.entry(at).or_default().push(node);
        }
    }
    for node in &nodes {
        node.task.cancel();
    }
    let doubles = runs.values().filter(|nodes| nodes.len() > 1).count();
    println!("\n{} occurrences run, {doubles} run twice", runs.len());
    Ok(())
}

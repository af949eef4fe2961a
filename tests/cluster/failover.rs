//! Cluster jobs on a real PostgreSQL server when a node dies or hangs mid-run: the lease
//! (`at_most_for`) holds the job, then another node takes over; a run that outlives its lease
//! is reported. And where errors go without a handler.
//!
//! "Dies" is a real process: this test binary runs one of its own (ignored) tests as a child
//! node and kills it with SIGKILL while its run is in progress.

use crate::pg_common::{wait_until, ChildNode, PgServer, LONG};
use std::io::Write;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wheelpool::cluster::{ClusterError, ClusterJob, ClusterTask, PgLockStore, SkipReason};
use wheelpool::ScheduledThreadPool;

const PERIOD: Duration = Duration::from_millis(100);
const LEASE: Duration = Duration::from_secs(1);
/// Periods in a lease: a run claimed in period `k` holds the job until inside period
/// `k + LEASE_PERIODS`, so no other node may claim an earlier run.
const LEASE_PERIODS: u64 = 10;
const CHILD_URL: &str = "WHEELPOOL_TEST_CHILD_URL";

type Runs = Arc<Mutex<Vec<(u64, String)>>>;

fn schedule(
    pool: &ScheduledThreadPool,
    store: Arc<PgLockStore>,
    label: &str,
    lease: Duration,
    runs: &Runs,
    errors: &Arc<Mutex<Vec<ClusterError>>>,
) -> ClusterTask {
    let errors = errors.clone();
    let runs = runs.clone();
    // No misfire grace: a node that takes over claims the current run only, so the run
    // numbers show where the lease ended.
    ClusterJob::builder("failover", store)
        .node(label)
        .at_most_for(lease)
        .misfire_grace(Duration::ZERO)
        .on_error(move |e| errors.lock().unwrap().push(e))
        .build()
        .unwrap()
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |run| {
                runs.lock()
                    .unwrap()
                    .push((run.number(), run.node().to_owned()))
            },
            PERIOD,
        )
        .unwrap()
}

/// The child node: claims the job, says which run it holds, and never finishes that run.
/// Does nothing unless started by `a_killed_node_is_taken_over_after_its_lease`.
#[test]
#[ignore = "a child process of a_killed_node_is_taken_over_after_its_lease"]
fn child_node_holds_the_lease() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    let store = Arc::new(PgLockStore::connect(&url).unwrap());
    let job = ClusterJob::builder("failover", store)
        .node("child")
        .at_most_for(LEASE)
        .misfire_grace(Duration::ZERO)
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    let _task = job
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |run| {
                let mut out = std::io::stdout().lock();
                writeln!(out, "CLAIMED {}", run.number()).unwrap();
                out.flush().unwrap();
                // Hold the run until killed.
                let _ = rx.recv();
            },
            PERIOD,
        )
        .unwrap();
    // The sender stays here: the run never ends; the parent kills this process.
    loop {
        std::thread::park();
        let _ = &tx;
    }
}

#[test]
fn a_killed_node_is_taken_over_after_its_lease() {
    let server = PgServer::start();
    let url = server.url();
    let mut child =
        ChildNode::spawn_test("failover::child_node_holds_the_lease", &[(CHILD_URL, &url)]);
    let held: u64 = child.after_marker("CLAIMED ").parse().unwrap();
    child.kill();

    let runs: Runs = Arc::default();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let pools: Vec<ScheduledThreadPool> = (0..2)
        .map(|_| ScheduledThreadPool::builder().threads(1).build().unwrap())
        .collect();
    let tasks: Vec<ClusterTask> = pools
        .iter()
        .zip(["a", "b"])
        .map(|(pool, label)| {
            let store = Arc::new(PgLockStore::connect(&url).unwrap());
            schedule(pool, store, label, LEASE, &runs, &errors)
        })
        .collect();
    assert!(
        wait_until(LONG, || runs.lock().unwrap().len() >= 5),
        "the survivors take over"
    );
    for t in &tasks {
        assert!(t.cancel());
    }
    let runs = runs.lock().unwrap().clone();
    let first = runs.iter().map(|(r, _)| *r).min().unwrap();
    assert!(
        first >= held + LEASE_PERIODS,
        "the dead node held run {held} with a {LEASE:?} lease, yet run {first} ran before it \
         ended: {runs:?}"
    );
    let mut numbers: Vec<u64> = runs.iter().map(|(r, _)| *r).collect();
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), runs.len(), "a run ran twice: {runs:?}");
    // The dead node's run is reported once, by the survivor whose claim replaced it, as
    // never confirmed; the runs its lease held up are each reported once as skipped (no
    // misfire grace here); nothing else is reported.
    let mut skipped: Vec<u64> = Vec::new();
    let mut unconfirmed: Vec<u64> = Vec::new();
    for e in errors.lock().unwrap().iter() {
        match e {
            ClusterError::RunSkipped {
                run,
                reason: SkipReason::Misfired,
                ..
            } => skipped.push(*run),
            ClusterError::RunSkipped {
                run,
                reason: SkipReason::Unconfirmed { triggered: false },
                ..
            } => unconfirmed.push(*run),
            other => panic!("unexpected report: {other}"),
        }
    }
    skipped.sort_unstable();
    assert_eq!(skipped, (held + 1..first).collect::<Vec<_>>());
    assert_eq!(unconfirmed, vec![held]);
}

#[test]
fn a_run_that_outlives_its_lease_is_reported_and_taken_over() {
    let server = PgServer::start();
    let lease = Duration::from_millis(300);
    let (started_tx, started_rx) = mpsc::channel();
    let (finish_tx, finish_rx) = mpsc::channel::<()>();
    let finish_rx = Mutex::new(finish_rx);
    let slow_errors = Arc::new(Mutex::new(Vec::new()));

    // Node "slow": its first run blocks until the test lets it go.
    let slow_pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    let errs = slow_errors.clone();
    let slow = ClusterJob::builder(
        "failover",
        Arc::new(PgLockStore::connect(&server.url()).unwrap()),
    )
    .node("slow")
    .at_most_for(lease)
    .misfire_grace(Duration::ZERO)
    .on_error(move |e| errs.lock().unwrap().push(e))
    .build()
    .unwrap()
    .schedule_at_fixed_rate(
        &slow_pool.handle(),
        move |run| {
            let _ = started_tx.send(run.number());
            let _ = finish_rx.lock().unwrap().recv();
        },
        PERIOD,
    )
    .unwrap();
    let held = started_rx.recv_timeout(LONG).unwrap();

    // Node "fast" sees the lease, waits for it to end, and takes over.
    let runs: Runs = Arc::default();
    let fast_errors = Arc::new(Mutex::new(Vec::new()));
    let fast_pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    let store = Arc::new(PgLockStore::connect(&server.url()).unwrap());
    let fast = schedule(&fast_pool, store, "fast", lease, &runs, &fast_errors);
    assert!(wait_until(LONG, || !runs.lock().unwrap().is_empty()));
    let first = runs.lock().unwrap()[0].0;
    assert!(
        first >= held + 3,
        "run {first} ran inside the lease of run {held}"
    );

    // The slow run ends: its release finds the lease gone and another node's claim there.
    finish_tx.send(()).unwrap();
    drop(finish_tx);
    assert!(wait_until(LONG, || slow_errors
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, ClusterError::LeaseExpired { .. }))));
    assert!(fast.cancel());
    assert!(slow.cancel());
    // (On a slow machine the first claim may come a period after the job was registered:
    // that period's run is then reported skipped, before anything else.)
    let errors: Vec<ClusterError> = slow_errors
        .lock()
        .unwrap()
        .iter()
        .filter(|e| !matches!(e, ClusterError::RunSkipped { run, .. } if *run < held))
        .cloned()
        .collect();
    assert_eq!(
        errors[0],
        ClusterError::LeaseExpired {
            job: "failover".into(),
            run: held,
            lease,
            taken_over: true
        }
    );
    assert!(errors[0]
        .to_string()
        .contains("ran out before the run was released"));
}

#[test]
fn without_a_handler_errors_go_to_the_pools_panic_handler() {
    // Nothing listens on this port: every claim fails.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("host=127.0.0.1 port={port} user=postgres");
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let pool = ScheduledThreadPool::builder()
        .threads(1)
        .panic_handler(move |payload| {
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            let _ = tx.lock().unwrap().send(text);
        })
        .build()
        .unwrap();
    let store = Arc::new(PgLockStore::connect_lazy(&url).unwrap());
    let task = ClusterJob::builder("orphan", store)
        .node("n1")
        .build()
        .unwrap()
        .schedule_at_fixed_rate(&pool.handle(), |_| unreachable!("no claim can win"), PERIOD)
        .unwrap();
    // Two reports in a row: the job goes on after the first.
    for _ in 0..2 {
        let text = rx.recv_timeout(LONG).unwrap();
        assert!(
            text.contains("`orphan` on node `n1`") && text.contains("unavailable"),
            "{text}"
        );
    }
    assert!(!task.is_done());
    assert!(task.cancel());
    assert!(pool.stats().panicked >= 2);
}

//! Cluster jobs on a real PostgreSQL server: several nodes (pools) share a job and every planned
//! run runs on exactly one of them; the server going away and coming back; setup errors.
//!
//! Nothing here asserts on wall-clock time: runs are checked by run number, against every
//! claim attempt the nodes made (recorded by a wrapper around the store).

use crate::pg_common::{wait_until, PgServer, LONG};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wheelpool::cluster::{ClusterError, ClusterJob, ClusterTask, PgLockStore, StoreErrorKind};
use wheelpool::{ScheduledThreadPool, TaskError};

const PERIOD: Duration = Duration::from_millis(100);

/// One node: its own pool, store connection and job handle; runs go to `runs` as
/// (run number, node), errors to `errors`.
struct Node {
    pool: ScheduledThreadPool,
    task: ClusterTask,
}

type Runs = Arc<Mutex<Vec<(u64, String)>>>;
type Errors = Arc<Mutex<Vec<ClusterError>>>;

fn node(store: Arc<PgLockStore>, label: &str, job: &str, runs: &Runs, errors: &Errors) -> Node {
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let errors = errors.clone();
    let job = ClusterJob::builder(job, store)
        .node(label)
        .at_most_for(Duration::from_secs(2))
        .on_error(move |e| errors.lock().unwrap().push(e))
        .build()
        .unwrap();
    let runs = runs.clone();
    let task = job
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |run| {
                runs.lock()
                    .unwrap()
                    .push((run.number(), run.node().to_owned()))
            },
            PERIOD,
        )
        .unwrap();
    Node { pool, task }
}

fn stop(nodes: Vec<Node>) {
    for n in &nodes {
        assert!(n.task.cancel());
        assert_eq!(n.task.join(), Err(TaskError::Cancelled));
    }
    for n in nodes {
        n.pool.shutdown();
        assert!(n.pool.await_termination(LONG));
    }
}

/// Run numbers that ran more than once, with the nodes that ran them.
fn doubles(runs: &[(u64, String)]) -> Vec<(u64, Vec<String>)> {
    let mut by_run: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for (run, node) in runs {
        by_run.entry(*run).or_default().push(node.clone());
    }
    by_run.into_iter().filter(|(_, n)| n.len() > 1).collect()
}

#[test]
fn three_nodes_run_every_period_exactly_once() {
    let server = PgServer::start();
    let runs: Runs = Arc::default();
    let errors: Errors = Arc::default();
    let stores: Vec<Arc<PgLockStore>> = (0..3)
        .map(|_| Arc::new(PgLockStore::connect(&server.url()).unwrap()))
        .collect();
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .zip(&stores)
        .map(|(label, store)| node(store.clone(), label, "sweep", &runs, &errors))
        .collect();

    assert!(
        wait_until(LONG, || runs.lock().unwrap().len() >= 30),
        "30 runs within {LONG:?}"
    );
    stop(nodes);

    let runs = runs.lock().unwrap().clone();
    assert_eq!(doubles(&runs), vec![], "no run number may run twice");
    // Nothing was skipped or failed: every run from the first to the last ran, once.
    assert!(
        errors.lock().unwrap().is_empty(),
        "{:?}",
        errors.lock().unwrap()
    );
    let mut numbers: Vec<u64> = runs.iter().map(|(run, _)| *run).collect();
    numbers.sort_unstable();
    let (first, last) = (numbers[0], *numbers.last().unwrap());
    assert_eq!(
        numbers,
        (first..=last).collect::<Vec<_>>(),
        "every run between the first and the last ran"
    );
    // The counters agree: each run was won by exactly one node.
    let won: u64 = stores.iter().map(|s| s.stats().claims_won).sum();
    assert_eq!(won, numbers.len() as u64);
    // The job table shows the last run and the node that ran it.
    let table = stores[0].jobs().unwrap();
    assert_eq!(table.len(), 1);
    assert_eq!(table[0].name, "sweep");
    assert_eq!(table[0].period, PERIOD);
    assert!(table[0].last_run.unwrap() >= last);
    println!("{} runs, run numbers {first}..={last}", numbers.len());
}

#[test]
fn runs_are_skipped_while_the_server_is_down_and_resume_after() {
    let server = PgServer::start();
    let runs: Runs = Arc::default();
    let errors: Errors = Arc::default();
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|label| {
            let store = PgLockStore::connect(&server.url()).unwrap();
            node(Arc::new(store), label, "report", &runs, &errors)
        })
        .collect();
    let count = |v: &Runs| v.lock().unwrap().len();
    assert!(wait_until(LONG, || count(&runs) >= 5));

    server.stop();
    // Every node reports the outage (each failed claim, then fewer as the streak grows) ...
    assert!(
        wait_until(LONG, || errors.lock().unwrap().len() >= 4),
        "errors reported while down"
    );
    let during = count(&runs);
    assert!(wait_until(LONG, || errors.lock().unwrap().len() >= 10));
    // ... and no run happens while it is down.
    assert_eq!(count(&runs), during, "a run happened with the server down");
    for err in errors.lock().unwrap().iter() {
        assert!(
            matches!(err, ClusterError::Unavailable { .. }),
            "unexpected error: {err}"
        );
    }

    server.restart();
    assert!(
        wait_until(LONG, || count(&runs) >= during + 5),
        "runs resume after the restart"
    );
    stop(nodes);
    let runs = runs.lock().unwrap().clone();
    assert_eq!(doubles(&runs), vec![], "no run number may run twice");
}

#[test]
fn a_bad_connection_string_is_a_typed_error_at_setup() {
    for bad in [
        "host=localhost port=notaport",
        "postgresql://user@host:99999/db",
        "host=localhost sslmode=require",
        "nonsense without equals",
    ] {
        let err = PgLockStore::connect(bad).unwrap_err();
        assert!(matches!(err, ClusterError::InvalidUrl(_)), "{bad}: {err:?}");
        assert!(matches!(
            PgLockStore::connect_lazy(bad),
            Err(ClusterError::InvalidUrl(_))
        ));
    }
}

#[test]
fn an_unreachable_server_at_setup_is_unavailable() {
    // A port nothing listens on: connect() fails at once, connect_lazy() does not try.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("host=127.0.0.1 port={port} user=postgres connect_timeout=5");
    let err = PgLockStore::connect(&url).unwrap_err();
    let ClusterError::Unavailable(cause) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(cause.kind(), StoreErrorKind::Connect, "{err}");
    assert!(err.to_string().contains("connect failed"), "{err}");
    assert!(PgLockStore::connect_lazy(&url).is_ok());
}

#[test]
fn the_server_directory_is_removed_on_drop() {
    let server = PgServer::start();
    let dir = server.dir().to_owned();
    PgLockStore::connect(&server.url()).unwrap();
    assert!(dir.exists());
    drop(server);
    assert!(!dir.exists());
}

#[test]
fn the_server_failing_mid_run_leaves_the_lease_to_expire_and_the_job_goes_on() {
    let server = PgServer::start();
    let lease = Duration::from_millis(500); // 5 periods
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let runs: Runs = Arc::default();
    let errors: Errors = Arc::default();
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .panic_handler(|_| {})
        .build()
        .unwrap();
    let (r, e) = (runs.clone(), errors.clone());
    let task = ClusterJob::builder(
        "mid-run",
        Arc::new(PgLockStore::connect(&server.url()).unwrap()),
    )
    .at_most_for(lease)
    // No grace: the runs the unreleased lease held up are skipped, not caught up.
    .misfire_grace(Duration::ZERO)
    .on_error(move |err| e.lock().unwrap().push(err))
    .build()
    .unwrap()
    .schedule_at_fixed_rate(
        &pool.handle(),
        move |run| {
            let first = r.lock().unwrap().is_empty();
            r.lock().unwrap().push((run.number(), String::new()));
            if first {
                let _ = started_tx.send(());
                let _ = go_rx.lock().unwrap().recv();
            }
        },
        PERIOD,
    )
    .unwrap();

    started_rx.recv_timeout(LONG).unwrap();
    server.stop(); // the database goes away while the first run is in progress
    go_tx.send(()).unwrap();
    // The release fails: reported, no panic, and the job goes on (its claims fail too).
    // (On a slow machine the first claim may come a period after the job was registered:
    // that period's run, before the first run, is then reported skipped, as it should be.)
    let first = runs.lock().unwrap()[0].0;
    let outage = |errors: &Errors| -> usize {
        errors
            .lock()
            .unwrap()
            .iter()
            .filter(|e| !matches!(e, ClusterError::RunSkipped { run, .. } if *run < first))
            .count()
    };
    assert!(wait_until(LONG, || outage(&errors) >= 3));
    for err in errors.lock().unwrap().iter() {
        assert!(
            matches!(err, ClusterError::Unavailable { .. })
                || matches!(err, ClusterError::RunSkipped { run, .. } if *run < first),
            "{err}"
        );
    }
    assert_eq!(runs.lock().unwrap().len(), 1);
    server.restart();
    assert!(
        wait_until(LONG, || runs.lock().unwrap().len() >= 3),
        "runs resume"
    );
    assert!(task.cancel());
    assert_eq!(pool.stats().panicked, 0);
    let runs = runs.lock().unwrap().clone();
    assert_eq!(doubles(&runs), vec![], "no run number may run twice");
    // The runs between the first and the second (the outage, no grace) are each reported
    // as skipped. (The lease left behind does not hold up this node, which knows its run
    // ended; it would hold up another node for its full length.)
    // (Reports reach the handler from several workers: in any order.)
    let mut skipped: Vec<u64> = errors
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            ClusterError::RunSkipped { run, .. } if *run > first => Some(*run),
            _ => None,
        })
        .collect();
    skipped.sort_unstable();
    assert_eq!(skipped, (first + 1..runs[1].0).collect::<Vec<_>>());
}

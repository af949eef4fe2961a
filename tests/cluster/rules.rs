//! The rules of cluster jobs on a real PostgreSQL server, one test per rule: settings that
//! differ (refused, or taken over without running any stretch of time twice), exact times
//! for any period, input refused before any run, database errors that name their cause,
//! leases kept alive by long runs, and pause / resume / trigger across nodes.
//!
//! Every wait is bounded (`wait_until` with [`LONG`]); nothing asserts on speed.

use crate::pg_common::{wait_until, PgServer, LONG};
use std::collections::BTreeMap;
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use wheelpool::cluster::{
    ClusterError, ClusterJob, ClusterJobBuilder, ClusterTask, PgLockStore, SkipReason,
};
use wheelpool::ScheduledThreadPool;

/// What ran: run number, planned time, period of the node that ran it, node.
type Runs = Arc<Mutex<Vec<Ran>>>;
type Errors = Arc<Mutex<Vec<ClusterError>>>;

#[derive(Debug, Clone)]
struct Ran {
    run: u64,
    planned: SystemTime,
    period: Duration,
    node: String,
    started: SystemTime,
    ended: SystemTime,
    triggered: bool,
}

/// One node: its own pool and store.
struct Node {
    pool: ScheduledThreadPool,
    task: ClusterTask,
    errors: Errors,
}

/// Schedules `job` on a new node; `tune` adds settings to the builder; the body records what
/// ran and then waits `hold`.
fn node_with(
    url: &str,
    label: &str,
    job: &str,
    period: Duration,
    runs: &Runs,
    hold: Duration,
    tune: impl FnOnce(ClusterJobBuilder) -> ClusterJobBuilder,
) -> Result<Node, ClusterError> {
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let store = Arc::new(PgLockStore::connect(url).unwrap());
    let errors: Errors = Arc::default();
    let e = errors.clone();
    let builder = ClusterJob::builder(job, store)
        .node(label)
        .at_most_for(Duration::from_secs(5))
        .on_error(move |err| e.lock().unwrap().push(err));
    let job = tune(builder).build()?;
    let runs = runs.clone();
    let task = job.schedule_at_fixed_rate(
        &pool.handle(),
        move |run| {
            let started = SystemTime::now();
            std::thread::sleep(hold);
            runs.lock().unwrap().push(Ran {
                run: run.number(),
                planned: run.planned_at(),
                period,
                node: run.node().to_owned(),
                started,
                ended: SystemTime::now(),
                triggered: run.is_triggered(),
            });
        },
        period,
    )?;
    Ok(Node { pool, task, errors })
}

fn node(url: &str, label: &str, job: &str, period: Duration, runs: &Runs) -> Node {
    node_with(url, label, job, period, runs, Duration::ZERO, |b| b).unwrap()
}

fn stop(nodes: Vec<Node>) {
    for n in &nodes {
        n.task.cancel();
    }
    for n in nodes {
        n.pool.shutdown();
        assert!(n.pool.await_termination(LONG));
    }
}

/// Runs `sql` in an admin session; its trimmed output.
fn psql(server: &PgServer, sql: &str) -> String {
    server.psql(sql).trim().to_owned()
}

/// Run numbers that ran more than once (per grid: a takeover starts a new count).
fn doubles(runs: &[Ran]) -> Vec<(Duration, u64)> {
    let mut seen: BTreeMap<(Duration, u64), usize> = BTreeMap::new();
    for r in runs {
        *seen.entry((r.period, r.run)).or_default() += 1;
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, _)| k)
        .collect()
}

#[test]
fn a_node_with_other_settings_is_refused_and_runs_nothing() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let period = Duration::from_millis(100);
    let a = node(&url, "a", "drift", period, &runs);
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= 2));

    // Another period, or another offset: refused at schedule, with both settings named.
    let other = node_with(
        &url,
        "b",
        "drift",
        Duration::from_secs(2),
        &runs,
        Duration::ZERO,
        |b| b,
    );
    match other {
        Err(ClusterError::ConfigMismatch { job, stored, ours }) => {
            assert_eq!(job, "drift");
            assert_eq!(stored, (period, Duration::ZERO));
            assert_eq!(ours, (Duration::from_secs(2), Duration::ZERO));
        }
        other => panic!("expected ConfigMismatch, got {:?}", other.err()),
    }
    let shifted = node_with(&url, "c", "drift", period, &runs, Duration::ZERO, |b| {
        b.offset(Duration::from_millis(50))
    });
    assert!(matches!(shifted, Err(ClusterError::ConfigMismatch { .. })));
    let before = runs.lock().unwrap().len();
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= before + 5));
    stop(vec![a]);
    let runs = runs.lock().unwrap().clone();
    assert!(runs.iter().all(|r| r.node == "a" && r.period == period));
    assert_eq!(doubles(&runs), vec![]);
}

#[test]
fn a_rolling_deploy_takes_the_job_over_without_running_any_time_twice() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let (old, new) = (Duration::from_millis(100), Duration::from_millis(700));
    let a = node(&url, "old-a", "deploy", old, &runs);
    let b = node(&url, "old-b", "deploy", old, &runs);
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= 5));

    // The new replica restarts several times (a crash loop during the deploy): each start
    // takes the job over with the same settings, which changes nothing after the first.
    let mut restarts = Vec::new();
    for i in 0..4 {
        let n = node_with(
            &url,
            &format!("new-{i}"),
            "deploy",
            new,
            &runs,
            Duration::ZERO,
            |b| b.take_over(true),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(150));
        restarts.push(n);
        if i < 3 {
            stop(vec![restarts.pop().unwrap()]);
        }
    }
    let new_runs = |r: &Runs| r.lock().unwrap().iter().filter(|r| r.period == new).count();
    assert!(
        wait_until(LONG, || new_runs(&runs) >= 4),
        "the new grid runs"
    );
    // The old nodes report the mismatch once each and run nothing more.
    for n in [&a, &b] {
        assert!(wait_until(LONG, || !n.errors.lock().unwrap().is_empty()));
        let errors = n.errors.lock().unwrap();
        assert!(
            errors
                .iter()
                .all(|e| matches!(e, ClusterError::ConfigMismatch { .. })),
            "{errors:?}"
        );
        assert_eq!(errors.len(), 1, "reported once: {errors:?}");
    }
    stop(restarts);
    stop(vec![a, b]);

    let mut runs = runs.lock().unwrap().clone();
    assert_eq!(doubles(&runs), vec![], "a run number ran twice");
    // No stretch of time ran twice: each run's period [planned, planned + period) starts at
    // or after the end of the one before.
    runs.sort_by_key(|r| r.planned);
    for w in runs.windows(2) {
        assert!(
            w[1].planned >= w[0].planned + w[0].period,
            "{:?} overlaps {:?}",
            w[1],
            w[0]
        );
    }
    let first_new = runs.iter().position(|r| r.period == new).unwrap();
    assert!(runs[first_new..].iter().all(|r| r.period == new));
}

#[test]
fn a_third_of_a_second_is_exact() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let period = Duration::from_secs(1) / 3; // 333 333 333 ns: not whole microseconds
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|l| node(&url, l, "third", period, &runs))
        .collect();
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= 8));
    stop(nodes);
    let runs = runs.lock().unwrap().clone();
    assert_eq!(doubles(&runs), vec![]);
    let mut numbers: Vec<u64> = runs.iter().map(|r| r.run).collect();
    numbers.sort_unstable();
    assert_eq!(
        numbers,
        (numbers[0]..numbers[0] + numbers.len() as u64).collect::<Vec<_>>()
    );
    for r in &runs {
        let since = r.planned.duration_since(UNIX_EPOCH).unwrap();
        assert_eq!(since.as_nanos(), u128::from(r.run) * 333_333_333, "{r:?}");
        // The store and this process read the same machine's clock: a run never starts
        // before its planned time (1 ms for the two readings), and is not minutes away from
        // it (a period rounded to whole microseconds put planned times 30 minutes ahead).
        // How close to it is a matter for the scale benchmark, not for a test.
        if let Err(early) = r.started.duration_since(r.planned) {
            assert!(
                early.duration() < Duration::from_millis(1),
                "{r:?} started early"
            );
        }
        let late = r.started.duration_since(r.planned).unwrap_or_default();
        assert!(late < Duration::from_secs(30), "{r:?} is {late:?} late");
    }
}

#[test]
fn bad_input_is_refused_before_any_run() {
    let store = Arc::new(PgLockStore::connect_lazy("host=127.0.0.1 port=1").unwrap());
    let job = |name: &str| ClusterJob::builder(name, store.clone());
    let invalid = |r: Result<ClusterJob, ClusterError>| {
        assert!(
            matches!(r, Err(ClusterError::InvalidJob(_))),
            "{:?}",
            r.err()
        );
    };
    invalid(job("").build());
    invalid(job("nul\0name").build());
    invalid(job(&"x".repeat(201)).build());
    invalid(job("ok").node("nul\0label").build());
    invalid(job("ok").at_most_for(Duration::MAX).build());
    invalid(
        job("ok")
            .at_most_for(Duration::from_nanos(1_500_000_001))
            .build(),
    );
    invalid(job("ok").at_most_for(Duration::from_micros(999)).build());
    invalid(job("ok").misfire_grace(Duration::MAX).build());

    let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    let ok = job("ok").on_error(|_| {}).build().unwrap();
    let schedule = |period: Duration| ok.schedule_at_fixed_rate(&pool.handle(), |_| {}, period);
    for period in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_secs(101 * 365 * 86_400),
        Duration::MAX,
    ] {
        let err = schedule(period).unwrap_err();
        assert!(
            matches!(err, ClusterError::InvalidJob(_)),
            "{period:?}: {err}"
        );
    }
    let shifted = job("ok").offset(Duration::from_secs(2)).build().unwrap();
    let err = shifted
        .schedule_at_fixed_rate(&pool.handle(), |_| {}, Duration::from_secs(1))
        .unwrap_err();
    assert!(matches!(err, ClusterError::InvalidJob(_)), "{err}");
    assert_eq!(pool.stats().completed, 0, "nothing ran");

    for url in [
        "user=postgres dbname=postgres",
        "dbname=app",
        "postgresql:///app",
    ] {
        let err = PgLockStore::connect(url).unwrap_err();
        assert!(matches!(err, ClusterError::InvalidUrl(_)), "{url}: {err:?}");
    }
    let err = PgLockStore::builder("host=db")
        .connections(0)
        .connect_lazy()
        .unwrap_err();
    assert!(matches!(err, ClusterError::InvalidJob(_)), "{err:?}");
}

#[test]
fn a_database_error_names_its_sqlstate() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let a = node(&url, "a", "errs", Duration::from_millis(100), &runs);
    assert!(wait_until(LONG, || !runs.lock().unwrap().is_empty()));
    psql(&server, "DROP TABLE wheelpool_jobs");
    assert!(wait_until(LONG, || !a.errors.lock().unwrap().is_empty()));
    let err = a.errors.lock().unwrap()[0].clone();
    stop(vec![a]);
    let ClusterError::Store(cause) = &err else {
        panic!("expected a Store error, got {err:?}")
    };
    assert_eq!(cause.sqlstate(), Some("42P01"), "{err}"); // undefined_table
    assert!(err.to_string().contains("42P01"), "{err}");
    assert!(err.to_string().contains("wheelpool_jobs"), "{err}");
    assert!(err.source().is_some() && cause.source().is_some());
}

/// Runs whose [started, ended] overlap, across all nodes.
fn overlapping(runs: &[Ran]) -> Vec<(Ran, Ran)> {
    let mut runs = runs.to_vec();
    runs.sort_by_key(|r| r.started);
    runs.windows(2)
        .filter(|w| w[1].started < w[0].ended)
        .map(|w| (w[0].clone(), w[1].clone()))
        .collect()
}

#[test]
fn a_kept_alive_lease_holds_the_job_through_a_long_run() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let period = Duration::from_millis(100);
    // Every run lasts 4 s, over two and a half leases: renewals (every 500 ms) keep it. (The
    // lease leaves a second for a renewal held up on a busy machine.)
    let lease = Duration::from_millis(1500);
    let long = |label: &str| {
        node_with(
            &url,
            label,
            "long",
            period,
            &runs,
            Duration::from_secs(4),
            |b| b.at_most_for(lease).keep_alive(true),
        )
        .unwrap()
    };
    let nodes = vec![long("a"), long("b")];
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= 2));
    let errors: Vec<ClusterError> = nodes
        .iter()
        .flat_map(|n| n.errors.lock().unwrap().clone())
        .collect();
    stop(nodes);
    let runs = runs.lock().unwrap().clone();
    let overlaps = overlapping(&runs);
    assert!(overlaps.is_empty(), "two runs overlapped: {overlaps:?}");
    assert!(
        errors.iter().all(|e| matches!(
            e,
            ClusterError::RunSkipped {
                reason: SkipReason::Misfired,
                ..
            }
        )),
        "no lease expired: {errors:?}"
    );
}

#[test]
fn a_run_can_keep_its_own_lease_alive() {
    let server = PgServer::start();
    let url = server.url();
    // Renewed every 100 ms for 3 s: a 2 s lease leaves room for a busy machine.
    let lease = Duration::from_secs(2);
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    let errors: Errors = Arc::default();
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let e = errors.clone();
    let task = ClusterJob::builder("self", Arc::new(PgLockStore::connect(&url).unwrap()))
        .at_most_for(lease)
        .on_error(move |err| e.lock().unwrap().push(err))
        .build()
        .unwrap()
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |run| {
                let mut kept = 0;
                let end = Instant::now() + Duration::from_secs(3);
                while Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(100));
                    run.keep_alive().unwrap();
                    kept += 1;
                }
                let _ = tx.lock().unwrap().send(kept);
            },
            Duration::from_secs(3600),
        )
        .unwrap();
    let kept = rx.recv_timeout(LONG).unwrap();
    assert!(kept > 0);
    // Another node sees the lease held long after the first one would have ended.
    let store = PgLockStore::connect(&url).unwrap();
    let table = store.jobs().unwrap();
    assert_eq!(table[0].name, "self");
    assert!(task.cancel());
    assert!(
        errors.lock().unwrap().is_empty(),
        "{:?}",
        errors.lock().unwrap()
    );
}

#[test]
fn pause_skips_runs_once_resume_restarts_them_and_trigger_runs_once() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let period = Duration::from_millis(100);
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|l| node(&url, l, "steer", period, &runs))
        .collect();
    let admin = PgLockStore::connect(&url).unwrap();
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= 3));

    assert!(admin.pause("steer").unwrap());
    assert!(!admin.pause("no-such-job").unwrap());
    let paused = |nodes: &[Node]| -> Vec<u64> {
        nodes
            .iter()
            .flat_map(|n| n.errors.lock().unwrap().clone())
            .filter_map(|e| match e {
                ClusterError::RunSkipped {
                    run,
                    reason: SkipReason::Paused,
                    ..
                } => Some(run),
                _ => None,
            })
            .collect()
    };
    assert!(
        wait_until(LONG, || paused(&nodes).len() >= 5),
        "paused runs are reported"
    );
    assert!(admin.jobs().unwrap()[0].paused);
    assert!(admin.resume("steer").unwrap());
    let after = runs.lock().unwrap().len();
    assert!(
        wait_until(LONG, || runs.lock().unwrap().len() >= after + 3),
        "runs resume"
    );

    let ran = runs.lock().unwrap().clone();
    let mut skipped = paused(&nodes);
    skipped.sort_unstable();
    let mut dedup = skipped.clone();
    dedup.dedup();
    assert_eq!(dedup, skipped, "a paused run was reported twice");
    for s in &skipped {
        assert!(ran.iter().all(|r| r.run != *s), "paused run {s} ran");
    }
    let counted: u64 = nodes.iter().map(|n| n.task.stats().skipped_paused).sum();
    assert_eq!(counted, skipped.len() as u64);
    stop(nodes);
    assert_eq!(doubles(&ran), vec![]);
}

#[test]
fn a_triggered_run_runs_once_across_nodes() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let hour = Duration::from_secs(3600);
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|l| node(&url, l, "hourly", hour, &runs))
        .collect();
    // The first claim runs the current hour's run.
    assert!(wait_until(LONG, || runs.lock().unwrap().len() == 1));
    let admin = PgLockStore::connect(&url).unwrap();
    assert!(admin.trigger("hourly").unwrap());
    assert!(!admin.trigger("no-such-job").unwrap());
    // The admin store has no local node of the job: trigger from a node's own store wakes it.
    let store_of_a = Arc::new(PgLockStore::connect(&url).unwrap());
    let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    let r = runs.clone();
    let d = ClusterJob::builder("hourly", store_of_a.clone())
        .node("d")
        .on_error(|_| {})
        .build()
        .unwrap()
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |run| {
                r.lock().unwrap().push(Ran {
                    run: run.number(),
                    planned: run.planned_at(),
                    period: hour,
                    node: "d".into(),
                    started: SystemTime::now(),
                    ended: SystemTime::now(),
                    triggered: run.is_triggered(),
                })
            },
            hour,
        )
        .unwrap();
    assert!(
        wait_until(LONG, || runs.lock().unwrap().iter().any(|r| r.triggered)),
        "node d's first claim finds the pending trigger"
    );
    assert!(store_of_a.trigger("hourly").unwrap());
    assert!(
        wait_until(LONG, || runs
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.triggered)
            .count()
            == 2),
        "a trigger on d's own store wakes d at once"
    );
    std::thread::sleep(Duration::from_millis(300)); // room for a wrong third run to show
    let ran = runs.lock().unwrap().clone();
    assert_eq!(ran.iter().filter(|r| r.triggered).count(), 2, "{ran:?}");
    assert_eq!(ran.iter().filter(|r| !r.triggered).count(), 1, "{ran:?}");
    assert_eq!(admin.jobs().unwrap()[0].pending_triggers, 0);
    d.cancel();
    stop(nodes);
}

#[test]
fn a_claim_whose_answer_was_lost_is_handed_back_to_its_node_only() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let period = Duration::from_millis(200);
    let a = node(&url, "a", "lost", period, &runs);
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= 2));
    // What the database holds after node a's claim committed but its answer never came back:
    // one more claim by a's chain, for the next run, with a lease (as if the connection had
    // dropped on the way back). Made between two runs of a (its last claim released): made
    // while a run of a is under way, it would take that run's lease, whose release would then
    // report LeaseExpired.
    let mut lost = None;
    assert!(
        wait_until(LONG, || {
            lost = psql(
                &server,
                "UPDATE wheelpool_jobs SET claim_id = claim_id + 1, last_run = last_run + 1, \
                 claim_run = last_run + 1, claim_from = last_run + 1, released = false, \
                 locked_until = now() + interval '30 seconds' \
                 WHERE name = 'lost' AND released RETURNING last_run",
            )
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<u64>().ok());
            lost.is_some()
        }),
        "a's claims were never released"
    );
    let lost = lost.unwrap();
    // A second node must not run it (the lease is a's), and a's next claim gets it back.
    let b = node(&url, "b", "lost", period, &runs);
    assert!(
        wait_until(LONG, || runs.lock().unwrap().iter().any(|r| r.run == lost)),
        "run {lost} was handed back"
    );
    assert!(wait_until(LONG, || runs
        .lock()
        .unwrap()
        .iter()
        .any(|r| r.run > lost + 2)));
    let errors: Vec<ClusterError> = [&a, &b]
        .iter()
        .flat_map(|n| n.errors.lock().unwrap().clone())
        .collect();
    stop(vec![a, b]);
    let runs = runs.lock().unwrap().clone();
    assert_eq!(doubles(&runs), vec![]);
    let handed_back: Vec<&Ran> = runs.iter().filter(|r| r.run == lost).collect();
    assert_eq!(handed_back.len(), 1);
    assert_eq!(
        handed_back[0].node, "a",
        "only the node that made the claim runs it"
    );
    // Nothing between the first run and the last was lost or reported.
    let mut numbers: Vec<u64> = runs.iter().map(|r| r.run).collect();
    numbers.sort_unstable();
    assert_eq!(
        numbers,
        (numbers[0]..numbers[0] + numbers.len() as u64).collect::<Vec<_>>()
    );
    assert!(errors.is_empty(), "{errors:?}");
}

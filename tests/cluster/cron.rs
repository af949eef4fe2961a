//! Cron cluster jobs (features `postgres` and `cron`) on real PostgreSQL servers: several
//! nodes run each occurrence of a per-second expression once; a changed expression (or a
//! period turned into a calendar) is refused, or taken over without running any instant
//! twice; pause, resume and trigger; and a table made before cron jobs is migrated.
//!
//! Runs are checked by the instant that names them ([`ClusterRun::planned_at`]), never by how
//! late they ran: every wait is bounded (`wait_until` with [`LONG`]); misfire graces and
//! leases are long, so a starved machine delays runs but loses none.

use crate::pg_common::{wait_until, PgServer, LONG};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wheelpool::cluster::{
    ClusterError, ClusterJob, ClusterJobBuilder, ClusterRun, ClusterTask, PgLockStore, SkipReason,
};
use wheelpool::cron::Cron;
use wheelpool::ScheduledThreadPool;

const EVERY_SECOND: &str = "* * * * * *";

/// A run: the instant that names it, its number, the node, when it started, a trigger?
#[derive(Debug, Clone)]
struct Ran {
    at: SystemTime,
    number: u64,
    node: String,
    started: SystemTime,
    triggered: bool,
}

type Runs = Arc<Mutex<Vec<Ran>>>;
type Errors = Arc<Mutex<Vec<ClusterError>>>;

struct Node {
    pool: ScheduledThreadPool,
    store: Arc<PgLockStore>,
    task: ClusterTask,
    errors: Errors,
}

/// The body every node runs: records the run.
fn recorder(runs: &Runs) -> impl FnMut(&ClusterRun<'_>) + Send + 'static {
    let runs = runs.clone();
    move |run| {
        runs.lock().unwrap().push(Ran {
            at: run.planned_at(),
            number: run.number(),
            node: run.node().to_owned(),
            started: SystemTime::now(),
            triggered: run.is_triggered(),
        })
    }
}

/// A new node (its own pool and store) with the job's usual settings, `tune`d.
fn builder(
    url: &str,
    label: &str,
    job: &str,
    errors: &Errors,
) -> (ScheduledThreadPool, Arc<PgLockStore>, ClusterJobBuilder) {
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let store = Arc::new(PgLockStore::connect(url).unwrap());
    let e = errors.clone();
    let b = ClusterJob::builder(job, store.clone())
        .node(label)
        .at_most_for(Duration::from_secs(10))
        .misfire_grace(Duration::from_secs(30))
        .on_error(move |err| e.lock().unwrap().push(err));
    (pool, store, b)
}

fn cron_node_with(
    url: &str,
    label: &str,
    job: &str,
    expr: &str,
    runs: &Runs,
    tune: impl FnOnce(ClusterJobBuilder) -> ClusterJobBuilder,
) -> Result<Node, ClusterError> {
    let errors: Errors = Arc::default();
    let (pool, store, b) = builder(url, label, job, &errors);
    let cron = Cron::parse(expr, "UTC").unwrap();
    let task = tune(b)
        .build()?
        .schedule_cron(&pool.handle(), recorder(runs), &cron)?;
    Ok(Node {
        pool,
        store,
        task,
        errors,
    })
}

fn cron_node(url: &str, label: &str, job: &str, expr: &str, runs: &Runs) -> Node {
    cron_node_with(url, label, job, expr, runs, |b| b).unwrap()
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

fn errors_of(nodes: &[&Node]) -> Vec<ClusterError> {
    nodes
        .iter()
        .flat_map(|n| n.errors.lock().unwrap().clone())
        .collect()
}

/// Instants that ran more than once, with the nodes that ran them.
fn doubles(runs: &[Ran]) -> Vec<(SystemTime, Vec<String>)> {
    let mut by_at: BTreeMap<SystemTime, Vec<String>> = BTreeMap::new();
    for r in runs.iter().filter(|r| !r.triggered) {
        by_at.entry(r.at).or_default().push(r.node.clone());
    }
    by_at.into_iter().filter(|(_, n)| n.len() > 1).collect()
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Planned runs' seconds since the epoch, sorted.
fn seconds(runs: &[Ran]) -> Vec<u64> {
    let mut s: Vec<u64> = runs
        .iter()
        .filter(|r| !r.triggered)
        .map(|r| secs(r.at))
        .collect();
    s.sort_unstable();
    s
}

/// The planned runs span at least `span` seconds, first to last.
fn spans(runs: &Runs, span: u64) -> bool {
    let s = seconds(&runs.lock().unwrap());
    s.len() >= 2 && s[s.len() - 1] - s[0] >= span
}

#[test]
fn three_nodes_run_each_second_of_a_per_second_cron_exactly_once() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|l| cron_node(&url, l, "every-second", EVERY_SECOND, &runs))
        .collect();
    assert!(
        wait_until(LONG, || spans(&runs, 10)),
        "10 s of runs within {LONG:?}"
    );
    let errors = errors_of(&nodes.iter().collect::<Vec<_>>());
    let won: u64 = nodes.iter().map(|n| n.task.stats().claims_won).sum();
    let table = nodes[0].store.jobs().unwrap();
    stop(nodes);

    let runs = runs.lock().unwrap().clone();
    assert_eq!(doubles(&runs), vec![], "an occurrence ran twice");
    let s = seconds(&runs);
    assert_eq!(
        s,
        (s[0]..=s[s.len() - 1]).collect::<Vec<_>>(),
        "a second was missed"
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(won, runs.len() as u64, "each run won by one node");
    for r in &runs {
        // Named by its instant: a whole second, in nanoseconds since the epoch.
        let since = r.at.duration_since(UNIX_EPOCH).unwrap();
        assert_eq!(since.subsec_nanos(), 0, "{r:?}");
        assert_eq!(u128::from(r.number), since.as_nanos(), "{r:?}");
        // The store and this process read one machine's clock: never early (1 ms for the
        // two readings).
        if let Err(early) = r.started.duration_since(r.at) {
            assert!(
                early.duration() < Duration::from_millis(1),
                "{r:?} started early"
            );
        }
    }
    // The job table shows the schedule, the last occurrence, and the next one.
    assert_eq!(table.len(), 1);
    assert_eq!(table[0].cron.as_deref(), Some("* * * * * * (UTC)"));
    assert_eq!(table[0].period, Duration::ZERO);
    let next = table[0].next_run.duration_since(table[0].read_at).unwrap();
    assert!(next <= Duration::from_secs(1), "next run in {next:?}");
    println!("{} runs, seconds {}..={}", runs.len(), s[0], s[s.len() - 1]);
}

#[test]
fn a_changed_expression_is_refused_or_taken_over_without_running_an_instant_twice() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let a = cron_node(&url, "old-a", "deploy", EVERY_SECOND, &runs);
    let b = cron_node(&url, "old-b", "deploy", EVERY_SECOND, &runs);
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= 3));

    // Another expression, or a period, without take_over: refused, nothing run.
    let other = cron_node_with(&url, "new", "deploy", "*/2 * * * * *", &runs, |b| b);
    match other {
        Err(err @ ClusterError::ConfigMismatch { .. }) => {
            let ClusterError::ConfigMismatch { stored, ours, .. } = &err else {
                unreachable!()
            };
            assert_eq!(
                (*stored, *ours),
                (
                    (Duration::ZERO, Duration::ZERO),
                    (Duration::ZERO, Duration::ZERO)
                )
            );
            assert!(
                err.to_string()
                    .ends_with("is stored with another cron schedule: not run here"),
                "{err}"
            );
        }
        other => panic!("expected ConfigMismatch, got {:?}", other.err()),
    }
    let errors: Errors = Arc::default();
    let (pool, _, periodic) = builder(&url, "periodic", "deploy", &errors);
    let err = periodic
        .build()
        .unwrap()
        .schedule_at_fixed_rate(&pool.handle(), |_| panic!("ran"), Duration::from_secs(1))
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClusterError::ConfigMismatch {
                stored: (Duration::ZERO, _),
                ..
            }
        ),
        "{err}"
    );

    // Every second shares the even seconds with every other second: the new expression
    // takes the job over (a crash loop: four starts, each with take_over) and runs none of
    // the seconds the old one ran.
    let new = "*/2 * * * * *";
    let mut starts = Vec::new();
    for i in 0..4 {
        let label = format!("new-{i}");
        let n = cron_node_with(&url, &label, "deploy", new, &runs, |b| b.take_over(true)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        starts.push(n);
        if i < 3 {
            stop(vec![starts.pop().unwrap()]);
        }
    }
    let new_runs = |r: &Runs| {
        r.lock()
            .unwrap()
            .iter()
            .filter(|r| r.node.starts_with("new"))
            .count()
    };
    assert!(
        wait_until(LONG, || new_runs(&runs) >= 3),
        "the new expression runs"
    );
    // The old nodes report the mismatch once each and run nothing more.
    for n in [&a, &b] {
        assert!(wait_until(LONG, || !n.errors.lock().unwrap().is_empty()));
    }
    let old_errors = errors_of(&[&a, &b]);
    stop(starts);
    stop(vec![a, b]);
    drop(pool);
    assert_eq!(old_errors.len(), 2, "{old_errors:?}");
    assert!(
        old_errors
            .iter()
            .all(|e| matches!(e, ClusterError::ConfigMismatch { .. })),
        "{old_errors:?}"
    );

    let mut runs = runs.lock().unwrap().clone();
    assert_eq!(doubles(&runs), vec![], "an instant ran twice");
    runs.sort_by_key(|r| r.at);
    let first_new = runs.iter().position(|r| r.node.starts_with("new")).unwrap();
    assert!(
        runs[first_new..]
            .iter()
            .all(|r| r.node.starts_with("new") && secs(r.at) % 2 == 0),
        "{runs:?}"
    );
    assert!(runs.windows(2).all(|w| w[0].at < w[1].at));
}

#[test]
fn a_period_taken_over_by_a_calendar_runs_no_instant_twice() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    // A 1 s period and a per-second calendar name the same instants.
    let errors: Errors = Arc::default();
    let (pool, _, periodic) = builder(&url, "period", "switch", &errors);
    let task = periodic
        .build()
        .unwrap()
        .schedule_at_fixed_rate(&pool.handle(), recorder(&runs), Duration::from_secs(1))
        .unwrap();
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= 2));
    let cal = cron_node_with(&url, "cron", "switch", EVERY_SECOND, &runs, |b| {
        b.take_over(true)
    })
    .unwrap();
    assert!(wait_until(LONG, || runs
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.node == "cron")
        .count()
        >= 3));
    assert!(wait_until(LONG, || !errors.lock().unwrap().is_empty()));
    task.cancel();
    let cron_errors = errors_of(&[&cal]);
    stop(vec![cal]);
    drop(pool);
    assert!(matches!(
        errors.lock().unwrap()[..],
        [ClusterError::ConfigMismatch { .. }]
    ));
    assert!(cron_errors.is_empty(), "{cron_errors:?}");
    let mut runs = runs.lock().unwrap().clone();
    assert_eq!(doubles(&runs), vec![], "an instant ran twice");
    runs.sort_by_key(|r| r.at);
    let first = runs.iter().position(|r| r.node == "cron").unwrap();
    assert!(runs[first..].iter().all(|r| r.node == "cron"), "{runs:?}");
}

#[test]
fn occurrences_missed_while_the_server_is_down_are_reported_once_and_never_run() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    // No grace: an occurrence is claimable only until the next one, so those of the outage
    // are skipped, not caught up.
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|l| {
            cron_node_with(&url, l, "outage", EVERY_SECOND, &runs, |b| {
                b.misfire_grace(Duration::ZERO)
            })
            .unwrap()
        })
        .collect();
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= 2));
    server.stop();
    let down = SystemTime::now();
    // Two occurrences at least come and go while no node can reach the store.
    let unavailable = |nodes: &[Node]| {
        errors_of(&nodes.iter().collect::<Vec<_>>())
            .iter()
            .filter(|e| matches!(e, ClusterError::Unavailable(_)))
            .count()
    };
    assert!(wait_until(LONG, || unavailable(&nodes) >= 2
        && SystemTime::now() >= down + Duration::from_millis(2500)));
    server.restart();
    let up = SystemTime::now();
    assert!(
        wait_until(LONG, || runs
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.at > up + Duration::from_secs(1))),
        "runs resume"
    );
    let ran = runs.lock().unwrap().clone();
    let errors = errors_of(&nodes.iter().collect::<Vec<_>>());
    stop(nodes);

    assert_eq!(doubles(&ran), vec![], "an occurrence ran twice");
    let mut missed: Vec<u64> = errors
        .iter()
        .filter_map(|e| match e {
            ClusterError::RunSkipped {
                planned_at,
                reason: SkipReason::Misfired,
                ..
            } => Some(secs(*planned_at)),
            _ => None,
        })
        .collect();
    missed.sort_unstable();
    let mut once = missed.clone();
    once.dedup();
    assert_eq!(once, missed, "an occurrence was reported twice");
    let ran_s = seconds(&ran);
    for m in &missed {
        assert!(!ran_s.contains(m), "second {m} was reported missed and ran");
    }
    let outage = secs(down) + 1..secs(up);
    assert!(
        outage.clone().all(|s| missed.contains(&s)),
        "{outage:?} not all reported: {missed:?}"
    );
    // Every second from the first run to the last ran or was reported.
    let (lo, hi) = (ran_s[0], ran_s[ran_s.len() - 1]);
    let mut all: Vec<u64> = ran_s
        .iter()
        .chain(&missed)
        .copied()
        .filter(|s| (lo..=hi).contains(s))
        .collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (lo..=hi).collect::<Vec<_>>(),
        "a second neither ran nor was reported"
    );
    // Nothing else went wrong than the outage (a run cut off by it may be reported
    // unconfirmed by the other node: it may not have run).
    for e in &errors {
        assert!(
            matches!(
                e,
                ClusterError::Unavailable(_) | ClusterError::RunSkipped { .. }
            ),
            "{e}"
        );
    }
}

#[test]
fn pause_skips_occurrences_once_resume_restarts_them_and_trigger_runs_once() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|l| cron_node(&url, l, "steer", EVERY_SECOND, &runs))
        .collect();
    let admin = PgLockStore::connect(&url).unwrap();
    assert!(wait_until(LONG, || runs.lock().unwrap().len() >= 2));

    assert!(admin.pause("steer").unwrap());
    let paused = |nodes: &[Node]| -> Vec<SystemTime> {
        errors_of(&nodes.iter().collect::<Vec<_>>())
            .into_iter()
            .filter_map(|e| match e {
                ClusterError::RunSkipped {
                    planned_at,
                    reason: SkipReason::Paused,
                    ..
                } => Some(planned_at),
                _ => None,
            })
            .collect()
    };
    assert!(
        wait_until(LONG, || paused(&nodes).len() >= 3),
        "paused occurrences are reported"
    );
    assert!(admin.jobs().unwrap()[0].paused);
    assert!(admin.resume("steer").unwrap());
    let after = runs.lock().unwrap().len();
    assert!(
        wait_until(LONG, || runs.lock().unwrap().len() >= after + 2),
        "runs resume"
    );

    let ran = runs.lock().unwrap().clone();
    let mut skipped = paused(&nodes);
    skipped.sort_unstable();
    let mut once = skipped.clone();
    once.dedup();
    assert_eq!(once, skipped, "a paused occurrence was reported twice");
    for s in &skipped {
        assert!(
            ran.iter().all(|r| r.at != *s),
            "paused occurrence {s:?} ran"
        );
        assert_eq!(s.duration_since(UNIX_EPOCH).unwrap().subsec_nanos(), 0);
    }
    let counted: u64 = nodes.iter().map(|n| n.task.stats().skipped_paused).sum();
    assert_eq!(counted, skipped.len() as u64);
    // Every second from the first run to the last either ran or was reported paused.
    let ran_s = seconds(&ran);
    let (lo, hi) = (ran_s[0], ran_s[ran_s.len() - 1]);
    let mut all: Vec<u64> = ran_s
        .iter()
        .copied()
        .chain(skipped.iter().map(|s| secs(*s)))
        .collect();
    all.retain(|s| (lo..=hi).contains(s));
    all.sort_unstable();
    let others: Vec<ClusterError> = errors_of(&nodes.iter().collect::<Vec<_>>())
        .into_iter()
        .filter(|e| {
            !matches!(
                e,
                ClusterError::RunSkipped {
                    reason: SkipReason::Paused,
                    ..
                }
            )
        })
        .collect();
    assert!(others.is_empty(), "{others:?}");
    stop(nodes);
    assert_eq!(doubles(&ran), vec![]);
    assert_eq!(
        all,
        (lo..=hi).collect::<Vec<_>>(),
        "a second neither ran nor was reported"
    );
}

#[test]
fn a_triggered_run_of_a_cron_job_runs_once_across_nodes() {
    let server = PgServer::start();
    let url = server.url();
    let runs: Runs = Arc::default();
    // New Year only: no planned run comes during the test.
    let yearly = "0 0 0 1 1 *";
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|l| cron_node(&url, l, "yearly", yearly, &runs))
        .collect();
    // A trigger on a node's own store wakes that node at once.
    assert!(nodes[0].store.trigger("yearly").unwrap());
    assert!(
        wait_until(LONG, || runs.lock().unwrap().len() == 1),
        "the trigger ran"
    );
    // A trigger from an admin store is found by the first claim of a node that starts.
    let admin = PgLockStore::connect(&url).unwrap();
    assert!(admin.trigger("yearly").unwrap());
    let d = cron_node(&url, "d", "yearly", yearly, &runs);
    assert!(
        wait_until(LONG, || runs.lock().unwrap().len() == 2),
        "the second trigger ran"
    );
    std::thread::sleep(Duration::from_millis(300)); // room for a wrong third run to show
    let ran = runs.lock().unwrap().clone();
    assert_eq!(ran.len(), 2, "{ran:?}");
    assert!(ran.iter().all(|r| r.triggered), "{ran:?}");
    assert_eq!(admin.jobs().unwrap()[0].pending_triggers, 0);
    let mut all = nodes;
    all.push(d);
    let errors = errors_of(&all.iter().collect::<Vec<_>>());
    stop(all);
    assert!(errors.is_empty(), "{errors:?}");
}

/// The table as a version before cron jobs made it (no `cron` column).
const OLD_TABLE: &str = "CREATE TABLE wheelpool_jobs (
    name text PRIMARY KEY, period_ns bigint NOT NULL CHECK (period_ns > 0),
    offset_ns bigint NOT NULL CHECK (offset_ns >= 0), last_run bigint NOT NULL,
    claim_id bigint NOT NULL DEFAULT 0, locked_by text NOT NULL DEFAULT '',
    node text NOT NULL DEFAULT '', locked_at timestamptz,
    locked_until timestamptz NOT NULL DEFAULT 'epoch',
    lease_trigger boolean NOT NULL DEFAULT false, released boolean NOT NULL DEFAULT true,
    claim_run bigint NOT NULL DEFAULT -1, claim_from bigint NOT NULL DEFAULT 0,
    paused boolean NOT NULL DEFAULT false, triggers bigint NOT NULL DEFAULT 0,
    triggers_run bigint NOT NULL DEFAULT 0) WITH (fillfactor = 50)";

#[test]
fn a_table_from_before_cron_jobs_is_migrated_and_keeps_its_runs() {
    let server = PgServer::start();
    let url = server.url();
    server.psql(OLD_TABLE);
    // A periodic job of the old version, 100 ms, whose run due now has run.
    let last: u64 = server
        .psql(
            "INSERT INTO wheelpool_jobs (name, period_ns, offset_ns, last_run, claim_id)
             VALUES ('old', 100000000, 0,
                     (extract(epoch FROM now()) * 1000000000)::bigint / 100000000, 7)
             RETURNING last_run",
        )
        .trim()
        .parse()
        .unwrap();
    let runs: Runs = Arc::default();
    let errors: Errors = Arc::default();
    let (pool, store, periodic) = builder(&url, "p", "old", &errors);
    let task = periodic
        .build()
        .unwrap()
        .schedule_at_fixed_rate(&pool.handle(), recorder(&runs), Duration::from_millis(100))
        .unwrap();
    assert!(
        wait_until(LONG, || runs.lock().unwrap().len() >= 3),
        "the old job runs on"
    );
    let column = server.psql(
        "SELECT data_type || ' ' || column_default FROM information_schema.columns
         WHERE table_name = 'wheelpool_jobs' AND column_name = 'cron'",
    );
    assert_eq!(column.trim(), "text ''::text");
    // A cron job on the migrated table, beside it.
    let cal = cron_node(&url, "c", "new-cron", EVERY_SECOND, &runs);
    assert!(wait_until(LONG, || runs
        .lock()
        .unwrap()
        .iter()
        .any(|r| r.node == "c")));
    task.cancel();
    let table = store.jobs().unwrap();
    let errs = errors_of(&[&cal]);
    stop(vec![cal]);
    drop(pool);
    assert!(
        errors.lock().unwrap().is_empty() && errs.is_empty(),
        "{errors:?} {errs:?}"
    );
    let runs = runs.lock().unwrap().clone();
    let old: Vec<u64> = runs
        .iter()
        .filter(|r| r.node == "p")
        .map(|r| r.number)
        .collect();
    assert!(
        old.iter().all(|n| *n > last),
        "run {last} or before ran again: {old:?}"
    );
    let names: Vec<(&str, Option<&str>)> = table
        .iter()
        .map(|j| (j.name.as_str(), j.cron.as_deref()))
        .collect();
    assert_eq!(
        names,
        [("new-cron", Some("* * * * * * (UTC)")), ("old", None)]
    );
}

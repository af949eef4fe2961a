//! Cluster jobs against real PostgreSQL 15 servers under injected faults: a silent TCP peer,
//! a frozen backend (SIGSTOP), backends terminated by an administrator, the whole server
//! frozen (shorter and longer than the call timeout), a row lock held by an admin
//! transaction, a soak with connections cut every second, two nodes of one job on one store,
//! a claim committed after its node gave up on it, and a release waiting on a row lock.
//!
//! Every test checks **exactly once** by run number across all its nodes (no run number runs
//! twice), and prints the runs that were skipped and why; most also check that every run
//! number from the first to the last either ran or was reported skipped. Waits are bounded by
//! [`LONG`] and decided by what happened (runs, reports), never by a sleep; the only sleeps
//! hold a fault for its length. The one timing assertion is the bound on a stalled call, with
//! generous slack. Signals to server processes go through guards that send SIGCONT on drop.

use crate::pg_common::{wait_until, PgServer, Stopped, LONG};
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use wheelpool::cluster::{
    ClusterError, ClusterJob, ClusterJobBuilder, ClusterTask, PgLockStore, SkipReason,
    StoreErrorKind,
};
use wheelpool::{ScheduledThreadPool, TaskError};

/// The `application_name` the store gives its sessions when the URL names none.
const APP: &str = "wheelpool-cluster";

/// Generous bound for a call bounded at 1 s on a busy machine.
const BOUND_SLACK: Duration = Duration::from_secs(15);

// ------------------------------------------------------------------------------------------
// The ledger: every run and every report, from every node of a test.
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Ran {
    job: String,
    number: u64,
    node: String,
    planned: SystemTime,
    /// When the body started, by this machine's clock (the server's clock too: same host).
    started: SystemTime,
    at: Instant,
}

#[derive(Debug, Clone)]
struct Reported {
    job: String,
    node: String,
    at: Instant,
    err: ClusterError,
}

#[derive(Debug, Default)]
struct Ledger {
    runs: Mutex<Vec<Ran>>,
    errors: Mutex<Vec<Reported>>,
}

impl Ledger {
    fn runs(&self) -> Vec<Ran> {
        self.runs.lock().unwrap().clone()
    }

    fn errors(&self) -> Vec<Reported> {
        self.errors.lock().unwrap().clone()
    }

    fn count_runs(&self, pred: impl Fn(&Ran) -> bool) -> usize {
        self.runs.lock().unwrap().iter().filter(|r| pred(r)).count()
    }

    fn count_errors(&self, pred: impl Fn(&Reported) -> bool) -> usize {
        self.errors
            .lock()
            .unwrap()
            .iter()
            .filter(|r| pred(r))
            .count()
    }
}

/// One node: its own pool (two workers), store and one task per job.
struct Node {
    label: String,
    pool: ScheduledThreadPool,
    tasks: Vec<ClusterTask>,
    panics: Arc<AtomicU64>,
}

fn start_node(
    label: &str,
    store: &Arc<PgLockStore>,
    jobs: &[&str],
    period: Duration,
    tweak: impl Fn(ClusterJobBuilder) -> ClusterJobBuilder,
    ledger: &Arc<Ledger>,
) -> Node {
    start_node_with(label, store, jobs, period, tweak, ledger, 2, None, None)
}

/// Called at the start of each run's body (on the node's pool).
type BodyHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Called in a node's error handler (on the node's pool) before the report is recorded.
type Hook = Arc<dyn Fn(&ClusterError) + Send + Sync>;

/// [`start_node`] with `threads` pool workers and a `hook` in the error handler.
#[allow(clippy::too_many_arguments)]
fn start_node_with(
    label: &str,
    store: &Arc<PgLockStore>,
    jobs: &[&str],
    period: Duration,
    tweak: impl Fn(ClusterJobBuilder) -> ClusterJobBuilder,
    ledger: &Arc<Ledger>,
    threads: usize,
    hook: Option<Hook>,
    body_hook: Option<BodyHook>,
) -> Node {
    let panics = Arc::new(AtomicU64::new(0));
    let p = panics.clone();
    let pool = ScheduledThreadPool::builder()
        .threads(threads)
        .panic_handler(move |_| {
            p.fetch_add(1, Ordering::Relaxed);
        })
        .build()
        .unwrap();
    let tasks = jobs
        .iter()
        .map(|job| {
            let l = ledger.clone();
            let (node, name) = (label.to_owned(), job.to_string());
            let hook = hook.clone();
            let builder = ClusterJob::builder(*job, store.clone())
                .node(label)
                .on_error(move |err| {
                    if let Some(hook) = &hook {
                        hook(&err);
                    }
                    l.errors.lock().unwrap().push(Reported {
                        job: name.clone(),
                        node: node.clone(),
                        at: Instant::now(),
                        err,
                    })
                });
            let l = ledger.clone();
            let body_hook = body_hook.clone();
            tweak(builder)
                .build()
                .unwrap()
                .schedule_at_fixed_rate(
                    &pool.handle(),
                    move |run| {
                        if let Some(hook) = &body_hook {
                            hook(run.job());
                        }
                        l.runs.lock().unwrap().push(Ran {
                            job: run.job().to_owned(),
                            number: run.number(),
                            node: run.node().to_owned(),
                            planned: run.planned_at(),
                            started: SystemTime::now(),
                            at: Instant::now(),
                        })
                    },
                    period,
                )
                .unwrap()
        })
        .collect();
    Node {
        label: label.to_owned(),
        pool,
        tasks,
        panics,
    }
}

/// Cancels every task of every node (all before any pool shuts down), then shuts the pools
/// down; no worker panicked.
fn stop_nodes(nodes: Vec<Node>) {
    for n in &nodes {
        for t in &n.tasks {
            assert!(
                t.cancel(),
                "{}: {t:?} had ended before the test stopped it",
                n.label
            );
        }
    }
    for n in &nodes {
        for t in &n.tasks {
            assert_eq!(t.join_timeout(LONG), Some(Err(TaskError::Cancelled)));
        }
    }
    for n in nodes {
        n.pool.shutdown();
        assert!(
            n.pool.await_termination(LONG),
            "{}: pool did not stop",
            n.label
        );
        assert_eq!(n.pool.stats().panicked, 0, "{}: a worker panicked", n.label);
        assert_eq!(
            n.panics.load(Ordering::Relaxed),
            0,
            "{}: a worker panicked",
            n.label
        );
    }
}

/// What became of a job's runs, across all nodes.
#[derive(Debug)]
struct Verdict {
    job: String,
    ran: BTreeMap<u64, String>,
    skipped: BTreeMap<u64, SkipReason>,
    first: u64,
    last: u64,
}

impl Verdict {
    /// Skipped runs other than the ones a pool shutting down at the end of the test may leave,
    /// and other than runs that did run but were reported unconfirmed (their claimer's
    /// release came after its lease had run out and another node had claimed).
    fn skipped_not_shutdown(&self) -> Vec<(u64, SkipReason)> {
        self.skipped
            .iter()
            .filter(|(_, r)| **r != SkipReason::Shutdown)
            .filter(|(n, r)| {
                !(matches!(r, SkipReason::Unconfirmed { .. }) && self.ran.contains_key(*n))
            })
            .map(|(n, r)| (*n, *r))
            .collect()
    }

    /// The ran numbers are contiguous from the first to the last that ran.
    fn assert_contiguous(&self) {
        let (lo, hi) = (
            *self.ran.keys().next().unwrap(),
            *self.ran.keys().last().unwrap(),
        );
        let missing: Vec<u64> = (lo..=hi).filter(|n| !self.ran.contains_key(n)).collect();
        assert!(
            missing.is_empty(),
            "job {}: runs {missing:?} within {lo}..={hi} did not run (skipped: {:?})",
            self.job,
            self.skipped
        );
    }
}

/// Checks exactly-once for `job`: no run number ran twice (on any nodes), none was both run
/// and reported skipped, none was reported skipped twice, the runs of each node came in
/// increasing order, and (with `complete`) every number from the first to the last seen
/// either ran or was reported skipped. Prints the skipped runs with their reasons.
fn exactly_once(ledger: &Ledger, job: &str, complete: bool) -> Verdict {
    let runs: Vec<Ran> = ledger.runs().into_iter().filter(|r| r.job == job).collect();
    assert!(!runs.is_empty(), "job {job} never ran");
    let mut by_number: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for r in &runs {
        by_number.entry(r.number).or_default().push(r.node.clone());
    }
    let twice: Vec<_> = by_number.iter().filter(|(_, n)| n.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "job {job}: runs that ran more than once (run, nodes): {twice:?}"
    );
    // Each node runs a job's runs one at a time and in order.
    let mut per_node: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for r in &runs {
        per_node.entry(&r.node).or_default().push(r.number);
    }
    for (node, numbers) in &per_node {
        assert!(
            numbers.windows(2).all(|w| w[0] < w[1]),
            "job {job}: node {node} ran its runs out of order: {numbers:?}"
        );
    }
    let mut skipped: BTreeMap<u64, SkipReason> = BTreeMap::new();
    for rep in ledger.errors() {
        if let ClusterError::RunSkipped {
            job: j,
            run,
            reason,
            ..
        } = &rep.err
        {
            assert_eq!(j, &rep.job);
            if j != job {
                continue;
            }
            if let Some(before) = skipped.insert(*run, *reason) {
                panic!("job {job}: run {run} reported skipped twice ({before:?}, {reason:?})");
            }
            // `Unconfirmed` says the run *may* not have run: its claimer's release never
            // reached the store. Every other reason says it did not run.
            assert!(
                !by_number.contains_key(run) || matches!(reason, SkipReason::Unconfirmed { .. }),
                "job {job}: run {run} ran on {:?} and was also reported skipped ({reason:?}) by {}",
                by_number[run],
                rep.node
            );
        }
    }
    let ran: BTreeMap<u64, String> = by_number
        .into_iter()
        .map(|(n, mut v)| (n, v.remove(0)))
        .collect();
    let first = *ran
        .keys()
        .next()
        .unwrap()
        .min(skipped.keys().next().unwrap_or(&u64::MAX));
    let last = *ran
        .keys()
        .last()
        .unwrap()
        .max(skipped.keys().last().unwrap_or(&0));
    if complete {
        let gaps: Vec<u64> = (first..=last)
            .filter(|n| !ran.contains_key(n) && !skipped.contains_key(n))
            .collect();
        assert!(
            gaps.is_empty(),
            "job {job}: runs {gaps:?} within {first}..={last} neither ran nor were reported skipped"
        );
    }
    let mut nodes: BTreeMap<&str, usize> = BTreeMap::new();
    for node in ran.values() {
        *nodes.entry(node).or_default() += 1;
    }
    println!(
        "job {job}: runs {first}..={last}: {} ran {nodes:?}, skipped: {}",
        ran.len(),
        if skipped.is_empty() {
            "none".to_owned()
        } else {
            skipped
                .iter()
                .map(|(n, r)| format!("{n} ({r})"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    Verdict {
        job: job.to_owned(),
        ran,
        skipped,
        first,
        last,
    }
}

/// Prints the reports other than skipped runs, one line per distinct (node, job, text).
fn print_errors(ledger: &Ledger) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for rep in ledger.errors() {
        if !matches!(rep.err, ClusterError::RunSkipped { .. }) {
            *seen
                .entry(format!("{} {}: {}", rep.node, rep.job, rep.err))
                .or_default() += 1;
        }
    }
    for (line, n) in seen {
        println!("  reported {n}x: {line}");
    }
}

fn store_kind(err: &ClusterError) -> Option<StoreErrorKind> {
    match err {
        ClusterError::Unavailable(e) | ClusterError::Store(e) => Some(e.kind()),
        _ => None,
    }
}

// ------------------------------------------------------------------------------------------
// 1. A peer that accepts TCP connections and never says a word.
// ------------------------------------------------------------------------------------------

/// A listener on 127.0.0.1 that accepts every connection and holds it open, silent.
struct BlackHole {
    port: u16,
    done: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl BlackHole {
    fn start() -> BlackHole {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let done = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let (d, a) = (done.clone(), accepted.clone());
        let thread = std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = Vec::new();
            while !d.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((socket, _)) => {
                        a.fetch_add(1, Ordering::Relaxed);
                        held.push(socket);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
        });
        BlackHole {
            port,
            done,
            accepted,
            thread: Some(thread),
        }
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_silent_peer_times_out_the_connect_and_a_lazy_job_reports_without_panicking() {
    let hole = BlackHole::start();
    let url = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        hole.port
    );

    // connect(): bounded by the connect timeout (login never answered), typed error.
    let start = Instant::now();
    let err = PgLockStore::builder(&url)
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .unwrap_err();
    let took = start.elapsed();
    println!("connect gave up after {took:?}: {err}");
    match &err {
        ClusterError::Unavailable(e) => assert!(
            matches!(e.kind(), StoreErrorKind::Timeout | StoreErrorKind::Connect),
            "kind {:?}: {err}",
            e.kind()
        ),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(took < BOUND_SLACK, "a 1 s connect timeout took {took:?}");
    assert!(
        hole.accepted.load(Ordering::Relaxed) >= 1,
        "the connect reached the listener"
    );

    // A lazy store there: a job's claims fail, are reported to its handler, no worker panics.
    let store = Arc::new(
        PgLockStore::builder(&url)
            .connect_timeout(Duration::from_secs(1))
            .call_timeout(Duration::from_secs(1))
            .connections(2)
            .connect_lazy()
            .unwrap(),
    );
    let ledger = Arc::new(Ledger::default());
    let start = Instant::now();
    let node = start_node(
        "lazy",
        &store,
        &["silent"],
        Duration::from_millis(100),
        |b| b,
        &ledger,
    );
    assert!(
        start.elapsed() < BOUND_SLACK,
        "scheduling took {:?}",
        start.elapsed()
    );
    assert!(
        wait_until(LONG, || ledger.count_errors(|_| true) >= 5),
        "errors reported: {:?}",
        ledger.errors()
    );
    // The admin calls are bounded too.
    let start = Instant::now();
    let err = store.jobs().unwrap_err();
    assert!(matches!(err, ClusterError::Unavailable(_)), "{err:?}");
    assert!(
        start.elapsed() < BOUND_SLACK,
        "jobs() took {:?}",
        start.elapsed()
    );

    stop_nodes(vec![node]);
    let errors = ledger.errors();
    for rep in &errors {
        assert!(
            matches!(
                &rep.err,
                ClusterError::Unavailable(e) if matches!(
                    e.kind(),
                    StoreErrorKind::Timeout | StoreErrorKind::Connect | StoreErrorKind::Backoff
                )
            ),
            "unexpected report: {:?}",
            rep.err
        );
    }
    assert!(
        errors.iter().any(|r| matches!(
            store_kind(&r.err),
            Some(StoreErrorKind::Timeout | StoreErrorKind::Connect)
        )),
        "no connect attempt was reported: {errors:?}"
    );
    assert_eq!(ledger.runs().len(), 0, "a run ran without a store");
    print_errors(&ledger);
}

// ------------------------------------------------------------------------------------------
// 2. One backend of a node frozen with SIGSTOP.
// ------------------------------------------------------------------------------------------

/// The state letter of `pid` in /proc (`T` when stopped), if it exists.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Stops one of the backends named `app` while it is idle (between statements, so it holds no
/// row lock); gives it stopped. Retries on another moment if it was caught mid-statement.
fn stop_an_idle_backend(server: &PgServer, app: &str) -> (Stopped, u32) {
    let end = Instant::now() + LONG;
    loop {
        assert!(
            Instant::now() < end,
            "no idle backend of {app} could be stopped"
        );
        for pid in server.backend_pids(app) {
            let stopped = Stopped::new(&[pid]);
            // Its state as it was when it stopped (it cannot change while stopped).
            match server.backend_state(pid).as_deref() {
                Some("idle") => return (stopped, pid),
                _ => stopped.cont(),
            }
        }
    }
}

#[test]
fn a_frozen_backend_times_out_its_calls_and_the_rest_goes_on() {
    const PERIOD: Duration = Duration::from_millis(200);
    let server = PgServer::start();
    let ledger = Arc::new(Ledger::default());
    let store = |url: String| {
        Arc::new(
            PgLockStore::builder(url)
                .connections(3)
                .call_timeout(Duration::from_secs(1))
                .connect()
                .unwrap(),
        )
    };
    // Node a's sessions carry the store's default name; node b's its own.
    let store_a = store(server.url());
    let store_b = store(format!(
        "{} application_name=wheelpool-cluster-b",
        server.url()
    ));
    let jobs = ["stall-1", "stall-2"];
    // A stalled release holds the lease: keep it short; a large grace lets late runs run.
    let tweak = |b: ClusterJobBuilder| {
        b.at_most_for(Duration::from_secs(1))
            .misfire_grace(Duration::from_secs(10))
    };
    let a = start_node("a", &store_a, &jobs, PERIOD, tweak, &ledger);
    let b = start_node("b", &store_b, &jobs, PERIOD, tweak, &ledger);
    let runs_of = |job: &str| ledger.count_runs(|r| r.job == job);
    assert!(
        wait_until(LONG, || jobs.iter().all(|j| runs_of(j) >= 4)
            && server.backend_pids(APP).len() >= 3),
        "node a uses its three connections"
    );

    let (stopped, pid) = stop_an_idle_backend(&server, APP);
    let t_stop = Instant::now();
    println!("stopped backend {pid} of node a");
    let timeouts_a = |since: Instant| {
        ledger.count_errors(|r| {
            r.node == "a" && r.at >= since && store_kind(&r.err) == Some(StoreErrorKind::Timeout)
        })
    };
    // The stalled call ends with a Timeout within its bound.
    assert!(
        wait_until(LONG, || timeouts_a(t_stop) >= 1),
        "no Timeout reported by node a; reports: {:?}",
        ledger.errors()
    );
    let first_timeout = ledger
        .errors()
        .into_iter()
        .find(|r| {
            r.node == "a" && r.at >= t_stop && store_kind(&r.err) == Some(StoreErrorKind::Timeout)
        })
        .unwrap();
    let latency = first_timeout.at - t_stop;
    println!(
        "first Timeout {latency:?} after the stop: {}",
        first_timeout.err
    );
    assert!(
        latency < BOUND_SLACK,
        "a call bounded at 1 s reported its timeout {latency:?} after the stop"
    );
    // Meanwhile, and while it stays stopped: both jobs go on and node a goes on past its
    // stalled call (its claims are answered on its other connections). Which node runs them
    // is not part of the promise: node a, on time on its other connections, keeps both jobs
    // while node b stands by (the standby rule), so b may run none of them (seen once in a
    // load run: node a ran all 170 runs during the stop).
    let claims_a = store_a.stats().claims;
    assert!(
        wait_until(LONG, || {
            jobs.iter()
                .all(|j| ledger.count_runs(|r| r.job == *j && r.at > t_stop) >= 3)
                && store_a.stats().claims >= claims_a + 3
        }),
        "runs during the stop: {:?}",
        ledger
            .runs()
            .iter()
            .filter(|r| r.at > t_stop)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        proc_state(pid),
        Some('T'),
        "backend {pid} stayed stopped all along"
    );
    let during = ledger.count_runs(|r| r.at > t_stop);

    stopped.cont();
    let t_cont = Instant::now();
    let claims_a = store_a.stats().claims;
    // Everything continues, node a's claims included (it runs the jobs it still holds, and
    // stands by for those b took over); the abandoned backend ends (its client closed the
    // socket).
    assert!(
        wait_until(LONG, || {
            jobs.iter()
                .all(|j| ledger.count_runs(|r| r.job == *j && r.at > t_cont) >= 3)
                && store_a.stats().claims >= claims_a + 3
        }),
        "runs after SIGCONT"
    );
    assert!(
        wait_until(LONG, || !server.backend_pids(APP).contains(&pid)),
        "the abandoned backend {pid} ended after SIGCONT"
    );
    stop_nodes(vec![a, b]);

    println!("{during} runs during the stop");
    for job in jobs {
        let v = exactly_once(&ledger, job, true);
        assert_eq!(v.skipped_not_shutdown(), vec![], "job {job}: runs skipped");
    }
    print_errors(&ledger);
    // A release stuck on the frozen connection is sent again on another one; by then the
    // lease (1 s, the call timeout) may have run out and node b claimed: a LeaseExpired.
    for rep in ledger.errors() {
        assert!(
            matches!(
                rep.err,
                ClusterError::Unavailable(_)
                    | ClusterError::RunSkipped { .. }
                    | ClusterError::LeaseExpired { .. }
            ),
            "unexpected report: {rep:?}"
        );
    }
    assert!(timeouts_a(t_stop) >= 1);
}

// ------------------------------------------------------------------------------------------
// 3. An administrator terminating every backend of the store, again and again.
// ------------------------------------------------------------------------------------------

#[test]
fn terminated_backends_lose_no_run_and_run_none_twice() {
    const PERIOD: Duration = Duration::from_millis(200);
    let server = PgServer::start();
    let ledger = Arc::new(Ledger::default());
    // A release lost with its connection holds the job until the lease ends: keep the lease
    // well inside the grace, so that such a hold only delays runs.
    let tweak = |b: ClusterJobBuilder| {
        b.at_most_for(Duration::from_secs(2))
            .misfire_grace(Duration::from_secs(5))
    };
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|label| {
            let store = Arc::new(PgLockStore::connect(&server.url()).unwrap());
            start_node(label, &store, &["term"], PERIOD, tweak, &ledger)
        })
        .collect();
    let count = || ledger.count_runs(|_| true);
    assert!(wait_until(LONG, || count() >= 3));
    for round in 0..5 {
        let before = count();
        assert!(
            wait_until(LONG, || count() >= before + 2),
            "round {round}: runs go on"
        );
        let killed = server.terminate_backends(APP);
        println!("round {round}: terminated {killed} backends");
        assert!(killed >= 1, "round {round}: no backend to terminate");
    }
    let before = count();
    assert!(
        wait_until(LONG, || count() >= before + 5),
        "runs go on after the last termination"
    );
    stop_nodes(nodes);

    let v = exactly_once(&ledger, "term", true);
    v.assert_contiguous();
    assert_eq!(v.skipped_not_shutdown(), vec![], "runs skipped");
    print_errors(&ledger);
    for rep in ledger.errors() {
        assert!(
            !matches!(rep.err, ClusterError::LeaseExpired { .. }),
            "a released lease reported as expired: {rep:?}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// 4. The whole server frozen for 300 ms across the start of a period.
// ------------------------------------------------------------------------------------------

#[test]
fn a_server_frozen_across_a_period_start_loses_no_run() {
    const PERIOD: Duration = Duration::from_millis(200);
    const FREEZE: Duration = Duration::from_millis(300);
    let server = PgServer::start();
    let ledger = Arc::new(Ledger::default());
    let tweak = |b: ClusterJobBuilder| b.misfire_grace(Duration::from_secs(2));
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|label| {
            let store = Arc::new(PgLockStore::connect(&server.url()).unwrap());
            start_node(label, &store, &["frozen"], PERIOD, tweak, &ledger)
        })
        .collect();
    let count = || ledger.count_runs(|_| true);
    assert!(wait_until(LONG, || count() >= 3));
    let mut frozen_runs = Vec::new();
    for round in 0..3 {
        let before = count();
        assert!(
            wait_until(LONG, || count() >= before + 2),
            "round {round}: runs go on"
        );
        // Freeze from 100 ms before a period starts (runs are planned at multiples of the
        // period since the epoch, by the server's clock: this host's) to 200 ms after it.
        let period_ns = PERIOD.as_nanos();
        let into = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % period_ns;
        let lead = period_ns / 2;
        let wait = (period_ns + period_ns - lead - into) % period_ns;
        std::thread::sleep(Duration::from_nanos(wait as u64));
        let from = SystemTime::now();
        let frozen = server.freeze();
        let n = frozen.pids().len();
        std::thread::sleep(FREEZE);
        frozen.cont();
        let to = SystemTime::now();
        let boundary = (from.duration_since(UNIX_EPOCH).unwrap().as_nanos() / period_ns + 1) as u64;
        println!("round {round}: froze {n} server processes across the start of run {boundary}");
        assert!(
            to.duration_since(UNIX_EPOCH).unwrap().as_nanos() >= u128::from(boundary) * period_ns
        );
        frozen_runs.push(boundary);
    }
    let before = count();
    assert!(
        wait_until(LONG, || count() >= before + 3),
        "runs go on after the freezes"
    );
    stop_nodes(nodes);

    let v = exactly_once(&ledger, "frozen", true);
    v.assert_contiguous();
    assert_eq!(v.skipped_not_shutdown(), vec![], "runs skipped");
    for run in frozen_runs {
        assert!(
            v.ran.contains_key(&run),
            "run {run}, planned during a freeze, did not run"
        );
    }
    print_errors(&ledger);
}

// ------------------------------------------------------------------------------------------
// 5. An admin transaction holding one job's row lock.
// ------------------------------------------------------------------------------------------

#[test]
fn a_row_lock_held_by_an_admin_delays_only_its_job() {
    const PERIOD: Duration = Duration::from_millis(200);
    let server = PgServer::start();
    let ledger = Arc::new(Ledger::default());
    let store = Arc::new(PgLockStore::connect(&server.url()).unwrap());
    let node = start_node("a", &store, &["locked", "free"], PERIOD, |b| b, &ledger);
    let runs_of = |job: &str| ledger.count_runs(|r| r.job == job);
    assert!(wait_until(LONG, || runs_of("locked") >= 3 && runs_of("free") >= 3));

    // The script prints the server's clock (µs since the epoch) once it holds the lock and
    // just before it lets go: [t1, t2] lies inside the time the row was locked.
    let script = "BEGIN;\n\
        SELECT name FROM wheelpool_jobs WHERE name = 'locked' FOR UPDATE;\n\
        SELECT 'T1 ' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;\n\
        SELECT pg_sleep(2);\n\
        SELECT 'T2 ' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;\n\
        COMMIT;\n";
    let mut admin = server.spawn_psql("wheelpool-test-lock", script);
    let out = admin.wait_output(LONG).expect("the admin transaction ends");
    let stamp = |tag: &str| {
        let us: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .unwrap_or_else(|| panic!("no {tag:?} in {out:?}"))
            .trim()
            .parse()
            .unwrap();
        UNIX_EPOCH + Duration::from_micros(us)
    };
    assert!(
        out.lines().any(|l| l.trim() == "locked"),
        "the lock found the row: {out:?}"
    );
    let (t1, t2) = (stamp("T1 "), stamp("T2 "));
    assert!(t2.duration_since(t1).unwrap() >= Duration::from_secs(2));
    let after_lock = Instant::now();
    assert!(
        wait_until(LONG, || ledger
            .count_runs(|r| r.job == "locked" && r.at > after_lock)
            >= 3
            && ledger.count_runs(|r| r.job == "free" && r.at > after_lock) >= 3),
        "both jobs run after the lock"
    );
    stop_nodes(vec![node]);

    // The free job ran on while the other's row was locked.
    let free_during = ledger.count_runs(|r| r.job == "free" && r.started > t1 && r.started < t2);
    println!("free ran {free_during} times during the 2 s lock");
    assert!(
        free_during >= 2,
        "the free job ran {free_during} times during the lock"
    );
    // The locked job: no run claimed during the lock. A run planned in it ran after it (late,
    // in order: checked by `exactly_once`), or was reported as misfired.
    for r in ledger.runs().iter().filter(|r| r.job == "locked") {
        if r.planned >= t1 && r.planned < t2 {
            assert!(
                r.started > t2,
                "run {} of the locked job, planned during the lock, started during it",
                r.number
            );
        }
        assert!(
            !(r.started > t1 && r.started < t2) || r.planned < t1,
            "run {} of the locked job was claimed during the lock",
            r.number
        );
    }
    let late: Vec<u64> = ledger
        .runs()
        .iter()
        .filter(|r| r.job == "locked" && r.planned >= t1 && r.planned < t2)
        .map(|r| r.number)
        .collect();
    let v = exactly_once(&ledger, "locked", true);
    println!("locked: runs planned during the lock that ran late: {late:?}");
    for (run, reason) in v.skipped_not_shutdown() {
        assert_eq!(reason, SkipReason::Misfired, "run {run} of the locked job");
    }
    let f = exactly_once(&ledger, "free", true);
    f.assert_contiguous();
    assert_eq!(
        f.skipped_not_shutdown(),
        vec![],
        "runs of the free job skipped"
    );
    print_errors(&ledger);
    for rep in ledger.errors() {
        assert!(
            rep.job == "locked"
                || matches!(
                    rep.err,
                    ClusterError::RunSkipped {
                        reason: SkipReason::Shutdown,
                        ..
                    }
                ),
            "the free job reported {rep:?}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// 6. Soak: three nodes, connections cut every second.
// ------------------------------------------------------------------------------------------

#[test]
fn soak_three_nodes_with_connections_cut_every_second() {
    const PERIOD: Duration = Duration::from_millis(100);
    const SOAK: Duration = Duration::from_secs(10);
    let server = PgServer::start();
    let ledger = Arc::new(Ledger::default());
    let jobs = ["soak-1", "soak-2"];
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|label| {
            let store = Arc::new(PgLockStore::connect(&server.url()).unwrap());
            // A lease far longer than the period: a release delayed by a reconnect on a busy
            // machine is not an expired lease.
            let tweak = |b: ClusterJobBuilder| b.at_most_for(Duration::from_secs(2));
            start_node(label, &store, &jobs, PERIOD, tweak, &ledger)
        })
        .collect();
    assert!(wait_until(LONG, || jobs
        .iter()
        .all(|j| ledger.count_runs(|r| r.job == *j) >= 3)));
    let end = Instant::now() + SOAK;
    let mut killed = 0;
    let mut cuts = 0;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(1));
        killed += server.terminate_backends(APP);
        cuts += 1;
    }
    let after = Instant::now();
    assert!(
        wait_until(LONG, || jobs
            .iter()
            .all(|j| ledger.count_runs(|r| r.job == *j && r.at > after) >= 3)),
        "runs go on after the soak"
    );
    stop_nodes(nodes);
    println!("{cuts} cuts, {killed} backends terminated");
    assert!(killed >= cuts, "every cut found backends to terminate");
    for job in jobs {
        let v = exactly_once(&ledger, job, true);
        assert!(
            v.ran.len() >= 20,
            "job {job}: only {} runs in the soak",
            v.ran.len()
        );
        assert!(
            v.last - v.first >= 50,
            "job {job}: {}..={}",
            v.first,
            v.last
        );
    }
    print_errors(&ledger);
    for rep in ledger.errors() {
        assert!(
            !matches!(rep.err, ClusterError::LeaseExpired { .. }),
            "a released lease reported as expired: {rep:?}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// 7. Two nodes of one job sharing one store (their claims go in the same batch).
// ------------------------------------------------------------------------------------------

#[test]
fn two_nodes_of_one_job_on_one_store_run_each_run_once() {
    const PERIOD: Duration = Duration::from_millis(100);
    let server = PgServer::start();
    let ledger = Arc::new(Ledger::default());
    // One process, one store, the job scheduled twice (two nodes, as in ClusterTask's
    // example): both chains wake at the same planned times, so their claims often go in one
    // batch statement. The store also holds many other jobs (analyzed), as a busy one does:
    // the planner then joins by index.
    let store = Arc::new(PgLockStore::connect(&server.url()).unwrap());
    server.psql(
        "INSERT INTO wheelpool_jobs (name, period_ns, offset_ns, last_run) \
         SELECT 'other-' || i, 3600000000000, 0, 0 FROM generate_series(1, 20000) i; \
         ANALYZE wheelpool_jobs;",
    );
    // A lease far longer than the period: a node starved for a second on a busy machine may
    // skip runs (reported), but its run still ends within its lease.
    let tweak = |b: ClusterJobBuilder| b.at_most_for(Duration::from_secs(10));
    let nodes = vec![
        start_node("a1", &store, &["shared"], PERIOD, tweak, &ledger),
        start_node("a2", &store, &["shared"], PERIOD, tweak, &ledger),
    ];
    assert!(wait_until(LONG, || ledger.count_runs(|_| true) >= 40));
    stop_nodes(nodes);
    print_errors(&ledger);
    exactly_once(&ledger, "shared", true);
    for rep in ledger.errors() {
        assert!(
            matches!(rep.err, ClusterError::RunSkipped { .. }),
            "unexpected report: {rep:?}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// 8. The whole server frozen for longer than the call timeout.
// ------------------------------------------------------------------------------------------

#[test]
fn a_server_frozen_past_the_call_timeout_loses_no_run() {
    const PERIOD: Duration = Duration::from_millis(200);
    const FREEZE: Duration = Duration::from_secs(3);
    let server = PgServer::start();
    let ledger = Arc::new(Ledger::default());
    // Calls give up after 1 s; a grace of 20 s covers the freeze: every run planned during it
    // is still claimable after it, so none may be lost or skipped.
    let tweak = |b: ClusterJobBuilder| b.misfire_grace(Duration::from_secs(20));
    let nodes: Vec<Node> = ["a", "b"]
        .iter()
        .map(|label| {
            let store = Arc::new(
                PgLockStore::builder(server.url())
                    .call_timeout(Duration::from_secs(1))
                    .connect_timeout(Duration::from_secs(1))
                    .connect()
                    .unwrap(),
            );
            start_node(label, &store, &["long-freeze"], PERIOD, tweak, &ledger)
        })
        .collect();
    let count = || ledger.count_runs(|_| true);
    for round in 0..1 {
        let before = count();
        assert!(
            wait_until(LONG, || count() >= before + 3),
            "round {round}: runs go on"
        );
        let t_freeze = Instant::now();
        let frozen = server.freeze();
        std::thread::sleep(FREEZE);
        frozen.cont();
        let timeouts = ledger.count_errors(|r| {
            r.at > t_freeze && store_kind(&r.err) == Some(StoreErrorKind::Timeout)
        });
        println!("round {round}: {timeouts} timeouts reported during the freeze");
        assert!(
            timeouts >= 1,
            "round {round}: no call timed out during a {FREEZE:?} freeze"
        );
        // The nodes catch up: the runs planned during the freeze run late, in order, until
        // one runs on time again.
        let t_cont = Instant::now();
        assert!(
            wait_until(LONG, || ledger.count_runs(|r| r.at > t_cont
                && r.started.duration_since(r.planned).unwrap_or_default()
                    < PERIOD)
                >= 1),
            "round {round}: the nodes did not catch up"
        );
    }
    stop_nodes(nodes);
    print_errors(&ledger);
    let v = exactly_once(&ledger, "long-freeze", true);
    v.assert_contiguous();
    assert_eq!(v.skipped_not_shutdown(), vec![], "runs skipped");
}

// ------------------------------------------------------------------------------------------
// 9. A claim that the database commits after its node gave up on it.
// ------------------------------------------------------------------------------------------

/// Holds a node's only pool worker inside its error handler from the first claim timeout
/// after [`arm`](Self::arm) until [`open`](Self::open) (or drop), so that the node makes no
/// call meanwhile.
#[derive(Default)]
struct Gate {
    armed: AtomicBool,
    hit: Mutex<Option<&'static str>>,
    open: Mutex<bool>,
    opened: std::sync::Condvar,
}

impl Gate {
    fn arm(&self) {
        *self.hit.lock().unwrap() = None;
        *self.open.lock().unwrap() = false;
        self.armed.store(true, Ordering::SeqCst);
    }

    /// In the handler: the first Timeout after arming is recorded; a claim's holds the worker.
    fn on_error(&self, err: &ClusterError) {
        let ClusterError::Unavailable(e) = err else {
            return;
        };
        if e.kind() != StoreErrorKind::Timeout || !self.armed.swap(false, Ordering::SeqCst) {
            return;
        }
        *self.hit.lock().unwrap() = Some(e.call());
        if e.call() == "claim" {
            let open = self.open.lock().unwrap();
            let _ = self.opened.wait_timeout_while(open, LONG, |open| !*open);
        }
    }

    fn hit(&self) -> Option<&'static str> {
        *self.hit.lock().unwrap()
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

/// Opens the gate when the test ends, however it ends.
struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.armed.store(false, Ordering::SeqCst);
        self.0.open();
    }
}

/// The job's row: (node of the last claim, claim_id).
fn row(server: &PgServer, job: &str) -> (String, i64) {
    let out = server.psql(&format!(
        "SELECT node || '|' || claim_id FROM wheelpool_jobs WHERE name = '{job}'"
    ));
    let (node, claim) = out.trim().split_once('|').expect("the job's row");
    (node.to_owned(), claim.parse().unwrap())
}

#[test]
fn a_claim_committed_after_its_node_timed_out_is_run_or_reported() {
    const PERIOD: Duration = Duration::from_millis(200);
    const JOB: &str = "late-commit";
    let server = PgServer::start();
    let ledger = Arc::new(Ledger::default());
    // Node a: one connection, calls bounded at 1 s, one pool worker (held by the gate).
    // Node b: its own store and session name. Both with a grace that covers the whole test,
    // so no run may go unclaimed; a's lease (2 s) outlasts the checks below.
    let store_a = Arc::new(
        PgLockStore::builder(server.url())
            .connections(1)
            .call_timeout(Duration::from_secs(1))
            .connect()
            .unwrap(),
    );
    let url_b = format!("{} application_name=wheelpool-cluster-b", server.url());
    let store_b = Arc::new(PgLockStore::connect(&url_b).unwrap());
    let gate = Arc::new(Gate::default());
    let _open = OpenOnDrop(gate.clone());
    let g = gate.clone();
    let hook: Hook = Arc::new(move |err| g.on_error(err));
    let a = start_node_with(
        "a",
        &store_a,
        &[JOB],
        PERIOD,
        |b| {
            b.at_most_for(Duration::from_secs(2))
                .misfire_grace(Duration::from_secs(30))
        },
        &ledger,
        1,
        Some(hook),
        None,
    );
    let b = start_node(
        "b",
        &store_b,
        &[JOB],
        PERIOD,
        |b| {
            b.at_most_for(Duration::from_millis(100))
                .misfire_grace(Duration::from_secs(30))
        },
        &ledger,
    );
    // Both nodes claim every run; one of them (the one that ran the last run) runs it, the
    // other stands by.
    assert!(wait_until(LONG, || ledger.count_runs(|_| true) >= 4
        && store_a.stats().claims >= 4
        && store_b.stats().claims >= 4));

    // 1. Freeze a's backend while idle, until a claim of a's is sent to it and times out:
    //    a's handler then holds a's only worker, so a sends nothing more.
    let mut attempt = 0;
    let (stopped, pid) = loop {
        attempt += 1;
        assert!(attempt <= 10, "a's stalled call was never a claim");
        gate.arm();
        let (stopped, pid) = stop_an_idle_backend(&server, APP);
        assert!(
            wait_until(LONG, || gate.hit().is_some()),
            "a's call timed out"
        );
        if gate.hit() == Some("claim") {
            break (stopped, pid);
        }
        // A release stalled instead: let it go and try again.
        stopped.cont();
    };
    println!("backend {pid} holds a claim of node a that a gave up on");
    // b goes on alone and makes the row's last claim.
    let t = Instant::now();
    assert!(wait_until(LONG, || ledger
        .count_runs(|r| r.node == "b" && r.at > t)
        >= 2));

    // 2. Lock the row for 2 s, so that runs fall due unclaimed (b's claims find it busy and
    //    back off); then commit and at once let the frozen backend go: it runs a's old claim,
    //    which wins the oldest due run for a, whose answer nobody reads.
    let mut admin = server.psql_session("wheelpool-test-lock");
    admin.send(&format!(
        "BEGIN;\nSELECT 1 FROM wheelpool_jobs WHERE name = '{JOB}' FOR UPDATE;\n"
    ));
    assert!(wait_until(LONG, || server
        .psql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'wheelpool-test-lock' \
               AND state = 'idle in transaction' AND query LIKE '%FOR UPDATE%'"
        )
        .trim()
        == "1"));
    let (node_before, claim_before) = row(&server, JOB);
    assert_eq!(node_before, "b", "b made the last claim before the lock");
    std::thread::sleep(Duration::from_secs(2));
    admin.send("COMMIT;\n");
    admin.wait_output(LONG).expect("the admin transaction ends");
    stopped.cont();
    assert!(
        wait_until(LONG, || !server.backend_pids(APP).contains(&pid)),
        "the abandoned backend ended"
    );
    let (node_after, claim_after) = row(&server, JOB);
    println!("row after the old claim ran: last claim {claim_after} by {node_after} (before: {claim_before} by b)");
    assert_eq!(
        (node_after.as_str(), claim_after),
        ("a", claim_before + 1),
        "setup: a's old claim won a run after the lock (b got in first: rerun the test)"
    );
    // 3. a's lease runs out before a claims again: b claims the next run.
    assert!(
        wait_until(LONG, || row(&server, JOB).0 == "b"),
        "b claims after a's lease"
    );
    // 4. a goes on: its claims are answered again (b, which ran the last run, keeps the job
    //    while it claims on time; a stands by).
    gate.open();
    let t = Instant::now();
    let claims_a = store_a.stats().claims;
    assert!(wait_until(LONG, || store_a.stats().claims >= claims_a + 5
        && ledger.count_runs(|r| r.at > t) >= 5));
    stop_nodes(vec![a, b]);
    print_errors(&ledger);
    // The run a's old claim won must have run (a takes it back), or have been reported.
    exactly_once(&ledger, JOB, true);
}

// ------------------------------------------------------------------------------------------
// 10. A release that waits on a row lock, next to another job's release.
// ------------------------------------------------------------------------------------------

/// Holds the bodies of runs that start while armed until [`go`](Self::go) (or drop).
#[derive(Default)]
struct Hold {
    state: Mutex<(bool, usize)>, // (armed, bodies waiting)
    changed: std::sync::Condvar,
}

impl Hold {
    fn body(&self) {
        let mut state = self.state.lock().unwrap();
        if !state.0 {
            return;
        }
        state.1 += 1;
        self.changed.notify_all();
        let (mut state, _) = self
            .changed
            .wait_timeout_while(state, LONG, |s| s.0)
            .unwrap();
        state.1 -= 1;
    }

    fn arm(&self) {
        self.state.lock().unwrap().0 = true;
    }

    fn waiting(&self) -> usize {
        self.state.lock().unwrap().1
    }

    fn go(&self) {
        self.state.lock().unwrap().0 = false;
        self.changed.notify_all();
    }
}

struct GoOnDrop(Arc<Hold>);

impl Drop for GoOnDrop {
    fn drop(&mut self) {
        self.0.go();
    }
}

#[test]
fn a_release_waiting_on_a_row_lock_holds_up_no_other_job() {
    const PERIOD: Duration = Duration::from_millis(200);
    const LOCK: Duration = Duration::from_millis(1500);
    let server = PgServer::start();
    let ledger = Arc::new(Ledger::default());
    let store = Arc::new(PgLockStore::connect(&server.url()).unwrap());
    let hold = Arc::new(Hold::default());
    let _go = GoOnDrop(hold.clone());
    let h = hold.clone();
    let node = start_node_with(
        "a",
        &store,
        &["held", "other"],
        PERIOD,
        |b| b.at_most_for(Duration::from_secs(5)),
        &ledger,
        2,
        None,
        Some(Arc::new(move |_job: &str| h.body())),
    );
    assert!(wait_until(LONG, || ledger.count_runs(|r| r.job == "held")
        >= 2
        && ledger.count_runs(|r| r.job == "other") >= 2));
    let mut windows = Vec::new();
    for round in 0..3 {
        // Both jobs' runs wait in their bodies while an admin locks the row of `held`; then
        // both end at once, and both releases go to the store together.
        hold.arm();
        assert!(
            wait_until(LONG, || hold.waiting() == 2),
            "round {round}: both runs started"
        );
        let mut admin = server.psql_session("wheelpool-test-lock");
        admin.send("BEGIN;\nSELECT 1 FROM wheelpool_jobs WHERE name = 'held' FOR UPDATE;\n");
        assert!(wait_until(LONG, || server
            .psql(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = \
                   'wheelpool-test-lock' AND state = 'idle in transaction' \
                   AND query LIKE '%FOR UPDATE%'"
            )
            .trim()
            == "1"));
        let from = Instant::now();
        hold.go();
        std::thread::sleep(LOCK);
        let to = Instant::now();
        admin.send("COMMIT;\n");
        admin.wait_output(LONG).expect("the admin transaction ends");
        let other = ledger.count_runs(|r| r.job == "other" && r.at > from && r.at < to);
        println!(
            "round {round}: `other` ran {other} times while `held`'s row was locked for {LOCK:?}"
        );
        windows.push(other);
        let t = Instant::now();
        assert!(wait_until(LONG, || ledger
            .count_runs(|r| r.job == "held" && r.at > t)
            >= 1));
    }
    stop_nodes(vec![node]);
    print_errors(&ledger);
    exactly_once(&ledger, "held", true);
    exactly_once(&ledger, "other", true);
    // `other` runs every 200 ms: in 1.5 s it runs several times, unless its release waited
    // for the lock on `held`'s row.
    assert!(
        windows.iter().all(|n| *n >= 2),
        "`other` stalled while only `held`'s row was locked (runs per lock window: {windows:?})"
    );
}

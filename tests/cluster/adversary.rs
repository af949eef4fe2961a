//! Adversarial tests of the cluster rule (`wheelpool::cluster`, feature `postgres`): each test
//! builds, against a real PostgreSQL server, a scenario in which one promise of the rule in
//! `src/cluster/mod.rs` could break, and checks the promise. Database states are crafted with
//! psql where a race would otherwise decide; every wait is bounded.
//!
//! Each test was written against a defect found in review, and each test's doc describes that
//! defect as it was (present tense, with the lines then at fault); the fix landed with the test,
//! which now guards the promise.

use crate::pg_common::{wait_until, PgServer, LONG};
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use wheelpool::cluster::{
    ClusterError, ClusterJob, ClusterRun, ClusterTask, PgLockStore, SkipReason,
};
use wheelpool::{ScheduleError, ScheduledThreadPool};

type Errors = Arc<Mutex<Vec<ClusterError>>>;
/// Run numbers as the body saw them, with the node label.
type Runs = Arc<Mutex<Vec<(u64, String)>>>;

fn psql_bin() -> String {
    let bin = std::env::var("WHEELPOOL_PG_BIN").unwrap_or("/usr/lib/postgresql/15/bin".into());
    format!("{bin}/psql")
}

/// Runs `sql` in an admin session; its trimmed output.
fn psql(server: &PgServer, sql: &str) -> String {
    server.psql(sql).trim().to_owned()
}

/// Starts psql in the background on `sql` (one `-c` string: one transaction if it says so),
/// as a session named `app`.
fn psql_background(server: &PgServer, app: &str, sql: &str) -> Child {
    Command::new(psql_bin())
        .args([
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            &format!("{} application_name={app}", server.url()),
            "-c",
            sql,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn psql")
}

fn finish(child: Child) {
    let out = child.wait_with_output().expect("wait for psql");
    assert!(
        out.status.success(),
        "background psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// True once the session named `app` runs a statement (e.g. sits in `pg_sleep`).
fn session_active(server: &PgServer, app: &str) -> bool {
    psql(
        server,
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}' \
             AND state = 'active' AND query LIKE '%pg_sleep%'"
        ),
    ) == "1"
}

/// What a real claim of run `run` (an SQL expression over the row's old values) writes besides
/// the claim id, last run and lease: it is not confirmed yet, it claims `run`, and it gave up
/// the runs from the old `last_run + 1` up to it.
fn unconfirmed(run: &str) -> String {
    format!(", released = false, claim_run = {run}, claim_from = last_run + 1")
}

fn store(server: &PgServer) -> Arc<PgLockStore> {
    Arc::new(PgLockStore::connect(&server.url()).expect("connect"))
}

fn skipped(errors: &Errors) -> Vec<(u64, SkipReason)> {
    errors
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            ClusterError::RunSkipped { run, reason, .. } => Some((*run, *reason)),
            _ => None,
        })
        .collect()
}

/// The job the lost-claim tests schedule: lease 500 ms, misfire grace 60 s, on node `label`,
/// errors to `errors`.
fn lost_claim_job(
    job: &str,
    label: &'static str,
    errors: &Errors,
    store: Arc<PgLockStore>,
) -> ClusterJob {
    let e = errors.clone();
    ClusterJob::builder(job, store)
        .node(label)
        .at_most_for(Duration::from_millis(500))
        .misfire_grace(Duration::from_secs(60))
        .on_error(move |err| e.lock().unwrap().push(err))
        .build()
        .unwrap()
}

/// A body that records (run number, node) in `runs`.
fn recorder(runs: &Runs) -> impl FnMut(&ClusterRun<'_>) + Send + 'static {
    let runs = runs.clone();
    move |run| {
        runs.lock()
            .unwrap()
            .push((run.number(), run.node().to_owned()))
    }
}

/// Node `a` of a lost-claim test, once it has run once and its only worker is held (its chain
/// cannot wake, so it cannot claim) and its lease has ended.
struct HeldNode {
    pool: ScheduledThreadPool,
    task: ClusterTask,
    errors: Errors,
    /// The run it ran.
    first: u64,
    /// Sending (or dropping) frees its worker.
    release: std::sync::mpsc::Sender<()>,
}

fn held_after_first_run(server: &PgServer, job: &str, period: Duration, runs: &Runs) -> HeldNode {
    let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    let errors: Errors = Arc::default();
    let task = lost_claim_job(job, "a", &errors, store(server))
        .schedule_at_fixed_rate(&pool.handle(), recorder(runs), period)
        .unwrap();
    assert!(
        wait_until(LONG, || !runs.lock().unwrap().is_empty()),
        "A never ran"
    );
    let first = runs.lock().unwrap()[0].0;
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    pool.execute(move || {
        started_tx.send(()).unwrap();
        let _ = held.recv_timeout(LONG);
    })
    .unwrap();
    started.recv_timeout(LONG).expect("blocker started");
    // Any claim of A in flight is answered meanwhile (its next wake-up waits for the worker).
    std::thread::sleep(Duration::from_millis(300));
    let lease_over =
        format!("SELECT locked_until <= now() FROM wheelpool_jobs WHERE name = '{job}'");
    assert!(wait_until(LONG, || psql(server, &lease_over) == "t"));
    assert_eq!(runs.lock().unwrap().len(), 1, "A ran once");
    HeldNode {
        pool,
        task,
        errors,
        first,
        release,
    }
}

/// The run due now by the store's clock for `job`.
fn due_run(server: &PgServer, job: &str) -> i64 {
    psql(
        server,
        &format!(
            "SELECT floor((extract(epoch FROM now()) * 1000000000 - offset_ns) / period_ns) \
             FROM wheelpool_jobs WHERE name = '{job}'"
        ),
    )
    .parse()
    .unwrap()
}

fn since_epoch() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// A pool with a bound on pending tasks (`Builder::max_pending`, a documented feature) that
/// is full for a moment, then has room again. The store stays reachable all along, so every
/// later planned run must be run or reported: the chain must outlive a transient refusal.
/// It does not: the refused wake-up (or the refused run) is dropped, and its `Drop` ends the
/// chain for good, as if the pool had shut down.
#[test]
fn a_pool_full_for_a_moment_does_not_stop_the_job() {
    let server = PgServer::start();
    let pool = ScheduledThreadPool::builder()
        .threads(2)
        .max_pending(16)
        .build()
        .unwrap();
    let errors: Errors = Arc::default();
    let e = errors.clone();
    let runs = Arc::new(Mutex::new(0u64));
    let r = runs.clone();
    let job = ClusterJob::builder("saturation", store(&server))
        .node("a")
        .at_most_for(Duration::from_secs(5))
        .on_error(move |err| e.lock().unwrap().push(err))
        .build()
        .unwrap();
    let period = Duration::from_millis(50);
    let task = job
        .schedule_at_fixed_rate(&pool.handle(), move |_| *r.lock().unwrap() += 1, period)
        .unwrap();
    assert!(
        wait_until(LONG, || *runs.lock().unwrap() >= 3),
        "the job never ran"
    );

    // Fill the pool for 2 s: every place that frees up is taken at once, so the chain's next
    // wake-up (or run) is refused with `Saturated`.
    let mut fillers = Vec::new();
    let hour = Duration::from_secs(3600);
    let end = Instant::now() + Duration::from_secs(2);
    let mut refused = 0u64;
    while Instant::now() < end {
        match pool.schedule(|| {}, hour) {
            Ok(f) => fillers.push(f),
            Err(ScheduleError::Saturated { .. }) => {
                refused += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(err) => panic!("unexpected {err:?}"),
        }
    }
    assert!(refused > 0, "the pool was never full");
    for f in &fillers {
        f.cancel();
    }
    drop(fillers);
    assert!(pool.schedule(|| {}, Duration::ZERO).is_ok(), "room again");

    // Room again, store reachable: runs must go on.
    let before = *runs.lock().unwrap();
    let resumed = wait_until(Duration::from_secs(10), || {
        *runs.lock().unwrap() >= before + 5
    });
    let state = (task.is_done(), task.join_timeout(Duration::ZERO));
    task.cancel();
    pool.shutdown();
    assert!(pool.await_termination(LONG));
    assert!(
        resumed,
        "the job stopped after a transient Saturated (runs {before} -> {}; ended: {state:?}; \
         reported: {:?})",
        *runs.lock().unwrap(),
        errors.lock().unwrap()
    );
}

/// Two nodes start a new job at the same time, the second with other settings and
/// `take_over(true)`. REGISTER's `INSERT ... ON CONFLICT DO NOTHING` waits for the first
/// node's insert, then does nothing, and its `SELECT ... WHERE NOT EXISTS (SELECT 1 FROM ins)`
/// reads the statement's old snapshot: no row. `StoreCore::register` then takes its own grid
/// for the stored one (`unwrap_or(grid)`), skips the takeover and returns Ok; every claim of
/// the node is refused as a mismatch, forever. (Without `take_over`, `schedule_at_fixed_rate`
/// returns Ok instead of the documented ConfigMismatch error.)
#[test]
fn a_take_over_racing_the_first_insert_takes_over() {
    let server = PgServer::start();
    let s = store(&server);
    // The table exists once a store has connected.
    assert_eq!(psql(&server, "SELECT count(*) FROM wheelpool_jobs"), "0");
    // The first node's REGISTER, held open for 2 s before it commits (old settings: 1 s).
    let holder = psql_background(
        &server,
        "adv-first-insert",
        "BEGIN; \
         INSERT INTO wheelpool_jobs (name, period_ns, offset_ns, last_run) \
         VALUES ('race', 1000000000, 0, floor(extract(epoch FROM now()))::bigint - 1); \
         SELECT pg_sleep(2); COMMIT;",
    );
    assert!(wait_until(LONG, || session_active(
        &server,
        "adv-first-insert"
    )));

    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let errors: Errors = Arc::default();
    let e = errors.clone();
    let runs = Arc::new(Mutex::new(0u64));
    let r = runs.clone();
    let period = Duration::from_millis(200);
    let job = ClusterJob::builder("race", s.clone())
        .node("new-settings")
        .take_over(true)
        .at_most_for(Duration::from_secs(5))
        .on_error(move |err| e.lock().unwrap().push(err))
        .build()
        .unwrap();
    let scheduled =
        job.schedule_at_fixed_rate(&pool.handle(), move |_| *r.lock().unwrap() += 1, period);
    finish(holder);
    let task = scheduled.expect("take_over: no mismatch error");

    let taken_over = wait_until(Duration::from_secs(10), || {
        *runs.lock().unwrap() >= 3
            && psql(
                &server,
                "SELECT period_ns FROM wheelpool_jobs WHERE name = 'race'",
            ) == "200000000"
    });
    let stored = psql(
        &server,
        "SELECT period_ns FROM wheelpool_jobs WHERE name = 'race'",
    );
    task.cancel();
    pool.shutdown();
    assert!(pool.await_termination(LONG));
    assert!(
        taken_over,
        "take_over(true) never moved the row (period_ns {stored}, runs {}, reported {:?})",
        *runs.lock().unwrap(),
        errors.lock().unwrap()
    );
}

/// A claim whose answer was lost is handed back with the row's *current* `last_run`
/// (`batch::answer`: `Redeliver { run: new_last }`), but `last_run` may have moved since
/// without the claim changing: a `paused` outcome of another node (sql::CLAIM moves
/// `last_run` to `due` and keeps `claim_id` / `locked_by`). The lost claim of run `k` is then
/// run under the number of a run the other node has just reported skipped (Paused): one
/// number both reported and run, and `k` itself neither.
///
/// The state after "A wins run k, its answer is lost, its lease runs out" is crafted with one
/// psql UPDATE while A's only worker is held (so A cannot claim); the pause is set in the
/// same UPDATE, node B is real.
#[test]
fn a_redelivered_claim_runs_under_its_own_number() {
    let server = PgServer::start();
    let period = Duration::from_secs(1);
    let runs: Runs = Arc::default();
    let HeldNode {
        pool: pool_a,
        task: task_a,
        errors: errors_a,
        first,
        release: release_a,
    } = held_after_first_run(&server, "lost", period, &runs);
    let lost = first + 1;
    let due = || due_run(&server, "lost");
    let mk = |label: &'static str, errors: &Errors, s: Arc<PgLockStore>| {
        lost_claim_job("lost", label, errors, s)
    };
    let body = recorder;
    assert!(wait_until(LONG, || due() > lost as i64));
    // A's claim of run `lost`, committed but never answered, its lease already over; and an
    // administrator's pause.
    assert_eq!(
        psql(
            &server,
            &format!(
                "UPDATE wheelpool_jobs SET claim_id = claim_id + 1, last_run = {lost}, \
                 locked_at = now(), locked_until = now(), lease_trigger = false, paused = true{} \
                 WHERE name = 'lost' AND last_run = {first} RETURNING last_run",
                unconfirmed(&lost.to_string())
            )
        )
        .lines()
        .next(),
        Some(lost.to_string().as_str())
    );
    // Node B claims: outcome `paused`, it reports the runs after `lost` as Paused.
    let pool_b = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let errors_b: Errors = Arc::default();
    let task_b = mk("b", &errors_b, store(&server))
        .schedule_at_fixed_rate(&pool_b.handle(), body(&runs), period)
        .unwrap();
    assert!(
        wait_until(LONG, || !skipped(&errors_b).is_empty()),
        "B reported nothing: {:?}",
        errors_b.lock().unwrap()
    );
    // A's worker is free again: its next claim finds its lost claim.
    release_a.send(()).unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || runs.lock().unwrap().len() >= 2),
        "the lost claim was never handed back (runs {:?}, A reported {:?})",
        runs.lock().unwrap(),
        errors_a.lock().unwrap()
    );
    std::thread::sleep(Duration::from_millis(300));
    task_a.cancel();
    task_b.cancel();
    for p in [&pool_a, &pool_b] {
        p.shutdown();
        assert!(p.await_termination(LONG));
    }
    let ran: Vec<(u64, String)> = runs.lock().unwrap().clone();
    let reported: Vec<(u64, SkipReason)> = [skipped(&errors_a), skipped(&errors_b)].concat();
    let ran_numbers: BTreeSet<u64> = ran.iter().map(|r| r.0).collect();
    let both: Vec<u64> = reported
        .iter()
        .map(|r| r.0)
        .filter(|n| ran_numbers.contains(n))
        .collect();
    assert!(
        both.is_empty() && ran_numbers.contains(&lost),
        "lost claim of run {lost}: ran {ran:?}, reported skipped {reported:?}; \
         both run and reported: {both:?}"
    );
}

/// Legal settings (period up to 100 years, offset under the period) whose run 0 is still in
/// the future: the run due now is run -1 (planned before the epoch), claimed at once; then
/// run 0 comes. `ClusterRun::number()` is a `u64` and maps -1 to 0
/// (`u64::try_from(..).unwrap_or(0)`, run.rs), and `planned_at` clamps to the epoch: the body
/// sees run 0 twice.
#[test]
fn run_numbers_are_never_negative() {
    let server = PgServer::start();
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let period = Duration::from_secs(100 * 365 * 86_400);
    // Run 0 in 3 s (the offset is under the period until 2069).
    let offset = Duration::from_secs(since_epoch().as_secs() + 3);
    let seen = Arc::new(Mutex::new(Vec::<(u64, SystemTime)>::new()));
    let s2 = seen.clone();
    let errors: Errors = Arc::default();
    let e = errors.clone();
    let job = ClusterJob::builder("century", store(&server))
        .node("a")
        .offset(offset)
        .at_most_for(Duration::from_secs(10))
        .on_error(move |err| e.lock().unwrap().push(err))
        .build()
        .unwrap();
    let task = job
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |run| s2.lock().unwrap().push((run.number(), run.planned_at())),
            period,
        )
        .unwrap();
    // Whatever runs by 6 s from now (run 0 is planned 3 s from now).
    std::thread::sleep(Duration::from_secs(6));
    let _ = wait_until(Duration::from_secs(10), || {
        seen.lock()
            .unwrap()
            .iter()
            .any(|(_, at)| *at > UNIX_EPOCH + offset - Duration::from_secs(1))
    });
    task.cancel();
    pool.shutdown();
    assert!(pool.await_termination(LONG));
    let seen = seen.lock().unwrap().clone();
    let numbers: BTreeSet<u64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(
        numbers.len(),
        seen.len(),
        "one run number seen twice: {seen:?} (reported {:?})",
        errors.lock().unwrap()
    );
}

/// Like the test above, without a pause: A's claim of run `k` committed but its answer was
/// lost, and A could not ask again before its lease ran out (a claim that timed out on the
/// client after the server committed it, with a lease shorter than the call timeout, as a
/// short lease with `keep_alive` invites). Node B, alive, then claims: it wins the next run
/// and `locked_by` changes, so A never gets the claim back. A is alive and reaches the
/// store, yet run `k` is neither run nor reported by anyone.
#[test]
fn a_lost_claim_overtaken_by_another_node_is_reported() {
    let server = PgServer::start();
    let period = Duration::from_secs(1);
    let runs: Runs = Arc::default();
    let HeldNode {
        pool: pool_a,
        task: task_a,
        errors: errors_a,
        first,
        release: release_a,
    } = held_after_first_run(&server, "overtaken", period, &runs);
    let lost = first + 1;
    let due = || due_run(&server, "overtaken");
    let mk = |label: &'static str, errors: &Errors, s: Arc<PgLockStore>| {
        lost_claim_job("overtaken", label, errors, s)
    };
    let body = recorder;
    assert!(wait_until(LONG, || due() >= lost as i64));
    // A's claim of run `lost`: committed, never answered, lease over.
    let crafted = psql(
        &server,
        &format!(
            "UPDATE wheelpool_jobs SET claim_id = claim_id + 1, last_run = {lost}, \
             locked_at = now(), locked_until = now(), lease_trigger = false{} \
             WHERE name = 'overtaken' AND last_run = {first} RETURNING last_run",
            unconfirmed(&lost.to_string())
        ),
    );
    assert_eq!(crafted.lines().next(), Some(lost.to_string().as_str()));
    let pool_b = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let errors_b: Errors = Arc::default();
    let task_b = mk("b", &errors_b, store(&server))
        .schedule_at_fixed_rate(&pool_b.handle(), body(&runs), period)
        .unwrap();
    assert!(
        wait_until(LONG, || runs.lock().unwrap().iter().any(|r| r.1 == "b")),
        "B never ran"
    );
    release_a.send(()).unwrap();
    // A and B both claim for a while: whoever should, runs or reports run `lost`.
    std::thread::sleep(Duration::from_secs(3));
    task_a.cancel();
    task_b.cancel();
    for p in [&pool_a, &pool_b] {
        p.shutdown();
        assert!(p.await_termination(LONG));
    }
    let ran: Vec<(u64, String)> = runs.lock().unwrap().clone();
    let reported: Vec<(u64, SkipReason)> = [skipped(&errors_a), skipped(&errors_b)].concat();
    assert!(
        ran.iter().any(|r| r.0 == lost) || reported.iter().any(|r| r.0 == lost),
        "run {lost} (claimed for A, answer lost) neither run nor reported: ran {ran:?}, \
         reported {reported:?}, A's errors {:?}",
        errors_a.lock().unwrap()
    );
}

/// A takeover gives up, silently, the runs planned between the end of the old grid's last
/// claimed period and the run due now (sql::TAKE_OVER: `floor((now - offset) / period) - 1`;
/// the grace, `$4`, is passed but multiplied by 0). Here the old grid's nodes have been gone
/// for two periods (runs within the grace, which any node on the old settings would still
/// claim, in order); the node that takes over neither runs that stretch of time nor reports
/// any run skipped.
#[test]
fn a_takeover_keeps_the_runs_still_claimable() {
    let server = PgServer::start();
    let s = store(&server);
    // The old grid: 1 s, offset 0; its last claimed run ended two to three periods ago.
    psql(
        &server,
        "INSERT INTO wheelpool_jobs (name, period_ns, offset_ns, last_run, claim_id) \
         VALUES ('moved', 1000000000, 0, floor(extract(epoch FROM now()))::bigint - 3, 7)",
    );
    let old_end_ns: i128 = psql(
        &server,
        "SELECT (last_run + 1) * period_ns + offset_ns FROM wheelpool_jobs WHERE name = 'moved'",
    )
    .parse()
    .unwrap();
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let errors: Errors = Arc::default();
    let e = errors.clone();
    let planned = Arc::new(Mutex::new(Vec::<SystemTime>::new()));
    let p2 = planned.clone();
    let new_period = Duration::from_secs(1);
    let task = ClusterJob::builder("moved", s)
        .node("new")
        .offset(Duration::from_millis(500))
        .take_over(true)
        .at_most_for(Duration::from_secs(5))
        .on_error(move |err| e.lock().unwrap().push(err))
        .build()
        .unwrap()
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |run| p2.lock().unwrap().push(run.planned_at()),
            new_period,
        )
        .unwrap();
    assert!(wait_until(LONG, || !planned.lock().unwrap().is_empty()));
    std::thread::sleep(Duration::from_millis(200));
    task.cancel();
    pool.shutdown();
    assert!(pool.await_termination(LONG));
    let first = planned.lock().unwrap()[0];
    let first_ns = first.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128;
    let reported = skipped(&errors);
    assert!(
        first_ns <= old_end_ns + new_period.as_nanos() as i128 || !reported.is_empty(),
        "old grid claimed until {old_end_ns} ns; the new grid's first run is planned at \
         {first_ns} ns (> one new period later), and nothing was reported: {:?}",
        errors.lock().unwrap()
    );
}

/// Records the name of the thread that drops it.
struct DropProbe(Arc<Mutex<Option<String>>>);

impl Drop for DropProbe {
    fn drop(&mut self) {
        let name = std::thread::current().name().unwrap_or("?").to_owned();
        *self.0.lock().unwrap() = Some(name);
    }
}

/// The store's thread must never run user code. The job body (a user closure, with whatever
/// it captured) is owned by the chain (`Shared`), and the last reference to a chain that was
/// cancelled during a run is the release's answer callback, which runs on the store's thread
/// (`Shared::handled` -> `released`): the body, and every `Drop` of what it captured, is
/// dropped there. A slow or blocking `Drop` then stalls every job of the store; a panicking
/// one kills a batch sender (whose `Queue::senders` count is never given back).
#[test]
fn a_cancelled_jobs_body_is_not_dropped_on_the_store_thread() {
    let server = PgServer::start();
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let dropped_on = Arc::new(Mutex::new(None::<String>));
    let probe = DropProbe(dropped_on.clone());
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let (go_tx, go) = std::sync::mpsc::channel::<()>();
    let go = Mutex::new(go);
    let task = ClusterJob::builder("dropped", store(&server))
        .node("a")
        .at_most_for(Duration::from_secs(5))
        .on_error(|_| {})
        .build()
        .unwrap()
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |_| {
                let _keep = &probe;
                let _ = entered_tx.lock().unwrap().send(());
                let _ = go.lock().unwrap().recv_timeout(LONG);
            },
            Duration::from_millis(100),
        )
        .unwrap();
    entered.recv_timeout(LONG).expect("the body ran");
    // Cancelled and forgotten during the run: the chain lives on in the run and its release.
    task.cancel();
    drop(task);
    go_tx.send(()).unwrap();
    assert!(
        wait_until(LONG, || dropped_on.lock().unwrap().is_some()),
        "body never dropped"
    );
    pool.shutdown();
    assert!(pool.await_termination(LONG));
    let on = dropped_on.lock().unwrap().clone().unwrap();
    assert_ne!(
        on, "wheelpool-pg",
        "the body (user code) was dropped on the store's thread"
    );
}

/// A claim that skips runs (too old: `won` with `k > last_run + 1`) reports them from its
/// answer (`answered`: `skipped(last_run + 1 .. k - 1, Misfired)`). If that answer is lost,
/// the redelivery hands back run `k` but the row no longer says which runs the claim gave up
/// (`a.last_run` is now `k`): runs `last_run + 1 .. k - 1` are neither run nor reported,
/// though the node is alive and gets its claim back. (The same holds for a lost `paused`
/// answer: the runs it gave up are never reported.)
///
/// A's claim (grace 1 s, after its worker was held for four periods) is crafted with psql as
/// sql::CLAIM computes it; A's worker is then freed and A gets it back.
#[test]
fn a_lost_answer_keeps_the_reports_of_the_runs_it_skipped() {
    let server = PgServer::start();
    let period = Duration::from_secs(1);
    let runs: Runs = Arc::default();
    let errors: Errors = Arc::default();
    let e = errors.clone();
    let pool = ScheduledThreadPool::builder().threads(1).build().unwrap();
    let r = runs.clone();
    let task = ClusterJob::builder("skips", store(&server))
        .node("a")
        .at_most_for(Duration::from_secs(5))
        .misfire_grace(Duration::from_secs(1))
        .on_error(move |err| e.lock().unwrap().push(err))
        .build()
        .unwrap()
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |run| {
                r.lock()
                    .unwrap()
                    .push((run.number(), run.node().to_owned()))
            },
            period,
        )
        .unwrap();
    assert!(
        wait_until(LONG, || !runs.lock().unwrap().is_empty()),
        "A never ran"
    );
    let first = runs.lock().unwrap()[0].0;
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    pool.execute(move || {
        started_tx.send(()).unwrap();
        let _ = held.recv_timeout(LONG);
    })
    .unwrap();
    started.recv_timeout(LONG).expect("blocker started");
    std::thread::sleep(Duration::from_millis(300));
    assert!(wait_until(LONG, || psql(
        &server,
        "SELECT locked_until <= now() FROM wheelpool_jobs WHERE name = 'skips'"
    ) == "t"));
    assert_eq!(runs.lock().unwrap().len(), 1, "A ran once");
    let due = || -> i64 {
        psql(
            &server,
            "SELECT floor((extract(epoch FROM now()) * 1000000000 - offset_ns) / period_ns) \
             FROM wheelpool_jobs WHERE name = 'skips'",
        )
        .parse()
        .unwrap()
    };
    assert!(wait_until(LONG, || due() >= first as i64 + 4));
    // A's claim, as sql::CLAIM makes it (k = the oldest claimable run), committed; its answer
    // lost. Its lease is still held: nobody else could claim meanwhile.
    let claimed = "greatest(last_run + 1, floor((extract(epoch FROM now()) * 1000000000 \
                   - 1000000000 - offset_ns) / period_ns)::bigint)";
    let k: u64 = psql(
        &server,
        &format!(
            "UPDATE wheelpool_jobs SET claim_id = claim_id + 1, \
                 last_run = {claimed}, \
                 locked_at = now(), locked_until = now() + interval '5 s', lease_trigger = false{} \
             WHERE name = 'skips' AND last_run = {first} RETURNING last_run",
            unconfirmed(claimed),
        ),
    )
    .lines()
    .next()
    .unwrap()
    .parse()
    .unwrap();
    assert!(
        k >= first + 2,
        "the claim skips runs {}..{}",
        first + 1,
        k - 1
    );
    release.send(()).unwrap();
    assert!(
        wait_until(LONG, || runs.lock().unwrap().iter().any(|r| r.0 == k)),
        "the lost claim of run {k} was not handed back: {:?}",
        runs.lock().unwrap()
    );
    std::thread::sleep(Duration::from_millis(300));
    task.cancel();
    pool.shutdown();
    assert!(pool.await_termination(LONG));
    let ran: BTreeSet<u64> = runs.lock().unwrap().iter().map(|r| r.0).collect();
    let reported: BTreeSet<u64> = skipped(&errors).iter().map(|r| r.0).collect();
    let lost: Vec<u64> = (first + 1..k)
        .filter(|n| !ran.contains(n) && !reported.contains(n))
        .collect();
    assert!(
        lost.is_empty(),
        "runs {lost:?} neither run nor reported (ran {ran:?}, reported {reported:?})"
    );
}

/// Panics if dropped on the store's thread.
struct DropBomb;

impl Drop for DropBomb {
    fn drop(&mut self) {
        if std::thread::current().name() == Some("wheelpool-pg") {
            panic!("user Drop panicking on the store's thread");
        }
    }
}

/// Follow-up of the test above: the panic of a user `Drop` on the store's thread unwinds
/// through the release batch's sender task. The task dies without `Queue::take` ever
/// returning `None`, so `Queue::senders` is never given back (calls.rs `enqueue`); with one
/// connection no release sender ever starts again, and every other job of the store waits
/// forever for the answer to its release: its chain stops silently (no error, no wake-up,
/// not done).
#[test]
fn a_panic_on_the_store_thread_stops_no_other_job() {
    let server = PgServer::start();
    let s = Arc::new(
        PgLockStore::builder(server.url())
            .connections(1)
            .connect()
            .unwrap(),
    );
    let pool = ScheduledThreadPool::builder().threads(3).build().unwrap();
    let errors: Errors = Arc::default();
    let e = errors.clone();
    let victim_runs = Arc::new(Mutex::new(0u64));
    let v = victim_runs.clone();
    let victim = ClusterJob::builder("victim", s.clone())
        .node("a")
        .at_most_for(Duration::from_secs(5))
        .on_error(move |err| e.lock().unwrap().push(err))
        .build()
        .unwrap()
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |_| *v.lock().unwrap() += 1,
            Duration::from_millis(50),
        )
        .unwrap();
    assert!(
        wait_until(LONG, || *victim_runs.lock().unwrap() >= 3),
        "the victim never ran"
    );

    let bomb = DropBomb;
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let (go_tx, go) = std::sync::mpsc::channel::<()>();
    let go = Mutex::new(go);
    let task = ClusterJob::builder("bomb", s.clone())
        .node("a")
        .at_most_for(Duration::from_secs(5))
        .on_error(|_| {})
        .build()
        .unwrap()
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |_| {
                let _keep = &bomb;
                let _ = entered_tx.lock().unwrap().send(());
                let _ = go.lock().unwrap().recv_timeout(LONG);
            },
            Duration::from_millis(100),
        )
        .unwrap();
    entered.recv_timeout(LONG).expect("the bomb ran");
    task.cancel();
    drop(task);
    go_tx.send(()).unwrap();

    // The victim must go on.
    std::thread::sleep(Duration::from_millis(500));
    let before = *victim_runs.lock().unwrap();
    let goes_on = wait_until(Duration::from_secs(10), || {
        *victim_runs.lock().unwrap() >= before + 5
    });
    let done = victim.is_done();
    victim.cancel();
    pool.shutdown();
    assert!(pool.await_termination(LONG));
    assert!(
        goes_on,
        "the other job stopped (runs {before} -> {}, done {done}, reported {:?})",
        *victim_runs.lock().unwrap(),
        errors.lock().unwrap()
    );
}

/// `numeric` division in PostgreSQL keeps about 16 significant digits: a quotient near 1.8e12
/// (nanoseconds since the epoch over a 1 ms period) gets 4 decimals, rounded. sql::TAKE_OVER's
/// `ceil((old end - new offset) / new period)` then rounds `j + 1e-6` down to `j`: the new
/// grid's first run is planned 1 ns *before* the end of the old grid's last claimed period
/// (the rule: "no earlier than"). The same rounding lets sql::CLAIM's `floor` call a run due
/// up to ~50 ns before its planned time. (Exact: integer `div`/`mod` on `numeric`, or
/// `div(a - b + ..., p)` with explicit floor/ceil on integers.)
#[test]
fn a_takeover_plans_the_new_grid_after_the_end_of_the_old_claim() {
    let server = PgServer::start();
    let s = store(&server);
    // Early in a 2 s period, so its end is ahead and the "due now" bound does not decide.
    assert!(wait_until(LONG, || since_epoch().subsec_nanos()
        < 500_000_000
        && since_epoch().as_secs() % 2 == 0));
    psql(
        &server,
        "INSERT INTO wheelpool_jobs (name, period_ns, offset_ns, last_run, claim_id) \
         VALUES ('exact', 2000000000, 0, \
                 floor(extract(epoch FROM now()) * 1000000000 / 2000000000)::bigint, 1)",
    );
    let old_end: i128 = psql(
        &server,
        "SELECT (last_run + 1) * period_ns + offset_ns FROM wheelpool_jobs WHERE name = 'exact'",
    )
    .parse()
    .unwrap();
    let pool = ScheduledThreadPool::builder().threads(2).build().unwrap();
    let planned = Arc::new(Mutex::new(Vec::<SystemTime>::new()));
    let p2 = planned.clone();
    let task = ClusterJob::builder("exact", s)
        .node("new")
        .take_over(true)
        .offset(Duration::from_nanos(999_999))
        .at_most_for(Duration::from_secs(1))
        .on_error(|_| {})
        .build()
        .unwrap()
        .schedule_at_fixed_rate(
            &pool.handle(),
            move |run| p2.lock().unwrap().push(run.planned_at()),
            Duration::from_millis(1),
        )
        .unwrap();
    let (period, offset, last_run): (i128, i128, i128) = {
        let row = psql(
            &server,
            "SELECT period_ns, offset_ns, last_run FROM wheelpool_jobs WHERE name = 'exact'",
        );
        let f: Vec<i128> = row.split('|').map(|x| x.parse().unwrap()).collect();
        (f[0], f[1], f[2])
    };
    assert!(wait_until(LONG, || !planned.lock().unwrap().is_empty()));
    task.cancel();
    pool.shutdown();
    assert!(pool.await_termination(LONG));
    let first_new = offset + (last_run + 1) * period;
    let first_ran = planned.lock().unwrap()[0]
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128;
    assert!(
        period == 1_000_000 && first_new >= old_end && first_ran >= old_end,
        "old grid claimed until {old_end} ns; the new grid (period {period}) starts at \
         {first_new} ns ({} ns early); first run planned at {first_ran}",
        old_end - first_new
    );
}

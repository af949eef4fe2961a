//! The peer comparison: the workloads W1..W8 of `benches/WORKLOADS.md` on wheelpool, the crate
//! `scheduled-thread-pool` and tokio, each (implementation, workload) pair in a fresh process;
//! W1 and W2 also on a bare tokio-util `DelayQueue` (a timer entry and nothing else).
//!
//! ```text
//! cargo bench --bench compare                               # everything, 3 runs, medians
//! cargo bench --bench compare -- --quick                    # small sizes: a smoke test
//! cargo bench --bench compare -- --workloads W1,W3 --impls wheelpool,tokio --runs 5
//! cargo bench --bench compare -- --workloads W7,W8 --threads 1,8  # W7 at T = 1 and 8 only
//! ```
//!
//! The parent re-runs this executable as
//! `--child IMPL WORKLOAD N [--tick-us US] [--secs S] [--threads T]` for
//! every pair and run, so that each child's memory and CPU figures are its own. A child prints one
//! JSON line; the parent prints every line, then the medians, then markdown tables with the
//! wheelpool / peer ratios. See BENCHMARKS.md for what each figure means.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::thread;
use std::time::{Duration, Instant};

#[path = "compare/probe.rs"]
mod probe;
#[path = "compare/report.rs"]
mod report;
#[path = "compare/timer.rs"]
mod timer;
#[path = "compare/workloads.rs"]
mod workloads;

use report::Record;
use timer::{StpTimer, TokioTimer};
use workloads::{Figures, Params, Workload};

// wheelpool, through the public API of DESIGN.md only (compare/wheelpool_impl.rs). Before that API
// existed this block was `const WHEELPOOL_READY: bool = false;` and a `run_wheelpool` returning
// `None`, and the tables said "pending": the way to run the peers alone if the library breaks.
#[path = "compare/wheelpool_impl.rs"]
mod wheelpool_impl;

/// Whether the wheelpool implementation is compiled in.
const WHEELPOOL_READY: bool = true;

/// Runs a workload on wheelpool, or `None` while it is not wired in.
fn run_wheelpool(params: &Params) -> Option<Figures> {
    Some(workloads::run::<wheelpool_impl::WheelTimer>(params))
}

/// Every implementation, in column order.
const IMPLS: [&str; 4] = [
    report::SUBJECT,
    report::PEERS[0],
    report::PEERS[1],
    report::PEERS[2],
];

/// The peer that is a bare timer entry: it runs W1 and W2 only (see [`runs`]).
const DELAY_QUEUE: &str = report::PEERS[2];

/// Whether `impl_name` can run `workload`: a `DelayQueue` runs no task, so only the workloads
/// that put timers in and take them out (W1, W2).
fn runs(impl_name: &str, workload: Workload) -> bool {
    impl_name != DELAY_QUEUE || matches!(workload, Workload::W1 | Workload::W2)
}

/// The extra wheelpool tick of W3, in microseconds (0: no extra run).
const DEFAULT_EXTRA_TICK_US: u64 = 100;

/// The figure a child adds for the parent: its own CPU time in ms, threads that exited included.
const SELF_CPU: &str = "self_cpu_ms";

/// A run during which other processes took more than this share of the machine (percent) is
/// done again (see `--max-noise`).
const DEFAULT_MAX_NOISE_PCT: f64 = 10.0;

/// W7's producer thread counts T of WORKLOADS.md (`--threads` picks others).
const DEFAULT_W7_THREADS: [u64; 4] = [1, 2, 4, 8];

/// How often a noisy run is done again before the quietest attempt is kept.
const DEFAULT_RETRIES: usize = 2;

/// How long a retry waits at most for the machine to calm down.
const QUIET_WAIT_LIMIT: Duration = Duration::from_secs(15);

/// A child that runs longer than this is killed and its run counted as missing.
const CHILD_TIME_LIMIT: Duration = Duration::from_secs(180);

const USAGE: &str = "\
usage: cargo bench --bench compare -- [options]
  --runs R             runs of every pair; the tables show medians (default 3)
  --workloads W1,W3    workloads to run (default all: W1..W8)
  --impls a,b          implementations: wheelpool, scheduled-thread-pool (or stp), tokio,
                       delayqueue (W1 and W2 only) (default all)
  --quick              small sizes and short runs: a smoke test in well under a minute
  --n N                override every selected workload's size
  --threads 1,2,4,8    W7's producer thread counts (default 1,2,4,8)
  --tick-us US         extra W3 run of wheelpool with this tick (default 100; 0: none)
  --max-noise PCT      run a pair again if other processes took more than PCT% of the
                       machine's CPU meanwhile (default 10)
  --retries K          at most K such repeats; then the quietest attempt is kept (default 2)
  --child IMPL W N     (internal) run one pair in this process and print its JSON line
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        // `cargo test --benches` runs bench targets without arguments: nothing to measure there.
        eprintln!("compare: run it with `cargo bench --bench compare -- [options]` (--help)");
        return ExitCode::SUCCESS;
    }
    let result = match args.iter().position(|a| a == "--child") {
        Some(at) => child(&args[at + 1..]),
        None => parent(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("compare: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one pair in this process and prints its JSON line.
fn child(args: &[String]) -> Result<(), String> {
    let [impl_name, workload, n, ..] = args else {
        return Err("--child needs IMPL WORKLOAD N".into());
    };
    let workload = Workload::parse(workload).ok_or(format!("unknown workload {workload}"))?;
    let n: u64 = n.parse().map_err(|_| format!("bad N {n}"))?;
    let tick_us: Option<u64> = option_value(args, "--tick-us")?;
    let secs: f64 = option_value(args, "--secs")?.unwrap_or(default_secs(workload, false));
    let threads: Option<u64> = option_value(args, "--threads")?;
    let params = Params {
        workload,
        n,
        threads: threads.unwrap_or(1),
        tick: tick_us.map(Duration::from_micros),
        secs,
    };
    let impl_name = canonical_impl(impl_name)?;
    let figures = match impl_name {
        "scheduled-thread-pool" => workloads::run::<StpTimer>(&params),
        "tokio" => workloads::run::<TokioTimer>(&params),
        DELAY_QUEUE => workloads::run_delay_queue(&params)
            .ok_or(format!("{DELAY_QUEUE} runs W1 and W2 only"))?,
        _ => run_wheelpool(&params).ok_or("wheelpool is not wired in yet (see compare.rs)")?,
    };
    let mut record = Record {
        impl_name: impl_name.to_string(),
        workload: workload.name().to_string(),
        n,
        tick_us,
        threads,
        figures: figures
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    };
    // For the parent's noise figure; it takes this one off the line.
    record
        .figures
        .push((SELF_CPU.to_string(), probe::stat_cpu_ms() as f64));
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", record.to_json()).map_err(|e| e.to_string())?;
    stdout.flush().map_err(|e| e.to_string())?;
    // Leave without tearing the pools down: pending timers (W1: up to an hour) are not our
    // business, and teardown is not measured.
    std::process::exit(0)
}

/// One child to start.
#[derive(Clone, Debug)]
struct Job {
    impl_name: &'static str,
    workload: Workload,
    n: u64,
    tick_us: Option<u64>,
    /// W7's producer threads.
    threads: Option<u64>,
    secs: f64,
}

/// Plans the pairs, runs each `--runs` times in fresh children, prints lines, medians, tables.
fn parent(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return Ok(());
    }
    warn_unknown(args);
    let runs: usize = option_value(args, "--runs")?.unwrap_or(3).max(1);
    let quick = args.iter().any(|a| a == "--quick");
    let n_override: Option<u64> = option_value(args, "--n")?;
    let max_noise: f64 = option_value(args, "--max-noise")?.unwrap_or(DEFAULT_MAX_NOISE_PCT);
    let retries: usize = option_value(args, "--retries")?.unwrap_or(DEFAULT_RETRIES);
    let extra_tick: u64 = option_value(args, "--tick-us")?.unwrap_or(DEFAULT_EXTRA_TICK_US);
    let w7_threads = w7_thread_counts(args)?;
    let workloads = match option_value::<String>(args, "--workloads")? {
        Some(list) => list
            .split(',')
            .map(|w| Workload::parse(w.trim()).ok_or(format!("unknown workload {w}")))
            .collect::<Result<Vec<_>, _>>()?,
        None => Workload::ALL.to_vec(),
    };
    let impls = match option_value::<String>(args, "--impls")? {
        Some(list) => list
            .split(',')
            .map(|i| canonical_impl(i.trim()))
            .collect::<Result<Vec<_>, _>>()?,
        None => IMPLS.to_vec(),
    };
    if impls.contains(&report::SUBJECT) && !WHEELPOOL_READY {
        eprintln!("compare: wheelpool is not wired in yet: its cells say \"pending\"");
    }

    let jobs = plan(
        &workloads,
        &impls,
        quick,
        n_override,
        extra_tick,
        &w7_threads,
    );
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut records = Vec::new();
    let started = Instant::now();
    for run in 1..=runs {
        for job in &jobs {
            eprint!(
                "[run {run}/{runs}] {} {} n={}{}{} ... ",
                job.impl_name,
                job.workload.name(),
                job.n,
                job.threads.map(|t| format!(" T={t}")).unwrap_or_default(),
                job.tick_us
                    .map(|t| format!(" tick={t}us"))
                    .unwrap_or_default()
            );
            match run_quietly(&exe, job, max_noise, retries) {
                Ok(record) => {
                    println!("{}", record.to_json());
                    records.push(record);
                }
                Err(message) => eprintln!("failed: {message}"),
            }
        }
    }
    eprintln!(
        "compare: all runs took {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let medians = report::medians(&records);
    for median in &medians {
        let json = median.to_json();
        println!(r#"{{"stat":"median","runs":{runs},{}"#, &json[1..]);
    }
    println!();
    println!("{}", report::main_table(&medians, WHEELPOOL_READY));
    println!("{}\n", report::noise_note(&records, max_noise));
    if let Some(table) = report::tick_table(&medians, WHEELPOOL_READY) {
        println!("{table}");
    }
    Ok(())
}

/// The pairs to run: every selected workload at its sizes (W7 also at each producer count),
/// for every selected implementation that can run, plus wheelpool's W3 with the extra tick.
fn plan(
    workloads: &[Workload],
    impls: &[&'static str],
    quick: bool,
    n_override: Option<u64>,
    extra_tick_us: u64,
    w7_threads: &[u64],
) -> Vec<Job> {
    let mut jobs = Vec::new();
    for &workload in workloads {
        let sizes = match n_override {
            Some(n) => vec![n],
            None => default_sizes(workload, quick),
        };
        let thread_counts: Vec<Option<u64>> = match workload {
            Workload::W7 => w7_threads.iter().map(|&t| Some(t)).collect(),
            _ => vec![None],
        };
        let shapes = sizes
            .iter()
            .flat_map(|&n| thread_counts.iter().map(move |&t| (n, t)));
        for (n, threads) in shapes {
            for &impl_name in impls {
                if (impl_name == report::SUBJECT && !WHEELPOOL_READY) || !runs(impl_name, workload)
                {
                    continue;
                }
                let job = Job {
                    impl_name,
                    workload,
                    n,
                    tick_us: None,
                    threads,
                    secs: default_secs(workload, quick),
                };
                let extra =
                    (impl_name == report::SUBJECT && workload == Workload::W3 && extra_tick_us > 0)
                        .then(|| Job {
                            tick_us: Some(extra_tick_us),
                            ..job.clone()
                        });
                jobs.push(job);
                jobs.extend(extra);
            }
        }
    }
    jobs
}

/// W7's producer counts from `--threads 1,2,4,8`, or [`DEFAULT_W7_THREADS`].
fn w7_thread_counts(args: &[String]) -> Result<Vec<u64>, String> {
    match option_value::<String>(args, "--threads")? {
        Some(list) => list
            .split(',')
            .map(|t| match t.trim().parse::<u64>() {
                Ok(t) if t > 0 => Ok(t),
                _ => Err(format!("bad thread count {t} in --threads")),
            })
            .collect(),
        None => Ok(DEFAULT_W7_THREADS.to_vec()),
    }
}

/// Sizes of WORKLOADS.md, or small ones for `--quick`.
fn default_sizes(workload: Workload, quick: bool) -> Vec<u64> {
    match (workload, quick) {
        (Workload::W1, false) => vec![10_000, 100_000, 1_000_000],
        (Workload::W1, true) => vec![10_000],
        (Workload::W2, false) => vec![1_000_000],
        (Workload::W2, true) => vec![100_000],
        (Workload::W3, false) => vec![100_000],
        (Workload::W3, true) => vec![10_000],
        (Workload::W4, false) => vec![1_000_000],
        (Workload::W4, true) => vec![100_000],
        (Workload::W5, false) => vec![10_000],
        (Workload::W5, true) => vec![1_000],
        (Workload::W6, _) => vec![1],
        (Workload::W7, false) => vec![2_000_000],
        (Workload::W7, true) => vec![200_000],
        (Workload::W8, false) => vec![1_000_000],
        (Workload::W8, true) => vec![100_000],
    }
}

/// How long W5 runs, W6 sleeps and W8's tasks wait (3 s, 5 s and 2 s; 1 s each for `--quick`).
fn default_secs(workload: Workload, quick: bool) -> f64 {
    match (workload, quick) {
        (_, true) => 1.0,
        (Workload::W6, false) => 5.0,
        (Workload::W8, false) => 2.0,
        _ => 3.0,
    }
}

/// Runs `job` until other processes took at most `max_noise` percent of the machine meanwhile,
/// at most `1 + retries` times; keeps the quietest attempt.
fn run_quietly(
    exe: &std::path::Path,
    job: &Job,
    max_noise: f64,
    retries: usize,
) -> Result<Record, String> {
    let mut best: Option<Record> = None;
    for attempt in 0..=retries {
        if attempt > 0 {
            wait_for_quiet(max_noise);
        }
        let start = Instant::now();
        let record = run_child(exe, job)?;
        let noise = record.figure(report::NOISE).unwrap_or(0.0);
        eprint!(
            "{:.1} s, others {noise:.0}% of the CPU",
            start.elapsed().as_secs_f64()
        );
        let best_noise = best.as_ref().and_then(|b| b.figure(report::NOISE));
        if best_noise.is_none_or(|b| noise < b) {
            best = Some(record);
        }
        if noise <= max_noise {
            break;
        }
        eprint!(
            "{}",
            if attempt < retries {
                "; again ... "
            } else {
                "; kept the quietest"
            }
        );
    }
    eprintln!();
    best.ok_or_else(|| "no attempt".to_string())
}

/// Waits (at most [`QUIET_WAIT_LIMIT`]) until other processes take at most `max_noise` percent
/// of the machine's CPU over half a second: a retry right into the same noise would be wasted.
fn wait_for_quiet(max_noise: f64) {
    let window = Duration::from_millis(500);
    let start = Instant::now();
    while start.elapsed() < QUIET_WAIT_LIMIT {
        let before = probe::host_busy_ms();
        thread::sleep(window);
        let busy = probe::host_busy_ms().saturating_sub(before) as f64;
        if busy / (window.as_secs_f64() * 1e3 * cores() as f64) * 100.0 <= max_noise {
            return;
        }
    }
}

/// Starts one child, waits for its JSON line (killing it past [`CHILD_TIME_LIMIT`]), and adds
/// the share of the machine's CPU that other processes used meanwhile ([`report::NOISE`]).
fn run_child(exe: &std::path::Path, job: &Job) -> Result<Record, String> {
    let busy_before = probe::host_busy_ms();
    let start = Instant::now();
    let mut command = Command::new(exe);
    command
        .arg("--child")
        .arg(job.impl_name)
        .arg(job.workload.name())
        .arg(job.n.to_string())
        .arg("--secs")
        .arg(job.secs.to_string());
    if let Some(us) = job.tick_us {
        command.arg("--tick-us").arg(us.to_string());
    }
    if let Some(threads) = job.threads {
        command.arg("--threads").arg(threads.to_string());
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the child: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| Record::parse(&line))
    });
    let deadline = Instant::now() + CHILD_TIME_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() >= deadline {
            // Our own child, by its handle.
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("killed after {CHILD_TIME_LIMIT:?}"));
        }
        thread::sleep(Duration::from_millis(20));
    };
    let record = reader.join().map_err(|_| "the reader panicked")?;
    let busy_ms = probe::host_busy_ms().saturating_sub(busy_before) as f64;
    let capacity_ms = start.elapsed().as_secs_f64() * 1e3 * cores() as f64;
    match (status.success(), record) {
        (true, Some(mut record)) => {
            let own_ms = record.take_figure(SELF_CPU).unwrap_or(0.0);
            let others = (busy_ms - own_ms).max(0.0) / capacity_ms * 100.0;
            record.figures.push((report::NOISE.to_string(), others));
            Ok(record)
        }
        (_, _) => Err(format!("the child ended with {status} and no JSON line")),
    }
}

/// CPUs this machine has.
fn cores() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// The implementation's full name, from a name or an alias.
fn canonical_impl(name: &str) -> Result<&'static str, String> {
    match name {
        "wheelpool" | "wp" => Ok(report::SUBJECT),
        "scheduled-thread-pool" | "stp" => Ok(report::PEERS[0]),
        "tokio" => Ok(report::PEERS[1]),
        "delayqueue" | "tokio-util" => Ok(report::PEERS[2]),
        _ => Err(format!(
            "unknown implementation {name} (wheelpool, scheduled-thread-pool, tokio, delayqueue)"
        )),
    }
}

/// Says which arguments this harness ignores (`cargo bench` passes filters and its own `--bench`
/// to every bench target).
fn warn_unknown(args: &[String]) {
    const FLAGS: [&str; 3] = ["--bench", "--quick", "--help"];
    const WITH_VALUE: [&str; 8] = [
        "--runs",
        "--workloads",
        "--impls",
        "--n",
        "--threads",
        "--tick-us",
        "--max-noise",
        "--retries",
    ];
    let mut skip_value = false;
    for arg in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        skip_value = WITH_VALUE.contains(&arg.as_str());
        if !skip_value && !FLAGS.contains(&arg.as_str()) {
            eprintln!("compare: ignoring argument {arg:?} (--help lists the options)");
        }
    }
}

/// The value after `--flag`, parsed; `None` if the flag is absent.
fn option_value<T: std::str::FromStr>(args: &[String], flag: &str) -> Result<Option<T>, String> {
    match args.iter().position(|a| a == flag) {
        None => Ok(None),
        Some(at) => {
            let value = args.get(at + 1).ok_or(format!("{flag} needs a value"))?;
            value
                .parse()
                .map(Some)
                .map_err(|_| format!("bad value {value} for {flag}"))
        }
    }
}

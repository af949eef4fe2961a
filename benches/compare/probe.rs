//! Process figures read from `/proc` (Linux only, no extra dependency): resident memory, CPU time
//! and context switches of the whole process.
//!
//! Ground rules:
//! - Memory is `VmRSS` of `/proc/self/status`: what the process really holds in RAM, allocator
//!   slack included. Freed memory that the allocator keeps for reuse still counts.
//! - CPU time is the sum over the live threads of the first field of `/proc/self/task/*/schedstat`
//!   (nanoseconds on a CPU, user + system). Threads that exited are not counted, so a workload that
//!   measures CPU keeps all its threads alive, or has each one that exits add its own
//!   ([`thread_cpu_ns`]) first. Where `schedstat` is missing or reads zero we fall back to
//!   `utime + stime` of `/proc/self/stat` (clock ticks, 10 ms resolution).
//! - Machine noise: [`host_busy_ms`] (every process, from `/proc/stat`) over a child's run minus
//!   the child's own [`stat_cpu_ms`] is the CPU that other processes took meanwhile.
//! - Wake-ups are `voluntary_ctxt_switches + nonvoluntary_ctxt_switches` summed over
//!   `/proc/self/task/*/status`: every time any thread of the process got off a CPU.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc/self/stat` (`getconf CLK_TCK`; 100 on every Linux we run on).
const CLOCK_TICKS_PER_S: u64 = 100;

/// How long [`settled_rss_bytes`] waits at least before it trusts a reading: lets timer threads and
/// workers drain what the workload just handed them.
const SETTLE_MIN: Duration = Duration::from_millis(200);

/// How long [`settled_rss_bytes`] keeps polling for a stable reading before it gives up.
const SETTLE_MAX: Duration = Duration::from_secs(3);

/// Resident set size of this process in bytes (`VmRSS`).
pub(crate) fn rss_bytes() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status_field(&status, "VmRSS:") * 1024
}

/// RSS once it stopped moving: sleeps [`SETTLE_MIN`], then polls every 100 ms until two readings
/// agree within 1% (or [`SETTLE_MAX`] has passed).
pub(crate) fn settled_rss_bytes() -> u64 {
    let start = Instant::now();
    thread::sleep(SETTLE_MIN);
    let mut last = rss_bytes();
    while start.elapsed() < SETTLE_MAX {
        thread::sleep(Duration::from_millis(100));
        let now = rss_bytes();
        if now.abs_diff(last) <= last / 100 {
            return now;
        }
        last = now;
    }
    last
}

/// CPU time (user + system) of the whole process so far, in nanoseconds.
pub(crate) fn cpu_ns() -> u64 {
    let from_schedstat: u64 = tasks()
        .filter_map(|task| fs::read_to_string(format!("{task}/schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    if from_schedstat > 0 {
        return from_schedstat;
    }
    stat_cpu_ms() * 1_000_000
}

/// CPU time (user + system) of the calling thread so far, in nanoseconds (0 where `schedstat` is
/// missing). A thread that exits before a reading of [`cpu_ns`] reports its own with this.
pub(crate) fn thread_cpu_ns() -> u64 {
    fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// CPU time (user + system) of the whole process so far, threads that exited included, in
/// milliseconds at clock-tick resolution (`utime + stime` of `/proc/self/stat`).
pub(crate) fn stat_cpu_ms() -> u64 {
    let stat = fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, so 11 and 12 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    ticks * 1000 / CLOCK_TICKS_PER_S
}

/// CPU time the whole machine spent busy so far (every process; user, nice, system, irq, softirq
/// and steal of the `cpu` line of `/proc/stat`), in milliseconds at clock-tick resolution.
pub(crate) fn host_busy_ms() -> u64 {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: everything but idle and iowait.
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| ticks.get(i))
        .sum();
    busy * 1000 / CLOCK_TICKS_PER_S
}

/// Context switches (voluntary + involuntary) of every live thread of the process.
pub(crate) fn context_switches() -> u64 {
    tasks()
        .filter_map(|task| fs::read_to_string(format!("{task}/status")).ok())
        .map(|s| {
            status_field(&s, "voluntary_ctxt_switches:")
                + status_field(&s, "nonvoluntary_ctxt_switches:")
        })
        .sum()
}

/// The `/proc/self/task/TID` directories of the live threads.
fn tasks() -> impl Iterator<Item = String> {
    fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path().to_string_lossy().into_owned())
}

/// The first number after `key` at the start of a line of a `status` file, 0 if absent.
fn status_field(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU time and context switches at one moment, to take differences over a stretch of time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Snapshot {
    cpu_ns: u64,
    switches: u64,
}

impl Snapshot {
    /// Reads both figures now.
    pub(crate) fn take() -> Self {
        Snapshot {
            cpu_ns: cpu_ns(),
            switches: context_switches(),
        }
    }

    /// CPU milliseconds spent since `earlier`.
    pub(crate) fn cpu_ms_since(&self, earlier: &Snapshot) -> f64 {
        self.cpu_ns.saturating_sub(earlier.cpu_ns) as f64 / 1e6
    }

    /// Context switches since `earlier`.
    pub(crate) fn switches_since(&self, earlier: &Snapshot) -> u64 {
        self.switches.saturating_sub(earlier.switches)
    }
}

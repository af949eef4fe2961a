//! Two calls into glibc on Linux: the monotonic clock and the current CPU.
//!
//! Both go through glibc's vDSO calls. rustix has the same two, safe, and as fast (17.1 against
//! 17.2 ns a clock read, 10 M reads), but its own vDSO lookup reads memory that valgrind does not
//! map, so any program of ours run under valgrind crashed at its first pool (rustix issue 1559);
//! glibc's is what valgrind expects. nix wraps the clock safely but took 24 ns a read, as much as
//! `Instant::now()` and the subtraction this read replaces (`timer/clock.rs`, "Reading the system
//! clock"). So: one `unsafe` call each, into a value on our stack.
//!
//! Under loom both say "not available", and the callers fall back (`Instant`, the kernel's
//! placement). Under Miri the clock is read (Miri implements `clock_gettime`), the CPU is not.

#![allow(unsafe_code)]

/// The monotonic clock (`CLOCK_MONOTONIC`, the one `std`'s `Instant` reads on Linux) in
/// nanoseconds; `None` if it cannot be read.
#[cfg(all(target_os = "linux", not(wheelpool_loom)))]
#[inline]
pub(crate) fn monotonic_nanos() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the pointer, which points to a
    // live, writable `timespec` on our stack; it keeps no pointer after returning.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return None;
    }
    // The monotonic clock counts from boot: never negative, and u64 nanoseconds last 584 years.
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    Some(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

#[cfg(not(all(target_os = "linux", not(wheelpool_loom))))]
#[inline]
pub(crate) fn monotonic_nanos() -> Option<u64> {
    None
}

/// The CPU the calling thread runs on (it may have moved by the time the caller looks);
/// `None` if it cannot be told.
#[cfg(all(target_os = "linux", not(wheelpool_loom), not(miri)))]
pub(crate) fn current_cpu() -> Option<usize> {
    // SAFETY: `sched_getcpu` takes nothing and touches no memory of ours.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok() // -1: not available
}

#[cfg(not(all(target_os = "linux", not(wheelpool_loom), not(miri))))]
pub(crate) fn current_cpu() -> Option<usize> {
    None
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Runs under Miri in CI too (`.ci/run`): the call and its conversion.
    #[test]
    fn the_monotonic_clock_reads_and_moves_on_with_instant() {
        let Some(first) = monotonic_nanos() else {
            return; // not Linux
        };
        let start = Instant::now();
        while start.elapsed() < Duration::from_micros(50) {
            std::hint::spin_loop();
        }
        let second = monotonic_nanos().expect("read once, read again");
        assert!(second >= first + 50_000, "{first} then {second}");
    }

    #[test]
    fn the_current_cpu_is_one_the_thread_may_run_on() {
        if let Some(cpu) = current_cpu() {
            assert!(cpu < 1 << 16, "cpu {cpu}");
        }
    }
}

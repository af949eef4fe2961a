//! Tests that measure lateness and CPU in real time: the fairness of due timers behind local
//! work, real-time periodic tasks, and the watcher's wake-ups. One at a time ([`serial`]), so
//! that no other test of this binary shares the CPUs with a measurement; their bounds are wide
//! enough for a machine busy with other work.

#[path = "../common/mod.rs"]
mod common;
#[path = "../manual_common/mod.rs"]
mod manual_common;

mod adversary_overrun;
mod adversary_reset_storm;
mod adversary_shutdown_staging;
mod adversary_staging;
mod adversary_tiny_periods;
mod adversary_watch_cpu;
mod adversary_watch_live;
mod fairness;
mod lateness;
mod periodic_realtime;
mod precision;

/// Held by every test of this binary for its whole run (a failed test's poison is ignored).
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Busy for `d` of real time (simulated CPU work inside a task).
pub(crate) fn work_for(d: std::time::Duration) {
    let end = std::time::Instant::now() + d;
    while std::time::Instant::now() < end {
        std::hint::spin_loop();
    }
}

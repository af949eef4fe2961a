//! The `tracing` feature's spans and events, in one place, so that every call site is one line
//! and nothing of them is compiled in when the feature is off: each function here then has an
//! empty, inlined body and the `tracing` crate is not even a dependency.
//!
//! A leaf: it imports nothing of the crate (callers pass ids, names and kinds as plain values),
//! so the task module below the pool can call it too.
//!
//! Everything is under the target `wheelpool`; the names and fields are listed in the crate
//! docs ("Tracing"), where users look for them to write filters:
//!
//! - span `run` (DEBUG), one per task run, entered while the closure runs: `task.id`,
//!   `task.name` (if any), `task.kind`, `lateness_ns` (start minus planned time, for runs with a
//!   planned time);
//! - event `task panicked` (ERROR): `task.id`, `task.name`, `task.kind`, `panic` (its message);
//! - event `missed ticks` (WARN), inside the run's span: `policy`, `missed` (planned runs already
//!   past), `period_ns`;
//! - event `shutdown` (INFO): `execute_delayed`, `continue_periodic` (the policy);
//! - event `shutdown_now` (INFO): `handed_back` (how many tasks it returns);
//! - event `task handed back` (DEBUG), one per task as it leaves the pool for the caller:
//!   `task.id`, `task.name`, `task.kind`, `state` (`Cancelled` or `Shutdown`).

/// A run's entered span: dropped when the run is over. Zero-sized when the feature is off.
#[cfg(feature = "tracing")]
pub(crate) type RunSpan = tracing::span::EnteredSpan;
/// A run's entered span: nothing, the feature is off.
#[cfg(not(feature = "tracing"))]
pub(crate) struct RunSpan;

/// Enters the span of one run of a task (see the module docs).
#[inline(always)]
pub(crate) fn run(id: u64, name: Option<&str>, kind: &'static str, late: Option<u64>) -> RunSpan {
    #[cfg(feature = "tracing")]
    {
        tracing::debug_span!(
            target: "wheelpool",
            "run",
            task.id = id,
            task.name = name,
            task.kind = kind,
            lateness_ns = late
        )
        .entered()
    }
    #[cfg(not(feature = "tracing"))]
    {
        let _ = (id, name, kind, late);
        RunSpan
    }
}

/// A task's run panicked with `message`.
#[inline(always)]
pub(crate) fn panicked(id: u64, name: Option<&str>, kind: &'static str, message: &str) {
    #[cfg(feature = "tracing")]
    tracing::error!(
        target: "wheelpool",
        panic = message,
        task.id = id,
        task.name = name,
        task.kind = kind,
        "task panicked"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (id, name, kind, message);
}

/// A fixed-rate task's run ended with `missed` planned runs already past; `policy` says what
/// it does about them (`Burst`, `Skip`, `Delay`).
#[inline(always)]
pub(crate) fn missed_ticks(policy: &'static str, missed: u64, period_ns: u64) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "wheelpool", policy, missed, period_ns, "missed ticks");
    #[cfg(not(feature = "tracing"))]
    let _ = (policy, missed, period_ns);
}

/// A graceful shutdown started, with this policy.
#[inline(always)]
pub(crate) fn shutdown(execute_delayed: bool, continue_periodic: bool) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "wheelpool", execute_delayed, continue_periodic, "shutdown");
    #[cfg(not(feature = "tracing"))]
    let _ = (execute_delayed, continue_periodic);
}

/// `shutdown_now` returns `handed_back` tasks.
#[inline(always)]
pub(crate) fn shutdown_now(handed_back: usize) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "wheelpool", handed_back, "shutdown_now");
    #[cfg(not(feature = "tracing"))]
    let _ = handed_back;
}

/// One task left the pool for the caller without running (`shutdown_now`,
/// `take_handed_back`); `state`: how its future ended.
#[inline(always)]
pub(crate) fn handed_back(id: u64, name: Option<&str>, kind: &'static str, state: &'static str) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "wheelpool",
        state,
        task.id = id,
        task.name = name,
        task.kind = kind,
        "task handed back"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (id, name, kind, state);
}

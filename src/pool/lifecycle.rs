//! The pool's lifecycle as one atomic, read and changed only through typed calls: its byte
//! never leaves this file.
//!
//! `Running -> Shutdown` (`shutdown`), `Running | Shutdown -> ShutdownNow` (`shutdown_now`);
//! never back. Every access is SeqCst: the lifecycle takes part in one total order with the
//! `outstanding` counts (see the ground rules in `core.rs`) and is read after the fences of the
//! `taking` protocol (`queues.rs`).

use crate::sync::{AtomicU8, Ordering};
pub(crate) use crate::timer::Lifecycle;

const RUNNING: u8 = 0;
const SHUTDOWN: u8 = 1;
const SHUTDOWN_NOW: u8 = 2;

/// The pool's [`Lifecycle`], shared by its threads. The same shape as a task's
/// `task::state::State` on purpose (a byte behind typed calls, tokio's `Snapshot` habit); the two
/// state machines share nothing else, so they share no code.
#[derive(Debug)]
pub(crate) struct AtomicLifecycle(AtomicU8);

impl AtomicLifecycle {
    /// A running pool.
    pub(crate) fn new() -> Self {
        AtomicLifecycle(AtomicU8::new(RUNNING))
    }

    /// Where the pool is now.
    #[inline]
    pub(crate) fn load(&self) -> Lifecycle {
        // SeqCst: one total order with the stores below and the `outstanding` updates (ground
        // rules in `core.rs`).
        match self.0.load(Ordering::SeqCst) {
            RUNNING => Lifecycle::Running,
            SHUTDOWN => Lifecycle::Shutdown,
            _ => Lifecycle::ShutdownNow,
        }
    }

    /// True while the pool takes tasks.
    #[inline]
    pub(crate) fn is_running(&self) -> bool {
        self.load() == Lifecycle::Running
    }

    /// `shutdown`: a running pool stops taking tasks; a pool already shut down stays as it is.
    pub(crate) fn shutdown(&self) {
        // SeqCst: pairs with the loads above (ground rules in `core.rs`).
        let _ = self
            .0
            .compare_exchange(RUNNING, SHUTDOWN, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// `shutdown_now`: nothing new starts.
    pub(crate) fn shutdown_now(&self) {
        // SeqCst: pairs with the loads above (ground rules in `core.rs`).
        self.0.store(SHUTDOWN_NOW, Ordering::SeqCst);
    }
}

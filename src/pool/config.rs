//! `Config`: everything a pool core is made from, in one value. The [`Builder`](super::Builder)
//! checks the user's settings and builds one; the loom harness builds its own; both hand it to
//! `Core::new`, the one place a core is wired.

use crate::panic::PanicHandler;
use crate::task::MissedTicks;
use crate::timer::{Clock, Keep};
use std::time::Duration;

/// A pool core's settings, already checked.
pub(crate) struct Config {
    /// Worker threads (at least one).
    pub(crate) workers: usize,
    /// The wheel's tick (greater than zero).
    pub(crate) tick: Duration,
    pub(crate) clock: Clock,
    /// The bound on tasks waiting to run, if any.
    pub(crate) max_pending: Option<usize>,
    pub(crate) panic_handler: Option<PanicHandler>,
    /// The pool's default for fixed-rate tasks that do not choose their own.
    pub(crate) missed_ticks: MissedTicks,
    /// Which waiting tasks a graceful shutdown keeps.
    pub(crate) keep_at_shutdown: Keep,
}

impl Config {
    /// `workers` workers on `clock` with `tick`; no bound, no panic handler, `MissedTicks::Burst`,
    /// Java's graceful shutdown (waiting one-shots run, periodic tasks stop).
    pub(crate) fn new(workers: usize, clock: Clock, tick: Duration) -> Self {
        Config {
            workers,
            tick,
            clock,
            max_pending: None,
            panic_handler: None,
            missed_ticks: MissedTicks::Burst,
            keep_at_shutdown: Keep::DEFAULT,
        }
    }
}

//! `Options`: what a task may be given besides its closure and its times, one value for every
//! kind of task (set through `TaskBuilder` in `pool/`).

use super::{MissedTicks, Name};

/// Per-task options. Those that do not apply to a kind of task are ignored by it (documented on
/// each setter of `TaskBuilder`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// Shown in `PendingTask`, `Debug`, and to the panic handler.
    pub(crate) name: Option<Name>,
    /// Fixed rate only: overrides the pool's policy.
    pub(crate) missed: Option<MissedTicks>,
    /// Periodic only: a panicking run does not end the task.
    pub(crate) survive_panics: bool,
}

//! `CoreLink`: how a `Handle` (and a `TaskBuilder` borrowing it) reaches the pool's core. Below
//! both, so that the handle can make task builders and the builders schedule without the two
//! files importing each other.

use super::core::Core;
use crate::error::ScheduleError;
use crate::sync::{Arc, Weak};

/// The pool's own handle keeps the core alive; every other handle only refers to it.
#[derive(Debug)]
pub(super) enum CoreLink {
    Owner(Arc<Core>),
    Weak(Weak<Core>),
}

impl CoreLink {
    /// Runs `f` on the core; [`ScheduleError::Shutdown`] once the pool is gone.
    pub(super) fn with_core<R>(
        &self,
        f: impl FnOnce(&Arc<Core>) -> Result<R, ScheduleError>,
    ) -> Result<R, ScheduleError> {
        match self {
            CoreLink::Owner(core) => f(core),
            CoreLink::Weak(weak) => match weak.upgrade() {
                Some(core) => f(&core),
                None => Err(ScheduleError::Shutdown),
            },
        }
    }

    /// A link that does not keep the core alive.
    pub(super) fn downgrade(&self) -> CoreLink {
        match self {
            CoreLink::Owner(core) => CoreLink::Weak(Arc::downgrade(core)),
            CoreLink::Weak(weak) => CoreLink::Weak(weak.clone()),
        }
    }

    /// True while the core exists.
    pub(super) fn is_alive(&self) -> bool {
        match self {
            CoreLink::Owner(_) => true,
            CoreLink::Weak(weak) => weak.strong_count() > 0,
        }
    }
}

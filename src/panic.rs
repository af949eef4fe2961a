//! Panics, in one place for every layer: user code that panics (a task, a hook, a `Drop` of
//! what a closure captured) and internal bugs.
//!
//! # Ground rules
//!
//! - User code runs under `catch_unwind`. A panic that escapes it goes to the pool's panic
//!   handler through [`PanicReporter::report`], the one path for every payload: a task's, a
//!   stop hook's. A panicking handler is caught in turn, and its payload dropped.
//! - A user value that the pool drops (a closure, its captures, a result nobody reads, a
//!   payload) is dropped through [`drop_user`], so a panicking `Drop` cannot unwind into pool
//!   code half way through its bookkeeping.
//! - An internal invariant that breaks would leave shared state corrupt: [`broken_invariant`]
//!   aborts loudly rather than limping on (rayon's rule).
//!
//! This module imports nothing of the crate: every layer (task, timer, pool) may use it.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The user's panic handler.
pub(crate) type PanicHandler = Box<dyn Fn(Box<dyn Any + Send>) + Send + Sync>;

/// An internal invariant broke: state would be corrupt if we went on, so stop the process loudly.
#[cold]
#[inline(never)]
pub(crate) fn broken_invariant(what: &str) -> ! {
    eprintln!("wheelpool: internal invariant broken: {what}; aborting");
    std::process::abort()
}

/// Drops a user value (a closure, what it captured, or a result nobody will read) so that a
/// panicking `Drop` cannot unwind into pool code and leave its bookkeeping half done. The std
/// panic hook has already printed such a panic; there is nobody else to tell.
pub(crate) fn drop_user<T>(value: T) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(value)));
}

/// The text of a panic payload (`panic!("...")` gives `&str` or `String`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Where a pool's panic payloads go: the user's handler, if one was given.
pub(crate) struct PanicReporter {
    handler: Option<PanicHandler>,
}

impl PanicReporter {
    pub(crate) fn new(handler: Option<PanicHandler>) -> Self {
        PanicReporter { handler }
    }

    /// Hands `payload` to the handler, or drops it without one. Neither a panicking handler nor
    /// a panicking payload `Drop` unwinds out of here.
    pub(crate) fn report(&self, payload: Box<dyn Any + Send>) {
        match &self.handler {
            Some(handler) => {
                let outcome = catch_unwind(AssertUnwindSafe(|| handler(payload)));
                if let Err(inner) = outcome {
                    drop_user(inner);
                }
            }
            None => drop_user(payload),
        }
    }
}

impl std::fmt::Debug for PanicReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PanicReporter")
            .field("handler", &self.handler.is_some())
            .finish()
    }
}

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
//! - The payload of a caught panic is user data too (a waker, a handler or a `Drop` may panic
//!   with any value, whose own `Drop` may panic again): every `catch_unwind` hands its `Err`
//!   to [`drop_payload`] (or to [`PanicReporter::report`], which ends there), never to `let _`.
//!   `drop_payload` drops inside `catch_unwind` again, for at most [`PAYLOAD_DROP_TRIES`]
//!   nested payloads, and then leaks the last one with `mem::forget`: a bounded leak beats an
//!   unbounded loop or a dead worker.
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
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
        drop_payload(payload);
    }
}

/// Nested panic payloads [`drop_payload`] drops before it gives up and leaks the last one. A
/// payload whose `Drop` panics with a payload whose `Drop` panics again, and so on, is a bug in
/// user code; a few rounds cover every honest case, and the bound keeps a malicious one finite.
pub(crate) const PAYLOAD_DROP_TRIES: usize = 8;

/// Drops the payload of a caught panic without letting its `Drop` unwind: a payload whose
/// `Drop` panics is caught in turn, and so is that panic's payload, up to
/// [`PAYLOAD_DROP_TRIES`] times; then the last payload is leaked (`mem::forget`), by design.
pub(crate) fn drop_payload(payload: Box<dyn Any + Send>) {
    let mut payload = payload;
    for _ in 0..PAYLOAD_DROP_TRIES {
        match catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            Ok(()) => return,
            Err(next) => payload = next,
        }
    }
    std::mem::forget(payload);
}

/// Runs user code `f` under `catch_unwind`; a panic's payload is dropped with
/// [`drop_payload`]. `None` if `f` panicked.
pub(crate) fn call_user<R>(f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => Some(value),
        Err(payload) => {
            drop_payload(payload);
            None
        }
    }
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
                call_user(|| handler(payload));
            }
            None => drop_payload(payload),
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

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static DROPS: AtomicUsize = AtomicUsize::new(0);

    /// A payload whose `Drop` panics with a payload one level shallower, `depth` times.
    struct Nested(usize);

    impl Drop for Nested {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
            if self.0 > 0 {
                std::panic::panic_any(Nested(self.0 - 1));
            }
        }
    }

    fn quiet<R>(f: impl FnOnce() -> R) -> R {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = f();
        std::panic::set_hook(hook);
        r
    }

    #[test]
    fn nested_panicking_payloads_are_dropped_then_the_last_one_leaked() {
        quiet(|| {
            DROPS.store(0, Ordering::SeqCst);
            drop_payload(Box::new(Nested(3)));
            assert_eq!(DROPS.load(Ordering::SeqCst), 4, "all four dropped");
            DROPS.store(0, Ordering::SeqCst);
            drop_payload(Box::new(Nested(1_000)));
            assert_eq!(
                DROPS.load(Ordering::SeqCst),
                PAYLOAD_DROP_TRIES,
                "bounded, then leaked"
            );
            DROPS.store(0, Ordering::SeqCst);
            drop_user(Nested(2));
            assert_eq!(DROPS.load(Ordering::SeqCst), 3);
            assert_eq!(call_user(|| std::panic::panic_any(Nested(1))), None::<()>);
        });
    }
}
